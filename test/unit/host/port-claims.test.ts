// Host-wide port claims: owners under different data dirs that pick at once never share a port;
// a claim whose owner is gone is given back; a recorded port another owner holds is refused; an
// owner that releases its claims frees them at once.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import {
  CLAIM_GRACE_MS,
  claimPorts,
  hostStateDir,
  PortClaimConflict,
  releasePorts,
  useHostStateDir,
  type PortClaim,
} from '../../../src/host/port-claims.ts';

const hostState = mkdtempSync(join(tmpdir(), 'kctl-host-'));
useHostStateDir(hostState);
after(() => rmSync(hostState, { recursive: true, force: true }));
/** A range of its own for each test (ports nothing on this host uses while it runs, most likely). */
let next = 24_000 + Math.floor(Math.random() * 200) * 20;
const range = (size: number): [number, number] => {
  const r: [number, number] = [next, next + size - 1];
  next += size;
  return r;
};
const always = async () => true;

test('five owners picking at once from one range get five disjoint pairs of ports', async () => {
  const r = range(10);
  const picked = await Promise.all(
    ['a', 'b', 'c', 'd', 'e'].map(
      async (n) => (await claimPorts({ owner: `/data/${n}`, label: n, count: 2, range: r, stillHeld: always })).ports,
    ),
  );
  const all = picked.flat();
  assert.equal(all.length, 10);
  // Which data dirs hold which ports is for root alone to read.
  assert.equal(statSync(join(hostStateDir(), 'port-claims.json')).mode & 0o777, 0o600);
  assert.equal(new Set(all).size, 10, JSON.stringify(picked));
  // The range is used up: a sixth gets fewer than it asked for, claims nothing, and learns why.
  assert.deepEqual(await claimPorts({ owner: '/data/f', label: 'f', count: 2, range: r, stillHeld: always }), {
    ports: [],
    use: { claimed: 10, inGrace: 0, listening: 0, excluded: 0 },
  });
});

test('a claim whose owner no longer records the port is given back once past the grace period', async () => {
  const r = range(2);
  const old = new Date(Date.now() - CLAIM_GRACE_MS - 1000).toISOString();
  const claims: PortClaim[] = [
    { port: r[0], owner: '/data/gone', label: 'gone', at: old },
    { port: r[1], owner: '/data/young', label: 'young', at: new Date().toISOString() },
  ];
  await writeFile(join(hostStateDir(), 'port-claims.json'), JSON.stringify(claims));
  const gone = async (c: PortClaim) => c.owner !== '/data/gone' && c.owner !== '/data/young';
  // Only the gone owner's port comes back: the young claim stands although its owner records
  // nothing yet (an owner writes its record after claiming). Two asked, one free: none claimed.
  assert.deepEqual(await claimPorts({ owner: '/data/new', label: 'new', count: 2, range: r, stillHeld: gone }), {
    ports: [r[0]],
    use: { claimed: 1, inGrace: 1, listening: 0, excluded: 0 },
  });
  assert.deepEqual(
    (await claimPorts({ owner: '/data/new', label: 'new', count: 1, range: r, stillHeld: gone })).ports,
    [r[0]],
  );
  assert.deepEqual(
    (await claimPorts({ owner: '/data/other', label: 'other', count: 1, range: r, stillHeld: gone })).ports,
    [],
  );
});

test('a recorded port another owner holds is refused naming that owner; its own recorded ports are claimed as they are', async () => {
  const r = range(3);
  const [p] = (
    await claimPorts({ owner: '/data/first', label: 'tenant "first"', count: 1, range: r, stillHeld: always })
  ).ports;
  await assert.rejects(
    claimPorts({ owner: '/data/second', label: 'tenant "second"', recorded: [p!], stillHeld: always }),
    (err: unknown) => err instanceof PortClaimConflict && err.port === p && err.holder.label === 'tenant "first"',
  );
  assert.deepEqual(
    (await claimPorts({ owner: '/data/first', label: 'tenant "first"', recorded: [p!], stillHeld: always })).ports,
    [p],
  );
  // ... and not picked for anyone else.
  const others = (await claimPorts({ owner: '/data/third', label: 'third', count: 2, range: r, stillHeld: always }))
    .ports;
  assert.ok(!others.includes(p!), JSON.stringify(others));
});

test('an owner that releases its claims frees them at once, within the grace period, and only its own', async () => {
  const r = range(4);
  const a = (await claimPorts({ owner: '/data/refused', label: 'refused', count: 2, range: r, stillHeld: always }))
    .ports;
  const b = (await claimPorts({ owner: '/data/kept', label: 'kept', count: 2, range: r, stillHeld: always })).ports;
  assert.deepEqual((await releasePorts('/data/refused')).sort(), [...a].sort());
  assert.deepEqual(await releasePorts('/data/refused'), []);
  // Even for an owner whose claims would otherwise stand (stillHeld says so), the two are free now.
  const next = (await claimPorts({ owner: '/data/next', label: 'next', count: 2, range: r, stillHeld: always })).ports;
  assert.deepEqual([...next].sort(), [...a].sort());
  assert.ok(!next.some((p) => b.includes(p)), JSON.stringify({ next, b }));
});

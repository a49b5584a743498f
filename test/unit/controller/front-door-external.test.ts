// A controller behind another program's door (spec.frontDoor.external, a hosted cluster's pod):
// its handoff ports listen on their fixed ports, a connection with the door's key reaches the
// listener behind with the client the header names, one without it is closed; the key file is
// checked in one line; no door of its own and no host registration.
import assert from 'node:assert/strict';
import { writeFile } from 'node:fs/promises';
import { connect, type Socket } from 'node:net';
import { join } from 'node:path';
import { test } from 'node:test';
import { UserError } from '../../../src/base/errors.ts';
import { frontDoorComponent, readDoorKey } from '../../../src/controller/components/front-door.ts';
import { parseConfig } from '../../../src/controller/config/config.ts';
import { controllerPaths } from '../../../src/controller/config/paths.ts';
import { proxyHeader } from '../../../src/frontdoor/proxy-header.ts';
import { pkiPaths } from '../../../src/pki/index.ts';
import { tempDir } from '../../helpers.ts';
import { freePorts } from '../../ports.ts';
import { waitFor } from '../../wait.ts';
import { quietLogger } from '../konnectivity/fixtures.ts';

test('the key file: 64 hex digits, else one line naming the field and what to write', async (t) => {
  const dir = await tempDir(t);
  const bad = join(dir, 'bad');
  await writeFile(bad, 'not-a-key\n');
  await assert.rejects(readDoorKey(bad), (err: Error) => {
    assert.ok(err instanceof UserError);
    assert.match(err.message, /^spec\.frontDoor\.external\.keyFile .*: expected 64 hex digits/);
    return true;
  });
  await assert.rejects(
    readDoorKey(join(dir, 'missing')),
    /spec\.frontDoor\.external\.keyFile .*missing: .*ENOENT.*; give the file the door's key/,
  );
  const good = join(dir, 'good');
  await writeFile(good, `${'ab'.repeat(32)}\n`);
  assert.deepEqual(await readDoorKey(good), Buffer.alloc(32, 0xab));
});

test("behind an external door the handoff ports listen on their fixed ports, pass on what carries the door's key with the client it names, and close the rest", async (t) => {
  const dir = await tempDir(t);
  const key = Buffer.alloc(32, 7);
  const keyFile = join(dir, 'door.key');
  await writeFile(keyFile, key.toString('hex'));
  const [konnectivity, join_, nodeApi] = await freePorts(3);
  const cfg = parseConfig(
    {
      spec: {
        api: { address: '127.0.0.1' },
        frontDoor: {
          enabled: true,
          baseDomain: 'clusters.test',
          address: '192.0.2.10',
          port: 30443,
          external: { keyFile, handoffPorts: { konnectivity, join: join_, nodeApi } },
        },
      },
    },
    'kctl.yaml',
  );
  const seen: string[] = [];
  const target = (endpoint: string) => ({
    acceptFromDoor: (socket: Socket, client: string) => {
      seen.push(`${endpoint} ${client}`);
      socket.end('hello');
    },
  });
  const component = frontDoorComponent(cfg, controllerPaths(join(dir, 'data'), join(dir, 'run')), {
    konnectivity: target('konnectivity'),
    join: target('join'),
    pki: pkiPaths(join(dir, 'pki')),
  })!;
  await component.init({ log: quietLogger(), statuses: () => [] });
  t.after(() => component.stop());
  await component.start();

  const send = (port: number, first: Buffer) =>
    new Promise<string>((resolve) => {
      const s = connect(port, '127.0.0.1', () => s.write(first));
      let data = '';
      s.on('data', (c: Buffer) => (data += c.toString()));
      s.on('close', () => resolve(data));
      s.on('error', () => undefined);
    });
  const from = { address: '198.51.100.7', port: 40000 };
  const to = { address: '127.0.0.1', port: konnectivity! };
  assert.equal(await send(konnectivity!, proxyHeader(from, to, key)), 'hello');
  assert.equal(await send(join_!, proxyHeader(from, to, key)), 'hello');
  assert.deepEqual(seen, ['konnectivity 198.51.100.7', 'join 198.51.100.7']);
  // Another key, and no header at all: closed, counted, never passed on.
  assert.equal(await send(konnectivity!, proxyHeader(from, to, Buffer.alloc(32, 8))), '');
  assert.equal(await send(join_!, Buffer.from('GET / HTTP/1.1\r\n\r\n')), '');
  assert.equal(seen.length, 2);
  const report = await waitFor('both refusals counted', 5_000, () => {
    const r = component.report();
    return r?.external?.handoffs.reduce((n, h) => n + h.refused, 0) === 2 ? r : undefined;
  });
  assert.equal(report.external?.address, '192.0.2.10:30443');
  assert.deepEqual(
    report.external?.handoffs.map((h) => `${h.endpoint} ${h.port}`),
    [`konnectivity ${konnectivity}`, `join ${join_}`, `nodeApi ${nodeApi}`],
  );
  assert.equal(report.door, undefined, 'no door of its own');
});

// The front door with real TLS on loopback: two "clusters" (TLS servers whose certificate names
// them), one port. A client naming a cluster reaches it and verifies its certificate end to end
// (the door holds no key); a name nobody has, no name, and what is not TLS are closed and counted;
// two doors on one port (SO_REUSEPORT) both route; silent connections are bounded.
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { connect as tcpConnect, type Socket } from 'node:net';
import { connect, createServer, type TLSSocket } from 'node:tls';
import { after, test } from 'node:test';
import { FrontDoor, type FrontDoorRoute, type RouteTable } from '../../../src/frontdoor/router.ts';
import { ensurePki, pkiPaths } from '../../../src/pki/index.ts';
import { tempDir } from '../../helpers.ts';
import { quietLogger } from '../konnectivity/fixtures.ts';
import { waitFor } from '../../wait.ts';

const NAMES = ['alpha.clusters.test', 'beta.clusters.test'];

async function clusterPki(): Promise<{ ca: string; cert: string; key: string }> {
  const dir = await tempDir({ after }, 'kctl-frontdoor-pki-');
  await ensurePki(
    {
      dir,
      apiAddress: '127.0.0.1',
      sans: NAMES,
      apiPort: 6443,
      serviceCIDR: '10.96.0.0/12',
      clusterDomain: 'cluster.local',
      hostname: 'ctrl-1',
      localAddresses: ['127.0.0.1'],
    },
    quietLogger(),
  );
  const p = pkiPaths(dir);
  const [ca, cert, key] = await Promise.all([p.caCert, p.serverCert, p.serverKey].map((f) => readFile(f, 'utf8')));
  return { ca: ca!, cert: cert!, key: key! };
}

/** A TLS server that answers every connection with `who` and the server name the client sent. */
async function cluster(pki: { cert: string; key: string }, who: string): Promise<number> {
  const server = createServer({ cert: pki.cert, key: pki.key }, (s) => {
    s.end(`${who} ${String((s as TLSSocket & { servername?: string }).servername)}`);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  after(() => server.close());
  return (server.address() as { port: number }).port;
}

function routes(table: Record<string, FrontDoorRoute>): RouteTable {
  return { route: async (name) => table[name] };
}

/** What the server said to a TLS client naming `servername` (verified against `ca`), or the error. */
function ask(port: number, servername: string | undefined, ca: string): Promise<string> {
  return new Promise((resolve) => {
    const s = connect({
      host: '127.0.0.1',
      port,
      servername,
      ca,
      ...(servername ? {} : { checkServerIdentity: () => undefined }),
    });
    let got = '';
    s.on('data', (c: Buffer) => (got += c.toString()));
    s.on('end', () => resolve(got));
    s.on('error', (err: NodeJS.ErrnoException) => resolve(`error: ${err.code ?? err.message}`));
  });
}

test('a client reaches the cluster it names through one port, TLS end to end; other names, no name and non-TLS are closed and counted', async () => {
  const pki = await clusterPki();
  const [a, b] = [await cluster(pki, 'A'), await cluster(pki, 'B')];
  const door = new FrontDoor(
    { port: 0, address: '127.0.0.1', refusalLogEveryMs: 0 },
    routes({
      [NAMES[0]!]: { cluster: 'alpha', endpoint: 'api', host: '127.0.0.1', port: a },
      [NAMES[1]!]: { cluster: 'beta', endpoint: 'api', host: '127.0.0.1', port: b },
    }),
    quietLogger(),
  );
  await door.listen();
  after(() => door.close());

  assert.equal(await ask(door.port, 'alpha.clusters.test', pki.ca), 'A alpha.clusters.test');
  // Routed without case; the cluster sees the name as the client sent it (the bytes are untouched).
  assert.equal(await ask(door.port, 'BETA.clusters.test', pki.ca), 'B BETA.clusters.test');
  assert.equal(await ask(door.port, 'alpha.clusters.test', pki.ca), 'A alpha.clusters.test');
  // A name nobody has is closed, never sent to a default.
  assert.match(await ask(door.port, 'gamma.clusters.test', pki.ca), /^error: (ECONNRESET|EPIPE)|^$/);
  assert.match(await ask(door.port, undefined, pki.ca), /^error: (ECONNRESET|EPIPE)|^$/);
  const plain = await new Promise<string>((resolve) => {
    const s = tcpConnect(door.port, '127.0.0.1', () => s.write('GET / HTTP/1.1\r\nHost: alpha.clusters.test\r\n\r\n'));
    let got = '';
    s.on('data', (c: Buffer) => (got += c.toString()));
    s.on('close', () => resolve(got));
    s.on('error', () => {});
  });
  assert.equal(plain, '', 'a plain HTTP request got an answer');

  await waitFor('the spliced connections closed', 5_000, () =>
    Object.values(door.stats().clusters).every((c) => c.open === 0),
  );
  assert.deepEqual(door.stats(), {
    port: door.port,
    clusters: { alpha: { open: 0, total: 2 }, beta: { open: 0, total: 1 } },
    refused: { total: 3, notTls: 1, noName: 1, names: { 'gamma.clusters.test': 1 } },
  });
});

test('two doors on one port (two kctl processes) both route every name', async () => {
  const pki = await clusterPki();
  const a = await cluster(pki, 'A');
  const table = routes({ [NAMES[0]!]: { cluster: 'alpha', endpoint: 'api', host: '127.0.0.1', port: a } });
  const first = new FrontDoor({ port: 0, address: '127.0.0.1' }, table, quietLogger());
  await first.listen();
  after(() => first.close());
  const second = new FrontDoor({ port: first.port, address: '127.0.0.1' }, table, quietLogger());
  await second.listen();
  after(() => second.close());
  for (let i = 0; i < 40; i++) assert.equal(await ask(first.port, NAMES[0], pki.ca), `A ${NAMES[0]}`);
  const served = [first, second].map((d) => d.stats().clusters.alpha?.total ?? 0);
  assert.equal(served[0]! + served[1]!, 40);
  assert.ok(
    served.every((n) => n > 0),
    `the kernel gave every connection to one door: ${served.join(', ')}`,
  );
  // One door stops: the other takes every connection.
  await first.close();
  assert.equal(await ask(second.port, NAMES[0], pki.ca), `A ${NAMES[0]}`);
});

test('silent connections: closed after the hello timeout, and at the cap the oldest gives way', async () => {
  const door = new FrontDoor(
    { port: 0, address: '127.0.0.1', helloTimeoutMs: 300, maxPending: 3 },
    routes({}),
    quietLogger(),
  );
  await door.listen();
  after(() => door.close());
  const open = (): Promise<{ s: Socket; closed: Promise<number> }> =>
    new Promise((resolve) => {
      const at = Date.now();
      const s = tcpConnect(door.port, '127.0.0.1', () =>
        resolve({ s, closed: new Promise((r) => s.on('close', () => r(Date.now() - at))) }),
      );
      s.on('error', () => {});
    });
  const one = await open();
  assert.ok((await one.closed) >= 250, 'closed before the hello timeout');
  const quiet = new FrontDoor({ port: 0, address: '127.0.0.1', maxPending: 3 }, routes({}), quietLogger());
  await quiet.listen();
  after(() => quiet.close());
  const socks: { s: Socket; closed: Promise<number> }[] = [];
  for (let i = 0; i < 3; i++) {
    socks.push(
      await new Promise((resolve) => {
        const s = tcpConnect(quiet.port, '127.0.0.1', () =>
          resolve({ s, closed: new Promise((r) => s.on('close', () => r(0))) }),
        );
        s.on('error', () => {});
      }),
    );
  }
  await new Promise((r) => setTimeout(r, 100));
  const fourth = tcpConnect(quiet.port, '127.0.0.1');
  fourth.on('error', () => {});
  after(() => fourth.destroy());
  await socks[0]!.closed; // the oldest went
  let stillOpen = 0;
  for (const x of socks.slice(1)) if (!x.s.destroyed && x.s.readyState === 'open') stillOpen++;
  assert.equal(stillOpen, 2);
  for (const x of socks) x.s.destroy();
});

// The kernel's TCP table as kctl reads it: addresses in one form whatever the family, and the
// state of the other end of a connection on this host.
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { connect, createServer, type Socket } from 'node:net';
import { test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { ipKey } from '../../../src/base/addresses.ts';
import { peerClosedByProgram, tcpTable, TcpState } from '../../../src/base/tcp-table.ts';

test('ipKey: an IPv4 address and its IPv4-mapped IPv6 form are one key; not an address is null', () => {
  assert.equal(ipKey('127.0.0.1'), '00000000000000000000ffff7f000001');
  assert.equal(ipKey('::ffff:127.0.0.1'), ipKey('127.0.0.1'));
  assert.equal(ipKey('::1'), '00000000000000000000000000000001');
  assert.equal(ipKey('fe80::1'), 'fe800000000000000000000000000001');
  assert.equal(ipKey('kubelet'), null);
});

test('tcpTable lists a listening socket with its port, IPv4 and IPv6', async (t) => {
  for (const host of ['127.0.0.1', '::1']) {
    const server = createServer();
    server.listen(0, host);
    await once(server, 'listening');
    t.after(() => server.close());
    const port = (server.address() as { port: number }).port;
    const entry = (await tcpTable()).find((e) => e.local.port === port && e.state === TcpState.LISTEN);
    assert.ok(entry, `no LISTEN entry for ${host}:${port}`);
    assert.equal(entry.local.ip, ipKey(host));
    assert.notEqual(entry.inode, '0');
  }
});

test("peerClosedByProgram: false while the other end's program holds it, true once it closed, undefined for no socket here", async (t) => {
  const accepted: Socket[] = [];
  const server = createServer((s) => accepted.push(s));
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  t.after(() => server.close());
  const port = (server.address() as { port: number }).port;
  // Half-open allowed: the client keeps its end open after the server's FIN, as the agent does
  // while a target's last bytes still come.
  const client = connect({ port, host: '127.0.0.1', allowHalfOpen: true });
  await once(client, 'connect');
  t.after(() => client.destroy());
  const ends = () =>
    [
      { address: client.localAddress!, port: client.localPort! },
      { address: client.remoteAddress!, port: client.remotePort! },
    ] as const;
  while (accepted.length === 0) await sleep(10);
  assert.equal(await peerClosedByProgram(...ends()), false);
  // The server's program closes its end (FIN_WAIT2 once its FIN is acknowledged, no inode).
  accepted[0]!.destroy();
  await once(client, 'end');
  assert.equal(await peerClosedByProgram(...ends()), true);
  assert.equal(
    await peerClosedByProgram({ address: '127.0.0.1', port: 1 }, { address: '127.0.0.1', port: 2 }),
    undefined,
  );
});

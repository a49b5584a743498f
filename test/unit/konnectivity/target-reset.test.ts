// A target that sends its last bytes and then resets the connection (kubelet closing with unread
// bytes: Go's Close sends RST) while the agent holds some of those bytes for lack of credit (a
// slow link). The agent's socket then reports 'error' (ECONNRESET), not 'end'. What it has read
// must still reach the server, then the CLOSE: `kubectl cp` otherwise ends short, rarely.
// The agent's Target against a real loopback target, its server connection faked so the test
// decides when credit comes.
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { connect, type Socket } from 'node:net';
import { test, type TestContext } from 'node:test';
import { Target, type TargetOwner } from '../../../src/konnectivity/agent/targets.ts';
import { WindowBudget } from '../../../src/konnectivity/wire/flow.ts';
import { INITIAL_WINDOW, type Packet } from '../../../src/konnectivity/wire/protocol.ts';
import { listen, quietLogger } from './fixtures.ts';
import { waitFor } from '../../wait.ts';

/** A server connection with flow-control/1 that records what the target sends it. */
function fakeOwner() {
  const sent: Packet[] = [];
  const gone: Target[] = [];
  const owner: TargetOwner = {
    serverId: 'server-1',
    flowControl: true,
    writable: true,
    log: quietLogger(),
    windowBudget: new WindowBudget(64 * 1024 * 1024),
    dialTimeoutMs: 5_000,
    upstreamBufferLimit: 4 * 1024 * 1024,
    holdMaxMs: 5_000,
    send: (p) => void sent.push(p),
    dialed: () => assert.fail('no dials here'),
    dialFailed: () => assert.fail('no dials here'),
    dialCancelled: () => assert.fail('no dials here'),
    targetGone: (t) => void gone.push(t),
  };
  const dataBytes = (): number => sent.reduce((n, p) => n + (p.type === 'DATA' ? (p.data?.data.length ?? 0) : 0), 0);
  return { owner, sent, gone, dataBytes };
}

/** Bytes that tell their position: a dropped or reordered stretch shows. */
function pattern(from: number, length: number): Buffer {
  return Buffer.from(Array.from({ length }, (_, i) => (from + i) % 251));
}

/**
 * A target that sends INITIAL_WINDOW + 19000 bytes and then resets, the agent holding those
 * 19000 for credit when the reset reaches it.
 */
async function resetWithHeldBytes(t: TestContext) {
  let targetSide: Socket | undefined;
  const target = await listen(t, (s) => (targetSide = s));
  const socket = connect(target.port, '127.0.0.1');
  socket.on('error', () => undefined);
  await once(socket, 'connect');
  const peer = await waitFor('the target accepted', 10_000, () => targetSide);
  t.after(() => socket.destroy());

  const fake = fakeOwner();
  const tgt = new Target(fake.owner, socket, '1', 'trace-1', target.address);
  tgt.start();

  // All but 1000 bytes of the initial window, sent on at once.
  const first = INITIAL_WINDOW - 1_000;
  peer.write(pattern(0, first));
  await waitFor('the first bytes sent as DATA', 10_000, () => fake.dataBytes() === first);
  // The last bytes, in one read: 1000 go now, the rest waits for credit and reading pauses.
  const tail = 20_000;
  peer.write(pattern(first, tail));
  await waitFor('the agent read the last bytes, holding the rest', 10_000, () => tgt.flow.heldLength === tail - 1_000);
  assert.equal(fake.dataBytes(), INITIAL_WINDOW);
  assert.equal(socket.readableLength, 0, 'nothing else read but not yet seen');

  // Then the target resets instead of closing cleanly.
  peer.resetAndDestroy();
  await waitFor('the reset reached the agent', 10_000, () => socket.destroyed);
  return { ...fake, tgt, total: first + tail };
}

test('a target that resets after its last bytes, some of them held for credit: every byte reaches the server before the CLOSE', async (t) => {
  const { tgt, sent, gone, total } = await resetWithHeldBytes(t);
  // Credit comes later (a slow link).
  tgt.grant(64 * 1024);
  const close = await waitFor('CLOSE_RSP', 10_000, () => sent.find((p) => p.type === 'CLOSE_RSP'));
  const before = sent.slice(0, sent.indexOf(close));
  const data = Buffer.concat(before.filter((p) => p.type === 'DATA').map((p) => p.data?.data ?? Buffer.alloc(0)));
  assert.equal(data.length, total, `${data.length} of ${total} bytes reached the server before the CLOSE`);
  assert.ok(data.equals(pattern(0, total)), 'in order, unchanged');
  assert.equal(sent.at(-1), close, 'nothing after the CLOSE');
  assert.equal(close.closeResponse?.error, 'connection reset by peer', 'the server still learns how it ended');
  assert.deepEqual(gone, [tgt]);
});

test('a reset target whose held bytes never get credit still goes when the server closes it', async (t) => {
  const { tgt, sent, gone, dataBytes } = await resetWithHeldBytes(t);
  assert.equal(gone.length, 0, 'waiting for credit');
  tgt.closeByServer(); // CLOSE_REQ; losing the server stream (destroy) ends it the same way
  assert.deepEqual(gone, [tgt]);
  assert.deepEqual(
    sent.filter((p) => p.type === 'CLOSE_RSP').map((p) => p.closeResponse?.error),
    [''],
  );
  tgt.grant(64 * 1024); // too late: nothing more is sent
  assert.equal(dataBytes(), INITIAL_WINDOW);
  assert.equal(sent.at(-1)?.type, 'CLOSE_RSP');
});

// A target that sends its last bytes and closes while its client is slow (kubelet at the end of
// `kubectl cp` over a slow link). The agent is not reading it then (no credit), so those bytes
// wait in the kernel, the target's and the agent's. A write to the closed target meanwhile
// (kubectl's websocket pings) draws a reset, and the reset throws the waiting bytes away on
// both sides: the copy ends short. While its reading is paused, or bytes from the target wait
// unread, the agent holds what the client sends, and writes it once it has read the target dry
// and the target is still open (kctl's native addon tells it both), or after five seconds if the
// target keeps sending (a client's Ctrl-C must reach a target that never stops), but not while
// the kernel's TCP table shows the target's program has closed its socket.
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test, type TestContext } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { buildNativeAddon } from '../../../assets/native/build.ts';
import { useNativeAddon } from '../../../src/base/native.ts';
import type { KonnectivityAgentOptions } from '../../../src/konnectivity/agent/options.ts';
import { echoServer, listen, makePki, startAgent, startServer, udsOf } from './fixtures.ts';
import { waitFor } from '../../wait.ts';

const MiB = 1024 * 1024;
const ESTABLISHED = 'HTTP/1.1 200 Connection Established\r\n\r\n';
let addonDir = '';

before(async () => {
  addonDir = await mkdtemp(join(tmpdir(), 'kctl-native-'));
  useNativeAddon(await buildNativeAddon(addonDir));
});
after(async () => {
  useNativeAddon(null);
  await rm(addonDir, { recursive: true, force: true });
});

async function stack(t: TestContext, agent: Partial<KonnectivityAgentOptions> = {}) {
  const pki = await makePki();
  const server = await startServer(t, pki);
  await startAgent(t, pki, [server], agent);
  await waitFor('agent', 10_000, () => server.snapshot().agents.length === 1);
  return server;
}

/** A client through the server's HTTP-CONNECT socket, as kube-apiserver's HTTPConnect mode. */
function tunnelTo(server: Awaited<ReturnType<typeof stack>>, address: string) {
  const s = connect(udsOf(server).connect);
  s.write(`CONNECT ${address} HTTP/1.1\r\nHost: ${address}\r\n\r\n`);
  return s;
}

test('a target that sends its last bytes and closes while the client is paused and writing: every byte arrives', async (t) => {
  const server = await stack(t);
  // Reads "N\n", sends N bytes, then closes at once, its last bytes still in its kernel (as Go's Close does).
  const target = await listen(t, (s) => {
    let line = '';
    s.on('data', (c: Buffer) => {
      if (line.includes('\n')) return;
      line += c.toString();
      if (line.includes('\n')) s.end(Buffer.alloc(Number(line.split('\n')[0]), 0x5a), () => s.destroy());
    });
  });
  for (const size of [2 * MiB, 8 * MiB]) {
    const tunnel = tunnelTo(server, target.address);
    let received = -ESTABLISHED.length;
    tunnel.on('data', (c: Buffer) => (received += c.length));
    tunnel.on('error', () => undefined);
    const closed = new Promise<void>((resolve) => tunnel.once('close', () => resolve()));
    // A slow client: it reads nothing for 600 ms; once the agent has stopped reading the target
    // for it, it writes a byte every 10 ms, as the API server's pings would (faster, to hit the moment).
    tunnel.pause();
    tunnel.write(`${size}\n`);
    await sleep(100);
    for (let i = 0; i < 50; i++) {
      tunnel.write('.');
      await sleep(10);
    }
    tunnel.resume();
    await Promise.race([closed, sleep(20_000)]);
    assert.equal(received, size, `${received} of ${size} bytes arrived`);
  }
});

test('a target that closes while the agent still reads its last bytes with credit, the client writing: every byte arrives', async (t) => {
  const server = await stack(t);
  // The client reads as it comes, so the agent reads the target with credit; the target closes
  // once its last bytes are in its kernel, and from then on the client writes a byte every
  // millisecond. Its first bytes reach the agent while the target's last ones still wait in the
  // target's kernel or the agent's: written to the closed target, they drew a reset. The moment is
  // a race, hence 40 rounds: before the agent held writes while bytes wait unread, 3 of 4 runs
  // lost bytes (one round in 40 or more), with the hold 0 of 4.
  let targetClosed: boolean;
  const target = await listen(t, (s) => {
    let line = '';
    s.on('data', (c: Buffer) => {
      if (line.includes('\n')) return;
      line += c.toString();
      if (line.includes('\n'))
        s.end(Buffer.alloc(Number(line.split('\n')[0]), 0x5a), () => {
          s.destroy();
          targetClosed = true;
        });
    });
  });
  for (let round = 0; round < 40; round++) {
    const size = 9 * MiB;
    targetClosed = false;
    const tunnel = tunnelTo(server, target.address);
    let received = -ESTABLISHED.length;
    tunnel.on('data', (c: Buffer) => (received += c.length));
    tunnel.on('error', () => undefined);
    let open = true;
    const closed = new Promise<void>((resolve) => tunnel.once('close', () => resolve())).then(() => (open = false));
    tunnel.write(`${size}\n`);
    while (open && !targetClosed) await sleep(0);
    for (let i = 0; open && i < 20_000; i++) {
      tunnel.write('.');
      await sleep(1);
    }
    await Promise.race([closed, sleep(20_000)]);
    assert.equal(received, size, `round ${round}: ${received} of ${size} bytes arrived`);
  }
});

test('what the client sent while the agent was not reading a target that stays open reaches it, in order', async (t) => {
  const server = await stack(t);
  // Reads "N\n", sends N bytes, then answers the client's 50 numbered lines with "ok".
  const target = await listen(t, (s) => {
    let text = '';
    s.on('data', (c: Buffer) => {
      const first = !text.includes('\n');
      text += c.toString();
      if (first && text.includes('\n')) s.write(Buffer.alloc(Number(text.split('\n')[0]), 0x5a));
      const lines = text.split('\n').slice(1, -1);
      if (lines.length === 50)
        s.end(lines.every((l, i) => l === String(i)) ? 'ok' : `out of order: ${lines.join(',')}`);
    });
  });
  const size = 9 * MiB;
  const tunnel = tunnelTo(server, target.address);
  const chunks: Buffer[] = [];
  tunnel.on('data', (c: Buffer) => chunks.push(c));
  const closed = new Promise<void>((resolve) => tunnel.once('close', () => resolve()));
  tunnel.pause();
  tunnel.write(`${size}\n`);
  await sleep(100);
  for (let i = 0; i < 50; i++) {
    tunnel.write(`${i}\n`);
    await sleep(5);
  }
  tunnel.resume();
  await Promise.race([closed, sleep(20_000)]);
  const all = Buffer.concat(chunks);
  assert.equal(all.length, ESTABLISHED.length + size + 2, `${all.length - ESTABLISHED.length} bytes arrived`);
  assert.equal(all.subarray(-2).toString(), 'ok');
});

test('while the agent reads a target, what the client sends reaches it at once', async (t) => {
  const server = await stack(t);
  const echo = await echoServer(t);
  const tunnel = tunnelTo(server, echo.address);
  let text = '';
  tunnel.on('data', (c: Buffer) => (text += c.toString()));
  await waitFor('the tunnel', 10_000, () => text.startsWith(ESTABLISHED));
  for (let i = 0; i < 20; i++) {
    tunnel.write(`ping ${i}\n`);
    await waitFor(`echo of ping ${i}`, 2_000, () => text.endsWith(`ping ${i}\n`));
  }
  tunnel.destroy();
});

test('a target that never stops sending still gets what a slow client writes (held five seconds at most)', async (t) => {
  const server = await stack(t);
  // Sends 64 KiB chunks for as long as it may write (a shell running `yes`), and keeps what it reads.
  let got = '';
  let flooding = true;
  const chunk = Buffer.alloc(64 * 1024, 0x5a);
  const target = await listen(t, (s) => {
    s.on('data', (c: Buffer) => (got += c.toString()));
    s.on('close', () => (flooding = false));
    const pump = (): void => {
      while (flooding && s.write(chunk));
      if (flooding) s.once('drain', pump);
    };
    pump();
  });
  const tunnel = tunnelTo(server, target.address);
  tunnel.on('error', () => undefined);
  // A slow client: it reads 5 ms in every 100, so the agent keeps running out of credit.
  tunnel.pause();
  const reading = setInterval(() => {
    tunnel.resume();
    setTimeout(() => tunnel.pause(), 5);
  }, 100);
  t.after(() => {
    clearInterval(reading);
    flooding = false;
    tunnel.destroy();
  });
  await sleep(1_000);
  tunnel.write('interrupt\n');
  await waitFor("the client's write at the flooding target", 30_000, () => got.includes('interrupt\n'));
  assert.equal(flooding, true, 'the target stopped sending before the write arrived');
});

test('a target whose program closed with its last bytes still on their way gets nothing written, however long the client waits', async (t) => {
  // The hold's bound shortened to 1 s so that this test can try many sizes.
  const server = await stack(t, { holdMaxMs: 1_000 });
  // On "warm N\n" sends N bytes (the connection's kernel buffers grow to a busy link's); on "N\n",
  // sends N bytes and closes: its kernel goes on sending what it had not sent yet.
  let closes = 0;
  const target = await listen(t, (s) => {
    let text = '';
    s.on('data', (c: Buffer) => {
      text += c.toString();
      for (let nl = text.indexOf('\n'); nl >= 0; nl = text.indexOf('\n')) {
        const line = text.slice(0, nl);
        text = text.slice(nl + 1);
        if (line.startsWith('warm ')) s.write(Buffer.alloc(Number(line.slice(5)), 0x41));
        else s.end(Buffer.alloc(Number(line), 0x5a), () => (closes++, s.destroy()));
      }
    });
    s.on('error', () => undefined);
  });
  const warm = 32 * MiB;
  // Which sizes make the target close before the bound with megabytes still in its kernel depends
  // on how far the kernel grew the buffers on the way (6 to 8 or 9 MiB here, where the code before
  // lost 2 MiB of 6): every size must arrive whole.
  let closedInTime = 0;
  for (let size = 4 * MiB; size <= 10 * MiB; size += 2 * MiB) {
    const tunnel = tunnelTo(server, target.address);
    let received = -ESTABLISHED.length;
    tunnel.on('data', (c: Buffer) => (received += c.length));
    tunnel.on('error', () => undefined);
    const closed = new Promise<void>((resolve) => tunnel.once('close', () => resolve()));
    tunnel.write(`warm ${warm}\n`);
    await waitFor('the warm-up bytes', 20_000, () => received === warm);
    // The client reads nothing for longer than the bound and writes once meanwhile (a ping).
    const closesBefore = closes;
    tunnel.pause();
    tunnel.write(`${size}\n`);
    await sleep(300);
    tunnel.write('.');
    await sleep(1_700);
    const closedEarly = closes > closesBefore;
    if (closedEarly) closedInTime++;
    tunnel.resume();
    await Promise.race([closed, sleep(20_000)]);
    // A target still sending when the bound passed gets the client's write, as it must (a Ctrl-C);
    // if its program then closes before reading it, its kernel answers with a reset, as it would
    // to a client dialing it directly, and what it had not sent is gone: that race is the
    // program's (it lost it on a loaded host), so only a target closed in time is held to every byte.
    if (!closedEarly) {
      t.diagnostic(`${size} bytes: the target was still sending at the bound; ${received - warm} arrived`);
      continue;
    }
    assert.equal(received - warm, size, `${received - warm} of ${size} bytes arrived (the target closed in time)`);
  }
  // The case this test is for happened (else it proves nothing).
  assert.ok(closedInTime > 0, 'the target never closed before the bound passed: no size hit the case');
});

// The WAN lab (wan.ts): the emulator really delays, drops, caps and partitions the traffic between
// a worker and its controller, leaves worker ↔ worker traffic alone, and a dead emulator is loud.
//
// The bands below are wide on purpose: this machine is shared and busy, so a number measured here
// wanders. Each band is still far from what a broken emulator gives (a perfect link pings in well
// under 1 ms, an uncapped transfer runs at hundreds of Mbit/s, a dead loss draw loses 0 % or 100 %).
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import type { LabHost } from './lab.ts';
import { startLab } from './lab-test.ts';
import { wan, type WanLink, type WanStats } from './wan.ts';

const BUSYBOX = '/bin/busybox';
const PORT = 18090;

interface Pings {
  received: number;
  rttMs: number[];
}

/** `count` pings from `from` to `to`, `intervalS` apart. */
async function pings(from: LabHost, to: LabHost, count: number, intervalS: number): Promise<Pings> {
  const r = await from.run(BUSYBOX, ['ping', '-c', String(count), '-i', String(intervalS), '-W', '2', to.ip], {
    timeout: 60_000,
  });
  const out = String(r.stdout);
  const rttMs = [...out.matchAll(/time=([\d.]+) ms/g)].map((m) => Number(m[1]));
  return { received: rttMs.length, rttMs };
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)] ?? NaN;
}

/** Mbit/s of one TCP stream of `bytes` from `from` to `to`, timed by the receiver from accept to the last byte. */
async function transfer(from: LabHost, to: LabHost, bytes: number): Promise<number> {
  const receiver = to.spawn(process.execPath, [
    '-e',
    `const srv = require('net').createServer((s) => { const t0 = performance.now(); let n = 0;
       s.on('data', (c) => { n += c.length; });
       s.on('end', () => { console.log(JSON.stringify({ n, ms: performance.now() - t0 })); s.end(); srv.close(); });
     }).listen(${PORT}, () => console.log('listening'));`,
  ]);
  let out = '';
  receiver.stdout!.on('data', (c: Buffer) => {
    out += c.toString();
  });
  const done = once(receiver, 'close');
  while (!out.includes('listening')) await sleep(20);
  const sent = await from.run(process.execPath, [
    '-e',
    `const s = require('net').connect(${PORT}, ${JSON.stringify(to.ip)}, () => {
       const buf = Buffer.alloc(1 << 16); let left = ${bytes};
       const pump = () => { while (left > 0) { const k = Math.min(left, buf.length); left -= k; if (!s.write(buf.subarray(0, k))) return s.once('drain', pump); } s.end(); };
       pump();
     }); s.resume();`,
  ]);
  assert.equal(sent.exitCode, 0, `sender on ${from.name}: ${String(sent.stderr)}`);
  await done;
  const { n, ms } = JSON.parse(out.split('\n')[1] ?? '') as { n: number; ms: number };
  assert.equal(n, bytes, 'every byte arrives');
  return (n * 8) / (ms * 1000);
}

type Counter = 'forwarded' | 'lost' | 'partitionDropped' | 'queueDropped';
/** How much a counter grew in one direction between two stats. */
const grew = (before: WanStats, after: WanStats, dir: 'up' | 'down', c: Counter): number =>
  after[dir][c] - before[dir][c];

async function until<T>(what: string, timeoutMs: number, probe: () => Promise<T | undefined>): Promise<T> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const v = await probe();
    if (v !== undefined) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(100);
  }
}

test(
  'the WAN lab delays, drops, caps and partitions worker <-> controller traffic only',
  { timeout: 120_000 },
  async (t) => {
    const { lab } = await startLab(t, 'wan', ['ctl', 'w1', 'w2']);
    const [ctl, w1, w2] = ['ctl', 'w1', 'w2'].map((h) => lab.host(h)) as [LabHost, LabHost, LabHost];
    const link: WanLink = await wan(lab, w1, { peers: [ctl], profile: 'edge', seed: 7 });

    // edge: 75 ± 10 ms each way, so an RTT of 130-170 ms plus a little scheduling.
    const edge = await pings(w1, ctl, 20, 0.2);
    assert.ok(edge.received >= 15, `edge answers most pings (1 % loss each way), got ${edge.received}/20`);
    const rtt = median(edge.rttMs);
    assert.ok(rtt >= 120 && rtt <= 200, `edge RTT median ${rtt} ms, want 120-200`);
    assert.ok(
      Math.max(...edge.rttMs) - Math.min(...edge.rttMs) >= 2,
      `jitter spreads the RTTs: ${edge.rttMs.join(', ')}`,
    );
    const lan = await pings(w1, w2, 5, 0.2);
    assert.equal(lan.received, 5);
    assert.ok(median(lan.rttMs) < 5, `worker <-> worker stays on the LAN: ${lan.rttMs.join(', ')} ms`);
    let stats = await link.stats();
    assert.ok(stats.up.forwarded >= edge.received && stats.down.forwarded >= edge.received, JSON.stringify(stats));
    assert.ok(stats.up.passed > 0, 'worker <-> worker frames pass the emulator untouched');
    process.stderr.write(
      `# edge: RTT median ${rtt.toFixed(1)} ms over ${edge.received}/20 pings; LAN ${lan.rttMs.join(', ')} ms\n`,
    );

    // satellite: 300 ms each way.
    await link.set('satellite');
    const sat = await pings(w1, ctl, 5, 0.2);
    assert.ok(sat.received >= 3, `satellite answers most pings (2 % loss each way), got ${sat.received}/5`);
    assert.ok(
      median(sat.rttMs) >= 580 && median(sat.rttMs) <= 700,
      `satellite RTT ${sat.rttMs.join(', ')} ms, want about 600`,
    );
    process.stderr.write(`# satellite: RTT ${sat.rttMs.join(', ')} ms\n`);

    // A bad parameter is refused with the reason and changes nothing.
    await assert.rejects(link.set({ loss: 2 }), /WAN emulator for w1: loss is a probability from 0 to 1, got 2/);

    // A partition: silence both ways (no ICMP error, ping just times out), the LAN still works.
    await link.set('clean');
    await link.partition(true);
    let before = await link.stats();
    assert.equal(await lab.ping(w1, ctl), false, 'w1 -> ctl during the partition');
    assert.equal(await lab.ping(ctl, w1), false, 'ctl -> w1 during the partition');
    assert.ok(await lab.ping(w1, w2), 'w1 -> w2 during the partition');
    stats = await link.stats();
    assert.ok(
      grew(before, stats, 'up', 'partitionDropped') >= 1 && grew(before, stats, 'down', 'partitionDropped') >= 1,
      JSON.stringify(stats),
    );
    assert.equal(stats.partition.on, true);
    await link.partition(false);
    assert.ok(await lab.ping(w1, ctl), 'w1 -> ctl after the heal');
    stats = await link.stats();
    assert.equal(stats.partition.on, false);
    assert.equal(stats.partition.windows.length, 1);
    assert.notEqual(stats.partition.windows[0]!.endMs, null);

    // 30 % loss up only: about 30 % of 300 echo requests vanish (the band is over 3 standard deviations wide each side).
    await link.set({ up: { loss: 0.3 } });
    before = await link.stats();
    const lossy = await pings(w1, ctl, 300, 0.01);
    stats = await link.stats();
    const lost = grew(before, stats, 'up', 'lost');
    const rate = lost / (lost + grew(before, stats, 'up', 'forwarded'));
    assert.ok(rate > 0.2 && rate < 0.4, `up loss ${rate} (${lost} lost), want about 0.3`);
    assert.equal(grew(before, stats, 'down', 'lost'), 0, 'no loss down');
    assert.equal(lossy.received, 300 - lost, 'every frame the emulator lost is a ping without an answer');
    process.stderr.write(`# 30 % loss up: ${lost}/300 lost\n`);

    // The cap: a bulk transfer each way at 20 Mbit/s (frames count with their headers, so TCP's
    // payload stays a few per cent under it); uncapped, the same transfer is far faster.
    await link.set({ rateKbit: 20_000, delayMs: 10 });
    before = await link.stats();
    const upload = await transfer(w1, ctl, 5_000_000);
    const download = await transfer(ctl, w1, 5_000_000);
    stats = await link.stats();
    process.stderr.write(
      `# 20 Mbit/s cap: up ${upload.toFixed(1)}, down ${download.toFixed(1)} Mbit/s; queue drops up ${grew(before, stats, 'up', 'queueDropped')}, down ${grew(before, stats, 'down', 'queueDropped')}\n`,
    );
    for (const [dir, mbit] of [
      ['up', upload],
      ['down', download],
    ] as const)
      assert.ok(mbit >= 12 && mbit <= 20, `${dir} ${mbit} Mbit/s under a 20 Mbit/s cap`);
    // Segmented, checksummed frames only: nothing reached the far side bigger than the MTU.
    assert.equal(stats.up.oversize + stats.down.oversize, 0);
    await link.set('clean');
    const uncapped = await transfer(w1, ctl, 5_000_000);
    process.stderr.write(`# uncapped: ${uncapped.toFixed(0)} Mbit/s\n`);
    assert.ok(uncapped > 30, `uncapped ${uncapped} Mbit/s: the cap above came from the emulator`);

    // A partition schedule (flaky's, shortened): it starts by itself, is visible in the stats, heals.
    // The gaps are at least 1 s, so the ping after the heal is answered before the next one.
    await link.set({ partitions: { gapMs: [1000, 1500], durationMs: 1500 } });
    assert.notEqual((await link.stats()).partition.nextMs, null);
    const opened = await until('a scheduled partition', 5000, async () =>
      (await link.stats()).partition.on ? true : undefined,
    );
    assert.ok(opened);
    assert.equal(await lab.ping(w1, ctl), false, 'w1 -> ctl during a scheduled partition');
    const window = await until('the scheduled partition to heal', 5000, async () =>
      (await link.stats()).partition.windows.slice(1).find((w) => w.endMs !== null),
    );
    const lasted = window.endMs! - window.startMs;
    assert.ok(lasted >= 1400 && lasted <= 3000, `a 1.5 s partition lasted ${lasted} ms`);
    assert.ok(await lab.ping(w1, ctl), 'w1 -> ctl after the scheduled heal');
    await link.set('clean');
    assert.equal((await link.stats()).partition.nextMs, null, 'set without partitions ends the schedule');

    // close(): w1 back on the lab bridge, a LAN round trip again.
    await link.close();
    const back = await pings(w1, ctl, 3, 0.2);
    assert.equal(back.received, 3);
    assert.ok(median(back.rttMs) < 5, `after close: ${back.rttMs.join(', ')} ms`);
    assert.notEqual((await lab.sw.run('ip', ['link', 'show', 'bw1'])).exitCode, 0, 'close removes the WAN bridge');

    // A dead emulator cuts its worker off, and the handle says so instead of timing out.
    const link2 = await wan(lab, w2, { peers: [ctl] });
    assert.ok(await lab.ping(w2, ctl));
    process.kill(link2.pid, 'SIGKILL');
    await assert.rejects(link2.stats(), /WAN emulator for w2 exited \(SIGKILL\)/);
    await assert.rejects(link2.partition(true), /exited/);
    assert.equal(await lab.ping(w2, ctl), false, 'w2 is cut off');
    await link2.close();
    assert.ok(await lab.ping(w2, ctl), 'close puts w2 back on the bridge');
  },
);

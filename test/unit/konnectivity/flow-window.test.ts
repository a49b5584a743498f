// The receive window grows only while the sink keeps up, and never past its cap.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ConnectionFlow, WindowBudget } from '../../../src/konnectivity/wire/flow.ts';

const KiB = 1024;

/** The peer sends all the credit it has; the sink flushes `flushPerRound` of what is waiting. Returns the window after `rounds`. */
function run(
  flow: ConnectionFlow,
  rounds: number,
  flushPerRound: (waiting: number) => number,
): { window: number; peakUnflushed: number } {
  let credit = 256 * KiB;
  for (let r = 0; r < rounds; r++) {
    assert.ok(flow.received(credit), 'the peer never exceeds the credit it was given');
    credit = 0;
    let toFlush = flushPerRound(flow.unflushed);
    while (toFlush > 0) {
      const n = Math.min(64 * KiB, toFlush);
      toFlush -= n;
      credit += flow.flushed(n);
    }
  }
  return { window: flow.receiveWindow, peakUnflushed: flow.peakUnflushed };
}

const flowWith = (budget: WindowBudget): ConnectionFlow =>
  new ConnectionFlow({ negotiated: true, window: 256 * KiB, maxWindow: 4096 * KiB, budget, bufferLimit: 0 });

test('a sink that keeps up grows the window to its cap, and gives the growth back on release', () => {
  const budget = new WindowBudget(64 * 1024 * KiB);
  const flow = flowWith(budget);
  const r = run(flow, 20, (waiting) => waiting);
  assert.equal(r.window, 4096 * KiB);
  assert.ok(r.peakUnflushed <= 4096 * KiB, `the peer never had more than the cap outstanding (${r.peakUnflushed})`);
  assert.equal(budget.used, 4096 * KiB - 256 * KiB);
  flow.release();
  flow.release();
  assert.equal(budget.used, 0);
});

test('the shared budget caps the growth of all connections together', () => {
  const budget = new WindowBudget(1024 * KiB);
  const [a, b] = [flowWith(budget), flowWith(budget)];
  run(a, 20, (w) => w);
  run(b, 20, (w) => w);
  // a doubles 256 -> 512 -> 1024 (768 KiB of growth); b gets 256 more, then the budget is spent.
  assert.equal(a.receiveWindow, 1024 * KiB);
  assert.equal(b.receiveWindow, 512 * KiB);
  assert.ok(budget.used <= budget.total);
});

test('a sink that stalls or lags keeps the initial window', () => {
  const stalled = flowWith(new WindowBudget(64 * 1024 * KiB));
  assert.equal(run(stalled, 20, () => 0).window, 256 * KiB);
  const lagging = flowWith(new WindowBudget(64 * 1024 * KiB));
  // Flushes only half of what waits: more than a quarter window always sits in the sink.
  assert.equal(run(lagging, 20, (waiting) => Math.floor(waiting / 2 / (64 * KiB)) * 64 * KiB).window, 256 * KiB);
});

test('without a budget, or with an upstream peer, the window never grows', () => {
  const fixed = new ConnectionFlow({ negotiated: true, window: 256 * KiB, maxWindow: 4096 * KiB, bufferLimit: 0 });
  assert.equal(run(fixed, 10, (w) => w).window, 256 * KiB);
  const upstream = new ConnectionFlow({
    negotiated: false,
    window: 256 * KiB,
    maxWindow: 4096 * KiB,
    budget: new WindowBudget(64 * 1024 * KiB),
    bufferLimit: 8192 * KiB,
  });
  assert.equal(run(upstream, 10, (w) => w).window, 256 * KiB);
});

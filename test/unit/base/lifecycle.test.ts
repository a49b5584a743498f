import assert from 'node:assert/strict';
import { test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Component } from '../../../src/base/component.ts';
import { runUntilSignal } from '../../../src/base/lifecycle.ts';
import { ComponentManager } from '../../../src/base/manager.ts';
import { captureLogger } from '../../helpers.ts';

// SIGWINCH stands in for SIGTERM so the test runner's own handlers are not involved.
const signals: NodeJS.Signals[] = ['SIGWINCH'];

function recorder(name: string, journal: string[], readyMs = 0): Component {
  return {
    name,
    start: async () => {
      journal.push(`start ${name}`);
    },
    ready: async (signal) => {
      await sleep(readyMs, undefined, { signal });
      journal.push(`ready ${name}`);
    },
    stop: async () => {
      journal.push(`stop ${name}`);
    },
  };
}

test('runs until the signal, then stops in reverse', { timeout: 10_000 }, async () => {
  const journal: string[] = [];
  const { log } = captureLogger();
  const m = new ComponentManager([recorder('a', journal), recorder('b', journal)], log);
  const listenersBefore = process.listenerCount('SIGWINCH');
  const run = runUntilSignal(m, log, {
    signals,
    onReady: () => {
      journal.push('ready');
      process.kill(process.pid, 'SIGWINCH');
    },
    onStopped: () => {
      journal.push('stopped');
    },
  });
  await run;
  assert.deepEqual(journal, ['start a', 'ready a', 'start b', 'ready b', 'ready', 'stop b', 'stop a', 'stopped']);
  assert.equal(process.listenerCount('SIGWINCH'), listenersBefore, 'handlers are removed');
});

test('a signal during start stops what started and ends without an error', { timeout: 10_000 }, async () => {
  const journal: string[] = [];
  const { log } = captureLogger();
  const m = new ComponentManager(
    [recorder('a', journal), recorder('slow', journal, 5_000), recorder('c', journal)],
    log,
  );
  const run = runUntilSignal(m, log, {
    signals,
    onReady: () => {
      journal.push('ready');
    },
  });
  while (!journal.includes('start slow')) await sleep(5);
  process.kill(process.pid, 'SIGWINCH');
  await run;
  assert.deepEqual(journal, ['start a', 'ready a', 'start slow', 'stop slow', 'stop a']);
});

test('a failed start rejects with the reason, after stopping what started', { timeout: 10_000 }, async () => {
  const journal: string[] = [];
  const { log } = captureLogger();
  const broken: Component = {
    name: 'broken',
    start: async () => {
      throw new Error('port 6443 in use');
    },
  };
  const m = new ComponentManager([recorder('a', journal), broken], log);
  await assert.rejects(
    runUntilSignal(m, log, {
      signals,
      onStopped: () => {
        journal.push('stopped');
      },
    }),
    { message: 'broken failed to start: port 6443 in use' },
  );
  assert.deepEqual(journal, ['start a', 'ready a', 'stop a', 'stopped']);
});

test(
  'with drain, the first signal drains and keeps running; the second stops (upstream proxy-agent)',
  { timeout: 10_000 },
  async () => {
    const journal: string[] = [];
    const { log } = captureLogger();
    const m = new ComponentManager([recorder('a', journal)], log);
    const listenersBefore = process.listenerCount('SIGWINCH');
    const run = runUntilSignal(m, log, {
      signals,
      signalWhileStopping: 'default',
      drain: () => {
        journal.push('drain');
      },
      onReady: () => {
        journal.push('ready');
        process.kill(process.pid, 'SIGWINCH');
      },
      onStopping: () => {
        journal.push('stopping');
        assert.equal(
          process.listenerCount('SIGWINCH'),
          listenersBefore,
          "once stopping, a signal takes its own action (upstream's third signal)",
        );
      },
    });
    while (!journal.includes('drain')) await sleep(5);
    await sleep(50);
    assert.deepEqual(journal, ['start a', 'ready a', 'ready', 'drain'], 'a draining process keeps running');
    process.kill(process.pid, 'SIGWINCH');
    await run;
    assert.deepEqual(journal, ['start a', 'ready a', 'ready', 'drain', 'stopping', 'stop a']);
  },
);

test(
  'with an exit code, a signal during the stop exits at once with it (upstream proxy-server: 1)',
  { timeout: 10_000 },
  async (t) => {
    const journal: string[] = [];
    const { log } = captureLogger();
    let release = (): void => undefined;
    const slowStop: Component = {
      name: 'slow-stop',
      stop: () => new Promise<void>((resolve) => (release = resolve)),
    };
    const exits: (number | undefined)[] = [];
    t.mock.method(process, 'exit', (code?: number) => {
      exits.push(code);
      release();
    });
    const m = new ComponentManager([slowStop], log);
    const run = runUntilSignal(m, log, {
      signals,
      signalWhileStopping: { exitCode: 1 },
      onReady: () => {
        process.kill(process.pid, 'SIGWINCH');
      },
      onStopping: () => {
        journal.push('stopping');
        setImmediate(() => process.kill(process.pid, 'SIGWINCH'));
      },
    });
    await run;
    assert.deepEqual(journal, ['stopping']);
    assert.deepEqual(exits, [1], 'the second signal exits 1');
  },
);

test(
  'without options, a second signal while stopping is ignored and the stop finishes',
  { timeout: 10_000 },
  async () => {
    const { log } = captureLogger();
    let release = (): void => undefined;
    const stops: string[] = [];
    const slowStop: Component = {
      name: 'slow-stop',
      stop: () =>
        new Promise<void>((resolve) => {
          stops.push('stop');
          release = resolve;
        }),
    };
    const m = new ComponentManager([slowStop], log);
    const run = runUntilSignal(m, log, {
      signals,
      onReady: () => {
        process.kill(process.pid, 'SIGWINCH');
      },
      onStopping: () => {
        setImmediate(() => {
          process.kill(process.pid, 'SIGWINCH');
          setTimeout(() => release(), 50);
        });
      },
    });
    await run;
    assert.deepEqual(stops, ['stop']);
  },
);

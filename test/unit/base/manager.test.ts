import assert from 'node:assert/strict';
import { test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Component, ComponentState, ComponentStatus } from '../../../src/base/component.ts';
import { ComponentManager } from '../../../src/base/manager.ts';
import { Supervisor } from '../../../src/supervisor/process.ts';
import { captureLogger, tempDir } from '../../helpers.ts';
import { alive } from '../../wait.ts';

/** A component that records what was asked of it, in one shared journal. */
class Fake implements Component {
  state: ComponentState = 'pending';
  constructor(
    readonly name: string,
    private readonly journal: string[],
    private readonly behaviour: {
      readyAfterMs?: number;
      neverReady?: boolean;
      failStart?: string;
      failStop?: string;
      readyTimeoutMs?: number;
      startAfter?: string;
    } = {},
  ) {}
  get readyTimeoutMs(): number | undefined {
    return this.behaviour.readyTimeoutMs;
  }
  get startAfter(): string | undefined {
    return this.behaviour.startAfter;
  }
  async init(): Promise<void> {
    this.journal.push(`init ${this.name}`);
  }
  async start(): Promise<void> {
    this.journal.push(`start ${this.name}`);
    if (this.behaviour.failStart) throw new Error(this.behaviour.failStart);
    this.state = 'running';
  }
  async ready(): Promise<void> {
    // Deliberately ignores the signal: the manager must time out on its own.
    if (this.behaviour.neverReady) return new Promise(() => undefined);
    await sleep(this.behaviour.readyAfterMs ?? 0);
    this.journal.push(`ready ${this.name}`);
  }
  async stop(): Promise<void> {
    this.journal.push(`stop ${this.name}`);
    this.state = 'stopped';
    if (this.behaviour.failStop) throw new Error(this.behaviour.failStop);
  }
  status(): ComponentStatus {
    return { name: this.name, state: this.state, restarts: 0 };
  }
}

test('starts in order, each after the previous is ready; stops in reverse', { timeout: 10_000 }, async () => {
  const journal: string[] = [];
  const { log, lines } = captureLogger();
  const m = new ComponentManager(
    [
      new Fake('storage', journal, { readyAfterMs: 100 }),
      new Fake('apiserver', journal, { readyAfterMs: 50 }),
      new Fake('scheduler', journal),
    ],
    log,
  );
  await m.start();
  assert.deepEqual(journal, [
    'init storage',
    'init apiserver',
    'init scheduler',
    'start storage',
    'ready storage',
    'start apiserver',
    'ready apiserver',
    'start scheduler',
    'ready scheduler',
  ]);
  assert.deepEqual(
    m.status().map((s) => [s.name, s.state]),
    [
      ['storage', 'running'],
      ['apiserver', 'running'],
      ['scheduler', 'running'],
    ],
  );
  assert.ok(lines().some((l) => l.msg === 'starting apiserver'));
  assert.ok(lines().some((l) => /^storage ready in \d+(\.\d)?s$/.test(String(l.msg))));

  journal.length = 0;
  await m.stop();
  assert.deepEqual(journal, ['stop scheduler', 'stop apiserver', 'stop storage']);
});

test(
  'a component with startAfter starts once that one is ready, beside the ones between; it is waited for at its place and stopped in list order',
  { timeout: 10_000 },
  async () => {
    const journal: string[] = [];
    const { log } = captureLogger();
    const m = new ComponentManager(
      [
        new Fake('storage', journal),
        new Fake('apiserver', journal, { readyAfterMs: 20 }),
        new Fake('bootstrap', journal, { readyAfterMs: 300 }),
        new Fake('addons', journal, { readyAfterMs: 20 }),
        new Fake('scheduler', journal, { startAfter: 'apiserver', readyAfterMs: 100 }),
        new Fake('controller-manager', journal, { startAfter: 'apiserver', readyAfterMs: 50 }),
      ],
      log,
    );
    await m.start();
    assert.deepEqual(
      journal.filter((e) => !e.startsWith('init')),
      [
        'start storage',
        'ready storage',
        'start apiserver',
        'ready apiserver',
        'start scheduler',
        'start controller-manager',
        'start bootstrap',
        'ready controller-manager',
        'ready scheduler',
        'ready bootstrap',
        'start addons',
        'ready addons',
      ],
    );
    assert.ok(m.status().every((s) => s.state === 'running'));
    journal.length = 0;
    await m.stop();
    assert.deepEqual(journal, [
      'stop controller-manager',
      'stop scheduler',
      'stop addons',
      'stop bootstrap',
      'stop apiserver',
      'stop storage',
    ]);
  },
);

test(
  'a component started ahead that fails fails start at its turn; one still waiting stops waiting when another fails',
  { timeout: 10_000 },
  async () => {
    const journal: string[] = [];
    const { log } = captureLogger();
    const early = new ComponentManager(
      [
        new Fake('apiserver', journal),
        new Fake('bootstrap', journal, { readyAfterMs: 50 }),
        new Fake('scheduler', journal, { startAfter: 'apiserver', failStart: 'unknown flag: --bad' }),
      ],
      log,
    );
    await assert.rejects(early.start(), { message: 'scheduler failed to start: unknown flag: --bad' });
    assert.deepEqual(
      journal.filter((e) => e.startsWith('stop')),
      ['stop scheduler', 'stop bootstrap', 'stop apiserver'],
    );

    journal.length = 0;
    const waiting = new ComponentManager(
      [
        new Fake('apiserver', journal),
        new Fake('bootstrap', journal, { failStart: 'forbidden' }),
        // Never ready, and its wait would last the manager's default 120 s.
        new Fake('scheduler', journal, { startAfter: 'apiserver', neverReady: true }),
      ],
      log,
    );
    await assert.rejects(waiting.start(), { message: 'bootstrap failed to start: forbidden' });
    assert.deepEqual(
      journal.filter((e) => e.startsWith('stop')),
      ['stop scheduler', 'stop bootstrap', 'stop apiserver'],
    );
    assert.equal(
      waiting.status().find((s) => s.name === 'bootstrap')?.lastError,
      'bootstrap failed to start: forbidden',
    );
  },
);

test('startAfter must name a component listed before', () => {
  const { log } = captureLogger();
  assert.throws(
    () =>
      new ComponentManager([new Fake('scheduler', [], { startAfter: 'apiserver' }), new Fake('apiserver', [])], log),
    {
      message: 'component scheduler starts after apiserver, which is not listed before it',
    },
  );
});

test(
  'a component that never becomes ready fails start with its name; earlier ones are stopped in reverse',
  { timeout: 10_000 },
  async () => {
    const journal: string[] = [];
    const { log, lines } = captureLogger();
    const m = new ComponentManager(
      [
        new Fake('storage', journal),
        new Fake('konnectivity', journal),
        new Fake('apiserver', journal, { neverReady: true, readyTimeoutMs: 200 }),
        new Fake('scheduler', journal),
      ],
      log,
    );
    await assert.rejects(m.start(), { message: 'apiserver did not become ready within 0.2s' });
    assert.deepEqual(
      journal.filter((e) => e.startsWith('start') || e.startsWith('stop')),
      ['start storage', 'start konnectivity', 'start apiserver', 'stop apiserver', 'stop konnectivity', 'stop storage'],
    );
    assert.ok(lines().some((l) => l.level === 50 && String(l.msg).startsWith('apiserver did not become ready')));
  },
);

test('a start error names the component; stop carries on past a failing stop', { timeout: 10_000 }, async () => {
  const journal: string[] = [];
  const { log, lines } = captureLogger();
  const m = new ComponentManager(
    [
      new Fake('a', journal, { failStop: 'stuck' }),
      new Fake('b', journal),
      new Fake('c', journal, { failStart: 'port 6443 in use' }),
    ],
    log,
  );
  await assert.rejects(m.start(), { message: 'c failed to start: port 6443 in use' });
  assert.deepEqual(
    journal.filter((e) => e.startsWith('stop')),
    ['stop c', 'stop b', 'stop a'],
  );
  assert.ok(lines().some((l) => l.msg === 'a failed to stop: stuck'));
});

test(
  'with real processes: a probe that never passes fails start with its reason and stops the earlier child',
  { timeout: 20_000 },
  async (t) => {
    const runDir = await tempDir(t);
    const { log } = captureLogger();
    const storage = new Supervisor({ name: 'storage', binary: '/bin/sleep', args: ['1000'], runDir, log });
    const apiserver = new Supervisor({
      name: 'apiserver',
      binary: '/bin/sleep',
      args: ['1000'],
      runDir,
      log,
      readyRetryMs: 20,
      readyTimeoutMs: 300,
      ready: () => Promise.reject(new Error('connect ECONNREFUSED 127.0.0.1:6443')),
    });
    t.after(async () => {
      await apiserver.stop();
      await storage.stop();
    });
    const m = new ComponentManager([storage, apiserver], log);
    await assert.rejects(m.start(), {
      message: 'apiserver did not become ready within 0.3s: last probe error: connect ECONNREFUSED 127.0.0.1:6443',
    });
    assert.deepEqual(
      m.status().map((s) => [s.name, s.state]),
      [
        ['storage', 'stopped'],
        ['apiserver', 'stopped'],
      ],
    );
  },
);

test('stop() during start() cancels the wait and stops what was started', { timeout: 10_000 }, async (t) => {
  const runDir = await tempDir(t);
  const { log } = captureLogger();
  const storage = new Supervisor({ name: 'storage', binary: '/bin/sleep', args: ['1000'], runDir, log });
  const apiserver = new Supervisor({
    name: 'apiserver',
    binary: '/bin/sleep',
    args: ['1000'],
    runDir,
    log,
    ready: () => new Promise(() => undefined),
  });
  t.after(async () => {
    await apiserver.stop();
    await storage.stop();
  });
  const m = new ComponentManager([storage, apiserver], log);
  const starting = m.start();
  while (apiserver.status().state !== 'running') await sleep(10);
  const pids = [storage.status().pid as number, apiserver.status().pid as number];
  const cancelled = assert.rejects(starting, { message: 'start cancelled: stopping' });
  await m.stop();
  await cancelled;
  for (const pid of pids) assert.equal(await alive(pid), false);
});

test(
  'stop() while a start() is still running stops that component after its start settles',
  { timeout: 10_000 },
  async () => {
    const journal: string[] = [];
    const { log } = captureLogger();
    let finishStart: () => void = () => undefined;
    const slow: Component = {
      name: 'slow',
      // Binds a listener at the end of its start, as a server does once its files are read.
      start: () => new Promise<void>((resolve) => (finishStart = () => (journal.push('slow bound'), resolve()))),
      stop: async () => void journal.push('stop slow'),
    };
    const m = new ComponentManager([new Fake('first', journal), slow], log);
    const starting = m.start();
    while (!journal.includes('ready first')) await sleep(5);
    await sleep(5);
    const cancelled = assert.rejects(starting, { message: 'start cancelled: stopping' });
    const stopped = m.stop();
    await sleep(20);
    assert.ok(!journal.includes('stop slow'), 'stop() did not wait for the start in flight');
    finishStart();
    await stopped;
    await cancelled;
    assert.deepEqual(journal.slice(-3), ['slow bound', 'stop slow', 'stop first']);
  },
);

test(
  'a component writes only the hooks it needs; the manager keeps its state and last error',
  { timeout: 10_000 },
  async () => {
    const { log } = captureLogger();
    let runs = 0;
    const oneShot: Component = {
      name: 'one-shot',
      ready: async () => {
        runs += 1;
      },
    };
    const broken: Component = {
      name: 'broken',
      start: async () => {
        throw new Error('no socket\nstack…');
      },
    };
    const m = new ComponentManager([oneShot, broken], log);
    assert.deepEqual(
      m.status().map((s) => [s.name, s.state]),
      [
        ['one-shot', 'pending'],
        ['broken', 'pending'],
      ],
    );
    await assert.rejects(m.start(), { message: 'broken failed to start: no socket' });
    assert.equal(runs, 1);
    const [first, second] = m.status();
    assert.equal(first?.state, 'stopped');
    assert.equal(second?.state, 'failed');
    assert.equal(second?.lastError, 'broken failed to start: no socket');
  },
);

test(
  "fields a component reports win over the manager's, undefined ones do not erase them",
  { timeout: 10_000 },
  async () => {
    const { log } = captureLogger();
    const reported: { problem?: string } = {};
    const c: Component = {
      name: 'agent',
      start: async () => undefined,
      status: () => ({ lastError: reported.problem, pid: 42 }),
    };
    const m = new ComponentManager([c], log);
    await m.start();
    assert.deepEqual(m.status()[0], {
      name: 'agent',
      state: 'running',
      restarts: 0,
      lastError: undefined,
      uptimeSeconds: 0,
      pid: 42,
    });
    reported.problem = 'not connected to any konnectivity server yet';
    assert.equal(m.status()[0]?.lastError, reported.problem);
    await m.stop();
    assert.equal(m.status()[0]?.state, 'stopped');
  },
);

// What kctl holds each bench row to: one table in code, so a run says itself which targets it met
// (bench/record.ts writes it beside the figures). A row with no entry has no target: it is measured
// to be watched.
import type { Row } from './rows.ts';

export interface Target {
  /** As a reader sees it in the table. */
  text: string;
  /** Whether this run met it; null when the row has no figure to judge. */
  met(r: Row): boolean | null;
}

const ratio = (r: Row, to: 'upstream' | 'direct'): number | null =>
  r.kctl === null || r[to] === null || r[to] === 0 ? null : r.kctl / r[to];

/** kctl's figure against upstream's: at least (`atLeast`) or at most `x` times. */
function vsUpstream(x: number, atLeast: boolean): Target {
  return {
    text: `kctl/upstream ${atLeast ? '>=' : '<='} ${x}x`,
    met: (r) => {
      const q = ratio(r, 'upstream');
      return q === null ? null : atLeast ? q >= x : q <= x;
    },
  };
}

/** kctl's own figure, at most (or at least) `x` of the row's unit. */
function own(x: number, atLeast = false, text = `${atLeast ? '>=' : '<='} ${x}`): Target {
  return { text, met: (r) => (r.kctl === null ? null : atLeast ? r.kctl >= x : r.kctl <= x) };
}

export const TARGETS: Readonly<Record<string, Target>> = {
  'throughput-1': {
    text: 'kctl/upstream >= 2.5x and kctl/direct >= 0.25x',
    met: (r) => {
      const [up, direct] = [ratio(r, 'upstream'), ratio(r, 'direct')];
      return up === null || direct === null ? null : up >= 2.5 && direct >= 0.25;
    },
  },
  'throughput-16': vsUpstream(2.5, true),
  'dial-latency-p50': vsUpstream(0.5, false),
  'dial-latency-p99': vsUpstream(0.6, false),
  'leak-residual': own(0),
  'leak-residual (http-connect)': own(0),
  'hol-others-ratio': own(0.9, true),
  'hol-others-ratio (http-connect)': own(0.9, true),
  // Performance round 3 (memory per node and per agent, the executable's size).
  'kctl-size-mb': own(114.4, false, '<= 114.4 MiB (120 MB)'),
  'first-start-staging-s': own(5),
  'controller-rss-mb': own(80),
  'worker-rss-mb': own(60),
  'worker-host-mb': own(200),
  'tenant-ready-s (1)': own(3),
  'tenant-ready-s (10)': own(10),
  'tenant-memory-mb (10)': own(250),
  'tenant-memory-mb (20)': own(250),
  // Control planes as pods (the operator section).
  'hosted-pod-memory-mb (full, 1 node, beside 12)': own(300),
  'hosted-pod-memory-mb (api-only, 12)': own(200),
  'operator-memory-mb (13 clusters)': own(100),
  // The front door (issue: one port for every cluster): at most 0.1 ms more per connection, 5 % less throughput.
  'front-door-connect-p50': {
    text: 'kctl - direct <= 0.1 ms',
    met: (r) => (r.kctl === null || r.direct === null ? null : r.kctl - r.direct <= 0.1),
  },
  'front-door-throughput': {
    text: 'kctl/direct >= 0.95x',
    met: (r) => {
      const q = ratio(r, 'direct');
      return q === null ? null : q >= 0.95;
    },
  },
};

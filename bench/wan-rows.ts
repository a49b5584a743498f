// What every figure of the WAN section (wan.ts) shares: the two peers compared, the context a
// figure runs in, and its rows: kctl's and upstream's medians over the runs, with their range.
import type { BenchPki } from './pki.ts';
import { median, type Row } from './rows.ts';

export type Peer = 'kctl' | 'upstream';
/** In the order each run measures them: kctl, then upstream. */
export const PEERS: Peer[] = ['kctl', 'upstream'];

export interface WanSizes {
  /** Agents in the restart figure. */
  agents: number;
  /** Repetitions of each figure, per server. */
  runs: number;
  /** Edge figures: bytes of the one download through each path. */
  downloadBytes: number;
  /** Edge figures: sequential dials per path and run, for the dial-latency median. */
  dials: number;
  /** Edge figures: whether the partition figures run (they take a minute and more per run). */
  partitions: boolean;
}

export interface WanContext {
  dir: string;
  /** The run's PKI, the server certificate for 127.0.0.1. */
  pki: BenchPki;
  sizes: WanSizes;
  log: (m: string) => void;
}

/** One figure: runs its repetitions, returns its rows. */
export type Figure = (c: WanContext) => Promise<Row[]>;

const range = (xs: number[]): [number, number] => [Math.min(...xs), Math.max(...xs)];

/** A row of kctl's and upstream's medians (and direct TCP's, where the figure has it), with the range of the runs. */
export function peerRow(scenario: string, unit: string, by: Record<Peer, number[]> & { direct?: number[] }, note: string): Row {
  const direct = by.direct?.length ? by.direct : undefined;
  return {
    scenario,
    unit,
    kctl: median(by.kctl),
    upstream: median(by.upstream),
    direct: direct ? median(direct) : null,
    ...(by.kctl.length > 1
      ? { range: { kctl: range(by.kctl), upstream: range(by.upstream), ...(direct && direct.length > 1 ? { direct: range(direct) } : {}) } }
      : {}),
    note,
  };
}

/** A figure's row when this mode does not measure it: no figures, and the note says why. */
export function skippedRow(scenario: string, unit: string, why: string): Row {
  return { scenario, unit, kctl: null, upstream: null, direct: null, note: why };
}

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
  /** Edge figures: how long the download beside a stalled stream is given. */
  stallGiveUpMs: number;
  /** Whether the cluster figures (kubectl cp, logs -f) run: they start a real cluster. */
  cluster: boolean;
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

/** The edge profile's rate, 20 Mbit/s each way, in MiB/s. */
export const EDGE_LINK_MIBPS = 20e6 / 8 / 2 ** 20;

/** The median of a figure's runs as a share of the edge link's rate: "87 %". */
export const linkShare = (xs: number[]): string =>
  xs.length ? `${((median(xs) / EDGE_LINK_MIBPS) * 100).toFixed(0)} %` : '-';

const range = (xs: number[]): [number, number] => [Math.min(...xs), Math.max(...xs)];

/**
 * A row of kctl's and upstream's medians (and direct TCP's, where the figure has it), with the range
 * of the runs; a column with no figures (none of its runs gave one) is null.
 */
export function peerRow(
  scenario: string,
  unit: string,
  by: Record<Peer, number[]> & { direct?: number[] },
  note: string,
): Row {
  const columns = { kctl: by.kctl, upstream: by.upstream, ...(by.direct?.length ? { direct: by.direct } : {}) };
  const ranged = Object.entries(columns).filter(([, xs]) => xs.length > 1);
  return {
    scenario,
    unit,
    kctl: by.kctl.length ? median(by.kctl) : null,
    upstream: by.upstream.length ? median(by.upstream) : null,
    direct: columns.direct ? median(columns.direct) : null,
    ...(ranged.length ? { range: Object.fromEntries(ranged.map(([k, xs]) => [k, range(xs)])) } : {}),
    note,
  };
}

/** A figure's row when this mode does not measure it: no figures, and the note says why. */
export function skippedRow(scenario: string, unit: string, why: string): Row {
  return { scenario, unit, kctl: null, upstream: null, direct: null, note: why };
}

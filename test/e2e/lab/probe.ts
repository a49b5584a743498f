// `kubectl logs` and `kubectl exec` against one pod, as a user checking that the tunnel works,
// with every answer kept and timed: for tests that run them in a loop while something changes
// underneath (certificate renewals, a CA rotation) and bound how long they may fail in a row.
import type { Result } from 'execa';

export interface ProbeResult {
  /** When the request started (ms since the epoch). */
  at: number;
  tookMs: number;
  ok: boolean;
  what: string;
}

/** What a failed request said: its stderr, or how it ended when it said nothing (killed at its timeout). */
export function said(r: Result): string {
  const err = String(r.stderr ?? '').trim();
  if (err) return err;
  return r.timedOut ? 'no answer before the timeout' : `exit ${r.exitCode ?? r.signal ?? '?'}, nothing on stderr`;
}

/** One round: logs (must hold `line`), then exec of `echo exec-ok`. */
export async function logsAndExec(
  kubectl: (args: string[]) => Promise<Result>,
  pod: string,
  line: string,
): Promise<ProbeResult[]> {
  const logsAt = Date.now();
  const logs = await kubectl(['logs', pod]);
  const execAt = Date.now();
  const exec = await kubectl(['exec', pod, '--', 'echo', 'exec-ok']);
  return [
    {
      at: logsAt,
      tookMs: execAt - logsAt,
      ok: logs.exitCode === 0 && String(logs.stdout).includes(line),
      what: `logs: ${said(logs)}`,
    },
    {
      at: execAt,
      tookMs: Date.now() - execAt,
      ok: exec.exitCode === 0 && String(exec.stdout).trim() === 'exec-ok',
      what: `exec: ${said(exec)}`,
    },
  ];
}

/**
 * The longest run of failures, from the first failed request to the next one that succeeded;
 * `stillFailing` is the start of a run no success ended.
 */
export function longestFailureStreak(
  results: ProbeResult[],
  now = Date.now(),
): { longest: number; stillFailing?: number } {
  let longest = 0;
  let since: number | undefined;
  for (const r of results) {
    if (!r.ok) since ??= r.at;
    else if (since !== undefined) {
      longest = Math.max(longest, r.at - since);
      since = undefined;
    }
  }
  return since === undefined ? { longest } : { longest: Math.max(longest, now - since), stillFailing: since };
}

/**
 * What became of a pod, for a failure message: its containers' states, restarts and last
 * termination, and its events (a container that restarted or a sandbox made again shows here).
 */
export async function podStory(kubectl: (args: string[]) => Promise<Result>, pod: string): Promise<string> {
  const statuses = await kubectl(['get', 'pod', pod, '-o', 'jsonpath={.status.containerStatuses}']);
  const events = await kubectl([
    'get',
    'events',
    '--field-selector',
    `involvedObject.name=${pod}`,
    '--sort-by=.lastTimestamp',
  ]);
  return `pod ${pod}'s containers: ${String(statuses.stdout || statuses.stderr).trim()}\nits events:\n${String(events.stdout || events.stderr).trim()}`;
}

/**
 * For requests sent through several servers at once (a loop per server, `source` naming it): the
 * longest time no server was serving. A server serves from a request of its own that succeeded
 * until the next request it was sent, when that one succeeded too (nothing says it stopped in
 * between), or else until the success ended; a slow success counts as serving, not as a failure.
 * Measured over [first request, last request].
 */
export function longestOutage(results: (ProbeResult & { source: string })[]): {
  longest: number;
  from?: number;
} {
  if (!results.length) return { longest: 0 };
  const covered: [number, number][] = [];
  for (const source of new Set(results.map((r) => r.source))) {
    const own = results.filter((r) => r.source === source).sort((a, b) => a.at - b.at);
    own.forEach((r, i) => {
      if (!r.ok) return;
      const next = own[i + 1];
      covered.push([r.at, next?.ok ? next.at : r.at + r.tookMs]);
    });
  }
  covered.sort((a, b) => a[0] - b[0]);
  const start = Math.min(...results.map((r) => r.at));
  const end = Math.max(...results.map((r) => r.at));
  let longest = 0;
  let from: number | undefined;
  let reached = start;
  for (const [a, b] of [...covered, [end, end] as [number, number]]) {
    if (a > reached && a - reached > longest) {
      longest = a - reached;
      from = reached;
    }
    reached = Math.max(reached, b);
  }
  return { longest, from };
}

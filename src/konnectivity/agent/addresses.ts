// The server addresses an agent is told to hold and the dial state of each: how many servers
// answer there (as many as the address is listed), the streams held through it, its backoff.
import { joinHostPort } from '../../base/addresses.ts';
import type { ServerAddress } from './options.ts';

export interface AddressState {
  readonly addr: ServerAddress;
  readonly label: string;
  conns: number;
  /** How many servers answer here: as many as the address is listed (pods of one cluster behind one Service). */
  behind: number;
  dialing: boolean;
  /** The last attempt reached a server we already hold. */
  lastDuplicate: boolean;
  backoffMs: number;
  nextAttemptAt: number;
  /** No longer listed (setServers): not dialed again; its streams drain and close. */
  removed: boolean;
}

/** The listed addresses, once each, with how many times each was listed: that many servers answer there. */
export function listedAddresses(servers: ServerAddress[]): Map<string, { addr: ServerAddress; behind: number }> {
  const out = new Map<string, { addr: ServerAddress; behind: number }>();
  for (const addr of servers) {
    const label = joinHostPort(addr.host, addr.port);
    const seen = out.get(label);
    if (seen) seen.behind++;
    else out.set(label, { addr, behind: 1 });
  }
  return out;
}

/** A newly listed address: no stream yet, dialed at once. */
export function addressState(addr: ServerAddress, behind: number, backoffMs: number): AddressState {
  return {
    addr,
    label: joinHostPort(addr.host, addr.port),
    conns: 0,
    behind,
    dialing: false,
    lastDuplicate: false,
    backoffMs,
    nextAttemptAt: 0,
    removed: false,
  };
}

/**
 * A wait drawn from [ms/2, ms] ("equal jitter"). Jitter applied after the cap, never clamped
 * back to it: agents that lost the same server do not retry it in lockstep, at the cap included.
 */
function jittered(ms: number): number {
  return Math.round(ms * (0.5 + Math.random() * 0.5));
}

/** The next attempt at `a`: after the first interval again, or a backoff grown x1.5 up to the cap. */
export function retryLater(
  a: AddressState,
  grow: boolean,
  o: { syncIntervalMs: number; syncIntervalCapMs: number },
): void {
  if (grow) a.backoffMs = Math.min(o.syncIntervalCapMs, a.backoffMs * 1.5);
  else a.backoffMs = o.syncIntervalMs;
  a.nextAttemptAt = Date.now() + jittered(a.backoffMs);
}

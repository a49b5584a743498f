// Ports that kctl processes picked on this host, whatever their --data-dir: one claims file at a
// fixed host path, read and written under its own lock. Two tenants that start at once with
// different data dirs otherwise both see a port free (neither listens yet) and both take it; the
// loser's kube-apiserver cannot bind and is restarted for ever. A claim names its owner (a tenant's
// data dir); the owner's own record says whether the claim still stands, so a tenant that was
// reset or deleted gives its ports back without a command.
import { existsSync } from 'node:fs';
import { mkdir, readFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { withDirLock, writeFileAtomic } from '../base/fs.ts';

export const DEFAULT_HOST_STATE_DIR = '/var/lib/kctl-host';
let stateDir = DEFAULT_HOST_STATE_DIR;

/** The host-wide state dir (kctl --host-state-dir; tests give each file its own). */
export function hostStateDir(): string {
  return stateDir;
}

/** Sets the host-wide state dir for this process: the CLI, from --host-state-dir, before any command runs. */
export function useHostStateDir(dir: string): void {
  stateDir = dir;
}

export interface PortClaim {
  port: number;
  /** Who holds it: a tenant's data dir. */
  owner: string;
  /** For messages: e.g. `tenant "a"`. */
  label: string;
  at: string;
}

export interface ClaimRequest {
  owner: string;
  label: string;
  /** Ports the owner has recorded already: claimed again as they are (refused if another owner holds one). */
  recorded?: number[];
  /** Otherwise: this many new ports from `range`. */
  count?: number;
  range?: [number, number];
  /** Ports not to pick besides the claimed ones (recorded by owners from before claims). */
  exclude?: Set<number>;
  /** True while `claim` still stands (its owner exists and still records the port). */
  stillHeld(claim: PortClaim): Promise<boolean>;
}

export class PortClaimConflict extends Error {
  constructor(
    readonly port: number,
    readonly holder: PortClaim,
  ) {
    super(`port ${port} is claimed by ${holder.label} (${holder.owner})`);
  }
}

/**
 * A claim stands this long whatever its owner's record says: the owner writes its record after
 * claiming, and a claim seen in between must not look abandoned.
 */
export const CLAIM_GRACE_MS = 10 * 60_000;

const claimsFile = (): string => join(hostStateDir(), 'port-claims.json');

async function readClaims(): Promise<PortClaim[]> {
  const text = await readFile(claimsFile(), 'utf8').catch(() => '[]');
  try {
    const list = JSON.parse(text) as PortClaim[];
    return Array.isArray(list) ? list.filter((c) => Number.isInteger(c.port) && typeof c.owner === 'string') : [];
  } catch {
    return []; // a damaged file: the owners' records still hold their ports, and each re-claims at its start
  }
}

/** The claims file is read and written only under its own lock (the host state dir exists). */
function underClaimsLock<T>(fn: () => Promise<T>): Promise<T> {
  return withDirLock(hostStateDir(), 'port-claims.lock', fn);
}

async function writeClaims(claims: PortClaim[]): Promise<void> {
  await writeFileAtomic(claimsFile(), JSON.stringify(claims, null, 2) + '\n', 0o600);
}

/** True when nothing listens on `port` on any address. */
export function portFree(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = createServer();
    s.once('error', () => resolve(false));
    s.listen({ port, host: '0.0.0.0', exclusive: true }, () => s.close(() => resolve(true)));
  });
}

/** Why the ports of a range were not picked: what a "range used up" message says. */
export interface RangeUse {
  /** Claimed by other owners: standing, or within CLAIM_GRACE_MS of their claim. */
  claimed: number;
  /** Of those, the ones that stand only for the grace period (their owner records them no more). */
  inGrace: number;
  /** Something listens on them. */
  listening: number;
  /** Recorded by owners from before claims (ClaimRequest.exclude). */
  excluded: number;
}

export interface ClaimResult {
  /** The ports claimed; fewer than asked for when the range ran out (nothing is claimed then). */
  ports: number[];
  /** For new ports: why the others in the range went unpicked. */
  use: RangeUse;
}

/**
 * Under the host lock: drops claims that no longer stand, then claims the owner's recorded ports
 * (PortClaimConflict when another owner holds one) or `count` new ones from `range` that no claim
 * holds and nothing listens on.
 */
export async function claimPorts(req: ClaimRequest): Promise<ClaimResult> {
  await mkdir(hostStateDir(), { recursive: true, mode: 0o755 });
  return underClaimsLock(async () => {
    const standing: PortClaim[] = [];
    const inGrace = new Set<number>();
    const now = Date.now();
    for (const c of await readClaims()) {
      if (c.owner === req.owner) continue;
      const young = now - Date.parse(c.at) < CLAIM_GRACE_MS;
      if (!(await req.stillHeld(c))) {
        if (!young) continue;
        inGrace.add(c.port);
      }
      standing.push(c);
    }
    const held = new Map(standing.map((c) => [c.port, c]));
    const use: RangeUse = { claimed: 0, inGrace: 0, listening: 0, excluded: 0 };
    let ports: number[] = [];
    if (req.recorded) {
      for (const p of req.recorded) if (held.has(p)) throw new PortClaimConflict(p, held.get(p)!);
      ports = req.recorded;
    } else {
      const [lo, hi] = req.range ?? [0, -1];
      for (let p = lo; p <= hi && ports.length < (req.count ?? 0); p++) {
        if (held.has(p)) {
          use.claimed++;
          if (inGrace.has(p)) use.inGrace++;
        } else if (req.exclude?.has(p)) use.excluded++;
        else if (!(await portFree(p))) use.listening++;
        else ports.push(p);
      }
      if (ports.length < (req.count ?? 0)) return { ports, use };
    }
    const at = new Date().toISOString();
    const mine = ports.map((port) => ({ port, owner: req.owner, label: req.label, at }));
    await writeClaims([...standing, ...mine]);
    return { ports, use };
  });
}

/**
 * Drops every claim of `owner` at once (no grace): for a start that was refused after it claimed,
 * and for a reset data dir. Returns the ports given back.
 */
export async function releasePorts(owner: string): Promise<number[]> {
  if (!existsSync(claimsFile())) return [];
  return underClaimsLock(async () => {
    const claims = await readClaims();
    const mine = claims.filter((c) => c.owner === owner).map((c) => c.port);
    if (mine.length) await writeClaims(claims.filter((c) => c.owner !== owner));
    return mine;
  });
}

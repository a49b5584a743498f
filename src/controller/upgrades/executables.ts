// kctl executables served to the cluster's own hosts, for upgrades: GET /v1/executables/<version>
// on the join endpoint (join-server.ts hands such requests here). A controller serves the
// executable it runs, and those kept under <data-dir>/upgrade/ (a plan's target written there by
// `kctl upgrade plan`, or fetched from another controller). Only a client certificate of the
// cluster CA is served: a node's (O=system:nodes) or the cluster admin's (O=system:masters, as
// controllers fetch with); the executable holds no secret, the check keeps strangers from pulling
// 160 MB at a time. Range requests (one range) let a download over a thin link resume.
//
// A leaked node certificate must not turn a controller into a bandwidth pump: each node (its
// certificate's name) has one download at a time (a new request replaces its previous one, as a
// resume after a cut does) and may fetch three files' worth of bytes per hour (a download over a
// bad link, resumed many times, fetches about one); a controller serves at most eight downloads at
// once. The controllers' own fetches (the admin certificate, which they all share and which is
// the cluster's keys anyway) count only towards the eight. Beyond that the answer is 429 with Retry-After, which the node's download takes as
// "another controller, or later".
import { createReadStream } from 'node:fs';
import { stat } from 'node:fs/promises';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { TLSSocket } from 'node:tls';
import { kctlExecutable } from '../../base/executable.ts';
import type { Logger } from '../../base/log.ts';
import { KCTL_VERSION } from '../../base/version.ts';
import { EXECUTABLES_PATH, keptExecutable } from '../../payload/upgrade-files.ts';

/** The groups whose client certificates may fetch an executable. */
const ALLOWED_GROUPS = ['system:nodes', 'system:masters'];

/** A version as it may appear in a path: semver characters only. */
const VERSION = /^[0-9A-Za-z.+-]{1,64}$/;

/** Who a verified client certificate names (CN, groups from O), or null when it is not verified by the cluster CA. */
function verifiedClient(socket: TLSSocket): { name?: string | string[]; groups: string[] } | null {
  if (!socket.authorized) return null;
  const subject = socket.getPeerCertificate().subject;
  const o = subject?.O;
  return { name: subject?.CN, groups: o === undefined ? [] : Array.isArray(o) ? o : [o] };
}

/** "bytes=N-" or "bytes=N-M": the first and last byte, or null when absent; 'bad' when it is not one range within size. */
export function parseRange(header: string | undefined, size: number): { start: number; end: number } | null | 'bad' {
  if (!header) return null;
  const m = /^bytes=(\d+)-(\d*)$/.exec(header.trim());
  if (!m) return 'bad';
  const start = Number(m[1]);
  const end = m[2] ? Math.min(Number(m[2]), size - 1) : size - 1;
  return start < size && start <= end ? { start, end } : 'bad';
}

export interface DownloadLimits {
  /** Whole files' worth of bytes one client may fetch per hour. */
  filesPerHour: number;
  /** Downloads served at once. */
  maxDownloads: number;
  now: () => number;
}

const DEFAULT_LIMITS: DownloadLimits = { filesPerHour: 3, maxDownloads: 8, now: Date.now };
const HOUR_MS = 3_600_000;
/** When a controller serving its most downloads tells the next client to come back. */
const BUSY_RETRY_S = 15;

export class ExecutableFiles {
  /** Each client's download in progress. */
  private readonly active = new Map<string, ServerResponse>();
  /** Bytes each client fetched since the start of its hour, and whether a refusal was logged in it. */
  private readonly spent = new Map<string, { since: number; bytes: number; warned: boolean }>();
  private readonly limits: DownloadLimits;
  private requests = 0;

  constructor(
    private readonly dataDir: string,
    /** A download whose client reads nothing for this long is dropped (it resumes with a range request). */
    private readonly sendIdleMs = 60_000,
    limits: Partial<DownloadLimits> = {},
  ) {
    this.limits = { ...DEFAULT_LIMITS, ...limits };
  }

  private spentBy(client: string): { since: number; bytes: number; warned: boolean } {
    const now = this.limits.now();
    let s = this.spent.get(client);
    if (!s || now - s.since >= HOUR_MS) this.spent.set(client, (s = { since: now, bytes: 0, warned: false }));
    for (const [k, v] of this.spent) if (now - v.since >= HOUR_MS && !this.active.has(k)) this.spent.delete(k);
    return s;
  }

  matches(req: IncomingMessage): boolean {
    return (req.url ?? '').startsWith(EXECUTABLES_PATH);
  }

  /** The file that holds `version`, or undefined when this controller has none. */
  async fileOf(version: string): Promise<string | undefined> {
    const own = kctlExecutable();
    if (version === KCTL_VERSION && own) return own;
    const kept = keptExecutable(this.dataDir, version);
    return (await stat(kept).catch(() => null))?.isFile() ? kept : undefined;
  }

  async handle(req: IncomingMessage, res: ServerResponse, log: Logger): Promise<void> {
    const fail = (status: number, error: string) => {
      res.writeHead(status, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ error }));
    };
    const client = verifiedClient(req.socket as TLSSocket);
    if (client === null) return fail(401, 'a client certificate of this cluster is required');
    if (!client.groups.some((g) => ALLOWED_GROUPS.includes(g)))
      return fail(403, `only ${ALLOWED_GROUPS.join(' and ')} may fetch kctl executables`);
    if (req.method !== 'GET') return fail(405, `only GET ${EXECUTABLES_PATH}<version> is served here`);
    const version = decodeURIComponent((req.url ?? '').slice(EXECUTABLES_PATH.length));
    if (!VERSION.test(version)) return fail(400, `"${version}" is not a kctl version`);
    const file = await this.fileOf(version);
    const size = file ? (await stat(file).catch(() => null))?.size : undefined;
    if (!file || size === undefined) return fail(404, `this controller has no kctl ${version}`);
    const range = parseRange(req.headers.range, size);
    if (range === 'bad') {
      res.writeHead(416, { 'content-range': `bytes */${size}` });
      res.end();
      return;
    }
    // A node is limited by its name; the controllers' shared admin certificate by nothing but the cap.
    const node = client.groups.includes('system:nodes');
    const who = node ? [client.name].flat().join(',') || '(no name)' : `${client.groups.join(',')}#${++this.requests}`;
    const spent = node ? this.spentBy(who) : { since: 0, bytes: 0, warned: false };
    if (node && spent.bytes >= this.limits.filesPerHour * size) {
      const retryS = Math.max(1, Math.ceil((spent.since + HOUR_MS - this.limits.now()) / 1000));
      if (!spent.warned)
        log.warn(
          { client: who, bytes: spent.bytes, retryS },
          `refusing kctl executables to ${who} for ${retryS} s: it fetched ${this.limits.filesPerHour} files' worth this hour`,
        );
      spent.warned = true;
      res.setHeader('retry-after', String(retryS));
      return fail(
        429,
        `${who} fetched ${this.limits.filesPerHour} files' worth of kctl executables in the last hour; retry in ${retryS} s`,
      );
    }
    const previous = this.active.get(who);
    if (previous) {
      previous.destroy();
      log.info({ client: who }, 'a newer download by the same client replaces the one in progress');
    } else if (this.active.size >= this.limits.maxDownloads) {
      res.setHeader('retry-after', String(BUSY_RETRY_S));
      return fail(
        429,
        `this controller serves ${this.limits.maxDownloads} downloads already; retry in ${BUSY_RETRY_S} s or at another controller`,
      );
    }
    this.active.set(who, res);
    res.on('close', () => {
      if (this.active.get(who) === res) this.active.delete(who);
    });
    const { start, end } = range ?? { start: 0, end: size - 1 };
    res.writeHead(range ? 206 : 200, {
      'content-type': 'application/octet-stream',
      'content-length': String(end - start + 1),
      'accept-ranges': 'bytes',
      ...(range ? { 'content-range': `bytes ${start}-${end}/${size}` } : {}),
    });
    log.info({ version, client: client.name, from: start, bytes: end - start + 1 }, 'serving a kctl executable');
    // A client that takes nothing for this long (gone, or holding the connection on purpose) is cut off.
    res.setTimeout(this.sendIdleMs, () => res.destroy());
    const stream = createReadStream(file, { start, end });
    stream.on('data', (chunk) => (spent.bytes += chunk.length));
    stream.on('error', (err) => res.destroy(err));
    res.on('close', () => stream.destroy());
    stream.pipe(res);
  }
}

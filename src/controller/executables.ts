// kctl executables served to the cluster's own hosts, for upgrades: GET /v1/executables/<version>
// on the join endpoint (join-server.ts hands such requests here). A controller serves the
// executable it runs, and those kept under <data-dir>/upgrade/ (a plan's target written there by
// `kctl upgrade plan`, or fetched from another controller). Only a client certificate of the
// cluster CA is served: a node's (O=system:nodes) or the cluster admin's (O=system:masters, as
// controllers fetch with); the executable holds no secret, the check keeps strangers from pulling
// 160 MB at a time. Range requests (one range) let a download over a thin link resume.
import { createReadStream } from 'node:fs';
import { stat } from 'node:fs/promises';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { TLSSocket } from 'node:tls';
import { kctlExecutable } from '../base/executable.ts';
import type { Logger } from '../base/log.ts';
import { KCTL_VERSION } from '../base/version.ts';
import { EXECUTABLES_PATH, keptExecutable } from '../payload/upgrade-files.ts';

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

export class ExecutableFiles {
  constructor(
    private readonly dataDir: string,
    /** A download whose client reads nothing for this long is dropped (it resumes with a range request). */
    private readonly sendIdleMs = 60_000,
  ) {}

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
    if (!client.groups.some((g) => ALLOWED_GROUPS.includes(g))) return fail(403, `only ${ALLOWED_GROUPS.join(' and ')} may fetch kctl executables`);
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
    stream.on('error', (err) => res.destroy(err));
    res.on('close', () => stream.destroy());
    stream.pipe(res);
  }
}

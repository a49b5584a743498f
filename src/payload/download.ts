// Fetching a kctl executable from the controllers over a thin or broken link: the bytes go to
// <target>.part, and a download that breaks off (a partition, a controller that stops, a stalled
// connection) goes on from where the part ends, at the same or the next controller, with a Range
// request. Only a file whose size and sha256 are the plan's is renamed into place; a part that
// cannot belong to it (longer than the file, or wrong once complete) is started again.
import { createWriteStream } from 'node:fs';
import { chmod, rename, rm, stat } from 'node:fs/promises';
import { request, type RequestOptions } from 'node:https';
import type { IncomingMessage } from 'node:http';
import { pipeline } from 'node:stream/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import { messageOf } from '../base/errors.ts';
import { proxiedHttps } from '../base/proxy.ts';
import { sha256OfFile } from '../base/fs.ts';

/** An https URL of the file, and the TLS server name to send its host when not the host (a front door routes by it). */
export interface DownloadSource {
  url: string;
  serverName?: string;
}

export interface DownloadOptions {
  /** Where the same file is, tried in turn. */
  sources: () => DownloadSource[];
  target: string;
  sha256: string;
  size: number;
  /** TLS: the CA to trust, and the client certificate to present (read per attempt: it may rotate). */
  tls: () => Promise<Pick<RequestOptions, 'ca' | 'cert' | 'key'>>;
  /** Bytes present so far, after each chunk written and at each attempt. */
  progress?: (bytes: number, url: string) => void;
  /** A connection that brings no byte for this long is dropped (and the download resumes). */
  stallMs?: number;
  /** Wait between rounds over every URL (doubles to 30 s). */
  retryMs?: number;
  /** Gives up after this many rounds over every URL. */
  rounds?: number;
  signal?: AbortSignal;
  /** Each failed attempt: why, so the caller can log it. */
  onError?: (url: string, reason: string) => void;
}

export interface DownloadResult {
  /** Attempts that started from a byte other than 0. */
  resumed: number;
  /** Bytes received over the network in all (without what a resume kept). */
  received: number;
}

const partOf = (target: string): string => `${target}.part`;

async function sizeOf(file: string): Promise<number> {
  return (await stat(file).catch(() => null))?.size ?? 0;
}

/** One GET from `from` on, appended to the part; resolves when the response ended. */
async function attempt(
  { url, serverName }: DownloadSource,
  part: string,
  from: number,
  o: DownloadOptions,
  count: (n: number) => void,
): Promise<void> {
  const tls = { ...(await o.tls()), ...(serverName ? { servername: serverName } : {}) };
  const res = await new Promise<IncomingMessage>((resolve, reject) => {
    const req = request(
      url,
      {
        ...tls,
        ...proxiedHttps(new URL(url).hostname, tls),
        headers: from > 0 ? { range: `bytes=${from}-` } : {},
        signal: o.signal,
      },
      resolve,
    );
    // A controller that does not answer at all (a silent partition) is left as a stalled one is.
    req.setTimeout(o.stallMs ?? 30_000, () =>
      req.destroy(new Error(`no answer for ${(o.stallMs ?? 30_000) / 1000} s`)),
    );
    req.on('error', reject);
    req.end();
  });
  try {
    if (res.statusCode !== 200 && res.statusCode !== 206) {
      const body = await new Promise<string>((resolve) => {
        let text = '';
        res.on('data', (c: Buffer) => (text += c.toString().slice(0, 512)));
        res.on('end', () => resolve(text));
        res.on('error', () => resolve(text));
      });
      throw new Error(`answered ${res.statusCode}: ${body.replace(/\s+/g, ' ').slice(0, 200)}`);
    }
    // A server that ignores the range sends the whole file: start the part again.
    const append = res.statusCode === 206 && from > 0;
    const out = createWriteStream(part, { flags: append ? 'a' : 'w', mode: 0o600 });
    let timer: NodeJS.Timeout | undefined;
    const stalled = () => res.destroy(new Error(`no byte for ${(o.stallMs ?? 30_000) / 1000} s`));
    const arm = () => {
      clearTimeout(timer);
      timer = setTimeout(stalled, o.stallMs ?? 30_000);
    };
    arm();
    let written = append ? from : 0;
    res.on('data', (c: Buffer) => {
      arm();
      written += c.length;
      count(c.length);
      o.progress?.(written, url);
    });
    try {
      await pipeline(res, out);
    } finally {
      clearTimeout(timer);
    }
    if (!res.complete) throw new Error('the connection ended before the response did');
  } finally {
    res.destroy();
  }
}

/**
 * Downloads to `target` (mode 0755) unless it already holds the file. Keeps a part between calls,
 * so a download cut off in one process goes on in the next.
 */
export async function downloadExecutable(o: DownloadOptions): Promise<DownloadResult> {
  if ((await sizeOf(o.target)) === o.size && (await sha256OfFile(o.target)) === o.sha256)
    return { resumed: 0, received: 0 };
  const part = partOf(o.target);
  let resumed = 0;
  let received = 0;
  let wait = o.retryMs ?? 1_000;
  const rounds = o.rounds ?? 10;
  let lastError = 'no controller serves it';
  for (let round = 0; round < rounds; round++) {
    for (const source of o.sources()) {
      const { url } = source;
      o.signal?.throwIfAborted();
      let have = await sizeOf(part);
      if (have > o.size) {
        await rm(part, { force: true });
        have = 0;
      }
      if (have < o.size) {
        if (have > 0) resumed++;
        o.progress?.(have, url);
        try {
          await attempt(source, part, have, o, (n) => (received += n));
        } catch (err) {
          if (o.signal?.aborted) throw err;
          lastError = `${url}: ${messageOf(err)}`;
          o.onError?.(url, messageOf(err));
          continue;
        }
      }
      if ((await sizeOf(part)) !== o.size) continue;
      if ((await sha256OfFile(part)) !== o.sha256) {
        // Complete but not the plan's file: nothing of it can be kept.
        await rm(part, { force: true });
        lastError = `${url}: the file's sha256 is not the plan's`;
        o.onError?.(url, "the file's sha256 is not the plan's; downloading it again");
        continue;
      }
      await chmod(part, 0o755);
      await rename(part, o.target);
      return { resumed, received };
    }
    await sleep(wait, undefined, { signal: o.signal });
    wait = Math.min(wait * 2, 30_000);
  }
  throw new Error(
    `cannot download the kctl executable after ${rounds} rounds over every controller (last: ${lastError})`,
  );
}

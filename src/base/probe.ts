// Readiness probes over HTTP or HTTPS (optionally with a client certificate), retried until aborted.
import { readFileSync } from 'node:fs';
import { request as httpRequest, type IncomingMessage } from 'node:http';
import { request as httpsRequest } from 'node:https';
import type { ConnectionOptions } from 'node:tls';
import { setTimeout as sleep } from 'node:timers/promises';
import { reasonOf } from './errors.ts';
import { proxiedHttps } from './proxy.ts';

export interface HttpsProbe {
  /** https://… or, for plain local health ports (kubelet, kube-proxy), http://… */
  url: string;
  ca?: string; // CA file; omitted = do not verify (self-signed component endpoints on loopback)
  cert?: string;
  key?: string;
  /** The TLS server name to send and check, when not the URL's host (a front door routes by it). */
  serverName?: string;
  expect?: (status: number, body: string) => boolean;
}

/** The TLS options of a probe (read from its files). */
function tlsOf(p: HttpsProbe): ConnectionOptions {
  return {
    ca: p.ca ? readFileSync(p.ca) : undefined,
    cert: p.cert ? readFileSync(p.cert) : undefined,
    key: p.key ? readFileSync(p.key) : undefined,
    rejectUnauthorized: p.ca !== undefined,
    ...(p.serverName ? { servername: p.serverName } : {}),
  };
}

export function httpsGet(p: HttpsProbe, timeoutMs = 3000): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const onResponse = (res: IncomingMessage): void => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => {
        if (body.length < 65536) body += c;
      });
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
    };
    const req = p.url.startsWith('http:')
      ? httpRequest(p.url, { timeout: timeoutMs }, onResponse)
      : httpsRequest(
          p.url,
          { ...tlsOf(p), ...proxiedHttps(new URL(p.url).hostname, tlsOf(p)), timeout: timeoutMs },
          onResponse,
        );
    req.on('timeout', () => req.destroy(new Error(`timed out after ${timeoutMs} ms`)));
    req.on('error', reject);
    req.end();
  });
}

/** The first pause of pollUntil, which then grows by half each time up to its interval. */
const FIRST_POLL_MS = 50;

/**
 * The pauses between pollUntil's checks: short at first, growing to `intervalMs`. Most components
 * answer a few hundred milliseconds after their start, so a fixed interval would make every step
 * of a start wait most of an interval for nothing.
 */
export function* pollPauses(intervalMs: number): Generator<number, never> {
  let pause = Math.min(FIRST_POLL_MS, intervalMs);
  for (;;) {
    yield pause;
    pause = Math.min(intervalMs, Math.round(pause * 1.5));
  }
}

/** Polls until the check passes; rejects with the last reason when the signal aborts. */
export async function pollUntil(
  signal: AbortSignal,
  what: string,
  check: () => Promise<void>,
  intervalMs = 500,
): Promise<void> {
  let last = 'not checked yet';
  const pauses = pollPauses(intervalMs);
  while (!signal.aborted) {
    try {
      await check();
      return;
    } catch (err) {
      last = reasonOf(err);
    }
    await sleep(pauses.next().value, undefined, { signal }).catch(() => undefined);
  }
  throw new Error(`${what} did not become ready: ${last}`);
}

/** One probe: resolves when the endpoint answers as expected (200 by default), else throws why. */
export async function probeOnce(p: HttpsProbe): Promise<void> {
  const r = await httpsGet(p);
  const ok = p.expect ? p.expect(r.status, r.body) : r.status === 200;
  if (!ok) throw new Error(`${p.url} answered ${r.status} ${r.body.slice(0, 200).replace(/\s+/g, ' ')}`);
}

/** Polls `p` until it answers as expected; `intervalMs` caps the pause between probes (pollUntil's). */
export function httpsReady(p: HttpsProbe, what: string, intervalMs?: number): (signal: AbortSignal) => Promise<void> {
  return (signal) => pollUntil(signal, what, () => probeOnce(p), intervalMs);
}

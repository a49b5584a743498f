// A worker whose only way out is an HTTP proxy: every connection it makes to a controller (its API
// balancer's, its konnectivity agent's, the join check's, upgrade downloads) becomes one HTTP
// CONNECT through the proxy named by HTTPS_PROXY (or https_proxy), as curl, Go and grpc-js read
// it; NO_PROXY (or no_proxy) names hosts to reach directly, and loopback never goes through it.
// The CONNECT is written by hand: the npm proxy agents give an http.Agent for requests, and kctl
// also needs the raw socket (the balancer splices bytes, the agent's own link runs TLS on it).
import { connect, isIP, type Socket } from 'node:net';
import type { RequestOptions } from 'node:https';
import { connect as tlsConnect, type ConnectionOptions } from 'node:tls';
import { cidrContains, joinHostPort } from './addresses.ts';
import { messageOf } from './errors.ts';

/** Most of a CONNECT answer kctl reads (status line and headers). */
const MAX_ANSWER_BYTES = 16 * 1024;
const CONNECT_TIMEOUT_MS = 10_000;

/** The proxy for connections to `host`, from the environment; undefined to go direct. */
export function proxyFor(host: string, env: NodeJS.ProcessEnv = process.env): URL | undefined {
  const setting = env.HTTPS_PROXY ?? env.https_proxy;
  if (!setting || bypassed(host, env.NO_PROXY ?? env.no_proxy ?? '')) return undefined;
  const url = new URL(setting.includes('://') ? setting : `http://${setting}`);
  if (url.protocol !== 'http:')
    throw new Error(`HTTPS_PROXY ${setting}: only an http:// proxy is supported (kctl's TLS runs inside the CONNECT)`);
  return url;
}

/** The environment's proxy setting checked once, up front: a one-line reason when it cannot be used. */
export function proxySettingProblem(env: NodeJS.ProcessEnv = process.env): string | undefined {
  const setting = env.HTTPS_PROXY ?? env.https_proxy;
  try {
    // A host no NO_PROXY names: the setting itself is parsed.
    proxyFor('proxy-check.invalid', { HTTPS_PROXY: setting });
    return undefined;
  } catch (err) {
    return err instanceof TypeError
      ? `HTTPS_PROXY ${setting ?? ''} is not a URL; set it as http://HOST:PORT`
      : `${messageOf(err)}; set HTTPS_PROXY as http://HOST:PORT`;
  }
}

/** Whether NO_PROXY (hosts, .domains, domains, IPs, CIDRs, `*`) or loopback sends `host` direct. */
export function bypassed(host: string, noProxy: string): boolean {
  const h = host.replace(/^\[|\]$/g, '').toLowerCase();
  if (h === 'localhost' || h === '::1' || h.startsWith('127.')) return true;
  for (const raw of noProxy.split(',')) {
    const entry = raw.trim().toLowerCase().replace(/:\d+$/, '');
    if (!entry) continue;
    if (entry === '*' || entry === h) return true;
    if (entry.includes('/') && isIP(h) && cidrContains(entry, h)) return true;
    const domain = entry.replace(/^\*?\./, '');
    if (!isIP(h) && h.endsWith(`.${domain}`)) return true;
  }
  return false;
}

/** A TCP connection to host:port through `proxy` (HTTP CONNECT), resolved once the proxy said 200. */
export function connectThrough(
  proxy: URL,
  host: string,
  port: number,
  timeoutMs = CONNECT_TIMEOUT_MS,
): Promise<Socket> {
  const target = joinHostPort(host, port);
  return new Promise((resolve, reject) => {
    const s = connect({ host: proxy.hostname.replace(/^\[|\]$/g, ''), port: Number(proxy.port || 80) });
    const fail = (why: string): void => {
      clearTimeout(timer);
      s.destroy();
      reject(new Error(`proxy ${proxy.host} CONNECT ${target}: ${why}`));
    };
    const timer = setTimeout(() => fail(`no answer within ${timeoutMs / 1000} s`), timeoutMs);
    s.once('error', (err) => fail(messageOf(err)));
    s.once('close', () => fail('closed'));
    s.once('connect', () => {
      const auth = proxy.username
        ? `Proxy-Authorization: Basic ${Buffer.from(`${decodeURIComponent(proxy.username)}:${decodeURIComponent(proxy.password)}`).toString('base64')}\r\n`
        : '';
      s.write(`CONNECT ${target} HTTP/1.1\r\nHost: ${target}\r\n${auth}\r\n`);
    });
    let answer = Buffer.alloc(0);
    const onData = (chunk: Buffer): void => {
      answer = Buffer.concat([answer, chunk]);
      const end = answer.indexOf('\r\n\r\n');
      if (end < 0) return answer.length > MAX_ANSWER_BYTES ? fail('an answer too long') : undefined;
      s.off('data', onData);
      const status = /^HTTP\/1\.[01] (\d{3})/.exec(answer.toString('latin1'))?.[1];
      if (status !== '200') return fail(`answered ${answer.toString('latin1').split('\r\n')[0] || 'nothing'}`);
      clearTimeout(timer);
      s.removeAllListeners('error');
      s.removeAllListeners('close');
      s.pause();
      // Bytes the server sent after the answer (none for TLS, where the client speaks first) stay readable.
      if (answer.length > end + 4) s.unshift(answer.subarray(end + 4));
      resolve(s);
    };
    s.on('data', onData);
  });
}

/** A TCP connection to host:port: through the environment's proxy when one applies, else direct. */
export function dial(host: string, port: number, timeoutMs = CONNECT_TIMEOUT_MS): Promise<Socket> {
  const proxy = proxyFor(host);
  if (proxy) return connectThrough(proxy, host, port, timeoutMs);
  return new Promise((resolve, reject) => {
    const s = connect({ host, port });
    const timer = setTimeout(() => s.destroy(new Error(`no connection within ${timeoutMs / 1000} s`)), timeoutMs);
    s.once('connect', () => {
      clearTimeout(timer);
      s.off('error', reject);
      resolve(s);
    });
    s.once('error', (err) => {
      clearTimeout(timer);
      reject(err);
    });
  });
}

/**
 * For an https request to `host`: its `createConnection`, through the environment's proxy when one
 * applies (TLS then runs inside the CONNECT with `tls`, the request's own TLS options); nothing otherwise.
 * The request must name no agent: an agent makes its own connections and would not use this one.
 */
export function proxiedHttps(host: string, tls: ConnectionOptions): Pick<RequestOptions, 'createConnection'> {
  const proxy = proxyFor(host);
  if (!proxy) return {};
  const servername = tls.servername ?? (isIP(host) ? undefined : host);
  return {
    createConnection: (opts, done) => {
      connectThrough(proxy, host, Number(opts.port ?? 443)).then(
        (socket) => done(null, tlsConnect({ ...tls, servername, socket })),
        (err: unknown) => done(err instanceof Error ? err : new Error(messageOf(err)), undefined as never),
      );
      return undefined;
    },
  };
}

// kctl's one Kubernetes API client: JSON requests, list, watch and server-side apply over
// node:https (node:http for test servers). Every kctl process makes one instance and hands it
// to the components that talk to the API server.
//
// Written by hand on purpose rather than @kubernetes/client-node (numbers in README.md here): on
// Node 24 the ecosystem client adds ~1.9 MB of bundle, ~23 MiB of RSS and ~100 ms of start-up
// to a controller whose RSS target is 90 MiB; ours adds ~7 KB and no measurable RSS, and kctl
// needs only the handful of verbs below.
import { proxiedHttps } from '../base/proxy.ts';
import { readFileSync } from 'node:fs';
import { request as httpRequest, type IncomingMessage } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { parse } from 'yaml';
import { objectPath, type KubeObject } from './paths.ts';

export { objectPath, resourcePath, type KubeManifest, type KubeObject } from './paths.ts';

export interface KubeCredentials {
  /** https://host:port, or http://… (tests only). */
  server: string;
  ca?: string | Buffer;
  cert?: string | Buffer;
  key?: string | Buffer;
  token?: string;
  /** The TLS server name to send and check, when not the server's host (kubeconfig's tls-server-name: a front door routes by it). */
  serverName?: string;
}

/** What the API server said no with: HTTP status and the Status reason (e.g. NotFound, Expired). */
export class KubeApiError extends Error {
  constructor(
    readonly status: number,
    readonly reason: string,
    message: string,
  ) {
    super(message);
  }
}

export interface Selectors {
  fieldSelector?: string;
  labelSelector?: string;
}

export interface WatchOptions extends Selectors {
  resourceVersion?: string;
  /** Server-side end of this watch; the caller reconnects. Default 5-10 min, spread like client-go. */
  timeoutSeconds?: number;
}

export interface KubeList<T> {
  metadata?: { resourceVersion?: string };
  items: T[];
}

export type WatchEventType = 'ADDED' | 'MODIFIED' | 'DELETED' | 'BOOKMARK';
export interface WatchEvent<T> {
  type: WatchEventType;
  object: T;
}

export interface RequestOptions {
  contentType?: string;
  signal?: AbortSignal;
}

export interface ApplyOptions {
  fieldManager?: string;
  /** Take over fields another manager owns (kctl owns the objects it applies). */
  force?: boolean;
}

interface KubeStatus {
  code?: number;
  reason?: string;
  message?: string;
}

interface KubeconfigFile {
  clusters?: {
    cluster: {
      server: string;
      'certificate-authority-data'?: string;
      'certificate-authority'?: string;
      'tls-server-name'?: string;
    };
  }[];
  users?: {
    user: {
      'client-certificate-data'?: string;
      'client-key-data'?: string;
      'client-certificate'?: string;
      'client-key'?: string;
      token?: string;
    };
  }[];
}

/** First cluster and first user of a kubeconfig file (kctl writes single-entry files). */
export function credentialsFromKubeconfig(path: string): KubeCredentials {
  return credentialsFromKubeconfigText(readFileSync(path, 'utf8'), path);
}

/** The same, of a kubeconfig's text (a Secret's); `where` names it in an error. */
export function credentialsFromKubeconfigText(text: string, where: string): KubeCredentials {
  const kc = parse(text) as KubeconfigFile;
  const cluster = kc?.clusters?.[0]?.cluster;
  const user = kc?.users?.[0]?.user;
  if (!cluster || !user) throw new Error(`${where} is not a usable kubeconfig (no cluster or user)`);
  const data = (b64?: string, file?: string) =>
    b64 ? Buffer.from(b64, 'base64') : file ? readFileSync(file) : undefined;
  return {
    server: cluster.server,
    ca: data(cluster['certificate-authority-data'], cluster['certificate-authority']) ?? '',
    cert: data(user['client-certificate-data'], user['client-certificate']),
    key: data(user['client-key-data'], user['client-key']),
    token: user.token,
    ...(cluster['tls-server-name'] ? { serverName: cluster['tls-server-name'] } : {}),
  };
}

function withQuery(path: string, query: Record<string, string | undefined>): string {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(query)) if (v !== undefined && v !== '') q.set(k, v);
  const s = q.toString();
  return s ? `${path}${path.includes('?') ? '&' : '?'}${s}` : path;
}

function apiError(method: string, path: string, status: number, text: string): KubeApiError {
  let reason = '';
  let message = text.slice(0, 300);
  try {
    const st = JSON.parse(text) as KubeStatus;
    reason = st.reason ?? '';
    message = st.message ?? message;
  } catch {
    /* not a Status */
  }
  return new KubeApiError(status, reason, `${method} ${path}: ${status} ${message}`);
}

async function readText(res: IncomingMessage): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const c of res) chunks.push(c as Buffer);
  return Buffer.concat(chunks).toString('utf8');
}

export class KubeClient {
  private readonly creds: () => KubeCredentials;

  /** Credentials as a function are read again for every connection (a rotating client certificate). */
  constructor(
    creds: KubeCredentials | (() => KubeCredentials),
    private readonly timeoutMs = 10_000,
  ) {
    this.creds = typeof creds === 'function' ? creds : () => creds;
  }

  /** A client for a kubeconfig file; with reload, the file (and the files it names) is read per connection. */
  static fromKubeconfig(path: string, opts: { reload?: boolean; timeoutMs?: number } = {}): KubeClient {
    return new KubeClient(
      opts.reload ? () => credentialsFromKubeconfig(path) : credentialsFromKubeconfig(path),
      opts.timeoutMs,
    );
  }

  /** Opens one request and resolves with the response head; the caller reads (or discards) the body. */
  private open(
    method: string,
    path: string,
    body: Buffer | undefined,
    o: { contentType?: string; accept?: string; signal?: AbortSignal; idleMs: number },
  ): Promise<IncomingMessage> {
    const creds = this.creds();
    const url = new URL(path, creds.server);
    const headers: Record<string, string | number> = {
      accept: o.accept ?? 'application/json',
      ...(body ? { 'content-type': o.contentType ?? 'application/json', 'content-length': body.length } : {}),
      ...(creds.token ? { authorization: `Bearer ${creds.token}` } : {}),
    };
    const tls = {
      ca: creds.ca || undefined,
      cert: creds.cert,
      key: creds.key,
      ...(creds.serverName ? { servername: creds.serverName } : {}),
    };
    return new Promise((resolve, reject) => {
      const req =
        url.protocol === 'http:'
          ? httpRequest(url, { method, headers, timeout: o.idleMs, signal: o.signal }, resolve)
          : httpsRequest(
              url,
              {
                method,
                headers,
                timeout: o.idleMs,
                signal: o.signal,
                ...tls,
                ...proxiedHttps(url.hostname, tls),
              },
              resolve,
            );
      req.on('timeout', () =>
        req.destroy(new Error(`${method} ${url.host}${url.pathname}: no answer within ${o.idleMs} ms`)),
      );
      req.on('error', reject);
      req.end(body);
    });
  }

  async request<T>(method: string, path: string, body?: unknown, opts: RequestOptions = {}): Promise<T> {
    const payload = body === undefined ? undefined : Buffer.from(JSON.stringify(body));
    const contentType = opts.contentType ?? (method === 'PATCH' ? 'application/merge-patch+json' : 'application/json');
    const res = await this.open(method, path, payload, { contentType, signal: opts.signal, idleMs: this.timeoutMs });
    const text = await readText(res);
    const status = res.statusCode ?? 0;
    const where = path.split('?')[0]!;
    if (status < 200 || status >= 300) throw apiError(method, where, status, text);
    try {
      return (text ? JSON.parse(text) : {}) as T;
    } catch {
      throw new Error(`${method} ${where}: response is not JSON`);
    }
  }

  /** A GET whose answer is text, not JSON (kube-apiserver's /metrics). */
  async getText(path: string, signal?: AbortSignal): Promise<string> {
    const res = await this.open('GET', path, undefined, { accept: 'text/plain', signal, idleMs: this.timeoutMs });
    const text = await readText(res);
    const status = res.statusCode ?? 0;
    if (status < 200 || status >= 300) throw apiError('GET', path.split('?')[0]!, status, text);
    return text;
  }

  get<T>(path: string, signal?: AbortSignal): Promise<T> {
    return this.request<T>('GET', path, undefined, { signal });
  }

  /** A GET that answers undefined when there is no such object (404) instead of throwing. */
  async find<T>(path: string, signal?: AbortSignal): Promise<T | undefined> {
    try {
      return await this.get<T>(path, signal);
    } catch (err) {
      if (err instanceof KubeApiError && err.status === 404) return undefined;
      throw err;
    }
  }

  /** DELETE an object; false when there was none (404). */
  async remove(path: string, signal?: AbortSignal): Promise<boolean> {
    try {
      await this.request('DELETE', path, undefined, { signal });
      return true;
    } catch (err) {
      if (err instanceof KubeApiError && err.status === 404) return false;
      throw err;
    }
  }

  list<T>(path: string, sel: Selectors = {}, signal?: AbortSignal): Promise<KubeList<T>> {
    return this.get<KubeList<T>>(
      withQuery(path, { fieldSelector: sel.fieldSelector, labelSelector: sel.labelSelector }),
      signal,
    );
  }

  /**
   * Server-side apply of a whole object (PATCH application/apply-patch+yaml; JSON is YAML).
   * The path comes from the object's apiVersion, kind, namespace and name.
   */
  apply<T extends KubeObject>(obj: T, opts: ApplyOptions = {}, signal?: AbortSignal): Promise<T> {
    return this.applyAt(objectPath(obj), obj, opts, signal);
  }

  /** Server-side apply to a path found elsewhere (e.g. by discovery, for kinds kctl does not know). */
  applyAt<T extends KubeObject>(objectPath: string, obj: T, opts: ApplyOptions = {}, signal?: AbortSignal): Promise<T> {
    const path = withQuery(objectPath, {
      fieldManager: opts.fieldManager ?? 'kctl',
      force: opts.force === false ? undefined : 'true',
    });
    return this.request<T>('PATCH', path, obj, { contentType: 'application/apply-patch+yaml', signal });
  }

  /**
   * One watch connection. Events are handed over one at a time; a handler's promise holds the
   * stream until it settles. Resolves when the server ends the stream (or signal aborts);
   * rejects with KubeApiError on an HTTP error or an ERROR event (410 Expired: list again).
   */
  async watch<T>(
    path: string,
    opts: WatchOptions,
    onEvent: (e: WatchEvent<T>) => void | Promise<void>,
    signal?: AbortSignal,
  ): Promise<void> {
    const timeoutSeconds = opts.timeoutSeconds ?? Math.round(300 * (1 + Math.random()));
    const url = withQuery(path, {
      watch: 'true',
      allowWatchBookmarks: 'true',
      resourceVersion: opts.resourceVersion,
      timeoutSeconds: String(timeoutSeconds),
      fieldSelector: opts.fieldSelector,
      labelSelector: opts.labelSelector,
    });
    const where = path.split('?')[0]!;
    let res: IncomingMessage;
    try {
      // A quiet watch sends nothing until the server closes it at timeoutSeconds; only a dead link stays silent longer.
      res = await this.open('GET', url, undefined, { signal, idleMs: (timeoutSeconds + 30) * 1000 });
    } catch (err) {
      if (signal?.aborted) return;
      throw err;
    }
    const status = res.statusCode ?? 0;
    if (status < 200 || status >= 300) throw apiError('GET', `${where} (watch)`, status, await readText(res));
    let buffered = '';
    try {
      for await (const chunk of res.setEncoding('utf8')) {
        buffered += chunk as string;
        let nl: number;
        while ((nl = buffered.indexOf('\n')) >= 0) {
          const line = buffered.slice(0, nl).trim();
          buffered = buffered.slice(nl + 1);
          if (!line) continue;
          const e = JSON.parse(line) as { type: WatchEventType | 'ERROR'; object: T };
          if (e.type === 'ERROR') {
            const st = e.object as KubeStatus;
            throw new KubeApiError(
              st.code ?? 500,
              st.reason ?? '',
              `GET ${where} (watch): ${st.code ?? ''} ${st.message ?? 'error event'}`,
            );
          }
          await onEvent({ type: e.type, object: e.object });
        }
      }
    } catch (err) {
      res.destroy();
      if (signal?.aborted) return;
      throw err;
    }
  }
}

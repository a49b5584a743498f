// A small Kubernetes API client over node:https for the handful of calls kctl makes itself
// (CSR approval, nodes, token secrets). Written by hand on purpose: the single executable
// starts faster without a full generated client, and these calls need nothing more.
import { readFileSync } from 'node:fs';
import { request } from 'node:https';
import { parse } from 'yaml';

export interface KubeCredentials {
  server: string;
  ca: string | Buffer;
  cert?: string | Buffer;
  key?: string | Buffer;
  token?: string;
}

export class KubeApiError extends Error {
  constructor(readonly status: number, readonly reason: string, message: string) {
    super(message);
  }
}

interface KubeconfigFile {
  clusters?: { cluster: { server: string; 'certificate-authority-data'?: string; 'certificate-authority'?: string } }[];
  users?: { user: { 'client-certificate-data'?: string; 'client-key-data'?: string; 'client-certificate'?: string; 'client-key'?: string; token?: string } }[];
}

/** First cluster and first user of a kubeconfig file (kctl writes single-entry files). */
export function credentialsFromKubeconfig(path: string): KubeCredentials {
  const kc = parse(readFileSync(path, 'utf8')) as KubeconfigFile;
  const cluster = kc.clusters?.[0]?.cluster;
  const user = kc.users?.[0]?.user;
  if (!cluster || !user) throw new Error(`${path} is not a usable kubeconfig (no cluster or user)`);
  const data = (b64?: string, file?: string) => (b64 ? Buffer.from(b64, 'base64') : file ? readFileSync(file) : undefined);
  return {
    server: cluster.server,
    ca: data(cluster['certificate-authority-data'], cluster['certificate-authority']) ?? '',
    cert: data(user['client-certificate-data'], user['client-certificate']),
    key: data(user['client-key-data'], user['client-key']),
    token: user.token,
  };
}

export class KubeClient {
  constructor(private readonly creds: KubeCredentials, private readonly timeoutMs = 10_000) {}

  async request<T>(method: string, path: string, body?: unknown): Promise<T> {
    const url = new URL(path, this.creds.server);
    const payload = body === undefined ? undefined : Buffer.from(JSON.stringify(body));
    return new Promise<T>((resolve, reject) => {
      const req = request(url, {
        method,
        ca: this.creds.ca,
        cert: this.creds.cert,
        key: this.creds.key,
        timeout: this.timeoutMs,
        headers: {
          accept: 'application/json',
          ...(payload ? { 'content-type': method === 'PATCH' ? 'application/merge-patch+json' : 'application/json', 'content-length': payload.length } : {}),
          ...(this.creds.token ? { authorization: `Bearer ${this.creds.token}` } : {}),
        },
      }, (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => {
          const text = Buffer.concat(chunks).toString('utf8');
          const status = res.statusCode ?? 0;
          if (status >= 200 && status < 300) {
            try { resolve((text ? JSON.parse(text) : {}) as T); } catch { reject(new Error(`${method} ${url.pathname}: response is not JSON`)); }
            return;
          }
          let reason = '';
          let message = text.slice(0, 300);
          try { const st = JSON.parse(text) as { reason?: string; message?: string }; reason = st.reason ?? ''; message = st.message ?? message; } catch { /* not a Status */ }
          reject(new KubeApiError(status, reason, `${method} ${url.pathname}: ${status} ${message}`));
        });
      });
      req.on('timeout', () => req.destroy(new Error(`${method} ${url.host}${url.pathname}: no answer within ${this.timeoutMs} ms`)));
      req.on('error', reject);
      req.end(payload);
    });
  }

  get<T>(path: string): Promise<T> { return this.request<T>('GET', path); }
}

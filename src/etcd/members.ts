// etcd cluster membership through etcd's own JSON gateway on the client URL (/v3/cluster/...),
// with a client certificate: list, add a learner, promote, remove. No etcdctl child per call.
import { readFile } from 'node:fs/promises';
import { request } from 'node:https';
import { messageOf } from '../base/errors.ts';

export interface EtcdClientTls {
  /** https://host:port of a member's client URL. */
  url: string;
  caCert: string;
  clientCert: string;
  clientKey: string;
}

export interface EtcdMember {
  /** uint64 as a decimal string (JSON numbers cannot hold it). */
  id: string;
  name: string;
  peerURLs: string[];
  clientURLs: string[];
  isLearner: boolean;
}

export class EtcdError extends Error {}

interface RawMember {
  ID?: string;
  name?: string;
  peerURLs?: string[];
  clientURLs?: string[];
  isLearner?: boolean;
}

const member = (m: RawMember): EtcdMember => ({
  id: m.ID ?? '0',
  name: m.name ?? '',
  peerURLs: m.peerURLs ?? [],
  clientURLs: m.clientURLs ?? [],
  isLearner: m.isLearner ?? false,
});

async function call<T>(tls: EtcdClientTls, path: string, body: object, timeoutMs = 10_000): Promise<T> {
  const [ca, cert, key] = await Promise.all([readFile(tls.caCert), readFile(tls.clientCert), readFile(tls.clientKey)]);
  const payload = Buffer.from(JSON.stringify(body));
  return new Promise<T>((resolve, reject) => {
    const req = request(
      new URL(path, tls.url),
      {
        method: 'POST',
        ca,
        cert,
        key,
        headers: { 'content-type': 'application/json', 'content-length': payload.length },
        timeout: timeoutMs,
      },
      (res) => {
        let text = '';
        res.on('data', (c: Buffer) => (text += c.toString()));
        res.on('end', () => {
          let parsed: { error?: string; message?: string } & Record<string, unknown>;
          try {
            parsed = JSON.parse(text) as typeof parsed;
          } catch {
            reject(new EtcdError(`etcd ${path}: HTTP ${res.statusCode ?? '?'}: ${text.slice(0, 200)}`));
            return;
          }
          if (res.statusCode !== 200)
            reject(new EtcdError(`etcd ${path}: ${parsed.message ?? parsed.error ?? `HTTP ${res.statusCode ?? '?'}`}`));
          else resolve(parsed as T);
        });
      },
    );
    req.on('timeout', () =>
      req.destroy(new EtcdError(`etcd ${path}: no answer from ${tls.url} within ${timeoutMs / 1000} s`)),
    );
    req.on('error', (err) => reject(err instanceof EtcdError ? err : new EtcdError(`etcd ${path}: ${err.message}`)));
    req.end(payload);
  });
}

/** What etcd answers while it elects a leader (a member just died or left): worth a retry. */
const TRANSIENT = /leader changed|no leader|request timed out/;

/** Runs `fn` again while etcd answers with a transient error, for up to `forMs`; then the last error. */
export async function retryTransient<T>(fn: () => Promise<T>, forMs = 15_000): Promise<T> {
  const end = Date.now() + forMs;
  for (;;) {
    try {
      return await fn();
    } catch (err) {
      if (!TRANSIENT.test(messageOf(err)) || Date.now() > end) throw err;
      await new Promise((r) => setTimeout(r, 500));
    }
  }
}

/** The cluster's members (linearizable: fails without quorum). */
export async function listMembers(tls: EtcdClientTls, timeoutMs?: number): Promise<EtcdMember[]> {
  const r = await call<{ members?: RawMember[] }>(tls, '/v3/cluster/member/list', { linearizable: true }, timeoutMs);
  return (r.members ?? []).map(member);
}

/** Adds a learner with `peerUrl`; returns it and the members after the change. */
export async function addLearner(
  tls: EtcdClientTls,
  peerUrl: string,
): Promise<{ added: EtcdMember; members: EtcdMember[] }> {
  const r = await call<{ member?: RawMember; members?: RawMember[] }>(tls, '/v3/cluster/member/add', {
    peerURLs: [peerUrl],
    isLearner: true,
  });
  if (!r.member) throw new EtcdError('etcd member add: no member in the answer');
  return { added: member(r.member), members: (r.members ?? []).map(member) };
}

/** Promotes a learner to a voting member; etcd refuses until the learner has caught up. */
export async function promoteMember(tls: EtcdClientTls, id: string): Promise<void> {
  await call(tls, '/v3/cluster/member/promote', { ID: id });
}

export async function removeMember(tls: EtcdClientTls, id: string): Promise<void> {
  await call(tls, '/v3/cluster/member/remove', { ID: id });
}

/** etcd's --initial-cluster value for a member joining `members` (names as they will be once started). */
export function initialCluster(members: EtcdMember[], self: { id: string; name: string }): string {
  return members
    .map((m) => {
      const name = m.id === self.id ? self.name : m.name;
      return m.peerURLs.map((u) => `${name}=${u}`).join(',');
    })
    .filter((s) => s !== '')
    .join(',');
}

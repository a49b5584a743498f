// Join tokens on the controller side: bootstrap-token Secrets in kube-system (the
// bootstrapsigner and tokencleaner controllers of kube-controller-manager handle signing
// cluster-info and deleting expired tokens).
import { randomInt } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { joinHostPort } from '../base/addresses.ts';
import { parseDuration } from '../base/duration.ts';
import { UserError } from '../base/errors.ts';
import { encodeToken, type JoinRole } from '../join/token.ts';
import { KubeApiError, type KubeClient } from '../kube/client.ts';
import { apiServerUrl } from './bootstrap.ts';
import type { ClusterConfig } from './config.ts';
import { joinServerUrl } from './join-server.ts';

const ALPHABET = 'abcdefghijklmnopqrstuvwxyz0123456789';
const randomString = (n: number) => Array.from({ length: n }, () => ALPHABET[randomInt(ALPHABET.length)]).join('');
const ROLE_GROUP = (role: string) => `system:bootstrappers:kctl:${role}`;

export interface TokenSummary {
  id: string;
  role: string;
  expires: string | null;
  description: string;
}

/** "24h", "30m", "7d", "90s"; "0" means the token never expires. */
export function parseExpiry(text: string): number {
  const ms = parseDuration(text, { days: true });
  if (ms === null || (ms === 0 && text !== '0') || (ms > 0 && ms < 1000))
    throw new UserError(`--expiry "${text}" is not a duration; use e.g. 30m, 24h or 7d (0 for never)`);
  return ms;
}

export function konnectivityAddress(cfg: ClusterConfig): string {
  return joinHostPort(cfg.spec.api.address, cfg.spec.konnectivity.agentPort);
}

export async function createToken(kube: KubeClient, cfg: ClusterConfig, caFile: string, role: JoinRole, expiryMs: number): Promise<string> {
  const id = randomString(6);
  const secret = randomString(16);
  const expiration = expiryMs ? new Date(Date.now() + expiryMs).toISOString().replace(/\.\d+Z$/, 'Z') : undefined;
  await kube.request('POST', '/api/v1/namespaces/kube-system/secrets', {
    apiVersion: 'v1',
    kind: 'Secret',
    type: 'bootstrap.kubernetes.io/token',
    metadata: { name: `bootstrap-token-${id}`, namespace: 'kube-system', labels: { 'kctl.dev/role': role } },
    stringData: {
      'token-id': id,
      'token-secret': secret,
      ...(expiration ? { expiration } : {}),
      // A worker token authenticates kubelet's TLS bootstrap to the API server. A controller token
      // authenticates to nothing but kctl's join endpoint, which reads this Secret itself.
      ...(role === 'worker'
        ? { 'usage-bootstrap-authentication': 'true', 'usage-bootstrap-signing': 'true', 'auth-extra-groups': ROLE_GROUP(role) }
        : { 'usage-bootstrap-authentication': 'false', 'usage-bootstrap-signing': 'false' }),
      description: `kctl ${role} join token`,
    },
  });
  return encodeToken({
    role,
    apiServers: [apiServerUrl(cfg)],
    ...(role === 'controller' ? { joinServers: [joinServerUrl(cfg)] } : {}),
    caPem: await readFile(caFile, 'utf8'),
    konnectivity: [konnectivityAddress(cfg)],
    bootstrapToken: `${id}.${secret}`,
    podCIDR: cfg.spec.network.podCIDR,
    clusterDomain: cfg.spec.network.clusterDomain,
    clusterDNS: cfg.spec.network.clusterDNS,
  });
}

interface SecretList {
  items: { metadata: { name: string; labels?: Record<string, string> }; data?: Record<string, string> }[];
}

export async function listTokens(kube: KubeClient): Promise<TokenSummary[]> {
  const list = await kube.get<SecretList>('/api/v1/namespaces/kube-system/secrets?fieldSelector=type%3Dbootstrap.kubernetes.io%2Ftoken');
  const dec = (v?: string) => (v ? Buffer.from(v, 'base64').toString('utf8') : '');
  // Only id, role and expiry leave this function: never the token secret.
  return list.items
    .map((s) => ({
      id: dec(s.data?.['token-id']),
      role: s.metadata.labels?.['kctl.dev/role'] ?? (dec(s.data?.['auth-extra-groups']).includes('kctl:worker') ? 'worker' : '-'),
      expires: dec(s.data?.expiration) || null,
      description: dec(s.data?.description),
    }))
    .sort((a, b) => a.id.localeCompare(b.id));
}

export async function invalidateToken(kube: KubeClient, id: string): Promise<void> {
  if (!/^[a-z0-9]{6}$/.test(id)) throw new UserError(`"${id}" is not a token id (6 characters a-z0-9); see kctl token list`);
  try {
    await kube.request('DELETE', `/api/v1/namespaces/kube-system/secrets/bootstrap-token-${id}`);
  } catch (err) {
    if (err instanceof KubeApiError && err.status === 404) throw new UserError(`no token with id ${id}; see kctl token list`);
    throw err;
  }
}

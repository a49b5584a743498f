// Join tokens on the controller side. Worker tokens are bootstrap-token Secrets in kube-system
// (the bootstrapsigner and tokencleaner controllers of kube-controller-manager handle signing
// cluster-info and deleting expired tokens); controller tokens are stored hashed by
// controller-tokens.ts. Both kinds share the token text and the id space of `kctl token`.
import { randomInt } from 'node:crypto';
import { parseDuration } from '../../base/duration.ts';
import { UserError } from '../../base/errors.ts';
import { encodeToken, type JoinRole } from '../../join/token.ts';
import { KubeApiError, type KubeClient } from '../../kube/client.ts';
import { apiServerUrl, frontDoorEndpoint, joinServerUrl, konnectivityAddress } from '../config/urls.ts';
import type { ClusterConfig } from '../config/config.ts';
import { CONTROLLER_TOKEN_DEFAULT_USES, ControllerTokenStore } from './controller-tokens.ts';
import { tokenSecretPath, workerTokenAnnotations, workerTokenRecord } from './worker-tokens.ts';

const ALPHABET = 'abcdefghijklmnopqrstuvwxyz0123456789';
const randomString = (n: number) => Array.from({ length: n }, () => ALPHABET[randomInt(ALPHABET.length)]).join('');
const ROLE_GROUP = (role: string) => `system:bootstrappers:kctl:${role}`;
/** The group every worker join token's bootstrap token is in. */
export const WORKER_TOKEN_GROUP = ROLE_GROUP('worker');

export interface TokenSummary {
  id: string;
  role: string;
  expires: string | null;
  description: string;
  /** Joins left; null when the token counts none (a worker token made without --uses). */
  usesLeft: number | null;
  /** Worker tokens: the only node name it may join as (--node-name). */
  nodeName?: string;
  /** Worker tokens: the nodes that joined with it. */
  joined?: string[];
}

/** "24h", "30m", "7d", "90s"; "0" means the token never expires. */
export function parseExpiry(text: string): number {
  const ms = parseDuration(text, { days: true });
  if (ms === null || (ms === 0 && text !== '0') || (ms > 0 && ms < 1000))
    throw new UserError(`--expiry "${text}" is not a duration; use e.g. 30m, 24h or 7d (0 for never)`);
  return ms;
}

/** --uses: a whole number of joins, at least 1. */
export function parseUses(text: string): number {
  if (!/^[1-9]\d{0,5}$/.test(text))
    throw new UserError(`--uses "${text}" is not a number of joins; use a whole number from 1`);
  return Number(text);
}

/**
 * `uses` counts joins: controller tokens default to 1 (controller-tokens.ts stores them), worker
 * tokens to unlimited. `nodeName` binds a worker token to one node name (a re-join of a reset host).
 */
export async function createToken(
  kube: KubeClient,
  cfg: ClusterConfig,
  o: { caPem: string; role: JoinRole; expiryMs: number; uses?: number; nodeName?: string },
): Promise<string> {
  const { role, expiryMs, uses, nodeName } = o;
  const id = randomString(6);
  const secret = randomString(16);
  const expiration = expiryMs ? new Date(Date.now() + expiryMs).toISOString().replace(/\.\d+Z$/, 'Z') : undefined;
  if (role === 'controller')
    await new ControllerTokenStore(kube).create({ id, secret, expiryMs, uses: uses ?? CONTROLLER_TOKEN_DEFAULT_USES });
  else
    await kube.request('POST', '/api/v1/namespaces/kube-system/secrets', {
      apiVersion: 'v1',
      kind: 'Secret',
      type: 'bootstrap.kubernetes.io/token',
      metadata: {
        name: `bootstrap-token-${id}`,
        namespace: 'kube-system',
        labels: { 'kctl.dev/role': role },
        annotations: workerTokenAnnotations({ nodeName, uses }),
      },
      stringData: {
        'token-id': id,
        'token-secret': secret,
        ...(expiration ? { expiration } : {}),
        // A worker token authenticates kubelet's TLS bootstrap to the API server.
        'usage-bootstrap-authentication': 'true',
        'usage-bootstrap-signing': 'true',
        'auth-extra-groups': ROLE_GROUP(role),
        description: `kctl ${role} join token`,
      },
    });
  return encodeToken({
    role,
    apiServers: [apiServerUrl(cfg)],
    ...(role === 'controller' ? { joinServers: [joinServerUrl(cfg)] } : {}),
    caPem: o.caPem,
    konnectivity: [konnectivityAddress(cfg)],
    bootstrapToken: `${id}.${secret}`,
    podCIDR: cfg.spec.network.podCIDR,
    clusterDomain: cfg.spec.network.clusterDomain,
    clusterDNS: cfg.spec.network.clusterDNS,
    // Nodes reach everything through the door; joining controllers reach the join endpoint there.
    frontDoor: frontDoorEndpoint(cfg),
  });
}

interface SecretList {
  items: {
    metadata: { name: string; labels?: Record<string, string>; annotations?: Record<string, string> };
    data?: Record<string, string>;
  }[];
}

export async function listTokens(kube: KubeClient): Promise<TokenSummary[]> {
  const list = await kube.get<SecretList>(
    '/api/v1/namespaces/kube-system/secrets?fieldSelector=type%3Dbootstrap.kubernetes.io%2Ftoken',
  );
  const dec = (v?: string) => (v ? Buffer.from(v, 'base64').toString('utf8') : '');
  // Only id, role, expiry and uses leave this function: never the token secret or its hash.
  const bootstrap = list.items.map((s) => {
    const role =
      s.metadata.labels?.['kctl.dev/role'] ??
      (dec(s.data?.['auth-extra-groups']).includes('kctl:worker') ? 'worker' : '-');
    // A controller token an older kctl stored as a bootstrap token: the join endpoint refuses it.
    const old = role === 'controller';
    const id = dec(s.data?.['token-id']);
    const rec = workerTokenRecord(id, s.metadata.annotations);
    return {
      id,
      role,
      expires: dec(s.data?.expiration) || null,
      description: old ? 'controller join token of an older kctl, refused: invalidate it' : dec(s.data?.description),
      usesLeft: old ? 0 : rec.uses === undefined ? null : Math.max(0, rec.uses - rec.joined.length),
      ...(old ? {} : { nodeName: rec.nodeName, joined: rec.joined }),
    };
  });
  const controller = (await new ControllerTokenStore(kube).list()).map((t) => ({
    id: t.id,
    role: 'controller',
    expires: t.expires,
    description: 'kctl controller join token',
    usesLeft: Math.max(0, t.uses - t.used),
  }));
  return [...bootstrap, ...controller].sort((a, b) => a.id.localeCompare(b.id));
}

export async function invalidateToken(kube: KubeClient, id: string): Promise<void> {
  if (!/^[a-z0-9]{6}$/.test(id))
    throw new UserError(`"${id}" is not a token id (6 characters a-z0-9); see kctl token list`);
  if (await new ControllerTokenStore(kube).delete(id)) return;
  try {
    await kube.request('DELETE', tokenSecretPath(id));
  } catch (err) {
    if (err instanceof KubeApiError && err.status === 404)
      throw new UserError(`no token with id ${id}; see kctl token list`);
    throw err;
  }
}

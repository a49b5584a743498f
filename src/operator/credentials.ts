// Credentials of a hosted cluster's service accounts kept on the management cluster, for programs
// there that read or write the tenant's API (an operator on the host watching a tenant). For each
// entry of spec.serviceAccounts the operator asks the hosted API for a token of that account
// (TokenRequest, TOKEN_LIFETIME_S), and keeps it as a kubeconfig in the Secret the entry names,
// in the cluster's namespace, owned by the cluster; it asks for a new one once a third of the
// lifetime is left. What the holder of such a Secret may do in the tenant is what the tenant's
// RBAC gives that account, nothing more. A Secret of an entry taken out of the spec is deleted.
import { messageOf } from '../base/errors.ts';
import { KubeApiError, type KubeClient } from '../kube/client.ts';
import { resourcePath } from '../kube/paths.ts';
import { renderKubeconfig } from '../pki/index.ts';
import { CLUSTER_LABEL, ownedNames, POD_API_PORT, secret, type KctlCluster } from './objects.ts';
import type { HostedAccess } from './hosted.ts';

/** How long a kept token lives. */
export const TOKEN_LIFETIME_S = 24 * 3600;
/** The label on a kept credentials Secret: the cluster whose account it holds. */
export const CREDENTIALS_LABEL = 'kctl.dev/credentials-of';
/** The annotation on it: when its token expires. */
const EXPIRES = 'kctl.dev/expires';

export interface KeptAccount {
  namespace: string;
  name: string;
  secretName: string;
}

interface SecretObject {
  metadata?: {
    name?: string;
    annotations?: Record<string, string>;
    labels?: Record<string, string>;
    ownerReferences?: { uid: string }[];
  };
}

/** Whether a token expiring at `expires` is renewed at `now`: once a third of its lifetime is left, or it is unknown. */
export function needsRenewal(expires: string | undefined, now: Date): boolean {
  const at = expires ? Date.parse(expires) : NaN;
  return Number.isNaN(at) || at - now.getTime() < (TOKEN_LIFETIME_S * 1000) / 3;
}

/** The URL programs on the management cluster reach the hosted API at: its Service, by name. */
export const inClusterUrl = (c: KctlCluster) =>
  `https://${c.metadata.name}.${c.metadata.namespace}.svc:${POD_API_PORT}`;

/**
 * Keeps every account's credentials current; the lines of what failed (an account whose
 * namespace the tenant lacks, a Secret name taken), none when all are kept.
 */
export async function keepCredentials(
  kube: KubeClient,
  hosted: HostedAccess,
  c: KctlCluster,
  apply: { fieldManager: string; force: boolean },
  now = new Date(),
): Promise<string[]> {
  const ns = c.metadata.namespace;
  const secretPath = (name?: string) => resourcePath({ apiVersion: 'v1', resource: 'secrets', namespace: ns, name });
  const kept = await kube.list<SecretObject>(secretPath(), {
    labelSelector: `${CREDENTIALS_LABEL}=${c.metadata.name}`,
  });
  const mine = (s: SecretObject) => s.metadata?.ownerReferences?.some((o) => o.uid === c.metadata.uid);
  const wanted = (c.spec.serviceAccounts ?? []) as KeptAccount[];
  const own = new Set(Object.values(ownedNames(c.metadata.name)));
  const failed: string[] = [];
  for (const a of wanted) {
    const who = `${a.namespace}/${a.name}`;
    if (own.has(a.secretName)) {
      failed.push(`${who}: Secret ${a.secretName} is one the cluster itself uses; name another`);
      continue;
    }
    let have: SecretObject | undefined;
    try {
      have = await kube.get<SecretObject>(secretPath(a.secretName));
    } catch (err) {
      if (!(err instanceof KubeApiError && err.status === 404)) throw err;
    }
    if (have && !mine(have)) {
      failed.push(`${who}: Secret ${a.secretName} exists and is not this cluster's; name another`);
      continue;
    }
    if (have && !needsRenewal(have.metadata?.annotations?.[EXPIRES], now)) continue;
    try {
      const token = await requestToken(hosted.client, a);
      const kubeconfig = renderKubeconfig({
        server: inClusterUrl(c),
        caPem: hosted.caPem,
        user: `${a.namespace}-${a.name}`,
        token: token.token,
      });
      const s = secret(c, a.secretName, {
        kubeconfig,
        token: token.token,
        'ca.crt': hosted.caPem,
        namespace: a.namespace,
      });
      Object.assign(s.metadata, {
        labels: { ...s.metadata.labels, [CREDENTIALS_LABEL]: c.metadata.name },
        annotations: { [EXPIRES]: token.expires },
      });
      await kube.apply(s, apply);
    } catch (err) {
      failed.push(`${who}: ${messageOf(err)}`);
    }
  }
  // Entries taken out of the spec: their Secrets go.
  const names = new Set(wanted.map((a) => a.secretName));
  for (const s of kept.items)
    if (s.metadata?.name && !names.has(s.metadata.name) && mine(s))
      await kube.request('DELETE', secretPath(s.metadata.name));
  return failed;
}

/** A token of the account, made in the tenant (the account too, when its namespace has none yet). */
async function requestToken(client: KubeClient, a: KeptAccount): Promise<{ token: string; expires: string }> {
  const path = resourcePath({
    apiVersion: 'v1',
    resource: 'serviceaccounts',
    namespace: a.namespace,
    name: a.name,
  });
  try {
    await client.get(path);
  } catch (err) {
    if (!(err instanceof KubeApiError && err.status === 404)) throw err;
    await client.request(
      'POST',
      resourcePath({ apiVersion: 'v1', resource: 'serviceaccounts', namespace: a.namespace }),
      {
        apiVersion: 'v1',
        kind: 'ServiceAccount',
        metadata: { name: a.name, namespace: a.namespace, labels: { [CLUSTER_LABEL]: 'kept-credentials' } },
      },
    );
  }
  const r = await client.request<{ status: { token: string; expirationTimestamp: string } }>('POST', `${path}/token`, {
    apiVersion: 'authentication.k8s.io/v1',
    kind: 'TokenRequest',
    spec: { expirationSeconds: TOKEN_LIFETIME_S },
  });
  return { token: r.status.token, expires: r.status.expirationTimestamp };
}

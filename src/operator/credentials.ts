// Credentials of a hosted cluster's service accounts kept on the management cluster, for programs
// there that read or write the tenant's API (an operator on the host watching a tenant). For each
// entry of spec.serviceAccounts the operator asks the hosted API for a token of that account
// (TokenRequest, TOKEN_LIFETIME_S), and keeps it as a kubeconfig in the Secret the entry names,
// in the cluster's namespace, owned by the cluster; it asks for a new one once a third of the
// lifetime is left. What the holder of such a Secret may do in the tenant is what the tenant's
// RBAC gives that account, nothing more. Each token is bound to an anchor Secret the operator
// makes in the tenant (TokenRequest's boundObjectRef): when an entry is taken out of the spec, its
// anchor and its Secret are deleted, and kube-apiserver refuses the token from then on, not only
// once it expires. An anchor deleted or made again in the tenant gets a token bound to the new one.
import { messageOf } from '../base/errors.ts';
import type { KubeClient } from '../kube/client.ts';
import { resourcePath } from '../kube/paths.ts';
import { renderKubeconfig } from '../pki/index.ts';
import { CLUSTER_LABEL, ownedNames, POD_API_PORT, secret, secretPath, type KctlCluster } from './objects.ts';
import { KEPT_ANCHOR_PREFIX } from './crd.ts';
import type { HostedAccess } from './hosted.ts';

/** How long a kept token lives. */
export const TOKEN_LIFETIME_S = 24 * 3600;
/** The label on a kept credentials Secret: the cluster whose account it holds. */
export const CREDENTIALS_LABEL = 'kctl.dev/credentials-of';
/** The annotation on it: when its token expires. */
const EXPIRES = 'kctl.dev/expires';
/** The annotation on it: the tenant's anchor its token is bound to, as namespace/name/uid. */
const BOUND_TO = 'kctl.dev/bound-to';
/** The label on an anchor in the tenant: the management Secret whose token it holds alive. */
const ANCHOR_LABEL = 'kctl.dev/kept-credentials';

export interface KeptAccount {
  namespace: string;
  name: string;
  secretName: string;
}

interface SecretObject {
  metadata?: {
    name?: string;
    uid?: string;
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

/** The name of the anchor of the kept Secret `secretName`, in the tenant. */
const anchorName = (secretName: string) => `${KEPT_ANCHOR_PREFIX}${secretName}`;

/** The anchor of the kept Secret `secretName` in the tenant, in the account's namespace (without one: that namespace's Secrets). */
const anchorPath = (namespace: string, secretName?: string) =>
  resourcePath({
    apiVersion: 'v1',
    resource: 'secrets',
    namespace,
    ...(secretName ? { name: anchorName(secretName) } : {}),
  });

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
  const kept = await kube.list<SecretObject>(secretPath(c), {
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
    const have = await kube.find<SecretObject>(secretPath(c, a.secretName));
    if (have && !mine(have)) {
      failed.push(`${who}: Secret ${a.secretName} exists and is not this cluster's; name another`);
      continue;
    }
    try {
      const anchor = await hosted.client.find<SecretObject>(anchorPath(a.namespace, a.secretName));
      const bound = anchor && `${a.namespace}/${anchor.metadata?.name}/${anchor.metadata?.uid}`;
      const annotations = have?.metadata?.annotations;
      if (bound && annotations?.[BOUND_TO] === bound && !needsRenewal(annotations[EXPIRES], now)) continue;
      const token = await requestToken(hosted.client, a, anchor ?? (await makeAnchor(hosted.client, a)));
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
        annotations: { [EXPIRES]: token.expires, [BOUND_TO]: token.boundTo },
      });
      await kube.apply(s, apply);
    } catch (err) {
      failed.push(`${who}: ${messageOf(err)}`);
    }
  }
  // Entries taken out of the spec: their anchors go first (the token is refused from then on), then their Secrets.
  const names = new Set(wanted.map((a) => a.secretName));
  for (const s of kept.items) {
    const name = s.metadata?.name;
    if (!name || names.has(name) || !mine(s)) continue;
    const [namespace] = (s.metadata?.annotations?.[BOUND_TO] ?? '').split('/');
    try {
      if (namespace) await hosted.client.remove(anchorPath(namespace, name));
      await kube.remove(secretPath(c, name));
    } catch (err) {
      failed.push(`Secret ${name}, taken out of the spec: ${messageOf(err)}`);
    }
  }
  return failed;
}

/** The anchor a token of `a` is bound to, made in the tenant. */
async function makeAnchor(client: KubeClient, a: KeptAccount): Promise<SecretObject> {
  return client.request<SecretObject>('POST', anchorPath(a.namespace), {
    apiVersion: 'v1',
    kind: 'Secret',
    type: 'Opaque',
    metadata: {
      name: anchorName(a.secretName),
      namespace: a.namespace,
      labels: { [ANCHOR_LABEL]: a.secretName },
      annotations: {
        'kctl.dev/note': `the token of ${a.name} the management cluster keeps as Secret ${a.secretName} lives while this Secret does`,
      },
    },
  });
}

/** A token of the account bound to `anchor`, made in the tenant (the account too, when its namespace has none yet). */
async function requestToken(
  client: KubeClient,
  a: KeptAccount,
  anchor: SecretObject,
): Promise<{ token: string; expires: string; boundTo: string }> {
  const path = resourcePath({
    apiVersion: 'v1',
    resource: 'serviceaccounts',
    namespace: a.namespace,
    name: a.name,
  });
  if (!(await client.find(path)))
    await client.request(
      'POST',
      resourcePath({ apiVersion: 'v1', resource: 'serviceaccounts', namespace: a.namespace }),
      {
        apiVersion: 'v1',
        kind: 'ServiceAccount',
        metadata: { name: a.name, namespace: a.namespace, labels: { [CLUSTER_LABEL]: 'kept-credentials' } },
      },
    );
  const { name, uid } = anchor.metadata ?? {};
  const r = await client.request<{ status: { token: string; expirationTimestamp: string } }>('POST', `${path}/token`, {
    apiVersion: 'authentication.k8s.io/v1',
    kind: 'TokenRequest',
    spec: {
      expirationSeconds: TOKEN_LIFETIME_S,
      boundObjectRef: { apiVersion: 'v1', kind: 'Secret', name, uid },
    },
  });
  return { token: r.status.token, expires: r.status.expirationTimestamp, boundTo: `${a.namespace}/${name}/${uid}` };
}

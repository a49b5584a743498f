// A hosted cluster seen from the management cluster: its object, its config (the Secret the
// operator wrote), its CA and a client for its API (the admin kubeconfig Secret). What
// `kctl cluster` and the operator's status read. Whoever may read a cluster's Secrets in its
// namespace may use it: the same people who could read its CA key.
import { UserError } from '../base/errors.ts';
import { parseConfig, type ClusterConfig } from '../controller/config/config.ts';
import { createToken } from '../controller/join/tokens.ts';
import { credentialsFromKubeconfigText, KubeClient } from '../kube/client.ts';
import { isNodeReady } from '../kube/nodes.ts';
import { resourcePath } from '../kube/paths.ts';
import { parse } from 'yaml';
import { KCTL_CLUSTER } from './crd.ts';
import { isFull, ownedNames, secretPath, type KctlCluster } from './objects.ts';
import { kubernetesOfGitVersion } from './versions.ts';

/** How long a call to a hosted cluster's API may take before it counts as unanswered. */
const HOSTED_TIMEOUT_MS = 5_000;

interface SecretObject {
  data?: Record<string, string>;
}

const clustersPath = (namespace?: string) =>
  resourcePath({
    apiVersion: `${KCTL_CLUSTER.group}/${KCTL_CLUSTER.version}`,
    resource: KCTL_CLUSTER.plural,
    ...(namespace ? { namespace } : {}),
  });

export interface HostedAccess {
  client: KubeClient;
  caPem: string;
}

/**
 * A client for the hosted cluster's API and its CA, from the admin kubeconfig the operator keeps;
 * undefined before it made one.
 */
export async function hostedAccess(kube: KubeClient, c: KctlCluster): Promise<HostedAccess | undefined> {
  const name = ownedNames(c.metadata.name).kubeconfig;
  const s = await kube.find<SecretObject>(secretPath(c, name));
  const text = s?.data?.kubeconfig && Buffer.from(s.data.kubeconfig, 'base64').toString();
  return text ? accessFrom(text, `Secret ${name}`) : undefined;
}

/** A client for the hosted API and its CA, from an admin kubeconfig's text (`where` names it in errors). */
export function accessFrom(kubeconfig: string, where: string): HostedAccess {
  const creds = credentialsFromKubeconfigText(kubeconfig, where);
  return { client: new KubeClient(creds, HOSTED_TIMEOUT_MS), caPem: String(creds.ca ?? '') };
}

/** The hosted cluster's Nodes, all and Ready. */
export async function hostedNodes(client: KubeClient): Promise<{ total: number; ready: number }> {
  const nodes = await client.list<{ status?: { conditions?: { type: string; status: string }[] } }>('/api/v1/nodes');
  return { total: nodes.items.length, ready: nodes.items.filter((n) => isNodeReady(n)).length };
}

/** The Kubernetes version its kube-apiserver runs ("1.36.3"), or undefined if /version names none. */
export async function hostedKubernetes(client: KubeClient): Promise<string | undefined> {
  return kubernetesOfGitVersion((await client.get<{ gitVersion?: string }>('/version')).gitVersion);
}

/** The KctlClusters of one namespace, or of all. */
export async function listClusters(kube: KubeClient, namespace?: string): Promise<KctlCluster[]> {
  return (await kube.list<KctlCluster>(clustersPath(namespace))).items;
}

/**
 * A worker join token for a hosted full cluster: a bootstrap token made in the cluster itself,
 * naming the address and ports its exposure gives (its config says them).
 */
export async function hostedWorkerToken(
  kube: KubeClient,
  ref: { namespace: string; name: string },
  o: { expiryMs: number; uses?: number; nodeName?: string },
): Promise<string> {
  const where = `${ref.namespace}/${ref.name}`;
  const c = await kube.find<KctlCluster>(`${clustersPath(ref.namespace)}/${ref.name}`);
  if (!c)
    throw new UserError(`no KctlCluster ${where} on the management cluster; kctl cluster list -A shows every cluster`);
  if (!isFull(c))
    throw new UserError(
      `KctlCluster ${where} is api-only (spec.config.profile): it has no nodes; a full cluster takes workers`,
    );
  const config = await hostedConfigOf(kube, c);
  const access = await hostedAccess(kube, c);
  const ready = c.status?.conditions as { type: string; status: string }[] | undefined;
  if (!config || !access || !ready?.some((x) => x.type === 'Ready' && x.status === 'True'))
    throw new UserError(
      `KctlCluster ${where} is not Ready yet; wait for it (kubectl wait --for=condition=Ready kc/${ref.name})`,
    );
  return createToken(access.client, config, { caPem: access.caPem, role: 'worker', ...o });
}

async function hostedConfigOf(kube: KubeClient, c: KctlCluster): Promise<ClusterConfig | undefined> {
  const name = ownedNames(c.metadata.name).config;
  const s = await kube.find<SecretObject>(secretPath(c, name));
  const text = s?.data?.['kctl.yaml'] && Buffer.from(s.data['kctl.yaml'], 'base64').toString();
  return text ? parseConfig(parse(text), `Secret ${name}`) : undefined;
}

// Joining: the token is decoded, checked against the cluster it names (TLS pinned to the
// token's CA, bootstrap token accepted by the API server), and only then written down, once.
// Later starts read what was written and ignore any token.
import { existsSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { writeFileAtomic } from '../base/fs.ts';
import { errnoOf, reasonOf, UserError } from '../base/errors.ts';
import { TLS_TRUST_ERRORS } from '../join/tls.ts';
import { decodeTokenFor, TokenError, tokenId, type JoinInfo } from '../join/token.ts';
import { KubeApiError, KubeClient } from '../kube/client.ts';
import type { Logger } from '../base/log.ts';
import { parse, stringify } from 'yaml';
import { writeKubeconfig } from '../pki/index.ts';
import { API_BALANCER_URL } from './api-balancer.ts';
import type { WorkerPaths } from './paths.ts';
import type { FrontDoorEndpoint } from '../base/addresses.ts';

export interface JoinState {
  apiServers: string[];
  konnectivity: string[];
  podCIDR?: string;
  clusterDomain?: string;
  clusterDNS?: string;
  /** The token's front door: the node reaches the API, its agent's server and the join endpoint there. */
  frontDoor?: FrontDoorEndpoint;
  joinedAt: string;
}

/** Asks the API server who the bootstrap token is; any failure becomes one clear line. */
export async function verifyWithCluster(info: JoinInfo): Promise<void> {
  // Through the front door when the token names one (the node may reach nothing else).
  const door = info.frontDoor;
  const server = door ? `https://${door.address}` : info.apiServers[0]!;
  const kube = new KubeClient(
    { server, ca: info.caPem, token: info.bootstrapToken, ...(door ? { serverName: door.api } : {}) },
    10_000,
  );
  let review: { status?: { userInfo?: { username?: string } } };
  try {
    review = await kube.request('POST', '/apis/authentication.k8s.io/v1/selfsubjectreviews', {
      apiVersion: 'authentication.k8s.io/v1',
      kind: 'SelfSubjectReview',
    });
  } catch (err) {
    const code = errnoOf(err) ?? '';
    if (err instanceof KubeApiError && err.status === 401) {
      throw new UserError(
        `the API server at ${server} rejected the join token (expired, invalidated or never issued); create a new one with: kctl token create --role worker`,
      );
    }
    if (TLS_TRUST_ERRORS.has(code)) {
      throw new UserError(
        `the API server at ${server} is not signed by the CA in the join token (${code}); the token was altered or belongs to another cluster`,
      );
    }
    throw new UserError(
      `cannot verify the join token with the API server at ${server}: ${reasonOf(err)}; check that the controller is running and reachable`,
    );
  }
  const user = review.status?.userInfo?.username;
  if (user !== `system:bootstrap:${tokenId(info.bootstrapToken)}`) {
    throw new UserError(
      `the API server at ${server} took the join token as "${user ?? 'nobody'}", not as a bootstrap token; create a new one with: kctl token create --role worker`,
    );
  }
}

/** Sets one field of every cluster in the node's kubeconfigs (the bootstrap one and the one kubelet wrote after TLS bootstrap). */
async function setKubeconfigsCluster(
  paths: WorkerPaths,
  field: 'server' | 'certificate-authority-data',
  value: string,
): Promise<void> {
  for (const file of [paths.bootstrapKubeconfig, paths.kubeletKubeconfig]) {
    if (!existsSync(file)) continue;
    const doc = parse(await readFile(file, 'utf8')) as { clusters?: { cluster?: Record<string, unknown> }[] } | null;
    const clusters = doc?.clusters ?? [];
    if (clusters.every((c) => c.cluster?.[field] === value)) continue;
    for (const c of clusters) if (c.cluster) c.cluster[field] = value;
    await writeFileAtomic(file, stringify(doc), 0o600);
  }
}

/** Points the node's kubeconfigs at `server`: workers that joined before the balancer existed move onto it at their next start. */
export function pointKubeconfigsAt(paths: WorkerPaths, server: string): Promise<void> {
  return setKubeconfigsCluster(paths, 'server', server);
}

/** Sets the CA every kubeconfig of the node embeds (after a CA rotation step, src/worker/ca-trust.ts). */
export function setKubeconfigsCa(paths: WorkerPaths, caPem: string): Promise<void> {
  return setKubeconfigsCluster(paths, 'certificate-authority-data', Buffer.from(caPem).toString('base64'));
}

function stateFile(paths: WorkerPaths): string {
  return `${paths.joinMarker}.json`;
}

export async function readJoinState(paths: WorkerPaths): Promise<JoinState | null> {
  if (!existsSync(paths.joinMarker)) return null;
  return JSON.parse(await readFile(stateFile(paths), 'utf8')) as JoinState;
}

/** `beforeWrite` runs once the token is known good (or not needed), before anything is written. */
export async function join(
  tokenText: string | undefined,
  paths: WorkerPaths,
  log: Logger,
  beforeWrite: () => Promise<void> = async () => undefined,
): Promise<JoinState> {
  const existing = await readJoinState(paths);
  if (existing) {
    if (tokenText) log.info('this worker has joined before; the token is not needed and is ignored');
    await beforeWrite();
    return existing;
  }
  if (!tokenText)
    throw new UserError(
      'this worker has not joined a cluster yet: pass --token or --token-file (from kctl token create --role worker)',
    );
  let info: JoinInfo;
  try {
    info = decodeTokenFor(tokenText, 'worker');
  } catch (err) {
    throw err instanceof TokenError ? new UserError(err.message) : err;
  }
  await verifyWithCluster(info);
  await beforeWrite();
  // Accepted: write down what later starts need. The marker goes last, so a crash here means "not joined".
  await writeFileAtomic(paths.caCert, info.caPem, 0o644);
  // kubelet reaches the API through the node-local balancer (api-balancer.ts), as everything on the node does.
  await writeKubeconfig(paths.bootstrapKubeconfig, {
    server: API_BALANCER_URL,
    caPem: info.caPem,
    user: `kubelet-bootstrap`,
    token: info.bootstrapToken,
    // Through a front door the balancer's upstream routes by this name; a direct API server ignores it.
    ...(info.frontDoor ? { serverName: info.frontDoor.api } : {}),
  });
  const state: JoinState = {
    apiServers: info.apiServers,
    konnectivity: info.konnectivity,
    podCIDR: info.podCIDR,
    clusterDomain: info.clusterDomain,
    clusterDNS: info.clusterDNS,
    ...(info.frontDoor ? { frontDoor: info.frontDoor } : {}),
    joinedAt: new Date().toISOString(),
  };
  await writeFileAtomic(stateFile(paths), JSON.stringify(state, null, 2) + '\n', 0o600);
  await writeFileAtomic(paths.joinMarker, `${state.joinedAt}\n`, 0o600);
  log.info({ apiServer: info.apiServers[0], tokenId: tokenId(info.bootstrapToken) }, 'joined the cluster');
  return state;
}

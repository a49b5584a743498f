// Kubeconfigs for someone outside the control plane (kctl kubeconfig create): an operator
// running elsewhere gets a bound service-account token (TokenRequest API) and the cluster CA, so
// it can do what its RBAC allows and nothing else; a person gets a client certificate from the
// cluster CA. Both expire; neither is written to disk by kctl.
import { readFile } from 'node:fs/promises';
import { UserError } from '../../base/errors.ts';
import { KubeApiError, type KubeClient } from '../../kube/client.ts';
import { issueUserCert, renderKubeconfig, type PkiPaths } from '../../pki/index.ts';
import { userApiUrl } from '../config/urls.ts';
import type { ClusterConfig } from '../config/config.ts';

/** The API's floor for a TokenRequest's lifetime. */
export const MIN_TOKEN_EXPIRY_MS = 10 * 60_000;

/** NAMESPACE/NAME of a service account, or a one-line error. */
export function parseServiceAccount(text: string): { namespace: string; name: string } {
  const m = /^([a-z0-9]([-a-z0-9]*[a-z0-9])?)\/([a-z0-9]([-a-z0-9.]*[a-z0-9])?)$/.exec(text);
  if (!m)
    throw new UserError(
      `--service-account "${text}" is not NAMESPACE/NAME of a service account, e.g. operators/watcher`,
    );
  return { namespace: m[1]!, name: m[3]! };
}

export async function serviceAccountKubeconfig(
  kube: KubeClient,
  cfg: ClusterConfig,
  pki: PkiPaths,
  sa: { namespace: string; name: string },
  expiryMs: number,
): Promise<string> {
  if (expiryMs < MIN_TOKEN_EXPIRY_MS)
    throw new UserError('--expiry for a service-account token must be at least 10m (the API refuses shorter ones)');
  let r: { status?: { token?: string } };
  try {
    r = await kube.request('POST', `/api/v1/namespaces/${sa.namespace}/serviceaccounts/${sa.name}/token`, {
      apiVersion: 'authentication.k8s.io/v1',
      kind: 'TokenRequest',
      spec: { expirationSeconds: Math.floor(expiryMs / 1000) },
    });
  } catch (err) {
    if (err instanceof KubeApiError && err.status === 404)
      throw new UserError(
        `service account ${sa.namespace}/${sa.name} does not exist; create it (kctl kubectl -n ${sa.namespace} create serviceaccount ${sa.name}) and bind the roles it needs`,
      );
    throw err;
  }
  const token = r.status?.token;
  if (!token) throw new Error('the TokenRequest answer carried no token');
  return renderKubeconfig({
    server: userApiUrl(cfg),
    caPem: await readFile(pki.caCert, 'utf8'),
    user: `system:serviceaccount:${sa.namespace}:${sa.name}`,
    token,
  });
}

export async function userKubeconfig(
  cfg: ClusterConfig,
  pki: PkiPaths,
  user: { name: string; groups: string[] },
  expiryMs: number,
): Promise<string> {
  if (!user.name.trim()) throw new UserError('--user needs a name, e.g. --user alice');
  if (expiryMs <= 0)
    throw new UserError(
      '--expiry for a user certificate must be a duration such as 720h; certificates cannot be revoked, so they must expire',
    );
  const { certPem, keyPem } = await issueUserCert(pki, user, new Date(Date.now() + expiryMs));
  return renderKubeconfig({
    server: userApiUrl(cfg),
    caPem: await readFile(pki.caCert, 'utf8'),
    user: user.name,
    certPem,
    keyPem,
  });
}

// Is this bearer token a given service account's, for a given audience? One TokenReview: what
// both konnectivity servers ask when an agent in a pod presents its projected token.
import type { KubeClient } from './client.ts';

export interface TokenVerdict {
  ok: boolean;
  user?: string;
  error?: string;
}

/** `system:serviceaccount:NS:NAME` for a namespace and a service account name. */
export const serviceAccountUser = (namespace: string, name: string): string =>
  `system:serviceaccount:${namespace}:${name}`;

/** A checker that accepts only `user`'s tokens issued for `audience`. */
export function serviceAccountTokenReview(
  kube: KubeClient,
  audience: string,
  user: string,
): (token: string) => Promise<TokenVerdict> {
  return async (token) => {
    const r = await kube.request<{
      status?: { authenticated?: boolean; user?: { username?: string }; error?: string };
    }>('POST', '/apis/authentication.k8s.io/v1/tokenreviews', {
      apiVersion: 'authentication.k8s.io/v1',
      kind: 'TokenReview',
      spec: { token, audiences: [audience] },
    });
    const got = r.status?.user?.username;
    if (r.status?.error) return { ok: false, error: r.status.error };
    if (!r.status?.authenticated) return { ok: false, error: 'token not authenticated' };
    if (got !== user) return { ok: false, user: got, error: `${got} is not ${user}` };
    return { ok: true, user: got };
  };
}

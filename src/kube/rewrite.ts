// Rewrites every object of a resource unchanged (list, then PUT each as read): kube-apiserver then
// stores it again with the first provider of its encryption config, which encrypts plain objects,
// moves objects to a new key, or writes them back in plain text. An update that changes nothing is
// still written when the object was read with a provider that is not the first. What
// `kubectl get secrets -A -o json | kubectl replace -f -` does, paged and without the round trip.
import { KubeApiError, type KubeClient } from './client.ts';

interface Listed {
  kind?: string;
  metadata?: { continue?: string };
  items: { metadata: { name: string; namespace?: string }; [k: string]: unknown }[];
}

/** Where a resource (secrets, or plural.group as EncryptionConfiguration names it) is served; null when it is not. */
async function resourceBase(
  kube: KubeClient,
  resource: string,
): Promise<{ base: string; apiVersion: string; plural: string } | null> {
  const dot = resource.indexOf('.');
  if (dot < 0) return { base: '/api/v1', apiVersion: 'v1', plural: resource };
  const [plural, group] = [resource.slice(0, dot), resource.slice(dot + 1)];
  const g = await kube.find<{ preferredVersion?: { groupVersion?: string } }>(`/apis/${group}`);
  const gv = g?.preferredVersion?.groupVersion;
  return gv ? { base: `/apis/${gv}`, apiVersion: gv, plural } : null;
}

/**
 * Rewrites every object of `resource`; returns how many were written. An object changed or
 * deleted since the list was read is skipped: whoever changed it wrote it with the first provider.
 */
export async function rewriteResource(kube: KubeClient, resource: string, signal?: AbortSignal): Promise<number> {
  const where = await resourceBase(kube, resource);
  if (!where) return 0;
  let written = 0;
  let next: string | undefined;
  do {
    const page = await kube.get<Listed>(
      `${where.base}/${where.plural}?limit=250${next ? `&continue=${encodeURIComponent(next)}` : ''}`,
      signal,
    );
    const kind = (page.kind ?? '').replace(/List$/, '');
    for (const item of page.items) {
      const { name, namespace } = item.metadata;
      const path = `${where.base}/${namespace ? `namespaces/${namespace}/` : ''}${where.plural}/${name}`;
      try {
        await kube.request('PUT', path, { ...item, apiVersion: where.apiVersion, kind }, { signal });
        written++;
      } catch (err) {
        if (!(err instanceof KubeApiError && (err.status === 409 || err.status === 404))) throw err;
      }
    }
    next = page.metadata?.continue || undefined;
  } while (next);
  return written;
}

// Which resource (plural, namespaced or not) serves a kind: asked of the API server's discovery
// endpoint per group/version and cached; asked again once on a miss, since a CRD may have just
// been created. For manifests kctl has not seen before (operators' own stacks).
import { KubeApiError, resourcePath, type KubeClient, type KubeObject } from './client.ts';

export interface KindInfo {
  resource: string;
  namespaced: boolean;
}

interface ResourceList {
  resources?: { name: string; kind: string; namespaced: boolean }[];
}

export class KindResolver {
  private readonly cache = new Map<string, Map<string, KindInfo>>();

  constructor(private readonly kube: KubeClient) {}

  private async load(apiVersion: string): Promise<Map<string, KindInfo>> {
    const path = apiVersion.includes('/') ? `/apis/${apiVersion}` : `/api/${apiVersion}`;
    const kinds = new Map<string, KindInfo>();
    try {
      const list = await this.kube.get<ResourceList>(path);
      for (const r of list.resources ?? [])
        if (!r.name.includes('/')) kinds.set(r.kind, { resource: r.name, namespaced: r.namespaced });
    } catch (err) {
      if (!(err instanceof KubeApiError && err.status === 404)) throw err;
    }
    this.cache.set(apiVersion, kinds);
    return kinds;
  }

  /** The kind's resource, or an Error saying the API server does not serve it. */
  async resolve(apiVersion: string, kind: string): Promise<KindInfo> {
    const known = this.cache.get(apiVersion)?.get(kind);
    if (known) return known;
    const info = (await this.load(apiVersion)).get(kind);
    if (!info) throw new Error(`the API server does not serve ${kind} in ${apiVersion}`);
    return info;
  }

  /** The object's path; namespaced objects without a namespace go to "default", as with kubectl. */
  async objectPath(obj: KubeObject): Promise<{ path: string; namespace?: string }> {
    const info = await this.resolve(obj.apiVersion, obj.kind);
    const namespace = info.namespaced ? (obj.metadata.namespace ?? 'default') : undefined;
    return {
      path: resourcePath({ apiVersion: obj.apiVersion, resource: info.resource, namespace, name: obj.metadata.name }),
      namespace,
    };
  }
}

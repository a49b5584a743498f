// What kctl keeps on a worker token beside Kubernetes' own bootstrap-token fields: the node name
// it was made for (--node-name), how many joins it allows (--uses) and which nodes joined with it.
// They live as annotations on the token's Secret in kube-system, which nodes cannot read; the
// CSR approver reads them when a kubelet's bootstrap CSR arrives and writes each join back
// (optimistic concurrency: two joins at once cannot both take a token's last use).
import { KubeApiError, type KubeClient } from '../../kube/client.ts';

/** A node name as Kubernetes allows it (a DNS subdomain). */
export const NODE_NAME = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;

export const NODE_NAME_ANNOTATION = 'kctl.dev/node-name';
export const USES_ANNOTATION = 'kctl.dev/uses';
export const JOINED_ANNOTATION = 'kctl.dev/joined-nodes';

/** Where a bootstrap token's Secret lives (worker tokens, and controller tokens of older kctl versions). */
export const tokenSecretPath = (id: string): string => `/api/v1/namespaces/kube-system/secrets/bootstrap-token-${id}`;

export interface WorkerTokenRecord {
  id: string;
  /** The only node name this token may join as (it may be registered already: a re-join). */
  nodeName?: string;
  /** Joins allowed; unlimited when unset. */
  uses?: number;
  /** Node names that joined with it, oldest first. */
  joined: string[];
}

interface TokenSecret {
  metadata: { name: string; resourceVersion?: string; annotations?: Record<string, string> };
}

/** The annotations a new worker token starts with. */
export function workerTokenAnnotations(o: { nodeName?: string; uses?: number }): Record<string, string> {
  return {
    ...(o.nodeName ? { [NODE_NAME_ANNOTATION]: o.nodeName } : {}),
    ...(o.uses !== undefined ? { [USES_ANNOTATION]: String(o.uses) } : {}),
  };
}

/** Reads a token's record off its Secret's annotations. */
export function workerTokenRecord(id: string, annotations: Record<string, string> | undefined): WorkerTokenRecord {
  const a = annotations ?? {};
  const uses = Number(a[USES_ANNOTATION]);
  return {
    id,
    nodeName: a[NODE_NAME_ANNOTATION] || undefined,
    uses: Number.isInteger(uses) && uses > 0 ? uses : undefined,
    joined: (a[JOINED_ANNOTATION] ?? '').split(',').filter(Boolean),
  };
}

/** Why this token may not join node `name` now, or undefined when it may. */
export function tokenRefusal(t: WorkerTokenRecord, name: string): string | undefined {
  if (t.nodeName !== undefined && t.nodeName !== name) return `token ${t.id} was made for node ${t.nodeName} only`;
  if (t.joined.includes(name)) return undefined; // the same join again (kubelet restarted before it registered)
  if (t.uses !== undefined && t.joined.length >= t.uses)
    return `token ${t.id} is used up (${t.uses} join${t.uses === 1 ? '' : 's'})`;
  return undefined;
}

export class WorkerTokenStore {
  constructor(private readonly kube: KubeClient) {}

  /** The token's record with the Secret's resourceVersion, or undefined when the token is gone. */
  async read(id: string): Promise<(WorkerTokenRecord & { resourceVersion?: string }) | undefined> {
    try {
      const s = await this.kube.get<TokenSecret>(tokenSecretPath(id));
      return { ...workerTokenRecord(id, s.metadata.annotations), resourceVersion: s.metadata.resourceVersion };
    } catch (err) {
      if (err instanceof KubeApiError && err.status === 404) return undefined;
      throw err;
    }
  }

  /**
   * Writes down that `name` joined with the token, if it is not written already. Fails with a
   * 409 when the Secret changed since `read` (another join came first): read and judge again.
   */
  async recordJoin(t: WorkerTokenRecord & { resourceVersion?: string }, name: string): Promise<void> {
    if (t.joined.includes(name)) return;
    await this.kube.request(
      'PATCH',
      tokenSecretPath(t.id),
      {
        metadata: {
          resourceVersion: t.resourceVersion,
          annotations: { [JOINED_ANNOTATION]: [...t.joined, name].join(',') },
        },
      },
      {
        contentType: 'application/merge-patch+json',
      },
    );
  }

  /** A token whose every use is taken is deleted: it authenticates nothing any more. */
  async consumeIfUsedUp(id: string): Promise<boolean> {
    const t = await this.read(id);
    if (!t || t.uses === undefined || t.joined.length < t.uses) return false;
    await this.kube.remove(tokenSecretPath(id));
    return true;
  }
}

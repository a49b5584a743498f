// Warning events kctl records on the objects a refusal concerns (a Node, a Secret), so that
// `kubectl describe` and `kubectl get events` show what kctl's logs say.
import type { KubeClient } from './client.ts';

export interface InvolvedObject {
  kind: string;
  name: string;
  /** Absent for cluster-scoped objects (a Node): the event then goes to `default`. */
  namespace?: string;
  uid?: string;
}

/** One Warning event on `involved`; resolves when written, rejects with the API's error. */
export async function warningEvent(
  kube: KubeClient,
  involved: InvolvedObject,
  reason: string,
  message: string,
  component: string,
): Promise<void> {
  const namespace = involved.namespace ?? 'default';
  const now = new Date().toISOString();
  await kube.request('POST', `/api/v1/namespaces/${namespace}/events`, {
    apiVersion: 'v1',
    kind: 'Event',
    metadata: { generateName: `${involved.name}.`, namespace },
    involvedObject: { apiVersion: 'v1', ...involved },
    reason,
    message,
    type: 'Warning',
    source: { component },
    firstTimestamp: now,
    lastTimestamp: now,
    count: 1,
  });
}

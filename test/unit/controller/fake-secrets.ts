// Secrets in kube-system behind a fake API server, with the API server's optimistic concurrency:
// a PUT whose resourceVersion is not the stored one gets 409 Conflict. Enough for the token stores.
import type { ServerResponse } from 'node:http';
import { KubeClient } from '../../../src/kube/client.ts';
import { fakeApiServer, json, type FakeApiServer, type SeenRequest } from '../kube/fake-apiserver.ts';

export interface StoredSecret {
  apiVersion?: string;
  kind?: string;
  type?: string;
  metadata: {
    name: string;
    namespace?: string;
    resourceVersion?: string;
    labels?: Record<string, string>;
    annotations?: Record<string, string>;
  };
  data?: Record<string, string>;
  stringData?: Record<string, string>;
}

export interface FakeSecrets {
  api: FakeApiServer;
  kube: KubeClient;
  secrets: Map<string, StoredSecret>;
  /** How many PUTs were answered 409. */
  conflicts: () => number;
}

const PREFIX = '/api/v1/namespaces/kube-system/secrets';

function status(res: ServerResponse, code: number, reason: string, message: string): void {
  json(res, code, { kind: 'Status', apiVersion: 'v1', status: 'Failure', code, reason, message });
}

function matches(s: StoredSecret, q: URLSearchParams): boolean {
  const field = q.get('fieldSelector');
  if (field && field !== `type=${s.type}`) return false;
  const label = q.get('labelSelector');
  if (label) {
    const [k, v] = label.split('=') as [string, string];
    if (s.metadata.labels?.[k] !== v) return false;
  }
  return true;
}

export async function fakeSecrets(t: { after: (fn: () => Promise<void>) => void }): Promise<FakeSecrets> {
  const secrets = new Map<string, StoredSecret>();
  let version = 1;
  let conflicts = 0;
  const handle = (req: SeenRequest, res: ServerResponse) => {
    if (!req.path.startsWith(PREFIX)) return status(res, 404, 'NotFound', `${req.path} not found`);
    const name = req.path.slice(PREFIX.length + 1);
    const stored = name ? secrets.get(name) : undefined;
    if (!name && req.method === 'GET')
      return json(res, 200, { items: [...secrets.values()].filter((s) => matches(s, req.query)) });
    if (!name && req.method === 'POST') {
      const s = JSON.parse(req.body) as StoredSecret;
      if (secrets.has(s.metadata.name))
        return status(res, 409, 'AlreadyExists', `secrets "${s.metadata.name}" already exists`);
      const data = { ...s.data };
      for (const [k, v] of Object.entries(s.stringData ?? {})) data[k] = Buffer.from(v).toString('base64');
      const created: StoredSecret = { ...s, data, metadata: { ...s.metadata, resourceVersion: String(version++) } };
      delete created.stringData;
      secrets.set(s.metadata.name, created);
      return json(res, 201, created);
    }
    if (!stored) return status(res, 404, 'NotFound', `secrets "${name}" not found`);
    if (req.method === 'GET') return json(res, 200, stored);
    if (req.method === 'DELETE') {
      secrets.delete(name);
      return json(res, 200, { kind: 'Status', status: 'Success' });
    }
    if (req.method === 'PUT') {
      const s = JSON.parse(req.body) as StoredSecret;
      if (s.metadata.resourceVersion !== stored.metadata.resourceVersion) {
        conflicts++;
        return status(
          res,
          409,
          'Conflict',
          'the object has been modified; please apply your changes to the latest version and try again',
        );
      }
      const updated = { ...s, metadata: { ...s.metadata, resourceVersion: String(version++) } };
      secrets.set(name, updated);
      return json(res, 200, updated);
    }
    return status(res, 405, 'MethodNotAllowed', req.method);
  };
  const api = await fakeApiServer(t, handle);
  return { api, kube: new KubeClient({ server: api.url }), secrets, conflicts: () => conflicts };
}

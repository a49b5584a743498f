// What tests and benchmarks do against a tenant's API: ask one HTTPS path for its status, and
// fill the tenant with a CRD (widgets.example.kctl.dev) and custom objects of it.
import type { Result } from 'execa';
import { request } from 'node:https';
import { setTimeout as sleep } from 'node:timers/promises';

/**
 * GET `path` on the API at 127.0.0.1:`port`: the HTTP status. TLS is checked against `ca` (null:
 * not checked, for an API whose CA the caller must not trust); `token` goes as a bearer token.
 * Rejects when the connection fails or nothing answers within `timeoutMs`.
 */
export function apiStatus(
  port: number,
  path: string,
  o: { ca: string | null; token?: string; timeoutMs?: number },
): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = request(
      {
        host: '127.0.0.1',
        port,
        path,
        timeout: o.timeoutMs ?? 10_000,
        headers: o.token === undefined ? {} : { authorization: `Bearer ${o.token}` },
        ...(o.ca ? { ca: o.ca } : { rejectUnauthorized: false }),
      },
      (res) => {
        res.resume();
        resolve(res.statusCode ?? 0);
      },
    );
    req.on('error', reject);
    req.on('timeout', () => req.destroy(new Error(`no answer from 127.0.0.1:${port}${path}`)));
    req.end();
  });
}

export const WIDGET_CRD = {
  apiVersion: 'apiextensions.k8s.io/v1',
  kind: 'CustomResourceDefinition',
  metadata: { name: 'widgets.example.kctl.dev' },
  spec: {
    group: 'example.kctl.dev',
    names: { kind: 'Widget', plural: 'widgets', singular: 'widget' },
    scope: 'Namespaced',
    versions: [
      {
        name: 'v1',
        served: true,
        storage: true,
        schema: {
          openAPIV3Schema: {
            type: 'object',
            properties: { spec: { type: 'object', properties: { size: { type: 'integer' } } } },
          },
        },
      },
    ],
  },
};

/** A List of `n` widgets w0..w(n-1) in namespace `ns`. */
export function widgets(ns: string, n: number) {
  return {
    apiVersion: 'v1',
    kind: 'List',
    items: Array.from({ length: n }, (_, i) => ({
      apiVersion: 'example.kctl.dev/v1',
      kind: 'Widget',
      metadata: { name: `w${i}`, namespace: ns },
      spec: { size: i },
    })),
  };
}

/** Creates the widget CRD, waits until it is established (60 s at most), then `n` widgets in default; throws with kubectl's first error line. */
export async function createWidgets(
  kubectl: (args: string[], input?: string) => Promise<Result>,
  n: number,
): Promise<void> {
  const crd = await kubectl(['create', '-f', '-'], JSON.stringify(WIDGET_CRD));
  if (crd.exitCode !== 0) throw new Error(`creating the widget CRD failed: ${String(crd.stderr).split('\n')[0]}`);
  const end = Date.now() + 60_000;
  for (;;) {
    const r = await kubectl([
      'get',
      'crd',
      WIDGET_CRD.metadata.name,
      '-o',
      'jsonpath={.status.conditions[?(@.type=="Established")].status}',
    ]);
    if (String(r.stdout) === 'True') break;
    if (Date.now() > end) throw new Error('the widget CRD was not established within 60 s');
    await sleep(200);
  }
  // Without kubectl's own validation: it first fetches the whole OpenAPI document, which took
  // kube-apiserver more than kubectl's 32 s with ten tenants and another cluster starting on two
  // cores. kube-apiserver still checks every widget against the CRD's schema.
  const made = await kubectl(['create', '--validate=false', '-f', '-'], JSON.stringify(widgets('default', n)));
  if (made.exitCode !== 0) throw new Error(`creating ${n} widgets failed: ${String(made.stderr).split('\n')[0]}`);
}

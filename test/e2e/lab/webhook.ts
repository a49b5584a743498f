// A validating webhook served by a pod, called by kube-apiserver through the tunnel, and the pod
// helpers it shares with the add-ons test: the test tool's pods, pod lists, readiness, reachability.
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import type { TestContext } from 'node:test';
import type { Result } from 'execa';
import { selfSignedCert } from '../../helpers.ts';
import { waitFor } from '../../wait.ts';
import { pinnedPod } from './cluster.ts';
import type { LabHost } from './lab.ts';
import { TESTTOOL_IMAGE } from './testtool-image.ts';

type Kubectl = (args: string[], input?: string) => Promise<Result>;

export interface Pod {
  metadata: { name: string };
  spec: { nodeName?: string };
  status: { phase?: string; podIP?: string; conditions?: { type: string; status: string }[] };
}

export const podReady = (p: Pod) =>
  p.status.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') ?? false;

/** A pod of the test tool on `node`, running `args`. */
export const toolPod = (name: string, node: string, args: string[], labels: Record<string, string>) =>
  pinnedPod(name, node, labels, { image: TESTTOOL_IMAGE, args });

export async function pods(c: { kubectl: Kubectl }, ...selector: string[]): Promise<Pod[]> {
  const r = await c.kubectl(['get', 'pods', ...selector, '-o', 'json']);
  return r.exitCode === 0 ? (JSON.parse(String(r.stdout)) as { items: Pod[] }).items : [];
}

/** Whether `host` can open a TCP connection to ip:port (bash's /dev/tcp; dropped and refused both fail). */
export async function reachable(host: LabHost, ip: string, port: number): Promise<boolean> {
  const r = await host.run('timeout', ['3', 'bash', '-c', `exec 3<>/dev/tcp/${ip}/${port}`], { timeout: 10_000 });
  return r.exitCode === 0;
}

/**
 * A validating webhook served by a test-tool pod, on each of `nodes` in turn (the image must be in
 * their bundles): the pod's own node reaches it, the controller host does not, and kube-apiserver
 * admits and denies through the tunnel. `ok` runs kubectl and fails the test when it fails.
 */
export async function webhookCheck(
  t: TestContext,
  c: { kubectl: Kubectl },
  ok: (args: string[], input?: string) => Promise<string>,
  ctl: LabHost,
  hostOf: (name: string) => LabHost,
  dir: string,
  nodes: readonly string[],
): Promise<void> {
  // The test's own self-signed serving certificate for the webhook Service; the webhook configuration pins it.
  const { cert: crt, key } = selfSignedCert(dir, 'webhook', {
    cn: 'kctl-test-webhook.webhook-test.svc',
    san: 'DNS:kctl-test-webhook.webhook-test.svc',
  });
  const b64 = async (f: string) => (await readFile(f)).toString('base64');
  const ns = 'webhook-test';
  await ok(['create', 'namespace', ns]);
  await ok(['label', 'namespace', ns, 'kctl-test/webhook=on']);
  const objects = [
    {
      apiVersion: 'v1',
      kind: 'Secret',
      metadata: { name: 'webhook-tls', namespace: ns },
      type: 'kubernetes.io/tls',
      data: { 'tls.crt': await b64(crt), 'tls.key': await b64(key) },
    },
    {
      apiVersion: 'v1',
      kind: 'Service',
      metadata: { name: 'kctl-test-webhook', namespace: ns },
      spec: { selector: { app: 'webhook' }, ports: [{ port: 443, targetPort: 8443 }] },
    },
    {
      apiVersion: 'admissionregistration.k8s.io/v1',
      kind: 'ValidatingWebhookConfiguration',
      metadata: { name: 'kctl-test-webhook' },
      webhooks: [
        {
          name: 'deny-labelled.kctl.dev',
          admissionReviewVersions: ['v1'],
          sideEffects: 'None',
          failurePolicy: 'Fail',
          timeoutSeconds: 10,
          // Only the test namespace: a webhook that is down must not block the cluster.
          namespaceSelector: { matchLabels: { 'kctl-test/webhook': 'on' } },
          rules: [{ apiGroups: [''], apiVersions: ['v1'], operations: ['CREATE'], resources: ['configmaps'] }],
          clientConfig: {
            caBundle: await b64(crt),
            service: { name: 'kctl-test-webhook', namespace: ns, path: '/validate', port: 443 },
          },
        },
      ],
    },
  ];
  for (const o of objects) await ok(['apply', '-f', '-'], JSON.stringify(o));
  t.after(() => c.kubectl(['delete', 'validatingwebhookconfiguration', 'kctl-test-webhook']).then(() => undefined));

  for (const node of nodes) {
    const name = `webhook-${node}`;
    const pod = toolPod(name, node, ['webhook'], { app: 'webhook' });
    Object.assign(pod.metadata, { namespace: ns });
    Object.assign(pod.spec.containers[0]!, {
      ports: [{ containerPort: 8443 }],
      readinessProbe: { httpGet: { path: '/healthz', port: 8443, scheme: 'HTTPS' }, periodSeconds: 1 },
      volumeMounts: [{ name: 'tls', mountPath: '/tls', readOnly: true }],
    });
    Object.assign(pod.spec, { volumes: [{ name: 'tls', secret: { secretName: 'webhook-tls' } }] });
    await ok(['apply', '-f', '-'], JSON.stringify(pod));
    // Only this pod serves: the other worker's pod goes first.
    for (const other of nodes.filter((w) => w !== node))
      await c.kubectl(['-n', ns, 'delete', 'pod', `webhook-${other}`, '--wait=true', '--ignore-not-found']);
    const [running] = await waitFor(`webhook pod Ready on ${node}`, 120_000, async () => {
      const p = await pods(c, '-n', ns, '-l', 'app=webhook');
      return p.length === 1 && p[0]!.spec.nodeName === node && podReady(p[0]!) ? p : undefined;
    });
    // The pod's own node reaches it; the controller host does not: the API server must use the tunnel.
    assert.equal(
      await reachable(hostOf(node), running!.status.podIP!, 8443),
      true,
      `${node} cannot reach its own webhook pod`,
    );
    assert.equal(
      await reachable(ctl, running!.status.podIP!, 8443),
      false,
      `the controller host reached the webhook pod on ${node} directly`,
    );
    const cm = (n: string, deny: boolean) =>
      JSON.stringify({
        apiVersion: 'v1',
        kind: 'ConfigMap',
        metadata: { name: n, namespace: ns, labels: deny ? { 'kctl-test/deny': 'true' } : {} },
      });
    // Endpoints follow the pod within moments; until then the API server may still dial the old pod.
    await waitFor(
      `webhook on ${node} admits`,
      60_000,
      async () => (await c.kubectl(['create', '-f', '-'], cm(`ok-${node}`, false))).exitCode === 0,
    );
    const denied = await c.kubectl(['create', '-f', '-'], cm(`bad-${node}`, true));
    assert.notEqual(denied.exitCode, 0, `a labelled ConfigMap was admitted with the webhook on ${node}`);
    assert.match(
      String(denied.stderr),
      /denied the request: denied by the kctl test webhook: bad-w[ab] is labelled kctl-test\/deny=true/,
    );
    await ok(['-n', ns, 'get', 'configmap', `ok-${node}`]);
    // The reviews reached this pod (its log, read through the tunnel too).
    const log = await ok(['-n', ns, 'logs', name]);
    assert.match(log, new RegExp(`review bad-${node} from \\S+: allowed=false`), log);
  }
}

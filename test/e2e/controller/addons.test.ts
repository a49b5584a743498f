// The add-ons with the real parts: a controller and two workers isolated from it (the
// controller host has no path to a kubelet or a pod). CoreDNS answers pods on both workers,
// `kubectl top` works through metrics-server (an aggregated API the API server reaches only
// through the tunnel), a validating webhook served by a pod admits and denies through the
// tunnel wherever its pod runs, and turning CoreDNS off in the config removes it.
import assert from 'node:assert/strict';
import { copyFile, mkdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { test, type TestContext } from 'node:test';
import {
  controllerReady,
  labController,
  nodeReady,
  pinnedPod,
  startLabWorker,
  track,
  type LabController,
  type Tracked,
} from '../lab/cluster.ts';
import { type LabHost } from '../lab/lab.ts';
import { startLab } from '../lab/lab-test.ts';
import { waitFor } from '../../wait.ts';
import { TESTTOOL_TAR, testtoolImage } from '../lab/testtool-image.ts';
import { pods, podReady, reachable, toolPod, webhookCheck } from '../lab/webhook.ts';
import { BUSYBOX_IMAGE } from '../../../src/payload/images.ts';

const WORKERS = ['wa', 'wb'] as const;

/** A busybox pod on `node` with `labels` and a web server on :8080 serving its own name. */
const webPod = (name: string, node: string, labels: Record<string, string>) =>
  pinnedPod(name, node, labels, {
    image: BUSYBOX_IMAGE,
    command: ['sh', '-c', 'mkdir -p /www && echo $HOSTNAME > /www/index.html && exec httpd -f -p 8080 -h /www'],
  });

test('add-ons: CoreDNS on both workers, kubectl top through metrics-server, a webhook pod on either worker, CoreDNS off removes it', async (t: TestContext) => {
  const { lab, dir, kctlBin } = await startLab(t, 'ad', ['ctl', ...WORKERS], { dir: 'kctl-addons-', workers: WORKERS });
  const [ctl, wa, wb] = ['ctl', ...WORKERS].map((n) => lab.host(n)) as [LabHost, LabHost, LabHost];
  // What the test started, for their last lines when a wait fails.
  const procs: Tracked[] = [];
  const c = await labController(kctlBin, ctl, dir);
  const kubectl = c.kubectl;
  const ok = async (args: string[], input?: string) => {
    const r = await kubectl(args, input);
    assert.equal(r.exitCode, 0, `kubectl ${args.join(' ')}: ${String(r.stderr)}`);
    return String(r.stdout);
  };
  let controller = track(ctl.spawn(kctlBin, c.args));
  procs.push(controller);
  await controllerReady(controller);

  // Workers: isolated from the controller host; each also gets the test tool's image.
  const toolTar = await testtoolImage();
  for (const h of [wa, wb]) {
    await lab.isolate(h, ctl);
    await mkdir(join(dir, `${h.name}-data`, 'images'), { recursive: true });
    await copyFile(toolTar, join(dir, `${h.name}-data`, 'images', TESTTOOL_TAR));
  }
  const token = await c.createToken('1h');
  for (const h of [wa, wb]) procs.push(startLabWorker(kctlBin, h, dir, token));
  await waitFor(
    'both nodes Ready',
    300_000,
    async () => (await nodeReady(kubectl, 'wa')) && (await nodeReady(kubectl, 'wb')),
    () => procs.map((p) => p.log()).join('\n'),
  );

  // 1. CoreDNS: two replicas, one per worker (anti-affinity), behind kube-dns at the 10th service IP.
  await waitFor(
    'CoreDNS Ready on both workers',
    240_000,
    async () => {
      const dns = await pods(c, '-n', 'kube-system', '-l', 'k8s-app=kube-dns');
      return dns.length === 2 && dns.every(podReady) && new Set(dns.map((p) => p.spec.nodeName)).size === 2;
    },
    () => clusterState(c),
  );
  assert.equal(
    await ok(['-n', 'kube-system', 'get', 'service', 'kube-dns', '-o', 'jsonpath={.spec.clusterIP}']),
    '10.96.0.10',
  );
  // A Service with a cluster IP and a headless one over a web pod on each worker, and a test-tool
  // pod on each worker to resolve names as an application does (busybox's nslookup ignores the
  // search path, and its static wget cannot resolve at all).
  for (const h of WORKERS) {
    await ok(['apply', '-f', '-'], JSON.stringify(webPod(`web-${h}`, h, { app: 'web' })));
    await ok(['apply', '-f', '-'], JSON.stringify(toolPod(`tool-${h}`, h, ['sleep'], { app: 'tool' })));
  }
  for (const [name, clusterIP] of [
    ['web', undefined],
    ['web-headless', 'None'],
  ] as const)
    await ok(
      ['apply', '-f', '-'],
      JSON.stringify({
        apiVersion: 'v1',
        kind: 'Service',
        metadata: { name },
        spec: { clusterIP, selector: { app: 'web' }, ports: [{ port: 80, targetPort: 8080 }] },
      }),
    );
  await waitFor('web and tool pods running', 120_000, async () => {
    const all = await pods(c, '-l', 'app in (web,tool)');
    return all.length === 4 && all.every(podReady);
  });
  const webIps = (await pods(c, '-l', 'app=web')).map((p) => p.status.podIP!).sort();
  const webIp = await ok(['get', 'service', 'web', '-o', 'jsonpath={.spec.clusterIP}']);
  for (const h of WORKERS) {
    // kubelet gave the pods the cluster DNS server and the search path of their namespace.
    const resolv = await ok(['exec', `web-${h}`, '--', 'cat', '/etc/resolv.conf']);
    assert.match(resolv, /^nameserver 10\.96\.0\.10$/m, resolv);
    assert.match(resolv, /^search default\.svc\.cluster\.local svc\.cluster\.local cluster\.local/m, resolv);
    // nslookup (busybox) of full names; kubernetes.default and web through the search path.
    const nslookup = (name: string) => kubectl(['exec', `web-${h}`, '--', 'nslookup', name]);
    let last = '';
    const api = await waitFor(
      `nslookup kubernetes.default.svc.cluster.local from a pod on ${h}`,
      60_000,
      async () => {
        const r = await nslookup('kubernetes.default.svc.cluster.local');
        last = `exit ${r.exitCode}\n${String(r.stdout)}${String(r.stderr)}`;
        return r.exitCode === 0 ? String(r.stdout) : undefined;
      },
      () => last,
    );
    assert.match(api, /Address:\s*10\.96\.0\.1\b/, api);
    const svc = String((await nslookup('web.default.svc.cluster.local')).stdout);
    assert.ok(svc.includes(webIp), `${h}: web resolved to\n${svc}\nnot ${webIp}`);
    const headless = String((await nslookup('web-headless.default.svc.cluster.local')).stdout);
    for (const ip of webIps)
      assert.ok(headless.includes(ip), `${h}: web-headless resolved to\n${headless}\nwithout pod ${ip}`);
    const short = await kubectl([
      'exec',
      `tool-${h}`,
      '--',
      '/kctl-test-tool',
      'lookup',
      'kubernetes.default',
      'web',
      'web-headless',
    ]);
    assert.equal(short.exitCode, 0, `${h}: ${String(short.stdout)}${String(short.stderr)}`);
    const found = new Map(
      String(short.stdout)
        .trim()
        .split('\n')
        .map((l) => [l.split(' ')[0]!, l.split(' ').slice(1).sort()]),
    );
    assert.deepEqual(found.get('kubernetes.default'), ['10.96.0.1']);
    assert.deepEqual(found.get('web'), [webIp]);
    assert.deepEqual(found.get('web-headless'), webIps);
  }

  // 2. kubectl top: metrics-server runs on a worker; the controller host reaches neither it nor a kubelet.
  const [ms] = await waitFor(
    'metrics-server Ready',
    240_000,
    async () => {
      const p = await pods(c, '-n', 'kube-system', '-l', 'k8s-app=metrics-server');
      return p.length === 1 && podReady(p[0]!) ? p : undefined;
    },
    () => clusterState(c),
  );
  assert.ok(WORKERS.includes(ms!.spec.nodeName as 'wa'), `metrics-server on ${ms!.spec.nodeName}`);
  assert.equal(await lab.canConnect(ctl, wa, 10250), false, "the controller host reached wa's kubelet directly");
  assert.equal(await lab.canConnect(ctl, wb, 10250), false, "the controller host reached wb's kubelet directly");
  assert.equal(
    await reachable(ctl, ms!.status.podIP!, 10250),
    false,
    'the controller host reached the metrics-server pod directly',
  );
  const top = await waitFor(
    'kubectl top nodes',
    180_000,
    async () => {
      const r = await kubectl(['top', 'nodes', '--no-headers']);
      return r.exitCode === 0 &&
        WORKERS.every((n) => new RegExp(`^${n}\\s+\\d+m\\s+\\d+%\\s+\\d+Mi\\s+\\d+%`, 'm').test(String(r.stdout)))
        ? String(r.stdout)
        : undefined;
    },
    () => clusterState(c),
  );
  assert.match(top, /^wa\s/m);
  const topPods = await waitFor(
    'kubectl top pods -A',
    120_000,
    async () => {
      const r = await kubectl(['top', 'pods', '-A', '--no-headers']);
      const out = String(r.stdout);
      return r.exitCode === 0 &&
        WORKERS.every((h) => new RegExp(`^default\\s+web-${h}\\s+\\d+m\\s+\\d+Mi`, 'm').test(out))
        ? out
        : undefined;
    },
    () => clusterState(c),
  );
  assert.match(topPods, /^kube-system\s+coredns-\S+\s+\d+m\s+\d+Mi/m, topPods);

  // 3. A validating webhook served by a pod, on wa then on wb, called through the tunnel.
  await webhookCheck(t, c, ok, ctl, (n) => lab.host(n), dir, WORKERS);

  // 6. CoreDNS off: the controller restarts with the add-on disabled and its objects go.
  controller.child.kill('SIGTERM');
  assert.equal(await controller.exited, 0, controller.log());
  const cfg = join(dir, 'kctl.yaml');
  await writeFile(cfg, `${await readFile(cfg, 'utf8')}  addons:\n    coredns:\n      enabled: false\n`);
  controller = track(ctl.spawn(kctlBin, c.args));
  procs.push(controller);
  await controllerReady(controller, 'controller ready again');
  await waitFor('CoreDNS removed', 120_000, async () => {
    const left = await Promise.all([
      kubectl(['-n', 'kube-system', 'get', 'deployment', 'coredns']),
      kubectl(['-n', 'kube-system', 'get', 'service', 'kube-dns']),
      kubectl(['-n', 'kube-system', 'get', 'configmap', 'coredns']),
      kubectl(['get', 'clusterrole', 'system:coredns']),
    ]);
    return left.every((r) => r.exitCode !== 0 && /NotFound/.test(String(r.stderr)));
  });
  await waitFor(
    'CoreDNS pods gone',
    120_000,
    async () => (await pods(c, '-n', 'kube-system', '-l', 'k8s-app=kube-dns')).length === 0,
  );
  // metrics-server stays: only the disabled add-on goes.
  assert.equal((await pods(c, '-n', 'kube-system', '-l', 'k8s-app=metrics-server')).length, 1);
});

/** Pods, events and the add-on pods' logs: what a failed wait shows. */
async function clusterState(c: LabController): Promise<string> {
  const out = async (args: string[]) => {
    const r = await c.kubectl(args);
    return `$ kubectl ${args.join(' ')}\n${String(r.stdout)}${String(r.stderr)}`;
  };
  return [
    await out(['get', 'pods', '-A', '-o', 'wide']),
    await out(['get', 'events', '-A', '--sort-by=.lastTimestamp']),
    await out(['-n', 'kube-system', 'logs', '-l', 'k8s-app=kube-dns', '--tail=20', '--prefix']),
    await out(['-n', 'kube-system', 'logs', '-l', 'k8s-app=metrics-server', '--tail=20', '--prefix']),
  ].join('\n');
}

// Pods across sites: three workers in three subnets that only a router joins, and the router
// knows nothing of the pod CIDRs. In vxlan mode every pod reaches every other (ICMP, TCP) and a
// ClusterIP Service whose pods sit on the other sites; the router forwards only VXLAN between
// the nodes, never a pod address. Then the mode is switched live to routes (the controller
// restarted with the new mode; the workers follow without a restart), which cannot cross the
// router: the pods lose each other, and the switch back brings them together again.
import assert from 'node:assert/strict';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { test, type TestContext } from 'node:test';
import type { Result } from 'execa';
import { controllerReady, labController, runPinnedPod, startIsolatedWorker, track, type Tracked } from '../lab/cluster.ts';
import { startLab } from '../lab/lab-test.ts';
import type { LabHost } from '../lab/lab.ts';
import { waitFor } from '../lab/wait.ts';

const WORKERS = ['w1', 'w2', 'w3'] as const;
const text = (r: Result) => String(r.stdout).trim();

test('vxlan mode: pods on three sites behind one router reach each other and a Service; a live switch to routes and back', async (t: TestContext) => {
  const { lab, dir, kctlBin } = await startLab(t, 'podnet', ['ctl', 'router', ...WORKERS], {
    dir: 'kctl-podnet-',
    workers: WORKERS,
    sites: { w1: 1, w2: 2, w3: 3 },
    router: 'router',
  });
  const ctl = lab.host('ctl');
  const router = lab.host('router');
  const workers = WORKERS.map((n) => lab.host(n));
  // The sites reach each other only through the router.
  for (const w of workers) assert.ok(await lab.ping(workers[0]!, w), `${w.name} (${w.ip}) answers from w1 through the router`);

  const c = await labController(kctlBin, ctl, dir);
  const config = (mode: string) => writeFile(join(dir, 'kctl.yaml'), `spec:\n  api: { address: ${ctl.ip} }\n  network: { mode: ${mode} }\n`);
  await config('vxlan');
  let controller: Tracked = track(ctl.spawn(kctlBin, c.args));
  await controllerReady(controller);
  await Promise.all(workers.map((w) => startIsolatedWorker(kctlBin, lab, c, ctl, w, dir)));

  const kubectl = c.kubectl;
  for (const w of workers) await runPinnedPod(kubectl, `p-${w.name}`, w.name, 'up', true);
  const r = await kubectl(['label', 'pod', ...workers.map((w) => `p-${w.name}`), 'app=web']);
  assert.equal(r.exitCode, 0, String(r.stderr));
  const podIP = new Map<string, string>();
  for (const w of workers) podIP.set(w.name, text(await kubectl(['get', 'pod', `p-${w.name}`, '-o', 'jsonpath={.status.podIP}'])));
  const inPod = (from: LabHost, script: string) => kubectl(['exec', `p-${from.name}`, '--', 'sh', '-c', script]);

  // The router has no route to any pod: whatever crosses it between the sites is the overlay's.
  for (const ip of podIP.values()) assert.notEqual((await router.run('ip', ['route', 'get', ip])).exitCode, 0, `the router has a route to ${ip}`);
  const count = ['FORWARD', '-m', 'comment', '--comment'];
  await router.run('iptables', ['-w', '5', '-I', ...count, 'pod-in-clear', '-s', '10.244.0.0/16']);
  await router.run('iptables', ['-w', '5', '-I', ...count, 'vxlan', '-p', 'udp', '--dport', '8472']);
  const forwarded = async (rule: string): Promise<number> => {
    const out = text(await router.run('iptables', ['-w', '5', '-L', 'FORWARD', '-v', '-n', '-x']));
    const line = out.split('\n').find((l) => l.includes(`/* ${rule} */`));
    return Number(line?.trim().split(/\s+/)[0] ?? NaN);
  };

  // busybox-static's wget -T crashes (SIGSEGV); timeout bounds it instead.
  const reachable = async (from: LabHost, to: LabHost): Promise<{ ping: boolean; http: string }> => {
    const ip = podIP.get(to.name)!;
    const ping = (await inPod(from, `ping -c 1 -W 2 ${ip}`)).exitCode === 0;
    return { ping, http: text(await inPod(from, `timeout 5 wget -q -O - http://${ip}:8080/ || true`)) };
  };
  for (const from of workers)
    for (const to of workers.filter((w) => w !== from)) {
      const got = await reachable(from, to);
      assert.deepEqual(got, { ping: true, http: `p-${to.name}` }, `pod on ${from.name} -> pod on ${to.name} (${podIP.get(to.name)})`);
    }

  // The pods take the MTU of the path: the node's 1500 less VXLAN's 50.
  assert.equal(text(await inPod(workers[0]!, 'cat /sys/class/net/eth0/mtu')), '1450');

  // A ClusterIP Service over the three pods: from each pod, both other sites' pods answer through it.
  const svc = {
    apiVersion: 'v1',
    kind: 'Service',
    metadata: { name: 'web' },
    spec: { selector: { app: 'web' }, ports: [{ port: 80, targetPort: 8080 }] },
  };
  assert.equal((await kubectl(['apply', '-f', '-'], JSON.stringify(svc))).exitCode, 0);
  const clusterIP = text(await kubectl(['get', 'svc', 'web', '-o', 'jsonpath={.spec.clusterIP}']));
  for (const from of workers) {
    const others = workers.filter((w) => w !== from).map((w) => `p-${w.name}`);
    const seen = new Set<string>();
    await waitFor(`${from.name}'s pod reaches ${others.join(' and ')} through ${clusterIP}`, 60_000, async () => {
      const out = text(await inPod(from, `for i in 1 2 3 4 5 6 7 8 9 10; do timeout 3 wget -q -O - http://${clusterIP}/; done`));
      for (const name of out.split('\n')) seen.add(name.trim());
      return others.every((o) => seen.has(o));
    });
  }
  assert.ok((await forwarded('vxlan')) > 0, 'the router forwarded VXLAN between the nodes');
  assert.equal(await forwarded('pod-in-clear'), 0, 'the router never saw a pod address');

  // A host that is not a node cannot inject into the overlay: the nodes drop its VXLAN packets.
  const w1 = workers[0]!;
  await router.run('bash', ['-c', `echo injected > /dev/udp/${w1.ip}/8472`]);
  const dropped = text(await w1.run('iptables', ['-w', '5', '-L', 'KCTL-VXLAN-IN', '-v', '-n', '-x']));
  const dropLine = dropped.split('\n').find((l) => /\bDROP\b/.test(l));
  assert.ok(Number(dropLine?.trim().split(/\s+/)[0]) >= 1, `w1 dropped the router's VXLAN packet:\n${dropped}`);

  // Live switch: the controller restarts with routes; the workers follow without a restart.
  const restart = async (mode: string) => {
    controller.child.kill('SIGTERM');
    await controller.exited;
    await config(mode);
    controller = track(ctl.spawn(kctlBin, c.args));
    await controllerReady(controller);
  };
  const [a, b] = workers as [LabHost, LabHost];
  await restart('routes');
  await waitFor('the workers drop the VXLAN device', 60_000, async () => {
    const links = await Promise.all(workers.map((w) => w.run('ip', ['link', 'show', 'kctl-vxlan'])));
    return links.every((l) => l.exitCode !== 0);
  });
  assert.deepEqual(await reachable(a, b), { ping: false, http: '' }, 'routes mode cannot cross a router that does not know the pod CIDRs');
  await restart('vxlan');
  await waitFor('pods reach each other again in vxlan mode', 60_000, async () => (await reachable(a, b)).http === `p-${b.name}`);
});

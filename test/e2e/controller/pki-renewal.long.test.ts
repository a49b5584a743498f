// Certificates renew themselves while kctl runs: with spec.pki.leafValidity 10m a controller and
// an isolated worker run for 25 minutes while `kubectl logs` and `kubectl exec` reach a pod on the
// worker every 5 s (through the tunnel). Every leaf certificate and kubeconfig of the controller
// and kubelet's client and serving certificates on the worker are renewed at least twice (their
// status says so), the listeners serve the renewed certificates, no request fails for more than
// 10 s in a row, and nothing restarts but what kctl restarts on purpose (kube-scheduler and
// kube-controller-manager, once per renewal of their kubeconfig). KCTL_PKI_RENEWAL_MINUTES
// shortens the run while developing (a full run is the test).
import assert from 'node:assert/strict';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import type { ComponentStatus } from '../../../src/base/component.ts';
import type { ControllerStatusReport } from '../../../src/controller/status.ts';
import type { CertificateStatus } from '../../../src/pki/index.ts';
import type { WorkerStatusReport } from '../../../src/worker/index.ts';
import { FULL_CONTROLLER_LEAVES } from '../../helpers.ts';
import { controllerReady, labController, probeKubectl, runPinnedPod, startIsolatedWorker, track } from '../lab/cluster.ts';
import type { LabHost } from '../lab/lab.ts';
import { startLab } from '../lab/lab-test.ts';
import { waitFor } from '../lab/wait.ts';
import { logsAndExec, longestFailureStreak, type ProbeResult } from '../lab/probe.ts';

const RUN_MS = Number(process.env.KCTL_PKI_RENEWAL_MINUTES ?? 25) * 60_000;
const EVERY_MS = 5_000;
const MAX_STREAK_MS = 10_000;
/** Restarted by the renewer on purpose: their kubeconfig's client certificate is read only at start. */
const RESTARTED_ON_PURPOSE = ['kube-scheduler', 'kube-controller-manager'];

/** The serial number of the certificate a TLS listener presents now (openssl prints it in hex, as Node does). */
async function servedSerial(host: LabHost, address: string, extra: string[] = []): Promise<string> {
  const r = await host.run('sh', [
    '-c',
    `openssl s_client -connect ${address} ${extra.join(' ')} </dev/null 2>/dev/null | openssl x509 -noout -serial`,
  ]);
  return hex(
    String(r.stdout)
      .trim()
      .replace(/^serial=/, ''),
  );
}

/** A serial number as one hex spelling (no leading zeros, upper case), whoever printed it. */
const hex = (serial: string | undefined): string => (serial ?? '').toUpperCase().replace(/^0+/, '');

const restarts = (components: ComponentStatus[]) => Object.fromEntries(components.map((c) => [c.name, c.restarts]));

test('with spec.pki.leafValidity 10m every certificate renews at least twice while logs and exec keep working', async (t) => {
  const { lab, dir, kctlBin } = await startLab(t, 'pkr', ['ctl', 'rnw'], { dir: 'kctl-pki-renewal-', workers: ['rnw'] });
  const ctl = lab.host('ctl');
  // Its own node name: kubelet's cgroups are named after the node, and other tests' workers run beside this one.
  const w1 = lab.host('rnw');
  const c = await labController(kctlBin, ctl, dir);
  // etcd storage (not --single's kine): etcd's serving certificates are renewed and reread too.
  await writeFile(join(dir, 'kctl.yaml'), `spec:\n  api: { address: ${ctl.ip} }\n  storage: { type: etcd }\n  pki: { leafValidity: 10m }\n`);
  const controller = track(
    ctl.spawn(
      kctlBin,
      c.args.filter((a) => a !== '--single'),
    ),
  );
  await controllerReady(controller);
  await startIsolatedWorker(kctlBin, lab, c, ctl, w1, dir);
  await runPinnedPod(c.kubectl, 'talker', 'rnw', 'hello-renewal');

  const status = async <T>(host: LabHost, runDir: string): Promise<T> => {
    const r = await host.run(kctlBin, ['status', '-o', 'json', '--run-dir', runDir], { timeout: 30_000 });
    assert.equal(r.exitCode, 0, String(r.stderr));
    return JSON.parse(String(r.stdout)) as T;
  };
  const controllerStatus = () => status<ControllerStatusReport>(ctl, c.runDir);
  const workerStatus = () => status<WorkerStatusReport>(w1, join(dir, 'rnw-run'));
  // The worker's kubelet certificates appear once its agent checked them.
  await waitFor('the worker lists kubelet certificates', 60_000, async () => ((await workerStatus()).certificates ?? []).length >= 3);
  const before = { controller: restarts((await controllerStatus()).components), worker: restarts((await workerStatus()).components) };

  // The loop: logs and exec every 5 s; every failure is kept with its time.
  const kubectl = probeKubectl(kctlBin, ctl, c.dataDir);
  const results: ProbeResult[] = [];
  const end = Date.now() + RUN_MS;
  while (Date.now() < end) {
    const started = Date.now();
    results.push(...(await logsAndExec(kubectl, 'talker', 'hello-renewal')));
    await sleep(Math.max(0, started + EVERY_MS - Date.now()));
  }

  const { longest } = longestFailureStreak(results);
  const failures = results.filter((r) => !r.ok);
  t.diagnostic(`${results.length} requests, ${failures.length} failed, longest failure streak ${longest} ms`);
  for (const f of failures.slice(0, 10)) t.diagnostic(`${new Date(f.at).toISOString()} ${f.what}`);
  assert.ok(longest <= MAX_STREAK_MS, `requests failed for ${longest} ms in a row:\n${failures.map((f) => f.what).join('\n')}`);

  const cs = await controllerStatus();
  const ws = await workerStatus();
  const listing = (certs: CertificateStatus[]) => certs.map((x) => `${x.name} renewals=${x.renewals} notAfter=${x.notAfter}`).join('\n');
  t.diagnostic(`controller certificates:\n${listing(cs.certificates ?? [])}`);
  t.diagnostic(`worker certificates:\n${listing(ws.certificates ?? [])}`);
  const leaves = (cs.certificates ?? []).filter((x) => x.kind !== 'ca');
  // Every leaf and kubeconfig of a full controller with etcd, the join endpoint's and konnectivity's included.
  assert.deepEqual(leaves.map((x) => x.name).sort(), FULL_CONTROLLER_LEAVES);
  for (const x of [...leaves, ...(ws.certificates ?? []).filter((y) => y.kind !== 'ca')]) {
    assert.ok(x.renewals >= 2, `${x.name} renewed ${x.renewals} time(s)`);
    assert.ok(new Date(x.notAfter!).getTime() > Date.now(), `${x.name} expired ${x.notAfter}`);
  }
  for (const ca of (cs.certificates ?? []).filter((x) => x.kind === 'ca')) assert.equal(ca.renewals, 0, ca.name);
  assert.deepEqual(
    (ws.certificates ?? []).map((x) => x.name),
    ['ca.crt', 'kubelet-client', 'kubelet-serving'],
  );

  // The listeners serve the certificate the files hold now (kube-apiserver, the konnectivity agent
  // port and the join endpoint reloaded; etcd reads its files on every handshake).
  const serial = (name: string) => hex((cs.certificates ?? []).find((x) => x.name === name)?.serial);
  const pki = join(c.dataDir, 'pki');
  assert.equal(await servedSerial(ctl, `${ctl.ip}:6443`), serial('server.crt'), 'kube-apiserver');
  assert.equal(await servedSerial(ctl, `${ctl.ip}:9443`), serial('server.crt'), 'join endpoint');
  assert.equal(await servedSerial(ctl, `${ctl.ip}:8132`), serial('konnectivity.crt'), 'konnectivity agent port');
  const etcdClient = ['-cert', join(pki, 'apiserver-etcd-client.crt'), '-key', join(pki, 'apiserver-etcd-client.key')];
  assert.equal(await servedSerial(ctl, '127.0.0.1:2379', etcdClient), serial('etcd/server.crt'), 'etcd');

  // Nothing restarted but what the renewer restarts on purpose, once per renewal of its kubeconfig.
  const after = { controller: restarts(cs.components), worker: restarts(ws.components) };
  t.diagnostic(`restarts before ${JSON.stringify(before)} after ${JSON.stringify(after)}`);
  assert.deepEqual(after.worker, before.worker);
  for (const [name, n] of Object.entries(after.controller)) {
    if (!RESTARTED_ON_PURPOSE.includes(name)) assert.equal(n, before.controller[name], `${name} restarted`);
  }
  const renewalsOf = (name: string) => (cs.certificates ?? []).find((x) => x.name === name)?.renewals ?? -1;
  assert.equal(after.controller['kube-scheduler']! - before.controller['kube-scheduler']!, renewalsOf('scheduler.conf'));
  assert.equal(after.controller['kube-controller-manager']! - before.controller['kube-controller-manager']!, renewalsOf('controller-manager.conf'));
  assert.ok(
    cs.components.every((x) => x.state === 'running'),
    JSON.stringify(cs.components),
  );
});

// Certificates renew themselves in HA, one controller at a time: two controllers on etcd and an
// isolated worker, spec.pki.leafValidity 10m, 25 minutes of `kubectl logs` and `kubectl exec`
// every 5 s through each controller in turn. No request fails; every leaf and kubeconfig of both
// controllers is renewed at least twice; the controllers' renewal runs (from taking the turn to
// the last restarted component being ready) never overlap; nothing restarts but kube-scheduler
// and kube-controller-manager, once per renewal of their kubeconfig. Then `kctl pki rotate-ca` on
// c1: c2 and the worker follow through the API, while renewals go on; afterwards both controllers
// and the worker hold the new CA alone, their leaves are its, and logs and exec work through either
// controller. KCTL_PKI_RENEWAL_MINUTES shortens the run while developing.
import assert from 'node:assert/strict';
import { X509Certificate } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import type { ComponentStatus } from '../../../src/base/component.ts';
import type { ControllerStatusReport } from '../../../src/controller/status.ts';
import { nodeReady, probeKubectl, runPinnedPod, startLabWorker } from '../lab/cluster.ts';
import { HaLab, type LabCtl } from '../lab/ha-lab.ts';
import { startLab } from '../lab/lab-test.ts';
import { waitFor } from '../lab/wait.ts';
import { logsAndExec } from '../lab/probe.ts';

const RUN_MS = Number(process.env.KCTL_PKI_RENEWAL_MINUTES ?? 25) * 60_000;
const EVERY_MS = 5_000;
const RESTARTED_ON_PURPOSE = ['kube-scheduler', 'kube-controller-manager'];

const restarts = (components: ComponentStatus[]) => Object.fromEntries(components.map((c) => [c.name, c.restarts]));

test('in HA with spec.pki.leafValidity 10m the controllers renew one at a time and no request fails', async (t) => {
  const { lab, dir, kctlBin } = await startLab(t, 'pkrha', ['c1', 'c2', 'rnhw'], { dir: 'kctl-pki-renewal-ha-', workers: ['rnhw'] });
  const ha = new HaLab(kctlBin, dir);
  const spec = (name: string, ip: string) =>
    `  api: { address: ${ip} }\n  storage: { type: etcd, etcd: { memberName: ${name} } }\n  pki: { leafValidity: 10m }\n`;
  const c1 = await ha.controller(lab.host('c1'), spec('c1', lab.host('c1').ip));
  const c2 = await ha.controller(lab.host('c2'), spec('c2', lab.host('c2').ip));
  // Its own node name: kubelet's cgroups are named after the node, and other tests' workers run beside this one.
  const w1 = lab.host('rnhw');
  await ha.start(c1);
  const ctoken = await ha.run(c1, ['token', 'create', '--role', 'controller', '--expiry', '1h']);
  assert.equal(ctoken.exitCode, 0, String(ctoken.stderr));
  await ha.start(c2, await ha.tokenFile('controller.token', String(ctoken.stdout).trim()));
  await lab.isolate(w1, c1.host, c2.host);
  const wtoken = String((await ha.run(c1, ['token', 'create', '--role', 'worker'])).stdout).trim();
  const worker = startLabWorker(kctlBin, w1, dir, wtoken);
  const kubectl1 = (args: string[], input?: string) => ha.kubectl(c1, args, input);
  await waitFor('rnhw Ready', 300_000, () => nodeReady(kubectl1, 'rnhw'), worker.log);
  await runPinnedPod(kubectl1, 'talker', 'rnhw', 'hello-renewal');
  await ha.agentsFollow([c1, c2], ['rnhw']);
  const before = new Map<LabCtl, Record<string, number>>();
  for (const c of [c1, c2]) before.set(c, restarts((await ha.status(c)).components));

  const failures: string[] = [];
  let requests = 0;
  const end = Date.now() + RUN_MS;
  for (let i = 0; Date.now() < end; i++) {
    const started = Date.now();
    const c = i % 2 === 0 ? c1 : c2;
    const kubectl = probeKubectl(kctlBin, c.host, c.dataDir);
    for (const r of await logsAndExec(kubectl, 'talker', 'hello-renewal'))
      if (!r.ok) failures.push(`${new Date(r.at).toISOString()} ${r.what.replace(':', ` via ${c.host.name} (${(r.tookMs / 1000).toFixed(1)} s):`)}`);
    requests += 2;
    await sleep(Math.max(0, started + EVERY_MS - Date.now()));
  }
  t.diagnostic(`${requests} requests, ${failures.length} failed`);
  assert.deepEqual(failures, []);

  const reports = new Map<LabCtl, ControllerStatusReport>();
  for (const c of [c1, c2]) reports.set(c, await ha.status(c));
  for (const [c, r] of reports) {
    t.diagnostic(`${c.host.name}: ${(r.certificates ?? []).map((x) => `${x.name}=${x.renewals}`).join(' ')}`);
    t.diagnostic(`${c.host.name} renewal runs: ${JSON.stringify(r.pkiRenewals)}`);
    const leaves = (r.certificates ?? []).filter((x) => x.kind !== 'ca');
    assert.equal(leaves.length, 11, `${c.host.name}: ${leaves.map((x) => x.name).join()}`);
    for (const x of leaves) assert.ok(x.renewals >= 2, `${c.host.name}: ${x.name} renewed ${x.renewals} time(s)`);
    const now = restarts(r.components);
    const then = before.get(c)!;
    for (const [name, n] of Object.entries(now))
      if (!RESTARTED_ON_PURPOSE.includes(name)) assert.equal(n, then[name], `${c.host.name}: ${name} restarted`);
    const renewed = (name: string) => leaves.find((x) => x.name === name)!.renewals;
    assert.equal(now['kube-scheduler']! - then['kube-scheduler']!, renewed('scheduler.conf'), `${c.host.name}: kube-scheduler restarts`);
    assert.equal(
      now['kube-controller-manager']! - then['kube-controller-manager']!,
      renewed('controller-manager.conf'),
      `${c.host.name}: kube-controller-manager restarts`,
    );
  }
  // One controller at a time: no two renewal runs of different controllers overlap.
  const runs = [...reports.entries()].flatMap(([c, r]) =>
    (r.pkiRenewals ?? []).map((x) => ({ who: c.host.name, from: Date.parse(x.startedAt), to: Date.parse(x.finishedAt) })),
  );
  assert.ok(runs.filter((x) => x.who === 'c1').length >= 2 && runs.filter((x) => x.who === 'c2').length >= 2, JSON.stringify(runs));
  for (const a of runs)
    for (const b of runs)
      if (a.who < b.who) assert.ok(a.to <= b.from || b.to <= a.from, `renewals overlap: ${JSON.stringify(a)} and ${JSON.stringify(b)}`);

  // The CA rotates, run on c1 only.
  const oldCa = new X509Certificate(await readFile(join(c1.dataDir, 'pki/ca.crt')));
  const rotated = await ha.rotateCa(c1);
  t.diagnostic(rotated.progress);
  assert.equal(rotated.controllers.length, 2, rotated.progress);
  assert.deepEqual(rotated.nodes, ['rnhw']);
  const bundle = await readFile(join(c1.dataDir, 'pki/ca.crt'), 'utf8');
  const newCa = new X509Certificate(bundle);
  assert.equal(newCa.subject, `CN=${rotated.newCa}`);
  assert.notEqual(newCa.fingerprint256, oldCa.fingerprint256);
  for (const file of [join(c2.dataDir, 'pki/ca.crt'), join(dir, 'rnhw-data/pki/ca.crt')]) assert.equal(await readFile(file, 'utf8'), bundle, file);
  for (const c of [c1, c2]) {
    for (const leaf of ['server.crt', 'konnectivity.crt', 'apiserver-kubelet-client.crt']) {
      const cert = new X509Certificate(await readFile(join(c.dataDir, 'pki', leaf)));
      assert.ok(cert.checkIssued(newCa) && cert.verify(newCa.publicKey), `${c.host.name}: ${leaf} is not the new CA's`);
    }
    const kubectl = probeKubectl(kctlBin, c.host, c.dataDir);
    await waitFor(`logs and exec through ${c.host.name} after the rotation`, 60_000, async () =>
      (await logsAndExec(kubectl, 'talker', 'hello-renewal')).every((r) => r.ok),
    );
  }
});

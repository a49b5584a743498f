// Two edge sites that reuse one private range: workers sa and sb each sit alone behind their own
// NAT gateway at the same address (lab.ts NAT_HOST_IP), and only dial out. Both join and run pods;
// kube-apiserver reaches each kubelet by its node's name, so logs, exec and port-forward reach the
// right pod on each, in every pod network mode. The shared address is nobody's: kctl status shows
// the conflict, and each worker leaves the other's address out of its pod network with the reason.
// In wireguard mode (relayed through the controllers, as neither NAT lets the other in) the pods
// reach each other; in vxlan and routes mode the nodes are not joined by a guess. A node cannot
// name itself the keeper of the address; an admin can.
import assert from 'node:assert/strict';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { test, type TestContext } from 'node:test';
import type { Result } from 'execa';
import type { ControllerStatusReport } from '../../../src/controller/leases/status.ts';
import type { WorkerStatusReport } from '../../../src/worker/index.ts';
import { workerPaths } from '../../../src/worker/paths.ts';
import {
  controllerReady,
  labController,
  runPinnedPod,
  startIsolatedWorker,
  track,
  type Tracked,
} from '../lab/cluster.ts';
import { kctl } from '../lab/kctl.ts';
import { startLab } from '../lab/lab-test.ts';
import { NAT_HOST_IP, type LabHost } from '../lab/lab.ts';
import { waitFor } from '../../wait.ts';

const SITES = ['sa', 'sb'] as const;
const text = (r: Result) => String(r.stdout).trim();

test("two sites, one address: logs, exec and port-forward reach each node by name in every mode; pods meet in wireguard mode; the shared address is nobody's", async (t: TestContext) => {
  const { lab, dir, kctlBin } = await startLab(t, 'twos', ['ctl', 'gwa', 'gwb', ...SITES], {
    dir: 'kctl-twosites-',
    workers: SITES,
    nat: { sa: 'gwa', sb: 'gwb' },
  });
  const ctl = lab.host('ctl');
  const sites = SITES.map((n) => lab.host(n));
  for (const s of sites) assert.equal(s.ip, NAT_HOST_IP);
  // Out through their gateways only: the controller host has no way to either site.
  for (const s of sites) assert.ok(await lab.ping(s, ctl), `${s.name} reaches the controller host through its NAT`);
  assert.equal(await lab.ping(ctl, NAT_HOST_IP), false, `the controller host reaches ${NAT_HOST_IP}`);

  const c = await labController(kctlBin, ctl, dir);
  const config = (mode: string) =>
    writeFile(
      join(dir, 'kctl.yaml'),
      `spec:\n  api: { address: ${ctl.ip} }\n  network: { mode: ${mode}, relay: controllers }\n`,
    );
  await config('wireguard');
  let controller: Tracked = track(ctl.spawn(kctlBin, c.args));
  await controllerReady(controller);
  await Promise.all(sites.map((s) => startIsolatedWorker(kctlBin, lab, c, ctl, s, dir)));
  const kubectl = c.kubectl;
  for (const s of sites) await runPinnedPod(kubectl, `p-${s.name}`, s.name, `hello from ${s.name}`, true);
  for (const s of sites) {
    const addresses = text(
      await kubectl(['get', 'node', s.name, '-o', 'jsonpath={.status.addresses[?(@.type=="InternalIP")].address}']),
    );
    assert.equal(addresses, NAT_HOST_IP, `node ${s.name}'s InternalIP`);
  }

  /** Logs, exec and port-forward each reach the pod on its own node. */
  const tunnelReachesEach = async (mode: string) => {
    for (const s of sites) {
      const pod = `p-${s.name}`;
      assert.equal(text(await kubectl(['logs', pod])), `hello from ${s.name}`, `${mode}: logs of ${pod}`);
      const exec = await kubectl(['exec', pod, '--', 'cat', '/www/index.html']);
      assert.equal(text(exec), pod, `${mode}: exec in ${pod}: ${String(exec.stderr)}`);
      const pf = track(ctl.spawn(kctlBin, ['--data-dir', c.dataDir, 'kubectl', 'port-forward', `pod/${pod}`, ':8080']));
      try {
        const local = await waitFor(
          `${mode}: port-forward to ${pod}`,
          30_000,
          async () => /127\.0\.0\.1:(\d+) ->/.exec(pf.log())?.[1],
          pf.log,
        );
        const got = await waitFor(
          `${mode}: GET / through port-forward to ${pod}`,
          20_000,
          async () =>
            text(await ctl.run('/bin/busybox', ['wget', '-qO-', `http://127.0.0.1:${local}/`], { timeout: 10_000 })) ||
            undefined,
          pf.log,
        );
        assert.equal(got, pod, `${mode}: port-forward to ${pod}`);
      } finally {
        pf.child.kill('SIGTERM');
        await pf.exited;
      }
    }
  };
  await tunnelReachesEach('wireguard');

  // The shared address is a conflict nobody keeps; the tunnel gives it to neither agent.
  const status = async () =>
    JSON.parse(text(await kctl(['status', '-o', 'json', '--run-dir', c.runDir]))) as ControllerStatusReport;
  await waitFor('the conflict in kctl status', 30_000, async () =>
    ((await status()).addressConflicts ?? []).some(
      (x) => x.value === NAT_HOST_IP && x.nodes.join() === 'sa,sb' && x.keeper === undefined,
    ),
  );
  for (const a of (await status()).konnectivity?.agents ?? [])
    assert.ok(!a.accepted.ipv4.includes(NAT_HOST_IP), `agent ${a.id} was given ${NAT_HOST_IP}`);

  // Pods meet through the controllers: neither NAT lets the other's handshake in.
  const podIP = new Map<string, string>();
  for (const s of sites)
    podIP.set(s.name, text(await kubectl(['get', 'pod', `p-${s.name}`, '-o', 'jsonpath={.status.podIP}'])));
  const fetchFrom = async (from: LabHost, to: LabHost) =>
    text(
      await kubectl([
        'exec',
        `p-${from.name}`,
        '--',
        'sh',
        '-c',
        `timeout 5 wget -q -O - http://${podIP.get(to.name)}:8080/ || true`,
      ]),
    );
  await waitFor('the pods on both sites reach each other (wireguard, through the controllers)', 180_000, async () => {
    const [there, back] = [await fetchFrom(sites[0]!, sites[1]!), await fetchFrom(sites[1]!, sites[0]!)];
    return there === 'p-sb' && back === 'p-sa';
  });
  const networkOf = async (s: LabHost) =>
    (
      JSON.parse(
        text(
          await s.run(kctlBin, [
            '--data-dir',
            join(dir, `${s.name}-data`),
            '--run-dir',
            join(dir, `${s.name}-run`),
            'status',
            '-o',
            'json',
          ]),
        ),
      ) as WorkerStatusReport
    ).podNetwork;
  const refusal = async (s: LabHost, other: string) =>
    ((await networkOf(s))?.refusedPeers ?? []).find((r) => r.node === other && r.what === `address ${NAT_HOST_IP}`)
      ?.reason;
  assert.match(
    (await refusal(sites[0]!, 'sb')) ?? '',
    /^also reported by node sa \(conflict: nobody's until an admin resolves it\)$/,
  );
  const sa = (await networkOf(sites[0]!))?.peers.find((p) => p.node === 'sb');
  assert.equal(sa?.via, 'controllers', JSON.stringify(sa));
  assert.equal(sa?.address, undefined, "sa was given sb's address (its own) as a WireGuard allowed IP");

  // A node may not name itself the keeper; an admin may, and the conflict says who keeps it.
  const sbKubeconfig = workerPaths(join(dir, 'sb-data'), join(dir, 'sb-run')).kubeletKubeconfig;
  const self = await sites[1]!.run(kctlBin, [
    '--data-dir',
    join(dir, 'sb-data'),
    'kubectl',
    '--kubeconfig',
    sbKubeconfig,
    'annotate',
    'node',
    'sb',
    `kctl.dev/keeps-addresses=${NAT_HOST_IP}`,
  ]);
  assert.notEqual(self.exitCode, 0, 'node sb named itself the keeper');
  assert.match(String(self.stderr), /a node may not set its own kctl\.dev\/keeps-addresses/);
  assert.equal((await kubectl(['annotate', 'node', 'sa', `kctl.dev/keeps-addresses=${NAT_HOST_IP}`])).exitCode, 0);
  await waitFor('the conflict kept by sa', 30_000, async () =>
    ((await status()).addressConflicts ?? []).some((x) => x.value === NAT_HOST_IP && x.keeper === 'sa'),
  );
  assert.equal((await kubectl(['annotate', 'node', 'sa', 'kctl.dev/keeps-addresses-'])).exitCode, 0);

  // vxlan and routes join nodes by their addresses: the shared one is refused, not guessed.
  for (const mode of ['vxlan', 'routes']) {
    controller.child.kill('SIGTERM');
    await controller.exited;
    await config(mode);
    controller = track(ctl.spawn(kctlBin, c.args));
    await controllerReady(controller);
    await waitFor(`both workers in ${mode} mode`, 180_000, async () => {
      const nets = await Promise.all(sites.map(networkOf));
      return nets.every((n) => n?.mode === mode);
    });
    for (const [s, other] of [
      [sites[0]!, 'sb'],
      [sites[1]!, 'sa'],
    ] as const) {
      assert.match((await refusal(s, other)) ?? '', /conflict: nobody's/, `${mode}: ${s.name} on ${other}'s address`);
      const routes = text(await s.run('ip', ['-4', 'route', 'show', 'proto', '177']));
      const otherRange = text(await kubectl(['get', 'node', other, '-o', 'jsonpath={.spec.podCIDR}']));
      assert.ok(!routes.includes(otherRange), `${mode}: ${s.name} routes ${otherRange}: ${routes}`);
    }
    await tunnelReachesEach(mode);
  }
});

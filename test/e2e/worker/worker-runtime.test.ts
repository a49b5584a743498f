// The worker's runtime against a real controller, each on its own lab host: containerd with
// the bundled images, kubelet (TLS bootstrap with a bootstrap token), the CNI bridge for the
// node's podCIDR and kube-proxy. A busybox pod (the busybox its tag names) runs without any registry, and logs and exec
// work (direct API server -> kubelet here; through the tunnel is another test's business).
import { waitFor, type WaitOptions } from '../../wait.ts';
import assert from 'node:assert/strict';
import type { ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { copyFile, mkdir, readFile, readdir, readlink, rm, writeFile } from 'node:fs/promises';
import { basename, join } from 'node:path';
import { test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { stringify } from 'yaml';
import { buildImages } from '../../../assets/build-images.ts';
import { createLogger } from '../../../src/base/log.ts';
import { readEmbeddedPayload } from '../../../src/payload/payload.ts';
import { stageComponents } from '../../../src/payload/stage.ts';
import { renderKubeconfig } from '../../../src/pki/kubeconfig.ts';
import { cleanupContainerd, shimPids } from '../../../src/worker/containerd.ts';
import { BUNDLED_IMAGE_NAMES, PAUSE_IMAGE, WORKER_IMAGE_NAMES, BUSYBOX_IMAGE } from '../../../src/payload/images.ts';
import { ImagesComponent } from '../../../src/worker/images.ts';
import { kubeletCgroupRoot, removeCgroupRoot } from '../../../src/worker/kubelet.ts';
import { workerPaths } from '../../../src/worker/paths.ts';
import { root } from '../lab/kctl.ts';
import { startLab } from '../lab/lab-test.ts';

const NODE = 'wrt-worker';
const POD_CIDR = '10.244.0.0/16';

interface Proc {
  proc: ChildProcess;
  lines: string[];
  exited: Promise<void>;
}

function track(proc: ChildProcess): Proc {
  const lines: string[] = [];
  let buf = '';
  const onData = (c: Buffer) => {
    buf += c.toString();
    let i: number;
    while ((i = buf.indexOf('\n')) >= 0) {
      lines.push(buf.slice(0, i));
      buf = buf.slice(i + 1);
    }
  };
  proc.stdout?.on('data', onData);
  proc.stderr?.on('data', onData);
  const exited = new Promise<void>((resolve) => proc.once('exit', () => resolve()));
  return { proc, lines, exited };
}

/** Waiting on these processes: a failure shows their warnings and errors, and one that exits ends the wait. */
function whileRunning(procs: Proc[]): WaitOptions {
  return {
    stopIf: () => {
      const dead = procs.find((p) => p.proc.exitCode !== null || p.proc.signalCode !== null);
      return dead && `a process exited:\n${dead.lines.slice(-25).join('\n')}`;
    },
    log: () =>
      procs
        .map((p) =>
          p.lines
            .filter((l) => /"level":(40|50|60)/.test(l))
            .slice(-15)
            .join('\n'),
        )
        .join('\n---\n'),
  };
}

const randomId = (n: number) => {
  const abc = 'abcdefghijklmnopqrstuvwxyz0123456789';
  return [...randomBytes(n)].map((b) => abc[b % abc.length]).join('');
};

test(
  'worker runtime: node joins with a bootstrap token, becomes Ready, runs a bundled-image pod with logs and exec',
  { timeout: 600_000 },
  async (t) => {
    const images = await buildImages();
    const { lab, dir: base, kctlBin, beforeTeardown } = await startLab(t, 'wrt', ['ctl', 'wrk'], { dir: 'kctl-wrt-' });
    const ctl = lab.host('ctl');
    const wrk = lab.host('wrk');
    const cdata = join(base, 'controller');
    const paths = workerPaths(join(base, 'worker'), join(base, 'worker-run'));
    const procs: Proc[] = [];
    /** The worker, once it runs: the cleanup below stops it first. */
    const workers: Proc[] = [];
    // The admin kubeconfig points at the controller's lab address: kubectl runs on host ctl.
    const kubectl = (...args: string[]) =>
      ctl.run(kctlBin, ['--data-dir', cdata, 'kubectl', ...args], { timeout: 60_000 });
    const applyYaml = (doc: object) =>
      ctl.run(kctlBin, ['--data-dir', cdata, 'kubectl', 'apply', '-f', '-'], {
        input: stringify(doc),
        timeout: 60_000,
      });

    beforeTeardown(async () => {
      // Pods first (kubelet stops their containers), then the runtime, then whatever is left (the lab's teardown).
      const [worker] = workers;
      if (worker && worker.proc.exitCode === null) {
        await kubectl('delete', 'pod', '--all', '--wait=true', '--timeout=30s').catch(() => undefined);
        worker.proc.kill('SIGTERM');
        await Promise.race([worker.exited, sleep(45_000, undefined, { ref: false })]);
      }
      await cleanupContainerd(paths);
      await removeCgroupRoot(kubeletCgroupRoot(paths, NODE));
      // kubelet links container logs into the host's /var/log/containers; ours point into the data dir.
      for (const f of await readdir('/var/log/containers').catch(() => [] as string[])) {
        const target = await readlink(join('/var/log/containers', f)).catch(() => '');
        if (target.startsWith(base)) await rm(join('/var/log/containers', f), { force: true });
      }
    });

    // --- controller on host ctl
    const cfg = join(base, 'kctl.yaml');
    // No konnectivity agent runs in this test: kube-apiserver reaches kubelet directly (an
    // empty egress selector file means none), which the lab allows as long as it does not isolate.
    // Directly it must dial the node's address: the node's name resolves only through the tunnel.
    const api = {
      address: ctl.ip,
      extraArgs: { 'egress-selector-config-file': '', 'kubelet-preferred-address-types': 'InternalIP' },
    };
    await writeFile(
      cfg,
      stringify({
        apiVersion: 'kctl.dev/v1alpha1',
        kind: 'ClusterConfig',
        spec: { api, network: { podCIDR: POD_CIDR } },
      }),
    );
    // cwd: kubectl run by the controller without HOME writes .kube/cache relative to it.
    const controller = track(
      ctl.spawn(
        kctlBin,
        ['controller', '--config', cfg, '--data-dir', cdata, '--run-dir', join(base, 'controller-run')],
        { cwd: base },
      ),
    );
    procs.push(controller);
    await waitFor(
      'controller ready',
      300_000,
      () => controller.lines.some((l) => l.includes('"controller ready"')),
      whileRunning(procs),
    );

    // --- what `kctl worker --token` will do: a bootstrap token, and its kubeconfig + CA on the worker
    const tokenId = randomId(6);
    const tokenSecret = randomId(16);
    const secret = {
      apiVersion: 'v1',
      kind: 'Secret',
      type: 'bootstrap.kubernetes.io/token',
      metadata: { name: `bootstrap-token-${tokenId}`, namespace: 'kube-system' },
      stringData: {
        'token-id': tokenId,
        'token-secret': tokenSecret,
        'usage-bootstrap-authentication': 'true',
        'usage-bootstrap-signing': 'true',
        'auth-extra-groups': 'system:bootstrappers:kctl:worker',
        expiration: new Date(Date.now() + 3600_000).toISOString().replace(/\.\d+Z$/, 'Z'),
      },
    };
    const apply = await applyYaml(secret);
    assert.equal(apply.exitCode, 0, String(apply.stderr));

    const log = createLogger({ pretty: false, destination: process.stderr });
    log.level = 'warn';
    const payload = await readEmbeddedPayload(kctlBin);
    assert.ok(payload, `${kctlBin} carries no payload`);
    await stageComponents(payload, paths.binDir, ['worker'], log);
    await mkdir(paths.imagesDir, { recursive: true });
    for (const f of images) await copyFile(f, join(paths.imagesDir, basename(f)));
    await mkdir(paths.pkiDir, { recursive: true });
    const caPem = await readFile(join(cdata, 'pki', 'ca.crt'), 'utf8');
    await writeFile(paths.caCert, caPem);
    await writeFile(
      paths.bootstrapKubeconfig,
      renderKubeconfig({
        server: `https://${ctl.ip}:6443`,
        caPem,
        user: 'kubelet-bootstrap',
        token: `${tokenId}.${tokenSecret}`,
      }),
      { mode: 0o600 },
    );

    // --- the runtime components on host wrk
    const fixture = join(root, 'test/e2e/lab/fixtures/worker-runtime.ts');
    const opts = {
      dataDir: paths.dataDir,
      runDir: paths.runDir,
      nodeName: NODE,
      nodeIp: wrk.ip,
      clusterCIDR: POD_CIDR,
      labels: { 'kctl.dev/test': 'worker-runtime' },
    };
    const worker = track(
      wrk.spawn(process.execPath, ['--import', 'tsx', fixture, JSON.stringify(opts)], { cwd: root }),
    );
    workers.push(worker);
    procs.push(worker);
    await waitFor(
      'worker runtime ready',
      300_000,
      () => worker.lines.some((l) => l.includes('"worker runtime ready"')),
      whileRunning(procs),
    );

    // The bundled images are in containerd's CRI namespace, the sandbox image pinned; the proxy-agent image is not (it is for other clusters).
    const ctrImages = await wrk.run(join(paths.binDir, 'ctr'), [
      '--address',
      paths.containerdSocket,
      '-n',
      'k8s.io',
      'images',
      'ls',
    ]);
    for (const name of BUNDLED_IMAGE_NAMES) {
      const imported = new RegExp(name.replace(/[.]/g, '\\.'));
      if (WORKER_IMAGE_NAMES.has(name)) assert.match(String(ctrImages.stdout), imported);
      else assert.doesNotMatch(String(ctrImages.stdout), imported);
    }
    assert.match(
      String(ctrImages.stdout)
        .split('\n')
        .find((l) => l.startsWith(PAUSE_IMAGE)) ?? '',
      /io\.cri-containerd\.pinned=pinned/,
    );

    // A restart finds them already imported (same digests) and imports nothing again.
    assert.deepEqual(await new ImagesComponent({ paths, log }).importAll(), []);

    // The node registered with the bootstrap token's client certificate and becomes Ready.
    await waitFor(
      'node Ready',
      180_000,
      async () => {
        const r = await kubectl('get', 'node', NODE, '-o', 'jsonpath={.status.conditions[?(@.type=="Ready")].status}');
        return String(r.stdout) === 'True';
      },
      whileRunning(procs),
    );
    const node = JSON.parse(String((await kubectl('get', 'node', NODE, '-o', 'json')).stdout)) as {
      metadata: { labels: Record<string, string> };
      spec: { podCIDR: string };
      status: { addresses: { type: string; address: string }[] };
    };
    assert.equal(node.metadata.labels['kctl.dev/test'], 'worker-runtime');
    assert.deepEqual(node.status.addresses.find((a) => a.type === 'InternalIP')?.address, wrk.ip);
    assert.match(node.spec.podCIDR, /^10\.244\.\d+\.0\/24$/);
    const conflist = JSON.parse(await readFile(join(paths.cniConfDir, '10-kctl.conflist'), 'utf8')) as {
      plugins: { ipam?: { ranges: { subnet: string }[][] } }[];
    };
    assert.equal(conflist.plugins[0]?.ipam?.ranges[0]?.[0]?.subnet, node.spec.podCIDR);

    // kubelet's serving certificate: no approver runs in the controller yet, so the test approves it.
    await waitFor(
      'kubelet serving certificate',
      120_000,
      async () => {
        const csrs = JSON.parse(String((await kubectl('get', 'csr', '-o', 'json')).stdout)) as {
          items: {
            metadata: { name: string };
            spec: { signerName: string; username: string };
            status?: { conditions?: { type: string }[]; certificate?: string };
          }[];
        };
        const serving = csrs.items.filter(
          (c) => c.spec.signerName === 'kubernetes.io/kubelet-serving' && c.spec.username === `system:node:${NODE}`,
        );
        for (const c of serving)
          if (!c.status?.conditions?.length) await kubectl('certificate', 'approve', c.metadata.name);
        return (await readdir(paths.kubeletCertDir)).includes('kubelet-server-current.pem');
      },
      whileRunning(procs),
    );

    // A pod from the bundled busybox image, no registry.
    const pod = {
      apiVersion: 'v1',
      kind: 'Pod',
      metadata: { name: 'hello', namespace: 'default', labels: { app: 'hello' } },
      spec: {
        containers: [
          {
            name: 'bb',
            image: BUSYBOX_IMAGE,
            imagePullPolicy: 'Never',
            command: [
              'sh',
              '-c',
              'echo hello-from-kctl; mkdir -p /www; echo served-by-hello > /www/index.html; exec httpd -f -p 8080 -h /www',
            ],
            ports: [{ containerPort: 8080 }],
            // A name that is no shell identifier, as Kubernetes allows (ConfigMap and Secret keys).
            env: [{ name: 'data-1', value: 'kept' }],
          },
        ],
        terminationGracePeriodSeconds: 1,
      },
    };
    const podApply = await applyYaml(pod);
    assert.equal(podApply.exitCode, 0, String(podApply.stderr));
    await waitFor(
      'pod Running',
      180_000,
      async () => {
        const r = await kubectl('get', 'pod', 'hello', '-o', 'jsonpath={.status.phase}');
        return String(r.stdout) === 'Running';
      },
      whileRunning(procs),
    );

    const podIp = String((await kubectl('get', 'pod', 'hello', '-o', 'jsonpath={.status.podIP}')).stdout);
    const [net, bits] = node.spec.podCIDR.split('/');
    assert.equal(bits, '24');
    assert.ok(
      podIp.startsWith(net!.split('.').slice(0, 3).join('.') + '.'),
      `pod IP ${podIp} is not in ${node.spec.podCIDR}`,
    );

    const logs = await kubectl('logs', 'hello');
    assert.equal(logs.exitCode, 0, String(logs.stderr));
    assert.match(String(logs.stdout), /hello-from-kctl/);
    const exec = await kubectl('exec', 'hello', '--', 'sh', '-c', 'echo exec-ok; cat /etc/hostname');
    assert.equal(exec.exitCode, 0, String(exec.stderr));
    assert.equal(String(exec.stdout).trim(), 'exec-ok\nhello');
    // The image is the busybox its tag names, its wget takes -T (Debian bookworm's 1.35 crashed on
    // it), and its sh passes on variables whose names are no shell identifiers (Debian's drops them).
    const bb = await kubectl(
      'exec',
      'hello',
      '--',
      'sh',
      '-c',
      'busybox | head -1; wget -T 2 -q -O- http://127.0.0.1:1/; echo "wget exit $?"; env | grep -x data-1=kept',
    );
    assert.match(
      String(bb.stdout),
      new RegExp(`^BusyBox v${BUSYBOX_IMAGE.split(':').pop()}\\.`, 'm'),
      String(bb.stdout),
    );
    assert.match(String(bb.stdout), /^wget exit 1$/m, `${String(bb.stdout)}${String(bb.stderr)}`);
    assert.match(String(bb.stdout), /^data-1=kept$/m, `sh dropped data-1: ${String(bb.stdout)}`);

    // The pod is reachable from its node over the CNI bridge ...
    assert.ok(await lab.ping(wrk, podIp), `node cannot reach its pod at ${podIp}`);
    // (The lab host's own busybox, bookworm's 1.35, crashes on wget -T: execa's timeout bounds it.)
    const wget = async (url: string) =>
      String((await wrk.run('/bin/busybox', ['wget', '-q', '-O', '-', url], { timeout: 5000 })).stdout).trim();
    await waitFor(
      `pod answers on ${podIp}:8080`,
      30_000,
      async () => (await wget(`http://${podIp}:8080/`)) === 'served-by-hello',
      whileRunning(procs),
    );
    // ... and through a Service's cluster IP: kube-proxy's iptables rules in the worker's netns.
    const svc = await applyYaml({
      apiVersion: 'v1',
      kind: 'Service',
      metadata: { name: 'hello', namespace: 'default' },
      spec: { selector: { app: 'hello' }, ports: [{ port: 80, targetPort: 8080 }] },
    });
    assert.equal(svc.exitCode, 0, String(svc.stderr));
    const clusterIp = String((await kubectl('get', 'service', 'hello', '-o', 'jsonpath={.spec.clusterIP}')).stdout);
    await waitFor(
      'service answers on its cluster IP',
      60_000,
      async () => (await wget(`http://${clusterIp}/`)) === 'served-by-hello',
      whileRunning(procs),
    );
    assert.ok((await shimPids(paths)).length > 0);

    // Routes to other nodes' pod networks follow the Node objects: a (fake) second node on the
    // lab subnet gets a route via its InternalIP, and loses it when it goes away.
    const peerIp = lab.subnet.replace(/\.0\/24$/, '.99');
    const peer = await applyYaml({
      apiVersion: 'v1',
      kind: 'Node',
      metadata: { name: 'wrt-peer' },
      spec: { podCIDR: '10.244.200.0/24' },
    });
    assert.equal(peer.exitCode, 0, String(peer.stderr));
    const patch = await kubectl(
      'patch',
      'node',
      'wrt-peer',
      '--subresource=status',
      '--type=merge',
      '-p',
      JSON.stringify({ status: { addresses: [{ type: 'InternalIP', address: peerIp }] } }),
    );
    assert.equal(patch.exitCode, 0, String(patch.stderr));
    const routes = async () => String((await wrk.run('ip', ['-4', 'route', 'show', 'proto', '177'])).stdout).trim();
    await waitFor(
      'route to the peer node pod network',
      30_000,
      async () => (await routes()) === `10.244.200.0/24 via ${peerIp} dev eth0`,
      whileRunning(procs),
    );
    assert.equal((await kubectl('delete', 'node', 'wrt-peer')).exitCode, 0);
    await waitFor(
      'route to the deleted node removed',
      30_000,
      async () => (await routes()) === '',
      whileRunning(procs),
    );
  },
);

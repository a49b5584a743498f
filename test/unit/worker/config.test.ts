// What the worker components write for containerd, kubelet, CNI and kube-proxy: every path
// under the worker's own dirs, and the settings the hosts we run on need.
import assert from 'node:assert/strict';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { test } from 'node:test';
import { containerdConfig } from '../../../src/worker/containerd.ts';
import { kubeletArgs, kubeletCgroupRoot, kubeletConfiguration, recordCgroupRoot } from '../../../src/worker/kubelet.ts';
import { kubeProxyConfiguration } from '../../../src/worker/kube-proxy.ts';
import { desiredRoutes } from '../../../src/worker/overlay.ts';
import { routeArgs } from '../../../src/worker/pod-routes.ts';
import { nodeInfo } from '../../../src/worker/peers.ts';
import { RELAY_ANNOTATION, RELAY_LABEL } from '../../../src/worker/wireguard.ts';
import { cniConflist, masqueradeRule } from '../../../src/worker/cni.ts';
import { workerPaths } from '../../../src/worker/paths.ts';
import { tempDir } from '../../helpers.ts';

const paths = workerPaths('/data', '/run/w');

test('containerd config keeps every path under the worker dirs and uses our runc, CNI and pause image', () => {
  const toml = containerdConfig(paths);
  assert.match(toml, /^version = 4$/m);
  assert.match(toml, /^root = '\/data\/containerd'$/m);
  assert.match(toml, /^state = '\/run\/w\/containerd'$/m);
  assert.match(
    toml,
    /\[plugins\.'io\.containerd\.server\.v1\.grpc'\]\n\s+address = '\/run\/w\/containerd\/containerd\.sock'/,
  );
  // Through `current`: the shim of a container that outlived an upgrade keeps a runc path that
  // still exists once the previous version's directory is gone.
  assert.match(toml, /BinaryName = '\/data\/bin\/current\/runc'/);
  assert.match(toml, /SystemdCgroup = false/);
  assert.match(toml, /bin_dirs = \['\/data\/bin\/current\/cni'\]/);
  assert.match(toml, /conf_dir = '\/data\/cni\/net\.d'/);
  assert.match(toml, /sandbox = 'registry\.k8s\.io\/pause:3\.10'/);
  assert.match(toml, /restrict_oom_score_adj = false/);
  assert.match(containerdConfig(paths, { restrictOomScoreAdj: true }), /restrict_oom_score_adj = true/);
  // Nothing of the host's containerd, CNI or NRI setup.
  for (const hostPath of [
    '/etc/containerd',
    '/opt/cni',
    '/etc/cni',
    '/var/lib/containerd',
    '/run/containerd',
    '/opt/containerd',
  ]) {
    assert.ok(!toml.includes(`'${hostPath}`), `${hostPath} must not appear in the config`);
  }
});

test('kubelet configuration: node-scoped cgroup root, cgroup v1 allowed, webhook auth, relaxed eviction', () => {
  const cfg = kubeletConfiguration(
    { paths, nodeName: 'n1', nodeIp: '10.0.0.5', clusterDNS: ['10.96.0.10'], clusterDomain: 'example.local' },
    '/etc/resolv.conf',
  );
  assert.match(String(cfg.cgroupRoot), /^\/kctl\/n1-[0-9a-f]{8}$/);
  assert.equal(cfg.cgroupDriver, 'cgroupfs');
  assert.equal(cfg.failCgroupV1, false);
  assert.equal(cfg.containerRuntimeEndpoint, 'unix:///run/w/containerd/containerd.sock');
  assert.deepEqual(cfg.authentication, {
    anonymous: { enabled: false },
    webhook: { enabled: true, cacheTTL: '2m0s' },
    x509: { clientCAFile: '/data/pki/ca.crt' },
  });
  assert.equal((cfg.authorization as { mode: string }).mode, 'Webhook');
  assert.equal(cfg.serverTLSBootstrap, true);
  assert.equal(cfg.podLogsDir, '/data/pod-logs');
  assert.equal(cfg.healthzBindAddress, '127.0.0.1');
  assert.equal(cfg.imageGCHighThresholdPercent, 100);
  assert.deepEqual(cfg.clusterDNS, ['10.96.0.10']);
  assert.equal(cfg.clusterDomain, 'example.local');
  assert.equal((cfg.evictionHard as Record<string, string>)['nodefs.available'], '1%');
  assert.equal(kubeletConfiguration({ paths, nodeName: 'n1', nodeIp: '10.0.0.5' }, '').clusterDNS, undefined);
});

test('kubelet flags: bootstrap and node identity, labels and taints, extra args win', () => {
  const args = kubeletArgs({
    paths,
    nodeName: 'n1',
    nodeIp: '10.0.0.5',
    labels: { 'kctl.dev/pool': 'edge', zone: 'a' },
    taints: ['dedicated=edge:NoSchedule', 'gpu:NoExecute'],
    extraArgs: { '--v': '4', 'node-ip': '10.0.0.6' },
  });
  assert.ok(args.includes('--bootstrap-kubeconfig=/data/kubelet-bootstrap.conf'));
  assert.ok(args.includes('--kubeconfig=/data/kubelet.conf'));
  assert.ok(args.includes('--root-dir=/data/kubelet'));
  assert.ok(args.includes('--cert-dir=/data/kubelet/pki'));
  assert.ok(args.includes('--hostname-override=n1'));
  assert.ok(args.includes('--node-labels=kctl.dev/pool=edge,zone=a'));
  assert.ok(args.includes('--register-with-taints=dedicated=edge:NoSchedule,gpu:NoExecute'));
  assert.ok(args.includes('--v=4'));
  assert.deepEqual(
    args.filter((a) => a.startsWith('--node-ip=')),
    ['--node-ip=10.0.0.6'],
  );
  assert.ok(
    !kubeletArgs({ paths, nodeName: 'n1', nodeIp: '10.0.0.5' }).some(
      (a) => a.startsWith('--node-labels') || a.startsWith('--register-with-taints'),
    ),
  );
});

test('CNI conflist: bridge kctl0 for the node podCIDR, IPAM state under the data dir, portmap', () => {
  const c = cniConflist('10.244.3.0/24', paths) as { cniVersion: string; plugins: Record<string, unknown>[] };
  assert.equal(c.cniVersion, '1.0.0');
  const [bridge, portmap] = c.plugins;
  assert.equal(bridge?.type, 'bridge');
  assert.equal(bridge?.bridge, 'kctl0');
  assert.equal(bridge?.isGateway, true);
  assert.equal(
    bridge?.ipMasq,
    false,
    "the bridge must not masquerade other nodes' pod traffic (kctl's own rule does the rest)",
  );
  assert.equal(bridge?.hairpinMode, true);
  assert.deepEqual(bridge?.ipam, {
    type: 'host-local',
    ranges: [[{ subnet: '10.244.3.0/24' }]],
    routes: [{ dst: '0.0.0.0/0' }],
    dataDir: '/data/cni/state',
  });
  assert.deepEqual(portmap, { type: 'portmap', capabilities: { portMappings: true }, snat: true });
});

test('routes go to every other node that has a podCIDR and an InternalIP', () => {
  const routes = desiredRoutes(
    [
      { name: 'self', podCIDR: '10.244.0.0/24', internalIP: '10.0.0.1' },
      { name: 'b', podCIDR: '10.244.1.0/24', internalIP: '10.0.0.2' },
      { name: 'no-cidr', internalIP: '10.0.0.3' },
      { name: 'no-ip', podCIDR: '10.244.4.0/24' },
      { name: 'v6', podCIDR: 'fd00::/64', internalIP: 'fd00::1' },
    ],
    'self',
  );
  assert.deepEqual([...routes], [['10.244.1.0/24', { via: '10.0.0.2' }]]);
});

test("in vxlan mode a node routes each pod CIDR via that node's VTEP on kctl-vxlan; in wireguard mode on kctl-wg, to nodes with a key", () => {
  const key = Buffer.alloc(32, 7).toString('base64');
  const nodes = [
    { name: 'self', podCIDR: '10.244.0.0/24', internalIP: '10.0.0.1', wireguardKey: key },
    { name: 'b', podCIDR: '10.244.1.0/24', internalIP: '10.9.0.2', wireguardKey: key },
    { name: 'c', podCIDR: '10.244.7.0/24', internalIP: '10.8.0.3' },
  ];
  assert.deepEqual(
    [...desiredRoutes(nodes, 'self', 'vxlan')],
    [
      ['10.244.1.0/24', { via: '10.244.1.0', dev: 'kctl-vxlan' }],
      ['10.244.7.0/24', { via: '10.244.7.0', dev: 'kctl-vxlan' }],
    ],
  );
  assert.deepEqual([...desiredRoutes(nodes, 'self', 'wireguard')], [['10.244.1.0/24', { dev: 'kctl-wg' }]]);
  assert.deepEqual(routeArgs({ via: '10.244.1.0', dev: 'kctl-vxlan' }), [
    'via',
    '10.244.1.0',
    'dev',
    'kctl-vxlan',
    'onlink',
  ]);
  assert.deepEqual(routeArgs({ dev: 'kctl-wg' }), ['dev', 'kctl-wg']);
  assert.deepEqual(routeArgs({ via: '10.0.0.2' }), ['via', '10.0.0.2']);
});

test("the pods' MTU goes into the bridge config only when the mode sets one", () => {
  const bridge = (mtu?: number) => (cniConflist('10.244.3.0/24', paths, mtu).plugins as Record<string, unknown>[])[0]!;
  assert.equal(bridge(1450).mtu, 1450);
  assert.equal('mtu' in bridge(), false);
});

test('kube-proxy: iptables mode, node credentials, loopback-only endpoints, global conntrack untouched', () => {
  const cfg = kubeProxyConfiguration({ paths, nodeName: 'n1', clusterCIDR: '10.244.0.0/16' });
  assert.equal(cfg.mode, 'iptables');
  assert.equal(cfg.clusterCIDR, '10.244.0.0/16');
  assert.equal(cfg.hostnameOverride, 'n1');
  assert.deepEqual(cfg.clientConnection, { kubeconfig: '/data/kubelet.conf' });
  assert.deepEqual(cfg.conntrack, { maxPerCore: 0, min: 0 });
  assert.equal(cfg.metricsBindAddress, '127.0.0.1:10249');
  assert.equal(cfg.healthzBindAddress, '127.0.0.1:10256');
});

test("masquerade only for traffic leaving the cluster CIDR, from this node's pods", () => {
  assert.deepEqual(masqueradeRule('10.244.3.0/24', '10.244.0.0/16'), [
    '-A',
    'KCTL-POSTROUTING',
    '-s',
    '10.244.3.0/24',
    '!',
    '-d',
    '10.244.0.0/16',
    '-m',
    'comment',
    '--comment',
    'kctl: pods leaving the cluster CIDR',
    '-j',
    'MASQUERADE',
  ]);
});

test("kubelet's cgroup root: one per data dir, so two workers named alike on one host never share one; recorded; an older worker keeps /kctl/<node>", async (t) => {
  const dir = await tempDir(t);
  const [a, b] = [workerPaths(join(dir, 'a'), join(dir, 'run-a')), workerPaths(join(dir, 'b'), join(dir, 'run-b'))];
  for (const p of [a, b]) await mkdir(p.dataDir, { recursive: true });
  const rootA = await recordCgroupRoot(a, 'w1');
  const rootB = await recordCgroupRoot(b, 'w1');
  assert.match(rootA, /^\/kctl\/w1-[0-9a-f]{8}$/);
  assert.notEqual(rootA, rootB, 'two workers with one node name on one host share a cgroup root');
  assert.equal(await readFile(a.cgroupRootFile, 'utf8'), `${rootA}\n`);
  // Recorded: kubelet's own dirs appearing later change nothing.
  await mkdir(join(a.kubeletDir, 'pods'), { recursive: true });
  assert.equal(kubeletCgroupRoot(a, 'w1'), rootA);
  // A worker whose kubelet ran before the record existed: its pods live under /kctl/<node>.
  const old = workerPaths(join(dir, 'old'), join(dir, 'run-old'));
  await mkdir(join(old.kubeletDir, 'pods'), { recursive: true });
  assert.equal(await recordCgroupRoot(old, 'w1'), '/kctl/w1');
  assert.equal(kubeletCgroupRoot(old, 'w1'), '/kctl/w1');
  // A damaged record is not used as a path.
  await writeFile(b.cgroupRootFile, '/kctl/../../etc\n');
  assert.equal(kubeletCgroupRoot(b, 'w1'), rootB);
});

test("a Node's WireGuard key and endpoint count only when well formed (a node writes its own annotations)", () => {
  const key = Buffer.alloc(32, 7).toString('base64');
  const node = (annotations: Record<string, string>) =>
    nodeInfo({
      metadata: { name: 'n', annotations },
      spec: { podCIDR: '10.244.1.0/24' },
      status: { addresses: [{ type: 'InternalIP', address: '10.0.0.2' }] },
    });
  assert.deepEqual(node({ 'kctl.dev/wireguard-public-key': key, 'kctl.dev/wireguard-endpoint': '10.0.0.2:51820' }), {
    name: 'n',
    podCIDR: '10.244.1.0/24',
    internalIP: '10.0.0.2',
    wireguardKey: key,
    wireguardEndpoint: '10.0.0.2:51820',
    relay: false,
    offersRelay: false,
    keeps: [],
  });
  const bad = node({
    'kctl.dev/wireguard-public-key': 'not-a-key',
    'kctl.dev/wireguard-endpoint': 'evil.example:51820',
  });
  assert.equal(bad.wireguardKey, undefined);
  assert.equal(bad.wireguardEndpoint, undefined);
});

test('a relay is one that offers (its own annotation) and that an admin approved (a label no node can set on itself)', () => {
  const node = (annotations: Record<string, string>, labels: Record<string, string>) =>
    nodeInfo({ metadata: { name: 'r', annotations, labels }, spec: { podCIDR: '10.244.1.0/24' } });
  const offer = { [RELAY_ANNOTATION]: 'true' };
  const approval = { [RELAY_LABEL]: 'true' };
  assert.deepEqual([node(offer, approval).relay, node(offer, approval).offersRelay], [true, true]);
  assert.deepEqual([node(offer, {}).relay, node(offer, {}).offersRelay], [false, true], 'offered, not approved');
  assert.equal(node({}, approval).relay, false, 'approved, but the node does not offer');
});

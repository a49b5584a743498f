import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { readFile, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { test } from 'node:test';
import { ADDON_STACKS, writeAddonStacks } from '../../../../src/controller/cluster/addons.ts';
import { parseConfig } from '../../../../src/controller/config/config.ts';
import { corednsReplicas } from '../../../../src/controller/cluster/coredns-scaler.ts';
import { parseStack } from '../../../../src/controller/cluster/manifests.ts';
import { COREDNS_IMAGE, METRICS_SERVER_IMAGE } from '../../../../src/payload/images.ts';
import { pkiPaths } from '../../../../src/pki/index.ts';
import { captureLogger, tempDir } from '../../../helpers.ts';

test('spec.network.clusterDNS: the 10th service IP by default, configurable inside the service CIDR only', () => {
  assert.equal(parseConfig({}, 'defaults').spec.network.clusterDNS, '10.96.0.10');
  assert.equal(
    parseConfig({ spec: { network: { serviceCIDR: '10.100.0.0/16' } } }, 'kctl.yaml').spec.network.clusterDNS,
    '10.100.0.10',
  );
  assert.equal(
    parseConfig({ spec: { network: { clusterDNS: '10.96.0.53' } } }, 'kctl.yaml').spec.network.clusterDNS,
    '10.96.0.53',
  );
  assert.throws(
    () => parseConfig({ spec: { network: { clusterDNS: '10.200.0.10' } } }, 'kctl.yaml'),
    /invalid config kctl\.yaml: spec\.network\.clusterDNS: 10\.200\.0\.10 is outside spec\.network\.serviceCIDR 10\.96\.0\.0\/12/,
  );
  assert.throws(
    () => parseConfig({ spec: { network: { clusterDNS: 'dns' } } }, 'kctl.yaml'),
    /spec\.network\.clusterDNS: expected an IP address/,
  );
});

test('spec.addons: CoreDNS (2 replicas) and metrics-server on by default; unknown add-ons are refused', () => {
  const a = parseConfig({}, 'defaults').spec.addons;
  assert.deepEqual(a, { coredns: { enabled: true, replicas: 2 }, metricsServer: { enabled: true } });
  assert.equal(
    parseConfig({ spec: { addons: { coredns: { enabled: false } } } }, 'kctl.yaml').spec.addons.coredns.enabled,
    false,
  );
  assert.throws(
    () => parseConfig({ spec: { addons: { traefik: {} } } }, 'kctl.yaml'),
    /spec\.addons: unknown field\(s\) "traefik"/,
  );
});

/** The value at a path of keys and indexes in a parsed object, or undefined where the path breaks off. */
function at(value: unknown, ...path: (string | number)[]): unknown {
  let v = value;
  for (const k of path)
    v = v !== null && typeof v === 'object' ? (v as Record<string | number, unknown>)[k] : undefined;
  return v;
}

async function fakePki(dir: string) {
  const pki = pkiPaths(join(dir, 'pki'));
  const { mkdir } = await import('node:fs/promises');
  await mkdir(pki.dir, { recursive: true });
  await writeFile(pki.addonsCaCert, 'CA PEM\n');
  await writeFile(pki.metricsServerCert, 'CERT PEM\n');
  await writeFile(pki.metricsServerKey, 'KEY PEM\n');
  await writeFile(pki.kubeletCaBundle, 'KUBELET CA PEM\n');
  return pki;
}

test('add-on stacks: written 0600 as valid stacks with the bundled images; a disabled add-on’s stack is removed', async (t) => {
  const dir = await tempDir(t);
  const pki = await fakePki(dir);
  const manifests = join(dir, 'manifests');
  const { log, lines } = captureLogger();
  const cfg = parseConfig({ spec: { network: { clusterDomain: 'corp.internal' } } }, 'kctl.yaml');
  await writeAddonStacks(cfg, manifests, pki, log);

  const read = async (stack: string) => {
    const file = join(manifests, stack, `${stack}.yaml`);
    assert.equal((await stat(file)).mode & 0o777, 0o600, `${file} mode`);
    const parsed = parseStack([{ name: file, text: await readFile(file, 'utf8') }]);
    assert.deepEqual(parsed.errors, []);
    return parsed.objects;
  };
  const dns = await read(ADDON_STACKS.coredns);
  const of = (objs: typeof dns, kind: string) => objs.find((o) => o.kind === kind);
  assert.equal(at(of(dns, 'Service'), 'spec', 'clusterIP'), '10.96.0.10');
  assert.match(
    String(at(of(dns, 'ConfigMap'), 'data', 'Corefile')),
    /kubernetes corp\.internal in-addr\.arpa ip6\.arpa/,
  );
  const dnsPod = at(of(dns, 'Deployment'), 'spec', 'template', 'spec');
  // Replicas belong to the coredns-scaler (node count), not to the manifest the applier re-applies.
  assert.equal(at(of(dns, 'Deployment'), 'spec', 'replicas'), undefined);
  assert.equal(at(dnsPod, 'containers', 0, 'image'), COREDNS_IMAGE);
  assert.equal(
    at(dnsPod, 'affinity', 'podAntiAffinity', 'requiredDuringSchedulingIgnoredDuringExecution', 0, 'topologyKey'),
    'kubernetes.io/hostname',
  );

  const ms = await read(ADDON_STACKS.metricsServer);
  const base64 = (v: unknown) => Buffer.from(String(v), 'base64').toString();
  assert.equal(base64(at(of(ms, 'APIService'), 'spec', 'caBundle')), 'CA PEM\n');
  assert.equal(at(of(ms, 'APIService'), 'spec', 'insecureSkipTLSVerify'), undefined);
  assert.equal(base64(at(of(ms, 'Secret'), 'data', 'tls.key')), 'KEY PEM\n');
  const container = at(of(ms, 'Deployment'), 'spec', 'template', 'spec', 'containers', 0);
  assert.equal(at(container, 'image'), METRICS_SERVER_IMAGE);
  const args = at(container, 'args') as string[];
  assert.ok(!args.some((a) => a.startsWith('--kubelet-insecure-tls')), args.join(' '));
  // Kubelets are checked against the kubelet CA bundle (never the cluster CA a node's other certificates come from).
  assert.ok(args.includes('--kubelet-certificate-authority=/etc/kubelet-ca/ca.crt'), args.join(' '));
  const kubeletCa = ms.find((o) => o.kind === 'ConfigMap' && at(o, 'metadata', 'name') === 'metrics-server-kubelet-ca');
  assert.equal(at(kubeletCa, 'data', 'ca.crt'), 'KUBELET CA PEM\n');
  assert.match(
    String(at(of(ms, 'Deployment'), 'spec', 'template', 'metadata', 'annotations', 'kctl.dev/kubelet-ca-sha256')),
    /^[0-9a-f]{64}$/,
  );
  assert.ok(!JSON.stringify(lines()).includes('KEY PEM'), 'the serving key reached the log');

  // Off: the stack directory goes (the applier then prunes its objects); the other stays.
  await writeAddonStacks(
    parseConfig({ spec: { addons: { coredns: { enabled: false } } } }, 'kctl.yaml'),
    manifests,
    pki,
    log,
  );
  assert.equal(existsSync(join(manifests, ADDON_STACKS.coredns)), false);
  assert.equal(existsSync(join(manifests, ADDON_STACKS.metricsServer, 'metrics-server.yaml')), true);
  assert.ok(lines().some((l) => String(l.msg).includes('add-on coredns disabled')));
});

test('CoreDNS replicas: one per node up to spec.addons.coredns.replicas, never zero', () => {
  assert.deepEqual(
    [0, 1, 2, 3, 10].map((n) => corednsReplicas(n, 2)),
    [1, 1, 2, 2, 2],
  );
  assert.equal(corednsReplicas(5, 3), 3);
});

// ensurePki: the controller's whole PKI under <data-dir>/pki, created on first start and
// checked on every start. CAs and the service-account key are never replaced; leafs and
// kubeconfigs are (re)issued only when they no longer fit. Safe to run concurrently: a lock
// on the directory serializes two starting controllers.
import { existsSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { writeFileAtomic } from '../base/fs.ts';
import { hostname as osHostname } from 'node:os';
import { withPkiLock } from './lock.ts';
import { splitCertificates } from '../base/pem.ts';
import type { Logger } from '../base/log.ts';
import { httpsUrl } from '../base/addresses.ts';
import { firstServiceIps, localAddresses, sanSet, toSan, type San } from './addresses.ts';
import { ensureCa, ensureServiceAccountKey, type EnsureContext } from './ca.ts';
import { CERT_MODE, ensurePrivateDir, readIfExists } from './files.ts';
import { ensureEncryptionConfig } from './encryption.ts';
import { ensureKubeconfig } from './kubeconfig.ts';
import { ensureLeafFiles, type LeafSpec, type Outcome } from './leaf.ts';
import { pkiPaths, type PkiPaths } from './paths.ts';
import type { Signer } from './x509.ts';

/** The users the control plane's kubeconfigs name (the controllers act as the admin). */
export const CONTROL_PLANE_USERS = {
  admin: 'kubernetes-admin',
  scheduler: 'system:kube-scheduler',
  controllerManager: 'system:kube-controller-manager',
} as const;

export interface PkiOptions {
  /** <data-dir>/pki */
  dir: string;
  /** spec.api.address (IP or DNS name) */
  apiAddress: string;
  /** spec.api.sans (IPs or DNS names) */
  sans: string[];
  /** For kubeconfigs: https://<kubeconfigHost or apiAddress>:<apiPort> */
  apiPort: number;
  /** Where the control plane's kubeconfigs reach the API when not apiAddress (loopback, when only a front door is open). */
  kubeconfigHost?: string;
  /** The first service IP (network + 1) is the in-cluster "kubernetes" service address. */
  serviceCIDR: string;
  /** e.g. cluster.local */
  clusterDomain: string;
  /** Default os.hostname(). */
  hostname?: string;
  /** Default: every address of os.networkInterfaces() (IPv4 and IPv6, loopback included). */
  localAddresses?: string[];
  /** Current time, for tests. */
  now?: Date;
  /** spec.pki.leafValidity: the lifetime of new leaf certificates and kubeconfigs; default a year. */
  leafValidityMs?: number;
  /**
   * An api-only control plane (no nodes): no kubelet client, konnectivity, scheduler or add-ons
   * certificates; without `etcd` no etcd CA and certificates either (kine). Fewer files to write
   * and check on every start.
   */
  apiOnly?: { etcd: boolean };
  /** spec.api.encryption.resources: what the encryption config encrypts (its key is made once, here). Given at start only. */
  encryptedResources?: string[];
}

/** The names each certificate must carry, derived from the options in one place. */
export function wantedSans(opts: PkiOptions): { apiserver: San[]; konnectivity: San[]; etcd: San[] } {
  const host = toSan(opts.hostname ?? osHostname(), 'hostname');
  const api = toSan(opts.apiAddress, 'spec.api.address');
  const apiserver = sanSet([
    api,
    ...opts.sans.map((s) => toSan(s, 'spec.api.sans')),
    host,
    ...(opts.localAddresses ?? localAddresses()).map((a) => toSan(a, 'local interface address')),
    'DNS:kubernetes',
    'DNS:kubernetes.default',
    'DNS:kubernetes.default.svc',
    toSan(`kubernetes.default.svc.${opts.clusterDomain}`, 'spec.network.clusterDomain'),
    ...firstServiceIps(opts.serviceCIDR).map((ip): San => `IP:${ip}`),
    'DNS:localhost',
    'IP:127.0.0.1',
  ]);
  const konnectivity = sanSet([...apiserver, 'DNS:konnectivity']);
  const etcd = sanSet(['DNS:localhost', 'IP:127.0.0.1', 'IP:::1', api, host]);
  return { apiserver, konnectivity, etcd };
}

interface Cas {
  cluster: Signer;
  frontProxy: Signer;
  /** Absent for an api-only control plane on kine. */
  etcd?: Signer;
  /** Absent for an api-only control plane. */
  addons?: Signer;
}

interface LeafFile {
  spec: LeafSpec;
  cert: string;
  key: string;
  /** Needed by a full (node) control plane only, or only with etcd. */
  for?: 'nodes' | 'etcd';
}

// kubeadm's names and usages, so RBAC defaults and operator habits carry over.
function leafFiles(p: PkiPaths, cas: Cas, sans: ReturnType<typeof wantedSans>): LeafFile[] {
  return [
    {
      cert: p.serverCert,
      key: p.serverKey,
      spec: {
        signer: cas.cluster,
        subject: { commonName: 'kube-apiserver' },
        usages: ['serverAuth'],
        sans: sans.apiserver,
      },
    },
    {
      for: 'nodes',
      cert: p.kubeletClientCert,
      key: p.kubeletClientKey,
      spec: {
        signer: cas.cluster,
        subject: { commonName: 'kube-apiserver-kubelet-client', organizations: ['system:masters'] },
        usages: ['clientAuth'],
        sans: [],
      },
    },
    {
      cert: p.frontProxyClientCert,
      key: p.frontProxyClientKey,
      spec: { signer: cas.frontProxy, subject: { commonName: 'front-proxy-client' }, usages: ['clientAuth'], sans: [] },
    },
    {
      for: 'etcd',
      cert: p.etcdServerCert,
      key: p.etcdServerKey,
      spec: {
        signer: cas.etcd!,
        subject: { commonName: 'etcd-server' },
        usages: ['serverAuth', 'clientAuth'],
        sans: sans.etcd,
      },
    },
    {
      for: 'etcd',
      cert: p.etcdPeerCert,
      key: p.etcdPeerKey,
      spec: {
        signer: cas.etcd!,
        subject: { commonName: 'etcd-peer' },
        usages: ['serverAuth', 'clientAuth'],
        sans: sans.etcd,
      },
    },
    {
      for: 'etcd',
      cert: p.apiserverEtcdClientCert,
      key: p.apiserverEtcdClientKey,
      spec: { signer: cas.etcd!, subject: { commonName: 'apiserver-etcd-client' }, usages: ['clientAuth'], sans: [] },
    },
    {
      for: 'nodes',
      // The APIService of metrics-server pins the add-ons CA, which signs nothing a node can ask
      // for: a kubelet serving certificate (cluster CA) cannot pass for metrics-server.
      cert: p.metricsServerCert,
      key: p.metricsServerKey,
      spec: {
        signer: cas.addons!,
        subject: { commonName: 'metrics-server' },
        usages: ['serverAuth'],
        sans: ['DNS:metrics-server.kube-system.svc'],
      },
    },
    {
      for: 'nodes',
      cert: p.konnectivityCert,
      key: p.konnectivityKey,
      spec: {
        signer: cas.cluster,
        subject: { commonName: 'konnectivity-server' },
        usages: ['serverAuth'],
        sans: sans.konnectivity,
      },
    },
  ];
}

function kubeconfigs(p: PkiPaths, cas: Cas): { path: string; spec: LeafSpec; for?: 'nodes' }[] {
  const client = (commonName: string, organizations?: string[]): LeafSpec => ({
    signer: cas.cluster,
    subject: { commonName, organizations },
    usages: ['clientAuth'],
    sans: [],
  });
  return [
    { path: p.adminConf, spec: client(CONTROL_PLANE_USERS.admin, ['system:masters']) },
    { path: p.schedulerConf, spec: client(CONTROL_PLANE_USERS.scheduler), for: 'nodes' },
    { path: p.controllerManagerConf, spec: client(CONTROL_PLANE_USERS.controllerManager) },
  ];
}

/**
 * Like Promise.all, but waits for every step before failing, so no write is still in flight
 * when the lock is released.
 */
async function allSettledOrThrow<T>(steps: Promise<T>[]): Promise<T[]> {
  const results = await Promise.allSettled(steps);
  const failed = results.find((r): r is PromiseRejectedResult => r.status === 'rejected');
  if (failed) throw failed.reason;
  return results.map((r) => (r as PromiseFulfilledResult<T>).value);
}

/**
 * What kube-apiserver and metrics-server trust for kubelets: the kubelet-serving CA, plus the
 * cluster CA until `kubeletServingMoved` says no node serves one of its certificates any more.
 */
export async function writeKubeletCaBundle(paths: PkiPaths, fresh: boolean): Promise<void> {
  if (fresh)
    await writeFileAtomic(
      paths.kubeletServingMoved,
      'new cluster: no kubelet ever served a certificate of the cluster CA\n',
      0o644,
    );
  const moved = existsSync(paths.kubeletServingMoved);
  const pems = await Promise.all([
    readFile(paths.kubeletServingCaCert, 'utf8'),
    ...(moved ? [] : [readFile(paths.caCert, 'utf8')]),
  ]);
  const bundle = pems.map((p) => p.trimEnd() + '\n').join('');
  if ((await readIfExists(paths.kubeletCaBundle)) !== bundle)
    await writeFileAtomic(paths.kubeletCaBundle, bundle, 0o644);
}

export async function ensurePki(opts: PkiOptions, log: Logger): Promise<PkiPaths> {
  return (await ensurePkiFiles(opts, log)).paths;
}

/** ensurePki, also saying which files it (re)wrote: the renewer reloads what uses them. */
export async function ensurePkiFiles(opts: PkiOptions, log: Logger): Promise<{ paths: PkiPaths; changed: string[] }> {
  const paths = pkiPaths(opts.dir);
  // Validate the options before touching the disk: a bad SAN must not leave a half-made PKI.
  const sans = wantedSans(opts);
  const server = httpsUrl(opts.kubeconfigHost ?? opts.apiAddress, opts.apiPort);
  const ctx: EnsureContext = { dir: paths.dir, now: opts.now ?? new Date(), log };

  await ensurePrivateDir(paths.dir, log);
  await ensurePrivateDir(paths.etcdDir, log);
  return withPkiLock(paths.dir, async () => {
    // Independent steps run together: key generation is native and runs off the main thread,
    // so a fresh PKI costs about as long as its slowest few keys.
    const wanted = (what?: 'nodes' | 'etcd') =>
      !opts.apiOnly || what === undefined || (what === 'etcd' && opts.apiOnly.etcd);
    const caSpecs = [
      { name: 'kubernetes-ca', certPath: paths.caCert, keyPath: paths.caKey },
      { name: 'front-proxy-ca', certPath: paths.frontProxyCaCert, keyPath: paths.frontProxyCaKey },
      { name: 'etcd-ca', certPath: paths.etcdCaCert, keyPath: paths.etcdCaKey, for: 'etcd' as const },
      { name: 'addons-ca', certPath: paths.addonsCaCert, keyPath: paths.addonsCaKey, for: 'nodes' as const },
      {
        name: 'kubelet-serving-ca',
        certPath: paths.kubeletServingCaCert,
        keyPath: paths.kubeletServingCaKey,
        for: 'nodes' as const,
      },
    ];
    // A CA that is not wanted signs nothing here: the leaves it would sign are skipped alike.
    const caResults = await allSettledOrThrow(
      caSpecs.map((c) => (wanted(c.for) ? ensureCa(c, ctx) : Promise.resolve(undefined))),
    );
    const [cluster, frontProxy, etcd, addons] = caResults.map((r) => r?.signer);
    const cas: Cas = { cluster: cluster!, frontProxy: frontProxy!, etcd, addons };
    const validity = (spec: LeafSpec): LeafSpec => ({ ...spec, validityMs: opts.leafValidityMs });
    const leaves = leafFiles(paths, cas, sans).filter((l) => wanted(l.for));
    const configs = kubeconfigs(paths, cas).filter((k) => wanted(k.for));
    const leafOutcomes = await allSettledOrThrow([
      ...leaves.map((l) => ensureLeafFiles(validity(l.spec), l.cert, l.key, ctx)),
      ...configs.map((k) => ensureKubeconfig(validity(k.spec), k.path, server, ctx)),
    ]);
    const outcomes: Outcome[] = [
      ...caResults.flatMap((r) => (r ? [r.outcome] : [])),
      ...leafOutcomes,
      await ensureServiceAccountKey(paths.saKey, paths.saPub, ctx),
      // Only when asked (at start): while kctl runs, the encryption component keeps this file.
      ...(opts.encryptedResources
        ? [await ensureEncryptionConfig(paths.encryptionConfig, opts.encryptedResources, log)]
        : []),
    ];
    const files = [...leaves.map((l) => l.cert), ...configs.map((k) => k.path)];
    const changed = files.filter((_, i) => leafOutcomes[i] !== 'unchanged');
    // kube-controller-manager signs with exactly one certificate: ca.crt's first.
    const signing = splitCertificates(cas.cluster.certPem)[0]!;
    if ((await readIfExists(paths.caSigningCert)) !== signing)
      await writeFileAtomic(paths.caSigningCert, signing, CERT_MODE);
    if (wanted('nodes')) {
      // A new cluster's kubelets never had a serving certificate of the cluster CA; an older
      // cluster's did, so kubelets trust it too until every node has a new one (kubelet-serving.ts).
      const fresh = caResults[0]?.outcome === 'created' && caResults[4]?.outcome === 'created';
      await writeKubeletCaBundle(paths, fresh);
    }
    const count = (o: Outcome) => outcomes.filter((x) => x === o).length;
    log.info(
      { dir: paths.dir, created: count('created'), renewed: count('renewed'), unchanged: count('unchanged') },
      'pki ready',
    );
    return { paths, changed };
  });
}

// kubelet: TLS bootstrap from the join's bootstrap kubeconfig, containerd's CRI socket,
// cgroupfs under its own cgroup root (/kctl/<node>-<data dir digest>), every directory under the data dir,
// and a configuration that runs on the hosts we have (cgroup v1, little free disk).
import { existsSync, readFileSync } from 'node:fs';
import { createHash, X509Certificate } from 'node:crypto';
import { mkdir, readdir, readFile, realpath, rm, rmdir, writeFile } from 'node:fs/promises';
import { writeFileAtomic } from '../base/fs.ts';
import { join, resolve } from 'node:path';
import { stringify } from 'yaml';
import { probeOnce } from '../base/probe.ts';
import { componentFlags } from '../base/argv.ts';
import type { ComponentContext } from '../base/component.ts';
import type { Logger } from '../base/log.ts';
import { Supervisor } from '../supervisor/process.ts';
import type { WorkerPaths } from './paths.ts';
import { withProfile, type KubeletValues } from '../kube/worker-profiles.ts';

export const KUBELET_HEALTHZ_PORT = 10248;
export const KUBELET_PORT = 10250;

export interface KubeletOptions {
  paths: WorkerPaths;
  nodeName: string;
  nodeIp: string;
  labels?: Record<string, string>;
  /** key=value:Effect or key:Effect */
  taints?: string[];
  clusterDNS?: string[];
  clusterDomain?: string;
  /** Extra kubelet flags (name without dashes -> value); they win over kctl's. */
  extraArgs?: Record<string, string>;
  /** The worker profile's kubelet fields, laid over kctl's configuration each time it is written. */
  profile?: () => KubeletValues | undefined;
}

/**
 * The cgroup (relative to each hierarchy's root) under which kubelet puts kubepods:
 * /kctl/<node>-<8 hex digits naming the data dir>. Two workers on one host (two clusters, each with
 * a node named after the host) must never share one: a kubelet kills what runs in the pod cgroups
 * under its root that are not its pods', and `kctl reset` kills all of it. Recorded in the data dir
 * at the first start; a worker whose kubelet ran before the record existed keeps /kctl/<node>,
 * where its running pods are.
 */
export function kubeletCgroupRoot(paths: WorkerPaths, nodeName: string): string {
  try {
    const recorded = readFileSync(paths.cgroupRootFile, 'utf8').trim();
    if (/^\/kctl\/[^/\s]+$/.test(recorded)) return recorded;
  } catch {
    // not recorded yet
  }
  if (existsSync(join(paths.kubeletDir, 'pods'))) return `/kctl/${nodeName}`;
  return `/kctl/${nodeName}-${createHash('sha256').update(resolve(paths.dataDir)).digest('hex').slice(0, 8)}`;
}

/** kubeletCgroupRoot, recorded in the data dir if it was not (before kubelet first runs). */
export async function recordCgroupRoot(paths: WorkerPaths, nodeName: string): Promise<string> {
  const root = kubeletCgroupRoot(paths, nodeName);
  if (!existsSync(paths.cgroupRootFile)) await writeFileAtomic(paths.cgroupRootFile, `${root}\n`, 0o644);
  return root;
}

export function kubeletConfiguration(o: KubeletOptions, resolvConf: string): Record<string, unknown> {
  const { paths } = o;
  return {
    apiVersion: 'kubelet.config.k8s.io/v1beta1',
    kind: 'KubeletConfiguration',
    address: '0.0.0.0',
    port: KUBELET_PORT,
    readOnlyPort: 0,
    healthzBindAddress: '127.0.0.1',
    healthzPort: KUBELET_HEALTHZ_PORT,
    authentication: {
      anonymous: { enabled: false },
      webhook: { enabled: true, cacheTTL: '2m0s' },
      x509: { clientCAFile: paths.caCert },
    },
    authorization: { mode: 'Webhook', webhook: { cacheAuthorizedTTL: '5m0s', cacheUnauthorizedTTL: '30s' } },
    containerRuntimeEndpoint: `unix://${paths.containerdSocket}`,
    cgroupDriver: 'cgroupfs',
    cgroupRoot: kubeletCgroupRoot(paths, o.nodeName),
    cgroupsPerQOS: true,
    // The hosts we run on still have cgroup v1; kubelet 1.35+ refuses it unless told otherwise.
    failCgroupV1: false,
    failSwapOn: false,
    podLogsDir: paths.podLogsDir,
    volumePluginDir: join(paths.kubeletDir, 'volume-plugins'),
    serverTLSBootstrap: true,
    rotateCertificates: true,
    resolvConf,
    clusterDomain: o.clusterDomain ?? 'cluster.local',
    ...(o.clusterDNS?.length ? { clusterDNS: o.clusterDNS } : {}),
    // Test and edge hosts often have little free disk: evict only when it is really gone,
    // and never garbage-collect the (registry-less) bundled images.
    evictionHard: {
      'memory.available': '100Mi',
      'nodefs.available': '1%',
      'nodefs.inodesFree': '1%',
      'imagefs.available': '1%',
    },
    imageGCHighThresholdPercent: 100,
    imageGCLowThresholdPercent: 99,
  };
}

function formatLabels(labels: Record<string, string>): string {
  return Object.entries(labels)
    .map(([k, v]) => `${k}=${v}`)
    .join(',');
}

export function kubeletArgs(o: KubeletOptions): string[] {
  const { paths } = o;
  const flags: Record<string, string> = {
    config: paths.kubeletConfig,
    'bootstrap-kubeconfig': paths.bootstrapKubeconfig,
    kubeconfig: paths.kubeletKubeconfig,
    'cert-dir': paths.kubeletCertDir,
    'root-dir': paths.kubeletDir,
    'hostname-override': o.nodeName,
    'node-ip': o.nodeIp,
  };
  if (o.labels && Object.keys(o.labels).length) flags['node-labels'] = formatLabels(o.labels);
  if (o.taints?.length) flags['register-with-taints'] = o.taints.join(',');
  return componentFlags(flags, o.extraArgs);
}

/** Cgroup v1 hierarchies (mount points) and whether the host is cgroup v2 only. */
async function cgroupMounts(): Promise<{ v1: string[]; v2?: string }> {
  const text = await readFile('/proc/self/mountinfo', 'utf8');
  const v1: string[] = [];
  let v2: string | undefined;
  for (const line of text.split('\n')) {
    const [pre, post] = line.split(' - ');
    if (!pre || !post) continue;
    const mountPoint = pre.split(' ')[4];
    const fstype = post.split(' ')[0];
    if (!mountPoint) continue;
    if (fstype === 'cgroup') v1.push(mountPoint);
    else if (fstype === 'cgroup2') v2 = mountPoint;
  }
  return { v1, v2 };
}

/**
 * kubelet requires its cgroup root to exist in every hierarchy. On v1, cpuset children
 * start with empty cpus/mems and cannot take tasks, so those are copied from the parent.
 */
export async function ensureCgroupRoot(cgroupRoot: string): Promise<void> {
  const { v1, v2: unified } = await cgroupMounts();
  // On a hybrid host (v1 hierarchies plus cgroup2 at .../unified) kubelet runs the v1 way and
  // the cgroup2 mount carries no controllers: nothing to prepare there.
  const v2 = v1.length ? undefined : unified;
  const parts = cgroupRoot.split('/').filter(Boolean);
  for (const mount of v1) {
    let dir = mount;
    for (const part of parts) {
      const parent = dir;
      dir = join(dir, part);
      await mkdir(dir, { recursive: true });
      for (const f of ['cpuset.cpus', 'cpuset.mems']) {
        const file = join(dir, f);
        if (!existsSync(file)) continue;
        if ((await readFile(file, 'utf8')).trim() === '')
          await writeFile(file, await readFile(join(parent, f), 'utf8'));
      }
    }
  }
  if (v2) {
    let dir = v2;
    for (const part of parts) {
      const controllers = (await readFile(join(dir, 'cgroup.controllers'), 'utf8').catch(() => ''))
        .trim()
        .split(/\s+/)
        .filter(Boolean);
      if (controllers.length)
        await writeFile(join(dir, 'cgroup.subtree_control'), controllers.map((c) => `+${c}`).join(' ')).catch(
          () => undefined,
        );
      dir = join(dir, part);
      await mkdir(dir, { recursive: true });
    }
  }
}

/** GET http://127.0.0.1:10248/healthz and expect `ok`. */
export function kubeletHealthz(): Promise<void> {
  return probeOnce({
    url: `http://127.0.0.1:${KUBELET_HEALTHZ_PORT}/healthz`,
    expect: (status, body) => status === 200 && body.trim() === 'ok',
  });
}

/** The program: its binary in <bin>, its pid file in <run>, its component's name. */
export const KUBELET = 'kubelet';

export class KubeletComponent extends Supervisor {
  /** TLS bootstrap waits for the controller to sign the client certificate. */
  readonly readyTimeoutMs = 180_000;
  private readonly kopts: KubeletOptions;

  constructor(opts: KubeletOptions) {
    const { paths } = opts;
    super({
      name: KUBELET,
      binary: join(paths.binDir, KUBELET),
      args: kubeletArgs(opts),
      runDir: paths.runDir,
      // Not kctl's 0077: kubelet makes a volume's nested dirs (configMap items path a/b) under the umask, unreadable to a non-root container.
      umask: 0o022,
      // Healthy and holding its own client certificate (TLS bootstrap done).
      ready: async () => {
        await kubeletHealthz();
        if (!existsSync(paths.kubeletKubeconfig))
          throw new Error(
            `kubelet has no client certificate yet (${paths.kubeletKubeconfig} is missing; is the CSR approved?)`,
          );
      },
      readyRetryMs: 1000,
    });
    this.kopts = opts;
  }

  override async init(ctx?: ComponentContext): Promise<void> {
    await super.init(ctx);
    const { paths } = this.kopts;
    for (const d of [paths.kubeletDir, paths.kubeletCertDir, paths.podLogsDir])
      await mkdir(d, { recursive: true, mode: 0o750 });
    await ensureCgroupRoot(await recordCgroupRoot(paths, this.kopts.nodeName));
    await retireClusterCaServingCert(paths, this.log);
  }

  /** Written at each start: the worker profile is read from the cluster by then (kubelet-profile.ts). */
  override async start(): Promise<void> {
    await this.writeConfig();
    await super.start();
  }

  /** kctl's configuration with the worker profile over it; a running kubelet reads it at its next start. */
  async writeConfig(): Promise<void> {
    // An empty resolvConf makes pods get no DNS config from the host at all.
    const resolvConf = existsSync('/etc/resolv.conf') ? '/etc/resolv.conf' : '';
    const config = withProfile(kubeletConfiguration(this.kopts, resolvConf), this.kopts.profile?.());
    await writeFileAtomic(this.kopts.paths.kubeletConfig, stringify(config), 0o600);
  }
}

/**
 * Kubelet serving certificates come from their own CA. One an older kctl had signed by the
 * cluster CA is removed before kubelet starts, so kubelet asks for a new one (serverTLSBootstrap);
 * the controllers trust both while nodes move over. Returns whether it removed one.
 */
export async function retireClusterCaServingCert(paths: WorkerPaths, log: Logger): Promise<boolean> {
  const current = join(paths.kubeletCertDir, 'kubelet-server-current.pem');
  let pem: string;
  let ca: X509Certificate;
  try {
    [pem, ca] = await Promise.all([
      readFile(current, 'utf8'),
      readFile(paths.caCert).then((b) => new X509Certificate(b)),
    ]);
  } catch {
    return false; // none yet (kubelet asks for one), or no cluster CA to compare with
  }
  let cert: X509Certificate;
  try {
    cert = new X509Certificate(pem);
  } catch {
    return false; // kubelet itself reports a damaged file
  }
  if (!cert.checkIssued(ca) || !cert.verify(ca.publicKey)) return false;
  const target = await realpath(current).catch(() => current);
  await Promise.all([rm(current, { force: true }), rm(target, { force: true })]);
  log.info(
    { file: target },
    'kubelet serving certificate was signed by the cluster CA (an older kctl): removed, kubelet asks for one from the kubelet-serving CA',
  );
  return true;
}

/** For `kctl reset` and tests: kills every process left in the node's cgroup root (containers) and removes the cgroups. */
export async function removeCgroupRoot(cgroupRoot: string): Promise<void> {
  // Every hierarchy, the cgroup2 one of a hybrid host too: runc creates the tree there as well.
  const { v1, v2 } = await cgroupMounts();
  const roots = [...v1, ...(v2 ? [v2] : [])].map((m) => join(m, cgroupRoot)).filter((d) => existsSync(d));
  const walk = async (dir: string): Promise<string[]> => {
    const subdirs = (await readdir(dir, { withFileTypes: true }).catch(() => [])).filter((e) => e.isDirectory());
    const nested = await Promise.all(subdirs.map((e) => walk(join(dir, e.name))));
    return [...nested.flat(), dir]; // children before parents
  };
  for (let attempt = 0; attempt < 20; attempt++) {
    let left = 0;
    for (const root of roots) {
      for (const dir of await walk(root)) {
        const pids = (await readFile(join(dir, 'cgroup.procs'), 'utf8').catch(() => ''))
          .split('\n')
          .filter(Boolean)
          .map(Number);
        for (const pid of pids) {
          try {
            process.kill(pid, 'SIGKILL');
          } catch {
            /* gone */
          }
        }
        left += pids.length;
        await rmdir(dir).catch(() => undefined);
      }
    }
    if (left === 0 && roots.every((r) => !existsSync(r))) break;
    await new Promise((r) => setTimeout(r, 100));
  }
  // The shared parent (/kctl) goes too once no other node uses it.
  const parent = cgroupRoot.split('/').filter(Boolean)[0];
  if (parent) for (const m of [...v1, ...(v2 ? [v2] : [])]) await rmdir(join(m, parent)).catch(() => undefined);
}

// containerd 2.x for kubelet's CRI: every path under the worker's data and run dirs, runc
// from <data-dir>/bin/current with cgroupfs, CNI from <data-dir>/bin/current/cni, the bundled pause image as
// sandbox, and none of the host's /etc/containerd, /opt/cni or /etc/cni.
import { mkdir, readdir, readFile } from 'node:fs/promises';
import { mountsUnder, writeFileAtomic } from '../base/fs.ts';
import { dirname, join } from 'node:path';
import { execa } from 'execa';
import type { ComponentContext } from '../base/component.ts';
import { CHILD_PATH } from '../supervisor/options.ts';
import { Supervisor } from '../supervisor/process.ts';
import { PAUSE_IMAGE } from '../payload/images.ts';
import type { WorkerPaths } from './paths.ts';

export interface ContainerdOptions {
  paths: WorkerPaths;
  sandboxImage?: string;
  /** containerd's own log level (debug, info, warn, error). Default info. */
  logLevel?: string;
  /** Never give a container a lower oom_score_adj than containerd's own. Default: only when kctl lacks CAP_SYS_RESOURCE. */
  restrictOomScoreAdj?: boolean;
}

const q = (s: string) => `'${s.replace(/'/g, '')}'`;

/**
 * containerd's GOGC, which its shims inherit with the rest of its environment. Importing the
 * bundled images at start leaves garbage that Go's default (100) lets the heap grow over: 75-90
 * MiB resident for the first two minutes, 52 after Go's forced collection; at 25 it holds 45-46
 * throughout. Once its images are in, containerd allocates little, so the extra collections cost
 * little CPU.
 */
export const CONTAINERD_GC_PERCENT = 25;

const CAP_SYS_RESOURCE = 24;

/**
 * Whether this process may lower oom_score_adj. Without CAP_SYS_RESOURCE (some sandboxes and
 * VMs drop it even for root) runc cannot give the pod sandbox kubelet's -998 and every pod
 * fails with "failed to update /proc/self/oom_score_adj: Permission denied".
 */
export async function canLowerOomScore(): Promise<boolean> {
  const status = await readFile('/proc/self/status', 'utf8').catch(() => '');
  const hex = /^CapEff:\s*([0-9a-f]+)/m.exec(status)?.[1];
  return hex === undefined || ((BigInt(`0x${hex}`) >> BigInt(CAP_SYS_RESOURCE)) & 1n) === 1n;
}

/** Plugins that need kernel features, tools or host dirs a kctl worker does not use. */
export const DISABLED_PLUGINS = [
  'io.containerd.snapshotter.v1.btrfs',
  'io.containerd.snapshotter.v1.zfs',
  'io.containerd.snapshotter.v1.aufs',
  'io.containerd.snapshotter.v1.devmapper',
  'io.containerd.snapshotter.v1.blockfile',
  'io.containerd.snapshotter.v1.erofs',
  'io.containerd.differ.v1.erofs',
  'io.containerd.mount-handler.v1.erofs',
  'io.containerd.tracing.processor.v1.otlp',
  'io.containerd.internal.v1.tracing',
  'io.containerd.nri.v1.nri',
  'io.containerd.image-verifier.v1.bindir',
];

/** containerd config: version 4, containerd 2.3's own (a version 3 file is migrated at every start, with a warning). */
export function containerdConfig(
  paths: WorkerPaths,
  opts: { sandboxImage?: string; logLevel?: string; restrictOomScoreAdj?: boolean } = {},
): string {
  const cri = (p: string) => `plugins.'io.containerd.cri.v1.${p}'`;
  return `# Written by kctl at every start; edits are overwritten.
version = 4
root = ${q(paths.containerdRoot)}
state = ${q(paths.containerdState)}
temp = ${q(join(paths.containerdRoot, 'tmp'))}
# Drop-ins beside the data dir, never the host's /etc/containerd (an empty list means the default).
imports = [${q(join(paths.dataDir, 'containerd.d', '*.toml'))}]
disabled_plugins = [${DISABLED_PLUGINS.map(q).join(', ')}]

[debug]
  level = ${q(opts.logLevel ?? 'info')}
  format = 'json'

[plugins]
  # Version 4 moved the [grpc] and [ttrpc] sections here.
  [plugins.'io.containerd.server.v1.grpc']
    address = ${q(paths.containerdSocket)}

  [plugins.'io.containerd.server.v1.ttrpc']
    address = ${q(`${paths.containerdSocket}.ttrpc`)}

  [plugins.'io.containerd.internal.v1.opt']
    path = ${q(join(paths.containerdRoot, 'opt'))}

  [${cri('images')}]
    snapshotter = 'overlayfs'
    [${cri('images')}.pinned_images]
      sandbox = ${q(opts.sandboxImage ?? PAUSE_IMAGE)}

  [${cri('runtime')}]
    restrict_oom_score_adj = ${opts.restrictOomScoreAdj ? 'true' : 'false'}
    cdi_spec_dirs = []
    # Pod network namespaces under the run dir, not the host's /var/run/netns.
    netns_mounts_under_state_dir = true
    [${cri('runtime')}.containerd]
      default_runtime_name = 'runc'
      [${cri('runtime')}.containerd.runtimes.runc]
        runtime_type = 'io.containerd.runc.v2'
        [${cri('runtime')}.containerd.runtimes.runc.options]
          BinaryName = ${q(join(paths.binDir, 'runc'))}
          Root = ${q(join(paths.containerdState, 'runc'))}
          SystemdCgroup = false
    [${cri('runtime')}.cni]
      bin_dirs = [${q(paths.cniBinDir)}]
      conf_dir = ${q(paths.cniConfDir)}
      max_conf_num = 1

  [plugins.'io.containerd.grpc.v1.cri']
    stream_server_address = '127.0.0.1'
    stream_server_port = '0'
`;
}

const CRI_RESTART_MS = 20_000;

/**
 * The error of containerd's CRI plugin in `ctr plugins ls --detailed` output, or undefined when
 * it loaded. Blocks start with "Type:"; a failed plugin's block has "Error:" and "Message:".
 */
export function criPluginError(detailed: string): string | undefined {
  const block = detailed
    .split(/^(?=Type:)/m)
    .find((b) => /^Type:\s+io\.containerd\.grpc\.v1\s*$/m.test(b) && /^ID:\s+cri\s*$/m.test(b));
  if (!block) return 'containerd lists no CRI plugin (io.containerd.grpc.v1 cri)';
  if (!/^Error:/m.test(block)) return undefined;
  return /^\s*Message:\s*(.+?)\s*$/m.exec(block)?.[1] ?? 'unknown error';
}

/** The program: its binary in <bin>, its pid file in <run>, its component's name. */
export const CONTAINERD = 'containerd';

export class ContainerdComponent extends Supervisor {
  readonly readyTimeoutMs = 60_000;
  private readonly paths: WorkerPaths;
  private readonly sandboxImage?: string;
  private readonly logLevel?: string;
  private readonly restrictOomScoreAdj?: boolean;
  private lastCriRestart = 0;

  constructor(opts: ContainerdOptions) {
    const { paths } = opts;
    const ctr = join(paths.binDir, 'ctr');
    // The probe restarts containerd, and runs before `this` exists.
    const self: { component?: ContainerdComponent } = {};
    super({
      name: CONTAINERD,
      binary: join(paths.binDir, CONTAINERD),
      args: ['--config', paths.containerdConfig],
      // containerd finds containerd-shim-runc-v2 (and the shim finds runc) on PATH.
      env: { PATH: `${paths.binDir}:${CHILD_PATH}`, GOGC: String(CONTAINERD_GC_PERCENT) },
      // Not kctl's 0077: runc's mknod of /dev/null would give 0600, which a container not run as root cannot open.
      umask: 0o022,
      runDir: paths.runDir,
      ready: async (signal) => {
        const ctrCall = async (args: string[]) => {
          const r = await execa(ctr, ['--address', paths.containerdSocket, ...args], {
            reject: false,
            extendEnv: false,
            env: {},
            timeout: 5000,
            cancelSignal: signal,
          });
          if (r.exitCode !== 0)
            throw new Error(`${paths.containerdSocket} does not answer: ${r.stderr.trim().split('\n').pop() ?? ''}`);
          return r.stdout;
        };
        await ctrCall(['version']);
        // containerd serves without a plugin that failed to load; kubelet then only says "unknown service".
        const criError = criPluginError(await ctrCall(['plugins', 'ls', '--detailed']));
        if (criError === undefined) return;
        await self.component?.restartForCri(criError);
        throw new Error(`containerd's CRI plugin did not load: ${criError}`);
      },
    });
    self.component = this;
    this.paths = paths;
    this.sandboxImage = opts.sandboxImage;
    this.logLevel = opts.logLevel;
    this.restrictOomScoreAdj = opts.restrictOomScoreAdj;
  }

  /**
   * A CRI plugin that failed to load stays failed until containerd restarts; its causes
   * (inotify instances used up, a snapshotter missing for a moment) may pass. At most one
   * restart per CRI_RESTART_MS, so a lasting cause is reported, not looped on.
   */
  private async restartForCri(reason: string): Promise<void> {
    if (Date.now() - this.lastCriRestart < CRI_RESTART_MS) return;
    this.lastCriRestart = Date.now();
    await this.restart(`its CRI plugin did not load: ${reason}`);
  }

  override async init(ctx?: ComponentContext): Promise<void> {
    await super.init(ctx);
    const p = this.paths;
    await mkdir(join(p.containerdRoot, 'tmp'), { recursive: true, mode: 0o711 });
    await mkdir(p.containerdState, { recursive: true, mode: 0o711 });
    await mkdir(dirname(p.containerdSocket), { recursive: true, mode: 0o711 });
    await mkdir(p.cniConfDir, { recursive: true, mode: 0o755 });
    await mkdir(p.cniBinDir, { recursive: true, mode: 0o755 });
    await mkdir(p.imagesDir, { recursive: true, mode: 0o755 });
    let restrictOomScoreAdj = this.restrictOomScoreAdj;
    if (restrictOomScoreAdj === undefined && !(await canLowerOomScore())) {
      restrictOomScoreAdj = true;
      this.log.warn("no CAP_SYS_RESOURCE: containers keep oom_score_adj >= containerd's own (restrict_oom_score_adj)");
    }
    await writeFileAtomic(
      p.containerdConfig,
      containerdConfig(p, { sandboxImage: this.sandboxImage, logLevel: this.logLevel, restrictOomScoreAdj }),
      0o600,
    );
  }
}

/** Shims of this containerd (they daemonize, so stopping containerd leaves them and their containers running). */
export async function shimPids(paths: WorkerPaths): Promise<number[]> {
  const pids: number[] = [];
  for (const entry of await readdir('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    const cmdline = await readFile(`/proc/${entry}/cmdline`, 'utf8').catch(() => '');
    const argv = cmdline.split('\0');
    if (!argv[0]?.endsWith('containerd-shim-runc-v2')) continue;
    const i = argv.indexOf('-address');
    if (i >= 0 && argv[i + 1] === paths.containerdSocket) pids.push(Number(entry));
  }
  return pids;
}

export { mountsUnder };

/** For `kctl reset` and tests: kills this containerd's shims and unmounts what it and kubelet mounted under the worker's dirs. */
export async function cleanupContainerd(paths: WorkerPaths): Promise<void> {
  for (const pid of await shimPids(paths)) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      /* gone */
    }
  }
  // containerd's state dir, not the whole run dir: a mistaken --run-dir / must not unmount the host.
  for (const point of await mountsUnder([paths.dataDir, paths.containerdState])) {
    const r = await execa('umount', [point], { reject: false });
    if (r.exitCode !== 0) await execa('umount', ['--lazy', point], { reject: false });
  }
}

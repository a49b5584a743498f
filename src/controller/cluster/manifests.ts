// The manifest applier (k0s has one): every *.yaml / *.yml under <data-dir>/manifests/<stack>/ is
// applied with server-side apply (field manager "kctl"), labelled kctl.dev/stack=<stack>, applied
// again when a file of its stack changes, and objects that leave a stack (or a stack that is
// removed) are deleted. What was applied per stack is recorded in <data-dir>/manifest-state.json,
// so pruning also works across restarts. A stack with bad YAML is logged with file and line and
// left as it is (nothing applied, nothing pruned); the other stacks go on.
// Whoever can change a manifest holds cluster-admin: a stack is applied only when root (or the
// user kctl runs as) owns its directory and files and no one else can write them; any other is
// skipped with one warning and left as it is, and so is every stack while the manifests
// directory itself fails that rule (renaming a stack away would prune its objects).
import { createHash } from 'node:crypto';
import { constants as fsConstants, watch, type FSWatcher } from 'node:fs';
import { lstat, mkdir, open, readFile, readdir, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { parseAllDocuments } from 'yaml';
import type { Component, ComponentContext, ComponentStatus } from '../../base/component.ts';
import { writeFileAtomic } from '../../base/fs.ts';
import type { Logger } from '../../base/log.ts';
import { KubeApiError, type KubeClient, type KubeManifest } from '../../kube/client.ts';
import { KindResolver } from '../../kube/discovery.ts';
import { messageOf } from '../../base/errors.ts';
import { KUBE_APISERVER } from '../components/apiserver.ts';

export const STACK_LABEL = 'kctl.dev/stack';
const FIELD_MANAGER = 'kctl';
const RESCAN_MS = 30_000;
const DEBOUNCE_MS = 300;
const RETRY_MS = 3_000;

interface ObjectRef {
  apiVersion: string;
  kind: string;
  namespace?: string;
  name: string;
}

type State = Record<string, ObjectRef[]>;

/** Kinds others depend on go first (a namespace before what lives in it, a CRD before its objects). */
const FIRST = [
  'Namespace',
  'CustomResourceDefinition',
  'ServiceAccount',
  'ClusterRole',
  'ClusterRoleBinding',
  'Role',
  'RoleBinding',
  'ConfigMap',
  'Secret',
];
const rank = (kind: string): number => (FIRST.includes(kind) ? FIRST.indexOf(kind) : FIRST.length);
const refKey = (r: ObjectRef): string => `${r.apiVersion}/${r.kind}/${r.namespace ?? ''}/${r.name}`;

export interface ParsedStack {
  objects: KubeManifest[];
  /** "file:line: message" for each problem; a stack with any is not applied. */
  errors: string[];
}

/** Parses a stack's files (sorted by name); every document must be a Kubernetes object. */
export function parseStack(files: { name: string; text: string }[]): ParsedStack {
  const objects: KubeManifest[] = [];
  const errors: string[] = [];
  for (const f of files) {
    for (const doc of parseAllDocuments(f.text)) {
      const bad = doc.errors[0];
      if (bad) {
        errors.push(`${f.name}:${bad.linePos?.[0].line ?? '?'}: ${bad.message.split('\n')[0]}`);
        continue;
      }
      const value: unknown = doc.toJS();
      if (value === null || value === undefined) continue; // an empty document
      const o = value as Partial<KubeManifest>;
      const start = doc.contents?.range?.[0] ?? doc.range?.[0];
      const line = start === undefined ? '?' : f.text.slice(0, start).split('\n').length;
      if (
        typeof o !== 'object' ||
        Array.isArray(o) ||
        typeof o.apiVersion !== 'string' ||
        typeof o.kind !== 'string' ||
        typeof o.metadata?.name !== 'string'
      ) {
        errors.push(`${f.name}:${line}: not a Kubernetes object (apiVersion, kind and metadata.name are required)`);
        continue;
      }
      objects.push(o as KubeManifest);
    }
  }
  return { objects, errors };
}

/** Who may own a manifest besides root: the user kctl runs as (its add-on stacks; tests not run as root). */
const kctlUid = (): number => process.geteuid?.() ?? 0;

/** Why kctl must not apply a file or directory with this owner and mode, or undefined. */
export function unsafeOwnership(st: { uid: number; mode: number }, uid = kctlUid()): string | undefined {
  if (st.uid !== 0 && st.uid !== uid)
    return `is owned by uid ${st.uid}, not by ${uid === 0 ? 'root' : `root or uid ${uid} (kctl's user)`}`;
  const writable = [st.mode & 0o020 ? 'group' : '', st.mode & 0o002 ? 'others' : ''].filter(Boolean);
  if (writable.length)
    return `is writable by ${writable.join(' and ')} (mode ${(st.mode & 0o7777).toString(8).padStart(4, '0')})`;
  return undefined;
}

type StackFiles = { files: { name: string; text: string }[] } | { problem: string };

/**
 * The *.yaml / *.yml files of the stack in `dir`, by name, if its directory and every file pass
 * unsafeOwnership; otherwise the first problem, naming the path. Each file is checked on the
 * descriptor it is read from, and never through a symbolic link.
 */
export async function readStackFiles(dir: string, stack: string): Promise<StackFiles> {
  const dirProblem = unsafeOwnership(await lstat(dir));
  if (dirProblem) return { problem: `${dir} ${dirProblem}` };
  const files: { name: string; text: string }[] = [];
  for (const name of (await readdir(dir)).filter((n) => /\.ya?ml$/.test(n)).sort()) {
    const path = join(dir, name);
    // O_NONBLOCK: a FIFO named *.yaml must not hang the applier.
    const fh = await open(path, fsConstants.O_RDONLY | fsConstants.O_NOFOLLOW | fsConstants.O_NONBLOCK).catch(
      (err: NodeJS.ErrnoException) => {
        if (err.code === 'ELOOP') return undefined;
        throw err;
      },
    );
    if (!fh) return { problem: `${path} is a symbolic link (only regular files are applied)` };
    try {
      const st = await fh.stat();
      if (!st.isFile()) return { problem: `${path} is not a regular file` };
      const problem = unsafeOwnership(st);
      if (problem) return { problem: `${path} ${problem}` };
      files.push({ name: join(stack, name), text: await fh.readFile('utf8') });
    } finally {
      await fh.close();
    }
  }
  return { files };
}

export class ManifestApplierComponent implements Component {
  readonly name = 'manifest-applier';
  // Add-ons and operators' stacks need only the API, not kctl's bootstrap objects: applied beside those.
  readonly startAfter = KUBE_APISERVER;
  private log!: Logger;
  private readonly kinds: KindResolver;
  private readonly stateFile: string;
  private watcher: FSWatcher | undefined;
  private timer: NodeJS.Timeout | undefined;
  private rescan: NodeJS.Timeout | undefined;
  private running = false;
  private stopped = false;
  private pass: Promise<void> = Promise.resolve();
  /** Hash of each stack's files when it was last applied without errors. */
  private readonly applied = new Map<string, string>();
  /** Hash and problems of each stack whose YAML is bad: reported once per version of its files. */
  private readonly broken = new Map<string, { hash: string; problem: string }>();
  /** Why each unsafe stack (or '' for the manifests directory) is skipped: warned once per problem. */
  private readonly unsafe = new Map<string, string>();
  private lastError: string | undefined;

  constructor(
    private readonly dir: string,
    dataDir: string,
    private readonly kube: KubeClient,
  ) {
    this.kinds = new KindResolver(kube);
    this.stateFile = join(dataDir, 'manifest-state.json');
  }

  async init(ctx: ComponentContext): Promise<void> {
    this.log = ctx.log;
  }

  async start(): Promise<void> {
    await mkdir(this.dir, { recursive: true, mode: 0o755 });
    // stop() came while the directory was made (a signal during start): a watcher made now
    // would hold the process open after everything else stopped.
    if (this.stopped) return;
    this.running = true;
    this.watcher = watch(this.dir, { recursive: true }, () => this.soon());
    this.watcher.on('error', (err) =>
      this.log.warn({ err: err.message }, 'cannot watch the manifests directory; rescanning every 30 s'),
    );
    this.rescan = setInterval(() => this.soon(), RESCAN_MS);
    this.rescan.unref();
    this.pass = this.reconcile().catch((err: Error) => {
      this.lastError = err.message;
      this.log.error({ err: err.message }, 'manifest pass failed');
    });
    await this.pass;
  }

  /** Settles after the pass that is running (and any it queued) is done: for tests and the first start. */
  settled(): Promise<void> {
    return this.pass;
  }

  private soon(delay = DEBOUNCE_MS): void {
    clearTimeout(this.timer);
    this.timer = setTimeout(() => {
      this.pass = this.pass
        .then(() => this.reconcile())
        .catch((err: Error) => {
          this.lastError = err.message;
          this.log.error({ err: err.message }, 'manifest pass failed');
        });
    }, delay);
  }

  /** Warns when `what` (a stack, or '' for the whole directory) becomes unsafe or its problem changes; returns the problem. */
  private skipUnsafe(what: string, problem: string): string {
    if (this.unsafe.get(what) !== problem) {
      const owner = kctlUid() === 0 ? 'root' : `root or uid ${kctlUid()}`;
      const skipped = what ? `stack ${what}` : 'every stack';
      this.log.warn(
        { stack: what || undefined },
        `skipped ${skipped}: ${problem}; manifests must belong to ${owner} and be writable by no one else`,
      );
    }
    this.unsafe.set(what, problem);
    return problem;
  }

  private async reconcile(): Promise<void> {
    if (!this.running) return;
    // Nothing applied and nothing pruned while the directory itself is unsafe.
    const dirProblem = unsafeOwnership(await stat(this.dir));
    if (dirProblem) {
      this.lastError = this.skipUnsafe('', `${this.dir} ${dirProblem}`);
      return;
    }
    this.unsafe.delete('');
    const { state, text: recorded } = await this.readState();
    const entries = await readdir(this.dir, { withFileTypes: true });
    const stacks = entries.filter((e) => e.isDirectory() && !e.name.startsWith('.')).map((e) => e.name);
    const problems: string[] = [];
    for (const stack of stacks.sort()) {
      const result = await this.applyStack(stack, state).catch((err: Error) => err.message);
      if (result) problems.push(`${stack}: ${result}`);
    }
    for (const gone of Object.keys(state).filter((s) => !stacks.includes(s))) {
      await this.prune(gone, state[gone] ?? [], new Set());
      delete state[gone];
      this.applied.delete(gone);
      this.log.info({ stack: gone }, `stack ${gone} removed: its objects were deleted`);
    }
    // Written only when it changed: a rescan that found nothing new leaves the data dir as it was.
    const text = JSON.stringify(state, null, 2) + '\n';
    if (text !== recorded) await writeFileAtomic(this.stateFile, text, 0o600);
    this.lastError = problems.length ? problems.join('; ') : undefined;
  }

  /** Applies one stack if its files changed; returns a problem to report, or undefined. */
  private async applyStack(stack: string, state: State): Promise<string | undefined> {
    const read = await readStackFiles(join(this.dir, stack), stack);
    if ('problem' in read) return this.skipUnsafe(stack, read.problem);
    this.unsafe.delete(stack);
    const files = read.files;
    const hash = createHash('sha256').update(JSON.stringify(files)).digest('hex');
    if (this.applied.get(stack) === hash) return undefined;
    const known = this.broken.get(stack);
    if (known?.hash === hash) return known.problem;
    const parsed = parseStack(files);
    if (parsed.errors.length) {
      for (const e of parsed.errors) this.log.error({ stack }, `bad manifest ${e}; stack ${stack} left as it is`);
      this.broken.set(stack, { hash, problem: parsed.errors.join('; ') });
      return parsed.errors.join('; ');
    }
    this.broken.delete(stack);
    const kept = new Set<string>();
    const refs: ObjectRef[] = [];
    const failures: string[] = [];
    for (const obj of [...parsed.objects].sort((a, b) => rank(a.kind) - rank(b.kind))) {
      try {
        const { path, namespace } = await this.kinds.objectPath(obj);
        const labelled: KubeManifest = {
          ...obj,
          metadata: { ...obj.metadata, namespace, labels: { ...obj.metadata.labels, [STACK_LABEL]: stack } },
        };
        await this.kube.applyAt(path, labelled, { fieldManager: FIELD_MANAGER, force: true });
        const ref = { apiVersion: obj.apiVersion, kind: obj.kind, namespace, name: obj.metadata.name };
        refs.push(ref);
        kept.add(refKey(ref));
      } catch (err) {
        failures.push(`${obj.kind} ${obj.metadata.name}: ${messageOf(err)}`);
      }
    }
    // Objects that failed to apply are still part of the stack: never prune them.
    for (const obj of parsed.objects) {
      for (const namespace of [obj.metadata.namespace, obj.metadata.namespace ?? 'default'])
        kept.add(refKey({ apiVersion: obj.apiVersion, kind: obj.kind, namespace, name: obj.metadata.name }));
    }
    await this.prune(stack, state[stack] ?? [], kept);
    state[stack] = [
      ...refs,
      ...(state[stack] ?? []).filter((r) => kept.has(refKey(r)) && !refs.some((x) => refKey(x) === refKey(r))),
    ];
    if (failures.length) {
      for (const f of failures) this.log.error({ stack }, `cannot apply ${f}`);
      // e.g. a custom resource whose CRD was applied a moment ago and is not served yet
      this.soon(RETRY_MS);
      return failures.join('; ');
    }
    this.applied.set(stack, hash);
    this.log.info({ stack, objects: refs.length }, `applied stack ${stack}`);
    return undefined;
  }

  private async prune(stack: string, previous: ObjectRef[], kept: Set<string>): Promise<void> {
    for (const r of previous.filter((p) => !kept.has(refKey(p)))) {
      try {
        const { path } = await this.kinds.objectPath({
          apiVersion: r.apiVersion,
          kind: r.kind,
          metadata: { name: r.name, namespace: r.namespace },
        });
        await this.kube.request('DELETE', path);
        this.log.info(
          { stack, kind: r.kind, name: r.name, namespace: r.namespace },
          `pruned ${r.kind} ${r.name}: no longer in stack ${stack}`,
        );
      } catch (err) {
        if (!(err instanceof KubeApiError && err.status === 404)) throw err;
      }
    }
  }

  /** What was applied per stack, and the file's text as read ('' when absent or unreadable). */
  private async readState(): Promise<{ state: State; text: string }> {
    try {
      const text = await readFile(this.stateFile, 'utf8');
      return { state: JSON.parse(text) as State, text };
    } catch {
      return { state: {}, text: '' };
    }
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.running = false;
    clearTimeout(this.timer);
    clearInterval(this.rescan);
    this.watcher?.close();
    await this.pass;
  }

  status(): Partial<ComponentStatus> {
    return { lastError: this.lastError };
  }
}

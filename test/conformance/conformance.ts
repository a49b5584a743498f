// The conformance run (test/conformance/README.md): builds what the suite needs
// (assets/build-conformance.ts), starts a lab cluster as users run kctl (a controller that cannot
// dial its nodes, two isolated workers with the suite's images imported, default network mode, and a
// host `t` for the suite, which reaches the API and the nodes as a machine on the node network
// would), runs the [Conformance] specs as certification does (the parallel ones, then the [Serial]
// ones one at a time) with a line per spec, keeps e2e.log and the suite's JUnit reports, and tears
// the lab down. `npm run conformance` (run.ts) and the smoke test in `npm test` run it.
import { createWriteStream } from 'node:fs';
import { copyFile, mkdir, readFile, writeFile } from 'node:fs/promises';
import { basename, join, resolve } from 'node:path';
import { messageOf } from '../../src/base/errors.ts';
import { buildConformance, type ConformanceBuild } from '../../assets/build-conformance.ts';
import { controllerReady, labController, nodeReady, startIsolatedWorker, track } from '../e2e/lab/cluster.ts';
import type { LabHost } from '../e2e/lab/lab.ts';
import { startLab } from '../e2e/lab/lab-test.ts';
import { waitFor } from '../wait.ts';
import { hostsToml, MIRRORED_REGISTRIES, mirrorConfig } from './registry.ts';

const WORKERS = ['w1', 'w2'] as const;
/** Where the lab's registry (registry.ts) listens on host `t`. */
const REGISTRY_PORT = 5000;

export interface ConformanceOptions {
  /** ginkgo --focus: only the [Conformance] specs whose text matches. */
  focus?: string;
  /** The results folder: e2e.log, parallel/junit_01.xml, serial/junit_01.xml. */
  out: string;
  /** ginkgo nodes for the parallel specs. */
  nodes: number;
}

export interface ConformanceResult {
  version: string;
  /** The specs that ran, by their JUnit names. */
  passed: string[];
  failed: string[];
  /** ginkgo's exit codes, parallel then serial. */
  exits: number[];
  minutes: number;
}

/** As certification runs the suite: the parallel specs first, then the [Serial] ones on one ginkgo node. */
const PHASES: { phase: 'parallel' | 'serial'; labels: string; nodes?: number }[] = [
  { phase: 'parallel', labels: 'Conformance && !Serial' },
  { phase: 'serial', labels: 'Conformance && Serial', nodes: 1 },
];

/** The entities XML uses in attribute values (named, and the numeric one the suite writes for ' ). */
const XML_ENTITIES: Record<string, string> = { amp: '&', lt: '<', gt: '>', quot: '"', apos: "'", '#39': "'" };

/** One spec's result as the line ginkgo prints when it ends: `• [12.3 seconds]`, `• [FAILED] [4.0 seconds]`. */
const SPEC_END = /^• (?:\[(FAILED|PANICKED|TIMEDOUT|INTERRUPTED)\] )?\[([\d.]+) seconds\]/;

/**
 * Runs ginkgo with the suite on host `t`, every line into `log`, and a progress line per spec
 * (ginkgo prints the spec's texts on the lines after its result, up to the one with its labels).
 */
async function runGinkgo(
  t: LabHost,
  build: ConformanceBuild,
  o: { labels: string; focus?: string; nodes: number; out: string; kubeconfig: string; phase: string },
  log: NodeJS.WritableStream,
  counter: { n: number },
): Promise<number> {
  const args = [
    `--nodes=${o.nodes}`,
    `--label-filter=${o.labels}`,
    ...(o.focus ? [`--focus=${o.focus}`] : []),
    '--no-color',
    '-v',
    '--timeout=24h',
    build.e2eTest,
    '--',
    `--kubeconfig=${o.kubeconfig}`,
    '--provider=skeleton',
    // The suite writes its own junit_01.xml there: one folder per phase, or the second overwrites the first.
    `--report-dir=${join(o.out, o.phase)}`,
    '--disable-log-dump',
  ];
  const child = t.spawn(build.ginkgo, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  let pending: { status: string; seconds: string; text: string[] } | undefined;
  const onLine = (line: string) => {
    log.write(`${line}\n`);
    const end = SPEC_END.exec(line);
    if (end) {
      pending = { status: end[1] ?? 'ok', seconds: end[2]!, text: [] };
      return;
    }
    if (!pending) return;
    const text = line.trim();
    // ginkgo's separators and its S per skipped spec are not the spec's name.
    if (text && !/^(-{10,}|S+)$/.test(text)) pending.text.push(text);
    // A suite-level node (SynchronizedAfterSuite, ReportAfterSuite) also ends with a line of
    // status: it names no [Conformance] spec within a few lines, and is no spec.
    if (!text.includes('[Conformance]')) {
      if (pending.text.length > 6) pending = undefined;
      return;
    }
    counter.n += 1;
    const name = pending.text.join(' ').replace(/\s+/g, ' ');
    process.stdout.write(`[${counter.n}] ${pending.status} ${pending.seconds}s ${name}\n`);
    pending = undefined;
  };
  for (const stream of [child.stdout!, child.stderr!]) {
    let rest = '';
    stream.on('data', (chunk: Buffer) => {
      const lines = (rest + chunk.toString()).split('\n');
      rest = lines.pop() ?? '';
      lines.forEach(onLine);
    });
  }
  return new Promise((done) => child.on('exit', (code) => done(code ?? 1)));
}

/** The specs of a JUnit report that ran (ginkgo's suite-level entries and skipped specs left out), passed or not. */
async function junitResults(file: string): Promise<{ passed: string[]; failed: string[] }> {
  const xml = await readFile(file, 'utf8').catch(() => '');
  const out = { passed: [] as string[], failed: [] as string[] };
  for (const m of xml.matchAll(/<testcase name="([^"]*)"[^>]*? status="([^"]*)"/g)) {
    const name = m[1] ?? '';
    const status = m[2] ?? '';
    if (!name.startsWith('[It]') || status === 'skipped' || status === 'pending') continue;
    const text = name
      .replace(/^\[It\] /, '')
      .replace(/&(amp|lt|gt|quot|apos|#39);/g, (_, e: string) => XML_ENTITIES[e]!);
    (status === 'passed' ? out.passed : out.failed).push(text);
  }
  return out;
}

/**
 * Builds the suite if need be, runs it against a fresh lab cluster (the top of this file) and tears
 * the lab down; prints a line per spec and a summary.
 */
export async function runConformance(o: ConformanceOptions): Promise<ConformanceResult> {
  const started = Date.now();
  const build = await buildConformance();
  process.stdout.write(`suite: e2e.test ${build.version}, ${build.images.length} images\n`);
  await mkdir(o.out, { recursive: true });
  const cleanups: (() => Promise<void>)[] = [];
  const teardown = async () => {
    for (const fn of cleanups.splice(0).reverse())
      await fn().catch((err: unknown) => process.stderr.write(`teardown: ${messageOf(err)}\n`));
  };
  const interrupted = () => void teardown().then(() => process.exit(130));
  process.once('SIGINT', interrupted);
  try {
    const { lab, dir, kctlBin } = await startLab({ after: (fn) => cleanups.push(fn) }, 'conf', ['c', ...WORKERS, 't'], {
      workers: WORKERS,
    });
    const ctl = lab.host('c');
    const t = lab.host('t');
    const c = await labController(kctlBin, ctl, dir);
    const controller = track(ctl.spawn(kctlBin, c.args));
    // The suite's images by registry too, for specs that pull whatever is imported (pull policy Always).
    const registry = track(
      t.spawn(
        process.execPath,
        [
          '--import',
          'tsx',
          join(import.meta.dirname, 'registry.ts'),
          String(REGISTRY_PORT),
          join(dir, 'registry'),
          ...build.images,
        ],
        { cwd: resolve(import.meta.dirname, '../..') },
      ),
    );
    await controllerReady(controller);
    await waitFor('the lab registry ready', 120_000, async () => {
      if (registry.child.exitCode !== null) throw new Error(`the lab registry exited:\n${registry.log()}`);
      return registry.saw('registry ready');
    });
    for (const w of WORKERS) {
      // A worker imports every image tarball in <data-dir>/images at start (the air-gap bundle).
      const data = join(dir, `${w}-data`);
      const images = join(data, 'images');
      await mkdir(images, { recursive: true });
      for (const tar of build.images) await copyFile(tar, join(images, basename(tar)));
      // ...and pulls from the lab's registry where a pod asks for a pull: containerd's hosts.toml
      // per registry, read through a drop-in in kctl's containerd.d folder.
      const hosts = join(data, 'registry-hosts');
      for (const r of MIRRORED_REGISTRIES) {
        await mkdir(join(hosts, r), { recursive: true });
        await writeFile(join(hosts, r, 'hosts.toml'), hostsToml(r, `http://${t.ip}:${REGISTRY_PORT}`));
      }
      await mkdir(join(data, 'containerd.d'), { recursive: true });
      await writeFile(join(data, 'containerd.d', 'registry-mirror.toml'), mirrorConfig(hosts));
      process.stdout.write(`starting worker ${w} (imports ${build.images.length} images)\n`);
      await startIsolatedWorker(kctlBin, lab, c, ctl, lab.host(w), dir);
    }
    await waitFor('both nodes Ready', 300_000, async () => {
      for (const w of WORKERS) if (!(await nodeReady((a) => c.kubectl(a), w))) return false;
      return true;
    });
    await waitFor(
      'CoreDNS rolled out',
      300_000,
      async () =>
        (await c.kubectl(['-n', 'kube-system', 'rollout', 'status', 'deployment/coredns', '--timeout=20s']))
          .exitCode === 0,
    );
    const kubeconfig = join(c.dataDir, 'pki', 'admin.conf');
    const log = createWriteStream(join(o.out, 'e2e.log'));
    const counter = { n: 0 };
    const run = { focus: o.focus, out: o.out, kubeconfig };
    const what = o.focus ? `the [Conformance] specs matching ${o.focus}` : 'the [Conformance] specs';
    const exits: number[] = [];
    const total = { passed: [] as string[], failed: [] as string[] };
    process.stdout.write(
      `running ${what}: the parallel ones on ${o.nodes} ginkgo nodes, then the [Serial] ones on one\n`,
    );
    for (const p of PHASES) {
      exits.push(await runGinkgo(t, build, { ...run, ...p, nodes: p.nodes ?? o.nodes }, log, counter));
      const r = await junitResults(join(o.out, p.phase, 'junit_01.xml'));
      total.passed.push(...r.passed);
      total.failed.push(...r.failed);
    }
    await new Promise((done) => log.end(done));
    const minutes = (Date.now() - started) / 60_000;
    process.stdout.write(
      `\nconformance ${build.version}: ${total.passed.length} passed, ${total.failed.length} failed in ${minutes.toFixed(1)} min; e2e.log and JUnit in ${o.out}\n`,
    );
    for (const f of total.failed) process.stdout.write(`  failed: ${f}\n`);
    // A suite that fails before its specs (its setup) reports no failed spec, only its exit code.
    if (total.failed.length === 0 && exits.some((e) => e !== 0))
      process.stdout.write(`  ginkgo exited ${exits.join(', ')} (parallel, serial): see e2e.log\n`);
    return { version: build.version, ...total, exits, minutes };
  } finally {
    process.off('SIGINT', interrupted);
    await teardown();
  }
}

// The images the Kubernetes conformance specs run, under the exact names the suite asks for
// (`e2e.test --list-images`), built without a registry. Upstream builds most of them from
// Kubernetes' own Go sources over a distribution base; so do we, from the pinned Kubernetes
// module, over one Debian bookworm base made by mmdebstrap with the tools the specs exec (dig,
// nslookup, curl, nc, ip, nginx). Every image over that base shares its layer, so a node stores
// it once. What each image is made of, against upstream's, is in test/conformance/README.md.
import { execa } from 'execa';
import { existsSync } from 'node:fs';
import { chmod, mkdir, readFile, rename, symlink, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { componentsDir, loadManifest, type SourcePin } from '../src/payload/manifest.ts';
import { PATH_ENV, sha256 } from '../src/payload/oci.ts';
import { goBuild, type PreparedSource } from './build-components.ts';
import { buildIfStale, busyboxSpec, pauseSpec, type ImageSpec } from './build-images.ts';
import { DEBIAN_MIRROR, ensureDebianPackages } from './debian.ts';
import { progress } from './progress.ts';

const DEBIAN_SUITE = 'bookworm';
/**
 * What the specs run inside the Debian-based images: agnhost's tools (upstream: alpine with
 * bind-tools, curl, netcat-openbsd, iproute2, iperf, bash), glibc-dns-testing's dnsutils, nginx.
 */
const BASE_PACKAGES = [
  'bash',
  'ca-certificates',
  'curl',
  'dnsutils',
  'iproute2',
  'iperf',
  'netcat-openbsd',
  'nginx',
  'procps',
];

/** Bump when a recipe's output changes for the same inputs. */
const RECIPES_VERSION = '1';

interface Context {
  outDir: string;
  pin: SourcePin;
  src: () => Promise<PreparedSource>;
  /** The component binaries (etcd, coredns) of this checkout's pins. */
  binDir: string;
  /** The shared Debian base (made once) and its tar's digest (hashed once: every image's cache key holds it). */
  base: () => Promise<{ tar: string; digest: string }>;
  /** A text file of the base (read once). */
  baseFile: (path: string) => Promise<string>;
  goBinary: (pkg: string, name: string) => Promise<string>;
}

/** An image name the suite lists, without its registry and tag: registry.k8s.io/e2e-test-images/agnhost:2.63.0 → e2e-test-images/agnhost. */
function repoOf(image: string): string {
  const noTag = image.slice(0, image.lastIndexOf(':'));
  return noTag.split('/').slice(1).join('/');
}

const fileOf = (image: string) => `${image.replace(/^[^/]+\//, '').replace(/[/:]/g, '_')}.oci.tar`;

/** A spec over the Debian base: `files` are written into the image's own layer (path → bytes and mode). */
async function overBase(
  ctx: Context,
  name: string,
  config: Record<string, unknown>,
  files: { path: string; bytes?: Buffer; mode?: number; link?: string; dir?: boolean }[],
): Promise<ImageSpec> {
  const base = await ctx.base();
  const key = sha256(
    `${RECIPES_VERSION}\n${JSON.stringify(config)}\n${base.digest}\n${files
      .map((f) => `${f.path} ${f.mode ?? ''} ${f.link ?? ''} ${f.bytes ? sha256(f.bytes) : ''}`)
      .join('\n')}`,
  );
  return {
    name,
    file: fileOf(name),
    inputsKey: key,
    baseTar: base.tar,
    config: { Env: [PATH_ENV], WorkingDir: '/', ...config },
    async populate(root) {
      const out: string[] = [];
      for (const f of files) {
        const at = join(root, f.path);
        if (f.dir) await mkdir(at, { recursive: true });
        else if (f.link) await symlink(f.link, at);
        else {
          await writeFile(at, f.bytes ?? Buffer.alloc(0));
          await chmod(at, f.mode ?? 0o644);
        }
        out.push(f.path);
      }
      return out;
    },
  };
}

/** An /etc/passwd and /etc/group of the base with more entries (they replace the base's files in the upper layer). */
async function accounts(ctx: Context, users: string[], groups: string[]) {
  const passwd = await ctx.baseFile('./etc/passwd');
  const group = await ctx.baseFile('./etc/group');
  return [
    { path: 'etc', dir: true },
    { path: 'etc/passwd', bytes: Buffer.from(`${passwd.trim()}\n${users.join('\n')}\n`) },
    { path: 'etc/group', bytes: Buffer.from(`${group.trim()}\n${groups.join('\n')}\n`) },
  ];
}

async function agnhost(ctx: Context, name: string, extra: { path: string; bytes: Buffer }[] = [], cmd = ['pause']) {
  const src = await ctx.src();
  const porter = join(src.dir, 'test/images/agnhost/porter');
  return overBase(ctx, name, { Entrypoint: ['/agnhost'], Cmd: cmd, ExposedPorts: { '80/tcp': {}, '8080/tcp': {} } }, [
    { path: 'agnhost', bytes: await readFile(await ctx.goBinary('./test/images/agnhost', 'agnhost')), mode: 0o755 },
    { path: 'agnhost-2', link: 'agnhost' },
    { path: 'coredns', bytes: await readFile(join(ctx.binDir, 'coredns')), mode: 0o755 },
    { path: 'localhost.crt', bytes: await readFile(join(porter, 'localhost.crt')) },
    { path: 'localhost.key', bytes: await readFile(join(porter, 'localhost.key')) },
    { path: 'uploads', dir: true },
    ...(await accounts(
      ctx,
      ['user-defined-in-image:x:1000:1000::/home/user-defined-in-image:/bin/sh'],
      ['user-defined-in-image:x:1000:', 'group-defined-in-image:x:50000:user-defined-in-image'],
    )),
    ...extra,
  ]);
}

/** The recipe for each image the conformance specs run, by repository. */
const RECIPES: Record<string, (ctx: Context, name: string) => Promise<ImageSpec>> = {
  'e2e-test-images/agnhost': (ctx, name) => agnhost(ctx, name),
  'e2e-test-images/busybox': (_ctx, name) => busyboxSpec(name, fileOf(name)),
  pause: (_ctx, name) => pauseSpec(name, fileOf(name)),
  'e2e-test-images/glibc-dns-testing': async (ctx, name) =>
    overBase(ctx, name, { Cmd: ['bash'] }, [
      { path: 'coredns', bytes: await readFile(join(ctx.binDir, 'coredns')), mode: 0o755 },
    ]),
  // Debian's nginx on port 80, as the official image serves: logs to the container's output.
  'e2e-test-images/nginx': (ctx, name) =>
    overBase(ctx, name, { Cmd: ['nginx', '-g', 'daemon off;'], ExposedPorts: { '80/tcp': {} } }, [
      { path: 'var', dir: true },
      { path: 'var/log', dir: true },
      { path: 'var/log/nginx', dir: true },
      { path: 'var/log/nginx/access.log', link: '/dev/stdout' },
      { path: 'var/log/nginx/error.log', link: '/dev/stderr' },
    ]),
  'e2e-test-images/kitten': (ctx, name) => webserver(ctx, name, 'kitten'),
  'e2e-test-images/nautilus': (ctx, name) => webserver(ctx, name, 'nautilus'),
  'e2e-test-images/nonroot': (ctx, name) => overBase(ctx, name, { User: '1234', Cmd: ['bash'] }, []),
  'e2e-test-images/nonewprivs': async (ctx, name) =>
    overBase(ctx, name, { Cmd: ['nnp'] }, [
      { path: 'usr', dir: true },
      { path: 'usr/local', dir: true },
      { path: 'usr/local/bin', dir: true },
      {
        path: 'usr/local/bin/nnp',
        bytes: await readFile(await ctx.goBinary('./test/images/nonewprivs', 'nnp')),
        mode: 0o4755,
      },
    ]),
  // The etcd kctl runs (its own pin), where the spec starts it: /usr/local/bin/etcd.
  etcd: async (ctx, name) =>
    overBase(ctx, name, {}, [
      { path: 'usr', dir: true },
      { path: 'usr/local', dir: true },
      { path: 'usr/local/bin', dir: true },
      { path: 'usr/local/bin/etcd', bytes: await readFile(join(ctx.binDir, 'etcd')), mode: 0o755 },
      { path: 'usr/local/bin/etcdctl', bytes: await readFile(join(ctx.binDir, 'etcdctl')), mode: 0o755 },
    ]),
  'e2e-test-images/sample-apiserver': async (ctx, name) =>
    overBase(ctx, name, { Entrypoint: ['/sample-apiserver'] }, [
      {
        path: 'sample-apiserver',
        bytes: await readFile(await ctx.goBinary('k8s.io/sample-apiserver', 'sample-apiserver')),
        mode: 0o755,
      },
    ]),
};

/** kitten and nautilus: agnhost's test-webserver serving an image and a data.json from /. */
async function webserver(ctx: Context, name: string, which: 'kitten' | 'nautilus') {
  const html = join((await ctx.src()).dir, 'test/images', which, 'html');
  return agnhost(
    ctx,
    name,
    [
      { path: `${which}.jpg`, bytes: await readFile(join(html, `${which}.jpg`)) },
      { path: 'data.json', bytes: await readFile(join(html, 'data.json')) },
    ],
    ['test-webserver'],
  );
}

/**
 * Images the suite lists that no [Conformance] spec runs (or that must fail to pull), by
 * repository or by repository:tag: not built.
 */
const NOT_FOR_CONFORMANCE = [
  'e2e-test-images/busybox:1.36.1-1', // storage specs; the specs' busybox is 1.37.0-1
  'e2e-test-images/nginx:1.27-0', // NginxNew: no [Conformance] spec
  'k8s-authenticated-test/', // a private registry's image, for the credential-provider specs
  'sig-storage/',
  'apparmor-loader',
  'distroless-iptables',
  'alpine', // the invalid registry's image: specs expect its pull to fail
  'ipc-utils',
  'nfs-provisioner',
  'node-perf/',
  'perl',
  'regression-issue-74839',
  'resource-consumer',
  'volume/',
  'cloud-provider-gcp',
];

/** The images `e2e.test --list-images` names that a recipe here builds, and those left out. */
export function conformanceImageNames(listed: string[]): { build: string[]; skipped: string[] } {
  const build: string[] = [];
  const skipped: string[] = [];
  for (const image of listed) {
    const repo = repoOf(image);
    const tagged = `${repo}:${image.slice(image.lastIndexOf(':') + 1)}`;
    if (NOT_FOR_CONFORMANCE.some((n) => (n.includes(':') ? tagged === n : repo.includes(n)))) skipped.push(image);
    else if (RECIPES[repo]) build.push(image);
    else throw new Error(`the suite lists ${image}, which has no recipe in assets/conformance-images.ts: add one`);
  }
  return { build, skipped };
}

/** The Debian base every recipe over it shares: an uncompressed tar, made once. */
async function debianBase(outDir: string): Promise<string> {
  const tar = join(outDir, `debian-${DEBIAN_SUITE}-base.tar`);
  const key = `${DEBIAN_SUITE} ${BASE_PACKAGES.join(',')}`;
  if (existsSync(tar) && (await readFile(`${tar}.key`, 'utf8').catch(() => '')).trim() === key) return tar;
  await ensureDebianPackages(['mmdebstrap']);
  await mkdir(outDir, { recursive: true });
  process.stderr.write(`conformance images: making a Debian ${DEBIAN_SUITE} base (${BASE_PACKAGES.join(' ')})\n`);
  const r = await execa(
    'mmdebstrap',
    [
      '--variant=apt',
      '--format=tar',
      `--include=${BASE_PACKAGES.join(',')}`,
      '--dpkgopt=path-exclude=/usr/share/doc/*',
      '--dpkgopt=path-exclude=/usr/share/man/*',
      '--dpkgopt=path-exclude=/usr/share/locale/*',
      DEBIAN_SUITE,
      `${tar}.tmp`,
      DEBIAN_MIRROR,
    ],
    { reject: false, all: true, env: { SOURCE_DATE_EPOCH: '1735689600' } },
  );
  if (r.exitCode !== 0) throw new Error(`mmdebstrap failed (is ${DEBIAN_MIRROR} reachable?):\n${r.all.slice(-3000)}`);
  await rename(`${tar}.tmp`, tar);
  await writeFile(`${tar}.key`, `${key}\n`);
  return tar;
}

/** Builds every image the suite lists and a recipe covers into `outDir`; returns the tarballs. */
export async function buildConformanceImages(
  outDir: string,
  o: { pin: SourcePin; prepare: () => Promise<PreparedSource>; listed: string[] },
): Promise<string[]> {
  const { build } = conformanceImageNames(o.listed);
  let src: Promise<PreparedSource> | undefined;
  let base: Promise<{ tar: string; digest: string }> | undefined;
  const baseFiles = new Map<string, Promise<string>>();
  const binaries = new Map<string, Promise<string>>();
  const once = <T>(cache: Map<string, Promise<T>>, key: string, make: () => Promise<T>): Promise<T> => {
    let p = cache.get(key);
    if (!p) cache.set(key, (p = make()));
    return p;
  };
  const ctx: Context = {
    outDir,
    pin: o.pin,
    src: () => (src ??= o.prepare()),
    binDir: join(componentsDir(loadManifest().key), 'bin'),
    base: () => (base ??= debianBase(outDir).then(async (tar) => ({ tar, digest: sha256(await readFile(tar)) }))),
    baseFile: (path) =>
      once(baseFiles, path, async () => (await execa('tar', ['-xOf', (await ctx.base()).tar, path])).stdout),
    goBinary: (pkg, name) =>
      once(binaries, pkg, async () => {
        const out = join(outDir, 'bin', name);
        if (!existsSync(out)) await goBuild(name, o.pin, await ctx.src(), pkg, out);
        return out;
      }),
  };
  await mkdir(join(outDir, 'bin'), { recursive: true });
  const bar = progress(build.length, 'conformance images');
  const paths: string[] = [];
  for (const image of build) {
    bar.step(image);
    paths.push(await buildIfStale(await RECIPES[repoOf(image)]!(ctx, image), outDir));
  }
  bar.done();
  return paths;
}

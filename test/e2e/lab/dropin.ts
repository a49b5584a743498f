// What the drop-in tests (kctl konnectivity-agent and konnectivity-server beside upstream's
// proxy-agent and proxy-server) share: processes with their output, a PKI on disk, scrapes
// read as families and series, --help read as flag names.
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { tempDir } from '../../helpers.ts';
import { makePki } from '../../unit/konnectivity/fixtures.ts';

export type T = { after: (fn: () => Promise<void> | void) => void };

export interface Proc {
  child: ChildProcess;
  output: () => string;
  exited: Promise<number | null>;
}

export function start(t: T, bin: string, args: string[], argv0?: string): Proc {
  const child = spawn(bin, args, { stdio: ['ignore', 'pipe', 'pipe'], argv0 });
  let out = '';
  child.stdout!.on('data', (c: Buffer) => (out += c.toString()));
  child.stderr!.on('data', (c: Buffer) => (out += c.toString()));
  const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
  t.after(async () => {
    if (child.exitCode === null) child.kill('SIGKILL');
    await exited;
  });
  return { child, output: () => out, exited };
}

export interface Files {
  dir: string;
  ca: string;
  serverCert: string;
  serverKey: string;
  agentCert: string;
  agentKey: string;
}

export async function pkiFiles(t: T): Promise<Files> {
  const pki = await makePki();
  const dir = await tempDir(t, 'kctl-dropin-');
  const node = await pki.nodeCert('dropin-node');
  const f = {
    dir,
    ca: join(dir, 'ca.crt'),
    serverCert: join(dir, 'server.crt'),
    serverKey: join(dir, 'server.key'),
    agentCert: join(dir, 'agent.crt'),
    agentKey: join(dir, 'agent.key'),
  };
  await Promise.all([
    writeFile(f.ca, pki.ca),
    writeFile(f.serverCert, pki.serverCert),
    writeFile(f.serverKey, pki.serverKey, { mode: 0o600 }),
    writeFile(f.agentCert, node.cert),
    writeFile(f.agentKey, node.key, { mode: 0o600 }),
  ]);
  return f;
}

/**
 * The flags a proxy-server (or `kctl konnectivity-server`) needs for a GRPC frontend on `uds` and
 * agents on 127.0.0.1:`agentPort`, with the PKI of `f`; the caller adds health, admin and id flags.
 */
export function grpcServerFlags(f: Files, uds: string, agentPort: number): string[] {
  return [
    '--mode=grpc',
    `--uds-name=${uds}`,
    '--delete-existing-uds-file',
    '--server-port=0',
    `--cluster-cert=${f.serverCert}`,
    `--cluster-key=${f.serverKey}`,
    `--cluster-ca-cert=${f.ca}`,
    `--agent-port=${agentPort}`,
    '--agent-bind-address=127.0.0.1',
  ];
}

export async function get(url: string): Promise<{ status: number; body: string }> {
  const r = await fetch(url);
  return { status: r.status, body: await r.text() };
}

/** family -> HELP text and the label names its samples carry (le and quantile aside). */
export function families(scrape: string): Map<string, { help: string; labels: string }> {
  const out = new Map<string, { help: string; labels: Set<string> }>();
  for (const line of scrape.split('\n')) {
    const help = /^# HELP (\S+) (.*)$/.exec(line);
    if (help) {
      out.set(help[1]!, { help: help[2]!, labels: new Set() });
      continue;
    }
    const sample = /^([a-zA-Z_:][\w:]*)(?:\{(.*)\})? /.exec(line);
    if (!sample) continue;
    const fam =
      [...out.keys()].find((k) => sample[1] === k || sample[1]!.replace(/_(bucket|sum|count|total)$/, '') === k) ??
      sample[1]!;
    for (const m of (sample[2] ?? '').matchAll(/(\w+)="/g))
      if (m[1] !== 'le' && m[1] !== 'quantile') out.get(fam)?.labels.add(m[1]!);
  }
  return new Map([...out].map(([k, v]) => [k, { help: v.help, labels: [...v.labels].sort().join(',') }]));
}

/** Samples of one family as "name{labels} value" lines. */
export function series(scrape: string, name: string): string[] {
  return scrape
    .split('\n')
    .filter((l) => l.startsWith(`${name}{`) || l.startsWith(`${name} `))
    .sort();
}

/** The flag names a pflag --help lists. */
export function helpFlags(help: string): string[] {
  return [...help.matchAll(/^\s+(?:-\w, )?--([\w-]+)/gm)].map((m) => m[1]!).sort();
}

/** One gauge or counter sample's value in a scrape; 0 when absent. */
export function sample(scrape: string, line: string): number {
  const hit = scrape.split('\n').find((l) => l.startsWith(`${line} `));
  return hit ? Number(hit.split(' ').pop()) : 0;
}

/**
 * Every family upstream's scrape has is in kctl's with the same HELP and label names (kctl may
 * have more). Go's runtime families (go_*) aside: kctl is a Node process, with nodejs_* instead.
 * Returns the names compared.
 */
export function assertSameFamilies(what: string, upstream: string, kctl: string): string[] {
  const [u, k] = [families(upstream), families(kctl)];
  assert.ok(u.size > 10, `upstream's ${what} scrape has families`);
  const compared = [...u.keys()].filter((name) => !name.startsWith('go_'));
  for (const name of compared) assert.deepEqual(k.get(name), u.get(name), `${what}: ${name} (HELP and label names)`);
  return compared;
}

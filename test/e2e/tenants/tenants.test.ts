// Tenant control planes (kctl controller --name): ten api-only tenants start at once on this host
// with ports kctl picks and records, each ready with only storage, kube-apiserver and a trimmed
// controller-manager; each takes a CRD and 1,000 custom objects; a namespace's deletion collects
// what it held; kctl tenant list shows them all; a restart of every tenant keeps data, CA and ports.
// Two tenants on one real PostgreSQL get a database each and keep separate data. Bad input (a
// tenant already running, a role that may not create databases, an unreachable server, a database
// another tenant holds, an exhausted port range) gets one line and leaves no tenant behind.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test, type TestContext } from 'node:test';
import type { TenantListEntry } from '../../../src/cli/tenant.ts';
import type { ControllerStatusReport } from '../../../src/controller/leases/status.ts';
import type { PortClaim } from '../../../src/host/port-claims.ts';
import { track, type Tracked } from '../lab/cluster.ts';
import { hostStateArgs, kctl, requireKctl, ownHostState } from '../lab/kctl.ts';
import { startPostgres } from '../lab/postgres.ts';
import { apiStatus, createWidgets, widgets } from '../lab/tenant-api.ts';
import { waitFor } from '../../wait.ts';

const hostState = ownHostState();

const RANGE_BASE = 19100 + Math.floor(Math.random() * 40) * 20;

/** A host's tenants under one --data-dir and --run-dir. */
class TenantHost {
  readonly procs = new Map<string, Tracked>();
  constructor(
    readonly dir: string,
    readonly range: string,
    readonly config: string,
  ) {}

  get dataDir(): string {
    return join(this.dir, 'data');
  }
  get runDir(): string {
    return join(this.dir, 'run');
  }
  private root(): string[] {
    return ['--data-dir', this.dataDir, '--run-dir', this.runDir, ...hostStateArgs()];
  }
  args(name: string, extra: string[] = []): string[] {
    return [
      ...this.root(),
      '--name',
      name,
      'controller',
      '--config',
      this.config,
      '--port-range',
      this.range,
      ...extra,
    ];
  }
  start(name: string, extra: string[] = []): Tracked {
    const p = track(spawn(requireKctl(), this.args(name, extra)));
    this.procs.set(name, p);
    return p;
  }
  async ready(name: string): Promise<void> {
    const p = this.procs.get(name)!;
    const outcome = await waitFor(`tenant ${name} ready`, 240_000, async () =>
      p.child.exitCode !== null ? 'exited' : p.saw('"msg":"controller ready"') && 'ready',
    );
    assert.equal(outcome, 'ready', p.log());
  }
  async stop(name: string): Promise<void> {
    const p = this.procs.get(name);
    p?.child.kill('SIGTERM');
    await p?.exited;
    this.procs.delete(name);
  }
  async stopAll(): Promise<void> {
    await Promise.all([...this.procs.keys()].map((n) => this.stop(n)));
  }
  kubectl(name: string, args: string[], input?: string) {
    return kctl([...this.root(), '--name', name, 'kubectl', ...args], { input, timeout: 180_000 });
  }
  run(args: string[]) {
    return kctl([...this.root(), ...args]);
  }
  async list(): Promise<TenantListEntry[]> {
    const r = await this.run(['tenant', 'list', '-o', 'json']);
    assert.equal(r.exitCode, 0, String(r.stderr));
    return JSON.parse(String(r.stdout)) as TenantListEntry[];
  }
  tenantDir(name: string): string {
    return join(this.dataDir, 'tenants', name);
  }
  async caDigest(name: string): Promise<string> {
    return createHash('sha256')
      .update(await readFile(join(this.tenantDir(name), 'pki', 'ca.crt')))
      .digest('hex');
  }
  /** One refused start: exit code not 0, exactly one line on stderr matching `expect`, no tenant dir left. */
  async refused(name: string, expect: RegExp, extra: string[] = [], config = this.config): Promise<void> {
    const before = await readdir(join(this.dataDir, 'tenants')).catch(() => [] as string[]);
    const args = this.args(name, extra).map((a) => (a === this.config ? config : a));
    const r = await kctl(args, { timeout: 60_000 });
    assert.notEqual(r.exitCode, 0, `tenant ${name} started: ${String(r.stderr)}`);
    const err = String(r.stderr).trim();
    assert.equal(err.split('\n').length, 1, err);
    assert.match(err, expect);
    assert.deepEqual(
      await readdir(join(this.dataDir, 'tenants')).catch(() => [] as string[]),
      before,
      'a refused start left something in tenants/',
    );
  }
}

/**
 * A tenant host in a new temporary directory named from `prefix`. One after-hook stops its
 * tenants, then removes the directory: removed first (a separate tempDir's hook, added earlier,
 * runs earlier), it was written again by tenants still running (their encryption config).
 */
async function tenantHost(t: TestContext, prefix: string, range: [number, number], spec: string): Promise<TenantHost> {
  const dir = await mkdtemp(join(tmpdir(), prefix));
  const config = join(dir, 'tenant.yaml');
  const host = new TenantHost(dir, `${range[0]}-${range[1]}`, config);
  t.after(async () => {
    await host.stopAll();
    await rm(dir, { recursive: true, force: true, maxRetries: 10, retryDelay: 100 });
  });
  await writeFile(config, `spec:\n  api: { address: 127.0.0.1 }\n${spec}`);
  return host;
}

const count = async (host: TenantHost, name: string, args: string[]) =>
  String((await host.kubectl(name, [...args, '-o', 'name'])).stdout)
    .trim()
    .split('\n')
    .filter(Boolean).length;

test('ten tenants at once with --name: own ports, CA and data; CRD, 1,000 objects and namespace GC in each; tenant list; restart keeps data, CA and ports', async (t) => {
  const host = await tenantHost(t, 'kctl-tenants-', [RANGE_BASE, RANGE_BASE + 19], '');
  const names = Array.from({ length: 10 }, (_, i) => `team-${i}`);
  const started = Date.now();
  for (const n of names) host.start(n);
  for (const n of names) await host.ready(n);
  t.diagnostic(`ten tenants ready ${((Date.now() - started) / 1000).toFixed(1)} s after they were started together`);

  const list = await host.list();
  assert.deepEqual(
    list.map((e) => [e.name, e.state]),
    names.map((n) => [n, 'running']),
  );
  const apiPorts = list.map((e) => e.ports.api!);
  const allPorts = list.flatMap((e) => Object.values(e.ports));
  assert.equal(new Set(allPorts).size, 20, `ports picked twice: ${allPorts.join(',')}`);
  assert.ok(allPorts.every((p) => p >= RANGE_BASE && p <= RANGE_BASE + 19));
  const text = String((await host.run(['tenant', 'list'])).stdout);
  assert.match(text, /^NAME\s+PROFILE\s+STATE\s+VERSION\s+API\s+NODES\s+AGENTS\s+STORAGE\s+MEMORY\s+PID$/m);
  assert.match(
    text,
    new RegExp(
      `^team-0\\s+api-only\\s+running\\s+\\S+\\s+https://127\\.0\\.0\\.1:${apiPorts[0]}\\s+-\\s+-\\s+kine \\(sqlite\\)\\s+\\d+Mi\\s+\\d+$`,
      'm',
    ),
  );
  // Memory is each tenant's own share (PSS): well under what ten copies of the binaries would take.
  assert.ok(
    list.every((e) => e.memoryMiB! > 20 && e.memoryMiB! < 1024),
    list.map((e) => e.memoryMiB).join(','),
  );
  // One staged copy of the binaries for all of them.
  assert.ok(existsSync(join(host.dataDir, 'bin', 'current', 'kube-apiserver')));
  assert.equal(existsSync(join(host.tenantDir('team-0'), 'bin')), false);

  const cas = new Map<string, string>();
  for (const [i, n] of names.entries()) {
    const ca = await readFile(join(host.tenantDir(n), 'pki', 'ca.crt'), 'utf8');
    cas.set(n, await host.caDigest(n));
    assert.equal(await apiStatus(apiPorts[i]!, '/readyz', { ca }), 200, `${n} /readyz`);
    const status = JSON.parse(
      String((await host.run(['--name', n, 'status', '-o', 'json'])).stdout),
    ) as ControllerStatusReport;
    assert.deepEqual(
      status.components.map((c) => c.name),
      ['kine', 'encryption', 'kube-apiserver', 'manifest-applier', 'kube-controller-manager', 'pki-renewer'],
    );
    const children = await Promise.all(
      status.components.filter((c) => c.pid).map(async (c) => (await readFile(`/proc/${c.pid}/comm`, 'utf8')).trim()),
    );
    assert.ok(!children.some((c) => /scheduler|konnectivity/.test(c)), children.join());
    for (const sock of ['konnectivity-server.sock', 'konnectivity-connect.sock'])
      assert.equal(existsSync(join(host.runDir, 'tenants', n, sock)), false, `${n}: ${sock}`);
  }
  assert.equal(new Set(cas.values()).size, 10, 'two tenants share a CA');

  // A CRD and 1,000 widgets in each (five tenants filled at a time); a namespace's deletion collects its widgets.
  for (let i = 0; i < names.length; i += 5)
    await Promise.all(
      names.slice(i, i + 5).map(async (n) => {
        await createWidgets((args, input) => host.kubectl(n, args, input), 1000);
        assert.equal(await count(host, n, ['get', 'widgets']), 1000, `${n} holds 1,000 widgets`);
        assert.equal((await host.kubectl(n, ['create', 'namespace', 'scratch'])).exitCode, 0);
        assert.equal(
          (await host.kubectl(n, ['create', '-f', '-'], JSON.stringify(widgets('scratch', 50)))).exitCode,
          0,
        );
        const deleted = await host.kubectl(n, ['delete', 'namespace', 'scratch', '--timeout=180s']);
        assert.equal(deleted.exitCode, 0, String(deleted.stderr));
        assert.equal(
          await count(host, n, ['get', 'widgets', '-A']),
          1000,
          `${n}: scratch's widgets collected, default's kept`,
        );
      }),
    );

  // A tenant already running: one line, and the running one is untouched.
  await host.refused(
    'team-3',
    /^kctl: tenant "team-3" is already running here \(pid \d+\); kctl status --name team-3 shows it/,
  );
  // A tenant's admin credentials are refused by another tenant.
  const cross = await kctl([
    ...hostStateArgs(),
    '--data-dir',
    host.dataDir,
    '--name',
    'team-1',
    'kubectl',
    '--kubeconfig',
    join(host.tenantDir('team-0'), 'pki', 'admin.conf'),
    '--server',
    `https://127.0.0.1:${apiPorts[1]}`,
    'get',
    'namespaces',
  ]);
  assert.notEqual(cross.exitCode, 0);
  assert.match(String(cross.stderr), /x509|unknown authority/);

  // Every tenant stops and starts again: same ports, same CA, same data.
  await host.stopAll();
  assert.ok((await host.list()).every((e) => e.state === 'stopped'));
  assert.equal(
    String((await host.run(['--name', 'team-0', 'status'])).stderr).trim(),
    'kctl: tenant "team-0" is not running here; start it with kctl controller --name team-0 (kctl tenant list shows all)',
  );
  for (const n of names) host.start(n);
  for (const n of names) await host.ready(n);
  const again = await host.list();
  assert.deepEqual(
    again.map((e) => e.ports),
    list.map((e) => e.ports),
  );
  for (const n of names) {
    assert.equal(await host.caDigest(n), cas.get(n), `${n}'s CA changed on restart`);
    assert.equal(await count(host, n, ['get', 'widgets']), 1000, `${n} lost widgets on restart`);
  }
});

test('five tenants started at once under five --data-dirs pick their ports host-wide: none shares one; a recorded port another process holds is refused naming it; a reset gives its ports back at once', async (t) => {
  const range: [number, number] = [RANGE_BASE + 840, RANGE_BASE + 859];
  const hosts = await Promise.all([1, 2, 3, 4, 5].map((i) => tenantHost(t, `kctl-tenants-dd${i}-`, range, '')));
  for (const h of hosts) h.start('same');
  await Promise.all(hosts.map((h) => h.ready('same')));
  const ports = await Promise.all(hosts.map(async (h) => (await h.list())[0]!.ports));
  const all = ports.flatMap((p) => Object.values(p) as number[]);
  assert.equal(new Set(all).size, all.length, `two tenants share a port: ${JSON.stringify(ports)}`);
  assert.ok(
    all.every((p) => p >= range[0] && p <= range[1]),
    JSON.stringify(ports),
  );

  // A process of someone else's listens on a stopped tenant's recorded API port: its start says who.
  const [first] = hosts;
  await first!.stop('same');
  const squatter = createServer();
  await new Promise<void>((resolve) => squatter.listen(ports[0]!.api, '0.0.0.0', resolve));
  t.after(() => new Promise<void>((resolve) => squatter.close(() => resolve())));
  await first!.refused(
    'same',
    new RegExp(
      `^kctl: host check failed: port ${ports[0]!.api}: in use by pid ${process.pid} \\(.+\\); kube-apiserver needs it \\(free it, or stop tenant "same" and reset it \\(kctl --name same reset\\) so that it picks new ports\\)`,
    ),
  );
  // Its reset gives its host-wide claims back at once, not after the grace period.
  const claimsOf = async (owner: string) =>
    (JSON.parse(await readFile(join(hostState, 'port-claims.json'), 'utf8')) as PortClaim[])
      .filter((c) => c.owner === owner)
      .map((c) => c.port);
  assert.deepEqual((await claimsOf(first!.tenantDir('same'))).sort(), Object.values(ports[0]!).sort());
  const reset = await first!.run(['--name', 'same', 'reset']);
  assert.equal(reset.exitCode, 0, String(reset.stderr));
  assert.deepEqual(await claimsOf(first!.tenantDir('same')), []);
  assert.deepEqual((await claimsOf(hosts[1]!.tenantDir('same'))).sort(), Object.values(ports[1]!).sort());
});

test('tenants on one PostgreSQL: a database each, separate data, kept across restarts; bad data sources, shared databases and exhausted port ranges are refused with one line', async (t) => {
  const pgPort = RANGE_BASE + 900;
  const pg = await startPostgres(t, pgPort);
  // A role that may log in but not create databases.
  await pg.sql('CREATE ROLE tenant_nocreate LOGIN');
  const host = await tenantHost(
    t,
    'kctl-tenants-pg-',
    [RANGE_BASE + 800, RANGE_BASE + 809],
    `  storage:\n    kine: { dataSource: "postgres://postgres@127.0.0.1:${pgPort}/?sslmode=disable" }\n`,
  );

  for (const n of ['pa', 'pb']) host.start(n);
  for (const n of ['pa', 'pb']) await host.ready(n);
  const dbs = await pg.sql('SELECT datname FROM pg_database ORDER BY datname');
  assert.match(dbs, /^kctl_pa$/m);
  assert.match(dbs, /^kctl_pb$/m);
  const list = await host.list();
  assert.deepEqual(
    list.map((e) => e.storage),
    [`kine (postgres://127.0.0.1:${pgPort}/kctl_pa)`, `kine (postgres://127.0.0.1:${pgPort}/kctl_pb)`],
  );
  assert.equal((await host.kubectl('pa', ['create', 'configmap', 'only-in-pa', '--from-literal=k=a'])).exitCode, 0);
  assert.equal((await host.kubectl('pb', ['create', 'configmap', 'only-in-pb', '--from-literal=k=b'])).exitCode, 0);
  const seen = async (n: string) =>
    String(
      (await host.kubectl(n, ['get', 'configmaps', '-n', 'default', '-o', 'jsonpath={.items[*].metadata.name}']))
        .stdout,
    )
      .split(' ')
      .filter((c) => c.startsWith('only-'));
  assert.deepEqual(await seen('pa'), ['only-in-pa']);
  assert.deepEqual(await seen('pb'), ['only-in-pb']);

  // Bad input, each refused with one line before anything is written.
  const ds = (url: string) => join(host.dir, `${createHash('sha1').update(url).digest('hex').slice(0, 8)}.yaml`);
  const withSource = async (url: string) => {
    const f = ds(url);
    await writeFile(f, `spec:\n  api: { address: 127.0.0.1 }\n  storage:\n    kine: { dataSource: "${url}" }\n`);
    return f;
  };
  await host.refused(
    'pc',
    /^kctl: role "tenant_nocreate" may not create database "kctl_pc" on PostgreSQL at 127\.0\.0\.1:\d+ \(.*\); create it for that role .* or grant the role CREATEDB$/,
    [],
    await withSource(`postgres://tenant_nocreate@127.0.0.1:${pgPort}/?sslmode=disable`),
  );
  assert.doesNotMatch(await pg.sql('SELECT datname FROM pg_database'), /kctl_pc/);
  await host.refused(
    'pd',
    /^kctl: cannot reach PostgreSQL at 127\.0\.0\.1:\d+ \(ECONNREFUSED\); check spec\.storage\.kine\.dataSource and that the server runs$/,
    [],
    await withSource(`postgres://postgres:secret-pw@127.0.0.1:${pgPort + 1}/?sslmode=disable`),
  );
  await host.refused(
    'pe',
    /^kctl: tenant "pa" already keeps its state in postgres:\/\/127\.0\.0\.1:\d+\/kctl_pa; tenants never share a database/,
    [],
    await withSource(`postgres://postgres@127.0.0.1:${pgPort}/kctl_pa?sslmode=disable`),
  );
  // The password never shows in an error line.
  const bad = await kctl(
    host
      .args('pf')
      .map((a) =>
        a === host.config ? ds(`postgres://postgres:secret-pw@127.0.0.1:${pgPort + 1}/?sslmode=disable`) : a,
      ),
  );
  assert.doesNotMatch(String(bad.stderr) + String(bad.stdout), /secret-pw/);
  // pa and pb hold 4 of the range's 10 ports. The starts refused above after they had claimed ports
  // (pc, pd, pf) gave them back at once, so a range of those 5 has one port free: room for no tenant.
  await host.refused(
    'pg',
    /^kctl: no 2 free ports left in --port-range \d+-\d+ for tenant "pg": 4 claimed by other tenants on this host; give a wider --port-range$/,
    ['--port-range', `${RANGE_BASE + 800}-${RANGE_BASE + 804}`],
  );

  // Restart both: the same data in the same databases.
  await host.stopAll();
  for (const n of ['pa', 'pb']) host.start(n);
  for (const n of ['pa', 'pb']) await host.ready(n);
  assert.deepEqual(await seen('pa'), ['only-in-pa']);
  assert.deepEqual(await seen('pb'), ['only-in-pb']);
});

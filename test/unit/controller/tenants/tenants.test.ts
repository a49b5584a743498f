// Tenants (kctl controller --name): layout, ports picked once and kept, one database each on a
// shared PostgreSQL, and the refusals that leave nothing behind.
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { readdir, readFile } from 'node:fs/promises';
import { createServer, type Server } from 'node:net';
import { freePortRange } from '../../../ports.ts';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { parseConfig, TENANT_GC_PERCENT } from '../../../../src/controller/config/config.ts';
import { goRuntimeEnv } from '../../../../src/controller/components/go-runtime.ts';
import {
  parsePortRange,
  prepareTenant,
  readTenants,
  tenantDataSource,
  tenantLayout,
  undoNewTenant,
} from '../../../../src/controller/tenants/tenants.ts';
import { postgresDatabase, withPostgresDatabase } from '../../../../src/etcd/postgres.ts';
import { useHostStateDir } from '../../../../src/host/port-claims.ts';
import { captureLogger, tempDir } from '../../../helpers.ts';

// Host-wide port claims go to a directory of this test run, not the host's.
const hostState = mkdtempSync(join(tmpdir(), 'kctl-host-'));
useHostStateDir(hostState);
after(() => rmSync(hostState, { recursive: true, force: true }));

const cfg = parseConfig({ spec: { api: { address: '127.0.0.1' } } }, 'kctl.yaml', { tenantName: 'a' });

test('a tenant lives in <data-dir>/tenants/NAME and <run-dir>/tenants/NAME and shares <data-dir>/bin; bad names are refused', () => {
  const l = tenantLayout('/var/lib/kctl', '/run/kctl', 'team-a');
  assert.deepEqual(l, {
    name: 'team-a',
    tenantsDir: '/var/lib/kctl/tenants',
    dataDir: '/var/lib/kctl/tenants/team-a',
    runDir: '/run/kctl/tenants/team-a',
    binRoot: '/var/lib/kctl/bin',
  });
  for (const bad of ['Team', '-a', 'a-', '../x', 'a'.repeat(33), ''])
    assert.throws(() => tenantLayout('/d', '/r', bad), /is not a tenant name: use 1 to 32 lower-case letters/);
});

test('a tenant is api-only unless its config says spec.profile: full; a config that sets its ports is refused with the field', () => {
  assert.equal(cfg.spec.profile, 'api-only');
  assert.equal(cfg.spec.storage.type, 'kine');
  assert.throws(
    () => parseConfig({ spec: { api: { port: 7443 } } }, 'a.yaml', { tenantName: 'a' }),
    /^Error: invalid config a\.yaml: spec\.api\.port: a tenant \(--name\) gets its ports from --port-range/,
  );
  assert.throws(
    () => parseConfig({ spec: { controllerManager: { port: 7443 } } }, 'a.yaml', { tenantName: 'a' }),
    /spec\.controllerManager\.port/,
  );
  for (const field of [
    { api: { joinPort: 1 } },
    { konnectivity: { agentPort: 1 } },
    { konnectivity: { adminPort: 1 } },
    { scheduler: { port: 1 } },
  ])
    assert.throws(
      () => parseConfig({ spec: { profile: 'full', ...field } }, 'a.yaml', { tenantName: 'a' }),
      /gets its ports from --port-range/,
    );
  const full = parseConfig({ spec: { profile: 'full' } }, 'a.yaml', { tenantName: 'a' });
  assert.equal(full.spec.profile, 'full');
  assert.equal(full.spec.addons.coredns.enabled, true);
  assert.equal(
    parseConfig({ spec: { profile: 'full' } }, 'a.yaml', { tenantName: 'a', apiOnly: true }).spec.profile,
    'api-only',
  );
});

test('a full tenant gets every port of a cluster with nodes, all distinct and kept; a tenant cannot change its profile', async (t) => {
  const root = await tempDir(t);
  const { log } = captureLogger();
  const range: [number, number] = [40000 + Math.floor(Math.random() * 20000), 0];
  range[1] = range[0] + 40;
  const fullCfg = parseConfig({ spec: { profile: 'full', api: { address: '127.0.0.1' } } }, 'kctl.yaml', {
    tenantName: 'f',
  });
  const layout = tenantLayout(root, join(root, 'run'), 'f');
  const f = await prepareTenant(layout, fullCfg, range, log);
  assert.equal(f.record.profile, 'full');
  const s = f.cfg.spec;
  const ports = [
    s.api.port,
    s.api.joinPort,
    s.konnectivity.agentPort,
    s.konnectivity.adminPort,
    s.scheduler.port,
    s.controllerManager.port,
  ];
  assert.equal(new Set(ports).size, 6, `ports picked twice: ${ports.join(',')}`);
  assert.ok(
    ports.every((p) => p >= range[0] && p <= range[1]),
    ports.join(','),
  );
  assert.deepEqual((await prepareTenant(layout, fullCfg, range, log)).cfg.spec.konnectivity, s.konnectivity);
  await assert.rejects(
    prepareTenant(layout, cfg, range, log),
    /^Error: tenant "f" is full \(tenant\.json\) and its config now says spec\.profile: api-only; a tenant keeps its profile/,
  );
  // An api-only tenant records its profile and no node ports.
  const a = await prepareTenant(tenantLayout(root, join(root, 'run'), 'a'), cfg, range, log);
  assert.equal(a.record.profile, 'api-only');
  assert.equal(a.record.ports.agent, undefined);
});

test('--port-range: FROM-TO inside 1-65535', () => {
  assert.deepEqual(parsePortRange('16000-16999'), [16000, 16999]);
  for (const bad of ['16000', '2-1', '0-10', '1-70000', 'a-b'])
    assert.throws(() => parsePortRange(bad), /--port-range ".*" is not FROM-TO/);
});

test('a postgres data source without a database gets kctl_NAME; one with a database, SQLite and none are kept', () => {
  assert.equal(
    tenantDataSource('postgres://kctl:pw@db:5432/?sslmode=disable', 'team-a'),
    'postgres://kctl:pw@db:5432/kctl_team_a?sslmode=disable',
  );
  assert.equal(tenantDataSource('postgres://kctl:pw@db:5432', 'b'), 'postgres://kctl:pw@db:5432/kctl_b');
  assert.equal(tenantDataSource('postgres://kctl@db/mine', 'b'), 'postgres://kctl@db/mine');
  assert.equal(tenantDataSource('sqlite:///x/state.db', 'b'), 'sqlite:///x/state.db');
  assert.equal(tenantDataSource(undefined, 'b'), undefined);
  assert.equal(postgresDatabase('postgres://u@h:1/x%20y?a=b'), 'x y');
  assert.equal(
    withPostgresDatabase('postgres://u:p%40ss@h:1/x?sslmode=disable', 'z'),
    'postgres://u:p%40ss@h:1/z?sslmode=disable',
  );
});

test('tenants starting at once get distinct free ports, recorded once and kept; a held port is skipped', async (t) => {
  const root = await tempDir(t);
  // Someone else holds the first port of the range.
  const first = await freePortRange(31);
  const held: Server = createServer();
  await new Promise<void>((r) => held.listen(first, '0.0.0.0', () => r()));
  t.after(() => held.close());
  const range: [number, number] = [first, first + 30];
  const { log } = captureLogger();
  const names = ['t0', 't1', 't2', 't3', 't4', 't5'];
  const started = await Promise.all(
    names.map((n) => prepareTenant(tenantLayout(root, join(root, 'run'), n), cfg, range, log)),
  );
  const ports = started.flatMap((s) => [s.cfg.spec.api.port, s.cfg.spec.controllerManager.port]);
  assert.equal(new Set(ports).size, ports.length, `ports picked twice: ${ports.join(',')}`);
  assert.ok(!ports.includes(first), 'a port in use was picked');
  assert.ok(ports.every((p) => p > first && p <= first + 30));
  assert.ok(started.every((s) => s.created));
  assert.deepEqual(
    (await readTenants(join(root, 'tenants'))).map((r) => r.name),
    names,
  );
  const again = await prepareTenant(tenantLayout(root, join(root, 'run'), 't3'), cfg, range, log);
  assert.equal(again.created, false);
  assert.deepEqual(again.record.ports, started[3]!.record.ports);
  const onDisk = JSON.parse(await readFile(join(root, 'tenants', 't3', 'tenant.json'), 'utf8')) as { ports: unknown };
  assert.deepEqual(onDisk.ports, started[3]!.record.ports);
});

test('an exhausted port range is refused with one line and no tenant dir', async (t) => {
  const root = await tempDir(t);
  const { log } = captureLogger();
  // Below the kernel's ephemeral range: a port a listener here had and closed could go to another test file's listener.
  const base = await freePortRange(3);
  await prepareTenant(tenantLayout(root, join(root, 'run'), 'a'), cfg, [base, base + 2], log);
  await assert.rejects(
    prepareTenant(tenantLayout(root, join(root, 'run'), 'b'), cfg, [base, base + 2], log),
    new RegExp(
      `^Error: no 2 free ports left in --port-range ${base}-${base + 2} for tenant "b": 2 claimed by other tenants on this host; give a wider --port-range$`,
    ),
  );
  assert.equal(existsSync(join(root, 'tenants', 'b')), false);
  assert.deepEqual(
    (await readdir(join(root, 'tenants'))).filter((n) => !n.startsWith('.')),
    ['a'],
  );
  // a removed: its claims stand for the grace period, and the refusal says so.
  rmSync(join(root, 'tenants', 'a'), { recursive: true });
  await assert.rejects(
    prepareTenant(tenantLayout(root, join(root, 'run'), 'b'), cfg, [base, base + 2], log),
    /: 2 claimed by other tenants on this host \(2 of them by tenants removed in the last 10 minutes, free after that\); give a wider --port-range$/,
  );
});

test('a tenant made by a start whose join then fails is removed again; one that existed before is kept', async (t) => {
  const root = await tempDir(t);
  const { log } = captureLogger();
  const layout = tenantLayout(root, join(root, 'run'), 'j');
  const range: [number, number] = [41000 + Math.floor(Math.random() * 10000), 0];
  range[1] = range[0] + 10;
  const refused = () => Promise.reject(new Error('the cluster refused the join'));
  const made = await prepareTenant(layout, cfg, range, log, { joining: true });
  assert.equal(made.created, true);
  await assert.rejects(undoNewTenant(layout, made, refused), /refused the join/);
  assert.equal(existsSync(layout.dataDir), false);
  await prepareTenant(layout, cfg, range, log);
  const again = await prepareTenant(layout, cfg, range, log, { joining: true });
  assert.equal(again.created, false);
  await assert.rejects(undoNewTenant(layout, again, refused), /refused the join/);
  assert.equal(existsSync(join(layout.dataDir, 'tenant.json')), true);
  assert.equal(await undoNewTenant(layout, again, async () => 'joined'), 'joined');
});

test('a named full cluster collects garbage at GOGC=25 unless spec.gcPercent says otherwise; api-only tenants and a controller of its own keep the Go default', () => {
  const named = parseConfig({ spec: { profile: 'full' } }, 'kctl.yaml', { tenantName: 'a' });
  assert.equal(named.spec.gcPercent, TENANT_GC_PERCENT);
  assert.deepEqual(goRuntimeEnv(named), { GOGC: '25' });
  assert.deepEqual(goRuntimeEnv(named, '300MiB'), { GOGC: '25', GOMEMLIMIT: '300MiB' });
  assert.equal(
    parseConfig({}, 'kctl.yaml', { tenantName: 'a' }).spec.gcPercent,
    undefined,
    'api-only: its memory limit governs',
  );
  assert.deepEqual(goRuntimeEnv(parseConfig({ spec: { gcPercent: 100 } }, 'kctl.yaml', { tenantName: 'a' })), {
    GOGC: '100',
  });
  const own = parseConfig({}, 'kctl.yaml');
  assert.equal(own.spec.gcPercent, undefined);
  assert.deepEqual(goRuntimeEnv(own), {});
  assert.deepEqual(goRuntimeEnv(parseConfig({ spec: { gcPercent: 30 } }, 'kctl.yaml')), { GOGC: '30' });
  assert.throws(() => parseConfig({ spec: { gcPercent: 5 } }, 'kctl.yaml'), /spec\.gcPercent: .*10/);
  assert.throws(() => parseConfig({ spec: { gcPercent: 'off' } }, 'kctl.yaml'), /spec\.gcPercent: /);
});

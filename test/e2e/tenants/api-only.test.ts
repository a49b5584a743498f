// API-only control planes (spec.profile: api-only): the Kubernetes API alone for CRDs and
// operators. Three tenants start at once on this host, each running only kine, kube-apiserver
// and a controller-manager with the controllers such a tenant needs. Each takes a CRD and 1,000
// custom objects; deleting a namespace removes its objects; an owner's deletion removes its
// dependents; new namespaces get their service account and root CA. Workers cannot join, and one
// tenant's admin credentials and service-account tokens are refused by another. An operator
// outside gets a kubeconfig with a bound token (kctl kubeconfig create --service-account) and can
// list and watch what its RBAC allows, nothing else; an expired token is refused; a person gets a
// client certificate with their groups.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { createPrivateKey, sign as cryptoSign } from 'node:crypto';
import { existsSync } from 'node:fs';
import { readdir, readFile, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { test } from 'node:test';
import type { ControllerStatusReport } from '../../../src/controller/leases/status.ts';
import { tempDir } from '../../helpers.ts';
import { track, type Tracked } from '../lab/cluster.ts';
import { kctl, requireKctl } from '../lab/kctl.ts';
import { apiStatus, createWidgets, widgets } from '../lab/tenant-api.ts';
import { waitFor } from '../../wait.ts';

const BASE_PORT = 12000 + Math.floor(Math.random() * 700) * 10;

interface Tenant {
  name: string;
  port: number;
  dataDir: string;
  runDir: string;
  proc?: Tracked;
}

test('api-only tenants: three at once, only storage, kube-apiserver and a trimmed controller-manager; CRDs, namespaces and GC work; no workers; credentials stay in their tenant; operators and people get least-privilege kubeconfigs', async (t) => {
  const kctlBin = requireKctl();
  const dir = await tempDir(t, 'kctl-apionly-');
  const tenants: Tenant[] = ['a', 'b', 'c'].map((name, i) => ({
    name,
    port: BASE_PORT + i * 10,
    dataDir: join(dir, `${name}-data`),
    runDir: join(dir, `${name}-run`),
  }));
  t.after(async () => {
    for (const x of tenants) x.proc?.child.kill('SIGTERM');
    await Promise.all(tenants.map((x) => x.proc?.exited));
  });
  const kubectl = (x: Tenant, args: string[], input?: string) =>
    kctl(['--data-dir', x.dataDir, 'kubectl', ...args], { input, timeout: 120_000 });

  // All three at once, each with its own ports (the config), data dir and CA.
  for (const x of tenants) {
    const config = join(dir, `${x.name}.yaml`);
    await writeFile(
      config,
      // b's audit log rotates at 1 MB and keeps 2 rotated files (a keeps the defaults).
      `spec:\n  profile: api-only\n  api: { address: 127.0.0.1, port: ${x.port}${x.name === 'b' ? ', audit: { maxSize: 1, maxBackups: 2 }' : ''} }\n  controllerManager: { port: ${x.port + 1} }\n`,
    );
    x.proc = track(spawn(kctlBin, ['controller', '--config', config, '--data-dir', x.dataDir, '--run-dir', x.runDir]));
  }
  const started = Date.now();
  for (const x of tenants) {
    const outcome = await waitFor(`tenant ${x.name} ready`, 180_000, async () =>
      x.proc!.child.exitCode !== null ? 'exited' : x.proc!.saw('"msg":"controller ready"') && 'ready',
    );
    assert.equal(outcome, 'ready', x.proc!.log());
  }
  t.diagnostic(
    `three api-only tenants ready ${((Date.now() - started) / 1000).toFixed(1)} s after they were started together`,
  );

  for (const x of tenants) {
    const ca = await readFile(join(x.dataDir, 'pki', 'ca.crt'), 'utf8');
    assert.equal(await apiStatus(x.port, '/readyz', { ca }), 200, `${x.name} /readyz`);
    // Only the API's parts: no scheduler, no konnectivity server (no socket, no process), no add-ons.
    const status = JSON.parse(
      String((await kctl(['status', '-o', 'json', '--run-dir', x.runDir])).stdout),
    ) as ControllerStatusReport;
    assert.deepEqual(
      status.components.map((c) => c.name),
      ['kine', 'encryption', 'kube-apiserver', 'manifest-applier', 'kube-controller-manager', 'pki-renewer'],
    );
    assert.equal(status.konnectivity, undefined);
    const children = await Promise.all(
      status.components.filter((c) => c.pid).map(async (c) => (await readFile(`/proc/${c.pid}/comm`, 'utf8')).trim()),
    );
    assert.ok(!children.some((c) => /scheduler|konnectivity/.test(c)), children.join());
    for (const sock of ['konnectivity-server.sock', 'konnectivity-connect.sock'])
      assert.equal(existsSync(join(x.runDir, sock)), false, sock);
    assert.equal(existsSync(join(x.dataDir, 'manifests', 'coredns')), false);
  }

  // A CRD and 1,000 custom objects in each tenant.
  for (const x of tenants) {
    await createWidgets((args, input) => kubectl(x, args, input), 1000);
    const listed = await kubectl(x, ['get', 'widgets', '-o', 'name']);
    assert.equal(String(listed.stdout).trim().split('\n').length, 1000, `${x.name} holds 1,000 widgets`);
  }

  const [a, b] = tenants as [Tenant, Tenant, Tenant];
  // A new namespace gets its service account and the root CA; deleting it removes what it held.
  assert.equal((await kubectl(a, ['create', 'namespace', 'team-x'])).exitCode, 0);
  await waitFor('default service account and kube-root-ca.crt in team-x', 60_000, async () => {
    const sa = await kubectl(a, ['-n', 'team-x', 'get', 'serviceaccount', 'default', '-o', 'name']);
    const cm = await kubectl(a, ['-n', 'team-x', 'get', 'configmap', 'kube-root-ca.crt', '-o', 'name']);
    return sa.exitCode === 0 && cm.exitCode === 0;
  });
  assert.equal((await kubectl(a, ['create', '-f', '-'], JSON.stringify(widgets('team-x', 20)))).exitCode, 0);
  const deleted = await kubectl(a, ['delete', 'namespace', 'team-x', '--timeout=120s']);
  assert.equal(deleted.exitCode, 0, String(deleted.stderr));
  assert.equal(
    String((await kubectl(a, ['get', 'widgets', '-A', '-o', 'name'])).stdout)
      .trim()
      .split('\n').length,
    1000,
  );
  // The garbage collector removes a dependent once its owner is gone.
  assert.equal((await kubectl(a, ['create', 'configmap', 'owner'])).exitCode, 0);
  const uid = String((await kubectl(a, ['get', 'configmap', 'owner', '-o', 'jsonpath={.metadata.uid}'])).stdout);
  const dependent = {
    apiVersion: 'example.kctl.dev/v1',
    kind: 'Widget',
    metadata: {
      name: 'dependent',
      namespace: 'default',
      ownerReferences: [{ apiVersion: 'v1', kind: 'ConfigMap', name: 'owner', uid }],
    },
    spec: { size: 1 },
  };
  assert.equal((await kubectl(a, ['create', '-f', '-'], JSON.stringify(dependent))).exitCode, 0);
  assert.equal((await kubectl(a, ['delete', 'configmap', 'owner'])).exitCode, 0);
  await waitFor(
    'the dependent widget collected',
    60_000,
    async () => (await kubectl(a, ['get', 'widget', 'dependent'])).exitCode !== 0,
  );

  // No workers: a worker token is refused with one line.
  const worker = await kctl(['--data-dir', a.dataDir, 'token', 'create', '--role', 'worker']);
  assert.notEqual(worker.exitCode, 0);
  assert.match(
    String(worker.stderr).trim(),
    /^kctl: this is an api-only control plane \(spec\.profile: api-only\): .* workers cannot join; [^\n]+$/,
  );

  // Tenant a's credentials are worth nothing on tenant b: its admin client certificate (another CA) ...
  const adminA = join(a.dataDir, 'pki', 'admin.conf');
  const cross = await kctl([
    '--data-dir',
    b.dataDir,
    'kubectl',
    '--kubeconfig',
    adminA,
    '--server',
    `https://127.0.0.1:${b.port}`,
    'get',
    'namespaces',
  ]);
  assert.notEqual(cross.exitCode, 0);
  assert.match(String(cross.stderr), /certificate signed by unknown authority|x509/);
  // ... and a service-account token of a (another signing key): accepted by a, refused by b.
  assert.equal((await kubectl(a, ['create', 'serviceaccount', 'operator'])).exitCode, 0);
  const token = String((await kubectl(a, ['create', 'token', 'operator'])).stdout).trim();
  assert.ok(token.length > 100);
  const caA = await readFile(join(a.dataDir, 'pki', 'ca.crt'), 'utf8');
  assert.equal(
    await apiStatus(a.port, '/api/v1/namespaces/default/configmaps', { token, ca: caA }),
    403,
    'a knows the token (and RBAC denies)',
  );
  assert.equal(
    await apiStatus(b.port, '/api/v1/namespaces/default/configmaps', { token, ca: null }),
    401,
    'b must not know a token of a',
  );

  // An operator outside: a kubeconfig with a bound token of `operator`, allowed to read widgets in default only.
  for (const args of [
    ['create', 'clusterrole', 'widget-reader', '--verb=get,list,watch', '--resource=widgets.example.kctl.dev'],
    [
      'create',
      'rolebinding',
      'operator-widgets',
      '-n',
      'default',
      '--clusterrole=widget-reader',
      '--serviceaccount=default:operator',
    ],
  ])
    assert.equal((await kubectl(a, args)).exitCode, 0, args.join(' '));
  const created = await kctl([
    '--data-dir',
    a.dataDir,
    'kubeconfig',
    'create',
    '--service-account',
    'default/operator',
    '--expiry',
    '1h',
  ]);
  assert.equal(created.exitCode, 0, String(created.stderr));
  const operatorConf = join(dir, 'operator.conf');
  await writeFile(operatorConf, String(created.stdout), { mode: 0o600 });
  const asOperator = (args: string[]) =>
    kctl(['--data-dir', a.dataDir, 'kubectl', '--kubeconfig', operatorConf, ...args], { timeout: 60_000 });
  assert.equal(
    String((await asOperator(['get', 'widgets', '-n', 'default', '-o', 'name'])).stdout)
      .trim()
      .split('\n').length,
    1000,
  );
  // A real watch sees a widget created meanwhile.
  const watching = asOperator([
    'get',
    'widgets',
    '-n',
    'default',
    '--watch-only',
    '-o',
    'name',
    '--request-timeout=8s',
  ]);
  await new Promise((r) => setTimeout(r, 2000));
  assert.equal(
    (await kubectl(a, ['create', '-f', '-'], JSON.stringify(widgets('default', 1001).items.at(-1)))).exitCode,
    0,
  );
  assert.match(String((await watching).stdout), /widget\.example\.kctl\.dev\/w1000/);
  // Nothing beyond its RBAC.
  for (const args of [
    ['get', 'configmaps', '-n', 'default'],
    ['get', 'widgets', '-n', 'kube-system'],
    ['get', 'secrets', '-A'],
  ]) {
    const r = await asOperator(args);
    assert.notEqual(r.exitCode, 0, `the operator could ${args.join(' ')}`);
    assert.match(String(r.stderr), /forbidden/i);
  }
  // Bad input: one line each.
  for (const [args, expect] of [
    [['--service-account', 'default/missing'], /^kctl: service account default\/missing does not exist; create it/],
    [
      ['--service-account', 'default/operator', '--expiry', '5m'],
      /^kctl: --expiry for a service-account token must be at least 10m/,
    ],
    [['--service-account', 'operator'], /^kctl: --service-account "operator" is not NAMESPACE\/NAME/],
    [
      ['--user', 'x', '--service-account', 'default/operator'],
      /^kctl: give exactly one of --service-account NS\/NAME or --user NAME$/,
    ],
  ] as const) {
    const r = await kctl(['--data-dir', a.dataDir, 'kubeconfig', 'create', ...args]);
    assert.notEqual(r.exitCode, 0);
    assert.equal(String(r.stdout), '');
    assert.match(String(r.stderr).trim(), expect);
    assert.equal(String(r.stderr).trim().split('\n').length, 1);
  }
  // An expired token of the same account, signed with a's own key: refused; the same token unexpired: known.
  const saKey = await readFile(join(a.dataDir, 'pki', 'sa.key'), 'utf8');
  const saUid = String(
    (await kubectl(a, ['get', 'serviceaccount', 'operator', '-o', 'jsonpath={.metadata.uid}'])).stdout,
  );
  const now = Math.floor(Date.now() / 1000);
  assert.equal(
    await apiStatus(a.port, '/api/v1/namespaces/default/configmaps', {
      token: boundToken(saKey, saUid, now - 3600, now - 60),
      ca: caA,
    }),
    401,
  );
  assert.equal(
    await apiStatus(a.port, '/api/v1/namespaces/default/configmaps', {
      token: boundToken(saKey, saUid, now - 60, now + 600),
      ca: caA,
    }),
    403,
  );

  // A person: a client certificate with a user name and groups, nothing allowed until RBAC says so.
  const alice = await kctl([
    '--data-dir',
    a.dataDir,
    'kubeconfig',
    'create',
    '--user',
    'alice',
    '--groups',
    'team-a,viewers',
  ]);
  assert.equal(alice.exitCode, 0, String(alice.stderr));
  const aliceConf = join(dir, 'alice.conf');
  await writeFile(aliceConf, String(alice.stdout), { mode: 0o600 });
  const whoami = await kctl([
    '--data-dir',
    a.dataDir,
    'kubectl',
    '--kubeconfig',
    aliceConf,
    'auth',
    'whoami',
    '-o',
    'json',
  ]);
  const info = (JSON.parse(String(whoami.stdout)) as { status: { userInfo: { username: string; groups: string[] } } })
    .status.userInfo;
  assert.equal(info.username, 'alice');
  assert.ok(info.groups.includes('team-a') && info.groups.includes('viewers'), info.groups.join());
  assert.notEqual(
    (await kctl(['--data-dir', a.dataDir, 'kubectl', '--kubeconfig', aliceConf, 'get', 'namespaces'])).exitCode,
    0,
  );
  // ... and on tenant b the same certificate is refused (a's CA).
  const aliceOnB = await kctl([
    '--data-dir',
    b.dataDir,
    'kubectl',
    '--kubeconfig',
    aliceConf,
    '--server',
    `https://127.0.0.1:${b.port}`,
    'get',
    'ns',
  ]);
  assert.match(String(aliceOnB.stderr), /x509|unknown authority/);

  // The audit log: who created the Secret, with which verb, and never its value.
  const value = 'audit-must-not-see-this';
  assert.equal(
    (await kubectl(a, ['create', 'secret', 'generic', 'audited', `--from-literal=password=${value}`])).exitCode,
    0,
  );
  const auditLog = join(a.dataDir, 'audit', 'audit.log');
  const event = await waitFor('the Secret create in the audit log', 30_000, async () =>
    (await readFile(auditLog, 'utf8'))
      .split('\n')
      .filter(Boolean)
      .map((l) => JSON.parse(l) as AuditEvent)
      .find((e) => e.verb === 'create' && e.objectRef?.resource === 'secrets' && e.objectRef.name === 'audited'),
  );
  assert.equal(event.user.username, 'kubernetes-admin');
  assert.equal(event.level, 'Metadata');
  assert.equal(event.responseStatus?.code, 201);
  const whole = await readFile(auditLog, 'utf8');
  for (const v of [value, Buffer.from(value).toString('base64')])
    assert.equal(whole.includes(v), false, `the audit log holds ${v}`);
  // RBAC changes are recorded with their bodies; b rotates at 1 MB and keeps at most 2 rotated files.
  const bulky = 'x'.repeat(200_000);
  for (let i = 0; i < 16; i++) {
    const role = {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'ClusterRole',
      metadata: { name: 'bulky', annotations: { n: String(i), bulk: bulky } },
      rules: [],
    };
    assert.equal((await kubectl(b, [i === 0 ? 'create' : 'replace', '-f', '-'], JSON.stringify(role))).exitCode, 0);
  }
  const auditDirB = join(b.dataDir, 'audit');
  // Rotated files are pruned just after a rotation, off the request path: wait for it to settle.
  const files = await waitFor('b audit log rotated and pruned to 2 backups', 30_000, async () => {
    const names = await readdir(auditDirB);
    return names.length === 3 && names;
  });
  assert.ok(files.includes('audit.log'), files.join());
  for (const f of files) assert.ok((await stat(join(auditDirB, f))).size < 2 * 1024 * 1024, `${f} outgrew maxSize`);
  const rbacEvents = (await Promise.all(files.map((f) => readFile(join(auditDirB, f), 'utf8'))))
    .join('')
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l) as AuditEvent)
    .filter((e) => e.objectRef?.resource === 'clusterroles' && e.objectRef.name === 'bulky' && e.verb !== 'get');
  assert.ok(
    rbacEvents.length > 0 && rbacEvents.every((e) => e.level === 'RequestResponse' && e.requestObject !== undefined),
  );
});

interface AuditEvent {
  level: string;
  verb: string;
  user: { username: string };
  objectRef?: { resource?: string; name?: string };
  responseStatus?: { code?: number };
  requestObject?: unknown;
}

/**
 * A bound service-account token as kube-apiserver issues them (ES256 for kctl's ECDSA key, RS256
 * for an RSA one; issuer and audience of kctl's config), for default/operator.
 */
function boundToken(keyPem: string, uid: string, iat: number, exp: number): string {
  const issuer = 'https://kubernetes.default.svc.cluster.local';
  const key = createPrivateKey(keyPem);
  const ec = key.asymmetricKeyType === 'ec';
  const b64 = (o: object) => Buffer.from(JSON.stringify(o)).toString('base64url');
  const body = `${b64({ alg: ec ? 'ES256' : 'RS256', typ: 'JWT' })}.${b64({
    iss: issuer,
    aud: [issuer],
    sub: 'system:serviceaccount:default:operator',
    iat,
    nbf: iat,
    exp,
    'kubernetes.io': { namespace: 'default', serviceaccount: { name: 'operator', uid } },
  })}`;
  // JWS ES256 signatures are r || s (IEEE P1363), not DER.
  const signature = cryptoSign('sha256', Buffer.from(body), ec ? { key, dsaEncoding: 'ieee-p1363' } : key);
  return `${body}.${signature.toString('base64url')}`;
}

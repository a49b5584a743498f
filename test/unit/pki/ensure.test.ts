// ensurePki against a real directory, checked with openssl where a user would check it.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { chmod, cp, mkdir, mkdtemp, readdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { after, test } from 'node:test';
import { ensurePki, PkiError, pkiPaths, readKubeconfig, type PkiOptions } from '../../../src/pki/index.ts';
import { captureLogger, FULL_CONTROLLER_LEAVES, tempDir } from '../../helpers.ts';

const DAY = 24 * 3600 * 1000;

function options(dir: string, over: Partial<PkiOptions> = {}): PkiOptions {
  return {
    dir,
    apiAddress: '192.0.2.10',
    sans: ['api.example.test', '2001:db8::10'],
    apiPort: 6443,
    serviceCIDR: '10.96.0.0/12',
    clusterDomain: 'cluster.local',
    hostname: 'ctrl-1',
    localAddresses: ['192.0.2.10', '127.0.0.1', '::1', 'fe80::1'],
    // As at a controller's start (the renewer leaves the encryption config alone).
    encryptedResources: ['secrets'],
    ...over,
  };
}

function openssl(args: string[], cwd: string, input?: string): string {
  return execFileSync('openssl', args, { cwd, encoding: 'utf8', input, stdio: ['pipe', 'pipe', 'pipe'] });
}

/** The SANs as openssl prints them, e.g. ["DNS:kubernetes", "IP Address:10.96.0.1"]. */
function opensslSans(certFile: string, cwd: string): string[] {
  const out = openssl(['x509', '-in', certFile, '-noout', '-ext', 'subjectAltName'], cwd);
  return out
    .split('\n')
    .slice(1)
    .join(',')
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);
}

function opensslSubject(certPem: string): string {
  return openssl(['x509', '-noout', '-subject', '-nameopt', 'RFC2253'], tmpdir(), certPem).trim();
}

/** Relative path -> contents of every file under dir. */
async function snapshot(dir: string): Promise<Map<string, string>> {
  const files = (await readdir(dir, { recursive: true, withFileTypes: true })).filter((e) => e.isFile());
  const entries = await Promise.all(
    files.map(async (e) => {
      const p = join(e.parentPath, e.name);
      return [relative(dir, p), await readFile(p, 'utf8')] as const;
    }),
  );
  return new Map(entries);
}

function changed(before: Map<string, string>, afterSnap: Map<string, string>): string[] {
  return [...afterSnap.keys()].filter((k) => before.get(k) !== afterSnap.get(k)).sort();
}

// A fresh PKI costs a second or two of key generation; build it once and copy it per test.
const templateRoot = await mkdtemp(join(tmpdir(), 'kctl-pki-template-'));
after(() => rm(templateRoot, { recursive: true, force: true }));
const templateLog = captureLogger();
const templateStarted = new Date();
await ensurePki(options(join(templateRoot, 'pki')), templateLog.log);

async function copyOfTemplate(t: Parameters<typeof tempDir>[0]): Promise<string> {
  const dir = join(await tempDir(t), 'pki');
  await cp(join(templateRoot, 'pki'), dir, { recursive: true });
  return dir;
}

test('a fresh PKI has every file, with private modes, and logs no key material', async () => {
  const dir = join(templateRoot, 'pki');
  const p = pkiPaths(dir);
  const keys = [
    p.caKey,
    p.serverKey,
    p.kubeletClientKey,
    p.frontProxyCaKey,
    p.frontProxyClientKey,
    p.saKey,
    p.etcdCaKey,
    p.etcdServerKey,
    p.etcdPeerKey,
    p.apiserverEtcdClientKey,
    p.konnectivityKey,
    p.addonsCaKey,
    p.metricsServerKey,
    p.kubeletServingCaKey,
  ];
  const certs = [
    p.caCert,
    p.caSigningCert,
    p.serverCert,
    p.kubeletClientCert,
    p.frontProxyCaCert,
    p.frontProxyClientCert,
    p.saPub,
    p.etcdCaCert,
    p.etcdServerCert,
    p.etcdPeerCert,
    p.apiserverEtcdClientCert,
    p.konnectivityCert,
    p.addonsCaCert,
    p.metricsServerCert,
    p.kubeletServingCaCert,
    p.kubeletCaBundle,
    p.kubeletServingMoved,
  ];
  const confs = [p.adminConf, p.schedulerConf, p.controllerManagerConf, p.encryptionConfig];
  const mode = async (f: string) => (await stat(f)).mode & 0o777;
  for (const f of [...keys, ...confs]) assert.equal(await mode(f), 0o600, f);
  for (const f of certs) assert.equal(await mode(f), 0o644, f);
  for (const d of [p.dir, p.etcdDir]) assert.equal(await mode(d), 0o700, d);
  const onDisk = [...(await snapshot(dir)).keys()].filter((f) => !f.startsWith('.'));
  assert.equal(onDisk.length, keys.length + certs.length + confs.length, `unexpected files: ${onDisk.join(' ')}`);

  const text = JSON.stringify(templateLog.lines());
  assert.doesNotMatch(text, /PRIVATE KEY|BEGIN/);
  const created = templateLog
    .lines()
    .filter((l) => /issued certificate|created certificate authority|wrote kubeconfig/.test(String(l.msg)))
    .map((l) => l.file);
  assert.ok(
    created.includes('server.crt') && created.includes('ca.crt') && created.includes('admin.conf'),
    JSON.stringify(created),
  );
});

test('an api-only PKI on kine has only what kube-apiserver and the controller-manager use; with etcd, the etcd set too', async (t) => {
  const dir = join(await tempDir(t), 'pki');
  const p = pkiPaths(dir);
  await ensurePki({ ...options(dir), apiOnly: { etcd: false } }, captureLogger().log);
  const wanted = [
    p.caCert,
    p.caKey,
    p.caSigningCert,
    p.frontProxyCaCert,
    p.frontProxyCaKey,
    p.serverCert,
    p.serverKey,
    p.frontProxyClientCert,
    p.frontProxyClientKey,
    p.saKey,
    p.saPub,
    p.adminConf,
    p.controllerManagerConf,
    p.encryptionConfig,
  ].map((f) => relative(dir, f));
  assert.deepEqual([...(await snapshot(dir)).keys()].filter((f) => !f.startsWith('.')).sort(), wanted.sort());
  await ensurePki({ ...options(dir), apiOnly: { etcd: true } }, captureLogger().log);
  const withEtcd = [...(await snapshot(dir)).keys()].filter((f) => !f.startsWith('.'));
  for (const f of [p.etcdCaCert, p.etcdServerCert, p.etcdPeerCert, p.apiserverEtcdClientCert])
    assert.ok(withEtcd.includes(relative(dir, f)), f);
  for (const f of [p.kubeletClientCert, p.konnectivityCert, p.addonsCaCert, p.metricsServerCert, p.schedulerConf])
    assert.ok(!withEtcd.includes(relative(dir, f)), f);
});

test('openssl verifies every leaf against its CA, with the right names and usages', async () => {
  const dir = join(templateRoot, 'pki');
  assert.match(
    openssl(['verify', '-CAfile', 'ca.crt', 'server.crt', 'apiserver-kubelet-client.crt', 'konnectivity.crt'], dir),
    /server.crt: OK\napiserver-kubelet-client.crt: OK\nkonnectivity.crt: OK/,
  );
  assert.match(
    openssl(['verify', '-CAfile', 'etcd/ca.crt', 'etcd/server.crt', 'etcd/peer.crt', 'apiserver-etcd-client.crt'], dir),
    /etcd\/server.crt: OK\netcd\/peer.crt: OK\napiserver-etcd-client.crt: OK/,
  );
  assert.match(
    openssl(['verify', '-CAfile', 'front-proxy-ca.crt', 'front-proxy-client.crt'], dir),
    /front-proxy-client.crt: OK/,
  );
  // metrics-server's serving cert comes from the add-ons CA only: no cluster-CA cert can pass for it.
  assert.match(openssl(['verify', '-CAfile', 'addons-ca.crt', 'metrics-server.crt'], dir), /metrics-server.crt: OK/);
  assert.throws(() => openssl(['verify', '-CAfile', 'ca.crt', 'metrics-server.crt'], dir));
  assert.deepEqual(opensslSans('metrics-server.crt', dir), ['DNS:metrics-server.kube-system.svc']);
  // Signed by the wrong CA must fail: the check above can fail.
  assert.throws(() => openssl(['verify', '-CAfile', 'etcd/ca.crt', 'server.crt'], dir));

  assert.deepEqual(opensslSans('server.crt', dir).sort(), [
    'DNS:api.example.test',
    'DNS:ctrl-1',
    'DNS:kubernetes',
    'DNS:kubernetes.default',
    'DNS:kubernetes.default.svc',
    'DNS:kubernetes.default.svc.cluster.local',
    'DNS:localhost',
    'IP Address:0:0:0:0:0:0:0:1',
    'IP Address:10.96.0.1',
    'IP Address:127.0.0.1',
    'IP Address:192.0.2.10',
    'IP Address:2001:DB8:0:0:0:0:0:10',
    'IP Address:FE80:0:0:0:0:0:0:1',
  ]);
  assert.deepEqual(
    opensslSans('konnectivity.crt', dir).sort(),
    [...opensslSans('server.crt', dir), 'DNS:konnectivity'].sort(),
  );
  assert.deepEqual(opensslSans('etcd/server.crt', dir).sort(), [
    'DNS:ctrl-1',
    'DNS:localhost',
    'IP Address:0:0:0:0:0:0:0:1',
    'IP Address:127.0.0.1',
    'IP Address:192.0.2.10',
  ]);

  const ca = openssl(['x509', '-in', 'ca.crt', '-noout', '-text'], dir);
  assert.match(ca, /Subject: CN ?= ?kubernetes-ca/);
  assert.match(ca, /CA:TRUE/);
  assert.match(ca, /Certificate Sign/);
  const server = openssl(['x509', '-in', 'server.crt', '-noout', '-text'], dir);
  assert.match(server, /CA:FALSE/);
  // New keys are ECDSA P-256: the CA signs with ecdsa-with-SHA256 and its leaves only sign.
  assert.match(server, /Public Key Algorithm: id-ecPublicKey/);
  assert.match(server, /Signature Algorithm: ecdsa-with-SHA256/);
  assert.match(server, /X509v3 Key Usage: critical\n\s+Digital Signature\n/);
  assert.match(server, /TLS Web Server Authentication/);
  assert.match(server, /Authority Key Identifier/);
  const etcd = openssl(['x509', '-in', 'etcd/peer.crt', '-noout', '-text'], dir);
  assert.match(etcd, /TLS Web Server Authentication, TLS Web Client Authentication/);
  assert.match(
    openssl(['x509', '-in', 'apiserver-kubelet-client.crt', '-noout', '-subject', '-nameopt', 'RFC2253'], dir),
    /CN=kube-apiserver-kubelet-client,O=system:masters/,
  );

  // 128-bit random serials differ between certs and are positive (openssl prints no sign).
  const serials = ['ca.crt', 'server.crt', 'etcd/server.crt'].map((f) =>
    openssl(['x509', '-in', f, '-noout', '-serial'], dir).trim(),
  );
  assert.equal(new Set(serials).size, 3);
  for (const s of serials) assert.match(s, /^serial=[0-9A-F]{2,32}$/);

  // Lifetimes: CA 10 years, leaf 1 year.
  const endDate = (f: string) =>
    new Date(openssl(['x509', '-in', f, '-noout', '-enddate'], dir).trim().replace('notAfter=', ''));
  const years = (d: Date) => (d.getTime() - templateStarted.getTime()) / (365.25 * DAY);
  assert.ok(Math.abs(years(endDate('ca.crt')) - 10) < 0.01);
  assert.ok(Math.abs(years(endDate('server.crt')) - 1) < 0.01);
});

test('sa.pub is the PKIX public key of sa.key', async () => {
  const dir = join(templateRoot, 'pki');
  assert.equal(openssl(['pkey', '-in', 'sa.key', '-pubout'], dir), await readFile(join(dir, 'sa.pub'), 'utf8'));
  assert.match(await readFile(join(dir, 'sa.pub'), 'utf8'), /^-----BEGIN PUBLIC KEY-----/);
});

test('kubeconfigs embed the CA and a client cert for the component, pointing at the API address', async () => {
  const dir = join(templateRoot, 'pki');
  const caPem = await readFile(join(dir, 'ca.crt'), 'utf8');
  const want = {
    'admin.conf': 'CN=kubernetes-admin,O=system:masters',
    'scheduler.conf': 'CN=system:kube-scheduler',
    'controller-manager.conf': 'CN=system:kube-controller-manager',
  };
  for (const [file, subject] of Object.entries(want)) {
    const kc = readKubeconfig(await readFile(join(dir, file), 'utf8'), file);
    assert.equal(kc.server, 'https://192.0.2.10:6443');
    assert.equal(kc.caPem, caPem);
    assert.equal(opensslSubject(kc.certPem ?? ''), `subject=${subject}`);
    const certFile = join(await mkdtemp(join(tmpdir(), 'kctl-kc-')), 'client.crt');
    await writeFile(certFile, kc.certPem ?? '');
    assert.match(openssl(['verify', '-CAfile', 'ca.crt', certFile], dir), /: OK/);
    assert.match(openssl(['x509', '-in', certFile, '-noout', '-text'], dir), /TLS Web Client Authentication/);
    // The embedded key belongs to the embedded cert.
    assert.equal(
      openssl(['pkey', '-pubout'], dir, kc.keyPem),
      openssl(['x509', '-in', certFile, '-noout', '-pubkey'], dir),
    );
    await rm(join(certFile, '..'), { recursive: true });
  }
});

test('a second run changes nothing, byte for byte', async (t) => {
  const dir = await copyOfTemplate(t);
  const before = await snapshot(dir);
  const { log, lines } = captureLogger();
  await ensurePki(options(dir), log);
  assert.deepEqual(changed(before, await snapshot(dir)), []);
  assert.deepEqual(
    lines().filter((l) => l.level === 30 && l.msg !== 'pki ready'),
    [],
  );
  assert.equal(lines().find((l) => l.msg === 'pki ready')?.unchanged, 18);
});

test('a SAN change renews the serving certs but keeps the CA', async (t) => {
  const dir = await copyOfTemplate(t);
  const before = await snapshot(dir);
  const { log, lines } = captureLogger();
  await ensurePki(options(dir, { sans: ['api.example.test', '2001:db8::10', 'new.example.test'] }), log);
  assert.deepEqual(changed(before, await snapshot(dir)), ['konnectivity.crt', 'server.crt']);
  assert.ok(opensslSans('server.crt', dir).includes('DNS:new.example.test'));
  assert.match(openssl(['verify', '-CAfile', 'ca.crt', 'server.crt'], dir), /OK/);
  const renewed = lines().find((l) => l.file === 'server.crt');
  assert.equal(renewed?.msg, 'renewed certificate');
  assert.match(String(renewed?.reason), /SANs changed \(added DNS:new.example.test\)/);
});

test('a new local interface address renews server.crt (SANs follow the host)', async (t) => {
  const dir = await copyOfTemplate(t);
  const before = await snapshot(dir);
  await ensurePki(
    options(dir, { localAddresses: ['192.0.2.10', '127.0.0.1', '::1', 'fe80::1', '198.51.100.7'] }),
    captureLogger().log,
  );
  assert.deepEqual(changed(before, await snapshot(dir)), ['konnectivity.crt', 'server.crt']);
  assert.ok(opensslSans('server.crt', dir).includes('IP Address:198.51.100.7'));
});

test('near expiry renews every leaf and kubeconfig but keeps every CA and the SA key', async (t) => {
  const dir = await copyOfTemplate(t);
  const before = await snapshot(dir);
  const now = new Date(templateStarted.getTime() + 340 * DAY);
  const { log, lines } = captureLogger();
  await ensurePki(options(dir, { now }), log);
  assert.deepEqual(changed(before, await snapshot(dir)), FULL_CONTROLLER_LEAVES);
  assert.match(String(lines().find((l) => l.file === 'server.crt')?.reason), /due for renewal since/);
  // The new cert is valid from `now` on (openssl checks at that time) for a year.
  const at = String(Math.floor(now.getTime() / 1000) + 60);
  assert.match(openssl(['verify', '-attime', at, '-CAfile', 'ca.crt', 'server.crt'], dir), /OK/);
  const notAfter = new Date(
    openssl(['x509', '-in', 'server.crt', '-noout', '-enddate'], dir).trim().replace('notAfter=', ''),
  );
  assert.ok(notAfter.getTime() > now.getTime() + 364 * DAY);

  // Run again at the same time: now nothing is due.
  const renewed = await snapshot(dir);
  await ensurePki(options(dir, { now }), captureLogger().log);
  assert.deepEqual(changed(renewed, await snapshot(dir)), []);
});

test('a missing ca.key with ca.crt present is a clear error and touches nothing', async (t) => {
  const dir = await copyOfTemplate(t);
  await rm(join(dir, 'ca.key'));
  const before = await snapshot(dir);
  await assert.rejects(ensurePki(options(dir), captureLogger().log), (err: Error) => {
    assert.ok(err instanceof PkiError);
    assert.match(err.message, /ca\.key is missing but ca\.crt exists; restore it from a backup/);
    assert.doesNotMatch(err.message, /\n/);
    return true;
  });
  assert.deepEqual(changed(before, await snapshot(dir)), []);
});

test('an unreadable file is an error naming it and what to do', async (t) => {
  const dir = await copyOfTemplate(t);
  await writeFile(join(dir, 'etcd/ca.crt'), 'not a certificate\n');
  await assert.rejects(
    ensurePki(options(dir), captureLogger().log),
    /etcd\/ca\.crt is not a readable X\.509 certificate .*restore it from a backup/,
  );

  const dir2 = await copyOfTemplate(t);
  await writeFile(
    join(dir2, 'server.key'),
    '-----BEGIN RSA PRIVATE KEY-----\ngarbage\n-----END RSA PRIVATE KEY-----\n',
  );
  await assert.rejects(
    ensurePki(options(dir2), captureLogger().log),
    /server\.key is not a readable private key .*remove .*server\.key and start again/,
  );
});

test("an RSA CA (an earlier kctl's, or the operator's own) keeps signing: RSA signatures, verified by openssl, kept on the next run", async (t) => {
  const dir = join(await tempDir(t), 'pki');
  await mkdir(dir, { recursive: true });
  openssl(
    [
      'req',
      '-x509',
      '-newkey',
      'rsa:2048',
      '-nodes',
      '-keyout',
      'ca.key',
      '-out',
      'ca.crt',
      '-subj',
      '/CN=kubernetes-ca',
      '-days',
      '3650',
      '-addext',
      'basicConstraints=critical,CA:TRUE',
      '-addext',
      'keyUsage=critical,keyCertSign,cRLSign,digitalSignature',
    ],
    dir,
  );
  const ca = await readFile(join(dir, 'ca.crt'), 'utf8');
  await ensurePki(options(dir), captureLogger().log);
  assert.equal(await readFile(join(dir, 'ca.crt'), 'utf8'), ca);
  assert.match(
    openssl(['verify', '-CAfile', 'ca.crt', 'server.crt', 'apiserver-kubelet-client.crt'], dir),
    /server.crt: OK\napiserver-kubelet-client.crt: OK/,
  );
  const server = openssl(['x509', '-in', 'server.crt', '-noout', '-text'], dir);
  assert.match(server, /Signature Algorithm: sha256WithRSAEncryption/);
  assert.match(server, /Public Key Algorithm: id-ecPublicKey/);
  const before = await snapshot(dir);
  await ensurePki(options(dir), captureLogger().log);
  assert.deepEqual(changed(before, await snapshot(dir)), []);
});

test('a lost ca.crt is re-created from ca.key and existing leafs stay valid', async (t) => {
  const dir = await copyOfTemplate(t);
  const oldCa = await readFile(join(dir, 'ca.crt'), 'utf8');
  await rm(join(dir, 'ca.crt'));
  const before = await snapshot(dir);
  await ensurePki(options(dir), captureLogger().log);
  assert.notEqual(await readFile(join(dir, 'ca.crt'), 'utf8'), oldCa);
  // Same key, same name: no leaf needed reissuing, and the old CA cert still verifies them.
  assert.deepEqual(changed(before, await snapshot(dir)), [
    'admin.conf',
    'ca-signing.crt',
    'ca.crt',
    'controller-manager.conf',
    'scheduler.conf',
  ]);
  await writeFile(join(dir, 'old-ca.crt'), oldCa);
  assert.match(openssl(['verify', '-CAfile', 'old-ca.crt', 'server.crt'], dir), /OK/);
  assert.match(openssl(['verify', '-CAfile', 'ca.crt', 'server.crt'], dir), /OK/);
});

test('a leaf signed by another CA is replaced; a changed API address rewrites kubeconfigs only', async (t) => {
  const dir = await copyOfTemplate(t);
  const other = await tempDir(t);
  // Foreign cert+key pair, self-signed with openssl.
  openssl(
    [
      'req',
      '-x509',
      '-newkey',
      'rsa:2048',
      '-nodes',
      '-keyout',
      'server.key',
      '-out',
      'server.crt',
      '-subj',
      '/CN=kube-apiserver',
      '-days',
      '30',
    ],
    other,
  );
  await cp(join(other, 'server.crt'), join(dir, 'server.crt'));
  await cp(join(other, 'server.key'), join(dir, 'server.key'));
  const { log, lines } = captureLogger();
  await ensurePki(options(dir), log);
  assert.match(String(lines().find((l) => l.file === 'server.crt')?.reason), /not signed by the current kubernetes-ca/);
  assert.match(openssl(['verify', '-CAfile', 'ca.crt', 'server.crt'], dir), /OK/);

  const before = await snapshot(dir);
  await ensurePki(options(dir, { apiAddress: '2001:db8::10', apiPort: 7443 }), captureLogger().log);
  assert.deepEqual(changed(before, await snapshot(dir)), [
    'admin.conf',
    'controller-manager.conf',
    'etcd/peer.crt',
    'etcd/server.crt',
    'scheduler.conf',
  ]);
  const oldAdmin = readKubeconfig(before.get('admin.conf') ?? '', 'admin.conf');
  const admin = readKubeconfig(await readFile(join(dir, 'admin.conf'), 'utf8'), 'admin.conf');
  assert.equal(admin.server, 'https://[2001:db8::10]:7443');
  assert.equal(admin.certPem, oldAdmin.certPem, 'the client cert is kept when only the server URL changed');
});

test('loose permissions on kept files are tightened', async (t) => {
  const dir = await copyOfTemplate(t);
  await chmod(join(dir, 'ca.key'), 0o644);
  await chmod(join(dir, 'admin.conf'), 0o644);
  await chmod(join(dir, 'etcd'), 0o755);
  const { log, lines } = captureLogger();
  await ensurePki(options(dir), log);
  assert.equal((await stat(join(dir, 'ca.key'))).mode & 0o777, 0o600);
  assert.equal((await stat(join(dir, 'admin.conf'))).mode & 0o777, 0o600);
  assert.equal((await stat(join(dir, 'etcd'))).mode & 0o777, 0o700);
  assert.equal(lines().filter((l) => l.msg === 'fixed file permissions').length, 3);
});

test('a bad SAN is rejected before anything is written', async (t) => {
  const dir = join(await tempDir(t), 'pki');
  await assert.rejects(
    ensurePki(options(dir, { sans: ['https://api.example.test'] }), captureLogger().log),
    /spec\.api\.sans: "https:\/\/api\.example\.test" is neither an IP address nor a DNS name/,
  );
  await assert.rejects(stat(dir), { code: 'ENOENT' });
});

test('two controllers starting at once end up with one CA', async (t) => {
  const dir = join(await tempDir(t), 'pki');
  await Promise.all([ensurePki(options(dir), captureLogger().log), ensurePki(options(dir), captureLogger().log)]);
  assert.match(
    openssl(['verify', '-CAfile', 'ca.crt', 'server.crt', 'konnectivity.crt'], dir),
    /server.crt: OK\nkonnectivity.crt: OK/,
  );
  const kc = readKubeconfig(await readFile(join(dir, 'admin.conf'), 'utf8'), 'admin.conf');
  assert.equal(kc.caPem, await readFile(join(dir, 'ca.crt'), 'utf8'));
});

test('kubelets are trusted through the kubelet-serving CA alone on a new cluster, and also through the cluster CA on an older one until its nodes moved', async (t) => {
  const certs = (pem: string) => pem.match(/-----BEGIN CERTIFICATE-----/g)?.length ?? 0;
  const fresh = pkiPaths(join(templateRoot, 'pki'));
  const bundle = await readFile(fresh.kubeletCaBundle, 'utf8');
  assert.equal(certs(bundle), 1);
  assert.equal(bundle.trim(), (await readFile(fresh.kubeletServingCaCert, 'utf8')).trim());
  // An older cluster: a PKI from before the kubelet-serving CA existed.
  const dir = await copyOfTemplate(t);
  const p = pkiPaths(dir);
  for (const f of [p.kubeletServingCaCert, p.kubeletServingCaKey, p.kubeletCaBundle, p.kubeletServingMoved])
    await rm(f);
  await ensurePki(options(dir), captureLogger().log);
  const both = await readFile(p.kubeletCaBundle, 'utf8');
  assert.equal(certs(both), 2);
  assert.ok(
    both.includes((await readFile(p.caCert, 'utf8')).trim()),
    'the cluster CA is trusted for kubelets while they move over',
  );
  assert.equal(existsSync(p.kubeletServingMoved), false);
  // Once every node moved (the controller writes the mark), the next start drops the cluster CA.
  await writeFile(p.kubeletServingMoved, 'moved\n');
  await ensurePki(options(dir), captureLogger().log);
  assert.equal(certs(await readFile(p.kubeletCaBundle, 'utf8')), 1);
});

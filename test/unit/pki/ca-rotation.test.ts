// The cluster CA rotation's files: each phase's ca.crt/ca.key, the leaves that follow, recovery
// from a step cut between its two writes, and the node's CSR (checked by openssl).
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { X509Certificate } from 'node:crypto';
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { test } from 'node:test';
import { parseCsr } from '../../../src/controller/join/csr-request.ts';
import {
  bundleHash,
  caFilesFor,
  certificateRequestPem,
  ensurePkiFiles,
  generateKeyPem,
  newClusterCa,
  parseKey,
  pkiPaths,
  signedByFirst,
  splitCertificates,
  unvouched,
  vouchFor,
  writeCaPhase,
  type CaRotation,
} from '../../../src/pki/index.ts';
import { captureLogger, selfSignedCert, tempDir, smallPkiOptions } from '../../helpers.ts';

const options = smallPkiOptions;

async function rotationFor(dir: string): Promise<CaRotation> {
  const p = pkiPaths(dir);
  const next = await newClusterCa(new Date());
  const oldKey = await readFile(p.caKey, 'utf8');
  return {
    phase: 'trust',
    oldCert: await readFile(p.caCert, 'utf8'),
    oldKey,
    newCert: next.cert,
    newKey: next.key,
    proof: vouchFor(next.cert, oldKey),
  };
}

const signedBy = (certPem: string, caPem: string) => {
  const ca = new X509Certificate(caPem);
  const cert = new X509Certificate(certPem);
  return cert.checkIssued(ca) && cert.verify(ca.publicKey);
};

test('each phase: trust keeps the old CA signing beside the new one, sign reissues every cluster-CA leaf with the new one, drop leaves it alone', async (t) => {
  const dir = await tempDir(t);
  const { log } = captureLogger();
  const p = pkiPaths(dir);
  await ensurePkiFiles(options(dir), log);
  const r = await rotationFor(dir);
  const server = await readFile(p.serverCert, 'utf8');

  assert.equal(await writeCaPhase(p, r), true);
  assert.equal(await writeCaPhase(p, r), false, 'a phase already written is not written again');
  assert.deepEqual(
    splitCertificates(await readFile(p.caCert, 'utf8')),
    [r.oldCert, r.newCert].map((c) => `${c.trim()}\n`),
  );
  let { changed } = await ensurePkiFiles(options(dir), log);
  // Only the kubeconfigs change (their embedded CA is the bundle); leaves stay the old CA's.
  assert.deepEqual(changed.map((f) => f.slice(dir.length + 1)).sort(), [
    'admin.conf',
    'controller-manager.conf',
    'scheduler.conf',
  ]);
  assert.equal(await readFile(p.serverCert, 'utf8'), server);
  assert.equal(await readFile(p.caSigningCert, 'utf8'), `${r.oldCert.trim()}\n`);

  await writeCaPhase(p, { ...r, phase: 'sign' });
  ({ changed } = await ensurePkiFiles(options(dir), log));
  const rel = changed.map((f) => f.slice(dir.length + 1)).sort();
  for (const f of ['server.crt', 'apiserver-kubelet-client.crt', 'konnectivity.crt', 'admin.conf'])
    assert.ok(rel.includes(f), `${f} reissued`);
  assert.ok(!rel.includes('front-proxy-client.crt') && !rel.includes('etcd/server.crt'), 'other CAs’ leaves stay');
  assert.ok(signedBy(await readFile(p.serverCert, 'utf8'), r.newCert));
  // kube-controller-manager's signing file: the new CA alone.
  assert.equal(await readFile(p.caSigningCert, 'utf8'), `${r.newCert.trim()}\n`);
  // A client that trusts the bundle accepts the new server certificate (openssl, as a user checks it).
  execFileSync('openssl', ['verify', '-CAfile', p.caCert, p.serverCert], { stdio: 'pipe' });

  await writeCaPhase(p, { ...r, phase: 'drop' });
  ({ changed } = await ensurePkiFiles(options(dir), log));
  assert.deepEqual(changed.map((f) => f.slice(dir.length + 1)).sort(), [
    'admin.conf',
    'controller-manager.conf',
    'scheduler.conf',
  ]);
  assert.equal(await readFile(p.caCert, 'utf8'), `${r.newCert.trim()}\n`);
  // A client that still trusts only the old CA refuses the server now.
  await writeFile(join(dir, 'old-ca.crt'), r.oldCert);
  assert.throws(() =>
    execFileSync('openssl', ['verify', '-CAfile', join(dir, 'old-ca.crt'), p.serverCert], { stdio: 'pipe' }),
  );
});

test('a step cut between writing the key and the bundle is repaired at the next start: the key’s certificate goes first again', async (t) => {
  const dir = await tempDir(t);
  const { log, raw } = captureLogger();
  const p = pkiPaths(dir);
  await ensurePkiFiles(options(dir), log);
  const r = await rotationFor(dir);
  await writeCaPhase(p, r);
  // The sign phase's key is written, its bundle not yet.
  await writeFile(p.caKey, r.newKey, { mode: 0o600 });
  await ensurePkiFiles(options(dir), log);
  assert.equal(await readFile(p.caCert, 'utf8'), caFilesFor({ ...r, phase: 'sign' }).cert);
  assert.match(raw(), /put the certificate of the CA key first/);
  assert.ok(signedBy(await readFile(p.serverCert, 'utf8'), r.newCert));
});

test('bundleHash names content, not spelling; signedByFirst checks against the signing CA only', async () => {
  const a = await newClusterCa(new Date());
  const b = await newClusterCa(new Date());
  assert.equal(bundleHash(a.cert + b.cert), bundleHash(`\n${a.cert.replace(/\n/g, '\r\n')}${b.cert}\n\n`));
  assert.notEqual(bundleHash(a.cert + b.cert), bundleHash(b.cert + a.cert));
  assert.equal(
    caFilesFor({ phase: 'drop', oldCert: a.cert, oldKey: a.key, newCert: b.cert, newKey: b.key }).cert,
    `${b.cert.trim()}\n`,
  );
  assert.equal(signedByFirst(a.cert, a.cert + b.cert), true); // self-signed
  assert.equal(signedByFirst(a.cert, b.cert + a.cert), false);
});

test('the node’s CSR is what kubelet asks for renewal: its subject, verified by openssl', async () => {
  const pem = certificateRequestPem(
    { commonName: 'system:node:w1', organizations: ['system:nodes'] },
    parseKey(await generateKeyPem(), 'k', 'x'),
  );
  const out = execFileSync('openssl', ['req', '-noout', '-verify', '-subject'], {
    input: pem,
    encoding: 'utf8',
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  assert.match(out, /subject=O\s*=\s*system:nodes, CN\s*=\s*system:node:w1/);
  const parsed = parseCsr(pem);
  assert.equal(parsed.commonName, 'system:node:w1');
  assert.deepEqual(parsed.organizations, ['system:nodes']);
  assert.equal(parsed.dnsNames.length + parsed.ipAddresses.length, 0);
});

test("a rotation nobody trusted vouched for is refused and changes nothing: no proof, another key's proof, or a CA made with openssl", async (t) => {
  const dir = await tempDir(t);
  const { log } = captureLogger();
  const p = pkiPaths(dir);
  await ensurePkiFiles(options(dir), log);
  const real = await rotationFor(dir);
  const [cert, key] = [await readFile(p.caCert, 'utf8'), await readFile(p.caKey, 'utf8')];
  // What whoever can write the Secret could make: a CA of their own, the current CA's public half.
  const made = selfSignedCert(dir, 'forged', { cn: 'forged-ca', ca: true });
  const forged = { cert: made.pem, key: await readFile(made.key, 'utf8') };
  const attempts: [string, CaRotation][] = [
    ['no proof', { ...real, newCert: forged.cert, newKey: forged.key, proof: undefined }],
    [
      "the forged CA's own proof",
      { ...real, newCert: forged.cert, newKey: forged.key, proof: vouchFor(forged.cert, forged.key) },
    ],
    ['a real proof for another CA', { ...real, newCert: forged.cert, newKey: forged.key }],
    ['a real proof, the wrong new key', { ...real, newKey: forged.key }],
  ];
  for (const [what, r] of attempts) {
    for (const phase of ['trust', 'sign', 'drop'] as const)
      await assert.rejects(
        writeCaPhase(p, { ...r, phase }),
        /CA rotation refused: .*ca\.crt is unchanged/,
        `${what}, ${phase}`,
      );
    assert.equal(await readFile(p.caCert, 'utf8'), cert, what);
    assert.equal(await readFile(p.caKey, 'utf8'), key, what);
  }
  assert.equal(await writeCaPhase(p, real), true);
  assert.equal(await readFile(p.caProof, 'utf8'), real.proof);
});

test('a node takes a new bundle only where a CA it trusts vouches for every CA added; dropping one needs no proof', async () => {
  const oldCa = await newClusterCa(new Date());
  const next = await newClusterCa(new Date());
  const stranger = await newClusterCa(new Date());
  const proof = vouchFor(next.cert, oldCa.key);
  const both = oldCa.cert + next.cert;
  assert.deepEqual(unvouched(both, oldCa.cert, [proof]), []);
  // A node that missed the whole rotation follows it straight to the new CA alone.
  assert.deepEqual(unvouched(next.cert, oldCa.cert, [proof]), []);
  assert.deepEqual(unvouched(next.cert, both, []), []);
  assert.equal(unvouched(both, oldCa.cert, []).length, 1);
  assert.match(
    unvouched(oldCa.cert + stranger.cert, oldCa.cert, [proof, vouchFor(stranger.cert, stranger.key)])[0] ?? '',
    /^CN=kubernetes-ca-/,
  );
  assert.equal(unvouched(oldCa.cert + stranger.cert, oldCa.cert, ['not base64 at all', '']).length, 1);
});

// A controller follows a CA rotation from the Secret only with proof: a rotation nobody trusted
// vouched for is refused once (a warn line and a Warning event on the Secret), changes no file and
// takes no renewal turn; the real one (rotate-ca's cross-signature) is followed.
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { test } from 'node:test';
import { CaRotationFollower } from '../../../../src/controller/pki/ca-rotation.ts';
import { KubeClient } from '../../../../src/kube/client.ts';
import { ensurePkiFiles, newClusterCa, pkiPaths, vouchFor } from '../../../../src/pki/index.ts';
import { captureLogger, smallPkiOptions, tempDir } from '../../../helpers.ts';
import { fakeApiServer, json } from '../../kube/fake-apiserver.ts';

const b64 = (s: string) => Buffer.from(s).toString('base64');

test('a rotation Secret without a cross-signature by the CA trusted now is refused once and changes nothing; with one it is followed', async (t) => {
  const dir = await tempDir(t);
  const { log, lines } = captureLogger();
  const p = pkiPaths(dir);
  await ensurePkiFiles(smallPkiOptions(dir), log);
  const [cert, key] = [await readFile(p.caCert, 'utf8'), await readFile(p.caKey, 'utf8')];
  const forged = await newClusterCa(new Date());
  let data: Record<string, string> = {
    phase: b64('trust'),
    'old.crt': b64(cert),
    'old.key': b64(forged.key),
    'new.crt': b64(forged.cert),
    'new.key': b64(forged.key),
  };
  const events: string[] = [];
  const api = await fakeApiServer(t, (req, res) => {
    if (req.path === '/api/v1/namespaces/kube-system/secrets/kctl-ca-rotation')
      return json(res, 200, { metadata: { name: 'kctl-ca-rotation', resourceVersion: '1' }, data });
    if (req.method === 'POST' && req.path === '/api/v1/namespaces/kube-system/events') {
      const e = JSON.parse(req.body) as { reason: string; involvedObject: { kind: string; name: string } };
      events.push(`${e.involvedObject.kind}/${e.involvedObject.name} ${e.reason}`);
      return json(res, 201, e);
    }
    json(res, 404, { kind: 'Status', code: 404 });
  });
  const steps: string[] = [];
  const follower = new CaRotationFollower(new KubeClient({ server: api.url }), p, async (reason, write) => {
    steps.push(reason);
    await write();
  });
  for (let i = 0; i < 3; i++) await follower.check(log, AbortSignal.timeout(10_000));
  assert.match(
    follower.lastError ?? '',
    /^CA rotation: CA rotation refused: no CA trusted now vouches for CN=kubernetes-ca-/,
  );
  assert.deepEqual(steps, [], 'a renewal turn was taken for a refused rotation');
  assert.deepEqual(events, ['Secret/kctl-ca-rotation CaRotationRefused']);
  assert.equal(lines().filter((l) => String(l.msg).includes('CA rotation refused')).length, 1);
  assert.equal(await readFile(p.caCert, 'utf8'), cert);

  const next = await newClusterCa(new Date());
  data = {
    ...data,
    'old.key': b64(key),
    'new.crt': b64(next.cert),
    'new.key': b64(next.key),
    'new.proof': b64(vouchFor(next.cert, key)),
  };
  await follower.check(log, AbortSignal.timeout(10_000));
  assert.equal(follower.lastError, undefined);
  assert.deepEqual(steps, ['CA rotation, phase trust']);
  assert.ok((await readFile(p.caCert, 'utf8')).includes(next.cert.trim()));
});

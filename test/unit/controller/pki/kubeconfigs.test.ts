// kctl kubeconfig create: a bound service-account token from the TokenRequest API, or a client
// certificate for a person, each in a kubeconfig that names the API and embeds the cluster CA.
import assert from 'node:assert/strict';
import { X509Certificate } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { test } from 'node:test';
import { parse } from 'yaml';
import { parseConfig } from '../../../../src/controller/config/config.ts';
import {
  parseServiceAccount,
  serviceAccountKubeconfig,
  userKubeconfig,
} from '../../../../src/controller/pki/kubeconfigs.ts';
import { KubeClient } from '../../../../src/kube/client.ts';
import { ensurePki, type PkiPaths } from '../../../../src/pki/index.ts';
import { captureLogger, tempDir } from '../../../helpers.ts';
import { fakeApiServer, json } from '../../kube/fake-apiserver.ts';

type Kubeconfig = {
  clusters: { cluster: { server: string; 'certificate-authority-data': string } }[];
  users: { name: string; user: { token?: string; 'client-certificate-data'?: string; 'client-key-data'?: string } }[];
};

const cfg = parseConfig({ spec: { api: { address: '10.0.0.1', port: 16443 }, profile: 'api-only' } }, 'kctl.yaml');

async function pki(t: Parameters<typeof tempDir>[0]): Promise<PkiPaths> {
  const dir = await tempDir(t);
  return ensurePki(
    {
      dir: join(dir, 'pki'),
      apiAddress: '10.0.0.1',
      sans: [],
      apiPort: 16443,
      serviceCIDR: '10.96.0.0/12',
      clusterDomain: 'cluster.local',
    },
    captureLogger().log,
  );
}

test('--service-account: NAMESPACE/NAME, a TokenRequest with the expiry, the token and CA in the kubeconfig; a missing account is one line', async (t) => {
  assert.deepEqual(parseServiceAccount('operators/watcher'), { namespace: 'operators', name: 'watcher' });
  assert.throws(() => parseServiceAccount('watcher'), /is not NAMESPACE\/NAME/);
  const paths = await pki(t);
  const api = await fakeApiServer(t, (req, res) => {
    if (req.path.endsWith('/serviceaccounts/watcher/token'))
      return json(res, 201, { status: { token: 'bound-token' } });
    json(res, 404, { kind: 'Status', status: 'Failure', reason: 'NotFound', code: 404 });
  });
  const kube = new KubeClient({ server: api.url });
  const text = await serviceAccountKubeconfig(kube, cfg, paths, { namespace: 'operators', name: 'watcher' }, 3600_000);
  const request = api.requests[0]!;
  assert.equal(request.path, '/api/v1/namespaces/operators/serviceaccounts/watcher/token');
  assert.equal((JSON.parse(request.body) as { spec: { expirationSeconds: number } }).spec.expirationSeconds, 3600);
  const kc = parse(text) as Kubeconfig;
  assert.equal(kc.clusters[0]!.cluster.server, 'https://10.0.0.1:16443');
  assert.equal(
    Buffer.from(kc.clusters[0]!.cluster['certificate-authority-data'], 'base64').toString(),
    await readFile(paths.caCert, 'utf8'),
  );
  assert.equal(kc.users[0]!.user.token, 'bound-token');
  assert.equal(kc.users[0]!.name, 'system:serviceaccount:operators:watcher');
  await assert.rejects(
    serviceAccountKubeconfig(kube, cfg, paths, { namespace: 'operators', name: 'missing' }, 3600_000),
    /service account operators\/missing does not exist; create it/,
  );
  await assert.rejects(
    serviceAccountKubeconfig(kube, cfg, paths, { namespace: 'operators', name: 'watcher' }, 60_000),
    /at least 10m/,
  );
});

test('--user: a client certificate from the cluster CA with CN, groups as O, client auth only, expiring when asked', async (t) => {
  const paths = await pki(t);
  const before = Date.now();
  const kc = parse(
    await userKubeconfig(cfg, paths, { name: 'alice', groups: ['team-a', 'viewers'] }, 48 * 3600_000),
  ) as Kubeconfig;
  const user = kc.users[0]!.user;
  const cert = new X509Certificate(Buffer.from(user['client-certificate-data']!, 'base64'));
  assert.ok(cert.verify(new X509Certificate(await readFile(paths.caCert)).publicKey), 'signed by the cluster CA');
  assert.match(cert.subject, /CN=alice/);
  assert.match(cert.subject, /O=team-a/);
  assert.match(cert.subject, /O=viewers/);
  assert.deepEqual(cert.keyUsage, ['1.3.6.1.5.5.7.3.2'], 'extended key usage: client auth only');
  const notAfter = Date.parse(cert.validTo);
  assert.ok(Math.abs(notAfter - (before + 48 * 3600_000)) < 120_000, cert.validTo);
  assert.match(Buffer.from(user['client-key-data']!, 'base64').toString(), /PRIVATE KEY/);
  await assert.rejects(userKubeconfig(cfg, paths, { name: 'alice', groups: [] }, 0), /must expire/);
});

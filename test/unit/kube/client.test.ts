import assert from 'node:assert/strict';
import { test } from 'node:test';
import { KubeApiError, KubeClient, objectPath, resourcePath } from '../../../src/kube/client.ts';
import { listAndWatch, type ChangeType } from '../../../src/kube/informer.ts';
import { fakeApiServer, json, node, watchStream } from './fake-apiserver.ts';

type Node = ReturnType<typeof node>;

/** Records what a listAndWatch handler saw, as short strings. */
function recorder() {
  const seen: string[] = [];
  return {
    seen,
    handler: {
      onList: (items: Node[]) => {
        seen.push(`LIST ${items.map((n) => n.metadata.name).join(',')}`);
      },
      onEvent: (type: ChangeType, n: Node) => {
        seen.push(`${type} ${n.metadata.name}`);
      },
      onError: (err: Error) => {
        seen.push(`ERROR ${err.message}`);
      },
    },
  };
}

test(
  'a watch the server closes is reopened from the last resourceVersion, bookmarks included',
  { timeout: 20_000 },
  async (t) => {
    let watches = 0;
    const api = await fakeApiServer(t, (req, res) => {
      if (req.query.get('watch') !== 'true')
        return json(res, 200, { metadata: { resourceVersion: '10' }, items: [node('a', '9')] });
      watches += 1;
      const w = watchStream(res);
      if (watches === 1) {
        w.event('ADDED', node('b', '11'));
        w.end();
      } else if (watches === 2) {
        w.event('BOOKMARK', { kind: 'Node', apiVersion: 'v1', metadata: { resourceVersion: '15' } });
        w.end();
      }
      // the third stays open until the test aborts
    });
    const kube = new KubeClient({ server: api.url });
    const rec = recorder();
    const abort = new AbortController();
    const running = listAndWatch<Node>(
      kube,
      '/api/v1/nodes',
      { fieldSelector: 'metadata.name=a' },
      rec.handler,
      abort.signal,
    );
    const third = await api.nth(4);
    abort.abort();
    await running;
    const [list, w1, w2] = api.requests;
    assert.equal(list!.query.get('watch'), null);
    assert.equal(list!.query.get('fieldSelector'), 'metadata.name=a');
    assert.deepEqual(
      [w1, w2, third].map((r) => r!.query.get('resourceVersion')),
      ['10', '11', '15'],
    );
    for (const w of [w1!, w2!, third]) {
      assert.equal(w.query.get('allowWatchBookmarks'), 'true');
      assert.equal(w.query.get('fieldSelector'), 'metadata.name=a');
    }
    assert.deepEqual(rec.seen, ['LIST a', 'ADDED b']);
  },
);

test('410 Expired, as an ERROR event or as the HTTP status, makes it list again', { timeout: 20_000 }, async (t) => {
  let watches = 0;
  let lists = 0;
  const api = await fakeApiServer(t, (req, res) => {
    if (req.query.get('watch') !== 'true') {
      lists += 1;
      return json(res, 200, { metadata: { resourceVersion: String(lists * 100) }, items: [node(`n${lists}`, '1')] });
    }
    watches += 1;
    if (watches === 1) {
      const w = watchStream(res);
      w.event('ERROR', {
        kind: 'Status',
        apiVersion: 'v1',
        status: 'Failure',
        code: 410,
        reason: 'Expired',
        message: 'too old resource version: 100 (250)',
      });
      w.end();
    } else if (watches === 2) {
      json(res, 410, { kind: 'Status', code: 410, reason: 'Gone', message: 'too old' });
    } else {
      watchStream(res);
    }
  });
  const rec = recorder();
  const abort = new AbortController();
  const running = listAndWatch<Node>(
    new KubeClient({ server: api.url }),
    '/api/v1/nodes',
    {},
    rec.handler,
    abort.signal,
  );
  await api.nth(6);
  abort.abort();
  await running;
  assert.deepEqual(
    api.requests.map((r) => (r.query.get('watch') ? `watch@${r.query.get('resourceVersion')}` : 'list')),
    ['list', 'watch@100', 'list', 'watch@200', 'list', 'watch@300'],
  );
  assert.deepEqual(rec.seen, ['LIST n1', 'LIST n2', 'LIST n3']);
});

test('other failures are reported, backed off, and followed by a fresh list', { timeout: 20_000 }, async (t) => {
  let calls = 0;
  const api = await fakeApiServer(t, (req, res) => {
    calls += 1;
    if (calls === 1)
      return json(res, 403, { kind: 'Status', code: 403, reason: 'Forbidden', message: 'nodes is forbidden' });
    if (req.query.get('watch') !== 'true') return json(res, 200, { metadata: { resourceVersion: '5' }, items: [] });
    watchStream(res);
  });
  const rec = recorder();
  const abort = new AbortController();
  const running = listAndWatch<Node>(
    new KubeClient({ server: api.url }),
    '/api/v1/nodes',
    { backoffMinMs: 10 },
    rec.handler,
    abort.signal,
  );
  await api.nth(3);
  abort.abort();
  await running;
  assert.deepEqual(rec.seen, ['ERROR GET /api/v1/nodes: 403 nodes is forbidden', 'LIST ']);
});

test('aborting ends an open watch and closes its connection', { timeout: 20_000 }, async (t) => {
  let closed: Promise<void> = Promise.resolve();
  const api = await fakeApiServer(t, (req, res) => {
    if (req.query.get('watch') !== 'true') return json(res, 200, { metadata: { resourceVersion: '1' }, items: [] });
    closed = new Promise((resolve) => res.on('close', () => resolve()));
    watchStream(res).event('ADDED', node('a', '2'));
  });
  const rec = recorder();
  const abort = new AbortController();
  const running = listAndWatch<Node>(
    new KubeClient({ server: api.url }),
    '/api/v1/nodes',
    {},
    rec.handler,
    abort.signal,
  );
  await api.nth(2);
  while (rec.seen.length < 2) await new Promise((r) => setImmediate(r));
  abort.abort();
  await running;
  await closed;
  assert.deepEqual(rec.seen, ['LIST ', 'ADDED a']);
  assert.equal(api.requests.length, 2, 'nothing is retried after the abort');
});

test('server-side apply PATCHes the object path with apply-patch content, fieldManager and force', async (t) => {
  const api = await fakeApiServer(t, (req, res) => json(res, 200, JSON.parse(req.body) as unknown));
  const kube = new KubeClient({ server: api.url });
  const crb = {
    apiVersion: 'rbac.authorization.k8s.io/v1',
    kind: 'ClusterRoleBinding',
    metadata: { name: 'kctl:x' },
    roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: 'r' },
    subjects: [],
  };
  await kube.apply(crb);
  await kube.apply(
    {
      apiVersion: 'v1',
      kind: 'ConfigMap',
      metadata: { name: 'cluster-info', namespace: 'kube-public' },
      data: { a: 'b' },
    },
    { fieldManager: 'other', force: false },
  );
  const [a, b] = api.requests;
  assert.equal(a!.method, 'PATCH');
  assert.equal(decodeURIComponent(a!.path), '/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/kctl:x');
  assert.equal(a!.headers['content-type'], 'application/apply-patch+yaml');
  assert.equal(a!.query.get('fieldManager'), 'kctl');
  assert.equal(a!.query.get('force'), 'true');
  assert.deepEqual(JSON.parse(a!.body), crb);
  assert.equal(b!.path, '/api/v1/namespaces/kube-public/configmaps/cluster-info');
  assert.equal(b!.query.get('fieldManager'), 'other');
  assert.equal(b!.query.get('force'), null);
});

test('API errors carry the HTTP status and the Status reason', async (t) => {
  const api = await fakeApiServer(t, (req, res) =>
    req.path.endsWith('/plain')
      ? (res.writeHead(503), res.end('upstream down'))
      : json(res, 404, { kind: 'Status', code: 404, reason: 'NotFound', message: 'nodes "x" not found' }),
  );
  const kube = new KubeClient({ server: api.url });
  await assert.rejects(kube.get('/api/v1/nodes/x'), (err: unknown) => {
    assert.ok(err instanceof KubeApiError);
    assert.equal(err.status, 404);
    assert.equal(err.reason, 'NotFound');
    assert.equal(err.message, 'GET /api/v1/nodes/x: 404 nodes "x" not found');
    return true;
  });
  await assert.rejects(
    kube.get('/plain'),
    (err: unknown) =>
      err instanceof KubeApiError && err.status === 503 && err.reason === '' && /upstream down/.test(err.message),
  );
  await assert.rejects(
    kube.watch('/api/v1/nodes/x', {}, () => undefined),
    (err: unknown) => err instanceof KubeApiError && err.status === 404 && err.reason === 'NotFound',
  );
});

test('find answers undefined for an object that does not exist, the object when it does, and throws other errors', async (t) => {
  const api = await fakeApiServer(t, (req, res) =>
    req.path.endsWith('/here')
      ? json(res, 200, node('here', '3'))
      : req.path.endsWith('/forbidden')
        ? json(res, 403, { kind: 'Status', code: 403, reason: 'Forbidden', message: 'nodes is forbidden' })
        : json(res, 404, { kind: 'Status', code: 404, reason: 'NotFound', message: 'nodes "gone" not found' }),
  );
  const kube = new KubeClient({ server: api.url });
  assert.equal(await kube.find('/api/v1/nodes/gone'), undefined);
  assert.equal((await kube.find<Node>('/api/v1/nodes/here'))?.metadata.name, 'here');
  await assert.rejects(
    kube.find('/api/v1/nodes/forbidden'),
    (err: unknown) => err instanceof KubeApiError && err.status === 403,
  );
});

test('resource paths: core and group APIs, namespaced and cluster-scoped, unknown kinds refused', () => {
  assert.equal(resourcePath({ apiVersion: 'v1', resource: 'nodes' }), '/api/v1/nodes');
  assert.equal(
    resourcePath({
      apiVersion: 'certificates.k8s.io/v1',
      resource: 'certificatesigningrequests',
      name: 'csr-1',
      subresource: 'approval',
    }),
    '/apis/certificates.k8s.io/v1/certificatesigningrequests/csr-1/approval',
  );
  assert.equal(
    objectPath({ apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'kctl' } }),
    '/api/v1/namespaces/kctl',
  );
  assert.equal(
    objectPath({
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'RoleBinding',
      metadata: { name: 'r', namespace: 'kube-public' },
    }),
    '/apis/rbac.authorization.k8s.io/v1/namespaces/kube-public/rolebindings/r',
  );
  assert.throws(
    () => objectPath({ apiVersion: 'v1', kind: 'Secret', metadata: { name: 's' } }),
    /needs metadata.namespace/,
  );
  assert.equal(
    objectPath({ apiVersion: 'apps/v1', kind: 'Deployment', metadata: { name: 'd', namespace: 'x' } }),
    '/apis/apps/v1/namespaces/x/deployments/d',
  );
  assert.throws(
    () => objectPath({ apiVersion: 'apps/v1', kind: 'StatefulSet', metadata: { name: 's', namespace: 'x' } }),
    /does not know the REST path of StatefulSet/,
  );
});

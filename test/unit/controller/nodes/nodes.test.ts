// The controller's Node watch: an address two Nodes report is nobody's (no first reporter) until an
// admin resolves it, and the conflict is shown once as a warn line and a Warning event on each
// Node involved.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { NodeWatchComponent } from '../../../../src/controller/nodes/nodes.ts';
import { ownershipProblem, type ReservedSpace } from '../../../../src/base/ownership.ts';
import { KubeClient } from '../../../../src/kube/client.ts';
import { captureLogger, initialised } from '../../../helpers.ts';
import { fakeApiServer, json, watchStream } from '../../kube/fake-apiserver.ts';

const kubeNode = (name: string, created: string, ...ips: string[]) => ({
  metadata: { name, uid: `uid-${name}`, creationTimestamp: created, resourceVersion: '1' },
  status: { addresses: ips.map((address) => ({ type: 'InternalIP', address })) },
});

async function watchNodes(
  t: Parameters<typeof fakeApiServer>[0],
  listed: ReturnType<typeof kubeNode>[],
  reserved?: ReservedSpace,
) {
  let stream: ReturnType<typeof watchStream> | undefined;
  const events: { node: string; reason: string; message: string; type: string }[] = [];
  const api = await fakeApiServer(t, (req, res) => {
    if (req.path === '/api/v1/nodes') {
      if (req.query.get('watch') !== 'true')
        return json(res, 200, { metadata: { resourceVersion: '2' }, items: listed });
      stream = watchStream(res);
      return;
    }
    if (req.method === 'POST' && req.path === '/api/v1/namespaces/default/events') {
      const e = JSON.parse(req.body) as {
        involvedObject: { name: string; kind: string };
        reason: string;
        message: string;
        type: string;
      };
      assert.equal(e.involvedObject.kind, 'Node');
      events.push({ node: e.involvedObject.name, reason: e.reason, message: e.message, type: e.type });
      return json(res, 201, e);
    }
    json(res, 404, { kind: 'Status', code: 404 });
  });
  const log = captureLogger();
  const nodes = await initialised(new NodeWatchComponent(new KubeClient({ server: api.url }), reserved), log.log);
  await nodes.start();
  t.after(() => nodes.stop());
  const until = async (ok: () => boolean) => {
    while (!ok()) await new Promise((r) => setTimeout(r, 5));
  };
  await until(() => nodes.synced && stream !== undefined);
  return { nodes, events, log, until, event: (type: string, n: object) => stream!.event(type, n) };
}

test('an address two Nodes report is a conflict, whichever reported it first; announced once on both Nodes', async (t) => {
  const w = await watchNodes(t, [
    kubeNode('young', '2026-02-01T00:00:00Z', '10.0.0.5'),
    kubeNode('old', '2026-01-01T00:00:00Z', '10.0.0.5', '10.0.0.6'),
  ]);
  assert.deepEqual(w.nodes.owners('10.0.0.5'), ['old', 'young']);
  assert.deepEqual(w.nodes.conflicts(), [{ value: '10.0.0.5', nodes: ['old', 'young'] }]);
  await w.until(() => w.events.length === 2);
  assert.deepEqual(w.events.map((e) => [e.node, e.type, e.reason]).sort(), [
    ['old', 'Warning', 'AddressConflict'],
    ['young', 'Warning', 'AddressConflict'],
  ]);
  assert.match(
    w.events[0]!.message,
    /^10\.0\.0\.5 is reported by nodes old, young: nobody's \(tunnel, pod network\) until an admin/,
  );
  assert.equal(w.log.lines().filter((l) => String(l.msg).startsWith('address conflict:')).length, 1);
  // Another change that leaves the conflict as it is announces nothing new.
  w.event('MODIFIED', kubeNode('young', '2026-02-01T00:00:00Z', '10.0.0.5', '10.0.0.9'));
  await w.until(() => w.nodes.owners('10.0.0.9').length === 1);
  await new Promise((r) => setTimeout(r, 50));
  assert.equal(w.events.length, 2);
});

test("a squatter gains nothing by reporting first: the address is nobody's once its real node reports it, the real node's once the squatter stops or an admin names the keeper", async (t) => {
  const w = await watchNodes(t, [
    kubeNode('old', '2026-01-01T00:00:00Z', '10.0.0.1'),
    kubeNode('young', '2026-02-01T00:00:00Z', '10.0.0.2'),
  ]);
  const problem = (node: string) => ownershipProblem(node, w.nodes.get(node), '10.0.0.7', false, w.nodes);
  // young lies first: it reports old's future address before old does.
  w.event('MODIFIED', kubeNode('young', '2026-02-01T00:00:00Z', '10.0.0.2', '10.0.0.7'));
  await w.until(() => w.nodes.owners('10.0.0.7').length === 1);
  assert.equal(problem('young'), undefined, "alone, a reported address is the reporter's");
  w.event('MODIFIED', kubeNode('old', '2026-01-01T00:00:00Z', '10.0.0.1', '10.0.0.7'));
  await w.until(() => w.nodes.owners('10.0.0.7').length === 2);
  assert.match(problem('young') ?? '', /^also reported by node old \(conflict/);
  assert.match(problem('old') ?? '', /^also reported by node young \(conflict/);
  // An admin names the keeper on its Node.
  const kept = { ...kubeNode('old', '2026-01-01T00:00:00Z', '10.0.0.1', '10.0.0.7') };
  w.event('MODIFIED', {
    ...kept,
    metadata: { ...kept.metadata, annotations: { 'kctl.dev/keeps-addresses': '10.0.0.7' } },
  });
  await w.until(() => w.nodes.conflicts()[0]?.keeper === 'old');
  assert.equal(problem('old'), undefined);
  assert.equal(problem('young'), 'kept by node old (kctl.dev/keeps-addresses, set by an admin)');
  // A deleted Node gives up everything it reported.
  w.event('DELETED', kubeNode('young', '2026-02-01T00:00:00Z', '10.0.0.2', '10.0.0.7'));
  await w.until(() => w.nodes.owners('10.0.0.7').length === 1);
  assert.deepEqual(w.nodes.owners('10.0.0.7'), ['old']);
  assert.deepEqual(w.nodes.conflicts(), []);
});

test('a pod range no allocator gave is left out of the Node the directory hands on, and announced once on its Node', async (t) => {
  const withRange = (n: ReturnType<typeof kubeNode>, podCIDR: string) => ({
    ...n,
    spec: { podCIDR, podCIDRs: [podCIDR] },
  });
  const reserved = {
    isController: () => false,
    serviceCIDRs: ['10.96.0.0/12'],
    podCIDRs: ['10.244.0.0/16'],
    podRangeBits: 24,
  };
  const w = await watchNodes(
    t,
    [
      withRange(kubeNode('w1', '2026-01-01T00:00:00Z', '10.0.0.1'), '10.244.1.0/24'),
      withRange(kubeNode('evil', '2026-02-01T00:00:00Z', '10.0.0.66'), '10.244.1.0/25'),
    ],
    reserved,
  );
  assert.deepEqual(w.nodes.get('w1')?.podCIDRs, ['10.244.1.0/24']);
  assert.deepEqual(w.nodes.get('evil')?.podCIDRs, []);
  assert.deepEqual(w.nodes.refusedPodRanges(), [
    { node: 'evil', range: '10.244.1.0/25', reason: 'a /25, not the /24 kube-controller-manager gives each node' },
  ]);
  await w.until(() => w.events.length >= 1);
  assert.deepEqual(
    w.events.map((e) => [e.node, e.reason]),
    [['evil', 'PodRangeRefused']],
  );
  assert.match(w.events[0]!.message, /^pod range 10\.244\.1\.0\/25 of node evil is refused: a \/25/);
  // A later change to another Node announces nothing new.
  w.event('MODIFIED', withRange(kubeNode('w1', '2026-01-01T00:00:00Z', '10.0.0.1', '10.0.0.2'), '10.244.1.0/24'));
  await w.until(() => w.nodes.owners('10.0.0.2').length === 1);
  await new Promise((r) => setTimeout(r, 50));
  assert.equal(w.events.length, 1);
  assert.equal(
    w.log.lines().filter((l) => String(l.msg).startsWith('pod range 10.244.1.0/25 of node evil is refused')).length,
    1,
  );
});

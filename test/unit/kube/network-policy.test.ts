// NetworkPolicy resolved per node: which pods are isolated, and the peers and ports each may use.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  parseNodePolicy,
  resolveNetworkPolicies,
  selects,
  type KubeNetworkPolicy,
  type KubePod,
} from '../../../src/kube/network-policy.ts';

const pod = (
  ns: string,
  name: string,
  node: string,
  ip: string,
  labels: Record<string, string> = {},
  ports: { name: string; containerPort: number }[] = [],
): KubePod => ({
  metadata: { name, namespace: ns, labels },
  spec: { nodeName: node, containers: [{ ports }] },
  status: { phase: 'Running', podIP: ip },
});
const ns = (name: string, labels: Record<string, string> = {}) => ({ metadata: { name, labels } });
const policy = (namespace: string, name: string, spec: KubeNetworkPolicy['spec']): KubeNetworkPolicy => ({
  metadata: { name, namespace },
  spec,
});

const PODS = [
  pod('shop', 'web', 'n1', '10.244.1.2', { app: 'web' }, [{ name: 'http', containerPort: 8080 }]),
  pod('shop', 'client', 'n2', '10.244.2.2', { app: 'client' }),
  pod('shop', 'other', 'n2', '10.244.2.3', { app: 'other' }),
  pod('ops', 'probe', 'n3', '10.244.3.2', { app: 'probe' }, [{ name: 'http', containerPort: 9090 }]),
];
const NAMESPACES = [ns('shop'), ns('ops', { team: 'ops' })];

test('label selectors: matchLabels and every matchExpressions operator; an empty selector matches all', () => {
  const l = { app: 'web', tier: 'front' };
  assert.equal(selects(undefined, l), true);
  assert.equal(selects({}, {}), true);
  assert.equal(selects({ matchLabels: { app: 'web' } }, l), true);
  assert.equal(selects({ matchLabels: { app: 'db' } }, l), false);
  assert.equal(selects({ matchExpressions: [{ key: 'tier', operator: 'In', values: ['front', 'back'] }] }, l), true);
  assert.equal(selects({ matchExpressions: [{ key: 'tier', operator: 'NotIn', values: ['front'] }] }, l), false);
  assert.equal(selects({ matchExpressions: [{ key: 'zone', operator: 'NotIn', values: ['a'] }] }, l), true);
  assert.equal(selects({ matchExpressions: [{ key: 'app', operator: 'Exists' }] }, l), true);
  assert.equal(selects({ matchExpressions: [{ key: 'app', operator: 'DoesNotExist' }] }, l), false);
  assert.equal(selects({ matchExpressions: [{ key: 'app', operator: 'Bogus' }] }, l), false);
});

test('no policy: every node is published with no isolated pod', () => {
  const r = resolveNetworkPolicies([], PODS, NAMESPACES);
  assert.deepEqual([...r.keys()].sort(), ['n1', 'n2', 'n3']);
  for (const n of r.values()) assert.deepEqual(n.pods, []);
});

test('default-deny ingress isolates every pod of its namespace with nothing allowed; other namespaces are untouched', () => {
  const r = resolveNetworkPolicies([policy('shop', 'deny', { podSelector: {} })], PODS, NAMESPACES);
  assert.deepEqual(r.get('n1')?.pods, [{ pod: 'shop/web', ip: '10.244.1.2', ingress: [] }]);
  assert.deepEqual(
    r.get('n2')?.pods.map((p) => [p.pod, p.ingress, p.egress]),
    [
      ['shop/client', [], undefined],
      ['shop/other', [], undefined],
    ],
  );
  assert.deepEqual(r.get('n3')?.pods, []);
});

test('an allow by pod label names exactly the selected pods, in the policy namespace only; a named port is the policed pod own', () => {
  const allow = policy('shop', 'allow', {
    podSelector: { matchLabels: { app: 'web' } },
    ingress: [{ from: [{ podSelector: { matchLabels: { app: 'client' } } }], ports: [{ port: 'http' }] }],
  });
  const r = resolveNetworkPolicies(
    [allow],
    [...PODS, pod('ops', 'client', 'n3', '10.244.3.9', { app: 'client' })],
    NAMESPACES,
  );
  assert.deepEqual(r.get('n1')?.pods, [
    {
      pod: 'shop/web',
      ip: '10.244.1.2',
      ingress: [{ peers: [{ cidr: '10.244.2.2/32' }], ports: [{ protocol: 'TCP', port: 8080 }] }],
    },
  ]);
});

test('namespaceSelector (with and without a podSelector), ipBlock with except, port ranges and UDP', () => {
  const p = policy('shop', 'mixed', {
    podSelector: { matchLabels: { app: 'web' } },
    ingress: [
      {
        from: [
          { namespaceSelector: { matchLabels: { team: 'ops' } } },
          { ipBlock: { cidr: '192.168.0.0/16', except: ['192.168.9.0/24'] } },
        ],
        ports: [
          { protocol: 'TCP', port: 8000, endPort: 8100 },
          { protocol: 'UDP', port: 53 },
        ],
      },
      { from: [{ namespaceSelector: {}, podSelector: { matchLabels: { app: 'client' } } }] },
    ],
  });
  const web = resolveNetworkPolicies([p], PODS, NAMESPACES).get('n1')?.pods[0];
  assert.deepEqual(web?.ingress, [
    { peers: [{ cidr: '10.244.2.2/32' }] },
    {
      peers: [{ cidr: '10.244.3.2/32' }, { cidr: '192.168.0.0/16', except: ['192.168.9.0/24'] }],
      ports: [
        { protocol: 'TCP', port: 8000, endPort: 8100 },
        { protocol: 'UDP', port: 53 },
      ],
    },
  ]);
});

test('egress: isolated only when the policy says so; a named port is each destination pod own; a rule without peers allows any address', () => {
  const p = policy('shop', 'egress', {
    podSelector: { matchLabels: { app: 'client' } },
    policyTypes: ['Egress'],
    egress: [
      { to: [{ namespaceSelector: {} }], ports: [{ port: 'http' }] },
      { ports: [{ protocol: 'UDP', port: 53 }] },
    ],
  });
  const client = resolveNetworkPolicies([p], PODS, NAMESPACES).get('n2')?.pods[0];
  assert.equal(client?.ingress, undefined);
  assert.deepEqual(client?.egress, [
    { peers: [{ cidr: '10.244.1.2/32' }], ports: [{ protocol: 'TCP', port: 8080 }] },
    { peers: [{ cidr: '10.244.3.2/32' }], ports: [{ protocol: 'TCP', port: 9090 }] },
    { ports: [{ protocol: 'UDP', port: 53 }] },
  ]);
});

test('pods without an address, on the host network or finished neither are policed nor count as peers', () => {
  const pods = [
    pod('shop', 'web', 'n1', '10.244.1.2', { app: 'web' }),
    { ...pod('shop', 'pending', 'n2', '', { app: 'client' }), status: { phase: 'Pending' } },
    { ...pod('shop', 'host', 'n2', '192.0.2.5', { app: 'client' }), spec: { nodeName: 'n2', hostNetwork: true } },
    {
      ...pod('shop', 'done', 'n2', '10.244.2.9', { app: 'client' }),
      status: { phase: 'Succeeded', podIP: '10.244.2.9' },
    },
  ];
  const p = policy('shop', 'allow', {
    podSelector: {},
    ingress: [{ from: [{ podSelector: { matchLabels: { app: 'client' } } }] }],
  });
  const r = resolveNetworkPolicies([p], pods, NAMESPACES);
  // The only rule names no usable peer: it allows nothing, and the pod stays isolated.
  assert.deepEqual(r.get('n1')?.pods, [{ pod: 'shop/web', ip: '10.244.1.2', ingress: [] }]);
  assert.equal(r.has('n2'), false);
});

test('equal inputs in any order give the same result (the controllers compare what they publish as text)', () => {
  const pols = [
    policy('shop', 'a', { podSelector: {}, ingress: [{ from: [{ podSelector: {} }] }] }),
    policy('shop', 'b', { podSelector: {}, ingress: [{ ports: [{ port: 80 }, { port: 443 }] }] }),
  ];
  const one = JSON.stringify([...resolveNetworkPolicies(pols, PODS, NAMESPACES)]);
  const two = JSON.stringify(
    [...resolveNetworkPolicies([...pols].reverse(), [...PODS].reverse(), [...NAMESPACES].reverse())].sort(),
  );
  assert.equal(JSON.stringify(JSON.parse(one).sort()), two);
});

test("a node's share that is damaged is refused in one line naming what is wrong (the node keeps what it enforces)", () => {
  assert.deepEqual(parseNodePolicy({ policy: '{"pods":[{"pod":"a/b","ip":"10.244.1.2","ingress":[]}]}' }), {
    pods: [{ pod: 'a/b', ip: '10.244.1.2', ingress: [] }],
  });
  assert.throws(() => parseNodePolicy({}), /^Error: network policy: the ConfigMap has no policy key$/);
  assert.throws(
    () => parseNodePolicy({ policy: '{"pods": [' }),
    /^Error: network policy: the policy key is not JSON \([^\n]+\)$/,
  );
  assert.throws(() => parseNodePolicy({ policy: '{"pods": 3}' }), /policy\.pods is not a list/);
  assert.throws(
    () => parseNodePolicy({ policy: '{"pods":[{"pod":"a/b","ip":"fd00::1"}]}' }),
    /pod a\/b has no IPv4 address/,
  );
});

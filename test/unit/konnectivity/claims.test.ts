// Which identifiers an agent keeps (claims.ts): the rules alone, then a server that routes by
// them and follows Node changes without reconnecting anyone.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { dialViaProxy } from '../../../src/konnectivity/client.ts';
import { judgeClaims, judgeWithoutNodes, type TrustedAgents } from '../../../src/konnectivity/server/claims.ts';
import { ownershipProblem, unownedBy, type NodeRecord, type ReservedSpace } from '../../../src/base/ownership.ts';
import { packets, parseIdentifiers } from '../../../src/konnectivity/wire/protocol.ts';
import type { AgentIdentity } from '../../../src/konnectivity/server/auth.ts';
import { captureLogger } from '../../helpers.ts';
import { FakeNodes, makePki, rawAgent, startServer, udsOf } from './fixtures.ts';
import { waitFor } from '../../wait.ts';

const nodes = new FakeNodes([
  {
    name: 'edge-1',
    addresses: [
      { type: 'InternalIP', address: '10.0.0.1' },
      { type: 'InternalIP', address: 'fd00::0:1' },
      { type: 'Hostname', address: 'edge-1.site.example' },
    ],
  },
  { name: 'edge-2', addresses: [{ type: 'InternalIP', address: '10.0.0.2' }] },
]);
const node = (name: string): AgentIdentity => ({ method: 'certificate', user: `system:node:${name}`, node: name });
const sa: AgentIdentity = { method: 'token', user: 'system:serviceaccount:kube-system:konnectivity-agent' };
const judge = (who: AgentIdentity, query: string, trusted = false) =>
  judgeClaims(who, parseIdentifiers(query), nodes, trusted);
const droppedClaims = (v: ReturnType<typeof judge>) => v.dropped.map((d) => d.claim);

test("a node-certificate agent keeps its node's name and the names and addresses its Node reports", () => {
  const v = judge(node('edge-1'), 'host=edge-1&host=EDGE-1.site.example&ipv4=10.0.0.1&ipv6=fd00:0::1');
  assert.deepEqual(v.accepted, {
    host: ['edge-1', 'edge-1.site.example'],
    ipv4: ['10.0.0.1'],
    ipv6: ['fd00::1'],
    cidr: [],
    defaultRoute: false,
  });
  assert.deepEqual(v.dropped, []);
});

test("another Node's address or name, an address no Node reports, CIDRs and default-route are dropped, each with its reason", () => {
  const v = judge(
    node('edge-1'),
    'host=edge-2&ipv4=10.0.0.2&ipv4=10.9.9.9&ipv6=fd00::2&cidr=10.0.0.0/24&default-route=true',
  );
  assert.deepEqual(v.accepted, { host: [], ipv4: [], ipv6: [], cidr: [], defaultRoute: false });
  assert.deepEqual(v.dropped, [
    { claim: 'cidr=10.0.0.0/24', reason: 'only agents listed in spec.konnectivity.trustedAgents may claim it' },
    { claim: 'default-route=true', reason: 'only agents listed in spec.konnectivity.trustedAgents may claim it' },
    { claim: 'host=edge-2', reason: 'reported by node edge-2' },
    { claim: 'ipv4=10.0.0.2', reason: 'reported by node edge-2' },
    { claim: 'ipv4=10.9.9.9', reason: 'node edge-1 does not report it' },
    { claim: 'ipv6=fd00::2', reason: 'node edge-1 does not report it' },
  ]);
});

test('a node that is not registered keeps only its name; addresses wait for its Node', () => {
  const v = judge(node('x1'), 'host=victim&host=x1&ipv4=10.123.4.5');
  assert.deepEqual(v.accepted.host, ['x1']);
  assert.deepEqual(v.accepted.ipv4, []);
  assert.deepEqual(v.dropped, [
    { claim: 'host=victim', reason: 'node x1 is not registered' },
    { claim: 'ipv4=10.123.4.5', reason: 'node x1 is not registered' },
  ]);
});

test("a trusted agent also keeps CIDRs, default-route and other hosts' addresses, unless the owning Node's agent claims them too", () => {
  const query = 'host=gw&ipv4=10.9.9.9&ipv4=10.0.0.1&cidr=10.0.0.0/24&default-route=true';
  const alone = judge(node('gw'), query, true);
  assert.deepEqual(alone.accepted, {
    host: ['gw'],
    ipv4: ['10.9.9.9', '10.0.0.1'],
    ipv6: [],
    cidr: ['10.0.0.0/24'],
    defaultRoute: true,
  });
  assert.deepEqual(alone.dropped, []);
  const contested = judgeClaims(node('gw'), parseIdentifiers(query), nodes, true, (v) =>
    v === '10.0.0.1' ? 'edge-1' : undefined,
  );
  assert.deepEqual(contested.accepted.ipv4, ['10.9.9.9']);
  assert.deepEqual(contested.dropped, [
    { claim: 'ipv4=10.0.0.1', reason: 'agent edge-1 of node edge-1, which reports it, claims it too' },
  ]);
});

test('a service-account agent claims nothing unless trusted; trusted, it is treated like a trusted agent without a Node', () => {
  const v = judge(sa, 'host=edge-9&ipv4=10.9.9.9&cidr=10.9.0.0/16&default-route=true');
  assert.deepEqual(v.accepted, { host: [], ipv4: [], ipv6: [], cidr: [], defaultRoute: false });
  assert.equal(v.dropped.length, 4);
  assert.match(v.dropped.find((d) => d.claim === 'ipv4=10.9.9.9')!.reason, /service-account agent claims nothing/);
  const query = 'host=edge-9&ipv4=10.9.9.9&ipv4=10.0.0.2&cidr=10.9.0.0/16&default-route=true';
  const t = judge(sa, query, true);
  assert.deepEqual(t.accepted, {
    host: ['edge-9'],
    ipv4: ['10.9.9.9', '10.0.0.2'],
    ipv6: [],
    cidr: ['10.9.0.0/16'],
    defaultRoute: true,
  });
  const contested = judgeClaims(sa, parseIdentifiers(query), nodes, true, (v) =>
    v === '10.0.0.2' ? 'edge-2' : undefined,
  );
  assert.deepEqual(droppedClaims(contested), ['ipv4=10.0.0.2']);
});

test('trust is by node name for certificate agents and by user for token agents', async () => {
  const { isTrusted } = await import('../../../src/konnectivity/server/claims.ts');
  const list: TrustedAgents = { nodes: ['gw'], users: ['system:serviceaccount:kube-system:konnectivity-agent'] };
  assert.equal(isTrusted(node('gw'), list), true);
  assert.equal(isTrusted(node('edge-1'), list), false);
  assert.equal(isTrusted(sa, list), true);
  assert.equal(isTrusted({ method: 'token', user: 'system:serviceaccount:default:x' }, list), false);
  assert.equal(
    isTrusted({ method: 'token', user: 'system:serviceaccount:default:gw' }, list),
    false,
    'a token is not a node name',
  );
  assert.equal(isTrusted(node('gw'), undefined), false);
});

test('without a Node directory a certificate vouches for its node name only; addresses are taken as claimed', () => {
  const v = judgeWithoutNodes(node('edge-1'), parseIdentifiers('host=edge-1&host=edge-2&ipv4=10.9.9.9'));
  assert.deepEqual(v.accepted.host, ['edge-1']);
  assert.deepEqual(v.accepted.ipv4, ['10.9.9.9']);
  assert.deepEqual(droppedClaims(v), ['host=edge-2']);
});

test('unownedBy: the names and addresses a Node does not report, in one spelling, each with its reason', () => {
  const n = nodes.get('edge-1')!;
  assert.deepEqual(
    unownedBy('edge-1', n, ['edge-1', 'Edge-1.site.example', 'edge-2'], ['10.0.0.1', 'fd00:0:0::1', '10.0.0.2'], nodes),
    [
      { value: 'edge-2', reason: 'reported by node edge-2' },
      { value: '10.0.0.2', reason: 'reported by node edge-2' },
    ],
  );
});

// The cluster of the ownership tests: a controller at 192.0.2.2 (name ctl.example), Services in
// 10.96.0.0/12, pods in 10.244.0.0/16; n1 has pod CIDR 10.244.1.0/24.
const reserved: ReservedSpace = {
  isController: (v) => ['192.0.2.2', 'ctl.example', '2001:db8::2'].includes(v),
  serviceCIDRs: ['10.96.0.0/12', 'fd00:96::/108'],
  podCIDRs: ['10.244.0.0/16'],
};
const cluster = (...records: NodeRecord[]) => new FakeNodes(records, reserved);
const n1: NodeRecord = {
  name: 'n1',
  addresses: [
    { type: 'InternalIP', address: '10.0.0.1' },
    { type: 'InternalIP', address: 'fd00::1' },
  ],
  podCIDRs: ['10.244.1.0/24'],
};
const reporting = (name: string, ...values: string[]): NodeRecord => ({
  name,
  addresses: values.map((v) => ({ type: /^[\d.:a-f]+$/i.test(v) ? 'InternalIP' : 'Hostname', address: v })),
});

test("no node owns a controller address or name, a Service IP, another node's pod range, loopback, link-local, unspecified, multicast or an IPv4-mapped IPv6 address, whatever it reports", () => {
  const lies = [
    '192.0.2.2',
    '2001:db8::2',
    '10.96.0.1',
    '10.111.5.5',
    'fd00:96::a',
    '10.244.2.9',
    '127.0.0.1',
    '::1',
    '169.254.169.254',
    'fe80::1',
    '0.0.0.0',
    '::',
    '224.0.0.251',
    'ff02::1',
    '255.255.255.255',
    '::ffff:10.0.0.1',
  ];
  const node = {
    ...n1,
    addresses: [
      ...n1.addresses,
      ...lies.map((address) => ({ type: 'InternalIP', address })),
      { type: 'Hostname', address: 'ctl.example' },
      { type: 'Hostname', address: 'localhost' },
    ],
  };
  const dir = cluster(node);
  const verdict = Object.fromEntries(
    unownedBy(
      'n1',
      node,
      ['ctl.example', 'CTL.example', 'localhost', 'n1'],
      [...lies, '10.0.0.1', 'fd00:0::1'],
      dir,
    ).map((d) => [d.value, d.reason]),
  );
  assert.deepEqual(verdict, {
    'ctl.example': "a controller's name",
    'CTL.example': "a controller's name",
    localhost: 'a loopback name',
    '192.0.2.2': "a controller's address",
    '2001:db8::2': "a controller's address",
    '10.96.0.1': 'inside the service CIDR 10.96.0.0/12',
    '10.111.5.5': 'inside the service CIDR 10.96.0.0/12',
    'fd00:96::a': 'inside the service CIDR fd00:96::/108',
    '10.244.2.9': "inside the pod CIDR 10.244.0.0/16 but not node n1's own",
    '127.0.0.1': 'a loopback address',
    '::1': 'a loopback address',
    '169.254.169.254': 'a link-local address',
    'fe80::1': 'a link-local address',
    '0.0.0.0': 'an unspecified address',
    '::': 'an unspecified address',
    '224.0.0.251': 'a multicast address',
    'ff02::1': 'a multicast address',
    '255.255.255.255': 'the broadcast address',
    '::ffff:10.0.0.1': 'an IPv4-mapped IPv6 address',
  });
  // What stays: its name, its own addresses (any spelling) and an address inside its own pod CIDR it reports.
  assert.deepEqual(
    unownedBy(
      'n1',
      { ...n1, addresses: [...n1.addresses, { type: 'InternalIP', address: '10.244.1.7' }] },
      ['n1'],
      ['10.0.0.1', 'fd00:0::1', '10.244.1.7'],
      dir,
    ),
    [],
  );
});

test("a conflict: an address two Nodes report is nobody's for routing, in either order, and each is told who else reports it", () => {
  for (const [first, second] of [
    ['n1', 'n2'],
    ['n2', 'n1'],
  ] as const) {
    const dir = cluster(reporting(first, '10.0.0.7', 'fd00::7'), reporting(second, '10.0.0.7', 'FD00:0::7'));
    for (const value of ['10.0.0.7', 'fd00::7']) {
      for (const [who, other] of [
        [first, second],
        [second, first],
      ] as const) {
        assert.equal(
          ownershipProblem(who, dir.get(who), value, false, dir),
          `also reported by node ${other} (conflict: nobody's until an admin resolves it)`,
        );
        // In a serving certificate the shared IP is no problem: nothing is routed to it.
        assert.equal(ownershipProblem(who, dir.get(who), value, false, dir, 'each'), undefined);
      }
    }
  }
});

test('an admin names the keeper of a shared address (kctl.dev/keeps-addresses): it keeps it, the other is told who does', () => {
  const dir = cluster({ ...reporting('n1', '10.0.0.7'), keeps: ['10.0.0.7'] }, reporting('n2', '10.0.0.7'));
  assert.equal(ownershipProblem('n1', dir.get('n1'), '10.0.0.7', false, dir), undefined);
  const kept = 'kept by node n1 (kctl.dev/keeps-addresses, set by an admin)';
  assert.equal(ownershipProblem('n2', dir.get('n2'), '10.0.0.7', false, dir), kept);
  assert.equal(
    ownershipProblem('n2', dir.get('n2'), '10.0.0.7', false, dir, 'each'),
    kept,
    'and may no longer name it in a certificate',
  );
  // Two keepers are no keeper.
  const both = cluster(
    { ...reporting('n1', '10.0.0.7'), keeps: ['10.0.0.7'] },
    { ...reporting('n2', '10.0.0.7'), keeps: ['10.0.0.7'] },
  );
  assert.match(ownershipProblem('n1', both.get('n1'), '10.0.0.7', false, both) ?? '', /conflict/);
});

test("a Node's name is its own even when another Node reports it as a Hostname, which no certificate of the other may name", () => {
  const dir = cluster(reporting('n2', 'n1', '10.0.0.2'), reporting('n1', '10.0.0.1'));
  assert.equal(ownershipProblem('n1', dir.get('n1'), 'n1', true, dir), undefined);
  const conflict = "also reported by node n1 (conflict: nobody's until an admin resolves it)";
  assert.equal(ownershipProblem('n2', dir.get('n2'), 'n1', true, dir), conflict);
  assert.equal(ownershipProblem('n2', dir.get('n2'), 'n1', true, dir, 'each'), conflict);
});

test('an address that moves from one Node to another follows it: the old Node loses it, the new one gains it', () => {
  const dir = cluster(reporting('n1', '10.0.0.9'), reporting('n2', '10.0.0.2'));
  assert.equal(ownershipProblem('n2', dir.get('n2'), '10.0.0.9', false, dir), 'reported by node n1');
  dir.set('n1', '10.0.0.1');
  dir.set('n2', '10.0.0.2', '10.0.0.9');
  assert.equal(ownershipProblem('n2', dir.get('n2'), '10.0.0.9', false, dir), undefined);
  assert.equal(ownershipProblem('n1', dir.get('n1'), '10.0.0.9', false, dir), 'reported by node n2');
});

test('an ipv4 or ipv6 claim that is not an IP is dropped, and a trusted agent never gets a reserved address', () => {
  const dir = cluster(n1);
  const v = judgeClaims(node('n1'), parseIdentifiers('ipv4=example.com&ipv4=10.96.0.1&ipv6=::1'), dir, true);
  assert.deepEqual(v.accepted.ipv4, []);
  assert.deepEqual(v.accepted.ipv6, []);
  assert.deepEqual(
    v.dropped.map((d) => `${d.claim}: ${d.reason}`),
    [
      'ipv4=example.com: not an IP address',
      'ipv4=10.96.0.1: inside the service CIDR 10.96.0.0/12',
      'ipv6=::1: a loopback address',
    ],
  );
  const gw = judgeClaims(node('gw'), parseIdentifiers('ipv4=192.0.2.2&host=ctl.example&ipv4=10.9.9.9'), dir, true);
  assert.deepEqual(gw.accepted.ipv4, ['10.9.9.9']);
  assert.deepEqual(gw.accepted.host, []);
});

test('routing follows the claims: the impostor never gets a dial for the owner address; a Node address change moves new dials, not open tunnels', async (t) => {
  const pki = await makePki();
  const fake = new FakeNodes();
  fake.set('node-a', '10.0.0.1');
  const log = captureLogger();
  const server = await startServer(t, pki, { nodes: fake, dialTimeoutMs: 2_000, log: log.log });
  const owner = await rawAgent(t, pki, server, {
    agentId: 'node-a',
    creds: await pki.nodeCert('node-a'),
    identifiers: 'host=node-a&ipv4=10.0.0.1&ipv4=10.0.0.7',
  });
  const impostor = await rawAgent(t, pki, server, {
    agentId: 'x1',
    creds: await pki.nodeCert('x1'),
    identifiers: 'host=victim&ipv4=10.0.0.1',
  });
  await waitFor('two agents', 10_000, () => server.snapshot().agents.length === 2);
  const snap = server.snapshot().agents.find((a) => a.id === 'system:node:x1')!;
  assert.deepEqual(snap.claimed.ipv4, ['10.0.0.1']);
  assert.deepEqual(snap.accepted.ipv4, []);
  assert.deepEqual(
    snap.dropped.map((d) => `${d.claim}: ${d.reason}`),
    ['host=victim: node x1 is not registered', 'ipv4=10.0.0.1: reported by node node-a'],
  );
  const warn = log.lines().find((l) => l.agent === 'system:node:x1' && l.level === 40);
  assert.match(
    String(warn?.msg),
    /agent system:node:x1: dropped claims host=victim .*ipv4=10\.0\.0\.1 \(reported by node node-a\)/,
  );
  const ownerSnap = server.snapshot().agents.find((a) => a.id === 'system:node:node-a')!;
  assert.deepEqual(ownerSnap.accepted.ipv4, ['10.0.0.1'], "10.0.0.7 is not node-a's (yet)");

  const uds = udsOf(server).grpc;
  for (let i = 0; i < 20; i++) {
    const d = dialViaProxy({ udsPath: uds, address: '10.0.0.1:10250' }).catch(() => {});
    const req = await owner.next('DIAL_REQ');
    owner.send(packets.dialRsp(req.dialRequest!.random!, '0', 'refused by test'));
    await d;
  }
  await assert.rejects(impostor.next('DIAL_REQ', 100), /no DIAL_REQ/, 'the impostor got a dial for the owner address');

  // An open tunnel to 10.0.0.1 stays when the address moves to 10.0.0.7.
  const open = dialViaProxy({ udsPath: uds, address: '10.0.0.1:10250' });
  const req = await owner.next('DIAL_REQ');
  owner.send(packets.dialRsp(req.dialRequest!.random!, '1'));
  const tunnel = await open;
  fake.set('node-a', '10.0.0.7');
  await waitFor(
    'claims follow',
    10_000,
    () =>
      server
        .snapshot()
        .agents.find((a) => a.id === 'system:node:node-a')!
        .accepted.ipv4.join() === '10.0.0.7',
  );
  tunnel.write('still here');
  assert.equal(Buffer.from((await owner.next('DATA')).data!.data!).toString(), 'still here');
  assert.equal(server.snapshot().establishedConnections, 1);
  // 10.0.0.1 is nobody's now: the impostor may claim it only if trusted, so new dials fall through to `default`.
  assert.deepEqual(
    server
      .snapshot()
      .agents.find((a) => a.id === 'system:node:x1')!
      .dropped.find((d) => d.claim === 'ipv4=10.0.0.1')?.reason,
    'node x1 is not registered',
  );
  tunnel.destroy();
});

test("a trusted agent serves a Node's address only while that Node's own agent is not there to claim it", async (t) => {
  const pki = await makePki();
  const fake = new FakeNodes();
  fake.set('node-a', '10.0.0.1');
  const user = 'system:serviceaccount:kube-system:konnectivity-agent';
  const server = await startServer(t, pki, {
    nodes: fake,
    trustedAgents: { nodes: [], users: [user] },
    tokenReview: async (token) => ({ ok: token === 'sa', user }),
  });
  await rawAgent(t, pki, server, {
    agentId: 'daemonset-pod',
    creds: null,
    token: 'sa',
    identifiers: 'ipv4=10.0.0.1&cidr=10.0.0.0/8',
  });
  const pod = () => server.snapshot().agents.find((a) => a.id.endsWith('/daemonset-pod'));
  await waitFor('trusted agent holds 10.0.0.1', 10_000, () => pod()?.accepted.ipv4.join() === '10.0.0.1');
  assert.deepEqual(pod()!.accepted.cidr, ['10.0.0.0/8']);
  const owner = await rawAgent(t, pki, server, {
    agentId: 'node-a',
    creds: await pki.nodeCert('node-a'),
    identifiers: 'ipv4=10.0.0.1',
  });
  await waitFor('the owner wins', 10_000, () => pod()?.accepted.ipv4.length === 0);
  assert.deepEqual(pod()!.dropped, [
    { claim: 'ipv4=10.0.0.1', reason: 'agent system:node:node-a of node node-a, which reports it, claims it too' },
  ]);
  owner.close();
  await waitFor('back to the trusted agent', 10_000, () => pod()?.accepted.ipv4.join() === '10.0.0.1');
});

test("a node agent serves its Node's pod CIDRs without claiming them: dials to a pod go to the node that runs it", async (t) => {
  const withPods = new FakeNodes([
    { name: 'node-a', addresses: [{ type: 'InternalIP', address: '10.0.0.1' }], podCIDRs: ['10.244.1.0/24'] },
    { name: 'node-b', addresses: [{ type: 'InternalIP', address: '10.0.0.2' }], podCIDRs: ['10.244.2.0/24'] },
  ]);
  const v = judgeClaims(node('node-a'), parseIdentifiers('host=node-a&ipv4=10.0.0.1'), withPods, false);
  assert.deepEqual(v.accepted.cidr, ['10.244.1.0/24']);
  assert.deepEqual(v.dropped, []);

  const pki = await makePki();
  const server = await startServer(t, pki, { nodes: withPods, dialTimeoutMs: 2_000 });
  const a = await rawAgent(t, pki, server, {
    agentId: 'node-a',
    creds: await pki.nodeCert('node-a'),
    identifiers: 'host=node-a&ipv4=10.0.0.1',
  });
  const b = await rawAgent(t, pki, server, {
    agentId: 'node-b',
    creds: await pki.nodeCert('node-b'),
    identifiers: 'host=node-b&ipv4=10.0.0.2',
  });
  await waitFor('two agents', 10_000, () => server.snapshot().agents.length === 2);
  const uds = udsOf(server).grpc;
  for (const [pod, owner, other] of [
    ['10.244.1.7:8443', a, b],
    ['10.244.2.9:443', b, a],
  ] as const) {
    for (let i = 0; i < 10; i++) {
      const d = dialViaProxy({ udsPath: uds, address: pod }).catch(() => {});
      const req = await owner.next('DIAL_REQ');
      assert.equal(req.dialRequest!.address, pod);
      owner.send(packets.dialRsp(req.dialRequest!.random!, '0', 'refused by test'));
      await d;
    }
    await assert.rejects(other.next('DIAL_REQ', 100), /no DIAL_REQ/, `a dial to ${pod} went to the other node`);
  }
});

test('among CIDR matches the longest prefix wins: a pod dial goes to its node, not to a trusted gateway claiming the whole pod network', async (t) => {
  const withPods = new FakeNodes([
    { name: 'node-a', addresses: [{ type: 'InternalIP', address: '10.0.0.1' }], podCIDRs: ['10.244.1.0/24'] },
  ]);
  const pki = await makePki();
  const server = await startServer(t, pki, {
    nodes: withPods,
    dialTimeoutMs: 2_000,
    trustedAgents: { nodes: ['gw'], users: [] },
  });
  const a = await rawAgent(t, pki, server, {
    agentId: 'node-a',
    creds: await pki.nodeCert('node-a'),
    identifiers: 'host=node-a&ipv4=10.0.0.1',
  });
  const gw = await rawAgent(t, pki, server, {
    agentId: 'gw',
    creds: await pki.nodeCert('gw'),
    identifiers: 'host=gw&cidr=10.244.0.0/16',
  });
  await waitFor('two agents', 10_000, () => server.snapshot().agents.length === 2);
  const uds = udsOf(server).grpc;
  const routed = async (address: string, to: typeof a, not: typeof a) => {
    for (let i = 0; i < 10; i++) {
      const d = dialViaProxy({ udsPath: uds, address }).catch(() => {});
      const req = await to.next('DIAL_REQ');
      to.send(packets.dialRsp(req.dialRequest!.random!, '0', 'refused by test'));
      await d;
    }
    await assert.rejects(not.next('DIAL_REQ', 100), /no DIAL_REQ/, `a dial to ${address} went to the wrong agent`);
  };
  await routed('10.244.1.5:443', a, gw); // node-a's pod: the /24 beats the /16
  await routed('10.244.7.5:443', gw, a); // no node's pod CIDR: the gateway's /16
});

test("an agent is its certificate: another node's agentid is a label and never shadows that node's stream, connected first or not", async (t) => {
  const pki = await makePki();
  const fake = new FakeNodes();
  fake.set('node-a', '10.0.0.1');
  fake.set('x1', '10.0.0.9');
  const server = await startServer(t, pki, { nodes: fake, dialTimeoutMs: 2_000 });
  // The impostor connects first, calling itself node-a, with x1's certificate.
  const impostor = await rawAgent(t, pki, server, {
    agentId: 'node-a',
    creds: await pki.nodeCert('x1'),
    identifiers: 'host=node-a&ipv4=10.0.0.1',
  });
  await waitFor('impostor connected', 10_000, () => server.snapshot().agents.length === 1);
  const owner = await rawAgent(t, pki, server, {
    agentId: 'node-a',
    creds: await pki.nodeCert('node-a'),
    identifiers: 'host=node-a&ipv4=10.0.0.1',
  });
  await waitFor('owner connected', 10_000, () => server.snapshot().agents.length === 2);
  const snap = server.snapshot().agents;
  const imp = snap.find((a) => a.node === 'x1')!;
  assert.equal(imp.id, 'system:node:x1');
  assert.equal(imp.agentIdClaimed, 'node-a');
  assert.deepEqual(imp.accepted.host, []);
  const own = snap.find((a) => a.node === 'node-a')!;
  assert.equal(own.id, 'system:node:node-a');
  assert.equal(own.agentIdClaimed, undefined, 'an agentid that is its node name is no label');
  assert.deepEqual(server.agentIds().sort(), ['system:node:node-a', 'system:node:x1']);
  // Dials to node-a go to node-a's stream, never to the one that said it was node-a first.
  for (let i = 0; i < 5; i++) {
    const dial = dialViaProxy({ udsPath: udsOf(server).grpc, address: 'node-a:10250' }).catch(() => undefined);
    const req = await owner.next('DIAL_REQ');
    owner.send(packets.dialRsp(req.dialRequest!.random, String(i + 1)));
    (await dial)?.destroy();
  }
  await assert.rejects(impostor.next('DIAL_REQ', 200), /no DIAL_REQ/);
});

test('broker ids come from authentication: a node certificate, a token user with its agentid, or (upstream style) the agentid as sent', async () => {
  const { brokerId, strayAgentId } = await import('../../../src/konnectivity/server/auth.ts');
  assert.equal(brokerId(node('edge-1'), 'anything', false), 'system:node:edge-1');
  assert.equal(brokerId(sa, 'pod-7', false), `${sa.user}/pod-7`);
  assert.equal(
    brokerId(sa, 'system:node:edge-1', false),
    `${sa.user}/system:node:edge-1`,
    'a token agent never gets a node key',
  );
  assert.equal(brokerId(node('edge-1'), 'edge-2', true), 'edge-2');
  assert.equal(strayAgentId(node('edge-1'), 'edge-1'), undefined);
  assert.equal(strayAgentId(node('edge-1'), 'system:node:edge-1'), undefined);
  assert.equal(strayAgentId(node('edge-1'), 'edge-2'), 'edge-2');
});

test("a range a Node wrote for itself serves nothing: dials to the victim's pods stay the victim's, and a dial no honest node may serve fails", async (t) => {
  const shaped = { ...reserved, podRangeBits: 24 };
  const victim: NodeRecord = {
    name: 'node-a',
    addresses: [{ type: 'InternalIP', address: '10.0.0.1' }],
    podCIDRs: ['10.244.1.0/24'],
  };
  const liar = (podCIDRs: string[]): NodeRecord => ({
    name: 'evil',
    addresses: [{ type: 'InternalIP', address: '10.0.0.66' }],
    podCIDRs,
  });
  for (const lie of [['10.244.1.0/25'], ['10.244.1.5/32'], ['0.0.0.0/0']]) {
    const v = judgeClaims(
      node('evil'),
      parseIdentifiers('host=evil&ipv4=10.0.0.66'),
      new FakeNodes([victim, liar(lie)], shaped),
      false,
    );
    assert.deepEqual(v.accepted.cidr, [], `${lie.join()} was served`);
  }
  const fake = new FakeNodes([victim, liar(['10.244.1.0/25', '0.0.0.0/0'])], shaped);
  const pki = await makePki();
  // The strategy `kctl controller` runs: destHost alone, so a dial nobody may serve fails.
  const server = await startServer(t, pki, { nodes: fake, dialTimeoutMs: 2_000, proxyStrategies: ['destHost'] });
  const a = await rawAgent(t, pki, server, {
    agentId: 'node-a',
    creds: await pki.nodeCert('node-a'),
    identifiers: 'host=node-a&ipv4=10.0.0.1',
  });
  const evil = await rawAgent(t, pki, server, {
    agentId: 'evil',
    creds: await pki.nodeCert('evil'),
    identifiers: 'host=evil&ipv4=10.0.0.66',
  });
  await waitFor('two agents', 10_000, () => server.snapshot().agents.length === 2);
  const uds = udsOf(server).grpc;
  for (let i = 0; i < 10; i++) {
    const d = dialViaProxy({ udsPath: uds, address: '10.244.1.5:443' }).catch(() => {});
    const req = await a.next('DIAL_REQ');
    a.send(packets.dialRsp(req.dialRequest!.random!, '0', 'refused by test'));
    await d;
  }
  await assert.rejects(dialViaProxy({ udsPath: uds, address: '10.9.9.9:443' }), /no agent may serve 10\.9\.9\.9/);
  await assert.rejects(
    evil.next('DIAL_REQ', 100),
    /no DIAL_REQ/,
    'a dial went to the node with the self-declared ranges',
  );
});

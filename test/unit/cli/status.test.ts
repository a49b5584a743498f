import assert from 'node:assert/strict';
import { test } from 'node:test';
import { renderStatus } from '../../../src/cli/status.ts';
import type { ControllerStatusReport } from '../../../src/controller/leases/status.ts';

const none = { host: [], ipv4: [], ipv6: [], cidr: [], defaultRoute: false };
/** What every controller report carries besides the part a test is about. */
const controller: Omit<ControllerStatusReport, 'konnectivity' | 'controllers' | 'agentServers' | 'storage'> = {
  role: 'controller',
  version: 'test',
  pid: 1,
  uptimeSeconds: 5,
  components: [],
};

test('kctl status shows, per agent, what it claimed, what routing uses, and why the rest was dropped', () => {
  const report: ControllerStatusReport = {
    ...controller,
    konnectivity: {
      serverId: 's1',
      serverCount: 1,
      pendingDials: 0,
      establishedConnections: 0,
      closingConnections: 0,
      agents: [
        {
          id: 'x1',
          node: 'x1',
          user: 'system:node:x1',
          auth: 'certificate',
          claimed: { ...none, host: ['victim'], ipv4: ['10.123.4.5'], ipv6: ['fd00::5'] },
          accepted: none,
          dropped: [
            { claim: 'host=victim', reason: 'node x1 is not registered' },
            { claim: 'ipv4=10.123.4.5', reason: 'reported by node edge-1' },
          ],
          draining: false,
          extensions: [],
          connections: 0,
          pendingDials: 0,
          connectedAt: new Date(0).toISOString(),
        },
      ],
    },
  };
  const text = renderStatus(report);
  assert.match(text, /^ {4}claimed: {2}host=victim&ipv4=10\.123\.4\.5&ipv6=fd00::5$/m);
  assert.match(text, /^ {4}accepted: \(nothing: only dials any agent may take\)$/m);
  assert.match(text, /^ {4}dropped: {2}ipv4=10\.123\.4\.5 \(reported by node edge-1\)$/m);
});

test("a controller's status shows the live controllers, the servers of every agent, and the etcd members", () => {
  const ctl = (n: string, agents: string[]) => ({
    name: `kctl-controller-${n}`,
    apiServer: `https://${n}:6443`,
    konnectivity: `${n}:8132`,
    agents,
  });
  const report: ControllerStatusReport = {
    ...controller,
    controllers: [ctl('a', ['w1', 'w2']), ctl('b', ['w1'])],
    agentServers: [
      { agent: 'w1', servers: ['kctl-controller-a', 'kctl-controller-b'] },
      { agent: 'w2', servers: ['kctl-controller-a'] },
    ],
    storage: {
      type: 'etcd',
      members: [
        { id: '11', name: 'c1', peerURLs: ['https://a:2380'], clientURLs: [], isLearner: false },
        { id: '12', name: '', peerURLs: ['https://b:2380'], clientURLs: [], isLearner: true },
      ],
    },
  };
  const text = renderStatus(report);
  assert.match(text, /^ {2}kctl-controller-a {2}api=https:\/\/a:6443 {2}konnectivity=a:8132 {2}agents=2$/m);
  assert.match(text, /^ {2}w1 {2}2\/2 {2}kctl-controller-a, kctl-controller-b$/m);
  assert.match(text, /^ {2}w2 {2}1\/2 {2}kctl-controller-a$/m);
  assert.match(text, /^Storage: etcd, 2 member\(s\)$/m);
  assert.match(text, /^ {2}\(not started\) {2}12 {2}https:\/\/b:2380 {2}learner$/m);
  const kine = renderStatus({ ...report, storage: { type: 'kine', datastore: 'postgres://db:5432/kine' } });
  assert.match(kine, /^Storage: kine on postgres:\/\/db:5432\/kine$/m);
});

test("a controller's status names each address conflict, nobody's or kept by an admin's choice, and an agent's own id beside the one it sent", () => {
  const report: ControllerStatusReport = {
    ...controller,
    addressConflicts: [
      { value: '10.0.0.5', nodes: ['n1', 'n2'] },
      { value: '10.0.0.6', nodes: ['n1', 'n3'], keeper: 'n3' },
    ],
    konnectivity: {
      serverId: 's',
      serverCount: 1,
      pendingDials: 0,
      establishedConnections: 0,
      closingConnections: 0,
      agents: [
        {
          id: 'system:node:n2',
          agentIdClaimed: 'n1',
          node: 'n2',
          user: 'system:node:n2',
          auth: 'certificate',
          claimed: { host: ['n1'], ipv4: [], ipv6: [], cidr: [], defaultRoute: false },
          accepted: { host: [], ipv4: [], ipv6: [], cidr: [], defaultRoute: false },
          dropped: [{ claim: 'host=n1', reason: 'reported by node n1' }],
          draining: false,
          extensions: [],
          connections: 0,
          pendingDials: 0,
          connectedAt: '2026-01-01T00:00:00.000Z',
        },
      ],
    },
  };
  const text = renderStatus(report);
  assert.match(text, /^ {2}10\.0\.0\.5 {2}reported by n1, n2 {2}nobody's$/m);
  assert.match(text, /^ {2}10\.0\.0\.6 {2}reported by n1, n3 {2}kept by n3 \(kctl\.dev\/keeps-addresses\)$/m);
  assert.match(text, /^ {2}system:node:n2 {2}node=n2 {2}auth=certificate {2}agentid=n1 {2}connections=0$/m);
  assert.match(text, /^ {4}dropped: {2}host=n1 \(reported by node n1\)$/m);
});

test('kctl status shows scheduled backups: the last result with its reason, the next, the lease holder', () => {
  const backup = {
    schedule: '6h',
    retention: 3,
    path: '/var/backups',
    encrypted: true,
    leaseHolder: 'kctl-controller-10-0-0-1',
  };
  const ok = renderStatus({
    ...controller,
    backup: {
      ...backup,
      last: {
        at: '2026-11-26T03:00:00.000Z',
        controller: 'kctl-controller-10-0-0-1',
        result: 'ok',
        file: '/var/backups/kctl-backup-x.tar.gz.enc',
      },
      nextDue: '2026-11-26T09:00:00.000Z',
    },
  });
  assert.match(
    ok,
    /Backups: every 6h, keep 3, encrypted, in \/var\/backups\n {2}lease holder: kctl-controller-10-0-0-1\n/,
  );
  assert.match(
    ok,
    / {2}last: +2026-11-26T03:00:00.000Z {2}ok {2}\/var\/backups\/kctl-backup-x\.tar\.gz\.enc {2}\(by kctl-controller-10-0-0-1\)\n/,
  );
  assert.match(ok, / {2}next due: +2026-11-26T09:00:00.000Z\n/);
  const failed = renderStatus({
    ...controller,
    backup: {
      ...backup,
      encrypted: false,
      leaseHolder: 'kctl-controller-10-0-0-2',
      last: {
        at: '2026-11-26T03:00:00.000Z',
        controller: 'kctl-controller-10-0-0-2',
        result: 'failed',
        reason: 'no space left on device',
      },
    },
  });
  assert.match(failed, /NOT encrypted \(CA keys in the clear\)/);
  assert.match(
    failed,
    /last: +2026-11-26T03:00:00.000Z {2}failed: no space left on device {2}\(by kctl-controller-10-0-0-2\)\n/,
  );
  assert.match(failed, /next due: +\(known to the lease holder\)/);
  assert.doesNotMatch(renderStatus({ ...controller }), /Backups:/);
});

test('kctl status lists every certificate with its expiry, next renewal and renewals; a CA near expiry and an unreadable file get their own line', () => {
  const text = renderStatus({
    ...controller,
    certificates: [
      {
        name: 'ca.crt',
        kind: 'ca',
        file: '/d/pki/ca.crt',
        subject: 'kubernetes-ca',
        notAfter: '2027-01-01T00:00:00.000Z',
        renewals: 0,
        warning: 'CA expires 2027-01-01T00:00:00.000Z, within a year: plan a CA rotation',
      },
      {
        name: 'server.crt',
        kind: 'leaf',
        file: '/d/pki/server.crt',
        subject: 'kube-apiserver',
        notAfter: '2026-11-26T04:10:00.000Z',
        renewAt: '2026-11-26T04:05:00.000Z',
        renewals: 3,
      },
      {
        name: 'kubelet-client',
        kind: 'leaf',
        file: '/k/pem',
        subject: 'system:node:w1',
        notAfter: '2026-11-26T04:10:00.000Z',
        renewedBy: 'kubelet',
        renewals: 2,
      },
      {
        name: 'admin.conf',
        kind: 'kubeconfig',
        file: '/d/pki/admin.conf',
        renewals: 0,
        error: 'no certificate in /d/pki/admin.conf',
      },
    ],
  });
  assert.match(text, /^NAME +KIND +SUBJECT +EXPIRES +NEXT RENEWAL +RENEWALS$/m);
  assert.match(text, /^ca\.crt +ca +kubernetes-ca +2027-01-01 00:00:00Z +rotated by the operator +0$/m);
  assert.match(text, /^server\.crt +leaf +kube-apiserver +2026-11-26 04:10:00Z +2026-11-26 04:05:00Z +3$/m);
  assert.match(text, /^kubelet-client +leaf +system:node:w1 +2026-11-26 04:10:00Z +by kubelet +2$/m);
  assert.match(text, /^WARNING: ca\.crt: CA expires 2027-01-01T00:00:00\.000Z, within a year: plan a CA rotation$/m);
  assert.match(text, /^ERROR: admin\.conf: no certificate in \/d\/pki\/admin\.conf$/m);
});

test("a worker's status shows the servers its agent holds and each API upstream's health, and says so when it holds none", () => {
  const worker = { role: 'worker' as const, version: 'test', pid: 1, uptimeSeconds: 5, components: [] };
  const server = {
    serverId: 'c1',
    serverCount: 2,
    extensions: [],
    transport: 'kctl-tunnel/1' as const,
    connections: 3,
    pendingDials: 0,
  };
  const out = renderStatus({
    ...worker,
    konnectivityAgent: { agentId: 'w1', knownServerCount: 2, servers: [{ ...server, address: '10.0.0.1:8132' }] },
    apiBalancer: {
      listen: '127.0.0.1:7443',
      upstreams: [
        { address: '10.0.0.1:6443', healthy: true, connections: 4 },
        {
          address: '10.0.0.2:6443',
          healthy: false,
          connections: 0,
          lastError: 'https://10.0.0.2:6443: no answer within 4 s',
        },
      ],
    },
  });
  assert.match(
    out,
    /Konnectivity agent w1: streams to 1 of 2 server\(s\)\n {2}10\.0\.0\.1:8132 {2}server=c1 {2}transport=kctl-tunnel\/1 {2}connections=3 {2}pending=0/,
  );
  assert.match(
    out,
    /10\.0\.0\.2:6443 {2}unhealthy {2}connections=0 {2}https:\/\/10\.0\.0\.2:6443: no answer within 4 s/,
  );
  const alone = renderStatus({ ...worker, konnectivityAgent: { agentId: 'w1', knownServerCount: 1, servers: [] } });
  assert.match(alone, /no server connected: logs, exec and port-forward to this node fail until one is/);
});

test('kctl status shows the front door: this cluster names, connections per cluster routed here, refusals by kind and name', () => {
  const text = renderStatus({
    ...controller,
    frontDoor: {
      port: 443,
      names: { api: 'alpha.c.test', konnectivity: 'konnectivity.alpha.c.test', join: 'join.alpha.c.test' },
      door: {
        port: 443,
        clusters: { alpha: { open: 2, total: 9 }, beta: { open: 0, total: 1 } },
        refused: { total: 4, notTls: 1, noName: 1, names: { 'gamma.c.test': 2 } },
      },
    },
  });
  assert.match(
    text,
    /^Front door on port 443: api=alpha\.c\.test {2}konnectivity=konnectivity\.alpha\.c\.test {2}join=join\.alpha\.c\.test$/m,
  );
  assert.match(text, /^ {2}alpha +2 +9$/m);
  assert.match(text, /^ {2}beta +0 +1$/m);
  assert.match(text, /^ {2}refused: 4 \(not TLS 1, no name 1, unknown names: gamma\.c\.test \(2\)\)$/m);
  const idle = renderStatus({
    ...controller,
    frontDoor: {
      port: 8443,
      names: { api: 'alpha.c.test' },
      door: { port: 8443, clusters: {}, refused: { total: 0, notTls: 0, noName: 0, names: {} } },
    },
  });
  assert.match(idle, /^ {2}no connections routed by this process yet$/m);
  // Which nodes still come to the agent port directly, and where each agent comes from.
  const agent = (node: string, via: 'direct' | 'front-door', client: string) => ({
    id: node,
    node,
    user: `system:node:${node}`,
    auth: 'certificate' as const,
    via,
    client,
    claimed: none,
    accepted: none,
    dropped: [],
    draining: false,
    extensions: [],
    connections: 0,
    pendingDials: 0,
    connectedAt: new Date(0).toISOString(),
  });
  const mixed = renderStatus({
    ...controller,
    frontDoor: {
      port: 443,
      names: { api: 'alpha.c.test' },
      door: { port: 443, clusters: {}, refused: { total: 0, notTls: 0, noName: 0, names: {} } },
    },
    konnectivity: {
      serverId: 's1',
      serverCount: 1,
      pendingDials: 0,
      establishedConnections: 0,
      closingConnections: 0,
      agents: [agent('w1', 'front-door', '10.0.0.7'), agent('w2', 'direct', '10.0.0.8')],
    },
  });
  assert.match(mixed, /^ {2}on the direct agent port, not the front door: w2$/m);
  assert.match(mixed, /^ {2}w1 .* from=10\.0\.0\.7 \(front door\) /m);
  assert.match(mixed, /^ {2}w2 .* from=10\.0\.0\.8 {2}connections=0$/m);
  assert.match(idle, /^ {2}refused: 0 \(not TLS 0, no name 0\)$/m);
  // Behind another program's door (a management cluster's): where nodes reach it, its handoff ports.
  const behind = renderStatus({
    ...controller,
    frontDoor: {
      port: 30443,
      names: { api: 'f1.c.test', nodeApi: 'node-api.f1.c.test' },
      external: {
        address: '192.0.2.10:30443',
        handoffs: [
          { endpoint: 'konnectivity', port: 8141, refused: 1 },
          { endpoint: 'nodeApi', port: 8143, refused: 2 },
        ],
      },
    },
  });
  assert.match(
    behind,
    /^Behind the front door at 192\.0\.2\.10:30443: api=f1\.c\.test {2}node-api=node-api\.f1\.c\.test$/m,
  );
  assert.match(behind, /^ {2}handoff ports: konnectivity 8141, node-api 8143; closed without the door's key: 3$/m);
});

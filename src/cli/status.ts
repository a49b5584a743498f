import type { Command } from 'commander';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { readStatus } from '../base/status-server.ts';
import type { ControllerStatusReport } from '../controller/leases/status.ts';
import type { WorkerStatusReport } from '../worker/index.ts';
import { RELAY_LABEL } from '../worker/wireguard.ts';
import type { CertificateStatus } from '../pki/index.ts';
import { UserError } from '../base/errors.ts';
import { KEEPS_ADDRESSES_ANNOTATION } from '../base/ownership.ts';
import { formatIdentifiers } from '../konnectivity/index.ts';
import { globals } from './support/globals.ts';
import { outputOption, printJson, renderTable, type OutputFormat } from './support/output.ts';

function formatDuration(s: number | undefined): string {
  if (s === undefined) return '-';
  if (s < 120) return `${s}s`;
  if (s < 7200) return `${Math.floor(s / 60)}m`;
  return `${Math.floor(s / 3600)}h`;
}

/** The agentidentifiers query as an operator would type it (IPv6 colons not escaped). */
const showIdentifiers = (ids: Parameters<typeof formatIdentifiers>[0]): string =>
  decodeURIComponent(formatIdentifiers(ids));

export type AnyStatusReport = ControllerStatusReport | WorkerStatusReport;

export function renderStatus(r: AnyStatusReport): string {
  const rows = r.components.map((c) => [
    c.name,
    c.state,
    c.pid ? String(c.pid) : '-',
    String(c.restarts),
    formatDuration(c.uptimeSeconds),
    c.lastError ?? '',
  ]);
  const out = [
    `Role:    ${r.role}`,
    `Version: ${r.version}`,
    `PID:     ${r.pid}`,
    `Uptime:  ${formatDuration(r.uptimeSeconds)}`,
    '',
    ...renderTable(['COMPONENT', 'STATE', 'PID', 'RESTARTS', 'UPTIME', 'LAST ERROR'], rows),
  ];
  const k = r.role === 'controller' ? r.konnectivity : undefined;
  if (k) {
    out.push(
      '',
      `Konnectivity server ${k.serverId} (servercount ${k.serverCount}): ${k.agents.length} agent(s), ${k.establishedConnections} open tunnel(s), ${k.pendingDials} pending dial(s)`,
    );
    if (k.agents.length === 0)
      out.push('  no agents connected: kube-apiserver answers "No agent available" for logs, exec and port-forward');
    // With a front door, the nodes that still come to the agent port (older kctl, or not moved yet).
    const direct = r.role === 'controller' && r.frontDoor ? k.agents.filter((a) => a.via === 'direct') : [];
    if (direct.length)
      out.push(`  on the direct agent port, not the front door: ${direct.map((a) => a.node ?? a.id).join(', ')}`);
    for (const a of k.agents) {
      const label = a.agentIdClaimed === undefined ? '' : `  agentid=${a.agentIdClaimed}`;
      const from = a.client ? `  from=${a.client}${a.via === 'front-door' ? ' (front door)' : ''}` : '';
      out.push(
        `  ${a.id}  node=${a.node ?? '-'}  auth=${a.auth}${label}${from}${a.draining ? '  draining' : ''}  connections=${a.connections}`,
      );
      // What the agent asked to route and what it got: "why did this dial go there" in one place.
      out.push(`    claimed:  ${showIdentifiers(a.claimed) || '(nothing)'}`);
      out.push(`    accepted: ${showIdentifiers(a.accepted) || '(nothing: only dials any agent may take)'}`);
      for (const d of a.dropped) out.push(`    dropped:  ${d.claim} (${d.reason})`);
    }
  }
  if (r.role === 'controller') out.push(...renderCluster(r));
  out.push(...renderCertificates(r.certificates ?? []));
  const agent = r.role === 'worker' ? r.konnectivityAgent : undefined;
  if (agent) {
    out.push(
      '',
      `Konnectivity agent ${agent.agentId}: streams to ${agent.servers.length} of ${agent.knownServerCount} server(s)`,
    );
    if (agent.servers.length === 0)
      out.push('  no server connected: logs, exec and port-forward to this node fail until one is');
    for (const s of agent.servers)
      out.push(
        `  ${s.address}  server=${s.serverId}  transport=${s.transport}  connections=${s.connections}  pending=${s.pendingDials}`,
      );
  }
  const net = r.role === 'worker' ? r.podNetwork : undefined;
  if (net?.mode) {
    out.push(
      '',
      `Pod network: mode ${net.mode}${net.mtu ? `, pod MTU ${net.mtu}` : ''}, ${net.peers.length} peer(s)${net.relay ? (net.relay.approved ? ', relays for others' : `, offers to relay (not used until approved: kubectl label node NODE ${RELAY_LABEL}=true)`) : ''}`,
    );
    const bytes = (n?: number) => (n === undefined ? '-' : String(n));
    for (const p of net.peers)
      out.push(
        net.mode === 'wireguard'
          ? `  ${p.node}  ${p.endpoint ?? 'no endpoint yet'}  handshake=${p.lastHandshakeSecondsAgo === undefined ? 'none' : `${p.lastHandshakeSecondsAgo}s ago`}  rx=${bytes(p.rxBytes)}  tx=${bytes(p.txBytes)}${p.via ? `  via=${p.via} (not heard from directly)` : ''}`
          : `  ${p.node}  ${p.address ?? '-'}`,
      );
    for (const x of net.refusedRanges ?? []) out.push(`  not routed: ${x.range} of ${x.node}  ${x.reason}`);
    for (const x of net.refusedPeers ?? []) out.push(`  not believed: ${x.what} of ${x.node}  ${x.reason}`);
  }
  const policy = r.role === 'worker' ? r.networkPolicy : undefined;
  if (policy)
    out.push(
      `NetworkPolicy: ${policy.enforced ? `enforced, ${policy.isolatedPods} pod(s) isolated` : 'none published for this node'}${policy.lastError ? ` (${policy.lastError})` : ''}`,
    );
  const profile = r.role === 'worker' ? r.kubeletProfile : undefined;
  if (profile)
    out.push(
      `Worker profile: ${profile.defined ? `${profile.name}, kubelet fields ${profile.fields.join(', ') || '(none)'}` : `none (kctl's kubelet settings; the cluster defines no ${profile.name})`}${profile.problem ? ` (${profile.problem})` : ''}`,
    );
  const lb = r.role === 'worker' ? r.apiBalancer : undefined;
  if (lb) {
    out.push('', `API balancer ${lb.listen} (kubelet, kube-proxy and kctl reach the API here):`);
    if (lb.podsListen) out.push(`  and ${lb.podsListen} (pods, as the kubernetes Service's endpoint)`);
    for (const u of lb.upstreams)
      out.push(
        `  ${u.address}  ${u.healthy ? 'healthy' : 'unhealthy'}  connections=${u.connections}${u.lastError ? `  ${u.lastError}` : ''}`,
      );
  }
  return out.join('\n') + '\n';
}

/** Every certificate of this host: when it expires, when it is renewed and how often it was since kctl started. */
export function renderCertificates(certs: CertificateStatus[]): string[] {
  if (certs.length === 0) return [];
  const day = (iso?: string) => (iso ? iso.replace('T', ' ').replace(/\.\d+Z$/, 'Z') : '-');
  const rows = certs.map((c) => [
    c.name,
    c.kind,
    c.subject ?? '-',
    day(c.notAfter),
    c.kind === 'ca' ? 'rotated by the operator' : c.renewedBy ? `by ${c.renewedBy}` : day(c.renewAt),
    String(c.renewals),
  ]);
  const out = [
    '',
    'Certificates:',
    ...renderTable(['NAME', 'KIND', 'SUBJECT', 'EXPIRES', 'NEXT RENEWAL', 'RENEWALS'], rows),
  ];
  for (const c of certs) {
    if (c.warning) out.push(`WARNING: ${c.name}: ${c.warning}`);
    if (c.error) out.push(`ERROR: ${c.name}: ${c.error}`);
  }
  return out;
}

/** The controller's view of the whole control plane: live controllers, each agent's servers, the storage. */
function renderCluster(r: ControllerStatusReport): string[] {
  const out: string[] = [];
  if (r.nodes) out.push('', `Nodes: ${r.nodes.ready}/${r.nodes.total} Ready`);
  const live = r.controllers ?? [];
  if (live.length) {
    out.push('', `Controllers (live leases): ${live.length}`);
    for (const c of live)
      out.push(
        `  ${c.name}  api=${c.apiServer}  konnectivity=${c.konnectivity}  agents=${c.agentsTotal ?? c.agents.length}`,
      );
  }
  if (r.agentServers?.length) {
    out.push('', 'Agents and the controllers they hold a stream to (from the leases):');
    for (const a of r.agentServers)
      out.push(`  ${a.agent}  ${a.servers.length}/${live.length}  ${a.servers.join(', ')}`);
  }
  if (r.addressConflicts?.length) {
    out.push('', `Address conflicts (more than one Node reports it: nobody's until an admin resolves it):`);
    for (const c of r.addressConflicts)
      out.push(
        `  ${c.value}  reported by ${c.nodes.join(', ')}  ${c.keeper ? `kept by ${c.keeper} (${KEEPS_ADDRESSES_ANNOTATION})` : "nobody's"}`,
      );
  }
  if (r.refusedPodRanges?.length) {
    out.push('', 'Refused pod ranges (the tunnel and the pod network route nothing to them):');
    for (const p of r.refusedPodRanges) out.push(`  ${p.range}  of ${p.node}  ${p.reason}`);
  }
  const ks = r.kubeletServing;
  if (ks && ks.trusted !== 'kubelet-serving CA') {
    out.push('', `Kubelet serving certificates: kube-apiserver trusts the ${ks.trusted} while nodes move over`);
    if (ks.checkedAt === undefined) out.push('  not checked yet');
    else
      out.push(
        `  ${ks.onClusterCa.length} node(s) still on the cluster CA${ks.onClusterCa.length ? `: ${ks.onClusterCa.join(', ')} (restart kctl worker there)` : ''}; ${ks.unchecked.length} not reachable`,
      );
    for (const u of ks.unchecked) out.push(`  ${u.node}: ${u.error}`);
  }
  out.push(...renderBackup(r));
  out.push(...renderFrontDoor(r));
  const s = r.storage;
  if (s?.type === 'kine')
    out.push(
      '',
      `Storage: kine on ${s.datastore === 'sqlite' ? 'a SQLite file in the data dir (one controller only)' : s.datastore}`,
    );
  if (s?.type === 'etcd') {
    out.push('', `Storage: etcd, ${s.members.length} member(s)${s.error ? ` (cannot list members: ${s.error})` : ''}`);
    for (const m of s.members)
      out.push(
        `  ${m.name || '(not started)'}  ${m.id}  ${m.peerURLs.join(',')}  ${m.isLearner ? 'learner' : 'voter'}`,
      );
  }
  return out;
}

/** Scheduled backups: the last run and its result, the next, and which controller makes them. */
function renderBackup(r: ControllerStatusReport): string[] {
  const b = r.backup;
  if (!b) return [];
  const l = b.last;
  const last = l
    ? [l.at, l.result === 'ok' ? 'ok' : `failed: ${l.reason ?? ''}`, l.file, `(by ${l.controller})`]
        .filter(Boolean)
        .join('  ')
    : '(none yet)';
  return [
    '',
    `Backups: every ${b.schedule}, keep ${b.retention}, ${b.encrypted ? 'encrypted' : 'NOT encrypted (CA keys in the clear)'}, in ${b.path}`,
    `  lease holder: ${b.leaseHolder || '(none)'}`,
    `  last:         ${last}`,
    `  next due:     ${b.nextDue ?? '(known to the lease holder)'}`,
  ];
}

/**
 * The front door: this cluster's names, and what this process's door routed (every kctl of the
 * host shares the port and the kernel spreads connections, so each counts its own share).
 */
function renderFrontDoor(r: ControllerStatusReport): string[] {
  const f = r.frontDoor;
  if (!f) return [];
  // nodeApi as node-api: the endpoint as its name spells it.
  const spelt = (endpoint: string) => endpoint.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`);
  const names = Object.entries(f.names).map(([endpoint, name]) => `${spelt(endpoint)}=${name}`);
  if (f.external) {
    const ports = f.external.handoffs.map((h) => `${spelt(h.endpoint)} ${h.port}`);
    const refused = f.external.handoffs.reduce((n, h) => n + h.refused, 0);
    return [
      '',
      `Behind the front door at ${f.external.address}: ${names.join('  ')}`,
      ...(ports.length ? [`  handoff ports: ${ports.join(', ')}; closed without the door's key: ${refused}`] : []),
    ];
  }
  if (!f.door) return [];
  const rows = Object.entries(f.door.clusters).map(([cluster, c]) => [cluster, String(c.open), String(c.total)]);
  const refused = f.door.refused;
  const byName = Object.entries(refused.names).map(([name, n]) => `${name} (${n})`);
  return [
    '',
    `Front door on port ${f.port}: ${names.join('  ')}`,
    ...(rows.length
      ? renderTable(
          ['  CLUSTER', 'OPEN', 'TOTAL'],
          rows.map(([c, ...rest]) => [`  ${c}`, ...rest]),
        )
      : ['  no connections routed by this process yet']),
    `  refused: ${refused.total} (not TLS ${refused.notTls}, no name ${refused.noName}${byName.length ? `, unknown names: ${byName.join(', ')}` : ''})`,
  ];
}

export function statusCommand(program: Command): void {
  program
    .command('status')
    .description('show the state of the running kctl on this host (role, version, components)')
    .addOption(outputOption())
    .action(async (opts: { output: OutputFormat }, cmd: Command) => {
      const g = globals(cmd);
      const report = await readStatus<AnyStatusReport>(join(g.runDir, 'status.sock')).catch((err: Error) => {
        if (g.tenant && !existsSync(join(g.runDir, 'status.sock')))
          throw new UserError(
            `tenant "${g.tenant.name}" is not running here; start it with kctl controller --name ${g.tenant.name} (kctl tenant list shows all)`,
          );
        throw new UserError(err.message);
      });
      if (opts.output === 'json') printJson(report);
      else process.stdout.write(renderStatus(report));
    });
}

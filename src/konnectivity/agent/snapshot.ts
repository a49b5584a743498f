// What a konnectivity agent reports about itself (`kctl status`, tests): the servers it holds
// a stream to, and the per-connection flow-control numbers.
import type { ServerConnection } from './connection.ts';

export interface AgentServerSnapshot {
  address: string;
  serverId: string;
  serverCount: number;
  extensions: string[];
  /** kctl-tunnel/1 with a kctl server that offers it, else grpc (the upstream protocol). */
  transport: 'grpc' | 'kctl-tunnel/1';
  connections: number;
  pendingDials: number;
}

export interface AgentSnapshot {
  agentId: string;
  knownServerCount: number;
  servers: AgentServerSnapshot[];
}

export interface TargetStats {
  trace: string;
  serverId: string;
  connectID: string;
  unflushed: number;
  peakUnflushed: number;
  held: number;
  peakHeld: number;
}

/** The servers `conns` hold a stream to, as `kctl status` shows them. */
export function serverSnapshots(conns: Iterable<ServerConnection>): AgentServerSnapshot[] {
  return [...conns].map((c) => ({
    address: c.address,
    serverId: c.serverId,
    serverCount: c.serverCount,
    extensions: c.extensions,
    transport: c.transport,
    connections: c.targets.size,
    pendingDials: c.dials.size,
  }));
}

/** Every target connection's flow-control numbers. */
export function targetStatsOf(conns: Iterable<ServerConnection>): TargetStats[] {
  return [...conns].flatMap((c) =>
    [...c.targets.values()].map((t) => ({
      trace: t.trace,
      serverId: c.serverId,
      connectID: t.connectID,
      unflushed: t.flow.unflushed,
      peakUnflushed: t.flow.peakUnflushed,
      held: t.flow.heldLength,
      peakHeld: t.flow.peakHeld,
    })),
  );
}

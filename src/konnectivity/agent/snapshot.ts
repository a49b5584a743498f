// What a konnectivity agent reports about itself (`kctl status`, tests): the servers it holds
// a stream to, and the per-connection flow-control numbers.

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

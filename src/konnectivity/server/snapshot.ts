// What a konnectivity server reports about itself (`kctl status`, tests): its agents with what
// each claimed, was granted and lost, and the per-tunnel flow-control numbers.
import type { AgentIdentity } from './auth.ts';
import type { DroppedClaim } from './claims.ts';
import type { AgentIdentifiers } from '../wire/protocol.ts';

export interface AgentSnapshot {
  /** Who the agent is: system:node:<name> for a node certificate, <user>/<agentid> for a token. */
  id: string;
  /** The agentid it sent, when that names anyone but its own node: a label, never a routing key. */
  agentIdClaimed?: string;
  node?: string;
  user: string;
  auth: AgentIdentity['method'];
  /** How its stream arrived: straight at the agent port, or through the host's front door. */
  via?: 'direct' | 'front-door';
  /** Its address (the client the front door named, for a stream that came through it). */
  client?: string;
  /** What the agent sent, what routing uses, and why the rest was dropped. */
  claimed: AgentIdentifiers;
  accepted: AgentIdentifiers;
  dropped: DroppedClaim[];
  draining: boolean;
  extensions: string[];
  connections: number;
  pendingDials: number;
  connectedAt: string;
}

export interface KonnectivityServerSnapshot {
  serverId: string;
  serverCount: number;
  agents: AgentSnapshot[];
  /** Dials sent to an agent and not answered yet, and dials waiting for their agent to connect. */
  pendingDials: number;
  establishedConnections: number;
  closingConnections: number;
}

/** Per-tunnel flow-control numbers, for tests and debugging. */
export interface TunnelStats {
  trace: string;
  agent: string;
  random: string;
  connectID?: string;
  address: string;
  state: string;
  unflushed: number;
  peakUnflushed: number;
  held: number;
  peakHeld: number;
}

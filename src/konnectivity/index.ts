// Konnectivity: the tunnel that lets kube-apiserver reach nodes that only dial out.
// server.ts runs in the controller, agent.ts in the worker; protocol.ts is the wire format.
export {
  KonnectivityServer,
  type KonnectivityServerOptions,
  type TcpFrontend,
  type KonnectivityServerSnapshot,
  type AgentSnapshot as ServerAgentSnapshot,
  type TunnelStats,
} from './server.ts';
export {
  KonnectivityAgent,
  type KonnectivityAgentOptions,
  type AgentSnapshot,
  type AgentServerSnapshot,
  type ServerAddress,
  type TargetStats,
} from './agent.ts';
export { dialViaProxy, openProxyStream, ProxyTunnel, ProxyDialError, type ProxyDialOptions } from './client.ts';
export { type TokenReview, type AgentIdentity } from './auth.ts';
export { type NodeDirectory, type NodeRecord, type TrustedAgents, type DroppedClaim } from './claims.ts';
export { type ProxyStrategy, NO_AGENT } from './broker.ts';
export {
  FLOW_CONTROL_EXTENSION,
  INITIAL_WINDOW,
  formatIdentifiers,
  parseIdentifiers,
  AgentServiceClient,
  ProxyServiceClient,
  encodePacket,
  decodePacket,
  packets,
  newRandom,
  type Packet,
  type PacketType,
  type AgentIdentifiers,
} from './protocol.ts';

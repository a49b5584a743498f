// Konnectivity: the tunnel that lets kube-apiserver reach nodes that only dial out.
// server/ runs in the controller, agent/ in the worker; wire/ is the protocol both speak (README.md).
export {
  KonnectivityServer,
  type KonnectivityServerOptions,
  type TcpFrontend,
  type KonnectivityServerSnapshot,
  type AgentSnapshot as ServerAgentSnapshot,
  type TunnelStats,
} from './server/server.ts';
export {
  KonnectivityAgent,
  type KonnectivityAgentOptions,
  type AgentSnapshot,
  type AgentServerSnapshot,
  type ServerAddress,
  type TargetStats,
} from './agent/agent.ts';
export { dialViaProxy, openProxyStream, ProxyTunnel, ProxyDialError, type ProxyDialOptions } from './client.ts';
export { type TokenReview, type AgentIdentity } from './server/auth.ts';
export { type NodeDirectory, type NodeRecord } from '../base/ownership.ts';
export { type TrustedAgents, type DroppedClaim } from './server/claims.ts';
export { NO_AGENT } from './server/broker.ts';
export { type ProxyStrategy } from './server/routing.ts';
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
} from './wire/protocol.ts';
export { endpointComponent, serveAdmin, serveHealth } from './dropin/upstream-ports.ts';

// Every flag upstream's proxy-agent (apiserver-network-proxy v0.36.0) takes, with its type,
// default and help as upstream prints them, so that `kctl konnectivity-agent` (or kctl invoked
// as `proxy-agent`) runs unchanged from a DaemonSet or sidecar manifest written for upstream.
import { KLOG_FLAGS } from './klog-flags.ts';
import type { FlagSpec } from './pflag.ts';

export const AGENT_FLAGS: readonly FlagSpec[] = [
  {
    name: 'admin-bind-address',
    kind: 'string',
    default: '127.0.0.1',
    help: 'Bind address for admin connections. If empty, we will bind to all interfaces.',
  },
  { name: 'admin-server-port', kind: 'int', default: '8094', help: 'The port the admin server is listening on.' },
  { name: 'agent-cert', kind: 'string', default: '', help: 'If non-empty secure communication with this cert.' },
  {
    name: 'agent-id',
    kind: 'string',
    default: '',
    shownDefault: '<a new uuid>',
    help: "The unique ID of this agent. Can also be set by the 'PROXY_AGENT_ID' environment variable. Default to a generated uuid if not set.",
  },
  {
    name: 'agent-identifiers',
    kind: 'string',
    default: '',
    help: 'Identifiers of the agent that will be used by the server when choosing agent. N.B. the list of identifiers must be in URL encoded format. e.g.,host=localhost&host=node1.mydomain.com&cidr=127.0.0.1/16&ipv4=1.2.3.4&ipv4=5.6.7.8&ipv6=:::::&default-route=true',
  },
  { name: 'agent-key', kind: 'string', default: '', help: 'If non-empty secure communication with this key.' },
  {
    name: 'alpn-proto',
    kind: 'strings',
    default: '',
    help: 'Additional ALPN protocols to be presented when connecting to the server. Useful to distinguish between network proxy and apiserver connections that share the same destination address.',
  },
  { name: 'ca-cert', kind: 'string', default: '', help: 'If non-empty the CAs we use to validate clients.' },
  {
    name: 'count-server-leases',
    kind: 'bool',
    default: 'false',
    help: 'Enables lease counting system to determine the number of proxy servers to connect to.',
  },
  {
    name: 'enable-contention-profiling',
    kind: 'bool',
    default: 'false',
    help: 'enable contention profiling at host:admin-port/debug/pprof/block. "--enable-profiling" must also be set.',
  },
  { name: 'enable-profiling', kind: 'bool', default: 'false', help: 'enable pprof at host:admin-port/debug/pprof' },
  { name: 'health-server-host', kind: 'string', default: '', help: 'The host address to listen on, without port.' },
  { name: 'health-server-port', kind: 'int', default: '8093', help: 'The port the health server is listening on.' },
  {
    name: 'keepalive-time',
    kind: 'duration',
    default: '1h0m0s',
    help: 'Time for gRPC agent server keepalive.',
    inert:
      'kctl pings every server every 31 s, the most often upstream servers allow: an hour would leave a dead link unnoticed for an hour',
  },
  {
    name: 'kube-api-content-type',
    kind: 'string',
    default: 'application/vnd.kubernetes.protobuf',
    help: 'Content type of requests sent to apiserver.',
    inert: 'kctl reads leases as JSON; the answer is the same',
  },
  { name: 'kubeconfig', kind: 'string', default: '', help: 'Path to the kubeconfig file' },
  {
    name: 'lease-label',
    kind: 'string',
    default: 'k8s-app=konnectivity-server',
    help: 'The labels on which the lease objects are managed.',
  },
  {
    name: 'lease-namespace',
    kind: 'string',
    default: 'kube-system',
    help: 'Namespace where lease objects are managed.',
  },
  {
    name: 'probe-interval',
    kind: 'duration',
    default: '1s',
    help: 'The interval by which the agent periodically checks if its connections to the proxy server are ready.',
    inert: 'kctl notices a lost server from the stream itself and its keepalive, with no polling',
  },
  {
    name: 'proxy-server-host',
    kind: 'string',
    default: '127.0.0.1',
    help: 'The hostname to use to connect to the proxy-server.',
  },
  { name: 'proxy-server-port', kind: 'int', default: '8091', help: 'The port the proxy server is listening on.' },
  {
    name: 'server-count-source',
    kind: 'string',
    default: 'default',
    help: "Defines how the server counts from lease and from server responses are combined. Possible values: 'default' to use only one source (server or leases depending on other flags), 'max' to take the larger value.",
  },
  {
    name: 'service-account-token-path',
    kind: 'string',
    default: '',
    help: 'If non-empty proxy agent uses this token to prove its identity to the proxy server.',
  },
  {
    name: 'sync-forever',
    kind: 'bool',
    default: 'false',
    help: 'If true, the agent continues syncing, in order to support server count changes.',
  },
  {
    name: 'sync-interval',
    kind: 'duration',
    default: '1s',
    help: 'The initial interval by which the agent periodically checks if it has connections to all instances of the proxy server.',
  },
  {
    name: 'sync-interval-cap',
    kind: 'duration',
    default: '10s',
    help: 'The maximum interval for the SyncInterval to back off to when unable to connect to the proxy server',
  },
  {
    name: 'warn-on-channel-limit',
    kind: 'bool',
    default: 'false',
    help: 'Turns on a warning if the system is going to push to a full channel. The check involves an unsafe read.',
    inert: 'kctl has no transfer channel: each connection has its own credit window',
  },
  {
    name: 'xfr-channel-size',
    kind: 'int',
    default: '150',
    help: 'Set the size of the channel for transferring data between the agent and the proxy server.',
    inert: 'kctl has no transfer channel: each connection has its own credit window',
  },
  ...KLOG_FLAGS,
];

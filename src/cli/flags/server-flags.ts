// Every flag upstream's proxy-server (apiserver-network-proxy v0.36.0) takes, with its type,
// default and help as upstream prints them, so that `kctl konnectivity-server` (or kctl invoked
// as `proxy-server`) runs unchanged from a sidecar manifest written for upstream.
import { KLOG_FLAGS } from './klog-flags.ts';
import type { FlagSpec } from './pflag.ts';

const NO_CHANNEL = 'kctl has no transfer channel: each connection has its own credit window';
const NO_RATE_LIMIT =
  'kctl makes one TokenReview per agent connection and one lease call per renewal, with no client-side rate limit';

export const SERVER_FLAGS: readonly FlagSpec[] = [
  {
    name: 'admin-bind-address',
    kind: 'string',
    default: '127.0.0.1',
    help: 'Bind address for admin connections. If empty, we will bind to localhost.',
  },
  { name: 'admin-port', kind: 'int', default: '8095', help: 'Port we listen for admin connections on.' },
  {
    name: 'agent-bind-address',
    kind: 'string',
    default: '',
    help: 'Bind address for agent connections. If empty, we will bind to all interfaces.',
  },
  {
    name: 'agent-namespace',
    kind: 'string',
    default: '',
    help: "Expected agent's namespace during agent authentication (used with agent-service-account, authentication-audience, kubeconfig).",
  },
  { name: 'agent-port', kind: 'int', default: '8091', help: 'Port we listen for agent connections on.' },
  {
    name: 'agent-service-account',
    kind: 'string',
    default: '',
    help: "Expected agent's service account during agent authentication (used with agent-namespace, authentication-audience, kubeconfig).",
  },
  {
    name: 'authentication-audience',
    kind: 'string',
    default: '',
    help: "Expected agent's token authentication audience (used with agent-namespace, agent-service-account, kubeconfig).",
  },
  {
    name: 'backend-dial-timeout',
    kind: 'duration',
    default: '0s',
    help: 'Timeout duration for sending DIAL_REQ packets to backend agent streams and waiting for DIAL_RSP. Set to 0 to disable timeout (default: 0).',
  },
  {
    name: 'cipher-suites',
    kind: 'strings',
    default: '',
    help: 'The comma separated list of allowed cipher suites. Has no effect on TLS1.3. Empty means allow default list.',
  },
  {
    name: 'cluster-ca-cert',
    kind: 'string',
    default: '',
    help: 'If non-empty the CA we use to validate Agent clients.',
  },
  { name: 'cluster-cert', kind: 'string', default: '', help: 'If non-empty secure communication with this cert.' },
  { name: 'cluster-key', kind: 'string', default: '', help: 'If non-empty secure communication with this key.' },
  {
    name: 'delete-existing-uds-file',
    kind: 'bool',
    default: 'true',
    help: 'If true and if file UdsName already exists, delete the file before listen on that UDS file. Default is true.',
  },
  {
    name: 'enable-contention-profiling',
    kind: 'bool',
    default: 'false',
    help: 'enable contention profiling at host:admin-port/debug/pprof/block. "--enable-profiling" must also be set.',
  },
  {
    name: 'enable-lease-controller',
    kind: 'bool',
    default: 'false',
    help: 'Enable lease controller to publish and garbage collect proxy server leases.',
  },
  { name: 'enable-profiling', kind: 'bool', default: 'false', help: 'enable pprof at host:admin-port/debug/pprof' },
  {
    name: 'frontend-keepalive-time',
    kind: 'duration',
    default: '1h0m0s',
    help: 'Time for gRPC frontend server keepalive.',
    inert: "kctl does not ping kube-apiserver's streams; a client that goes away closes its connection",
  },
  {
    name: 'graceful-shutdown-timeout',
    kind: 'duration',
    default: '0s',
    help: 'Timeout duration for graceful shutdown of the server. The server will wait for active connections to close before forcefully terminating. Set to 0 to disable graceful shutdown (default: 0).',
  },
  {
    name: 'health-bind-address',
    kind: 'string',
    default: '',
    help: 'Bind address for health connections. If empty, we will bind to all interfaces.',
  },
  { name: 'health-port', kind: 'int', default: '8092', help: 'Port we listen for health connections on.' },
  {
    name: 'keepalive-time',
    kind: 'duration',
    default: '1h0m0s',
    help: 'Time for gRPC agent server keepalive.',
    inert:
      'kctl pings every agent every 10 s and drops it after 5 s without an answer: an hour would leave a dead agent routed to for an hour',
  },
  {
    name: 'kube-api-content-type',
    kind: 'string',
    default: 'application/vnd.kubernetes.protobuf',
    help: 'Content type of requests sent to apiserver.',
    inert: 'kctl talks JSON to kube-apiserver; the answers are the same',
  },
  {
    name: 'kubeconfig',
    kind: 'string',
    default: '',
    help: 'absolute path to the kubeconfig file (used with agent-namespace, agent-service-account, authentication-audience).',
  },
  {
    name: 'kubeconfig-burst',
    kind: 'int',
    default: '0',
    help: 'Maximum client burst (proxy server uses this client to authenticate agent tokens).',
    inert: NO_RATE_LIMIT,
  },
  {
    name: 'kubeconfig-qps',
    kind: 'float32',
    default: '0',
    help: 'Maximum client QPS (proxy server uses this client to authenticate agent tokens).',
    inert: NO_RATE_LIMIT,
  },
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
    help: 'The namespace where lease objects are managed by the controller.',
  },
  { name: 'mode', kind: 'string', default: 'grpc', help: "mode can be either 'grpc' or 'http-connect'." },
  {
    name: 'proxy-strategies',
    kind: 'string',
    default: 'default',
    help: 'The list of proxy strategies used by the server to pick an agent/tunnel, available strategies are: default, destHost, defaultRoute.',
  },
  {
    name: 'server-bind-address',
    kind: 'string',
    default: '',
    help: 'Bind address for server connections. If empty, we will bind to all interfaces.',
  },
  { name: 'server-ca-cert', kind: 'string', default: '', help: 'If non-empty the CA we use to validate KAS clients.' },
  { name: 'server-cert', kind: 'string', default: '', help: 'If non-empty secure communication with this cert.' },
  {
    name: 'server-count',
    kind: 'int',
    default: '1',
    help: 'The number of proxy server instances, should be 1 unless it is an HA server.',
  },
  {
    name: 'server-id',
    kind: 'string',
    default: '',
    shownDefault: '<a new uuid>',
    help: "The unique ID of this server. Can also be set by the 'PROXY_SERVER_ID' environment variable.",
  },
  { name: 'server-key', kind: 'string', default: '', help: 'If non-empty secure communication with this key.' },
  {
    name: 'server-port',
    kind: 'int',
    default: '8090',
    help: 'Port we listen for server connections on. Set to 0 for UDS.',
  },
  {
    name: 'tls-min-version',
    kind: 'string',
    default: '',
    help: 'Minimum TLS version for server connections. Accepted values: VersionTLS10, VersionTLS11, VersionTLS12, VersionTLS13. Empty defaults to VersionTLS12.',
  },
  {
    name: 'uds-name',
    kind: 'string',
    default: '',
    help: 'uds-name should be empty for TCP traffic. For UDS set to its name.',
  },
  {
    name: 'warn-on-channel-limit',
    kind: 'bool',
    default: 'true',
    help: 'This behavior is now thread safe and always on. This flag will be removed in a future release.',
    hidden: true,
    inert: NO_CHANNEL,
  },
  {
    name: 'xfr-channel-size',
    kind: 'int',
    default: '10',
    help: 'The size of the two KNP server channels used in server for transferring data. One channel is for data coming from the Kubernetes API Server, and the other one is for data coming from the KNP agent.',
    inert: NO_CHANNEL,
  },
  ...KLOG_FLAGS,
];

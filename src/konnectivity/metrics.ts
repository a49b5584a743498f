// Prometheus metrics with upstream's names, so dashboards made for apiserver-network-proxy
// keep working. Each server or agent has its own Registry; gauges that mirror a table are read
// from that table at scrape time, so they cannot drift from it.
import { Counter, Gauge, Histogram, Registry } from 'prom-client';

const SERVER = 'konnectivity_network_proxy_server_';
const AGENT = 'konnectivity_network_proxy_agent_';

const DIAL_BUCKETS = [0.005, 0.025, 0.1, 0.5, 2.5, 12.5];

export type DialFailureReason = 'no_agent' | 'error_response' | 'timeout' | 'backend_close' | 'frontend_close' | 'bad_request';

export interface ServerMetricSources {
  readyBackends(): number;
  pendingDials(): number;
  establishedConnections(): number;
}

export class ServerMetrics {
  readonly registry = new Registry();
  readonly dialDuration: Histogram;
  readonly dialFailures: Counter<'reason'>;
  readonly grpcConnections: Gauge<'service_method'>;

  constructor(src: ServerMetricSources) {
    const registers = [this.registry];
    new Gauge({
      name: `${SERVER}ready_backend_connections`,
      help: 'Agent streams connected to this server.',
      registers,
      collect() {
        this.set(src.readyBackends());
      },
    });
    new Gauge({
      name: `${SERVER}pending_backend_dials`,
      help: 'Dials sent to an agent and not answered yet.',
      registers,
      collect() {
        this.set(src.pendingDials());
      },
    });
    new Gauge({
      name: `${SERVER}established_connections`,
      help: 'Tunneled connections open through this server.',
      registers,
      collect() {
        this.set(src.establishedConnections());
      },
    });
    this.dialDuration = new Histogram({
      name: `${SERVER}dial_duration_seconds`,
      help: 'From DIAL_REQ to a successful DIAL_RSP.',
      buckets: DIAL_BUCKETS,
      registers,
    });
    this.dialFailures = new Counter({ name: `${SERVER}dial_failure_count`, help: 'Failed dials by reason.', labelNames: ['reason'], registers });
    this.grpcConnections = new Gauge({
      name: `${SERVER}grpc_connections`,
      help: 'Open gRPC streams by method.',
      labelNames: ['service_method'],
      registers,
    });
  }
}

export interface AgentMetricSources {
  openServerConnections(): number;
  knownServerCount(): number;
  openEndpointConnections(): number;
}

/** Upstream's agent histogram buckets: 5 ms to 30 s. */
const AGENT_LATENCY_BUCKETS = [0.005, 0.025, 0.1, 0.5, 2.5, 10, 30];

/** Why kctl's agent failed a dial; upstream's family only tells a timeout from the rest. */
export type AgentDialFailure = 'timeout' | 'error' | 'fd_exhausted' | 'draining' | 'cancelled';

/** Go's names for gRPC status codes (codes.Code.String()), as upstream's labels carry them. */
const GRPC_CODE_NAMES = [
  'OK',
  'Canceled',
  'Unknown',
  'InvalidArgument',
  'DeadlineExceeded',
  'NotFound',
  'AlreadyExists',
  'PermissionDenied',
  'ResourceExhausted',
  'FailedPrecondition',
  'Aborted',
  'OutOfRange',
  'Unimplemented',
  'Internal',
  'Unavailable',
  'DataLoss',
  'Unauthenticated',
];

export function grpcCodeName(code: number | undefined): string {
  return GRPC_CODE_NAMES[code ?? 2] ?? `Code(${code})`;
}

/**
 * The agent's metrics: every family upstream's proxy-agent v0.36.0 registers, with its name,
 * HELP, labels and label values, then kctl's own under kctl_ names.
 */
export class AgentMetrics {
  readonly registry = new Registry();
  readonly dialDuration: Histogram;
  /** Upstream's: reason "timeout" or "unknown". */
  private readonly dialFailures: Counter<'reason'>;
  /** kctl's: the finer reason (refused and DNS errors are "error"; draining, cancelled). */
  private readonly kctlDialFailures: Counter<'reason'>;
  private readonly serverFailures: Counter<'direction'>;
  private readonly streamPackets: Counter<'segment' | 'packet_type'>;
  private readonly streamErrors: Counter<'segment' | 'code' | 'packet_type'>;
  readonly leaseLists: Counter<'http_response_code' | 'reason'>;
  readonly leaseWatches: Counter<'http_response_code' | 'reason'>;
  readonly leaseListLatency: Histogram<'http_response_code'>;

  constructor(src: AgentMetricSources) {
    const registers = [this.registry];
    this.dialDuration = new Histogram({
      name: `${AGENT}dial_duration_seconds`,
      help: 'Latency of dial to the remote endpoint in seconds',
      buckets: AGENT_LATENCY_BUCKETS,
      registers,
    });
    this.serverFailures = new Counter({
      name: `${AGENT}server_connection_failure_count`,
      help: 'Count of failures to send to or receive from the proxy server, labeled by the direction (from_server or to_server). DEPRECATED, please use stream_events_error_total',
      labelNames: ['direction'],
      registers,
    });
    this.dialFailures = new Counter({
      name: `${AGENT}endpoint_dial_failure_total`,
      help: 'Number of failures dialing the remote endpoint, by reason (example: timeout).',
      labelNames: ['reason'],
      registers,
    });
    new Gauge({
      name: `${AGENT}open_server_connections`,
      help: 'Current number of open server connections.',
      registers,
      collect() {
        this.set(src.openServerConnections());
      },
    });
    new Gauge({
      name: `${AGENT}known_server_count`,
      help: 'Current number of servers agent is trying to connect to.',
      registers,
      collect() {
        this.set(src.knownServerCount());
      },
    });
    new Gauge({
      name: `${AGENT}open_endpoint_connections`,
      help: 'Current number of open endpoint connections.',
      registers,
      collect() {
        this.set(src.openEndpointConnections());
      },
    });
    this.leaseLists = new Counter({
      name: `${AGENT}lease_lists_total`,
      help: 'Count of server lease list calls made by the agent to the k8s apiserver, labeled by HTTP response code and reason',
      labelNames: ['http_response_code', 'reason'],
      registers,
    });
    this.leaseWatches = new Counter({
      name: `${AGENT}lease_watches_total`,
      help: 'Count of server lease watch calls made by the agent to the k8s apiserver, labeled by HTTP response code and reason',
      labelNames: ['http_response_code', 'reason'],
      registers,
    });
    this.leaseListLatency = new Histogram({
      name: `${AGENT}lease_list_latency_seconds`,
      help: 'Latency of server lease listing in seconds',
      labelNames: ['http_response_code'],
      buckets: AGENT_LATENCY_BUCKETS,
      registers,
    });
    this.streamPackets = new Counter({
      name: `${AGENT}stream_packets_total`,
      help: 'Count of packets processed, by segment and packet type (example: from_client, DIAL_REQ)',
      labelNames: ['segment', 'packet_type'],
      registers,
    });
    this.streamErrors = new Counter({
      name: `${AGENT}stream_errors_total`,
      help: 'Count of gRPC stream errors, by segment, grpc Code, packet type. (example: from_agent, Code.Unavailable, DIAL_RSP)',
      labelNames: ['segment', 'code', 'packet_type'],
      registers,
    });
    this.kctlDialFailures = new Counter({
      name: 'kctl_konnectivity_agent_dial_failures_total',
      help: 'Dials this agent did not complete, by kctl reason: timeout, error (refused, unreachable, DNS), fd_exhausted, draining (refused while draining), cancelled (by the server).',
      labelNames: ['reason'],
      registers,
    });
  }

  dialFailed(reason: AgentDialFailure): void {
    this.kctlDialFailures.inc({ reason });
    // Upstream counts the dials it attempted: a timeout, or anything else net.Dial returned.
    if (reason === 'timeout' || reason === 'error' || reason === 'fd_exhausted')
      this.dialFailures.inc({ reason: reason === 'timeout' ? 'timeout' : 'unknown' });
  }

  private readonly packetCounters = new Map<string, { inc(): void }>();

  /** A packet sent to (from_agent) or received from (to_agent) a server; kctl's extension packets are not upstream's. */
  packet(segment: 'from_agent' | 'to_agent', packetType: string | number): void {
    const type = String(packetType);
    if (type.startsWith('KCTL_')) return;
    const key = `${segment} ${type}`;
    let c = this.packetCounters.get(key);
    if (!c) this.packetCounters.set(key, (c = this.streamPackets.labels(segment, type)));
    c.inc();
  }

  /** A stream to a server failed (upstream: a receive error, segment to_agent, packet type Unknown). */
  streamFailed(code: number | undefined): void {
    this.serverFailures.inc({ direction: 'from_server' });
    this.streamErrors.inc({ segment: 'to_agent', code: grpcCodeName(code), packet_type: 'Unknown' });
  }
}

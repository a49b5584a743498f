// Prometheus metrics with upstream's names, so dashboards made for apiserver-network-proxy
// keep working. Each server or agent has its own Registry; gauges that mirror a table are read
// from that table at scrape time, so they cannot drift from it.
import { Counter, Gauge, Histogram, Registry } from 'prom-client';

const SERVER = 'konnectivity_network_proxy_server_';
const AGENT = 'konnectivity_network_proxy_agent_';

/**
 * stream_packets_total, which upstream's server and agent both export: one counter child per
 * (segment, packet type), made on first use, so counting a packet does no label work. kctl's
 * extension packets are not upstream's and are not counted.
 */
class PacketCounts {
  private readonly family: Counter<'segment' | 'packet_type'>;
  private readonly children = new Map<string, Map<string, { inc(): void }>>();

  constructor(prefix: string, registers: Registry[]) {
    this.family = new Counter({
      name: `${prefix}stream_packets_total`,
      help: 'Count of packets processed, by segment and packet type (example: from_client, DIAL_REQ)',
      labelNames: ['segment', 'packet_type'],
      registers,
    });
  }

  inc(segment: string, packetType: string | number): void {
    const type = String(packetType);
    if (type.startsWith('KCTL_')) return;
    let bySegment = this.children.get(segment);
    if (!bySegment) this.children.set(segment, (bySegment = new Map()));
    let c = bySegment.get(type);
    if (!c) bySegment.set(type, (c = this.family.labels(segment, type)));
    c.inc();
  }
}

/** stream_errors_total, as upstream's server and agent both export it. */
function streamErrorsFamily(prefix: string, registers: Registry[]): Counter<'segment' | 'code' | 'packet_type'> {
  return new Counter({
    name: `${prefix}stream_errors_total`,
    help: 'Count of gRPC stream errors, by segment, grpc Code, packet type. (example: from_agent, Code.Unavailable, DIAL_RSP)',
    labelNames: ['segment', 'code', 'packet_type'],
    registers,
  });
}

/** Upstream's server histogram buckets: 1 µs to 12.5 s. */
const SERVER_LATENCY_BUCKETS = [0.000001, 0.00001, 0.0001, 0.005, 0.025, 0.1, 0.5, 2.5, 12.5];

export type DialFailureReason = 'no_agent' | 'error_response' | 'timeout' | 'backend_close' | 'frontend_close' | 'bad_request';

/** Upstream's label values for kctl's reasons ("timeout" is backend_dial_timeout there). */
const UPSTREAM_DIAL_FAILURE: Record<DialFailureReason, string> = {
  no_agent: 'no_agent',
  error_response: 'error_response',
  timeout: 'backend_dial_timeout',
  backend_close: 'backend_close',
  frontend_close: 'frontend_close',
  bad_request: 'bad_request',
};

/** The service_method label upstream gives each gRPC service (its constants, not the full paths). */
export type ServiceMethod = 'Proxy' | 'Connect';

export interface ServerMetricSources {
  readyBackends(): number;
  /** Agents each configured strategy can pick from (upstream: one backend manager per strategy). */
  readyBackendsByStrategy(): Map<string, number>;
  pendingDials(): number;
  establishedConnections(): number;
}

/**
 * The server's metrics: every family upstream's proxy-server v0.36.0 registers, with its name,
 * HELP, labels and buckets, so its dashboards and alerts work unchanged.
 */
export class ServerMetrics {
  readonly registry = new Registry();
  readonly dialDuration: Histogram;
  readonly frontendWriteDuration: Histogram;
  private readonly dialFailures: Counter<'reason'>;
  readonly grpcConnections: Gauge<'service_method'>;
  readonly httpConnections: Gauge;
  private readonly packets: PacketCounts;
  private readonly streamErrors: Counter<'segment' | 'code' | 'packet_type'>;
  readonly culledLeases: Counter;
  readonly leaseDeleteLatency: Histogram<'http_status_code'>;
  readonly leaseDeletes: Counter<'http_status_code' | 'reason'>;
  readonly leaseListLatency: Histogram<'http_status_code'>;
  readonly leaseLists: Counter<'http_status_code' | 'reason'>;

  constructor(src: ServerMetricSources) {
    const registers = [this.registry];
    this.dialDuration = new Histogram({
      name: `${SERVER}dial_duration_seconds`,
      help: 'Latency of dial to the remote endpoint in seconds',
      buckets: SERVER_LATENCY_BUCKETS,
      registers,
    });
    this.frontendWriteDuration = new Histogram({
      name: `${SERVER}frontend_write_duration_seconds`,
      help: 'Latency of write to the frontend in seconds',
      buckets: SERVER_LATENCY_BUCKETS,
      registers,
    });
    this.grpcConnections = new Gauge({
      name: `${SERVER}grpc_connections`,
      help: 'Number of current grpc connections, partitioned by service method.',
      labelNames: ['service_method'],
      registers,
    });
    this.httpConnections = new Gauge({ name: `${SERVER}http_connections`, help: 'Number of current HTTP CONNECT connections', registers });
    new Gauge({
      name: `${SERVER}ready_backend_connections`,
      help: 'Number of konnectivity agent connected to the proxy server. DEPRECATED, please use ready_backends',
      registers,
      collect() {
        this.set(src.readyBackends());
      },
    });
    new Gauge({
      name: `${SERVER}ready_backends`,
      help: 'Number of konnectivity agent connected to the proxy server',
      labelNames: ['proxy_strategy'],
      registers,
      collect() {
        for (const [proxy_strategy, n] of src.readyBackendsByStrategy()) this.set({ proxy_strategy }, n);
      },
    });
    new Gauge({
      name: `${SERVER}pending_backend_dials`,
      help: 'Current number of pending backend dial requests',
      registers,
      collect() {
        this.set(src.pendingDials());
      },
    });
    new Gauge({
      name: `${SERVER}established_connections`,
      help: 'Current number of established end-to-end connections (post-dial).',
      registers,
      collect() {
        this.set(src.establishedConnections());
      },
    });
    // kctl has no receive channel to fill (each connection has its own credit): always 0.
    new Gauge({
      name: `${SERVER}full_receive_channels`,
      help: 'Number of current connections blocked by a full receive channel, partitioned by service method.',
      labelNames: ['service_method'],
      registers,
    });
    this.dialFailures = new Counter({
      name: `${SERVER}dial_failure_count`,
      help: 'Number of dial failures observed. Multiple failures can occur for a single dial request.',
      labelNames: ['reason'],
      registers,
    });
    this.packets = new PacketCounts(SERVER, registers);
    this.streamErrors = streamErrorsFamily(SERVER, registers);
    this.culledLeases = new Counter({
      name: `${SERVER}culled_leases_count`,
      help: 'Count of expired leases that the lease garbage collection controller has culled.',
      registers,
    });
    this.leaseDeleteLatency = new Histogram({
      name: `${SERVER}lease_delete_latency_seconds`,
      help: 'Latency of lease deletion calls by the garbage collection controller in seconds.',
      labelNames: ['http_status_code'],
      registers,
    });
    this.leaseDeletes = new Counter({
      name: `${SERVER}lease_delete_total`,
      help: 'Count of lease delection calls by the garbage collection controller. Labeled by HTTP status code and reason.',
      labelNames: ['http_status_code', 'reason'],
      registers,
    });
    this.leaseListLatency = new Histogram({
      name: `${SERVER}lease_list_latency_seconds`,
      help: 'Latency of lease list calls by the garbage collection controller in seconds.',
      labelNames: ['http_status_code'],
      registers,
    });
    this.leaseLists = new Counter({
      name: `${SERVER}lease_list_total`,
      help: 'Count of lease deletion calls by the garbage collection controller. Labeled by HTTP status code and reason.',
      labelNames: ['http_status_code', 'reason'],
      registers,
    });
  }

  dialFailed(reason: DialFailureReason): void {
    this.dialFailures.inc({ reason: UPSTREAM_DIAL_FAILURE[reason] });
  }

  /** A packet received from or sent to a frontend (from_client, to_client) or an agent (from_agent, to_agent). */
  packet(segment: 'from_client' | 'to_client' | 'from_agent' | 'to_agent', packetType: string | number): void {
    this.packets.inc(segment, packetType);
  }

  /** A stream failed while sending or receiving (upstream: packet type Unknown when none was read). */
  streamFailed(segment: 'from_client' | 'to_client' | 'from_agent' | 'to_agent', code: number | undefined, packetType = 'Unknown'): void {
    this.streamErrors.inc({ segment, code: grpcCodeName(code), packet_type: packetType });
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
  private readonly packets: PacketCounts;
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
    this.packets = new PacketCounts(AGENT, registers);
    this.streamErrors = streamErrorsFamily(AGENT, registers);
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

  /** A packet sent to (from_agent) or received from (to_agent) a server. */
  packet(segment: 'from_agent' | 'to_agent', packetType: string | number): void {
    this.packets.inc(segment, packetType);
  }

  /** A stream to a server failed (upstream: a receive error, segment to_agent, packet type Unknown). */
  streamFailed(code: number | undefined): void {
    this.serverFailures.inc({ direction: 'from_server' });
    this.streamErrors.inc({ segment: 'to_agent', code: grpcCodeName(code), packet_type: 'Unknown' });
  }
}

// Prometheus metrics with upstream's names, so dashboards made for apiserver-network-proxy
// keep working. Each server has its own Registry; gauges that mirror a table are read
// from that table at scrape time, so they cannot drift from it.
import { Counter, Gauge, Histogram, Registry } from 'prom-client';
import { PacketCounts, grpcCodeName, streamErrorsFamily } from '../wire/stream-metrics.ts';

const SERVER = 'konnectivity_network_proxy_server_';

/** Upstream's server histogram buckets: 1 µs to 12.5 s. */
const SERVER_LATENCY_BUCKETS = [0.000001, 0.00001, 0.0001, 0.005, 0.025, 0.1, 0.5, 2.5, 12.5];

export type DialFailureReason =
  'no_agent' | 'error_response' | 'timeout' | 'backend_close' | 'frontend_close' | 'bad_request';

/** What became of a datagram between nodes (datagrams.ts): the `result` label of kctl's relay metrics. */
export type RelayOutcome = 'forwarded' | 'rate_limited' | 'no_route' | 'not_allowed' | 'too_large';

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
  private readonly relayDatagrams: Counter<'result'>;
  private readonly relayBytes: Counter<'result'>;

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
    this.httpConnections = new Gauge({
      name: `${SERVER}http_connections`,
      help: 'Number of current HTTP CONNECT connections',
      registers,
    });
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
    // kctl's own: what relaying between nodes costs the server (spec.network.relay: controllers).
    this.relayDatagrams = new Counter({
      name: 'kctl_konnectivity_relay_datagrams_total',
      help: 'Datagrams between nodes this server received, by result (forwarded, rate_limited, no_route, not_allowed, too_large).',
      labelNames: ['result'],
      registers,
    });
    this.relayBytes = new Counter({
      name: 'kctl_konnectivity_relay_bytes_total',
      help: 'Bytes of the datagrams between nodes this server received, by result.',
      labelNames: ['result'],
      registers,
    });
  }

  /** A datagram between nodes (datagrams.ts): passed on or dropped, and its bytes. */
  relayed(result: RelayOutcome, bytes: number): void {
    this.relayDatagrams.inc({ result });
    this.relayBytes.inc({ result }, bytes);
  }

  dialFailed(reason: DialFailureReason): void {
    this.dialFailures.inc({ reason: UPSTREAM_DIAL_FAILURE[reason] });
  }

  /** A packet received from or sent to a frontend (from_client, to_client) or an agent (from_agent, to_agent). */
  packet(segment: 'from_client' | 'to_client' | 'from_agent' | 'to_agent', packetType: string | number): void {
    this.packets.inc(segment, packetType);
  }

  /** A stream failed while sending or receiving (upstream: packet type Unknown when none was read). */
  streamFailed(
    segment: 'from_client' | 'to_client' | 'from_agent' | 'to_agent',
    code: number | undefined,
    packetType = 'Unknown',
  ): void {
    this.streamErrors.inc({ segment, code: grpcCodeName(code), packet_type: packetType });
  }
}

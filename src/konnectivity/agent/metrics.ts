// Prometheus metrics with upstream's names, so dashboards made for apiserver-network-proxy
// keep working. Each agent has its own Registry; gauges that mirror a table are read
// from that table at scrape time, so they cannot drift from it.
import { Counter, Gauge, Histogram, Registry } from 'prom-client';
import { PacketCounts, grpcCodeName, streamErrorsFamily } from '../wire/stream-metrics.ts';

const AGENT = 'konnectivity_network_proxy_agent_';

export interface AgentMetricSources {
  openServerConnections(): number;
  knownServerCount(): number;
  openEndpointConnections(): number;
}

/** Upstream's agent histogram buckets: 5 ms to 30 s. */
const AGENT_LATENCY_BUCKETS = [0.005, 0.025, 0.1, 0.5, 2.5, 10, 30];

/** Why kctl's agent failed a dial; upstream's family only tells a timeout from the rest. */
export type AgentDialFailure = 'timeout' | 'error' | 'fd_exhausted' | 'draining' | 'cancelled';

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

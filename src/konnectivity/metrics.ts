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

export class AgentMetrics {
  readonly registry = new Registry();
  readonly dialDuration: Histogram;
  readonly dialFailures: Counter<'reason'>;

  constructor(src: AgentMetricSources) {
    const registers = [this.registry];
    new Gauge({
      name: `${AGENT}open_server_connections`,
      help: 'Streams this agent holds to konnectivity servers.',
      registers,
      collect() {
        this.set(src.openServerConnections());
      },
    });
    new Gauge({
      name: `${AGENT}known_server_count`,
      help: 'Server count the servers last advertised.',
      registers,
      collect() {
        this.set(src.knownServerCount());
      },
    });
    new Gauge({
      name: `${AGENT}open_endpoint_connections`,
      help: 'Open connections to targets.',
      registers,
      collect() {
        this.set(src.openEndpointConnections());
      },
    });
    this.dialDuration = new Histogram({ name: `${AGENT}dial_duration_seconds`, help: 'Time to dial a target.', buckets: DIAL_BUCKETS, registers });
    this.dialFailures = new Counter({
      name: `${AGENT}endpoint_dial_failure_total`,
      help: 'Failed target dials by reason.',
      labelNames: ['reason'],
      registers,
    });
  }
}

// The two metric families upstream's server and agent both export about their streams
// (stream_packets_total, stream_errors_total), and Go's names for gRPC codes their labels carry.
import { Counter, type Registry } from 'prom-client';

/**
 * stream_packets_total, which upstream's server and agent both export: one counter child per
 * (segment, packet type), made on first use, so counting a packet does no label work. kctl's
 * extension packets are not upstream's and are not counted.
 */
export class PacketCounts {
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
export function streamErrorsFamily(prefix: string, registers: Registry[]): Counter<'segment' | 'code' | 'packet_type'> {
  return new Counter({
    name: `${prefix}stream_errors_total`,
    help: 'Count of gRPC stream errors, by segment, grpc Code, packet type. (example: from_agent, Code.Unavailable, DIAL_RSP)',
    labelNames: ['segment', 'code', 'packet_type'],
    registers,
  });
}

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

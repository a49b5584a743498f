// A ProxyService client that dials through the konnectivity server the way kube-apiserver
// does in GRPC mode: one single-use gRPC connection and Proxy stream per dial, DIAL_REQ,
// then DATA both ways, CLOSE_REQ / CLOSE_RSP at the end. Used by tests and tools.
import { Duplex } from 'node:stream';
import * as grpc from '@grpc/grpc-js';
import { MAX_DATA_CHUNK, ProxyServiceClient, newRandom, packets, type Int64, type Packet } from './wire/protocol.ts';

export interface ProxyDialOptions {
  /** The server's GRPC unix socket. */
  udsPath: string;
  /** Instead: its GRPC frontend on TCP with mutual TLS (host:port and the client's credentials). */
  tcp?: { address: string; credentials: grpc.ChannelCredentials };
  /** host:port to reach on the agent side. */
  address: string;
  /** Dial id; default a fresh random. */
  random?: Int64;
  /** Abort a dial still waiting for DIAL_RSP: sends DIAL_CLS, like kube-apiserver's backstop. */
  signal?: AbortSignal;
}

export class ProxyDialError extends Error {
  override name = 'ProxyDialError';
}

/** Opens a Proxy stream on its own connection (what kube-apiserver's single-use tunnel does). */
export function openProxyStream(
  udsPath: string,
  tcp?: ProxyDialOptions['tcp'],
): { client: grpc.Client; call: grpc.ClientDuplexStream<Packet, Packet> } {
  const target = tcp ? tcp.address : `unix:${udsPath}`;
  const client = new ProxyServiceClient(target, tcp?.credentials ?? grpc.credentials.createInsecure(), {
    'grpc.use_local_subchannel_pool': 1,
    'grpc.enable_channelz': 0,
    'grpc.max_receive_message_length': 16 * 1024 * 1024,
    // Go's gRPC (kube-apiserver) grows its windows with BDP estimation; a fixed 64 KiB would
    // make this client, not the tunnel, the bottleneck.
    'grpc-node.flow_control_window': 1024 * 1024,
  });
  const call = client.Proxy();
  return { client, call };
}

/** Dials `address` through the server; resolves once the agent answered DIAL_RSP. */
export async function dialViaProxy(o: ProxyDialOptions): Promise<ProxyTunnel> {
  const { client, call } = openProxyStream(o.udsPath, o.tcp);
  const random = o.random ?? newRandom();
  const cleanup = (): void => {
    call.cancel();
    client.close();
  };
  call.on('error', () => {}); // reported through the promise or the tunnel
  try {
    const connectID = await new Promise<Int64>((resolve, reject) => {
      const onAbort = (): void => {
        call.write(packets.dialCls(random));
        reject(new ProxyDialError(`dial to ${o.address} cancelled`));
      };
      if (o.signal?.aborted) return onAbort();
      o.signal?.addEventListener('abort', onAbort, { once: true });
      const done = (): void => {
        o.signal?.removeEventListener('abort', onAbort);
        call.off('data', onData);
        call.off('end', onEnd);
        call.off('error', onError);
      };
      const onData = (p: Packet): void => {
        if (p.type !== 'DIAL_RSP' || p.dialResponse?.random !== random) return;
        done();
        if (p.dialResponse.error) reject(new ProxyDialError(p.dialResponse.error));
        else resolve(p.dialResponse.connectID);
      };
      const onEnd = (): void => {
        done();
        reject(new ProxyDialError(`server closed the stream before answering the dial to ${o.address}`));
      };
      const onError = (err: grpc.ServiceError): void => {
        done();
        reject(new ProxyDialError(`dial to ${o.address}: ${err.details || err.message}`));
      };
      call.on('data', onData);
      call.once('end', onEnd);
      call.once('error', onError);
      call.write(packets.dialReq(o.address, random));
    });
    return new ProxyTunnel(client, call, random, connectID);
  } catch (err) {
    // Give a DIAL_CLS a moment to leave before the stream is torn down.
    setTimeout(cleanup, 50).unref();
    throw err;
  }
}

/**
 * One tunneled connection as a Duplex stream. Reading applies backpressure to the server
 * (the Proxy stream is paused), ending it sends CLOSE_REQ, and the readable side ends when
 * the server's CLOSE_RSP arrives.
 */
export class ProxyTunnel extends Duplex {
  /** Error text of the CLOSE_RSP, if the server closed with one. */
  closeError: string | undefined;
  private closedByPeer = false;

  constructor(
    private readonly client: grpc.Client,
    private readonly call: grpc.ClientDuplexStream<Packet, Packet>,
    readonly random: Int64,
    readonly connectID: Int64,
  ) {
    super({ allowHalfOpen: false });
    call.on('data', (p: Packet) => this.onPacket(p));
    call.on('end', () => this.peerClosed());
    call.on('error', () => this.peerClosed());
  }

  private onPacket(p: Packet): void {
    if (p.type === 'DATA' && p.data?.connectID === this.connectID) {
      if (!this.push(p.data.data)) this.call.pause();
    } else if (p.type === 'CLOSE_RSP' && p.closeResponse?.connectID === this.connectID) {
      this.closeError = p.closeResponse.error || undefined;
      this.peerClosed();
    }
  }

  private peerClosed(): void {
    if (this.closedByPeer) return;
    this.closedByPeer = true;
    this.push(null);
    if (this.writableFinished || this.writableEnded) this.release();
  }

  override _read(): void {
    this.call.resume();
  }

  override _write(chunk: Buffer, _enc: BufferEncoding, cb: (err?: Error | null) => void): void {
    if (this.closedByPeer) return cb();
    for (let off = 0; off + MAX_DATA_CHUNK < chunk.length; off += MAX_DATA_CHUNK) {
      this.call.write(packets.data(this.connectID, chunk.subarray(off, off + MAX_DATA_CHUNK)));
    }
    const last = chunk.subarray(Math.floor((chunk.length - 1) / MAX_DATA_CHUNK) * MAX_DATA_CHUNK);
    this.call.write(packets.data(this.connectID, last), () => cb());
  }

  /** Ending the writable side closes the connection (konnectivity has no half-close). */
  override _final(cb: (err?: Error | null) => void): void {
    if (!this.closedByPeer) this.call.write(packets.closeReq(this.connectID));
    else this.release();
    cb();
  }

  override _destroy(err: Error | null, cb: (err?: Error | null) => void): void {
    this.release();
    cb(err);
  }

  private released = false;

  private release(): void {
    if (this.released) return;
    this.released = true;
    this.call.end();
    this.call.cancel();
    this.client.close();
  }
}

// The TypeScript client driver, shared by every path in the scenarios of scenarios.ts (the
// speed scenarios use the Go driver, go-driver.ts). GRPC mode dials like kube-apiserver (kctl's
// ProxyService client: one gRPC connection and Proxy stream per dial over the unix socket);
// HTTP-CONNECT mode sends CONNECT on its own unix-socket connection; direct is plain TCP.
import { connect, type Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import { dialViaProxy } from '../src/konnectivity/index.ts';

export type PathName = 'direct' | 'upstream' | 'kctl' | 'upstream-connect' | 'kctl-connect';

export interface Dialer {
  path: PathName;
  /** Resolves with an open connection to `address`; rejects when the dial fails or `signal` aborts it. */
  dial(address: string, signal?: AbortSignal): Promise<Duplex>;
}

export function directDialer(): Dialer {
  return {
    path: 'direct',
    dial: (address, signal) =>
      new Promise((resolve, reject) => {
        const i = address.lastIndexOf(':');
        const s = connect({ host: address.slice(0, i), port: Number(address.slice(i + 1)) });
        s.setNoDelay(true);
        const onAbort = (): void => {
          s.destroy();
          reject(new Error('dial cancelled'));
        };
        signal?.addEventListener('abort', onAbort, { once: true });
        s.once('connect', () => {
          signal?.removeEventListener('abort', onAbort);
          resolve(s);
        });
        s.once('error', (err) => {
          signal?.removeEventListener('abort', onAbort);
          reject(err);
        });
      }),
  };
}

export function grpcDialer(path: 'upstream' | 'kctl', udsPath: string): Dialer {
  return { path, dial: (address, signal) => dialViaProxy({ udsPath, address, signal }) };
}

export function connectDialer(path: 'upstream-connect' | 'kctl-connect', udsPath: string): Dialer {
  return {
    path,
    dial: (address, signal) =>
      new Promise((resolve, reject) => {
        const s: Socket = connect(udsPath);
        let head = Buffer.alloc(0);
        const fail = (err: Error): void => {
          s.destroy();
          reject(err);
        };
        const onAbort = (): void => fail(new Error('dial cancelled'));
        signal?.addEventListener('abort', onAbort, { once: true });
        s.once('error', fail);
        const onClose = (): void => fail(new Error(`CONNECT ${address}: connection closed before a response`));
        s.once('close', onClose);
        s.once('connect', () => s.write(`CONNECT ${address} HTTP/1.1\r\nHost: ${address}\r\n\r\n`));
        const onData = (c: Buffer): void => {
          head = Buffer.concat([head, c]);
          const end = head.indexOf('\r\n\r\n');
          if (end < 0) return;
          s.off('data', onData);
          s.off('error', fail);
          s.off('close', onClose);
          s.pause();
          signal?.removeEventListener('abort', onAbort);
          const status = head.subarray(0, head.indexOf('\r\n')).toString();
          if (!/^HTTP\/1\.[01] 200/.test(status)) return fail(new Error(`CONNECT ${address}: ${status}`));
          const rest = head.subarray(end + 4);
          if (rest.length) s.unshift(rest);
          s.on('error', () => {});
          resolve(s);
        };
        s.on('data', onData);
      }),
  };
}

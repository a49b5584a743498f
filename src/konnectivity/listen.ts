// Listening and shutting down the server's sockets: private unix sockets for kube-apiserver,
// grpc-js and http servers, each closed within a bound.
import { randomUUID } from 'node:crypto';
import { chmod, mkdir, rename } from 'node:fs/promises';
import type { Server as HttpServer } from 'node:http';
import { dirname, join } from 'node:path';
import type * as grpc from '@grpc/grpc-js';

/** Binds through a temporary name, then renames: the socket is never visible with a wider mode. */
export async function bindPrivateSocket(path: string, bind: (tmp: string) => Promise<void>): Promise<void> {
  await mkdir(dirname(path), { recursive: true, mode: 0o755 });
  const tmp = join(dirname(path), `.${randomUUID().slice(0, 8)}.sock`);
  await bind(tmp);
  await chmod(tmp, 0o600);
  await rename(tmp, path);
}

export function bindGrpc(server: grpc.Server, address: string, creds: grpc.ServerCredentials): Promise<number> {
  return new Promise((resolve, reject) => {
    server.bindAsync(address, creds, (err, port) =>
      err ? reject(new Error(`konnectivity server cannot listen on ${address}: ${err.message}`)) : resolve(port),
    );
  });
}

export function listenHttp(server: HttpServer, path: string): Promise<void> {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(path, () => {
      server.off('error', reject);
      resolve();
    });
  });
}

export async function shutdownGrpc(server: grpc.Server | undefined): Promise<void> {
  if (!server) return;
  await new Promise<void>((resolve) => {
    const t = setTimeout(() => {
      server.forceShutdown();
      resolve();
    }, 2_000);
    server.tryShutdown(() => {
      clearTimeout(t);
      resolve();
    });
  });
}

export async function closeHttp(server: HttpServer | undefined): Promise<void> {
  if (!server) return;
  server.closeAllConnections();
  await new Promise<void>((resolve) => server.close(() => resolve()));
}

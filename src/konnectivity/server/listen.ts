// Listening and shutting down the server's sockets: private unix sockets for kube-apiserver,
// grpc-js and http servers, each closed within a bound.
import { randomUUID } from 'node:crypto';
import { existsSync } from 'node:fs';
import { chmod, rename } from 'node:fs/promises';
import type { Server as HttpServer } from 'node:http';
import type { Server as NetServer } from 'node:net';
import { dirname, join } from 'node:path';
import type * as grpc from '@grpc/grpc-js';
import { mkdirShared } from '../../base/fs.ts';

/**
 * Binds through a temporary name, then renames: the socket is never visible with a wider mode.
 * A file already at `path` is replaced, or with `replace: false` fails the bind as upstream's
 * --delete-existing-uds-file=false does.
 */
export async function bindPrivateSocket(
  path: string,
  bind: (tmp: string) => Promise<void>,
  o: { mode: number; replace: boolean } = { mode: 0o600, replace: true },
): Promise<void> {
  // The socket's own mode says who may connect; a directory made here lets them reach it.
  await mkdirShared(dirname(path));
  if (!o.replace && existsSync(path))
    throw new Error(
      `konnectivity server cannot listen on ${path}: a file is already there (remove it, or allow replacing it)`,
    );
  const tmp = join(dirname(path), `.${randomUUID().slice(0, 8)}.sock`);
  await bind(tmp);
  await chmod(tmp, o.mode);
  await rename(tmp, path);
}

export function bindGrpc(server: grpc.Server, address: string, creds: grpc.ServerCredentials): Promise<number> {
  return new Promise((resolve, reject) => {
    server.bindAsync(address, creds, (err, port) =>
      err ? reject(new Error(`konnectivity server cannot listen on ${address}: ${err.message}`)) : resolve(port),
    );
  });
}

/** Listens on a unix socket path or a TCP host and port (any net.Server: http, https, http2). */
export function listenHttp(server: NetServer, where: string | { host?: string; port: number }): Promise<void> {
  return new Promise((resolve, reject) => {
    const onError = (err: NodeJS.ErrnoException): void => {
      const at = typeof where === 'string' ? where : `${where.host ?? '*'}:${where.port}`;
      reject(new Error(`konnectivity server cannot listen on ${at}: ${err.code ?? err.message}`));
    };
    server.once('error', onError);
    server.listen(where, () => {
      server.off('error', onError);
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

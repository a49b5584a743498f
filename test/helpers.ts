// Small shared helpers for tests.
import { execFileSync } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import type { Component } from '../src/base/component.ts';
import { createLogger, type Logger } from '../src/base/log.ts';
import type { PkiOptions } from '../src/pki/index.ts';

export async function tempDir(t: { after: (fn: () => Promise<void>) => void }, prefix = 'kctl-test-'): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), prefix));
  // after-hooks run in the order they were added, so this may run while a child started later
  // (a supervised crash loop) still writes here: retry instead of failing on ENOTEMPTY.
  t.after(() => rm(dir, { recursive: true, force: true, maxRetries: 10, retryDelay: 100 }));
  return dir;
}

/** The component after its init, given `log` as the component manager gives each component its logger. */
export async function initialised<C extends Component>(component: C, log: Logger): Promise<C> {
  await component.init?.({ log, statuses: () => [] });
  return component;
}

/** A logger whose JSON lines the test can read back. */
export function captureLogger(): { log: Logger; lines: () => Record<string, unknown>[]; raw: () => string } {
  const chunks: string[] = [];
  const sink = new Writable({
    write(chunk: Buffer, _e, cb) {
      chunks.push(chunk.toString());
      cb();
    },
  });
  const log = createLogger({ destination: sink, pretty: false, debug: true });
  return {
    log,
    raw: () => chunks.join(''),
    lines: () =>
      chunks
        .join('')
        .split('\n')
        .filter(Boolean)
        .map((l) => JSON.parse(l) as Record<string, unknown>),
  };
}

/**
 * A self-signed P-256 certificate made by openssl, valid for a day: `<dir>/<name>.crt` and
 * `<dir>/<name>.key`. `ca` makes it a CA; `san` is an openssl subjectAltName value.
 */
export function selfSignedCert(
  dir: string,
  name: string,
  o: { cn: string; ca?: boolean; san?: string },
): { cert: string; key: string; pem: string } {
  const cert = join(dir, `${name}.crt`);
  const key = join(dir, `${name}.key`);
  execFileSync(
    'openssl',
    [
      'req',
      '-x509',
      '-newkey',
      'ec',
      '-pkeyopt',
      'ec_paramgen_curve:prime256v1',
      '-nodes',
      '-days',
      '1',
      '-subj',
      `/CN=${o.cn}`,
      ...(o.ca ? ['-addext', 'basicConstraints=critical,CA:TRUE'] : []),
      ...(o.san ? ['-addext', `subjectAltName=${o.san}`] : []),
      '-keyout',
      key,
      '-out',
      cert,
    ],
    { stdio: 'ignore' },
  );
  return { cert, key, pem: execFileSync('cat', [cert], { encoding: 'utf8' }) };
}

/**
 * A P-256 certificate for `subject` (openssl -subj form) signed by `signer` (a CA from
 * selfSignedCert), valid for a day: `<dir>/<name>.crt` and `<dir>/<name>.key`.
 */
export function signedCert(
  dir: string,
  name: string,
  signer: { cert: string; key: string },
  subject: string,
): { cert: string; key: string; pem: string } {
  const cert = join(dir, `${name}.crt`);
  const key = join(dir, `${name}.key`);
  const csr = join(dir, `${name}.csr`);
  execFileSync(
    'openssl',
    [
      'req',
      '-new',
      '-newkey',
      'ec',
      '-pkeyopt',
      'ec_paramgen_curve:prime256v1',
      '-nodes',
      '-subj',
      subject,
      '-keyout',
      key,
      '-out',
      csr,
    ],
    {
      stdio: 'ignore',
    },
  );
  execFileSync(
    'openssl',
    [
      'x509',
      '-req',
      '-in',
      csr,
      '-CA',
      signer.cert,
      '-CAkey',
      signer.key,
      '-CAcreateserial',
      '-days',
      '1',
      '-out',
      cert,
    ],
    {
      stdio: 'ignore',
    },
  );
  return { cert, key, pem: execFileSync('cat', [cert], { encoding: 'utf8' }) };
}

/** Every leaf certificate and kubeconfig of a full controller on etcd, by its path under <data-dir>/pki, sorted. */
export const FULL_CONTROLLER_LEAVES = [
  'admin.conf',
  'apiserver-etcd-client.crt',
  'apiserver-kubelet-client.crt',
  'controller-manager.conf',
  'etcd/peer.crt',
  'etcd/server.crt',
  'front-proxy-client.crt',
  'konnectivity.crt',
  'metrics-server.crt',
  'scheduler.conf',
  'server.crt',
];

/** PKI options for a controller at 192.0.2.10 with no extra names: unit tests of renewal and rotation. */
export function smallPkiOptions(dir: string, over: Partial<PkiOptions> = {}): PkiOptions {
  return {
    dir,
    apiAddress: '192.0.2.10',
    sans: [],
    apiPort: 6443,
    serviceCIDR: '10.96.0.0/12',
    clusterDomain: 'cluster.local',
    hostname: 'ctrl-1',
    localAddresses: ['192.0.2.10', '127.0.0.1'],
    ...over,
  };
}

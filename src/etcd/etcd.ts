// Managed etcd: client URL on loopback with mTLS, peer URL on spec.api.address, data 0700.
import { mkdir, chmod } from 'node:fs/promises';
import { hostname } from 'node:os';
import { join } from 'node:path';
import type { ClusterConfig } from '../controller/config.ts';
import { flags, type ControllerPaths } from '../controller/paths.ts';
import { httpsReady } from '../controller/probe.ts';
import type { Logger } from '../log/logger.ts';
import type { PkiPaths } from '../pki/index.ts';
import { Supervisor } from '../supervisor/process.ts';

export function hostUrl(host: string, port: number): string {
  return host.includes(':') ? `https://[${host}]:${port}` : `https://${host}:${port}`;
}

export function etcdClientUrl(cfg: ClusterConfig): string {
  return `https://127.0.0.1:${cfg.spec.storage.etcd.clientPort}`;
}

export function etcdArgs(cfg: ClusterConfig, paths: ControllerPaths, pki: PkiPaths, name = hostname()): string[] {
  const etcd = cfg.spec.storage.etcd;
  const peer = hostUrl(cfg.spec.api.address, etcd.peerPort);
  return flags({
    name,
    'data-dir': paths.etcdDataDir,
    'listen-client-urls': etcdClientUrl(cfg),
    'advertise-client-urls': etcdClientUrl(cfg),
    'listen-peer-urls': peer,
    'initial-advertise-peer-urls': peer,
    'initial-cluster': `${name}=${peer}`,
    'initial-cluster-state': 'new',
    'cert-file': pki.etcdServerCert,
    'key-file': pki.etcdServerKey,
    'trusted-ca-file': pki.etcdCaCert,
    'client-cert-auth': true,
    'peer-cert-file': pki.etcdPeerCert,
    'peer-key-file': pki.etcdPeerKey,
    'peer-trusted-ca-file': pki.etcdCaCert,
    'peer-client-cert-auth': true,
    'listen-metrics-urls': '',
    'log-level': 'warn',
  }, etcd.extraArgs).filter((a) => a !== '--listen-metrics-urls=');
}

export class EtcdComponent extends Supervisor {
  constructor(private readonly cfg: ClusterConfig, private readonly paths: ControllerPaths, pki: PkiPaths, log: Logger) {
    super({
      name: 'etcd',
      binary: join(paths.binDir, 'etcd'),
      args: etcdArgs(cfg, paths, pki),
      runDir: paths.runDir,
      log,
      ready: httpsReady({
        url: `${etcdClientUrl(cfg)}/health`,
        ca: pki.etcdCaCert,
        cert: pki.apiserverEtcdClientCert,
        key: pki.apiserverEtcdClientKey,
        expect: (status, body) => status === 200 && body.includes('"health":"true"'),
      }, 'etcd'),
    });
  }

  override async init(): Promise<void> {
    await mkdir(this.paths.etcdDataDir, { recursive: true, mode: 0o700 });
    await chmod(this.paths.etcdDataDir, 0o700);
    await super.init();
  }
}

// Managed etcd: client URL on loopback with mTLS, peer URL on the controller's address, data 0700.
// Knows nothing about the cluster config: the controller says where everything is.
import { chmod, mkdir } from 'node:fs/promises';
import { hostname } from 'node:os';
import { join } from 'node:path';
import { httpsUrl } from '../base/addresses.ts';
import { componentFlags } from '../base/argv.ts';
import type { ComponentContext } from '../base/component.ts';
import { httpsReady } from '../base/probe.ts';
import { Supervisor } from '../supervisor/process.ts';

export interface EtcdCerts {
  caCert: string;
  serverCert: string;
  serverKey: string;
  peerCert: string;
  peerKey: string;
  /** A client certificate the readiness probe authenticates with (kube-apiserver's). */
  clientCert: string;
  clientKey: string;
}

export interface EtcdOptions {
  binDir: string;
  runDir: string;
  dataDir: string;
  clientPort: number;
  /** Address the peer URL listens on and advertises. */
  peerHost: string;
  peerPort: number;
  certs: EtcdCerts;
  extraArgs?: Record<string, string>;
  /** Member name; defaults to the host name. */
  name?: string;
  /** Joining a running cluster as a learner: its --initial-cluster (then the state is "existing"). */
  joinCluster?: string;
  /** etcd's environment (the Go runtime's GOGC). */
  env?: Record<string, string>;
}

export function etcdClientUrl(clientPort: number): string {
  return httpsUrl('127.0.0.1', clientPort);
}

export function etcdArgs(o: EtcdOptions): string[] {
  const name = o.name ?? hostname();
  const peer = httpsUrl(o.peerHost, o.peerPort);
  const client = etcdClientUrl(o.clientPort);
  return componentFlags(
    {
      name,
      'data-dir': o.dataDir,
      'listen-client-urls': client,
      'advertise-client-urls': client,
      'listen-peer-urls': peer,
      'initial-advertise-peer-urls': peer,
      // Read on the first start only; a data dir that holds a member ignores both.
      'initial-cluster': o.joinCluster ?? `${name}=${peer}`,
      'initial-cluster-state': o.joinCluster ? 'existing' : 'new',
      'cert-file': o.certs.serverCert,
      'key-file': o.certs.serverKey,
      'trusted-ca-file': o.certs.caCert,
      'client-cert-auth': true,
      'peer-cert-file': o.certs.peerCert,
      'peer-key-file': o.certs.peerKey,
      'peer-trusted-ca-file': o.certs.caCert,
      'peer-client-cert-auth': true,
      'listen-metrics-urls': '',
      'log-level': 'warn',
    },
    o.extraArgs,
  ).filter((a) => a !== '--listen-metrics-urls=');
}

/** The program: its binary in <bin>, its pid file in <run>, its component's name. */
export const ETCD = 'etcd';

export class EtcdComponent extends Supervisor {
  constructor(private readonly o: EtcdOptions) {
    super({
      name: ETCD,
      binary: join(o.binDir, ETCD),
      args: etcdArgs(o),
      env: o.env,
      runDir: o.runDir,
      ready: httpsReady(
        {
          url: `${etcdClientUrl(o.clientPort)}/health`,
          ca: o.certs.caCert,
          cert: o.certs.clientCert,
          key: o.certs.clientKey,
          expect: (status, body) => status === 200 && body.includes('"health":"true"'),
        },
        ETCD,
      ),
    });
  }

  override async init(ctx?: ComponentContext): Promise<void> {
    await mkdir(this.o.dataDir, { recursive: true, mode: 0o700 });
    await chmod(this.o.dataDir, 0o700);
    await super.init(ctx);
  }
}

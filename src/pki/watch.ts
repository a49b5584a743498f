// The certificates a host holds, for `kctl status`: each one's expiry, when it is due for
// renewal (leaves only; CAs are rotated by the operator) and how often this process saw it
// renewed. Files are read again on every check; a renewal shows as a new serial number.
import { X509Certificate } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { errnoOf, messageOf } from '../base/errors.ts';
import type { PkiPaths } from './paths.ts';
import { readKubeconfig } from './kubeconfig.ts';
import { renewalTime } from './leaf.ts';

const YEAR_MS = 365 * 24 * 3600 * 1000;

/** One certificate to watch: a PEM file (its first certificate) or a kubeconfig's client certificate. */
export interface WatchedCertificate {
  /** How status names it, e.g. server.crt, admin.conf, kubelet-client. */
  name: string;
  file: string;
  kind: 'ca' | 'leaf' | 'kubeconfig';
  /** Who renews it, when not kctl's renewer (kubelet rotates its own through CSRs). */
  renewedBy?: string;
}

export interface CertificateStatus {
  name: string;
  kind: WatchedCertificate['kind'];
  file: string;
  subject?: string;
  serial?: string;
  notBefore?: string;
  notAfter?: string;
  /** When kctl's renewal rule makes it due (leaves and kubeconfigs kctl renews). */
  renewAt?: string;
  /** Renewals seen since this kctl started (a new serial number in the file). */
  renewals: number;
  renewedBy?: string;
  /** A CA that expires within a year: rotating a CA is planned work, not a restart. */
  warning?: string;
  /** The file could not be read or parsed. */
  error?: string;
}

const firstCertificate = (text: string): string | undefined =>
  /-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/.exec(text)?.[0];

async function readCertificate(w: WatchedCertificate): Promise<X509Certificate> {
  const text = await readFile(w.file, 'utf8');
  const pem = w.kind === 'kubeconfig' ? readKubeconfig(text, w.file).certPem : firstCertificate(text);
  if (!pem) throw new Error(`no certificate in ${w.file}`);
  return new X509Certificate(pem);
}

const commonName = (subject: string): string => /^CN=(.*)$/m.exec(subject)?.[1] ?? subject.replace(/\n/g, ',');

export class CertificateWatch {
  private readonly seen = new Map<string, { serial: string; renewals: number }>();
  private last = new Map<string, CertificateStatus>();

  constructor(private readonly certificates: WatchedCertificate[]) {}

  /** Reads every file again; a serial number that changed counts as a renewal. */
  async check(now = new Date()): Promise<CertificateStatus[]> {
    const out = (await Promise.all(this.certificates.map((w) => this.checkOne(w, now)))).flatMap((s) => s ?? []);
    this.last = new Map(out.map((s) => [s.name, s]));
    return out;
  }

  /** What the last check found, in the order given. */
  report(): CertificateStatus[] {
    return this.certificates.flatMap((w) => this.last.get(w.name) ?? []);
  }

  /** The earliest renewal time among the leaves and kubeconfigs this watch holds (of the last check). */
  nextRenewal(): Date | undefined {
    const times = this.report().flatMap((s) => (s.renewAt && !s.renewedBy ? [new Date(s.renewAt).getTime()] : []));
    return times.length ? new Date(Math.min(...times)) : undefined;
  }

  /** Null for a file that does not exist (a certificate this kind of host does not have). */
  private async checkOne(w: WatchedCertificate, now: Date): Promise<CertificateStatus | null> {
    const base = { name: w.name, kind: w.kind, file: w.file, renewedBy: w.renewedBy };
    let cert: X509Certificate;
    try {
      cert = await readCertificate(w);
    } catch (err) {
      if (errnoOf(err) === 'ENOENT') return null;
      return { ...base, renewals: this.seen.get(w.name)?.renewals ?? 0, error: messageOf(err) };
    }
    const prev = this.seen.get(w.name);
    const renewals = prev && prev.serial !== cert.serialNumber ? prev.renewals + 1 : (prev?.renewals ?? 0);
    this.seen.set(w.name, { serial: cert.serialNumber, renewals });
    const notBefore = new Date(cert.validFrom);
    const notAfter = new Date(cert.validTo);
    const expiresSoon = w.kind === 'ca' && notAfter.getTime() - now.getTime() < YEAR_MS;
    return {
      ...base,
      subject: commonName(cert.subject),
      serial: cert.serialNumber,
      notBefore: notBefore.toISOString(),
      notAfter: notAfter.toISOString(),
      renewAt: w.kind === 'ca' || w.renewedBy ? undefined : renewalTime(notBefore, notAfter).toISOString(),
      renewals,
      warning: expiresSoon ? `CA expires ${notAfter.toISOString()}, within a year: plan a CA rotation` : undefined,
    };
  }
}

/** Every certificate of a controller's PKI; those an api-only control plane lacks are skipped when checked. */
export function controllerCertificates(p: PkiPaths): WatchedCertificate[] {
  const at = (kind: WatchedCertificate['kind'], file: string): WatchedCertificate => ({
    name: file.slice(p.dir.length + 1),
    file,
    kind,
  });
  return [
    ...[p.caCert, p.frontProxyCaCert, p.etcdCaCert, p.addonsCaCert, p.kubeletServingCaCert].map((f) => at('ca', f)),
    ...[
      p.serverCert,
      p.kubeletClientCert,
      p.frontProxyClientCert,
      p.etcdServerCert,
      p.etcdPeerCert,
      p.apiserverEtcdClientCert,
      p.metricsServerCert,
      p.konnectivityCert,
    ].map((f) => at('leaf', f)),
    ...[p.adminConf, p.schedulerConf, p.controllerManagerConf].map((f) => at('kubeconfig', f)),
  ];
}

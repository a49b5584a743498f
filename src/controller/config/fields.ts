// The field types of ClusterConfig (config.ts): each checked as config load checks it, and where
// kube-apiserver can check the same, carrying a CEL rule for the KctlCluster CRD made from the
// schema (operator/crd.ts), so a bad object is refused with the field's path there too.
import { isIP } from 'node:net';
import { isAbsolute } from 'node:path';
import { z } from 'zod';
import { parseDuration } from '../../base/duration.ts';

/**
 * The same check as a CEL rule, for the KctlCluster CRD made from this schema (operator/crd.ts):
 * kube-apiserver then refuses a bad object with the field's path, as config load does.
 */
export const cel = (rule: string, message: string) => ({ 'x-kubernetes-validations': [{ rule, message }] });
/**
 * Bounds of what a CEL rule reads: kube-apiserver refuses a CRD whose rules could cost too much,
 * and estimates the cost from these (also sane limits for a config file).
 */
export const MAX = { address: 45, cidr: 43, name: 253, duration: 32, url: 2048, list: 100 } as const;
export const CEL_DURATION = "self.matches('^([0-9]+(\\\\.[0-9]+)?(ms|s|m|h|d))+$')";

export const port = (def: number) => z.number().int().min(1).max(65535).default(def);
export const cidr = (def: string) =>
  z
    .string()
    .max(MAX.cidr)
    .refine(isCidr, { message: 'expected a CIDR such as 10.96.0.0/12' })
    .meta(cel('isCIDR(self)', 'expected a CIDR such as 10.96.0.0/12'))
    .default(def);
export const extraArgs = z.record(z.string(), z.string()).default({});
/** A Go component's soft memory limit (its GOMEMLIMIT): the garbage collector works harder near it. */
export const memoryLimit = z
  .string()
  .regex(/^[1-9]\d*(KiB|MiB|GiB)$/, 'expected a size such as 150MiB (KiB, MiB or GiB)')
  .optional();
// Objects use prefault so that their fields' own defaults apply when the object is absent.

export function isCidr(s: string): boolean {
  const [ip, bits, ...rest] = s.split('/');
  if (rest.length || !ip || !bits || !/^\d+$/.test(bits)) return false;
  const v = isIP(ip);
  return v !== 0 && Number(bits) <= (v === 4 ? 32 : 128);
}

export const hostOrIp = z
  .string()
  .min(1)
  .max(MAX.name)
  .refine((s) => isIP(s) !== 0 || /^[a-zA-Z0-9]([a-zA-Z0-9.-]*[a-zA-Z0-9])?$/.test(s), {
    message: 'expected an IP address or DNS name',
  })
  .meta(
    cel(
      "isIP(self) || self.matches('^[a-zA-Z0-9]([a-zA-Z0-9.-]*[a-zA-Z0-9])?$')",
      'expected an IP address or DNS name',
    ),
  );

/** A duration (Go's form, 30s, 5m, 1h) of at least a second. */
export const duration = (message: string) =>
  z
    .string()
    .max(MAX.duration)
    .refine((s) => (parseDuration(s) ?? 0) >= 1000, { message })
    .meta(cel("self.matches('^([0-9]+(\\\\.[0-9]+)?(ms|s|m|h))+$') && duration(self) >= duration('1s')", message));
export const absolutePath = z.string().refine((s) => isAbsolute(s), { message: 'expected an absolute path' });
/** The shortest interval between scheduled backups: a backup of a large etcd takes a while. */
export const MIN_BACKUP_INTERVAL_MS = 60_000;
export const backupSchedule = z
  .string()
  .max(MAX.duration)
  .refine((s) => (parseDuration(s, { days: true }) ?? 0) >= MIN_BACKUP_INTERVAL_MS, {
    message: 'expected an interval of at least 1m, such as 6h, 30m or 1d',
  })
  .meta(cel(CEL_DURATION, 'expected an interval of at least 1m, such as 6h, 30m or 1d'));
/** A resource as kube-apiserver's EncryptionConfiguration names it: plural, with its group unless core. */
export const encryptedResource = z
  .string()
  .regex(
    /^[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9.-]*[a-z0-9])?)?$/,
    'expected a resource such as secrets or widgets.example.com (no wildcards)',
  )
  .refine((r) => !r.endsWith('.events.k8s.io') && !r.endsWith('.extensions'), {
    message: 'events and extensions cannot be encrypted by group; use events',
  });
export const unique = (list: string[]): boolean => new Set(list).size === list.length;

export const dnsLabel = /^[a-z0-9]([a-z0-9.-]*[a-z0-9])?$/;
/** An agent allowed CIDR, default-route and unowned-address claims: by node name or service account. */
export const trustedAgent = z
  .strictObject({
    node: z.string().max(MAX.name).regex(dnsLabel, 'expected a node name').optional(),
    serviceAccount: z
      .string()
      .max(2 * MAX.name)
      .regex(
        /^[a-z0-9]([a-z0-9-]*[a-z0-9])?\/[a-z0-9]([a-z0-9.-]*[a-z0-9])?$/,
        'expected NAMESPACE/NAME of a service account',
      )
      .optional(),
  })
  .refine((a) => (a.node === undefined) !== (a.serviceAccount === undefined), {
    message: 'set exactly one of node or serviceAccount',
  })
  .meta(cel('has(self.node) != has(self.serviceAccount)', 'set exactly one of node or serviceAccount'));

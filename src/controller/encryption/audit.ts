// The audit log: kube-apiserver writes one JSON line per request to <data-dir>/audit/audit.log,
// rotated by size and kept to a bounded number of files (spec.api.audit). On by default: on a
// control plane that untrusted nodes talk to, "who changed what" must be answerable later.
//
// kctl's default policy records every request at Metadata (who, what, when, the answer's code),
// RBAC changes with their request and response bodies, and nothing of a Secret, ConfigMap or
// token beyond its metadata, so no secret value ever lands in the log. Health probes and lease
// renewals by their own holders (nodes' heartbeats, the leader elections, each controller's lease,
// every few seconds) are left out: they change nothing an operator asks about and would be most
// of the log. Anyone else's read or write of a lease is recorded: workers follow the controllers'
// leases, so a lease written by someone else is worth finding later.
import { mkdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { parseDocument, stringify } from 'yaml';
import { errnoOf, UserError } from '../../base/errors.ts';
import { writeFileAtomic } from '../../base/fs.ts';
import type { ClusterConfig } from '../config/config.ts';
import { CONTROL_PLANE_USERS } from '../../pki/index.ts';
import { LEASE_NAMESPACE, NODE_LEASE_NAMESPACE } from '../../kube/controller-leases.ts';

export interface AuditPaths {
  dir: string;
  log: string;
  /** The policy kctl writes when spec.api.audit.policyFile is not set. */
  defaultPolicy: string;
}

export function auditPaths(dataDir: string): AuditPaths {
  return {
    dir: join(dataDir, 'audit'),
    log: join(dataDir, 'audit', 'audit.log'),
    defaultPolicy: join(dataDir, 'audit-policy.yaml'),
  };
}

const METADATA_ONLY = [
  { group: '', resources: ['secrets', 'configmaps', 'serviceaccounts/token'] },
  { group: 'authentication.k8s.io', resources: ['tokenreviews'] },
  {
    group: 'authorization.k8s.io',
    resources: ['subjectaccessreviews', 'selfsubjectaccessreviews', 'localsubjectaccessreviews'],
  },
  { group: 'certificates.k8s.io', resources: ['certificatesigningrequests'] },
];

const LEASES = [{ group: 'coordination.k8s.io', resources: ['leases'] }];
/** Who renews leases in kube-system every few seconds: the leader elections, and kctl's controllers (their own leases, also in kctl-controllers). */
const LEASE_HOLDERS = [CONTROL_PLANE_USERS.scheduler, CONTROL_PLANE_USERS.controllerManager, CONTROL_PLANE_USERS.admin];

/** kctl's default audit policy (audit.k8s.io/v1); the first rule that matches a request decides. */
export function defaultAuditPolicy(): object {
  return {
    apiVersion: 'audit.k8s.io/v1',
    kind: 'Policy',
    // One event per request (when the answer is complete; a watch also when it starts), not two.
    omitStages: ['RequestReceived'],
    rules: [
      { level: 'None', nonResourceURLs: ['/healthz*', '/livez*', '/readyz*', '/version'] },
      { level: 'None', verbs: ['get', 'update'], namespaces: ['kube-node-lease'], resources: LEASES },
      {
        level: 'None',
        verbs: ['get', 'update'],
        users: LEASE_HOLDERS,
        namespaces: [LEASE_NAMESPACE, NODE_LEASE_NAMESPACE],
        resources: LEASES,
      },
      // Bodies of these hold secret values or credentials: metadata only, whoever asks.
      { level: 'Metadata', resources: METADATA_ONLY },
      // Who granted what to whom, with the rules themselves.
      { level: 'RequestResponse', resources: [{ group: 'rbac.authorization.k8s.io' }] },
      { level: 'Metadata' },
    ],
  };
}

/** Before kube-apiserver starts: the log's directory (0700) and kctl's default policy, unless the operator gives one. */
export async function prepareAudit(cfg: ClusterConfig, dataDir: string): Promise<void> {
  const audit = cfg.spec.api.audit;
  if (!audit.enabled) return;
  const paths = auditPaths(dataDir);
  await mkdir(paths.dir, { recursive: true, mode: 0o700 });
  if (audit.policyFile !== undefined) return;
  const text = `# kctl's default audit policy; set spec.api.audit.policyFile to use your own.\n${stringify(defaultAuditPolicy())}`;
  if ((await readFile(paths.defaultPolicy, 'utf8').catch(() => null)) !== text)
    await writeFileAtomic(paths.defaultPolicy, text, 0o644);
}

/** The operator's policy file, checked before anything is written: what kube-apiserver would refuse is named in one line. */
export async function checkAuditPolicy(cfg: ClusterConfig): Promise<void> {
  const file = cfg.spec.api.audit.policyFile;
  if (!cfg.spec.api.audit.enabled || file === undefined) return;
  const where = `spec.api.audit.policyFile ${file}`;
  let text: string;
  try {
    text = await readFile(file, 'utf8');
  } catch (err) {
    throw new UserError(
      `cannot read ${where}: ${errnoOf(err) ?? 'unreadable'}; give a readable audit policy file or remove the field`,
    );
  }
  const doc = parseDocument(text);
  if (doc.errors.length) throw new UserError(`${where} is not valid YAML: ${doc.errors[0]!.message.split('\n')[0]}`);
  const policy = doc.toJS() as { apiVersion?: unknown; kind?: unknown; rules?: unknown } | null;
  if (policy?.kind !== 'Policy' || policy.apiVersion !== 'audit.k8s.io/v1' || !Array.isArray(policy.rules))
    throw new UserError(
      `${where} is not an audit policy: expected apiVersion audit.k8s.io/v1, kind Policy and a list of rules`,
    );
}

/** kube-apiserver's audit flags (prepareAudit has written or checked the policy file). */
export function auditFlags(cfg: ClusterConfig, dataDir: string): Record<string, string | number> {
  const audit = cfg.spec.api.audit;
  if (!audit.enabled) return {};
  return {
    'audit-policy-file': audit.policyFile ?? auditPaths(dataDir).defaultPolicy,
    'audit-log-path': auditPaths(dataDir).log,
    'audit-log-format': 'json',
    'audit-log-maxsize': audit.maxSize,
    'audit-log-maxbackup': audit.maxBackups,
  };
}

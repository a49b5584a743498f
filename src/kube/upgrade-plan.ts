// The upgrade plan in the API, and what each member of the cluster says about its own upgrade.
// The plan is one ConfigMap, kube-system/kctl-upgrade-plan (not a CRD: nothing to install
// before the first upgrade, and an old kctl can read it). `kctl upgrade plan` writes it; every
// controller and node reads it (nodes through an RBAC rule naming this one ConfigMap; they can
// write nothing in it). A member reports its running version and its upgrade state in
// annotations on what it already owns: a controller on its Lease, a node on its Node object, so a
// hostile node can lie about itself and about nothing else.
import type { Release } from '../base/version.ts';
import { KubeApiError, type KubeClient } from './client.ts';

export type { Release };

export const UPGRADE_NAMESPACE = 'kube-system';
export const UPGRADE_PLAN_NAME = 'kctl-upgrade-plan';
export const UPGRADE_PLAN_PATH = `/api/v1/namespaces/${UPGRADE_NAMESPACE}/configmaps/${UPGRADE_PLAN_NAME}`;
/** On a controller's Lease and on a Node: the Release it runs, `<kctl>/<Kubernetes>/<etcd>`. */
export const VERSION_ANNOTATION = 'kctl.dev/version';
/** On a controller's Lease and on a Node: its MemberUpgrade, JSON. */
export const UPGRADE_ANNOTATION = 'kctl.dev/upgrade';

export interface UpgradeTarget extends Release {
  /** sha256 of the executable, hex. */
  sha256: string;
  /** Its size in bytes. */
  size: number;
}

export type PlanState = 'active' | 'done' | 'stopped';

export interface UpgradePlan {
  target: UpgradeTarget;
  /** When it was written (ISO). */
  created: string;
  /** Nodes cordon and drain before they swap (spec.upgrade.drain of the controller that wrote it). */
  drain: boolean;
  /** How long a drain may take before the node upgrades anyway (respecting no PDB past it: it stops). */
  drainTimeoutS: number;
  /** At most this many nodes upgrade at once. */
  maxUnavailable: number;
  /** A member not ready at the new version within this rolls back. */
  readyTimeoutS: number;
  state: PlanState;
  /** The controllers (their lease names) when the plan was made: each must run the target before the plan is done. */
  controllers: string[];
  /** The nodes whose turn it is, each with when it was let go (ISO): at most maxUnavailable. */
  admitted: Record<string, string>;
  /** Why it stopped, or who finished it. */
  reason?: string;
  resourceVersion?: string;
}

/** A member's upgrade, as it reports it (annotation UPGRADE_ANNOTATION). */
export type MemberState = 'waiting' | 'downloading' | 'draining' | 'restarting' | 'done' | 'rolled back' | 'failed';
export const MEMBER_STATES: readonly MemberState[] = [
  'waiting',
  'downloading',
  'draining',
  'restarting',
  'done',
  'rolled back',
  'failed',
];

export interface MemberUpgrade {
  /** The plan's target version this state is about. */
  target: string;
  state: MemberState;
  reason?: string;
  /** Downloaded bytes of the executable, while downloading. */
  bytes?: number;
  /** When the state was reported (ISO). */
  at: string;
}

export const releaseString = (r: Release): string => `${r.version}/${r.kubernetes}/${r.etcd}`;

/** A VERSION_ANNOTATION's value, or undefined if it is not one. */
export function parseReleaseString(s: string | undefined): Release | undefined {
  const m = /^([^/\s]+)\/(v\d+\.\d+\.\d+[^/\s]*)\/(v\d+\.\d+\.\d+[^/\s]*)$/.exec(s ?? '');
  return m ? { version: m[1]!, kubernetes: m[2]!, etcd: m[3]! } : undefined;
}

/** An UPGRADE_ANNOTATION's value, or undefined if absent or not one. */
export function parseMemberUpgrade(s: string | undefined): MemberUpgrade | undefined {
  if (!s) return undefined;
  try {
    const v = JSON.parse(s) as Partial<MemberUpgrade>;
    if (typeof v.target !== 'string' || !MEMBER_STATES.includes(v.state as MemberState) || typeof v.at !== 'string')
      return undefined;
    return {
      target: v.target,
      state: v.state as MemberState,
      at: v.at,
      ...(typeof v.reason === 'string' ? { reason: v.reason } : {}),
      ...(typeof v.bytes === 'number' ? { bytes: v.bytes } : {}),
    };
  } catch {
    return undefined;
  }
}

interface ConfigMap {
  metadata: { name: string; resourceVersion?: string };
  data?: Record<string, string>;
}

const FIELDS = [
  'version',
  'kubernetes',
  'etcd',
  'sha256',
  'size',
  'created',
  'drain',
  'drainTimeoutS',
  'maxUnavailable',
  'readyTimeoutS',
  'state',
];

export function planToConfigMap(p: UpgradePlan): ConfigMap & { apiVersion: string; kind: string } {
  const t = p.target;
  return {
    apiVersion: 'v1',
    kind: 'ConfigMap',
    metadata: { name: UPGRADE_PLAN_NAME, ...(p.resourceVersion ? { resourceVersion: p.resourceVersion } : {}) },
    data: {
      version: t.version,
      kubernetes: t.kubernetes,
      etcd: t.etcd,
      sha256: t.sha256,
      size: String(t.size),
      created: p.created,
      drain: String(p.drain),
      drainTimeoutS: String(p.drainTimeoutS),
      maxUnavailable: String(p.maxUnavailable),
      readyTimeoutS: String(p.readyTimeoutS),
      state: p.state,
      controllers: p.controllers.join(','),
      admitted: JSON.stringify(p.admitted),
      ...(p.reason ? { reason: p.reason } : {}),
    },
  };
}

function parseAdmitted(text: string | undefined, bad: (field: string, what: string) => Error): Record<string, string> {
  if (!text) return {};
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch {
    throw bad('admitted', 'is not JSON');
  }
  if (typeof v !== 'object' || v === null || Array.isArray(v) || !Object.values(v).every((t) => typeof t === 'string'))
    throw bad('admitted', 'is not an object of node names and times');
  return v as Record<string, string>;
}

/** The plan object exists but is not a plan (edited by hand, or written by something else). */
export class UnreadablePlanError extends Error {}

export function planFromConfigMap(cm: ConfigMap): UpgradePlan {
  const d = cm.data ?? {};
  const bad = (field: string, what: string) =>
    new UnreadablePlanError(
      `ConfigMap ${UPGRADE_NAMESPACE}/${UPGRADE_PLAN_NAME}: ${field} ${what}; run kctl upgrade plan again to replace it`,
    );
  for (const f of FIELDS) if (d[f] === undefined) throw bad(f, 'is missing');
  const int = (f: string, min: number): number => {
    const n = Number(d[f]);
    if (!Number.isInteger(n) || n < min) throw bad(f, `is "${d[f]}", not an integer >= ${min}`);
    return n;
  };
  if (!/^[0-9a-f]{64}$/.test(d.sha256!)) throw bad('sha256', 'is not 64 hex digits');
  // Read strictly: a hand-edited "yes" must not quietly turn the drain off.
  if (d.drain !== 'true' && d.drain !== 'false') throw bad('drain', `is "${d.drain}", not true or false`);
  const state = d.state as PlanState;
  if (!['active', 'done', 'stopped'].includes(state))
    throw bad('state', `is "${d.state}", not active, done or stopped`);
  return {
    target: { version: d.version!, kubernetes: d.kubernetes!, etcd: d.etcd!, sha256: d.sha256!, size: int('size', 1) },
    created: d.created!,
    drain: d.drain === 'true',
    drainTimeoutS: int('drainTimeoutS', 0),
    maxUnavailable: int('maxUnavailable', 1),
    readyTimeoutS: int('readyTimeoutS', 1),
    state,
    controllers: (d.controllers ?? '').split(',').filter(Boolean),
    admitted: parseAdmitted(d.admitted, bad),
    ...(d.reason ? { reason: d.reason } : {}),
    ...(cm.metadata.resourceVersion ? { resourceVersion: cm.metadata.resourceVersion } : {}),
  };
}

/** The plan, or null when there is none. */
export async function readUpgradePlan(kube: KubeClient, signal?: AbortSignal): Promise<UpgradePlan | null> {
  const cm = await kube.find<ConfigMap>(UPGRADE_PLAN_PATH, signal);
  return cm ? planFromConfigMap(cm) : null;
}

/** Writes the plan: creates it, or replaces it (compare-and-swap on its resourceVersion when it has one). */
export async function writeUpgradePlan(kube: KubeClient, plan: UpgradePlan): Promise<UpgradePlan> {
  const body = planToConfigMap(plan);
  try {
    const out = await kube.request<ConfigMap>('PUT', UPGRADE_PLAN_PATH, body);
    return planFromConfigMap(out);
  } catch (err) {
    if (!(err instanceof KubeApiError && err.status === 404) || plan.resourceVersion) throw err;
    const out = await kube.request<ConfigMap>('POST', `/api/v1/namespaces/${UPGRADE_NAMESPACE}/configmaps`, body);
    return planFromConfigMap(out);
  }
}

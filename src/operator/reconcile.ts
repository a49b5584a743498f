// One KctlCluster brought to what its spec says, and its status written: its database (made on
// the PostgreSQL its datastore Secret names), its CAs and keys (made once, kept in a Secret,
// never made again for a cluster that had them), its config, Deployment and Service (applied
// every time: a changed version or replica count rolls the pods), an admin kubeconfig Secret,
// and conditions that say what is missing in one line.
import { createHash } from 'node:crypto';
import type { Logger } from '../base/log.ts';
import { messageOf } from '../base/errors.ts';
import type { Release } from '../base/version.ts';
import type { KubeClient } from '../kube/client.ts';
import { resourcePath } from '../kube/paths.ts';
import { KCTL_CLUSTER } from './crd.ts';
import { keepCredentials } from './credentials.ts';
import { ClusterDatastore, databaseOf } from './datastore.ts';
import { clusterDoorKey, clusterDoorNames, doorKey, type ManagementDoor } from './door-keys.ts';
import { ensureExposure, type Exposure } from './exposure.ts';
import { accessFrom, hostedKubernetes, hostedNodes, type HostedAccess } from './hosted.ts';
import {
  behindDoor,
  CLUSTER_LABEL,
  deployment,
  DOOR_KEY_ENTRY,
  disruptionBudget,
  hostedConfig,
  isFull,
  olderFirst,
  ownedNames,
  secret,
  secretPath,
  type KctlCluster,
} from './objects.ts';
import { adminKubeconfig, caNotAfter, newSharedPki } from './pki.ts';
import { rolling, rollProblem, type RunningVersions } from './versions.ts';

const FIELD_MANAGER = { fieldManager: 'kctl-operator', force: true };
/** Held on a KctlCluster until its pods are gone and its database dropped. */
export const DATABASE_FINALIZER = 'kctl.dev/database';

interface Condition {
  type: 'Ready' | 'Progressing' | 'Degraded';
  status: 'True' | 'False';
  reason: string;
  message: string;
}

/** What one reconcile found: the conditions and what it learnt. */
interface Outcome {
  conditions: Condition[];
  endpoint?: string;
  version?: string;
  kubernetesVersion?: string;
  caNotAfter?: string;
  kubeconfigSecret?: string;
  nodes?: { total: number; ready: number };
  /** Control-plane pods: how many the spec wants, how many are ready. */
  pods?: { wanted: number; ready: number };
}

interface SecretObject {
  data?: Record<string, string>;
}

const degraded = (reason: string, message: string): Outcome => ({
  conditions: [
    { type: 'Ready', status: 'False', reason, message },
    { type: 'Degraded', status: 'True', reason, message },
  ],
});

const waiting = (reason: string, message: string): Outcome => ({
  conditions: [
    { type: 'Ready', status: 'False', reason, message },
    { type: 'Progressing', status: 'True', reason, message },
  ],
});

/** JSON with every object's keys sorted: the API server hands a status back in its own key order. */
function canonical(v: unknown): string {
  return JSON.stringify(v, (_k, x: unknown) =>
    x && typeof x === 'object' && !Array.isArray(x)
      ? Object.fromEntries(Object.entries(x as Record<string, unknown>).sort(([a], [b]) => a.localeCompare(b)))
      : x,
  );
}

export class ClusterReconciler {
  private readonly datastore: ClusterDatastore;
  private key: Promise<Buffer> | undefined;

  constructor(
    private readonly kube: KubeClient,
    private readonly log: Logger,
    private readonly o: {
      /** The management cluster's front door, when the operator has one. */
      door?: ManagementDoor;
      /** Every KctlCluster as the operator's watch holds them (whose names the door has). */
      clusters: () => KctlCluster[];
      /** This kctl's release: the Kubernetes a roll to its own version brings (versions.ts). */
      release: Release;
    },
  ) {
    this.datastore = new ClusterDatastore(kube, FIELD_MANAGER);
  }

  /** Reconciles one cluster and writes its status; never throws (a failure is its status). */
  async reconcile(c: KctlCluster): Promise<void> {
    try {
      if (c.metadata.deletionTimestamp) return await this.remove(c);
      if (!c.metadata.finalizers?.includes(DATABASE_FINALIZER)) {
        // Before anything is made: whatever is made is then cleaned up, its database included.
        const finalizers = [...(c.metadata.finalizers ?? []), DATABASE_FINALIZER];
        await this.kube.request('PATCH', this.clusterPath(c), {
          metadata: { finalizers, resourceVersion: c.metadata.resourceVersion },
        });
        return;
      }
    } catch (err) {
      // A conflict (the object changed meanwhile) or a database that is not reachable: the next run tries again.
      this.log.warn(
        { cluster: `${c.metadata.namespace}/${c.metadata.name}`, err: messageOf(err) },
        'could not update a KctlCluster',
      );
      return;
    }
    let outcome: Outcome;
    try {
      outcome = await this.bring(c);
    } catch (err) {
      outcome = degraded('ReconcileFailed', messageOf(err));
    }
    const ready = outcome.conditions.find((x) => x.type === 'Ready');
    const before = (c.status?.conditions as Condition[] | undefined)?.find((x) => x.type === 'Ready');
    if (ready && (ready.reason !== before?.reason || ready.status !== before?.status))
      this.log.info({ cluster: `${c.metadata.namespace}/${c.metadata.name}`, reason: ready.reason }, ready.message);
    await this.writeStatus(c, outcome).catch((err: unknown) =>
      this.log.warn({ cluster: c.metadata.name, err: messageOf(err) }, 'could not write the status'),
    );
  }

  private async bring(c: KctlCluster): Promise<Outcome> {
    const names = ownedNames(c.metadata.name);
    // kctl's upgrade rules: never back (its data may be written in a newer form already), one
    // Kubernetes minor at a time.
    const refused = rollProblem(c.spec.version, (c.status ?? {}) as RunningVersions, this.o.release);
    if (refused) {
      // Nothing is applied: the pods keep serving as they were, and Ready says what it said.
      const ready = (c.status?.conditions as Condition[] | undefined)?.find((x) => x.type === 'Ready');
      return { conditions: [...(ready ? [ready] : []), { type: 'Degraded', status: 'True', ...refused }] };
    }
    // Before anything is made for it: a cluster refused its name at the door gets no database or CA.
    const taken = this.doorNameTaken(c);
    if (taken) return degraded('FrontDoorNameTaken', taken);
    const source = await this.datastore.adminSource(c);
    if ('missing' in source) return degraded('NoDatastore', source.missing);

    // The CAs: made once, with the database. A cluster that had them (its status says so) never
    // gets new ones, and a database that holds data never gets a new CA.
    const existing = await this.kube.find<SecretObject>(secretPath(c, names.pki));
    if (!existing?.data && c.status?.caNotAfter)
      return degraded(
        'PkiSecretMissing',
        `Secret ${names.pki} with the cluster's CAs and keys is gone; restore it (kctl pki save-shared of a backup): a new CA would not open the cluster's data`,
      );
    const serving = (c.status?.conditions as Condition[] | undefined)?.some(
      (x) => x.type === 'Ready' && x.status === 'True',
    );
    const { dataSource, inUse } = await this.datastore.dataSource(c, source.admin, !existing?.data || !serving);
    let shared: Record<string, Buffer>;
    if (existing?.data) {
      shared = Object.fromEntries(Object.entries(existing.data).map(([k, v]) => [k, Buffer.from(v, 'base64')]));
    } else {
      if (inUse)
        return degraded(
          'DatabaseInUse',
          `database ${databaseOf(c)} holds another control plane's data; drop it or name another datastore`,
        );
      shared = await newSharedPki(this.log, { full: isFull(c) });
      await this.kube.apply(secret(c, names.pki, shared), FIELD_MANAGER);
    }

    const exposure = await ensureExposure(this.kube, c, FIELD_MANAGER, this.o.door);
    if ('waiting' in exposure) return waiting('NoAddress', exposure.waiting);
    const config = hostedConfig(c, { ...exposure, dataSource });
    // Behind the door: the key its pods check the door's PROXY headers with.
    const doorKey = exposure.door ? clusterDoorKey(await this.doorKey(), c) : '';
    const doorKeyEntry = doorKey && { [DOOR_KEY_ENTRY]: doorKey };
    await this.kube.apply(secret(c, names.config, { 'kctl.yaml': config, ...doorKeyEntry }), FIELD_MANAGER);
    // A new door key rolls the pods too: they read it once, from a file that does not follow the Secret.
    const configHash = createHash('sha256').update(config).update(doorKey).digest('hex').slice(0, 16);
    const dep = await this.kube.apply(deployment(c, { ports: exposure.ports, configHash }), FIELD_MANAGER);
    await this.kube.apply(disruptionBudget(c), FIELD_MANAGER);

    const notAfter = caNotAfter(shared['ca.crt']!.toString());
    const out: Outcome = { conditions: [], caNotAfter: notAfter.toISOString(), endpoint: exposure.endpoint };
    const admin = await this.kubeconfigFor(c, shared, exposure.server, notAfter);
    out.kubeconfigSecret = admin.name;
    const access = admin.access;
    const { status, metadata } = dep as {
      metadata?: { generation?: number };
      status?: { observedGeneration?: number; replicas?: number; readyReplicas?: number; updatedReplicas?: number };
    };
    const want = c.spec.replicas ?? 1;
    const readyPods = status?.readyReplicas ?? 0;
    const ready = readyPods >= 1;
    // Rolled as `kubectl rollout status` says: the Deployment's controller saw this spec, and
    // every pod it counts is of this spec and ready (no pod of the previous version left).
    const updated = status?.updatedReplicas ?? 0;
    const onlyThisSpec =
      (status?.observedGeneration ?? 0) >= (metadata?.generation ?? 1) &&
      updated >= want &&
      (status?.replicas ?? 0) <= updated;
    const rolled = onlyThisSpec && readyPods >= want;
    out.pods = { wanted: want, ready: readyPods };
    out.conditions.push(
      ready
        ? {
            type: 'Ready',
            status: 'True',
            reason: 'ApiServing',
            message: `${readyPods} of ${want} control-plane pods ready`,
          }
        : {
            type: 'Ready',
            status: 'False',
            reason: 'PodsStarting',
            message: `no control-plane pod ready yet (${want} wanted)`,
          },
      rolled
        ? { type: 'Progressing', status: 'False', reason: 'Rolled', message: `every pod runs kctl ${c.spec.version}` }
        : onlyThisSpec
          ? { type: 'Progressing', status: 'True', reason: 'Scaling', message: `${readyPods} of ${want} pods ready` }
          : {
              type: 'Progressing',
              status: 'True',
              reason: 'Rolling',
              message: rolling(c.spec.version, this.o.release),
            },
      { type: 'Degraded', status: 'False', reason: 'AsSpecified', message: 'as its spec says' },
    );
    // The versions it runs, written together once every pod runs this spec.
    const kubernetes = rolled ? await this.kubernetesOf(c, access) : undefined;
    if (kubernetes) Object.assign(out, { version: c.spec.version, kubernetesVersion: kubernetes });
    if (ready && isFull(c)) out.nodes = await this.nodesOf(c, access);
    // Also with no entries left: the Secrets of entries taken out go then.
    const failed = ready ? await this.credentialsOf(c, access) : [];
    if (failed.length > 0)
      out.conditions[out.conditions.findIndex((x) => x.type === 'Degraded')] = {
        type: 'Degraded',
        status: 'True',
        reason: 'CredentialsNotKept',
        message: `kept credentials: ${failed.join('; ')}`,
      };
    return out;
  }

  /**
   * The admin kubeconfig Secret, made once per endpoint (again when it no longer reads as one):
   * its name and a client for the hosted API from it.
   */
  private async kubeconfigFor(
    c: KctlCluster,
    shared: Record<string, Buffer>,
    server: Exposure['server'],
    notAfter: Date,
  ): Promise<{ name: string; access: HostedAccess }> {
    const name = ownedNames(c.metadata.name).kubeconfig;
    const where = `Secret ${name}`;
    const have = await this.kube.find<SecretObject>(secretPath(c, name));
    const text = have?.data?.kubeconfig && Buffer.from(have.data.kubeconfig, 'base64').toString();
    const names = (t: string) =>
      t.includes(`server: ${server.url}`) &&
      (server.serverName ? t.includes(`tls-server-name: ${server.serverName}`) : !t.includes('tls-server-name'));
    if (text && names(text)) {
      try {
        return { name, access: accessFrom(text, where) };
      } catch (err) {
        this.log.warn({ cluster: c.metadata.name, err: messageOf(err) }, `${where} is not a kubeconfig: made again`);
      }
    }
    const kubeconfig = await adminKubeconfig(shared, server, notAfter);
    await this.kube.apply(secret(c, name, { kubeconfig }), FIELD_MANAGER);
    return { name, access: accessFrom(kubeconfig, where) };
  }

  /** Why cluster `c` cannot have its name at the front door (an older cluster of that name is behind it), or undefined. */
  private doorNameTaken(c: KctlCluster): string | undefined {
    const { door } = this.o;
    if (!behindDoor(c) || !door) return undefined;
    const same = this.o
      .clusters()
      .filter((x) => behindDoor(x) && x.metadata.name === c.metadata.name && !x.metadata.deletionTimestamp);
    const owner = olderFirst(same)[0];
    if (!owner || owner.metadata.uid === c.metadata.uid) return undefined;
    return `the front door name ${clusterDoorNames(c, door.domain).api} is KctlCluster ${owner.metadata.namespace}/${owner.metadata.name}'s (older); rename this cluster or pick another exposure`;
  }

  /** The door key, read (or made) once per run over the clusters. */
  private async doorKey(): Promise<Buffer> {
    this.key ??= doorKey(this.kube, true).then((k) => k!);
    return this.key.catch((err: unknown) => {
      this.key = undefined;
      throw err;
    });
  }

  /** Keeps spec.serviceAccounts' credentials; what failed, one line each. */
  private async credentialsOf(c: KctlCluster, access: HostedAccess): Promise<string[]> {
    try {
      return await keepCredentials(this.kube, access, c, FIELD_MANAGER);
    } catch (err) {
      return [messageOf(err)];
    }
  }

  /** The Kubernetes its kube-apiserver runs (read again only after a roll); undefined if unanswered. */
  private async kubernetesOf(c: KctlCluster, access: HostedAccess): Promise<string | undefined> {
    const known = c.status?.kubernetesVersion as string | undefined;
    if (known && c.status?.version === c.spec.version) return known;
    return hostedKubernetes(access.client).catch((err: unknown) => {
      this.log.debug({ cluster: c.metadata.name, err: messageOf(err) }, 'could not read its version');
      return undefined;
    });
  }

  /** The hosted cluster's Nodes; what the status said before when its API does not answer now. */
  private async nodesOf(c: KctlCluster, access: HostedAccess): Promise<Outcome['nodes']> {
    try {
      return await hostedNodes(access.client);
    } catch (err) {
      this.log.debug({ cluster: c.metadata.name, err: messageOf(err) }, 'could not count its nodes');
      const s = c.status as { nodes?: number; nodesReady?: number } | undefined;
      return s?.nodes === undefined ? undefined : { total: s.nodes, ready: s.nodesReady ?? 0 };
    }
  }

  private clusterPath(c: KctlCluster, subresource?: string): string {
    return resourcePath({
      apiVersion: `${KCTL_CLUSTER.group}/${KCTL_CLUSTER.version}`,
      resource: KCTL_CLUSTER.plural,
      namespace: c.metadata.namespace,
      name: c.metadata.name,
      subresource,
    });
  }

  /**
   * A deleted cluster: its Deployment goes first, then, once none of its pods runs, its database;
   * then the finalizer, and Kubernetes' garbage collector removes the rest it owned.
   */
  private async remove(c: KctlCluster): Promise<void> {
    if (!c.metadata.finalizers?.includes(DATABASE_FINALIZER)) return;
    const ns = c.metadata.namespace;
    const name = ownedNames(c.metadata.name).workload;
    await this.kube.remove(resourcePath({ apiVersion: 'apps/v1', resource: 'deployments', namespace: ns, name }));
    const pods = await this.kube.list(resourcePath({ apiVersion: 'v1', resource: 'pods', namespace: ns }), {
      labelSelector: `${CLUSTER_LABEL}=${c.metadata.name}`,
    });
    if (pods.items.length > 0) return; // the next run looks again
    if (await this.datastore.drop(c))
      this.log.info(
        { cluster: `${ns}/${c.metadata.name}`, database: databaseOf(c) },
        'dropped the database and role of a deleted cluster',
      );
    await this.kube.request('PATCH', this.clusterPath(c), {
      metadata: {
        finalizers: c.metadata.finalizers.filter((f) => f !== DATABASE_FINALIZER),
        resourceVersion: c.metadata.resourceVersion,
      },
    });
  }

  private async writeStatus(c: KctlCluster, o: Outcome): Promise<void> {
    const now = new Date().toISOString();
    const before = (c.status?.conditions ?? []) as (Condition & { lastTransitionTime?: string })[];
    const conditions = o.conditions.map((x) => {
      const prev = before.find((b) => b.type === x.type);
      const since = prev && prev.status === x.status ? prev.lastTransitionTime : now;
      return { ...x, lastTransitionTime: since, observedGeneration: c.metadata.generation };
    });
    const path = this.clusterPath(c, 'status');
    const status = {
      conditions,
      observedGeneration: c.metadata.generation,
      ...(o.endpoint ? { endpoint: o.endpoint } : {}),
      ...(o.version ? { version: o.version } : {}),
      ...(o.kubernetesVersion ? { kubernetesVersion: o.kubernetesVersion } : {}),
      ...(o.caNotAfter ? { caNotAfter: o.caNotAfter } : {}),
      ...(o.kubeconfigSecret ? { kubeconfigSecret: o.kubeconfigSecret } : {}),
      ...(o.nodes ? { nodes: o.nodes.total, nodesReady: o.nodes.ready } : {}),
      ...(o.pods ? { replicas: o.pods.wanted, readyReplicas: o.pods.ready } : {}),
    };
    // A merge patch: what this run did not learn (a failed run knows no endpoint) stays as it was;
    // caNotAfter above all, which says the cluster had its CAs. Unchanged: no write (every
    // cluster is looked at every few seconds).
    if (canonical({ ...(c.status ?? {}), ...status }) === canonical(c.status ?? {})) return;
    await this.kube.request('PATCH', path, { status });
  }
}

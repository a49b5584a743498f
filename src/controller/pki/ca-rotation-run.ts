// `kctl pki rotate-ca`: moves the cluster to a new CA without a restart or a node rejoining.
// Each phase (src/pki/ca-rotation.ts) goes to the Secret, then the command waits until every live
// controller (its lease) and every node (its Node annotation) uses that phase's bundle:
//   trust  every trust bundle holds the old and the new CA; the old one still signs; kctl's
//          add-ons (CoreDNS, metrics-server) are restarted so their pods mount both
//   sign   the new CA signs: controllers reissue their leaves and kubeconfigs, nodes their client
//          certificate (a CSR with their own credentials, signed by kube-controller-manager)
//   drop   the old CA leaves every bundle
// The phase is kept in the API, so an interrupted rotation resumes when the command runs again.
import { existsSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { X509Certificate } from 'node:crypto';
import { UserError } from '../../base/errors.ts';
import { pollFor, pollWithin } from '../../base/wait.ts';
import type { KubeClient } from '../../kube/client.ts';
import {
  CA_BUNDLE_ANNOTATION,
  CONTROLLER_LEASE_LABEL,
  LEASES_PATH,
  liveControllers,
  type Lease,
} from '../../kube/controller-leases.ts';
import {
  bundleHash,
  CA_ROTATION_PHASES,
  caFilesFor,
  newClusterCa,
  splitCertificates,
  vouchFor,
  type CaRotationPhase,
  type PkiPaths,
} from '../../pki/index.ts';
import {
  CA_ROTATION_NAMESPACE,
  CA_ROTATION_SECRET,
  deleteCaRotation,
  readCaRotation,
  writeCaRotation,
} from './ca-rotation.ts';

export interface RotateCaOptions {
  kube: KubeClient;
  /** This controller's PKI: the current CA comes from here, and an api-only control plane (no leases) is checked here. */
  pki: PkiPaths;
  /** A full cluster has nodes to wait for; an api-only control plane has none. */
  nodes: boolean;
  /** How long each phase may wait for the controllers and nodes. */
  timeoutMs: number;
  progress: (line: string) => void;
  /**
   * Runs before the old CA is dropped, with the new CA's key and the bundle of both: what the old
   * CA signed and must outlive it (the encryption key set) is signed again with the new one.
   */
  beforeDrop?: (signing: { caKey: string; caBundle: string }) => Promise<void>;
}

export interface RotateCaResult {
  oldCa: string;
  newCa: string;
  controllers: string[];
  nodes: string[];
}

const WHAT: Record<CaRotationPhase, string> = {
  trust: 'both CAs trusted',
  sign: 'new CA signs, leaves reissued',
  drop: 'old CA dropped',
};

interface Node {
  metadata: { name: string; annotations?: Record<string, string> };
}

/** Who does not use `bundle` yet: every live controller (by lease; without leases this one) and every node. */
async function lagging(o: RotateCaOptions, bundle: string): Promise<{ all: string[]; behind: string[] }> {
  const leases = await o.kube.list<Lease>(LEASES_PATH, { labelSelector: `${CONTROLLER_LEASE_LABEL}=true` });
  const live = liveControllers(leases.items);
  const controllers = live.length
    ? live.map((c) => ({ name: c.name, bundle: c.caBundle }))
    : [{ name: 'this controller', bundle: bundleHash(await readFile(o.pki.caCert, 'utf8')) }];
  const nodes = o.nodes
    ? (await o.kube.list<Node>('/api/v1/nodes')).items.map((n) => ({
        name: `node ${n.metadata.name}`,
        bundle: n.metadata.annotations?.[CA_BUNDLE_ANNOTATION],
      }))
    : [];
  const all = [...controllers, ...nodes];
  return { all: all.map((x) => x.name), behind: all.filter((x) => x.bundle !== bundle).map((x) => x.name) };
}

const POLL_MS = 2_000;

async function waitFor(o: RotateCaOptions, bundle: string, what: string): Promise<string[]> {
  let said = '';
  let now = { all: [] as string[], behind: [] as string[] };
  await pollWithin(
    o.timeoutMs,
    POLL_MS,
    async () => {
      now = await lagging(o, bundle);
      if (now.behind.length === 0) return true;
      const line = `${what}: waiting for ${now.behind.join(', ')} (${now.all.length - now.behind.length}/${now.all.length} done)`;
      if (line !== said) o.progress(line);
      said = line;
      return false;
    },
    () =>
      new UserError(
        `${now.behind.join(', ')} did not reach "${what}" in time; check them with kctl status (a node that is down must come back, or be deleted with kubectl delete node), then run kctl pki rotate-ca again to resume`,
      ),
  );
  o.progress(`${what}: done on ${now.all.join(', ')}`);
  return now.all;
}

interface Deployment {
  metadata: { generation?: number };
  spec?: { replicas?: number };
  status?: { observedGeneration?: number; replicas?: number; updatedReplicas?: number; availableReplicas?: number };
}

/** kctl's add-ons reach the API with the CA bundle their pods mounted when they started. */
const ADDON_DEPLOYMENTS = ['coredns', 'metrics-server'];
const KUBE_SYSTEM = '/api/v1/namespaces/kube-system';

const rolledOut = (d: Deployment) =>
  (d.status?.observedGeneration ?? 0) >= (d.metadata.generation ?? 0) &&
  (d.status?.updatedReplicas ?? 0) === (d.spec?.replicas ?? 1) &&
  (d.status?.availableReplicas ?? 0) === (d.spec?.replicas ?? 1) &&
  (d.status?.replicas ?? 0) === (d.spec?.replicas ?? 1);

function until(o: RotateCaOptions, what: string, done: () => Promise<boolean>): Promise<void> {
  return pollWithin(
    o.timeoutMs,
    POLL_MS,
    done,
    () =>
      new UserError(
        `${what} did not happen in time; check it with kctl kubectl, then run kctl pki rotate-ca again to resume`,
      ),
  );
}

/**
 * How long an add-on gets to be fully running again before the rotation restarts it: the trust
 * phase has just restarted every kubelet, and a restarted kubelet counts its pods unready until
 * their next readiness probe passes.
 */
const ADDON_SETTLE_MS = 60_000;

/**
 * Once every controller and node trusts both CAs, and before the new one signs: the add-ons' pods
 * are replaced so they mount both (kube-root-ca.crt, which kube-controller-manager republishes),
 * and keep reaching kube-apiserver when its certificate changes CA. The rotation waits for the
 * restart of one that runs fully (within ADDON_SETTLE_MS); one that does not (no node can run it)
 * gets the same change, and its pods start on both CAs whenever they start.
 */
async function restartAddons(o: RotateCaOptions, bundle: string): Promise<void> {
  await until(o, 'kube-root-ca.crt holding both CAs', async () => {
    const cm = await o.kube.get<{ data?: Record<string, string> }>(`${KUBE_SYSTEM}/configmaps/kube-root-ca.crt`);
    return bundleHash(cm.data?.['ca.crt'] ?? '') === bundle;
  });
  for (const name of ADDON_DEPLOYMENTS) {
    const path = `/apis/apps/v1/namespaces/kube-system/deployments/${name}`;
    const before = await o.kube.find<Deployment>(path);
    if (!before) continue;
    const wanted = (before.spec?.replicas ?? 1) > 0;
    const running =
      wanted &&
      (rolledOut(before) ||
        (await pollFor(Math.min(ADDON_SETTLE_MS, o.timeoutMs), POLL_MS, async () =>
          rolledOut(await o.kube.get<Deployment>(path)),
        )));
    await o.kube.request('PATCH', path, {
      spec: { template: { metadata: { annotations: { [CA_BUNDLE_ANNOTATION]: bundle } } } },
    });
    if (!running) {
      if (wanted)
        o.progress(`${name} is not fully running: changed so that its pods start on both CAs, not waited for`);
      continue;
    }
    o.progress(`restarting ${name}: its new pods trust both CAs`);
    await until(o, `the restart of ${name}`, async () => rolledOut(await o.kube.get<Deployment>(path)));
  }
}

const subjectOf = (pem: string) => new X509Certificate(pem).subject.replace(/^CN=/, '');

export async function rotateCa(o: RotateCaOptions): Promise<RotateCaResult> {
  if (o.nodes && !existsSync(o.pki.kubeletServingMoved))
    throw new UserError(
      'some nodes still serve a kubelet certificate of the cluster CA (from an older kctl); wait until every node has one of the kubelet-serving CA (kctl status on the controller), then rotate',
    );
  let rotation = await readCaRotation(o.kube);
  if (!rotation) {
    const [cert, key] = await Promise.all([readFile(o.pki.caCert, 'utf8'), readFile(o.pki.caKey, 'utf8')]);
    const certs = splitCertificates(cert);
    if (certs.length !== 1)
      throw new UserError(
        `${o.pki.caCert} holds ${certs.length} certificates but no rotation is recorded (Secret ${CA_ROTATION_NAMESPACE}/${CA_ROTATION_SECRET}); restore the PKI from a backup`,
      );
    // Every controller and node uses the current CA before anything moves: none is left behind.
    await waitFor(o, bundleHash(cert), 'current CA');
    const next = await newClusterCa(new Date());
    rotation = await writeCaRotation(o.kube, {
      phase: 'trust',
      oldCert: cert,
      oldKey: key,
      newCert: next.cert,
      newKey: next.key,
      proof: vouchFor(next.cert, key),
    });
    o.progress(`new CA ${subjectOf(next.cert)} made; replacing ${subjectOf(cert)}`);
  } else {
    o.progress(`resuming the CA rotation to ${subjectOf(rotation.newCert)} at phase ${rotation.phase}`);
    // Begun by a kctl from before cross-signatures: the old key the Secret holds vouches now (if it
    // is not the CA the controllers trust, they refuse the proof as they would any other).
    if (!rotation.proof)
      rotation = await writeCaRotation(o.kube, { ...rotation, proof: vouchFor(rotation.newCert, rotation.oldKey) });
  }
  let seen: string[] = [];
  for (const phase of CA_ROTATION_PHASES.slice(CA_ROTATION_PHASES.indexOf(rotation.phase))) {
    if (phase === 'drop')
      await o.beforeDrop?.({ caKey: rotation.newKey, caBundle: caFilesFor({ ...rotation, phase: 'sign' }).cert });
    if (rotation.phase !== phase) rotation = await writeCaRotation(o.kube, { ...rotation, phase });
    const bundle = bundleHash(caFilesFor(rotation).cert);
    seen = await waitFor(o, bundle, `${phase} (${WHAT[phase]})`);
    if (phase === 'trust' && o.nodes) await restartAddons(o, bundle);
  }
  await deleteCaRotation(o.kube);
  return {
    oldCa: subjectOf(rotation.oldCert),
    newCa: subjectOf(rotation.newCert),
    controllers: seen.filter((n) => !n.startsWith('node ')),
    nodes: seen.filter((n) => n.startsWith('node ')).map((n) => n.slice(5)),
  };
}

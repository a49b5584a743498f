// The cluster CA rotation's state in the API, and how a controller follows it. `kctl pki
// rotate-ca` (ca-rotation-run.ts) keeps the phase and both CAs in one Secret in kube-system
// (nodes cannot read it; it carries the new CA key). Every controller checks it every few
// seconds, writes the phase's ca.crt/ca.key (src/pki/ca-rotation.ts) if a CA it trusts now vouches
// for the new one (the Secret's cross-signature: a Secret written by anyone else changes nothing),
// reissues what the change makes stale through the certificate renewer, and names the bundle it
// now uses in its lease.
import { readFile } from 'node:fs/promises';
import { messageOf } from '../../base/errors.ts';
import type { Logger } from '../../base/log.ts';
import type { KubeClient } from '../../kube/client.ts';
import { warningEvent } from '../../kube/events.ts';
import {
  bundleHash,
  CA_ROTATION_PHASES,
  caPhaseOnDisk,
  PkiError,
  rotationProblem,
  writeCaPhase,
  type CaRotation,
  type CaRotationPhase,
  type PkiPaths,
} from '../../pki/index.ts';

export const CA_ROTATION_NAMESPACE = 'kube-system';
export const CA_ROTATION_SECRET = 'kctl-ca-rotation';
const SECRETS = `/api/v1/namespaces/${CA_ROTATION_NAMESPACE}/secrets`;
/** How often a controller looks for a rotation step. */
export const FOLLOW_EVERY_MS = 5_000;

interface SecretObject {
  metadata: { name: string; resourceVersion?: string };
  data?: Record<string, string>;
}

export interface StoredRotation extends CaRotation {
  resourceVersion?: string;
}

const b64 = (s: string) => Buffer.from(s).toString('base64');
const unb64 = (s: string | undefined) => Buffer.from(s ?? '', 'base64').toString('utf8');

function toSecret(r: StoredRotation): SecretObject & { apiVersion: string; kind: string; type: string } {
  return {
    apiVersion: 'v1',
    kind: 'Secret',
    type: 'Opaque',
    metadata: { name: CA_ROTATION_SECRET, resourceVersion: r.resourceVersion },
    data: {
      phase: b64(r.phase),
      'old.crt': b64(r.oldCert),
      'old.key': b64(r.oldKey),
      'new.crt': b64(r.newCert),
      'new.key': b64(r.newKey),
      ...(r.proof ? { 'new.proof': b64(r.proof) } : {}),
    },
  };
}

function fromSecret(s: SecretObject): StoredRotation {
  const d = s.data ?? {};
  const phase = unb64(d.phase) as CaRotationPhase;
  if (!CA_ROTATION_PHASES.includes(phase))
    throw new Error(
      `Secret ${CA_ROTATION_NAMESPACE}/${CA_ROTATION_SECRET} has an unknown phase "${phase}"; delete it and run kctl pki rotate-ca again`,
    );
  return {
    phase,
    oldCert: unb64(d['old.crt']),
    oldKey: unb64(d['old.key']),
    newCert: unb64(d['new.crt']),
    newKey: unb64(d['new.key']),
    ...(d['new.proof'] ? { proof: unb64(d['new.proof']) } : {}),
    resourceVersion: s.metadata.resourceVersion,
  };
}

/** The rotation under way, or null when there is none. */
export async function readCaRotation(kube: KubeClient, signal?: AbortSignal): Promise<StoredRotation | null> {
  const s = await kube.find<SecretObject>(`${SECRETS}/${CA_ROTATION_SECRET}`, signal);
  return s ? fromSecret(s) : null;
}

/** Created when it has no resourceVersion, else replaced (409 when someone else wrote it since). */
export async function writeCaRotation(kube: KubeClient, r: StoredRotation): Promise<StoredRotation> {
  const body = toSecret(r);
  const saved = r.resourceVersion
    ? await kube.request<SecretObject>('PUT', `${SECRETS}/${CA_ROTATION_SECRET}`, body)
    : await kube.request<SecretObject>('POST', SECRETS, body);
  return fromSecret(saved);
}

export async function deleteCaRotation(kube: KubeClient): Promise<void> {
  await kube.remove(`${SECRETS}/${CA_ROTATION_SECRET}`);
}

/**
 * One controller's part: brings ca.crt/ca.key to the phase in the Secret, then `reissue` makes
 * everything else follow (leaves, kubeconfigs, restarts, cluster-info). `loadedBundle()` is what
 * this controller's lease says it uses.
 */
export class CaRotationFollower {
  private loaded: string | undefined;
  private pending = false;
  lastError: string | undefined;

  constructor(
    private readonly kube: KubeClient,
    private readonly pki: PkiPaths,
    /** Runs while the rotation step holds this controller's renewal turn. */
    private readonly reissue: (reason: string, afterWrite: () => Promise<boolean>) => Promise<void>,
  ) {}

  loadedBundle(): string | undefined {
    return this.loaded;
  }

  async check(log: Logger, signal: AbortSignal): Promise<void> {
    try {
      const rotation = await readCaRotation(this.kube, signal);
      // A step that failed half-way is run again until it is done.
      if (rotation && (this.pending || !(await caPhaseOnDisk(this.pki, rotation)))) {
        // Checked before this controller takes a renewal turn for it (writeCaPhase checks again).
        const problem = rotationProblem(rotation, await readFile(this.pki.caCert, 'utf8'));
        if (problem) throw new PkiError(`CA rotation refused: ${problem}; ca.crt is unchanged`);
        this.pending = true;
        await this.reissue(`CA rotation, phase ${rotation.phase}`, () => writeCaPhase(this.pki, rotation));
        this.pending = false;
        log.info({ phase: rotation.phase }, 'CA rotation step done on this controller');
      }
      this.loaded = bundleHash(await readFile(this.pki.caCert, 'utf8'));
      this.lastError = undefined;
    } catch (err) {
      if (signal.aborted) return;
      const error = `CA rotation: ${messageOf(err)}`;
      // One line and one event per refusal, not one every check.
      if (error !== this.lastError) {
        log.warn(error);
        if (err instanceof PkiError && error.includes('refused'))
          await warningEvent(
            this.kube,
            { kind: 'Secret', namespace: CA_ROTATION_NAMESPACE, name: CA_ROTATION_SECRET },
            'CaRotationRefused',
            error,
            'kctl-controller',
          ).catch(() => undefined);
      }
      this.lastError = error;
    }
  }
}

// The cluster's encryption key set: controllers share no files after a join, so the keys travel
// through the API, in the Secret kube-system/kctl-encryption-keys (itself stored encrypted with a
// key every controller has). Each controller writes its local encryption config from it
// (encryption.ts) and says in its Lease which keys its kube-apiserver has loaded; `kctl secrets
// rotate-key` (encryption-rotation.ts) moves the set one step at a time and waits for them all.
// Nodes cannot read the Secret: the Node authorizer gives a node only the Secrets its own pods
// name, and NodeRestriction lets no node create a pod that names a Secret. Whoever else can write
// Secrets in kube-system still cannot hand the controllers a key: the set carries a signature by
// the cluster CA's key, which only controllers hold, and a set without a valid one is refused.
import { readFile } from 'node:fs/promises';
import { KubeApiError, type KubeClient } from '../../kube/client.ts';
import { caSign, caSigner, parseEncryptionKeys, type EncryptionKey, type PkiPaths } from '../../pki/index.ts';

export const KEYS_NAMESPACE = 'kube-system';
export const KEYS_SECRET = 'kctl-encryption-keys';
const SECRET_PATH = `/api/v1/namespaces/${KEYS_NAMESPACE}/secrets`;
/** The key a rotation in progress moves to; absent between rotations. */
const ROTATING_ANNOTATION = 'kctl.dev/rotating-to';
/** The resources whose every object was last rewritten for the configured list (the first start's migration). */
const ENCRYPTED_ANNOTATION = 'kctl.dev/encrypted-resources';
/** Names of keys a rotation dropped: a controller that still has one drops it too, rather than offering it back. */
const RETIRED_ANNOTATION = 'kctl.dev/retired-keys';
const RETIRED_KEPT = 20;
/** The set's signature (pki caSign) by the key of a CA the controllers trust. */
const SIGNATURE_ANNOTATION = 'kctl.dev/key-set-signature';
const SIGNATURE_PURPOSE = 'kctl.dev/encryption-key-set/v1';

export interface KeySet {
  /** In provider order: the first encrypts, all decrypt. */
  keys: EncryptionKey[];
  rotatingTo?: string;
  /** Unset until a controller has rewritten every object of its configured resources once. */
  encryptedResources?: string[];
  /** The keys rotations dropped (names, newest last). */
  retired?: string[];
  resourceVersion?: string;
  /** As read: the signature it carries (writeKeySet signs what it writes). */
  signature?: string;
}

/** What signs the set and checks it: this host's CA key, and the CAs it trusts now (its ca.crt, the signing CA first). */
export interface KeySetTrust {
  caKey: string;
  caBundle: string;
}

export async function keySetTrust(pki: PkiPaths): Promise<KeySetTrust> {
  const [caKey, caBundle] = await Promise.all([readFile(pki.caKey, 'utf8'), readFile(pki.caCert, 'utf8')]);
  return { caKey, caBundle };
}

/** Everything a signature covers: all but the resourceVersion, in one spelling. */
const signedContent = (set: KeySet): string =>
  JSON.stringify({
    keys: set.keys.map((k) => [k.name, k.secret]),
    rotatingTo: set.rotatingTo ?? null,
    encryptedResources: set.encryptedResources ?? null,
    retired: set.retired ?? [],
  });

/** Which CA of the trusted bundle signed the set: 0 the signing CA, more an older one still trusted, -1 none. */
export function keySetSigner(set: KeySet, trust: KeySetTrust): number {
  return caSigner(SIGNATURE_PURPOSE, signedContent(set), set.signature, trust.caBundle);
}

/** Why the set may not be believed, or undefined when a CA this host trusts signed it. */
export function keySetProblem(set: KeySet, trust: KeySetTrust): string | undefined {
  if (keySetSigner(set, trust) >= 0) return undefined;
  return set.signature
    ? 'its signature is not by a CA this controller trusts'
    : 'it carries no signature of the cluster CA';
}

/** A key set written without a valid signature: whoever wrote it, no controller takes its keys. */
export class KeySetRefused extends Error {
  constructor(
    readonly set: KeySet,
    readonly problem: string,
  ) {
    super(
      `the encryption key set in Secret ${KEYS_NAMESPACE}/${KEYS_SECRET} is refused: ${problem}; the controllers keep the keys they have`,
    );
  }
}

interface SecretObject {
  metadata: { name: string; namespace: string; resourceVersion?: string; annotations?: Record<string, string> };
  data?: Record<string, string>;
}

export const keyNames = (keys: EncryptionKey[]): string => keys.map((k) => k.name).join(',');

function toSecret(set: KeySet): SecretObject & { apiVersion: string; kind: string; type: string } {
  const annotations: Record<string, string> = {};
  if (set.rotatingTo) annotations[ROTATING_ANNOTATION] = set.rotatingTo;
  if (set.encryptedResources) annotations[ENCRYPTED_ANNOTATION] = set.encryptedResources.join(',');
  if (set.retired?.length) annotations[RETIRED_ANNOTATION] = set.retired.join(',');
  if (set.signature) annotations[SIGNATURE_ANNOTATION] = set.signature;
  return {
    apiVersion: 'v1',
    kind: 'Secret',
    type: 'Opaque',
    metadata: {
      name: KEYS_SECRET,
      namespace: KEYS_NAMESPACE,
      ...(set.resourceVersion ? { resourceVersion: set.resourceVersion } : {}),
      annotations,
    },
    data: { keys: Buffer.from(JSON.stringify({ secretbox: set.keys })).toString('base64') },
  };
}

function fromSecret(s: SecretObject): KeySet {
  const a = s.metadata.annotations ?? {};
  const raw = JSON.parse(Buffer.from(s.data?.keys ?? '', 'base64').toString('utf8') || '{}') as {
    secretbox?: EncryptionKey[];
  };
  // Checked as strictly as a file: a broken Secret must not become a broken kube-apiserver config.
  const keys = parseEncryptionKeys(
    JSON.stringify({ resources: [{ resources: ['*.*'], providers: [{ secretbox: { keys: raw.secretbox } }] }] }),
  );
  const encrypted = a[ENCRYPTED_ANNOTATION];
  return {
    keys,
    rotatingTo: a[ROTATING_ANNOTATION] || undefined,
    encryptedResources: encrypted === undefined ? undefined : encrypted.split(',').filter(Boolean),
    retired: (a[RETIRED_ANNOTATION] ?? '').split(',').filter(Boolean),
    resourceVersion: s.metadata.resourceVersion,
    signature: a[SIGNATURE_ANNOTATION] || undefined,
  };
}

/** The cluster's key set, or null before the first controller has published it. */
export async function readKeySet(kube: KubeClient): Promise<KeySet | null> {
  const s = await kube.find<SecretObject>(`${SECRET_PATH}/${KEYS_SECRET}`);
  return s ? fromSecret(s) : null;
}

/** The cluster's key set if a CA this host trusts signed it; null before the first controller published it. */
export async function readTrustedKeySet(kube: KubeClient, trust: KeySetTrust): Promise<KeySet | null> {
  const set = await readKeySet(kube);
  const problem = set && keySetProblem(set, trust);
  if (set && problem) throw new KeySetRefused(set, problem);
  return set;
}

/**
 * Writes the set, signed with this host's CA key: created when it has no resourceVersion, else
 * replaced (409 when someone wrote it since it was read).
 */
export async function writeKeySet(kube: KubeClient, set: KeySet, trust: KeySetTrust): Promise<KeySet> {
  const body = toSecret({ ...set, signature: caSign(SIGNATURE_PURPOSE, signedContent(set), trust.caKey) });
  const saved = set.resourceVersion
    ? await kube.request<SecretObject>('PUT', `${SECRET_PATH}/${KEYS_SECRET}`, body)
    : await kube.request<SecretObject>('POST', SECRET_PATH, body);
  return fromSecret(saved);
}

/**
 * Signs the set again with `trust`'s key when another CA `trust` still holds signed it (a CA
 * rotation, before the old CA is dropped). True when it wrote; a set no trusted CA signed is refused.
 */
export async function resignKeySet(kube: KubeClient, trust: KeySetTrust): Promise<boolean> {
  const set = await readTrustedKeySet(kube, trust);
  if (!set || keySetSigner(set, trust) === 0) return false;
  await writeKeySet(kube, set, trust);
  return true;
}

/** Reads (believing only a signed set), changes and writes the set, again when another writer came in between. */
export async function updateKeySet(
  kube: KubeClient,
  trust: KeySetTrust,
  change: (set: KeySet) => KeySet,
): Promise<KeySet> {
  for (let attempt = 0; ; attempt++) {
    const current = await readTrustedKeySet(kube, trust);
    if (!current) throw new Error(`the Secret ${KEYS_NAMESPACE}/${KEYS_SECRET} is missing`);
    try {
      return await writeKeySet(kube, change(current), trust);
    } catch (err) {
      if (!(err instanceof KubeApiError && err.status === 409) || attempt >= 5) throw err;
    }
  }
}

// The steps of a rotation, each a pure change of the set (encryption-rotation.ts waits between them).

/** Step 1: the new key decrypts everywhere, the current one still encrypts. */
export function addKey(set: KeySet, key: EncryptionKey): KeySet {
  return { ...set, keys: [...set.keys.filter((k) => k.name !== key.name), key], rotatingTo: key.name };
}

/** Step 2: the new key encrypts, the old ones still decrypt. */
export function promoteKey(set: KeySet): KeySet {
  const next = set.keys.find((k) => k.name === set.rotatingTo);
  if (!next) throw new Error(`the key ${set.rotatingTo ?? '(none)'} being rotated to is not in the key set`);
  return { ...set, keys: [next, ...set.keys.filter((k) => k !== next)] };
}

/** Step 4, once every object was rewritten: only the new key is left. */
export function dropOldKeys(set: KeySet): KeySet {
  const first = set.keys[0]!;
  if (set.rotatingTo !== first.name) throw new Error('the old keys are dropped only after the new key encrypts');
  const retired = [...(set.retired ?? []), ...set.keys.slice(1).map((k) => k.name)].slice(-RETIRED_KEPT);
  return { ...set, keys: [first], rotatingTo: undefined, retired };
}

/**
 * Local keys the cluster does not know and never dropped: a controller that made its own key
 * before it saw the cluster's (an HA cluster upgraded to encryption at rest one controller at a
 * time) may have encrypted objects with it, so it joins the set as a decryption key until the
 * next rotation rewrites those objects and drops it.
 */
export function unknownKeys(set: KeySet, local: EncryptionKey[]): EncryptionKey[] {
  return local.filter((k) => !set.keys.some((c) => c.name === k.name) && !set.retired?.includes(k.name));
}

/** Where a rotation stands: which step comes next. */
export function rotationStep(set: KeySet): 'add' | 'promote' | 'rewrite' {
  if (!set.rotatingTo) return 'add';
  return set.keys[0]?.name === set.rotatingTo ? 'rewrite' : 'promote';
}

/** Resources whose objects must be rewritten for `wanted`: newly encrypted ones and ones no longer encrypted. */
export function resourcesToRewrite(recorded: string[] | undefined, wanted: string[]): string[] {
  if (!recorded) return [...wanted];
  const was = new Set(recorded);
  const now = new Set(wanted);
  return [...wanted.filter((r) => !was.has(r)), ...recorded.filter((r) => !now.has(r))];
}

const LAST_CONFIG_INFO =
  /^apiserver_encryption_config_controller_last_config_info\{[^}]*\bhash="(sha256:[0-9a-f]{64})"/m;

/** The hash of the encryption config kube-apiserver has loaded, from its /metrics; undefined when it reports none. */
export async function loadedConfigHash(kube: KubeClient, signal?: AbortSignal): Promise<string | undefined> {
  return LAST_CONFIG_INFO.exec(await kube.getText('/metrics', signal))?.[1];
}

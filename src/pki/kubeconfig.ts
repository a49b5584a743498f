// Kubeconfig files with everything embedded (CA, client cert and key, or a token), so each
// file works on its own when copied elsewhere.
import { relative } from 'node:path';
import { parse, stringify } from 'yaml';
import type { EnsureContext } from './ca.ts';
import { PkiError } from './errors.ts';
import { KUBECONFIG_MODE, enforceMode, readIfExists, writeFileAtomic } from './files.ts';
import { issueLeaf, parseExisting, renewalReason, type LeafSpec, type Outcome } from './leaf.ts';
import { reasonOf } from '../base/errors.ts';

export interface KubeconfigContent {
  server: string;
  caPem: string;
  user: string;
  certPem?: string;
  keyPem?: string;
  token?: string;
  /** tls-server-name: the name the client sends and checks (a front door routes by it). */
  serverName?: string;
}

const CLUSTER = 'kubernetes';

const b64 = (s: string): string => Buffer.from(s, 'utf8').toString('base64');
const unb64 = (s: unknown): string | undefined =>
  typeof s === 'string' ? Buffer.from(s, 'base64').toString('utf8') : undefined;

export function renderKubeconfig(o: KubeconfigContent): string {
  if ((o.certPem === undefined) !== (o.keyPem === undefined))
    throw new Error('kubeconfig needs both certPem and keyPem, or neither');
  if (o.certPem === undefined && o.token === undefined)
    throw new Error('kubeconfig needs a client certificate or a token');
  const user: Record<string, string> = {};
  if (o.certPem !== undefined && o.keyPem !== undefined) {
    user['client-certificate-data'] = b64(o.certPem);
    user['client-key-data'] = b64(o.keyPem);
  }
  if (o.token !== undefined) user.token = o.token;
  const context = `${o.user}@${CLUSTER}`;
  return stringify({
    apiVersion: 'v1',
    kind: 'Config',
    clusters: [
      {
        name: CLUSTER,
        cluster: {
          server: o.server,
          'certificate-authority-data': b64(o.caPem),
          ...(o.serverName ? { 'tls-server-name': o.serverName } : {}),
        },
      },
    ],
    contexts: [{ name: context, context: { cluster: CLUSTER, user: o.user } }],
    'current-context': context,
    users: [{ name: o.user, user }],
    preferences: {},
  });
}

/** Writes a kubeconfig atomically with mode 0600 (it holds credentials). */
export async function writeKubeconfig(path: string, o: KubeconfigContent): Promise<void> {
  await writeFileAtomic(path, renderKubeconfig(o), KUBECONFIG_MODE);
}

/** The parts of a kubeconfig written by renderKubeconfig: first cluster, current context's user. */
export function readKubeconfig(text: string, path: string): Partial<KubeconfigContent> {
  let doc: unknown;
  try {
    doc = parse(text);
  } catch (err) {
    throw new PkiError(
      `${path} is not valid YAML (${reasonOf(err)}); remove it and start again to have kctl write a new one`,
    );
  }
  type Named<T> = { name?: string } & T;
  const d = (doc ?? {}) as {
    clusters?: Named<{ cluster?: Record<string, unknown> }>[];
    contexts?: Named<{ context?: { user?: string } }>[];
    users?: Named<{ user?: Record<string, unknown> }>[];
    'current-context'?: string;
  };
  const cluster = d.clusters?.[0]?.cluster ?? {};
  const ctxUser = d.contexts?.find((c) => c.name === d['current-context'])?.context?.user;
  const named = d.users?.find((u) => u.name === ctxUser) ?? d.users?.[0];
  const user = named?.user ?? {};
  return {
    server: typeof cluster.server === 'string' ? cluster.server : undefined,
    caPem: unb64(cluster['certificate-authority-data']),
    user: named?.name,
    certPem: unb64(user['client-certificate-data']),
    keyPem: unb64(user['client-key-data']),
    token: typeof user.token === 'string' ? user.token : undefined,
  };
}

/**
 * A component's kubeconfig with an embedded client certificate. Re-issued when that
 * certificate would be (see renewalReason); rewritten with the same credentials when only
 * the server URL or the embedded CA changed.
 */
export async function ensureKubeconfig(
  spec: LeafSpec,
  path: string,
  server: string,
  ctx: EnsureContext,
): Promise<Outcome> {
  const text = await readIfExists(path);
  const file = relative(ctx.dir, path);
  const found = text === null ? {} : readKubeconfig(text, path);
  const existing = parseExisting(found.certPem ?? null, found.keyPem ?? null, {
    cert: `${path} (client-certificate-data)`,
    key: `${path} (client-key-data)`,
  });
  const user = spec.subject.commonName;

  const reason = renewalReason(existing, spec, ctx.now);
  if (reason !== null) {
    const issued = await issueLeaf(spec, existing, ctx.now);
    await writeKubeconfig(path, { server, caPem: spec.signer.certPem, user, ...issued });
    ctx.log.info(
      { file, reason: text === null ? 'missing' : `client certificate ${reason}` },
      text === null ? 'wrote kubeconfig' : 'renewed kubeconfig',
    );
    return text === null ? 'created' : 'renewed';
  }

  const drift =
    found.server !== server
      ? `server changed from ${found.server ?? 'none'} to ${server}`
      : found.caPem !== spec.signer.certPem
        ? 'embedded CA differs from ca.crt'
        : found.user !== user
          ? `user changed from ${found.user ?? 'none'} to ${user}`
          : null;
  if (drift === null) {
    await enforceMode(path, KUBECONFIG_MODE, ctx.log);
    return 'unchanged';
  }
  await writeKubeconfig(path, {
    server,
    caPem: spec.signer.certPem,
    user,
    certPem: found.certPem,
    keyPem: found.keyPem,
  });
  ctx.log.info({ file, reason: drift }, 'rewrote kubeconfig');
  return 'renewed';
}

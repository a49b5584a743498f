// Who is this agent? A node client certificate signed by the cluster CA (O=system:nodes,
// CN=system:node:<name>, what kubelet TLS bootstrap gives every kctl worker), or a
// service-account bearer token checked by TokenReview (what upstream agents in a pod use).
// Anything else is refused at Connect with a one-line reason the agent logs.
import { X509Certificate } from 'node:crypto';
import * as grpc from '@grpc/grpc-js';
import { META } from '../wire/protocol.ts';
import { messageOf } from '../../base/errors.ts';

export interface AgentIdentity {
  /** 'none': a standalone server configured, as upstream allows, with no agent authentication. */
  method: 'certificate' | 'token' | 'none';
  /** Kubernetes user name: system:node:<name> or system:serviceaccount:<ns>:<name>. */
  user: string;
  /** Node name, for certificate-authenticated agents. */
  node?: string;
  /** The client certificate a node agent authenticated with: checked again when the trusted CAs change. */
  certificate?: X509Certificate;
}

/** The CA of `cas` that issued and signed `cert`, if any. */
export function issuerOf(cert: X509Certificate, cas: readonly X509Certificate[]): X509Certificate | undefined {
  return cas.find((ca) => cert.checkIssued(ca) && cert.verify(ca.publicKey));
}

/** Checks a service-account token (TokenReview, audience system:konnectivity-server). */
export type TokenReview = (token: string) => Promise<{ ok: boolean; user?: string; error?: string }>;

export class AgentAuthError extends Error {
  constructor(
    readonly code: grpc.status,
    message: string,
  ) {
    super(message);
  }
}

const CLIENT_AUTH_OID = '1.3.6.1.5.5.7.3.2';
const NODE_PREFIX = 'system:node:';
const NODES_GROUP = 'system:nodes';
const WANT = `a node client certificate (O=${NODES_GROUP}, CN=${NODE_PREFIX}<name>) signed by the cluster CA, or a service-account bearer token`;

/** Distinguished-name attributes as Node prints them: one `K=V` per line. */
function dnAttributes(dn: string): { key: string; value: string }[] {
  return dn
    .split('\n')
    .filter(Boolean)
    .map((line) => {
      const i = line.indexOf('=');
      return { key: line.slice(0, i), value: line.slice(i + 1) };
    });
}

/**
 * Checks a peer certificate (DER) against the cluster CAs trusted now (the trust bundle: two
 * while a CA rotation runs): issuer, signature, validity, client usage, node subject. TLS already
 * verified the chain (grpc-js only reports authorized peers); this is the second look that does
 * not depend on how the TLS layer was configured, nor on when the connection was made.
 */
export function nodeIdentityFromCert(der: Buffer, cas: readonly X509Certificate[], now = new Date()): AgentIdentity {
  let cert: X509Certificate;
  try {
    cert = new X509Certificate(der);
  } catch {
    throw new AgentAuthError(grpc.status.UNAUTHENTICATED, 'client certificate is not readable');
  }
  if (!issuerOf(cert, cas)) {
    throw new AgentAuthError(grpc.status.UNAUTHENTICATED, 'client certificate is not signed by the cluster CA');
  }
  if (now < new Date(cert.validFrom) || now > new Date(cert.validTo)) {
    throw new AgentAuthError(
      grpc.status.UNAUTHENTICATED,
      `client certificate is not valid now (valid ${cert.validFrom} to ${cert.validTo})`,
    );
  }
  if (cert.keyUsage !== undefined && !cert.keyUsage.includes(CLIENT_AUTH_OID)) {
    throw new AgentAuthError(grpc.status.PERMISSION_DENIED, 'client certificate is not for client authentication');
  }
  const attrs = dnAttributes(cert.subject);
  const cn = attrs.find((a) => a.key === 'CN')?.value ?? '';
  const orgs = attrs.filter((a) => a.key === 'O').map((a) => a.value);
  const node = cn.startsWith(NODE_PREFIX) ? cn.slice(NODE_PREFIX.length) : '';
  if (!orgs.includes(NODES_GROUP) || node === '') {
    const subject = [`CN=${cn}`, ...orgs.map((o) => `O=${o}`)].join(',');
    throw new AgentAuthError(
      grpc.status.PERMISSION_DENIED,
      `client certificate ${subject} is not a node certificate; agents need ${WANT}`,
    );
  }
  return { method: 'certificate', user: cn, node, certificate: cert };
}

function bearerToken(md: grpc.Metadata): string | undefined {
  const values = md.get(META.authorization).map(String);
  if (values.length === 0) return undefined;
  const m = /^Bearer\s+(\S+)$/i.exec(values[0] ?? '');
  return m ? m[1] : '';
}

export interface AgentAuthOptions {
  /** The cluster CAs trusted now. */
  cas: readonly X509Certificate[];
  tokenReview?: TokenReview;
}

/** What authentication reads off a Connect call, on either transport. */
export interface AuthSource {
  readonly metadata: grpc.Metadata;
  getAuthContext(): { sslPeerCertificate?: { raw?: Buffer } | null };
}

/** The agent's identity, or an AgentAuthError with the status to refuse Connect with. */
export async function authenticateAgent(call: AuthSource, opts: AgentAuthOptions): Promise<AgentIdentity> {
  const peer = call.getAuthContext()?.sslPeerCertificate;
  const token = bearerToken(call.metadata);
  let certError: AgentAuthError | undefined;
  if (peer?.raw) {
    try {
      return nodeIdentityFromCert(peer.raw, opts.cas);
    } catch (err) {
      if (!(err instanceof AgentAuthError) || token === undefined) throw err;
      certError = err; // a token may still identify the agent
    }
  }
  if (token === undefined) {
    throw new AgentAuthError(
      grpc.status.UNAUTHENTICATED,
      `no client certificate signed by the cluster CA and no bearer token; agents need ${WANT}`,
    );
  }
  if (token === '')
    throw new AgentAuthError(grpc.status.UNAUTHENTICATED, 'authorization metadata is not "Bearer <token>"');
  if (!opts.tokenReview) {
    const why = certError ? `${certError.message}, and ` : '';
    throw new AgentAuthError(
      grpc.status.UNAUTHENTICATED,
      `${why}service-account token authentication is not enabled on this server; use a node client certificate`,
    );
  }
  return reviewedToken(opts.tokenReview, token);
}

/** The identity TokenReview gives a bearer token, or an AgentAuthError saying why there is none. */
async function reviewedToken(tokenReview: TokenReview, token: string): Promise<AgentIdentity> {
  let review: Awaited<ReturnType<TokenReview>>;
  try {
    review = await tokenReview(token);
  } catch (err) {
    throw new AgentAuthError(grpc.status.UNAVAILABLE, `token review failed: ${messageOf(err)}`);
  }
  if (!review.ok)
    throw new AgentAuthError(
      grpc.status.UNAUTHENTICATED,
      `service-account token rejected${review.error ? `: ${review.error}` : ''}`,
    );
  return { method: 'token', user: review.user ?? 'unknown' };
}

/** The subject's CN of a certificate (DER), or '' when it has none. */
function commonName(der: Buffer): string {
  try {
    return dnAttributes(new X509Certificate(der).subject).find((a) => a.key === 'CN')?.value ?? '';
  } catch {
    return '';
  }
}

/**
 * Upstream proxy-server's rules, for the standalone drop-in: with token review on, every agent
 * needs a valid token (certificates do not count); otherwise the TLS layer already decided (a
 * certificate of the cluster CA when one is configured, else anyone).
 */
export async function authenticateUpstreamStyle(
  call: AuthSource,
  opts: { tokenReview?: TokenReview },
): Promise<AgentIdentity> {
  if (opts.tokenReview) {
    const token = bearerToken(call.metadata);
    if (token === undefined)
      throw new AgentAuthError(
        grpc.status.UNAUTHENTICATED,
        'no bearer token; this server authenticates agents by service-account token',
      );
    if (token === '')
      throw new AgentAuthError(grpc.status.UNAUTHENTICATED, 'authorization metadata is not "Bearer <token>"');
    return reviewedToken(opts.tokenReview, token);
  }
  const peer = call.getAuthContext()?.sslPeerCertificate;
  if (peer?.raw) return { method: 'certificate', user: commonName(peer.raw) };
  return { method: 'none', user: 'anonymous' };
}

/**
 * The broker's key for an agent. In kctl's own mode it comes from authentication: a node
 * certificate is `system:node:<name>`, a token `<user>/<agentid>` (many agents of one service
 * account are told apart by the id they send, but never reach a node's key). The upstream-style
 * standalone server keeps the agentid as sent, as upstream does.
 */
export function brokerId(identity: AgentIdentity, agentId: string, upstreamStyle: boolean): string {
  if (upstreamStyle) return agentId;
  if (identity.method === 'certificate') return identity.user;
  return `${identity.user}/${agentId}`;
}

/** The agentid an agent sent, when it names anyone but the agent's node (kept as a label, never a key). */
export function strayAgentId(identity: AgentIdentity, agentId: string): string | undefined {
  return identity.method === 'certificate' &&
    identity.node !== undefined &&
    agentId !== identity.node &&
    agentId !== identity.user
    ? agentId
    : undefined;
}

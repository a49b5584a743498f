// Controller join tokens (kctl token create --role controller): the holder gets the cluster's CA
// keys from the join endpoint (join-server.ts), so the cluster keeps only a SHA-256 of the
// secret, in a Secret of kctl's own type in kube-system that the API server never takes as a
// bootstrap token. Every token expires within 7 days and allows a number of joins (1 unless
// --uses says more); a join takes a use with an update conditional on the Secret's
// resourceVersion, so two joins at once cannot both take the last one. The token text keeps the
// bootstrap-token shape (<id>.<secret>) that `kctl controller --token-file` reads.
//
// Controller tokens made by older kctl versions were bootstrap-token Secrets holding the secret
// in plain: the join endpoint refuses them with one line, and pruning deletes them.
import { createHash, timingSafeEqual } from 'node:crypto';
import { reasonOf, UserError } from '../../base/errors.ts';
import { BOOTSTRAP_TOKEN_RE } from '../../join/token.ts';
import { KubeApiError, type KubeClient } from '../../kube/client.ts';
import { tokenSecretPath } from './worker-tokens.ts';

export const CONTROLLER_TOKEN_TYPE = 'kctl.dev/controller-join-token';
export const CONTROLLER_TOKEN_DEFAULT_EXPIRY = '1h';
export const CONTROLLER_TOKEN_DEFAULT_USES = 1;
export const CONTROLLER_TOKEN_MAX_EXPIRY_MS = 7 * 24 * 3_600_000;

const SECRETS = '/api/v1/namespaces/kube-system/secrets';
export const controllerTokenSecretName = (id: string): string => `kctl-controller-token-${id}`;
const secretPath = (id: string) => `${SECRETS}/${controllerTokenSecretName(id)}`;
/** How often a join re-reads the Secret after another join changed it first. */
const TAKE_ATTEMPTS = 5;

export const hashSecret = (secret: string): string => createHash('sha256').update(secret).digest('hex');

/** Refuses a lifetime a controller token may not have: none (`--expiry 0`) or more than 7 days. */
export function checkControllerTokenExpiry(ms: number, text: string): void {
  if (ms === 0)
    throw new UserError(
      `--expiry ${text}: a controller token hands over the cluster's CA keys and must expire; use at most 7d (default ${CONTROLLER_TOKEN_DEFAULT_EXPIRY})`,
    );
  if (ms > CONTROLLER_TOKEN_MAX_EXPIRY_MS)
    throw new UserError(
      `--expiry ${text} is longer than a controller token may live: it hands over the cluster's CA keys; use at most 7d (default ${CONTROLLER_TOKEN_DEFAULT_EXPIRY})`,
    );
}

/** Why the join endpoint turns a token down: 401 for the token, 503 when it cannot ask the API. */
export class TokenRejected extends Error {
  constructor(
    readonly status: 401 | 503,
    message: string,
  ) {
    super(message);
  }
}

const CREATE_HINT = 'create a new one with: kctl token create --role controller';
const rejected = () =>
  new TokenRejected(401, `the join token was rejected (expired, invalidated or never issued); ${CREATE_HINT}`);
const usedUp = (t: ControllerToken) =>
  new TokenRejected(401, `the join token is used up (${t.uses} join${t.uses === 1 ? '' : 's'}); ${CREATE_HINT}`);

/** What `kctl token list` shows of a controller token: never its hash. */
export interface ControllerToken {
  id: string;
  expires: string;
  uses: number;
  used: number;
}

interface TokenSecret {
  apiVersion?: string;
  kind?: string;
  type?: string;
  metadata: { name: string; namespace?: string; resourceVersion?: string; labels?: Record<string, string> };
  data?: Record<string, string>;
}

/** A token whose secret matched, with the Secret as read (its resourceVersion guards the next update). */
export interface CheckedToken {
  token: ControllerToken;
  secret: TokenSecret;
}

const decode = (s: TokenSecret, key: string) => Buffer.from(s.data?.[key] ?? '', 'base64').toString('utf8');
const encode = (text: string) => Buffer.from(text).toString('base64');

function tokenOf(s: TokenSecret): ControllerToken {
  const count = (key: string) => {
    const n = Number(decode(s, key));
    return Number.isInteger(n) && n >= 0 ? n : 0;
  };
  return { id: decode(s, 'token-id'), expires: decode(s, 'expiration'), uses: count('uses'), used: count('used') };
}

const sameSecret = (a: Buffer, b: Buffer) => a.length === b.length && timingSafeEqual(a, b);

export class ControllerTokenStore {
  constructor(
    private readonly kube: KubeClient,
    private readonly now: () => number = Date.now,
  ) {}

  /** Stores a new token: its id, the SHA-256 of its secret (never the secret), expiry and uses. */
  async create(o: { id: string; secret: string; expiryMs: number; uses: number }): Promise<void> {
    if (o.expiryMs <= 0 || o.expiryMs > CONTROLLER_TOKEN_MAX_EXPIRY_MS || !Number.isInteger(o.uses) || o.uses < 1)
      throw new Error(
        `a controller token needs an expiry of at most 7 days and at least one use (got ${o.expiryMs} ms, ${o.uses} uses)`,
      );
    const secret: TokenSecret = {
      apiVersion: 'v1',
      kind: 'Secret',
      type: CONTROLLER_TOKEN_TYPE,
      metadata: {
        name: controllerTokenSecretName(o.id),
        namespace: 'kube-system',
        labels: { 'kctl.dev/role': 'controller' },
      },
      data: {
        'token-id': encode(o.id),
        'secret-sha256': encode(hashSecret(o.secret)),
        expiration: encode(new Date(this.now() + o.expiryMs).toISOString().replace(/\.\d+Z$/, 'Z')),
        uses: encode(String(o.uses)),
        used: encode('0'),
        description: encode('kctl controller join token'),
      },
    };
    await this.kube.request('POST', SECRETS, secret);
  }

  async list(): Promise<ControllerToken[]> {
    const list = await this.kube.list<TokenSecret>(SECRETS, { fieldSelector: `type=${CONTROLLER_TOKEN_TYPE}` });
    return list.items.map(tokenOf);
  }

  /** Deletes a token; false when there is none with that id. */
  async delete(id: string): Promise<boolean> {
    return this.kube.remove(secretPath(id));
  }

  /**
   * The token `<id>.<secret>` names, if its secret matches and it has not expired or been used
   * up. Used-up and old-format tokens are told apart only to the holder of the right secret.
   */
  async check(bootstrapToken: string): Promise<CheckedToken> {
    const m = BOOTSTRAP_TOKEN_RE.exec(bootstrapToken);
    if (!m) throw rejected();
    const id = m[1]!;
    const got = Buffer.from(hashSecret(m[2]!));
    const secret = await this.read(id);
    if (!secret) {
      await this.refuseOldFormat(id, m[2]!);
      throw rejected();
    }
    if (!sameSecret(Buffer.from(decode(secret, 'secret-sha256')), got)) throw rejected();
    const token = tokenOf(secret);
    if (this.expired(token)) throw rejected();
    if (token.used >= token.uses) throw usedUp(token);
    return { token, secret };
  }

  /**
   * Takes one use of a checked token. The update carries the resourceVersion it was read at: when
   * another join changed the Secret first, the API server answers 409 and this reads and judges again.
   */
  async takeUse(checked: CheckedToken): Promise<ControllerToken> {
    let { token, secret } = checked;
    for (let attempt = 1; ; attempt++) {
      if (this.expired(token)) throw rejected();
      if (token.used >= token.uses) throw usedUp(token);
      try {
        await this.kube.request('PUT', secretPath(token.id), {
          ...secret,
          data: { ...secret.data, used: encode(String(token.used + 1)) },
        });
        return { ...token, used: token.used + 1 };
      } catch (err) {
        if (err instanceof KubeApiError && err.status === 404) throw rejected();
        if (!(err instanceof KubeApiError && err.status === 409)) throw this.unavailable(err);
        if (attempt === TAKE_ATTEMPTS)
          throw new TokenRejected(503, 'too many joins at once with this token; try again');
      }
      const again = await this.read(token.id);
      if (!again) throw rejected();
      secret = again;
      token = tokenOf(again);
    }
  }

  /** Gives back a use taken by a join that then failed before the keys left (e.g. etcd refused the member). */
  async giveBackUse(id: string): Promise<void> {
    for (let attempt = 1; attempt <= TAKE_ATTEMPTS; attempt++) {
      const secret = await this.read(id);
      if (!secret) return;
      const token = tokenOf(secret);
      if (token.used === 0) return;
      try {
        await this.kube.request('PUT', secretPath(id), {
          ...secret,
          data: { ...secret.data, used: encode(String(token.used - 1)) },
        });
        return;
      } catch (err) {
        if (!(err instanceof KubeApiError && err.status === 409)) throw err;
      }
    }
    throw new Error(`token ${id} kept changing; its use was not given back`);
  }

  /**
   * Deletes expired controller tokens, and controller tokens an older kctl stored as bootstrap
   * tokens (their secret is in plain and the join endpoint refuses them). Returns the ids deleted.
   */
  async prune(): Promise<{ expired: string[]; oldFormat: string[] }> {
    const expired = (await this.list()).filter((t) => this.expired(t)).map((t) => t.id);
    const old = await this.kube.list<TokenSecret>(SECRETS, {
      fieldSelector: 'type=bootstrap.kubernetes.io/token',
      labelSelector: 'kctl.dev/role=controller',
    });
    const oldFormat = old.items.map((s) => decode(s, 'token-id')).filter((id) => /^[a-z0-9]{6}$/.test(id));
    for (const id of expired) await this.kube.remove(secretPath(id));
    for (const id of oldFormat) await this.kube.remove(tokenSecretPath(id));
    return { expired, oldFormat };
  }

  private expired(t: ControllerToken): boolean {
    const at = Date.parse(t.expires);
    // A token without a readable expiry is treated as expired: controller tokens always have one.
    return !Number.isFinite(at) || at <= this.now();
  }

  private async read(id: string): Promise<TokenSecret | undefined> {
    try {
      const s = await this.kube.get<TokenSecret>(secretPath(id));
      return s.type === CONTROLLER_TOKEN_TYPE ? s : undefined;
    } catch (err) {
      if (err instanceof KubeApiError && err.status === 404) return undefined;
      throw this.unavailable(err);
    }
  }

  /** A controller token an older kctl stored as a bootstrap token: refused, with what to do. */
  private async refuseOldFormat(id: string, plain: string): Promise<void> {
    let s: TokenSecret;
    try {
      s = await this.kube.get<TokenSecret>(tokenSecretPath(id));
    } catch (err) {
      if (err instanceof KubeApiError && err.status === 404) return;
      throw this.unavailable(err);
    }
    if (s.metadata.labels?.['kctl.dev/role'] !== 'controller') return;
    if (!sameSecret(Buffer.from(hashSecret(decode(s, 'token-secret'))), Buffer.from(hashSecret(plain)))) return;
    throw new TokenRejected(
      401,
      `the join token was made by an older kctl, which stored controller tokens in plain; this version refuses them: run kctl token invalidate ${id} and ${CREATE_HINT}`,
    );
  }

  private unavailable(err: unknown): TokenRejected {
    return new TokenRejected(503, `cannot check the join token: ${reasonOf(err)}`);
  }
}

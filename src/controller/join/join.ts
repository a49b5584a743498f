// Joining a controller to a running cluster (kctl controller --token-file F on a new control
// host): the token names the join endpoints of the running controllers and pins the cluster CA.
// The first endpoint that answers hands over the shared keys (join-server.ts) and, with etcd,
// the --initial-cluster for this controller's etcd learner. Nothing is written before a good
// answer; the keys go to <data-dir>/pki (0600) and the join is recorded in
// <data-dir>/controller-join.json, so later starts need no token. The controller then creates
// its own serving and client certificates as on a first start.
import { existsSync } from 'node:fs';
import { SHARED_PKI_FILES, sharedPkiMode } from '../../pki/paths.ts';
import { readFile } from 'node:fs/promises';
import { request } from 'node:https';
import { hostname } from 'node:os';
import { join } from 'node:path';
import { httpsUrl } from '../../base/addresses.ts';
import { messageOf, UserError } from '../../base/errors.ts';
import { writeFileAtomic } from '../../base/fs.ts';
import type { Logger } from '../../base/log.ts';
import { datastoreIdentity } from '../../etcd/kine.ts';
import { TLS_TRUST_ERRORS } from '../../join/tls.ts';
import { decodeTokenFor, TokenError, tokenId, type JoinInfo } from '../../join/token.ts';
import type { ClusterConfig } from '../config/config.ts';
import { JOIN_PATH, type JoinRequest, type JoinResponse } from './join-request.ts';
import type { ControllerPaths } from '../config/paths.ts';

export interface ControllerJoinState {
  joinedAt: string;
  /** The endpoint that answered. */
  via: string;
  etcd?: { initialCluster: string; memberId: string; name: string };
}

const stateFile = (paths: ControllerPaths) => join(paths.dataDir, 'controller-join.json');
/** Written by `kctl etcd leave`: this controller's etcd member is gone for good. */
export const leftMarker = (paths: ControllerPaths) => join(paths.dataDir, 'etcd-left');

export async function readControllerJoin(paths: ControllerPaths): Promise<ControllerJoinState | null> {
  if (!existsSync(stateFile(paths))) return null;
  return JSON.parse(await readFile(stateFile(paths), 'utf8')) as ControllerJoinState;
}

export function etcdMemberName(cfg: ClusterConfig): string {
  return cfg.spec.storage.etcd.memberName ?? hostname();
}

/**
 * Joins once: returns the recorded join on later starts. `beforeWrite` runs after the cluster
 * accepted the token and before anything is written (host checks).
 */
export async function joinController(
  tokenText: string | undefined,
  cfg: ClusterConfig,
  paths: ControllerPaths,
  log: Logger,
  beforeWrite: () => Promise<void>,
): Promise<ControllerJoinState | null> {
  const existing = await readControllerJoin(paths);
  if (existing) {
    if (tokenText) log.info('this controller has joined before; the token is not needed and is ignored');
    await beforeWrite();
    return existing;
  }
  if (!tokenText) return null;
  if (existsSync(join(paths.pkiDir, 'ca.key')))
    throw new UserError(
      `${paths.dataDir} already holds a cluster CA of its own: this host is a controller of another cluster; use a fresh --data-dir (or kctl reset) to join`,
    );
  let info: JoinInfo;
  try {
    info = decodeTokenFor(tokenText, 'controller');
  } catch (err) {
    throw err instanceof TokenError ? new UserError(err.message) : err;
  }
  const name = etcdMemberName(cfg);
  const body: JoinRequest = {
    name,
    peerUrl: httpsUrl(cfg.spec.api.address, cfg.spec.storage.etcd.peerPort),
    storage: cfg.spec.storage.type,
    ...(cfg.spec.storage.type === 'kine' ? { datastore: datastoreIdentity(cfg.spec.storage.kine.dataSource) } : {}),
    network: {
      podCIDR: cfg.spec.network.podCIDR,
      serviceCIDR: cfg.spec.network.serviceCIDR,
      clusterDomain: cfg.spec.network.clusterDomain,
      mode: cfg.spec.network.mode,
      relay: cfg.spec.network.relay,
    },
  };
  let answer: { url: string; response: JoinResponse } | undefined;
  const unreachable: string[] = [];
  // Through the front door first, by the join endpoint's name, when the token names one.
  const door = info.frontDoor;
  const sources: { url: string; serverName?: string }[] = [
    ...(door ? [{ url: `https://${door.address}`, serverName: door.join }] : []),
    ...(info.joinServers ?? []).map((url) => ({ url })),
  ];
  for (const { url, serverName } of sources) {
    try {
      answer = { url, response: await postJoin(url, serverName, info, body) };
      break;
    } catch (err) {
      if (err instanceof UserError) throw err;
      unreachable.push(`${url}: ${messageOf(err)}`);
    }
  }
  if (!answer)
    throw new UserError(
      `cannot reach a controller's join endpoint (${unreachable.join('; ')}); check that the controllers run and port ${cfg.spec.api.joinPort}${door ? ` or the front door's ${door.address}` : ''} is open`,
    );
  await beforeWrite();
  const { files, etcd } = answer.response;
  for (const f of SHARED_PKI_FILES) {
    const data = files[f];
    if (typeof data !== 'string')
      throw new UserError(`the controller at ${answer.url} sent no ${f}; is it the same kctl version?`);
    await writeFileAtomic(join(paths.pkiDir, f), Buffer.from(data, 'base64'), sharedPkiMode(f));
  }
  const state: ControllerJoinState = {
    joinedAt: new Date().toISOString(),
    via: answer.url,
    ...(etcd ? { etcd: { ...etcd, name } } : {}),
  };
  await writeFileAtomic(stateFile(paths), JSON.stringify(state, null, 2) + '\n', 0o600);
  log.info(
    { via: answer.url, tokenId: tokenId(info.bootstrapToken), etcdMember: etcd?.memberId },
    'joined the cluster as a controller',
  );
  return state;
}

/** One POST to a join endpoint; UserError for an answer that settles it, Error for "try the next one". */
function postJoin(
  url: string,
  serverName: string | undefined,
  info: JoinInfo,
  body: JoinRequest,
): Promise<JoinResponse> {
  const payload = Buffer.from(JSON.stringify(body));
  return new Promise((resolve, reject) => {
    const req = request(
      new URL(JOIN_PATH, url),
      {
        method: 'POST',
        ca: info.caPem,
        ...(serverName ? { servername: serverName } : {}),
        headers: {
          authorization: `Bearer ${info.bootstrapToken}`,
          'content-type': 'application/json',
          'content-length': payload.length,
        },
        timeout: 60_000,
      },
      (res) => {
        let text = '';
        res.on('data', (c: Buffer) => (text += c.toString()));
        res.on('end', () => {
          let parsed: Partial<JoinResponse> & { error?: string };
          try {
            parsed = JSON.parse(text) as typeof parsed;
          } catch {
            reject(new Error(`HTTP ${res.statusCode ?? '?'} without a JSON answer`));
            return;
          }
          if (res.statusCode === 200 && parsed.files) resolve(parsed as JoinResponse);
          else if (res.statusCode === 404) reject(new Error('no join endpoint there'));
          else
            reject(
              new UserError(
                `the controller at ${url} refused the join: ${parsed.error ?? `HTTP ${res.statusCode ?? '?'}`}`,
              ),
            );
        });
      },
    );
    req.on('timeout', () => req.destroy(new Error('no answer within 60 s')));
    req.on('error', (err: NodeJS.ErrnoException) => {
      if (TLS_TRUST_ERRORS.has(err.code ?? ''))
        reject(
          new UserError(
            `the controller at ${url} is not signed by the CA in the join token (${err.code}); the token was altered or belongs to another cluster`,
          ),
        );
      else reject(err);
    });
    req.end(payload);
  });
}

// Join tokens: one opaque string with everything a worker needs and nothing more, shaped like
// k0s's: a gzipped, base64 kubeconfig. The cluster entry carries the API URL and the CA (the
// worker trusts nothing else), the user carries a Kubernetes bootstrap token, and a kctl
// extension lists the konnectivity agent addresses.
import { X509Certificate } from 'node:crypto';
import { isIP } from 'node:net';
import { gunzipSync, gzipSync } from 'node:zlib';
import { parse, stringify } from 'yaml';
import { parseFrontDoorEndpoint, type FrontDoorEndpoint } from '../base/addresses.ts';

export const BOOTSTRAP_TOKEN_RE = /^([a-z0-9]{6})\.([a-z0-9]{16})$/;
export const TOKEN_PREFIX = 'kctl1:';

export type JoinRole = 'worker' | 'controller';

export interface JoinInfo {
  role: JoinRole;
  apiServers: string[];
  /** Controller tokens: https URL of every controller's join endpoint (kctl controller --token-file). */
  joinServers?: string[];
  caPem: string;
  konnectivity: string[]; // host:port of every controller's agent port
  bootstrapToken: string; // <id>.<secret>
  podCIDR?: string; // the cluster's pod network, for kube-proxy
  clusterDomain?: string;
  clusterDNS?: string; // kubelet's clusterDNS: the cluster DNS Service IP
  /** The controller's front door (worker tokens of a cluster with one): a node may reach everything there, by name. */
  frontDoor?: FrontDoorEndpoint;
}

export class TokenError extends Error {}

/** The one line for a token of the other role than the command that was given it. */
export function wrongRole(info: JoinInfo, want: JoinRole): TokenError | null {
  if (info.role === want) return null;
  return info.role === 'controller'
    ? new TokenError(
        'this is a controller join token: use it with `kctl controller --token-file` on a new control host; for a node, create one with `kctl token create --role worker`',
      )
    : new TokenError(
        'this is a worker join token: use it with `kctl worker`; to add a controller, create one with `kctl token create --role controller`',
      );
}

interface JoinKubeconfig {
  apiVersion: 'v1';
  kind: 'Config';
  clusters: {
    name: string;
    cluster: {
      server: string;
      'certificate-authority-data': string;
      extensions?: {
        name: string;
        extension: {
          apiVersion: string;
          kind: string;
          role: string;
          servers: string[];
          joinServers?: string[];
          konnectivity: string[];
          podCIDR?: string;
          clusterDomain?: string;
          clusterDNS?: string;
          frontDoor?: FrontDoorEndpoint;
        };
      }[];
    };
  }[];
  users: { name: string; user: { token: string } }[];
  contexts: { name: string; context: { cluster: string; user: string } }[];
  'current-context': string;
}

const EXT_NAME = 'kctl.dev/join';

export function encodeToken(info: JoinInfo): string {
  const kc: JoinKubeconfig = {
    apiVersion: 'v1',
    kind: 'Config',
    clusters: [
      {
        name: 'kctl',
        cluster: {
          server: info.apiServers[0]!,
          'certificate-authority-data': Buffer.from(info.caPem).toString('base64'),
          extensions: [
            {
              name: EXT_NAME,
              extension: {
                apiVersion: 'kctl.dev/v1alpha1',
                kind: 'JoinInfo',
                role: info.role,
                servers: info.apiServers,
                ...(info.joinServers ? { joinServers: info.joinServers } : {}),
                konnectivity: info.konnectivity,
                podCIDR: info.podCIDR,
                clusterDomain: info.clusterDomain,
                clusterDNS: info.clusterDNS,
                ...(info.frontDoor ? { frontDoor: info.frontDoor } : {}),
              },
            },
          ],
        },
      },
    ],
    users: [{ name: 'kctl-bootstrap', user: { token: info.bootstrapToken } }],
    contexts: [{ name: 'kctl', context: { cluster: 'kctl', user: 'kctl-bootstrap' } }],
    'current-context': 'kctl',
  };
  return TOKEN_PREFIX + gzipSync(stringify(kc), { level: 9 }).toString('base64url');
}

const malformed = (why: string) =>
  new TokenError(`the join token is malformed (${why}); copy it again from \`kctl token create\` without changes`);

/** Decodes and checks the shape of a token; says nothing yet about whether the cluster accepts it. */
export function decodeToken(text: string): JoinInfo {
  const t = text.trim();
  if (!t.startsWith(TOKEN_PREFIX)) throw malformed(`it does not start with "${TOKEN_PREFIX}"`);
  const body = t.slice(TOKEN_PREFIX.length);
  if (!/^[A-Za-z0-9_-]+$/.test(body)) throw malformed('it contains characters outside base64url');
  let yamlText: string;
  try {
    yamlText = gunzipSync(Buffer.from(body, 'base64url')).toString('utf8');
  } catch {
    throw malformed('its compressed data is damaged');
  }
  let kc: Partial<JoinKubeconfig>;
  try {
    kc = parse(yamlText) as Partial<JoinKubeconfig>;
  } catch {
    throw malformed('it does not hold a kubeconfig');
  }
  const cluster = kc?.clusters?.[0]?.cluster;
  const token = kc?.users?.[0]?.user?.token;
  const ext = cluster?.extensions?.find((e) => e.name === EXT_NAME)?.extension;
  if (!cluster || !token || !ext) throw malformed('cluster, user or kctl extension missing');
  if (!BOOTSTRAP_TOKEN_RE.test(token)) throw malformed('the bootstrap token is not <6 chars>.<16 chars>');
  if (ext.role !== 'worker' && ext.role !== 'controller') throw malformed(`unknown role "${String(ext.role)}"`);
  const caPem = Buffer.from(cluster['certificate-authority-data'] ?? '', 'base64').toString('utf8');
  try {
    const ca = new X509Certificate(caPem);
    if (!ca.ca) throw new Error('not a CA');
  } catch {
    throw malformed('the CA certificate does not parse');
  }
  const servers = Array.isArray(ext.servers) && ext.servers.length ? ext.servers : [cluster.server];
  for (const s of servers) {
    let u: URL;
    try {
      u = new URL(s);
    } catch {
      throw malformed(`API server "${s}" is not a URL`);
    }
    if (u.protocol !== 'https:') throw malformed(`API server "${s}" is not https`);
  }
  const konnectivity = Array.isArray(ext.konnectivity) ? ext.konnectivity.map(String) : [];
  for (const k of konnectivity)
    if (!/^(\[[0-9a-fA-F:.]+\]|[^:\s]+):\d{1,5}$/.test(k))
      throw malformed(`konnectivity address "${k}" is not host:port`);
  const out: JoinInfo = { role: ext.role, apiServers: servers, caPem, konnectivity, bootstrapToken: token };
  if (ext.role === 'controller') {
    const join = Array.isArray(ext.joinServers) ? ext.joinServers.map(String) : [];
    if (!join.length) throw malformed('a controller token without join endpoints');
    for (const j of join) if (!/^https:\/\/\S+$/.test(j)) throw malformed(`join endpoint "${j}" is not an https URL`);
    out.joinServers = join;
  }
  if (typeof ext.podCIDR === 'string') out.podCIDR = ext.podCIDR;
  if (typeof ext.clusterDomain === 'string') out.clusterDomain = ext.clusterDomain;
  if (typeof ext.clusterDNS === 'string') {
    if (isIP(ext.clusterDNS) === 0) throw malformed(`cluster DNS "${ext.clusterDNS}" is not an IP address`);
    out.clusterDNS = ext.clusterDNS;
  }
  if (ext.frontDoor !== undefined) {
    const door = parseFrontDoorEndpoint(ext.frontDoor);
    if (!door) throw malformed('the front door needs address (host:port), api, konnectivity, join and nodeApi');
    out.frontDoor = door;
  }
  return out;
}

/** Decodes a token for `role`'s command: a malformed token, or one of the other role, is a TokenError. */
export function decodeTokenFor(text: string, role: JoinRole): JoinInfo {
  const info = decodeToken(text);
  const wrong = wrongRole(info, role);
  if (wrong) throw wrong;
  return info;
}

export function tokenId(bootstrapToken: string): string {
  return BOOTSTRAP_TOKEN_RE.exec(bootstrapToken)?.[1] ?? '';
}

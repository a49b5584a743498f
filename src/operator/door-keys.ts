// The management cluster's front door, as the operator and the door share it: where nodes and
// admins reach it (the operator's flags), the names of each hosted cluster there, and the key of
// each cluster's handoff ports. Each cluster's key is an HMAC of its uid under one door key, kept
// in a Secret in kube-system that the operator makes once: the door derives every cluster's key
// from that one Secret and needs to read no cluster's Secrets, and a cluster's pods hold their own
// key only (a cluster's key opens no other cluster's handoff).
import { createHmac, randomBytes } from 'node:crypto';
import { isIP } from 'node:net';
import { splitHostPort } from '../base/addresses.ts';
import { UserError } from '../base/errors.ts';
import { DOOR_DOMAIN, doorNames, type FrontDoorNames } from '../controller/config/front-door.ts';
import { KubeApiError, type KubeClient } from '../kube/client.ts';
import { resourcePath } from '../kube/paths.ts';
import { isFull, type KctlCluster } from './objects.ts';

/** The Secret holding the door's key (key `key`, 32 bytes). */
export const DOOR_KEY_SECRET = { namespace: 'kube-system', name: 'kctl-front-door' } as const;

/** The management cluster's front door, as the operator names it in each hosted cluster's config. */
export interface ManagementDoor {
  /** The domain the clusters' names live under. */
  domain: string;
  /** The IP address nodes and admins dial, and its port. */
  host: string;
  port: number;
}

/** The door's domain from a flag (`flag` names it in the error). */
export function parseDoorDomain(domain: string, flag: string): string {
  if (!DOOR_DOMAIN.test(domain))
    throw new UserError(`${flag} ${domain}: expected a DNS domain such as clusters.example.com`);
  return domain;
}

/** The door from the operator's flags; a one-line error naming the flag that is wrong. */
export function parseManagementDoor(domain: string, address: string | undefined): ManagementDoor {
  parseDoorDomain(domain, '--front-door-domain');
  const at = address === undefined ? undefined : splitHostPort(address);
  if (!at || isIP(at.host) === 0 || at.host === '0.0.0.0' || at.host === '::')
    throw new UserError(
      `--front-door-address ${address ?? '(none)'}: expected the IP address and port nodes dial, such as 192.0.2.10:443 (a management node's and the door Service's node port, or a load balancer's)`,
    );
  return { domain, host: at.host, port: at.port };
}

/** Cluster `c`'s names at the door (its metadata.name under the door's domain). */
export const clusterDoorNames = (c: KctlCluster, domain: string): FrontDoorNames =>
  doorNames(c.metadata.name, domain, isFull(c));

/** Cluster `c`'s handoff key (64 hex digits): one per cluster, derived from the door's key. */
export const clusterDoorKey = (doorKey: Buffer, c: KctlCluster): string =>
  createHmac('sha256', doorKey).update(`kctl-front-door/${c.metadata.uid}`).digest('hex');

const doorKeyPath = (name?: string) =>
  resourcePath({ apiVersion: 'v1', resource: 'secrets', namespace: DOOR_KEY_SECRET.namespace, name });

/** The door's key; with `make`, made when missing (the operator's), else undefined until it is. */
export async function doorKey(kube: KubeClient, make: boolean): Promise<Buffer | undefined> {
  const read = async () => {
    const s = await kube.find<{ data?: { key?: string } }>(doorKeyPath(DOOR_KEY_SECRET.name));
    const key = s?.data?.key && Buffer.from(s.data.key, 'base64');
    return key && key.length === 32 ? key : undefined;
  };
  const have = await read();
  if (have || !make) return have;
  const made = {
    apiVersion: 'v1',
    kind: 'Secret',
    metadata: { name: DOOR_KEY_SECRET.name, namespace: DOOR_KEY_SECRET.namespace },
    type: 'Opaque',
    data: { key: randomBytes(32).toString('base64') },
  };
  // Created, never replaced: every pod's key derives from it. Two operators racing: one wins, both read it.
  await kube.request('POST', doorKeyPath(), made).catch((err: unknown) => {
    if (!(err instanceof KubeApiError && err.status === 409)) throw err;
  });
  const key = await read();
  if (!key)
    throw new Error(
      `Secret ${DOOR_KEY_SECRET.namespace}/${DOOR_KEY_SECRET.name} has no 32-byte key; delete it and the operator makes a new one (every cluster's pods roll)`,
    );
  return key;
}

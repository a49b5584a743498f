// kctl's routes to other nodes' pod ranges in this network namespace: each carries protocol
// ROUTE_PROTO, so a sync only ever touches routes kctl made. What the routes should be is the
// mode's (overlay.ts desiredRoutes); network.ts syncs them, `kctl reset` removes them.
import { ip, ipJson } from '../host/ip.ts';
import type { Logger } from '../base/log.ts';
import { reasonOf } from '../base/errors.ts';

/** Routing protocol number on kctl's routes (unassigned in rtnetlink; see /etc/iproute2/rt_protos). */
export const ROUTE_PROTO = '177';

/** A route to a peer's pod CIDR: a gateway, a device, or both (on-link). */
export interface PodRoute {
  via?: string;
  dev?: string;
}

/** `ip route replace` arguments after the destination. */
export function routeArgs(r: PodRoute): string[] {
  return [...(r.via ? ['via', r.via] : []), ...(r.dev ? ['dev', r.dev] : []), ...(r.via && r.dev ? ['onlink'] : [])];
}

/** kctl's routes in this network namespace: podCIDR -> gateway and device. */
export async function currentRoutes(): Promise<Map<string, { gateway?: string; dev?: string }>> {
  const out = ipJson<{ dst: string; gateway?: string; dev?: string }>(
    await ip(['-j', '-4', 'route', 'show', 'proto', ROUTE_PROTO]),
  );
  return new Map(out.map((r) => [r.dst, { gateway: r.gateway, dev: r.dev }]));
}

/** True when the route in place is the one wanted (a route via a gateway alone may sit on any device). */
const sameRoute = (want: PodRoute, have: { gateway?: string; dev?: string } | undefined): boolean =>
  !!have && want.via === have.gateway && (!want.dev || want.dev === have.dev);

/** Puts exactly `want` (podCIDR -> route) in place among kctl's routes; returns what failed. */
export async function syncPodRoutes(want: Map<string, PodRoute>, log: Logger): Promise<string[]> {
  const errors: string[] = [];
  const have = await currentRoutes();
  for (const [cidr, route] of want) {
    if (sameRoute(route, have.get(cidr))) continue;
    try {
      await ip(['route', 'replace', cidr, ...routeArgs(route), 'proto', ROUTE_PROTO]);
      log.info({ podCIDR: cidr, ...route }, 'route to node pod network');
    } catch (err) {
      errors.push(reasonOf(err));
    }
  }
  for (const cidr of have.keys()) {
    if (want.has(cidr)) continue;
    await ip(['route', 'del', cidr, 'proto', ROUTE_PROTO]).catch((err: unknown) => errors.push(reasonOf(err)));
    log.info({ podCIDR: cidr }, 'removed route to a node that is gone');
  }
  return errors;
}

/** Every route kctl made (`kctl reset`). */
export async function removePodRoutes(): Promise<void> {
  for (const cidr of (await currentRoutes().catch(() => new Map())).keys()) {
    await ip(['route', 'del', cidr, 'proto', ROUTE_PROTO]).catch(() => undefined);
  }
}

// What the front-door e2e files share: the door's port and cluster name in the lab, the controller
// config that turns it on, and a node host that may reach nothing of the controller host's but it.
import assert from 'node:assert/strict';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { Result } from 'execa';
import { waitFor } from '../../wait.ts';
import { track, type Tracked } from './cluster.ts';
import type { Lab, LabHost } from './lab.ts';

export const DOOR_PORT = 8443;
export const DOOR_API = 'alpha.clusters.test';

/** `<dir>/kctl.yaml` (labController's config) for a controller on `ctl`, with the front door on or off. */
export function writeDoorConfig(dir: string, ctl: LabHost, door = true): Promise<void> {
  return writeFile(
    join(dir, 'kctl.yaml'),
    [
      'spec:',
      `  api: { address: ${ctl.ip} }`,
      ...(door ? [`  frontDoor: { enabled: true, port: ${DOOR_PORT}, baseDomain: clusters.test, name: alpha }`] : []),
      '',
    ].join('\n'),
  );
}

/** Rejects every TCP connection from `host` to `ctl` but the door's, and checks it. */
export async function onlyTheDoor(lab: Lab, host: LabHost, ctl: LabHost): Promise<void> {
  const rule = [
    '-w',
    '5',
    '-A',
    'OUTPUT',
    '-d',
    ctl.ip,
    '-p',
    'tcp',
    '!',
    '--dport',
    String(DOOR_PORT),
    '-j',
    'REJECT',
  ];
  const r = await host.run('iptables', rule);
  assert.equal(r.exitCode, 0, String(r.stderr));
  for (const port of [6443, 8132, 9443])
    assert.equal(await lab.canConnect(host, ctl, port), false, `${host.name} reaches ${port}`);
  assert.equal(await lab.canConnect(host, ctl, DOOR_PORT), true, `${host.name} does not reach the front door`);
}

/** What a pod's GET of /api through `url` printed, with its service account token (busybox wget; the CA is not checked). */
export async function podGetsApi(
  kubectl: (args: string[]) => Promise<Result>,
  pod: string,
  url = 'https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT',
): Promise<Result> {
  const token = '$(cat /var/run/secrets/kubernetes.io/serviceaccount/token)';
  return kubectl([
    'exec',
    pod,
    '--',
    'sh',
    '-c',
    `wget -q -T 5 -O- --no-check-certificate --header "Authorization: Bearer ${token}" ${url}/api`,
  ]);
}

/** Rejects every connection forwarded from `host`'s pods to `ctl` (the door's port too): pods have no route there. */
export async function noPodRouteTo(host: LabHost, ctl: LabHost): Promise<void> {
  const r = await host.run('iptables', ['-w', '5', '-A', 'FORWARD', '-d', ctl.ip, '-j', 'REJECT']);
  assert.equal(r.exitCode, 0, String(r.stderr));
}

/** The kubernetes Service's endpoints as its EndpointSlice names them (address:port, sorted). */
export async function kubernetesEndpointsNow(kubectl: (args: string[]) => Promise<Result>): Promise<string> {
  const r = await kubectl(['get', 'endpointslice', 'kubernetes', '-o', 'json']);
  if (r.exitCode !== 0) return '';
  const slice = JSON.parse(String(r.stdout)) as { endpoints?: { addresses: string[] }[]; ports?: { port: number }[] };
  const port = slice.ports?.[0]?.port;
  return (slice.endpoints ?? [])
    .flatMap((e) => e.addresses.map((a) => `${a}:${port}`))
    .sort()
    .join(' ');
}

/** The lab's HTTP proxy's port (Debian's tinyproxy). */
export const PROXY_PORT = 8888;

/**
 * A real HTTP proxy on `px` (tinyproxy, which may CONNECT to `doorPort` only, logging each CONNECT),
 * once `client` reaches it; its config in `dir`. Returns it and the HTTPS_PROXY value for it.
 */
export async function startProxy(
  lab: Lab,
  px: LabHost,
  client: LabHost,
  dir: string,
  doorPort: number,
): Promise<{ proxy: Tracked; url: string }> {
  const conf = join(dir, 'tinyproxy.conf');
  const lines = [`Port ${PROXY_PORT}`, `Listen ${px.ip}`, 'Timeout 600', `ConnectPort ${doorPort}`, 'LogLevel Connect'];
  await writeFile(conf, `${lines.join('\n')}\n`);
  const proxy = track(px.spawn('/usr/bin/tinyproxy', ['-d', '-c', conf]));
  await waitFor('the proxy listens', 30_000, async () => lab.canConnect(client, px, PROXY_PORT), proxy.log);
  return { proxy, url: `http://${px.ip}:${PROXY_PORT}` };
}

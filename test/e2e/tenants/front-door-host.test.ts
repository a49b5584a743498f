// One controller host behind one port: two full named clusters (alpha, beta) and an api-only
// tenant (gamma), each with spec.frontDoor on the same port, and every other port of the host
// closed to the lab's other hosts (its firewall lets them reach the door's port only; alpha opens
// nothing else itself: spec.frontDoor.only puts its servers on loopback). alpha's
// worker (wa) dials the door itself; beta's (wb) has no way out but the lab's HTTP proxy (px,
// Debian's tinyproxy). Both join with tokens that name the door, run pods, and logs, exec and
// port-forward reach them; a validating webhook served by a pod on wa admits and denies for alpha;
// pods on both workers read their cluster's API through the kubernetes Service (the node-local
// address) while every connection from their pods to the controller host is rejected. From px, an
// admin reaches each cluster's API by its name through the door; a name no cluster has is closed,
// and alpha's credentials at beta's name fail (beta's certificate is not of alpha's CA).
import assert from 'node:assert/strict';
import { copyFile, mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { test, type TestContext } from 'node:test';
import type { TenantListEntry } from '../../../src/cli/tenant.ts';
import { decodeTokenFor } from '../../../src/join/token.ts';
import { controllerReady, runPinnedPod, startLabWorker, track, type Tracked } from '../lab/cluster.ts';
import { kubernetesEndpointsNow, noPodRouteTo, podGetsApi, startProxy } from '../lab/front-door.ts';
import { HaLab } from '../lab/ha-lab.ts';
import { hostStateArgs, ownHostState } from '../lab/kctl.ts';
import type { LabHost } from '../lab/lab.ts';
import { startLab } from '../lab/lab-test.ts';
import { TESTTOOL_TAR, testtoolImage } from '../lab/testtool-image.ts';
import { webhookCheck } from '../lab/webhook.ts';
import { waitFor } from '../../wait.ts';

ownHostState();

const DOMAIN = 'clusters.test';
const DOOR_PORT = 8443;
const RANGE_BASE = 21000 + Math.floor(Math.random() * 40) * 30;
const FULL = ['alpha', 'beta'] as const;
type Full = (typeof FULL)[number];
const ALL = [...FULL, 'gamma'] as const;
type Name = (typeof ALL)[number];

test('one controller host, one port: two full clusters and an api-only one behind the front door; workers (one through an HTTP proxy) join and work, webhooks and pods reach the API with no other port open', async (t: TestContext) => {
  const { lab, dir, kctlBin } = await startLab(t, 'fdh', ['ctl', 'wa', 'wb', 'px'], {
    dir: 'kctl-fdhost-',
    workers: ['wa', 'wb'],
  });
  const [ctl, px] = [lab.host('ctl'), lab.host('px')];
  const workerOf: Record<Full, LabHost> = { alpha: lab.host('wa'), beta: lab.host('wb') };
  const root = ['--data-dir', join(dir, 'c-data'), '--run-dir', join(dir, 'c-run'), ...hostStateArgs()];
  const run = (args: string[], input?: string) => ctl.run(kctlBin, [...root, ...args], { input, timeout: 120_000 });
  const kubectl = (n: Name) => (args: string[], input?: string) => run(['--name', n, 'kubectl', ...args], input);
  const adminConf = (n: Name) => join(dir, 'c-data', 'tenants', n, 'pki', 'admin.conf');

  // The webhook's image goes into wa's bundles before its worker starts.
  await mkdir(join(dir, 'wa-data', 'images'), { recursive: true });
  await copyFile(await testtoolImage(), join(dir, 'wa-data', 'images', TESTTOOL_TAR));

  // alpha opens nothing but the door (spec.frontDoor.only); beta and gamma keep their ports, closed by the firewall below.
  const door = (n: Name) =>
    `  frontDoor: { enabled: true, port: ${DOOR_PORT}, baseDomain: ${DOMAIN}${n === 'alpha' ? ', only: true' : ''} }`;
  const controllers: Tracked[] = [];
  for (const [i, n] of ALL.entries()) {
    const config = join(dir, `${n}.yaml`);
    const profile = n === 'gamma' ? 'api-only' : 'full';
    await writeFile(
      config,
      ['spec:', `  profile: ${profile}`, `  api: { address: ${ctl.ip} }`, door(n), ''].join('\n'),
    );
    const range = `${RANGE_BASE + i * 10}-${RANGE_BASE + i * 10 + 9}`;
    controllers.push(
      track(
        ctl.spawn(kctlBin, [...root, '--name', n, 'controller', '--single', '--config', config, '--port-range', range]),
      ),
    );
  }
  for (const [i, n] of ALL.entries()) await controllerReady(controllers[i]!, `cluster ${n} ready`);
  const listed = JSON.parse(String((await run(['tenant', 'list', '-o', 'json'])).stdout)) as TenantListEntry[];
  const ports = Object.fromEntries(listed.map((e) => [e.name, e.ports])) as Record<Name, Record<string, number>>;
  // alpha's servers listen on loopback alone: not even the host itself reaches them at its address.
  for (const port of ['api', 'join', 'agent']) {
    assert.equal(await lab.canConnect(ctl, ctl, ports.alpha[port]!), false, `alpha's ${port} port is open`);
    assert.equal(await lab.canConnect(ctl, ctl, ports.beta[port]!), true, `beta's ${port} port is closed`);
  }

  // The controller host lets the other hosts reach the door's port and nothing else; it reaches no worker.
  for (const h of [workerOf.alpha, workerOf.beta, px]) {
    for (const rule of [
      ['-m', 'conntrack', '--ctstate', 'ESTABLISHED,RELATED', '-j', 'ACCEPT'],
      ['-p', 'tcp', '--dport', String(DOOR_PORT), '-j', 'ACCEPT'],
      ['-j', 'DROP'],
    ]) {
      const r = await ctl.run('iptables', ['-w', '5', '-A', 'INPUT', '-s', h.ip, ...rule]);
      assert.equal(r.exitCode, 0, String(r.stderr));
    }
  }
  for (const w of Object.values(workerOf)) await lab.isolate(w, ctl);
  for (const port of ['api', 'join', 'agent'])
    assert.equal(await lab.canConnect(workerOf.alpha, ctl, ports.alpha[port]!), false, `wa reaches alpha's ${port}`);
  assert.equal(await lab.canConnect(workerOf.alpha, ctl, DOOR_PORT), true, 'wa does not reach the door');

  // wb's only way out is px's proxy, which may CONNECT to the door's port only.
  const { url: proxyUrl } = await startProxy(lab, px, workerOf.beta, dir, DOOR_PORT);
  const blocked = await workerOf.beta.run('iptables', ['-w', '5', '-A', 'OUTPUT', '-d', ctl.ip, '-j', 'REJECT']);
  assert.equal(blocked.exitCode, 0, String(blocked.stderr));

  const tokens = {} as Record<Full, string>;
  for (const n of FULL) {
    const r = await run(['--name', n, 'token', 'create', '--role', 'worker', '--expiry', '1h']);
    assert.equal(r.exitCode, 0, String(r.stderr));
    tokens[n] = String(r.stdout).trim();
    assert.equal(decodeTokenFor(tokens[n], 'worker').frontDoor?.address, `${ctl.ip}:${DOOR_PORT}`);
  }
  const workers: Record<Full, Tracked> = {
    alpha: startLabWorker(kctlBin, workerOf.alpha, dir, tokens.alpha),
    beta: track(
      workerOf.beta.spawn(
        kctlBin,
        [
          'worker',
          ...['--token', tokens.beta, '--data-dir', join(dir, 'wb-data'), '--run-dir', join(dir, 'wb-run')],
          ...['--node-name', 'wb', '--node-ip', workerOf.beta.ip],
        ],
        { env: { ...process.env, HTTPS_PROXY: proxyUrl } },
      ),
    ),
  };
  for (const n of FULL)
    await waitFor(`${n}'s worker ready`, 300_000, async () => workers[n].saw('"msg":"worker ready"'), workers[n].log);
  for (const w of Object.values(workerOf)) await noPodRouteTo(w, ctl);

  const ha = new HaLab(kctlBin, dir);
  for (const n of FULL) {
    const k = kubectl(n);
    const node = workerOf[n].name;
    await runPinnedPod(k, `web-${n}`, node, `hello-${n}`, true);
    assert.match(String((await k(['logs', `web-${n}`])).stdout), new RegExp(`^hello-${n}$`, 'm'), `logs in ${n}`);
    const exec = await k(['exec', `web-${n}`, '--', 'cat', '/www/index.html']);
    assert.equal(String(exec.stdout).trim(), `web-${n}`, `exec in ${n}: ${String(exec.stderr)}`);
    const asCtl = { host: ctl, dataDir: join(dir, 'c-data'), runDir: join(dir, 'c-run'), tenant: n, config: '' };
    assert.equal(await ha.portForward(asCtl, `web-${n}`, 8080), `web-${n}`, `port-forward in ${n}`);
    // The pod reads its own cluster's API through the kubernetes Service, at the node-local address.
    const local = `198.18.0.1:${ports[n].api}`;
    await waitFor(`${n}'s kubernetes Service names ${local}`, 60_000, async () =>
      (await kubernetesEndpointsNow(k)) === local ? true : undefined,
    );
    const api = await waitFor(`a pod of ${n} reads the API`, 60_000, async () => {
      const r = await podGetsApi(k, `web-${n}`);
      return r.exitCode === 0 ? String(r.stdout) : undefined;
    });
    assert.match(api, /"kind":\s*"APIVersions"/);
  }
  // beta's node came through the proxy: the controller saw its agent's stream arrive from px.
  const beta = JSON.parse(String((await run(['--name', 'beta', 'status', '-o', 'json'])).stdout)) as {
    konnectivity?: { agents: { node?: string; via?: string; client?: string }[] };
  };
  const wbAgent = beta.konnectivity?.agents.find((a) => a.node === 'wb');
  assert.deepEqual([wbAgent?.via, wbAgent?.client], ['front-door', px.ip]);

  const ok = async (args: string[], input?: string): Promise<string> => {
    const r = await kubectl('alpha')(args, input);
    assert.equal(r.exitCode, 0, `kubectl ${args.join(' ')}: ${String(r.stderr)}`);
    return String(r.stdout);
  };
  await webhookCheck(t, { kubectl: kubectl('alpha') }, ok, ctl, (h) => lab.host(h), dir, ['wa']);

  // An admin outside the host reaches each API by its name through the door, and nothing else.
  const fromOutside = (conf: Name, name: string) =>
    px.run(
      kctlBin,
      [
        'kubectl',
        '--kubeconfig',
        adminConf(conf),
        '--server',
        `https://${ctl.ip}:${DOOR_PORT}`,
        '--tls-server-name',
        name,
        '--request-timeout',
        '10s',
        'get',
        '--raw',
        '/version',
      ],
      { timeout: 60_000 },
    );
  for (const n of ALL) {
    const r = await fromOutside(n, `${n}.${DOMAIN}`);
    assert.equal(r.exitCode, 0, `${n} by name from px: ${String(r.stderr)}`);
    assert.match(String(r.stdout), /"gitVersion"/);
  }
  const crossed = await fromOutside('alpha', `beta.${DOMAIN}`);
  assert.notEqual(crossed.exitCode, 0, "alpha's credentials were accepted at beta's name");
  assert.match(String(crossed.stderr), /certificate signed by unknown authority/);
  const unknown = await fromOutside('alpha', `nobody.${DOMAIN}`);
  assert.notEqual(unknown.exitCode, 0, 'a name no cluster has was answered');
  assert.doesNotMatch(String(unknown.stderr), /gitVersion/);
});

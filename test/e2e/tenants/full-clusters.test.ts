// Full named clusters on one controller host: `kctl controller --name NAME` with spec.profile:
// full, twice (alpha and beta), each with one worker on its own lab host. A worker reaches the
// controller host only on its own cluster's API, join and agent ports (a firewall on the controller
// host), and nothing on the controller host reaches a worker (lab.isolate). Each cluster runs a pod;
// logs, exec and port-forward reach it through that cluster's own tunnel. Across the clusters,
// each way: a worker token aimed at the other cluster is rejected, the admin certificate gets 401,
// and an agent with the other cluster's node certificate is refused by the konnectivity server.
// kctl tenant list shows both as full clusters with 1/1 nodes and one agent; their kube-apiservers
// and kines run with GOGC=25.
import assert from 'node:assert/strict';
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { test, type TestContext } from 'node:test';
import { parse } from 'yaml';
import type { TenantListEntry } from '../../../src/cli/tenant.ts';
import type { ControllerStatusReport } from '../../../src/controller/leases/status.ts';
import { decodeTokenFor, encodeToken } from '../../../src/join/token.ts';
import { controllerReady, nodeReady, runPinnedPod, startLabWorker, track, type Tracked } from '../lab/cluster.ts';
import type { LabHost } from '../lab/lab.ts';
import { startLab } from '../lab/lab-test.ts';
import { nodeCert } from '../lab/node-cert.ts';
import { HaLab, type LabCtl } from '../lab/ha-lab.ts';
import { hostStateArgs, ownHostState } from '../lab/kctl.ts';
import { waitFor } from '../../wait.ts';

ownHostState();

const RANGE_BASE = 19900 + Math.floor(Math.random() * 40) * 20;
const NAMES = ['alpha', 'beta'] as const;
type Name = (typeof NAMES)[number];

test('two full named clusters on one controller host: each its own worker, pod and tunnel; tokens and certificates of one are refused by the other; tenant list shows both', async (t: TestContext) => {
  const { lab, dir, kctlBin } = await startLab(t, 'fc', ['ctl', 'wa', 'wb'], {
    dir: 'kctl-full-clusters-',
    workers: ['wa', 'wb'],
  });
  const ctl = lab.host('ctl');
  const workerOf: Record<Name, LabHost> = { alpha: lab.host('wa'), beta: lab.host('wb') };
  const root = ['--data-dir', join(dir, 'c-data'), '--run-dir', join(dir, 'c-run'), ...hostStateArgs()];
  const config = join(dir, 'kctl.yaml');
  await writeFile(config, `spec:\n  profile: full\n  api: { address: ${ctl.ip} }\n`);
  const run = (args: string[], input?: string) => ctl.run(kctlBin, [...root, ...args], { input, timeout: 120_000 });
  const kubectl = (n: Name) => (args: string[], input?: string) => run(['--name', n, 'kubectl', ...args], input);
  const pki = (n: Name) => join(dir, 'c-data', 'tenants', n, 'pki');
  const other = (n: Name): Name => (n === 'alpha' ? 'beta' : 'alpha');

  const controllers = new Map<Name, Tracked>();
  for (const n of NAMES)
    controllers.set(
      n,
      track(
        ctl.spawn(kctlBin, [
          ...root,
          '--name',
          n,
          'controller',
          '--single',
          '--config',
          config,
          '--port-range',
          `${RANGE_BASE}-${RANGE_BASE + 19}`,
        ]),
      ),
    );
  for (const n of NAMES) await controllerReady(controllers.get(n)!, `cluster ${n} ready`);
  const tenants = async (): Promise<TenantListEntry[]> => {
    const r = await run(['tenant', 'list', '-o', 'json']);
    assert.equal(r.exitCode, 0, String(r.stderr));
    return JSON.parse(String(r.stdout)) as TenantListEntry[];
  };
  const ports = Object.fromEntries((await tenants()).map((e) => [e.name, e.ports])) as Record<
    Name,
    Record<string, number>
  >;
  const all = NAMES.flatMap((n) => Object.values(ports[n]!));
  assert.equal(new Set(all).size, all.length, `ports picked twice: ${all.join(',')}`);

  // Each worker reaches only its own cluster's API, join and agent ports on the controller host.
  for (const n of NAMES) {
    const w = workerOf[n];
    const p = ports[n];
    const fw = (...a: string[]) => ctl.run('iptables', ['-w', '5', '-A', 'INPUT', '-s', w.ip, ...a]);
    for (const rule of [
      ['-m', 'conntrack', '--ctstate', 'ESTABLISHED,RELATED', '-j', 'ACCEPT'],
      ['-p', 'tcp', '-m', 'multiport', '--dports', `${p.api},${p.join},${p.agent}`, '-j', 'ACCEPT'],
      ['-j', 'DROP'],
    ])
      assert.equal((await fw(...rule)).exitCode, 0, `firewall rule for ${w.name}`);
    await lab.isolate(w, ctl);
  }
  assert.equal(await lab.canConnect(workerOf.alpha, ctl, ports.alpha.api!), true, "wa cannot reach alpha's API");
  for (const port of ['api', 'join', 'agent'])
    assert.equal(await lab.canConnect(workerOf.alpha, ctl, ports.beta[port]!), false, `wa reaches beta's ${port} port`);

  const tokens = {} as Record<Name, string>;
  for (const n of NAMES) {
    const r = await run(['--name', n, 'token', 'create', '--role', 'worker', '--expiry', '1h']);
    assert.equal(r.exitCode, 0, String(r.stderr));
    tokens[n] = String(r.stdout).trim();
    const info = decodeTokenFor(tokens[n], 'worker');
    assert.deepEqual(
      info.konnectivity,
      [`${ctl.ip}:${ports[n].agent}`],
      `cluster ${n}'s token names its own agent port`,
    );
  }
  const workers = NAMES.map((n) => startLabWorker(kctlBin, workerOf[n], dir, tokens[n]));
  for (const [i, n] of NAMES.entries())
    await waitFor(
      `the worker of ${n} ready`,
      240_000,
      async () => workers[i]!.saw('"msg":"worker ready"'),
      workers[i]!.log,
    );

  for (const n of NAMES) {
    const k = kubectl(n);
    const node = workerOf[n].name;
    assert.equal(await nodeReady(k, node), true);
    assert.equal(
      String((await k(['get', 'nodes', '-o', 'name'])).stdout).trim(),
      `node/${node}`,
      `cluster ${n} has only its own node`,
    );
    await runPinnedPod(k, `web-${n}`, node, `hello-${n}`, true);
    assert.match(String((await k(['logs', `web-${n}`])).stdout), new RegExp(`^hello-${n}$`, 'm'), `logs in ${n}`);
    assert.equal(String((await k(['exec', `web-${n}`, '--', 'hostname'])).stdout).trim(), `web-${n}`, `exec in ${n}`);
    const asCtl: LabCtl = { host: ctl, dataDir: join(dir, 'c-data'), runDir: join(dir, 'c-run'), config, tenant: n };
    assert.equal(
      await new HaLab(kctlBin, dir).portForward(asCtl, `web-${n}`, 8080),
      `web-${n}`,
      `port-forward in ${n}`,
    );
  }

  const status = async (n: Name): Promise<ControllerStatusReport> => {
    const r = await run(['--name', n, 'status', '-o', 'json']);
    return JSON.parse(String(r.stdout)) as ControllerStatusReport;
  };
  const agentIds = async (n: Name) => ((await status(n)).konnectivity?.agents ?? []).map((a) => a.id).sort();
  for (const n of NAMES)
    assert.deepEqual(await agentIds(n), [`system:node:${workerOf[n].name}`], `cluster ${n}'s agents`);

  for (const n of NAMES) {
    const target = other(n);
    const targetCa = await readFile(join(pki(target), 'ca.crt'), 'utf8');

    // 1. n's worker token, aimed at the other cluster (its addresses and CA, n's secret): rejected.
    const mine = decodeTokenFor(tokens[n], 'worker');
    const theirs = decodeTokenFor(tokens[target], 'worker');
    const aimed = encodeToken({ ...theirs, bootstrapToken: mine.bootstrapToken });
    assert.notEqual(mine.bootstrapToken, theirs.bootstrapToken);
    const joined = await ctl.run(
      kctlBin,
      [
        'worker',
        '--token',
        aimed,
        '--data-dir',
        join(dir, `x-${n}-data`),
        '--run-dir',
        join(dir, `x-${n}-run`),
        '--node-name',
        `x-${n}`,
        '--node-ip',
        ctl.ip,
      ],
      { timeout: 120_000 },
    );
    assert.notEqual(joined.exitCode, 0, `${n}'s token joined ${target}`);
    assert.match(String(joined.stderr).trim(), /rejected the join token/, `${n}'s token at ${target}`);
    assert.equal(
      String((await kubectl(target)(['get', 'nodes', '-o', 'name'])).stdout).trim(),
      `node/${workerOf[target].name}`,
    );

    // 2. n's admin certificate at the other cluster's API: 401 there, 200 at home.
    const kc = parse(await readFile(join(pki(n), 'admin.conf'), 'utf8')) as {
      users: { user: { 'client-certificate-data': string; 'client-key-data': string } }[];
    };
    const [certFile, keyFile] = [join(dir, `${n}-admin.crt`), join(dir, `${n}-admin.key`)];
    await writeFile(certFile, Buffer.from(kc.users[0]!.user['client-certificate-data'], 'base64'));
    await writeFile(keyFile, Buffer.from(kc.users[0]!.user['client-key-data'], 'base64'), { mode: 0o600 });
    const code = async (c: Name) =>
      String(
        (
          await ctl.run(
            'curl',
            [
              '-sk',
              '-o',
              '/dev/null',
              '-w',
              '%{http_code}',
              '--cert',
              certFile,
              '--key',
              keyFile,
              `https://${ctl.ip}:${ports[c].api}/api`,
            ],
            {
              timeout: 30_000,
            },
          )
        ).stdout,
      );
    assert.equal(await code(n), '200', `${n}'s admin certificate at home`);
    assert.equal(await code(target), '401', `${n}'s admin certificate at ${target}`);

    // 3. An agent with a node certificate of n (as n's worker holds) at the other cluster's agent port, trusting its CA: refused.
    const cert = await nodeCert(pki(n), dir, `${workerOf[n].name}`);
    const caFile = join(dir, `${target}-ca.crt`);
    await writeFile(caFile, targetCa);
    const impostor = track(
      ctl.spawn(kctlBin, [
        'konnectivity-agent',
        `--proxy-server-host=${ctl.ip}`,
        `--proxy-server-port=${ports[target].agent}`,
        `--ca-cert=${caFile}`,
        `--agent-cert=${cert.cert}`,
        `--agent-key=${cert.key}`,
        `--agent-id=x-${n}`,
        '--health-server-port=18093',
        '--admin-server-port=18094',
      ]),
    );
    try {
      await waitFor(
        `${target} refuses ${n}'s agent certificate`,
        30_000,
        async () => impostor.saw('no client certificate signed by the cluster CA'),
        impostor.log,
      );
      assert.deepEqual(
        await agentIds(target),
        [`system:node:${workerOf[target].name}`],
        `${target}'s agents after ${n}'s impostor`,
      );
    } finally {
      impostor.child.kill('SIGKILL'); // the first SIGTERM only drains, as upstream's agent does
      await impostor.exited;
    }
  }

  const list = await tenants();
  assert.deepEqual(
    list.map((e) => [e.name, e.profile, e.state, e.nodes, e.agents]),
    NAMES.map((n) => [n, 'full', 'running', { ready: 1, total: 1 }, 1]),
  );
  const text = String((await run(['tenant', 'list'])).stdout);
  for (const n of NAMES)
    assert.match(
      text,
      new RegExp(
        `^${n}\\s+full\\s+running\\s+\\S+\\s+https://${ctl.ip.replace(/\./g, '\\.')}:${ports[n].api}\\s+1/1\\s+1\\s+kine \\(sqlite\\)\\s+\\d+Mi\\s+\\d+$`,
        'm',
      ),
    );
  t.diagnostic(`tenant list:\n${text}`);
  // A named cluster's Go components collect garbage at GOGC=25 (spec.gcPercent's default there).
  for (const n of NAMES)
    for (const program of ['kube-apiserver', 'kine', 'kube-scheduler', 'kube-controller-manager']) {
      const pid = (await readFile(join(dir, 'c-run', 'tenants', n, `${program}.pid`), 'utf8')).trim();
      const env = (await readFile(`/proc/${pid}/environ`, 'utf8')).split('\0');
      assert.ok(
        env.includes('GOGC=25'),
        `${n}'s ${program} runs with ${env.filter((e) => e.startsWith('GO')).join(' ') || 'no Go settings'}`,
      );
    }

  for (const w of workers) w.child.kill('SIGTERM');
  await Promise.all(workers.map((w) => w.exited));
  for (const c of controllers.values()) c.child.kill('SIGTERM');
  await Promise.all([...controllers.values()].map((c) => c.exited));
});

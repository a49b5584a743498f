// `kctl konnectivity-agent` as a drop-in for upstream's proxy-agent v0.36.0, side by side with the
// real one: the same argument vector, the same endpoint answers, the same metric families (HELP
// and label names) and, for the same dial errors, the same series and values; the first SIGTERM
// drains, the second stops; the `proxy-agent` invocation name; every unknown flag one line.
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { readFile, symlink, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { test } from 'node:test';
import { execa } from 'execa';
import { dialViaProxy } from '../../../src/konnectivity/client.ts';
import { tempDir } from '../../helpers.ts';
import { echoServer, readN } from '../../unit/konnectivity/fixtures.ts';
import { waitFor } from '../../wait.ts';
import {
  assertSameFamilies,
  get,
  grpcServerFlags,
  helpFlags,
  pkiFiles,
  sample,
  series,
  start,
  type Files,
  type Proc,
  type T,
} from '../lab/dropin.ts';
import { track } from '../lab/cluster.ts';
import { hostStateArgs, kctl, requireKctl, ownHostState } from '../lab/kctl.ts';
import { freePort } from '../../ports.ts';
import { upstreamBin } from '../lab/upstream.ts';

ownHostState();

/** An upstream proxy-server: grpc frontend on a UDS, agents on `agentPort`. */
async function upstreamServer(t: T, f: Files, name: string, agentPort: number): Promise<{ uds: string; proc: Proc }> {
  const uds = join(f.dir, `${name}.sock`);
  const proc = start(t, upstreamBin()['proxy-server'], [
    ...grpcServerFlags(f, uds, agentPort),
    `--admin-port=${await freePort()}`,
    `--health-port=${await freePort()}`,
    '--health-bind-address=127.0.0.1',
    `--server-id=${name}`,
    '--server-count=1',
  ]);
  await waitFor(`upstream server ${name}`, 30_000, () => existsSync(uds)).catch((err: Error) => {
    throw new Error(`${err.message}\n${proc.output()}`);
  });
  return { uds, proc };
}

/** Every flag a DaemonSet or sidecar manifest passes, in --flag=value form (ports aside, the same for both agents). */
function agentArgs(f: Files, agentPort: number, health: number, admin: number, id: string): string[] {
  return [
    '--logtostderr=true',
    '--v=2',
    `--ca-cert=${f.ca}`,
    `--agent-cert=${f.agentCert}`,
    `--agent-key=${f.agentKey}`,
    '--proxy-server-host=127.0.0.1',
    `--proxy-server-port=${agentPort}`,
    `--health-server-port=${health}`,
    `--admin-server-port=${admin}`,
    '--admin-bind-address=127.0.0.1',
    `--agent-id=${id}`,
    '--agent-identifiers=host=dropin-node&ipv4=127.0.0.1',
    '--sync-interval=1s',
    '--sync-interval-cap=10s',
    '--probe-interval=1s',
    '--keepalive-time=1h0m0s',
    '--sync-forever=false',
    '--alpn-proto=konnectivity',
    '--enable-profiling=true',
    '--enable-contention-profiling=false',
    '--count-server-leases=false',
    '--lease-namespace=kube-system',
    '--lease-label=k8s-app=konnectivity-server',
    '--server-count-source=default',
    '--kube-api-content-type=application/vnd.kubernetes.protobuf',
    '--xfr-channel-size=150',
    '--warn-on-channel-limit=false',
    '--stderrthreshold=2',
  ];
}

const readyz = async (port: number) =>
  Promise.all(['/healthz', '/readyz', '/ready'].map((p) => get(`http://127.0.0.1:${port}${p}`)));

/** Drops every TCP packet to `ip`: a dial there times out instead of being answered or refused. */
function blackhole(t: T, ip: string): void {
  const rule = ['OUTPUT', '-d', `${ip}/32`, '-p', 'tcp', '-j', 'DROP'];
  execFileSync('iptables', ['-w', '5', '-I', ...rule]);
  t.after(() => {
    execFileSync('iptables', ['-w', '5', '-D', ...rule]);
  });
}

test(
  'kctl konnectivity-agent beside upstream proxy-agent: same flags, endpoints, metric families and dial-failure series',
  { timeout: 240_000 },
  async (t) => {
    const f = await pkiFiles(t);
    const agentPorts = { up: await freePort(), kc: await freePort() };
    const health = { up: await freePort(), kc: await freePort() };
    const admin = { up: await freePort(), kc: await freePort() };
    const upAgent = start(
      t,
      upstreamBin()['proxy-agent'],
      agentArgs(f, agentPorts.up, health.up, admin.up, 'agent-up'),
    );
    const kcAgent = start(t, requireKctl(), [
      'konnectivity-agent',
      ...agentArgs(f, agentPorts.kc, health.kc, admin.kc, 'agent-kc'),
    ]);
    const outputs = () => `\nupstream agent:\n${upAgent.output()}\nkctl agent:\n${kcAgent.output()}`;
    await waitFor('both health ports', 30_000, async () =>
      (
        await Promise.all([health.up, health.kc].map((p) => get(`http://127.0.0.1:${p}/healthz`).catch(() => null)))
      ).every((r) => r?.status === 200),
    ).catch((err: Error) => {
      throw new Error(`${err.message}${outputs()}`);
    });

    // Before any server answers.
    const before = await Promise.all([readyz(health.up), readyz(health.kc)]);
    assert.deepEqual(before[1], before[0], 'healthz, readyz, ready before connecting');
    assert.deepEqual(before[0][0], { status: 200, body: 'ok' });
    assert.deepEqual(before[0][1], {
      status: 503,
      body: '[+]ping ok\n[-]server-connected failed: no servers connected\n',
    });

    // Each agent gets its own upstream server, configured alike.
    const servers = {
      up: await upstreamServer(t, f, 'server-up', agentPorts.up),
      kc: await upstreamServer(t, f, 'server-kc', agentPorts.kc),
    };
    await waitFor('both agents ready', 60_000, async () =>
      (await Promise.all([health.up, health.kc].map((p) => get(`http://127.0.0.1:${p}/readyz`)))).every(
        (r) => r.status === 200,
      ),
    ).catch((err: Error) => {
      throw new Error(`${err.message}${outputs()}`);
    });
    const after = await Promise.all([readyz(health.up), readyz(health.kc)]);
    assert.deepEqual(after[1], after[0], 'healthz, readyz, ready once connected');
    assert.deepEqual(after[0][1], { status: 200, body: 'ok' });
    assert.deepEqual(
      await get(`http://127.0.0.1:${health.kc}/readyz?verbose`),
      await get(`http://127.0.0.1:${health.up}/readyz?verbose`),
    );

    // The same dials through each: one that works, a refused port, an unknown name, one that never answers.
    const echo = await echoServer(t);
    const closedPort = await freePort();
    blackhole(t, '192.0.2.77');
    for (const name of ['up', 'kc'] as const) {
      const uds = servers[name].uds;
      const tn = await dialViaProxy({ udsPath: uds, address: echo.address });
      tn.write('ping');
      assert.equal((await readN(tn, 4)).toString(), 'ping');
      tn.destroy();
      await assert.rejects(dialViaProxy({ udsPath: uds, address: `127.0.0.1:${closedPort}` }), /refused/);
      await assert.rejects(dialViaProxy({ udsPath: uds, address: 'no-such-host.invalid:80' }));
      await assert.rejects(dialViaProxy({ udsPath: uds, address: '192.0.2.77:80' }), /timeout/);
    }

    const scrape = async (port: number) => (await get(`http://127.0.0.1:${port}/metrics`)).body;
    const [upHealth, kcHealth] = [await scrape(health.up), await scrape(health.kc)];
    // The admin port's /metrics is a redirect to the health port on both; fetch follows it.
    const [upAdmin, kcAdmin] = [await scrape(admin.up), await scrape(admin.kc)];
    for (const [what, upText, kcText] of [
      ['health port', upHealth, kcHealth],
      ['admin port', upAdmin, kcAdmin],
    ] as const) {
      const compared = assertSameFamilies(what, upText, kcText);
      t.diagnostic(`${what}: ${compared.length} upstream families matched: ${compared.join(' ')}`);
    }
    const dialFailures = 'konnectivity_network_proxy_agent_endpoint_dial_failure_total';
    assert.deepEqual(series(kcHealth, dialFailures), series(upHealth, dialFailures));
    assert.deepEqual(series(upHealth, dialFailures), [
      `${dialFailures}{reason="timeout"} 1`,
      `${dialFailures}{reason="unknown"} 2`,
    ]);
    for (const fam of [
      'konnectivity_network_proxy_agent_dial_duration_seconds_count',
      'konnectivity_network_proxy_agent_open_server_connections',
    ])
      assert.deepEqual(series(kcHealth, fam), series(upHealth, fam), fam);
    assert.deepEqual(
      (await fetch(`http://127.0.0.1:${admin.kc}/metrics`, { redirect: 'manual' })).headers.get('location'),
      `//127.0.0.1:${health.kc}/metrics`,
    );
    // Profiling on: the admin port serves the index; the health port is all interfaces, admin loopback.
    assert.equal((await get(`http://127.0.0.1:${admin.kc}/debug/pprof/`)).status, 200);
    const listening = execFileSync('ss', ['-ltnH'], { encoding: 'utf8' });
    for (const name of ['up', 'kc'] as const) {
      assert.match(listening, new RegExp(`\\*:${health[name]}\\s`), `${name}: health port on every interface`);
      assert.match(listening, new RegExp(`127\\.0\\.0\\.1:${admin[name]}\\s`), `${name}: admin port on loopback`);
    }
    assert.doesNotMatch(kcAgent.output(), /no effect in kctl/, 'every inert flag was at its default: no warning');
  },
);

test('invoked as proxy-agent, kctl is the agent: --help lists every upstream flag; bad flags and values are one line each', async (t) => {
  const dir = await tempDir(t, 'kctl-proxy-agent-');
  const link = join(dir, 'proxy-agent');
  await symlink(requireKctl(), link);
  const token = join(dir, 'token');
  await writeFile(token, 'a-token', { mode: 0o600 });
  const upstreamHelp = await execa(upstreamBin()['proxy-agent'], ['--help'], { reject: false });
  const help = await execa(link, ['--help']);
  assert.equal(help.exitCode, 0);
  const upstreamNames = helpFlags(upstreamHelp.stdout + upstreamHelp.stderr);
  assert.ok(upstreamNames.length > 40, `upstream lists its flags (${upstreamNames.length})`);
  const kctlNames = helpFlags(help.stdout);
  assert.deepEqual(
    upstreamNames.filter((n) => !kctlNames.includes(n)),
    [],
    'every upstream flag is in kctl --help',
  );
  assert.deepEqual(helpFlags((await execa(requireKctl(), ['konnectivity-agent', '--help'])).stdout), kctlNames);

  for (const [args, line] of [
    [
      ['--admin-bind-adress=127.0.0.1'],
      /^kctl: proxy-agent: unknown flag --admin-bind-adress; see proxy-agent --help for the flags it takes$/,
    ],
    [
      ['--health-server-port=http'],
      /^kctl: proxy-agent: invalid value "http" for --health-server-port: expected an integer$/,
    ],
    [['--sync-forever=maybe'], /^kctl: proxy-agent: invalid value "maybe" for --sync-forever: expected true or false$/],
    [
      ['--agent-cert=/nonexistent/agent.crt', '--agent-key=/nonexistent/agent.key'],
      /^kctl: proxy-agent: --agent-cert \/nonexistent\/agent.crt: cannot read \(ENOENT\)$/,
    ],
    [
      [`--service-account-token-path=${token}`, '--enable-contention-profiling'],
      /^kctl: proxy-agent: --enable-contention-profiling needs --enable-profiling too$/,
    ],
    [['--proxy-server-port'], /^kctl: proxy-agent: flag --proxy-server-port needs a value$/],
    [['extra'], /^kctl: proxy-agent: unexpected argument "extra"; it takes only flags/],
  ] as const) {
    const r = await execa(link, [...args], { reject: false, timeout: 20_000 });
    assert.equal(r.exitCode, 1, `${args.join(' ')}: exit 1, as upstream's agent exits on bad flags`);
    assert.equal(r.stderr.split('\n').length, 1, `${args.join(' ')}: one line, got:\n${r.stderr}`);
    assert.match(r.stderr, line);
  }
});

test(
  'the first SIGTERM drains (open connections keep working, new dials go to the other agent), the second exits 0',
  { timeout: 180_000 },
  async (t) => {
    const f = await pkiFiles(t);
    const agentPort = await freePort();
    const server = await upstreamServer(t, f, 'server-drain', agentPort);
    const ports = { a: [await freePort(), await freePort()], b: [await freePort(), await freePort()] };
    const a = start(t, requireKctl(), [
      'konnectivity-agent',
      ...agentArgs(f, agentPort, ports.a[0]!, ports.a[1]!, 'agent-a'),
      '--debug',
    ]);
    await waitFor(
      'agent a ready',
      60_000,
      async () => (await get(`http://127.0.0.1:${ports.a[0]}/readyz`).catch(() => null))?.status === 200,
    ).catch((err: Error) => {
      throw new Error(`${err.message}\n${a.output()}\n${server.proc.output()}`);
    });
    const echo = await echoServer(t);
    const held = await dialViaProxy({ udsPath: server.uds, address: echo.address });
    const roundTrip = async (what: string) => {
      const echoed = new Promise<string>((resolve, reject) => {
        let got = '';
        const onData = (c: Buffer): void => {
          got += c.toString();
          if (got.length < what.length) return;
          held.off('data', onData);
          resolve(got);
        };
        held.on('data', onData);
        held.once('close', () => reject(new Error(`the held connection closed before "${what}" came back`)));
      });
      held.write(what);
      assert.equal(await echoed, what);
    };
    await roundTrip('before');

    // A second agent, upstream's, for the server to send new dials to.
    const b = start(t, upstreamBin()['proxy-agent'], agentArgs(f, agentPort, ports.b[0]!, ports.b[1]!, 'agent-b'));
    await waitFor(
      'agent b ready',
      60_000,
      async () => (await get(`http://127.0.0.1:${ports.b[0]}/readyz`).catch(() => null))?.status === 200,
    );
    const metricsOf = async (p: number[]) => (await get(`http://127.0.0.1:${p[0]}/metrics`)).body;
    const dialsDone = 'konnectivity_network_proxy_agent_dial_duration_seconds_count';
    const [aBefore, bBefore] = [
      sample(await metricsOf(ports.a), dialsDone),
      sample(await metricsOf(ports.b), dialsDone),
    ];
    assert.equal(aBefore, 1);

    a.child.kill('SIGTERM');
    await waitFor('agent a draining', 10_000, () => /draining; send it again to stop/.test(a.output()));
    await waitFor('DRAIN sent', 10_000, () => /"type":"DRAIN"|draining: new dials go to other agents/.test(a.output()));
    await new Promise((r) => setTimeout(r, 500)); // the server reads DRAIN from the stream
    for (let i = 0; i < 10; i++) {
      const tn = await dialViaProxy({ udsPath: server.uds, address: echo.address });
      tn.write(`n${i}`);
      assert.equal((await readN(tn, 2)).toString(), `n${i}`);
      tn.destroy();
    }
    await roundTrip('during drain');
    assert.equal(a.child.exitCode, null, 'a draining agent stays up');
    assert.equal(sample(await metricsOf(ports.a), dialsDone), aBefore, 'no new dial went through the draining agent');
    assert.equal(sample(await metricsOf(ports.b), dialsDone), bBefore + 10, 'the other agent took every new dial');
    assert.equal((await get(`http://127.0.0.1:${ports.a[0]}/healthz`)).status, 200);

    a.child.kill('SIGTERM');
    assert.equal(await a.exited, 0, `the second SIGTERM stops it with exit code 0:\n${a.output()}`);
    held.destroy();
    b.child.kill('SIGTERM');
  },
);

test(
  '--count-server-leases with --kubeconfig: both agents count the valid konnectivity-server leases of a real kube-apiserver',
  { timeout: 300_000 },
  async (t) => {
    const f = await pkiFiles(t);
    // A small real control plane to hold the leases: an api-only tenant.
    const root = ['--data-dir', join(f.dir, 'data'), '--run-dir', join(f.dir, 'run'), ...hostStateArgs()];
    const ctl = track(spawn(requireKctl(), [...root, '--name', 'leases', 'controller', '--port-range', '19600-19699']));
    t.after(async () => {
      ctl.child.kill('SIGTERM');
      await ctl.exited;
    });
    await waitFor('tenant ready', 240_000, () => ctl.child.exitCode !== null || ctl.saw('"msg":"controller ready"'));
    assert.equal(ctl.child.exitCode, null, ctl.log());
    const kubeconfig = join(f.dir, 'data', 'tenants', 'leases', 'pki', 'admin.conf');
    const now = Date.now();
    const lease = (name: string, renewedMsAgo: number, durationS: number, label = true) => ({
      apiVersion: 'coordination.k8s.io/v1',
      kind: 'Lease',
      metadata: {
        name,
        namespace: 'kube-system',
        labels: label ? { 'k8s-app': 'konnectivity-server' } : { app: 'other' },
      },
      spec: {
        holderIdentity: name,
        leaseDurationSeconds: durationS,
        renewTime: new Date(now - renewedMsAgo).toISOString().replace('Z', '000Z'),
      },
    });
    const leases = [
      lease('server-1', 1_000, 3600),
      lease('server-2', 1_000, 3600),
      lease('server-old', 7_200_000, 60),
      lease('not-a-server', 1_000, 3600, false),
    ];
    const applied = await kctl([...root, '--name', 'leases', 'kubectl', 'apply', '-f', '-'], {
      input: JSON.stringify({ apiVersion: 'v1', kind: 'List', items: leases }),
    });
    assert.equal(applied.exitCode, 0, String(applied.stderr));

    const agentPort = await freePort();
    await upstreamServer(t, f, 'server-leases', agentPort); // says servercount 1; the leases say 2
    const args = (health: number, admin: number, id: string) => [
      ...agentArgs(f, agentPort, health, admin, id).filter((a) => !a.startsWith('--count-server-leases')),
      '--count-server-leases=true',
      `--kubeconfig=${kubeconfig}`,
    ];
    const ports = { up: [await freePort(), await freePort()], kc: [await freePort(), await freePort()] };
    const up = start(t, upstreamBin()['proxy-agent'], args(ports.up[0]!, ports.up[1]!, 'lease-up'));
    const kc = start(t, requireKctl(), ['konnectivity-agent', ...args(ports.kc[0]!, ports.kc[1]!, 'lease-kc')]);
    const known = 'konnectivity_network_proxy_agent_known_server_count';
    const count = async (p: number[]) =>
      sample((await get(`http://127.0.0.1:${p[0]}/metrics`).catch(() => ({ body: '' }))).body, known);
    await waitFor(
      'both agents count 2 servers',
      60_000,
      async () => (await count(ports.up)) === 2 && (await count(ports.kc)) === 2,
    ).catch(async (err: Error) => {
      throw new Error(
        `${err.message}: upstream ${await count(ports.up)}, kctl ${await count(ports.kc)}\n${up.output()}\n${kc.output()}`,
      );
    });
    const listed = (await get(`http://127.0.0.1:${ports.kc[0]}/metrics`)).body;
    assert.ok(
      sample(listed, 'konnectivity_network_proxy_agent_lease_lists_total{http_response_code="200",reason=""}') >= 1,
      listed,
    );
    assert.ok(
      sample(listed, 'konnectivity_network_proxy_agent_lease_list_latency_seconds_count{http_response_code="200"}') >=
        1,
    );

    // A third server's lease appears: both follow it.
    const more = await kctl([...root, '--name', 'leases', 'kubectl', 'apply', '-f', '-'], {
      input: JSON.stringify(lease('server-3', 0, 3600)),
    });
    assert.equal(more.exitCode, 0, String(more.stderr));
    await waitFor(
      'both agents count 3 servers',
      60_000,
      async () => (await count(ports.up)) === 3 && (await count(ports.kc)) === 3,
    );
  },
);

test('the proxy-agent image: kctl airgap save-images writes it; its program runs as the agent with only what the image holds', async (t) => {
  const dir = await tempDir(t, 'kctl-proxy-agent-image-');
  const listed = String((await kctl(['airgap', 'list-images'])).stdout)
    .trim()
    .split('\n');
  const name = listed.find((n) => n.startsWith('kctl.local/proxy-agent:'));
  assert.ok(name, `list-images names the proxy-agent image: ${listed.join(' ')}`);
  const saved = await kctl(['airgap', 'save-images', name, '--dir', dir]);
  assert.equal(saved.exitCode, 0, String(saved.stderr));
  const tarball = join(dir, 'proxy-agent.oci.tar');
  assert.equal(String(saved.stdout).trim(), `${name}\t${tarball}`);

  // Unpack it as a runtime would: index -> manifest -> config and the one layer.
  const layout = join(dir, 'layout');
  const rootfs = join(dir, 'rootfs');
  execFileSync('mkdir', ['-p', layout, rootfs]);
  execFileSync('tar', ['-xf', tarball, '-C', layout]);
  const blob = (digest: string) => join(layout, 'blobs', 'sha256', digest.replace('sha256:', ''));
  const index = JSON.parse(await readFile(join(layout, 'index.json'), 'utf8')) as {
    manifests: { digest: string; annotations: Record<string, string> }[];
  };
  assert.equal(index.manifests[0]!.annotations['io.containerd.image.name'], name);
  const manifest = JSON.parse(await readFile(blob(index.manifests[0]!.digest), 'utf8')) as {
    config: { digest: string };
    layers: { digest: string }[];
  };
  const config = JSON.parse(await readFile(blob(manifest.config.digest), 'utf8')) as {
    config: { Entrypoint: string[]; User: string };
  };
  assert.deepEqual(config.config.Entrypoint, ['/proxy-agent']);
  assert.equal(config.config.User, '65534:65534');
  assert.equal(manifest.layers.length, 1);
  execFileSync('tar', ['-xzf', blob(manifest.layers[0]!.digest), '-C', rootfs]);

  // Only the image's files: the entrypoint under chroot, as nobody, is the agent.
  const run = (args: string[]) =>
    execa('/usr/sbin/chroot', ['--userspec=65534:65534', rootfs, '/proxy-agent', ...args], {
      reject: false,
      extendEnv: false,
      env: { PATH: '/usr/bin:/bin' },
    });
  const help = await run(['--help']);
  assert.equal(help.exitCode, 0, `${help.stderr}`);
  assert.match(
    help.stdout,
    /--proxy-server-host string\s+The hostname to use to connect to the proxy-server\. \(default "127\.0\.0\.1"\)/,
  );
  // The same image runs the server: `command: ["/proxy-agent", "konnectivity-server"]`.
  const serverHelp = await run(['konnectivity-server', '--help']);
  assert.equal(serverHelp.exitCode, 0, `${serverHelp.stderr}`);
  assert.match(
    serverHelp.stdout,
    /--uds-name string\s+uds-name should be empty for TCP traffic\. For UDS set to its name\./,
  );
  const bad = await run(['--no-such-flag']);
  assert.equal(bad.exitCode, 1);
  assert.match(bad.stderr, /^kctl: proxy-agent: unknown flag --no-such-flag/);
});

// `kctl konnectivity-server` as a drop-in for upstream's proxy-server v0.36.0: beside the real one
// with the same argument vector (same endpoint answers, metric families and series, socket mode,
// exit on SIGTERM); the `proxy-server` invocation name and its --help; bad flags one line each;
// and the KKP sidecar case: a real kube-apiserver whose egress selector points at a standalone
// kctl server (GRPC and HTTP-CONNECT over a unix socket) reaches a target through kctl's agent
// and through upstream's, with certificate and with service-account token authentication.
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { existsSync, statSync } from 'node:fs';
import { symlink, writeFile } from 'node:fs/promises';
import { createServer as createHttpServer } from 'node:http';
import { join } from 'node:path';
import { test } from 'node:test';
import { execa } from 'execa';
import { dialViaProxy } from '../../../src/konnectivity/client.ts';
import { tempDir } from '../../helpers.ts';
import { echoServer, readN } from '../../unit/konnectivity/fixtures.ts';
import { waitFor } from '../../wait.ts';
import { track } from '../lab/cluster.ts';
import {
  assertSameFamilies,
  get,
  helpFlags,
  pkiFiles,
  sample,
  series,
  start,
  type Files,
  type Proc,
  type T,
} from '../lab/dropin.ts';
import { hostStateArgs, kctl, requireKctl, ownHostState } from '../lab/kctl.ts';
import { freePort } from '../../ports.ts';
import { upstreamBin } from '../lab/upstream.ts';

ownHostState();

interface ServerPorts {
  agent: number;
  health: number;
  admin: number;
}

async function serverPorts(): Promise<ServerPorts> {
  return { agent: await freePort(), health: await freePort(), admin: await freePort() };
}

/** What a sidecar manifest passes to proxy-server, in --flag=value form (paths and ports aside, the same for both). */
function serverArgs(f: Files, uds: string, p: ServerPorts, id: string, mode = 'grpc'): string[] {
  return [
    '--logtostderr=true',
    '--v=2',
    `--uds-name=${uds}`,
    '--delete-existing-uds-file=true',
    '--server-port=0',
    `--mode=${mode}`,
    `--cluster-cert=${f.serverCert}`,
    `--cluster-key=${f.serverKey}`,
    `--cluster-ca-cert=${f.ca}`,
    `--agent-port=${p.agent}`,
    '--agent-bind-address=127.0.0.1',
    `--admin-port=${p.admin}`,
    '--admin-bind-address=127.0.0.1',
    `--health-port=${p.health}`,
    `--server-id=${id}`,
    '--server-count=1',
    '--proxy-strategies=destHost,default',
    '--keepalive-time=1h0m0s',
    '--frontend-keepalive-time=1h0m0s',
    '--enable-profiling=true',
    '--enable-contention-profiling=false',
    '--graceful-shutdown-timeout=0s',
    '--backend-dial-timeout=0s',
    '--xfr-channel-size=10',
    '--kube-api-content-type=application/vnd.kubernetes.protobuf',
    '--enable-lease-controller=false',
    '--lease-namespace=kube-system',
    '--lease-label=k8s-app=konnectivity-server',
    '--tls-min-version=VersionTLS12',
    '--cipher-suites=TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256',
  ];
}

/** The same flags for either agent: a certificate of the test CA, or a service-account token. */
function agentCredentials(f: Files, auth: { token?: string }): string[] {
  return auth.token
    ? [`--service-account-token-path=${auth.token}`]
    : [`--agent-cert=${f.agentCert}`, `--agent-key=${f.agentKey}`];
}

/** A kctl agent for a standalone server, with a certificate or a service-account token. */
async function kctlAgent(t: T, f: Files, agentPort: number, id: string, auth: { token?: string } = {}): Promise<Proc> {
  return start(t, requireKctl(), [
    'konnectivity-agent',
    `--ca-cert=${f.ca}`,
    ...agentCredentials(f, auth),
    '--proxy-server-host=127.0.0.1',
    `--proxy-server-port=${agentPort}`,
    `--agent-id=${id}`,
    '--agent-identifiers=host=dropin-node&ipv4=127.0.0.1',
    `--health-server-port=${await freePort()}`,
    `--admin-server-port=${await freePort()}`,
  ]);
}

function upstreamAgent(
  t: T,
  f: Files,
  agentPort: number,
  id: string,
  ports: { health: number; admin: number },
  auth: { token?: string } = {},
): Proc {
  return start(t, upstreamBin()['proxy-agent'], [
    `--ca-cert=${f.ca}`,
    ...agentCredentials(f, auth),
    '--proxy-server-host=127.0.0.1',
    `--proxy-server-port=${agentPort}`,
    `--agent-id=${id}`,
    '--agent-identifiers=host=dropin-node&ipv4=127.0.0.1',
    `--health-server-port=${ports.health}`,
    `--admin-server-port=${ports.admin}`,
  ]);
}

const probes = async (port: number) =>
  Promise.all(['/healthz', '/readyz', '/ready'].map((p) => get(`http://127.0.0.1:${port}${p}`)));

test(
  'kctl konnectivity-server beside upstream proxy-server: same flags, endpoints, metric families and series; SIGTERM exits 0',
  { timeout: 180_000 },
  async (t) => {
    const f = await pkiFiles(t);
    const ports = { up: await serverPorts(), kc: await serverPorts() };
    const uds = { up: join(f.dir, 'up.sock'), kc: join(f.dir, 'kc.sock') };
    const up = start(t, upstreamBin()['proxy-server'], serverArgs(f, uds.up, ports.up, 'server-up'));
    const kc = start(t, requireKctl(), ['konnectivity-server', ...serverArgs(f, uds.kc, ports.kc, 'server-kc')]);
    const outputs = () => `\nupstream server:\n${up.output()}\nkctl server:\n${kc.output()}`;
    await waitFor(
      'both servers listening',
      30_000,
      async () =>
        existsSync(uds.up) &&
        existsSync(uds.kc) &&
        (
          await Promise.all(
            [ports.up.health, ports.kc.health].map((p) => get(`http://127.0.0.1:${p}/healthz`).catch(() => null)),
          )
        ).every((r) => r?.status === 200),
    ).catch((err: Error) => {
      throw new Error(`${err.message}${outputs()}`);
    });
    // The unix socket's permissions: upstream's umask 0007 gives the group access (a sidecar's kube-apiserver).
    assert.equal(statSync(uds.kc).mode & 0o777, statSync(uds.up).mode & 0o777, 'socket mode');

    const before = await Promise.all([probes(ports.up.health), probes(ports.kc.health)]);
    assert.deepEqual(before[1], before[0], 'healthz, readyz, ready with no agent');
    assert.deepEqual(before[0][1], { status: 500, body: 'no connection to any proxy agent' });

    // A kctl agent on each (upstream's rules: any certificate of --cluster-ca-cert is an agent).
    await kctlAgent(t, f, ports.up.agent, 'agent-up');
    await kctlAgent(t, f, ports.kc.agent, 'agent-kc');
    await waitFor('both servers ready', 60_000, async () =>
      (await Promise.all([ports.up.health, ports.kc.health].map((p) => get(`http://127.0.0.1:${p}/readyz`)))).every(
        (r) => r.status === 200,
      ),
    ).catch((err: Error) => {
      throw new Error(`${err.message}${outputs()}`);
    });
    const after = await Promise.all([probes(ports.up.health), probes(ports.kc.health)]);
    assert.deepEqual(after[1], after[0], 'healthz, readyz, ready with an agent');
    assert.deepEqual(after[0][1], { status: 200, body: 'ok' });

    // The same dials through each: one that works (held open), one to a refused port.
    const echo = await echoServer(t);
    const refused = await freePort();
    const held = [];
    for (const name of ['up', 'kc'] as const) {
      const tn = await dialViaProxy({ udsPath: uds[name], address: echo.address });
      tn.write('ping');
      assert.equal((await readN(tn, 4)).toString(), 'ping');
      held.push(tn);
      await assert.rejects(dialViaProxy({ udsPath: uds[name], address: `127.0.0.1:${refused}` }), /refused/);
    }

    const scrape = async (port: number) => (await get(`http://127.0.0.1:${port}/metrics`)).body;
    // A failed dial's Proxy stream ends when the client cancels it: let both servers see that.
    const proxyStreams = async (port: number) =>
      series(await scrape(port), 'konnectivity_network_proxy_server_grpc_connections');
    await waitFor('only the held Proxy streams left', 10_000, async () =>
      (await proxyStreams(ports.up.health)).includes(
        'konnectivity_network_proxy_server_grpc_connections{service_method="Proxy"} 1',
      ),
    );
    const texts = {
      up: { health: await scrape(ports.up.health), admin: await scrape(ports.up.admin) },
      kc: { health: '', admin: '' },
    };
    texts.kc = { health: await scrape(ports.kc.health), admin: await scrape(ports.kc.admin) };
    for (const port of ['health', 'admin'] as const) {
      const compared = assertSameFamilies(`${port} port`, texts.up[port], texts.kc[port]);
      t.diagnostic(`${port} port: ${compared.length} upstream families matched: ${compared.join(' ')}`);
    }
    const P = 'konnectivity_network_proxy_server_';
    for (const fam of [
      'dial_failure_count',
      'grpc_connections',
      'ready_backends',
      'ready_backend_connections',
      'established_connections',
      'pending_backend_dials',
    ])
      assert.deepEqual(series(texts.kc.health, P + fam), series(texts.up.health, P + fam), fam);
    assert.deepEqual(series(texts.up.health, `${P}dial_failure_count`), [
      `${P}dial_failure_count{reason="error_response"} 1`,
    ]);
    assert.equal(
      sample(texts.kc.health, `${P}dial_duration_seconds_count`),
      sample(texts.up.health, `${P}dial_duration_seconds_count`),
    );
    assert.equal(
      (await get(`http://127.0.0.1:${ports.kc.admin}/debug/pprof/`)).status,
      200,
      'profiling on the admin port',
    );
    const listening = execFileSync('ss', ['-ltnH'], { encoding: 'utf8' });
    for (const name of ['up', 'kc'] as const) {
      assert.match(listening, new RegExp(`\\*:${ports[name].health}\\s`), `${name}: health port on every interface`);
      assert.match(listening, new RegExp(`127\\.0\\.0\\.1:${ports[name].admin}\\s`), `${name}: admin port on loopback`);
    }
    assert.doesNotMatch(kc.output(), /no effect in kctl/, 'every inert flag was at its default: no warning');
    for (const tn of held) tn.destroy();

    up.child.kill('SIGTERM');
    kc.child.kill('SIGTERM');
    assert.equal(await up.exited, 0, `upstream exits 0 on SIGTERM${outputs()}`);
    assert.equal(await kc.exited, 0, `kctl exits 0 on SIGTERM${outputs()}`);
  },
);

test('invoked as proxy-server, kctl is the server: --help lists every upstream flag; bad flags and values are one line each', async (t) => {
  const dir = await tempDir(t, 'kctl-proxy-server-');
  const link = join(dir, 'proxy-server');
  await symlink(requireKctl(), link);
  const f = await pkiFiles(t);
  const upstreamHelp = await execa(upstreamBin()['proxy-server'], ['--help'], { reject: false });
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
  assert.deepEqual(helpFlags((await execa(requireKctl(), ['konnectivity-server', '--help'])).stdout), kctlNames);

  const uds = `--uds-name=${join(dir, 's.sock')}`;
  const certs = [`--cluster-cert=${f.serverCert}`, `--cluster-key=${f.serverKey}`];
  for (const [args, line] of [
    [['--uds-nam=/x'], /^kctl: proxy-server: unknown flag --uds-nam; see proxy-server --help for the flags it takes$/],
    [['--agent-port=http'], /^kctl: proxy-server: invalid value "http" for --agent-port: expected an integer$/],
    [
      [uds, ...certs, '--mode=tcp', '--server-port=0'],
      /^kctl: proxy-server: --mode "tcp" must be grpc or http-connect$/,
    ],
    [[uds, ...certs], /^kctl: proxy-server: --server-port must be 0 with --uds-name/],
    [[...certs], /^kctl: proxy-server: --server-ca-cert is needed for a TCP frontend/],
    [[uds, '--server-port=0'], /^kctl: proxy-server: --cluster-cert and --cluster-key are needed/],
    [
      [uds, '--server-port=0', ...certs, '--agent-port=60000'],
      /^kctl: proxy-server: --agent-port 60000 is an ephemeral port/,
    ],
    [
      [uds, '--server-port=0', ...certs, '--agent-namespace=kube-system'],
      /^kctl: proxy-server: --agent-service-account is empty/,
    ],
    [
      [uds, '--server-port=0', ...certs, '--proxy-strategies=nearest'],
      /^kctl: proxy-server: --proxy-strategies: unknown strategy "nearest"/,
    ],
    [
      [uds, '--server-port=0', ...certs, '--cipher-suites=TLS_RSA_WITH_RC4_128_SHA'],
      /^kctl: proxy-server: --cipher-suites: TLS_RSA_WITH_RC4_128_SHA is not supported/,
    ],
    [
      [uds, '--server-port=0', `--cluster-cert=${f.serverCert}`, '--cluster-key=/nonexistent/k'],
      /^kctl: proxy-server: --cluster-key \/nonexistent\/k: cannot read \(ENOENT\)$/,
    ],
    [['extra'], /^kctl: proxy-server: unexpected argument "extra"; it takes only flags/],
  ] as const) {
    const r = await execa(link, [...args], { reject: false, timeout: 20_000 });
    assert.equal(r.exitCode, 1, `${args.join(' ')}: exit 1, as upstream's server exits on bad flags`);
    assert.equal(r.stderr.split('\n').length, 1, `${args.join(' ')}: one line, got:\n${r.stderr}`);
    assert.match(r.stderr, line);
  }
});

/**
 * An HTTP server on `ip`, an address added to the loopback interface for the test: kube-apiserver
 * refuses to proxy to 127.0.0.0/8, not to this.
 */
async function target(t: T, ip: string, body: string): Promise<number> {
  execFileSync('ip', ['addr', 'add', `${ip}/32`, 'dev', 'lo']);
  t.after(() => {
    execFileSync('ip', ['addr', 'del', `${ip}/32`, 'dev', 'lo']);
  });
  const server = createHttpServer((_req, res) => res.end(body));
  await new Promise<void>((r) => server.listen(0, ip, r));
  t.after(() => new Promise<void>((r) => server.close(() => r())));
  return (server.address() as { port: number }).port;
}

test(
  'kube-apiserver egress through a standalone kctl konnectivity-server (GRPC and HTTP-CONNECT on a unix socket) via kctl and upstream agents',
  { timeout: 420_000 },
  async (t) => {
    const f = await pkiFiles(t);
    const ip = '192.0.2.61';
    const port = await target(t, ip, 'hello through the standalone server\n');
    const root = ['--data-dir', join(f.dir, 'data'), '--run-dir', join(f.dir, 'run'), ...hostStateArgs()];
    const modes = { grpc: 'GRPC', 'http-connect': 'HTTPConnect' } as const;

    // One api-only tenant per mode, its kube-apiserver's egress selector pointing at a socket.
    const tenants = await Promise.all(
      (['grpc', 'http-connect'] as const).map(async (mode) => {
        const uds = join(f.dir, `${mode}.sock`);
        const egress = join(f.dir, `egress-${mode}.yaml`);
        await writeFile(
          egress,
          JSON.stringify({
            apiVersion: 'apiserver.k8s.io/v1beta1',
            kind: 'EgressSelectorConfiguration',
            egressSelections: [
              { name: 'cluster', connection: { proxyProtocol: modes[mode], transport: { uds: { udsName: uds } } } },
            ],
          }),
        );
        const cfg = join(f.dir, `kctl-${mode}.yaml`);
        await writeFile(cfg, `spec:\n  api:\n    extraArgs:\n      egress-selector-config-file: ${egress}\n`);
        const name = `egress-${mode}`;
        const ctl = track(
          spawn(requireKctl(), [...root, '--name', name, 'controller', '--config', cfg, '--port-range', '19700-19799']),
        );
        t.after(async () => {
          ctl.child.kill('SIGTERM');
          await ctl.exited;
        });
        return { mode, uds, name, ctl };
      }),
    );
    for (const tn of tenants) {
      await waitFor(
        `tenant ${tn.name} ready`,
        240_000,
        () => tn.ctl.child.exitCode !== null || tn.ctl.saw('"msg":"controller ready"'),
      );
      assert.equal(tn.ctl.child.exitCode, null, tn.ctl.log());
    }
    const kubectl = (name: string, args: string[], input?: string) =>
      kctl([...root, '--name', name, 'kubectl', ...args], input ? { input } : {});
    const kubeconfigOf = (name: string) => join(f.dir, 'data', 'tenants', name, 'pki', 'admin.conf');

    for (const tn of tenants) {
      // A Node whose address only the tunnel leads to, as far as kube-apiserver is concerned.
      const created = await kubectl(
        tn.name,
        ['create', '-f', '-'],
        JSON.stringify({ apiVersion: 'v1', kind: 'Node', metadata: { name: 'edge1' } }),
      );
      assert.equal(created.exitCode, 0, String(created.stderr));
      const patched = await kubectl(tn.name, [
        'patch',
        'node',
        'edge1',
        '--subresource=status',
        '--type=merge',
        '-p',
        JSON.stringify({ status: { addresses: [{ type: 'InternalIP', address: ip }] } }),
      ]);
      assert.equal(patched.exitCode, 0, String(patched.stderr));
    }

    // grpc: agents authenticate with certificates of --cluster-ca-cert. http-connect: with
    // service-account tokens, reviewed against the tenant's kube-apiserver (--kubeconfig), and the
    // server publishes its lease there.
    const tokenTenant = tenants[1]!;
    const sa = await kubectl(tokenTenant.name, ['-n', 'kube-system', 'create', 'serviceaccount', 'konnectivity-agent']);
    assert.equal(sa.exitCode, 0, String(sa.stderr));
    const issued = await kubectl(tokenTenant.name, [
      '-n',
      'kube-system',
      'create',
      'token',
      'konnectivity-agent',
      '--audience=system:konnectivity-server',
    ]);
    assert.equal(issued.exitCode, 0, String(issued.stderr));
    const token = join(f.dir, 'agent.token');
    await writeFile(token, String(issued.stdout).trim(), { mode: 0o600 });

    for (const tn of tenants) {
      const ports = await serverPorts();
      const withTokens = tn === tokenTenant;
      const args = serverArgs(f, tn.uds, ports, `standalone-${tn.mode}`, tn.mode).filter(
        (a) => !withTokens || !a.startsWith('--cluster-ca-cert='),
      );
      if (withTokens)
        args.push(
          '--agent-namespace=kube-system',
          '--agent-service-account=konnectivity-agent',
          '--authentication-audience=system:konnectivity-server',
          `--kubeconfig=${kubeconfigOf(tn.name)}`,
          '--enable-lease-controller=true',
        );
      const server = start(t, requireKctl(), ['konnectivity-server', ...args]);
      await waitFor(`${tn.mode} server listening`, 30_000, () => existsSync(tn.uds)).catch((err: Error) => {
        throw new Error(`${err.message}\n${server.output()}`);
      });
      const proxied = () => kubectl(tn.name, ['get', '--raw', `/api/v1/nodes/http:edge1:${port}/proxy/hello`]);

      const none = await proxied();
      assert.notEqual(none.exitCode, 0, `${tn.mode}: reached the target with no agent connected`);
      // GRPC mode relays the server's text; HTTP-CONNECT mode only the status line of the CONNECT
      // answer, so kctl puts the cause there.
      const noAgent =
        tn.mode === 'grpc'
          ? /No agent available/
          : new RegExp(
              `proxy error from ${tn.uds} while dialing ${ip}:${port}, code 500: 500 No agent available: no agent is connected`,
            );
      assert.match(String(none.stderr), noAgent, `${tn.mode}: kube-apiserver went to the server`);

      const auth = withTokens ? { token } : {};
      for (const which of ['kctl', 'upstream'] as const) {
        const agentPorts = { health: await freePort(), admin: await freePort() };
        const agent =
          which === 'kctl'
            ? await kctlAgent(t, f, ports.agent, `${which}-${tn.mode}`, auth)
            : upstreamAgent(t, f, ports.agent, `${which}-${tn.mode}`, agentPorts, auth);
        await waitFor(
          `${tn.mode}: ${which} agent connected`,
          60_000,
          async () => (await get(`http://127.0.0.1:${ports.health}/readyz`)).status === 200,
        ).catch((err: Error) => {
          throw new Error(`${err.message}\nserver:\n${server.output()}\nagent:\n${agent.output()}`);
        });
        const through = await proxied();
        assert.equal(
          through.exitCode,
          0,
          `${tn.mode} via ${which}: ${String(through.stderr)}\n${server.output().split('\n').slice(-8).join('\n')}`,
        );
        assert.equal(String(through.stdout).trim(), 'hello through the standalone server');
        const established = sample(
          (await get(`http://127.0.0.1:${ports.health}/metrics`)).body,
          'konnectivity_network_proxy_server_dial_duration_seconds_count',
        );
        assert.ok(established >= 1, `${tn.mode} via ${which}: the server counted the dial`);
        t.diagnostic(
          `${tn.mode} via ${which} agent${withTokens ? ' (service-account token)' : ' (certificate)'}: ${String(through.stdout).trim()}`,
        );
        // Both agents drain on the first SIGTERM and stop on the second.
        agent.child.kill('SIGTERM');
        await new Promise((r) => setTimeout(r, 300));
        agent.child.kill('SIGTERM');
        assert.equal(await agent.exited, 0, agent.output());
        await waitFor(
          `${tn.mode}: ${which} agent gone`,
          30_000,
          async () => (await get(`http://127.0.0.1:${ports.health}/readyz`)).status === 500,
        );
      }

      if (withTokens) {
        const lease = await kubectl(tn.name, [
          '-n',
          'kube-system',
          'get',
          'lease',
          `konnectivity-proxy-server-standalone-${tn.mode}`,
          '-o',
          'json',
        ]);
        assert.equal(lease.exitCode, 0, `the server publishes its lease: ${String(lease.stderr)}`);
        const l = JSON.parse(String(lease.stdout)) as {
          metadata: { labels: Record<string, string> };
          spec: { holderIdentity: string };
        };
        assert.deepEqual(l.metadata.labels, { 'k8s-app': 'konnectivity-server' });
        assert.equal(l.spec.holderIdentity, `standalone-${tn.mode}`);
        // A token for another service account is refused.
        const other = await kubectl(tn.name, [
          '-n',
          'default',
          'create',
          'token',
          'default',
          '--audience=system:konnectivity-server',
        ]);
        assert.equal(other.exitCode, 0, String(other.stderr));
        const wrong = join(f.dir, 'wrong.token');
        await writeFile(wrong, String(other.stdout).trim(), { mode: 0o600 });
        await kctlAgent(t, f, ports.agent, 'wrong-sa', { token: wrong });
        await waitFor('the wrong service account refused', 30_000, () =>
          /system:serviceaccount:default:default is not system:serviceaccount:kube-system:konnectivity-agent/.test(
            server.output(),
          ),
        );
        assert.equal((await get(`http://127.0.0.1:${ports.health}/readyz`)).status, 500);
      }
      server.child.kill('SIGTERM');
      assert.equal(await server.exited, 0, server.output());
      if (withTokens) {
        const gone = await kubectl(tn.name, [
          '-n',
          'kube-system',
          'get',
          'lease',
          `konnectivity-proxy-server-standalone-${tn.mode}`,
        ]);
        assert.notEqual(gone.exitCode, 0, 'the lease is deleted when the server stops');
      }
    }
  },
);

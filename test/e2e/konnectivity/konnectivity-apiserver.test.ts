// The tunnel with the real kube-apiserver: a node-side HTTP server that the controller host
// cannot reach is served through `kctl konnectivity-agent`, via the API server's node proxy.
import assert from 'node:assert/strict';
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import type { ControllerStatusReport as StatusReport } from '../../../src/controller/leases/status.ts';
import { selfSignedCert } from '../../helpers.ts';
import { kctl, requireKctl } from '../lab/kctl.ts';
import { startLab } from '../lab/lab-test.ts';
import { kubeletServingCert, nodeCert } from '../lab/node-cert.ts';
import { waitFor } from '../../wait.ts';

test("kube-apiserver reaches an isolated node-side server only through the agent's tunnel", async (t) => {
  const { lab, dir } = await startLab(t, 'kn', ['ctl', 'edge']);
  const ctl = lab.host('ctl');
  const edge = lab.host('edge');
  const dataDir = join(dir, 'data');
  const runDir = join(dir, 'run');
  const cfg = join(dir, 'kctl.yaml');
  // GRPC here, the egress mode upstream konnectivity setups use; every worker test runs kctl's
  // default, HTTP-CONNECT.
  await writeFile(cfg, `spec:\n  api: { address: ${ctl.ip} }\n  konnectivity: { proxyProtocol: GRPC }\n`);

  const controller = ctl.spawn(requireKctl(), [
    'controller',
    '--debug',
    '--single',
    '--config',
    cfg,
    '--data-dir',
    dataDir,
    '--run-dir',
    runDir,
  ]);
  let controllerLog = '';
  controller.stdout!.on('data', (c: Buffer) => {
    controllerLog += c.toString();
  });
  controller.stderr!.on('data', (c: Buffer) => {
    controllerLog += c.toString();
  });
  await waitFor('controller ready', 180_000, async () => controllerLog.includes('"msg":"controller ready"')).catch(
    (err: Error) => {
      throw new Error(`${err.message}\n${controllerLog.split('\n').slice(-10).join('\n')}`);
    },
  );
  // kubectl runs on the controller host: lab addresses exist only inside the lab's namespaces.
  const kubectl = (...a: string[]) => ctl.run(requireKctl(), ['--data-dir', dataDir, 'kubectl', ...a]);

  // The node side: a file server on the edge host, on the kubelet port, and a Node object for it.
  const www = join(dir, 'www');
  await mkdir(www);
  await writeFile(join(www, 'hello.txt'), 'hello through the tunnel\n');
  // kube-apiserver speaks TLS to kubelet ports: an openssl file server stands in for kubelet.
  // The right name and address: only the signer is wrong.
  const selfSigned = selfSignedCert(dir, 'www', { cn: 'edge1', san: `DNS:edge1,IP:${edge.ip}` });
  // And a certificate for it signed by the cluster CA, as an approved kubelet serving certificate is.
  const serving = await kubeletServingCert(join(dataDir, 'pki'), dir, 'edge1', [edge.ip]);
  const serve = (cert: { cert: string; key: string }) =>
    edge.spawn('openssl', ['s_server', '-quiet', '-WWW', '-accept', '10250', '-cert', cert.cert, '-key', cert.key], {
      cwd: www,
    });
  // First an impostor: a server whose certificate the cluster CA did not sign.
  const impostor = serve(selfSigned);
  const created = await ctl.run(requireKctl(), ['--data-dir', dataDir, 'kubectl', 'create', '-f', '-'], {
    input: JSON.stringify({ apiVersion: 'v1', kind: 'Node', metadata: { name: 'edge1' } }),
  });
  assert.ok(created.exitCode === 0 || String(created.stderr).includes('AlreadyExists'), String(created.stderr));
  const patched = await kubectl(
    'patch',
    'node',
    'edge1',
    '--subresource=status',
    '--type=merge',
    '-p',
    JSON.stringify({
      status: {
        addresses: [{ type: 'InternalIP', address: edge.ip }],
        daemonEndpoints: { kubeletEndpoint: { Port: 10250 } },
      },
    }),
  );
  assert.equal(patched.exitCode, 0, String(patched.stderr));

  // The controller host must not be able to open connections to the edge host.
  await lab.isolate(edge, ctl);
  assert.equal(await lab.canConnect(ctl, edge, 10250), false, 'the controller host reached the edge host directly');

  // Without an agent, the API server says so.
  const before = await kubectl('get', '--raw', '/api/v1/nodes/https:edge1:10250/proxy/hello.txt');
  assert.notEqual(before.exitCode, 0);
  assert.match(String(before.stderr), /No agent available/);

  // The agent dials out from the edge host with a node certificate.
  const certs = await nodeCert(join(dataDir, 'pki'), dir, 'edge1');
  const agent = edge.spawn(requireKctl(), [
    'konnectivity-agent',
    '--debug',
    `--proxy-server-host=${ctl.ip}`,
    '--proxy-server-port=8132',
    `--ca-cert=${join(dataDir, 'pki/ca.crt')}`,
    `--agent-cert=${certs.cert}`,
    `--agent-key=${certs.key}`,
    '--agent-id=edge1',
    `--agent-identifiers=host=edge1&ipv4=${edge.ip}`,
    '--health-server-port=18093',
    '--admin-server-port=18094',
  ]);
  let agentLog = '';
  agent.stdout!.on('data', (c: Buffer) => {
    agentLog += c.toString();
  });
  agent.stderr!.on('data', (c: Buffer) => {
    agentLog += c.toString();
  });
  await waitFor('agent connected', 60_000, async () => {
    const s = await kctl(['status', '-o', 'json', '--run-dir', runDir]);
    return (JSON.parse(String(s.stdout)) as StatusReport).konnectivity?.agents.some((a) => a.node === 'edge1') === true;
  }).catch((err: Error) => {
    throw new Error(`${err.message}\n${agentLog.split('\n').slice(-10).join('\n')}`);
  });

  // kube-apiserver verifies kubelets (--kubelet-certificate-authority): the tunnel reaches the
  // impostor, but the TLS handshake fails and nothing it serves gets through.
  const refused = await kubectl('get', '--raw', '/api/v1/nodes/https:edge1:10250/proxy/hello.txt');
  assert.notEqual(
    refused.exitCode,
    0,
    `the API server accepted a kubelet certificate the cluster CA did not sign: ${String(refused.stdout)}`,
  );
  assert.match(String(refused.stderr), /x509: certificate signed by unknown authority/);
  t.diagnostic(`impostor kubelet refused: ${String(refused.stderr).trim().split('\n')[0]}`);
  impostor.kill('SIGTERM');
  await new Promise((resolve) => impostor.once('exit', resolve));

  // The same server with a certificate of the cluster CA for the node's name and address works.
  serve(serving);
  let through = await kubectl('get', '--raw', '/api/v1/nodes/https:edge1:10250/proxy/hello.txt');
  for (let i = 0; i < 20 && through.exitCode !== 0; i++) {
    await sleep(500);
    through = await kubectl('get', '--raw', '/api/v1/nodes/https:edge1:10250/proxy/hello.txt');
  }
  assert.equal(through.exitCode, 0, `${String(through.stderr)}\n${agentLog.split('\n').slice(-5).join('\n')}`);
  assert.equal(String(through.stdout).trim(), 'hello through the tunnel');
  // Still no direct path: the bytes came through the tunnel the edge host opened.
  assert.equal(await lab.canConnect(ctl, edge, 10250), false);
  // One trace id per dial, in the server's and the agent's logs (per-dial lines are debug level).
  const serverTraces = new Set([...controllerLog.matchAll(/"trace":"([0-9a-f]+)"/g)].map((m) => m[1]));
  const agentTraces = [...agentLog.matchAll(/"trace":"([0-9a-f]+)"/g)].map((m) => m[1]);
  assert.ok(
    agentTraces.some((id) => serverTraces.has(id)),
    'no trace id appears in both server and agent logs',
  );
});

// The front door with real control planes: two API-only clusters on this host, each with its own
// ports, data dir and CA, and both with spec.frontDoor on one port. An admin reaches each API by
// name through that one port (kubectl's tls-server-name: the name the ClientHello carries) and
// verifies that cluster's own certificate end to end; one cluster's credentials sent to the
// other's name are refused (the other's certificate is not of this CA); a name no cluster has is
// closed; a cluster that stops takes only its own name with it.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { test } from 'node:test';
import { tempDir } from '../../helpers.ts';
import { track, type Tracked } from '../lab/cluster.ts';
import { kctl, requireKctl } from '../lab/kctl.ts';
import { waitFor } from '../../wait.ts';

const BASE_PORT = 13000 + Math.floor(Math.random() * 700) * 10;
const DOOR_PORT = BASE_PORT + 9;
const DOMAIN = 'clusters.test';

interface Cluster {
  name: string;
  port: number;
  dataDir: string;
  runDir: string;
  proc?: Tracked;
}

test('two clusters behind one front door port: each reached by its name with its own certificate; credentials of one refused at the other; unknown names closed; a stopped cluster takes only its name', async (t) => {
  const kctlBin = requireKctl();
  const dir = await tempDir(t, 'kctl-frontdoor-');
  const hostState = join(dir, 'host-state');
  const clusters: Cluster[] = ['alpha', 'beta'].map((name, i) => ({
    name,
    port: BASE_PORT + i * 3,
    dataDir: join(dir, `${name}-data`),
    runDir: join(dir, `${name}-run`),
  }));
  t.after(async () => {
    for (const c of clusters) c.proc?.child.kill('SIGTERM');
    await Promise.all(clusters.map((c) => c.proc?.exited));
  });
  for (const c of clusters) {
    const config = join(dir, `${c.name}.yaml`);
    await writeFile(
      config,
      [
        'spec:',
        '  profile: api-only',
        `  api: { address: 127.0.0.1, port: ${c.port} }`,
        `  controllerManager: { port: ${c.port + 1} }`,
        `  frontDoor: { enabled: true, port: ${DOOR_PORT}, baseDomain: ${DOMAIN}, name: ${c.name} }`,
        '',
      ].join('\n'),
    );
    c.proc = track(
      spawn(kctlBin, [
        '--host-state-dir',
        hostState,
        'controller',
        '--config',
        config,
        '--data-dir',
        c.dataDir,
        '--run-dir',
        c.runDir,
      ]),
    );
  }
  for (const c of clusters) {
    const outcome = await waitFor(`${c.name} ready`, 180_000, async () =>
      c.proc!.child.exitCode !== null ? 'exited' : c.proc!.saw('"msg":"controller ready"') && 'ready',
    );
    assert.equal(outcome, 'ready', c.proc!.log());
  }

  /** `kubectl get ns` with `creds`'s admin kubeconfig, through the door, naming `name`. */
  const through = (creds: Cluster, name: string) =>
    kctl([
      '--data-dir',
      creds.dataDir,
      'kubectl',
      '--server',
      `https://127.0.0.1:${DOOR_PORT}`,
      '--tls-server-name',
      name,
      '--request-timeout',
      '10s',
      'get',
      'namespace',
      'kube-system',
      '-o',
      'name',
    ]);
  for (const c of clusters) {
    const r = await through(c, `${c.name}.${DOMAIN}`);
    assert.equal(String(r.stdout).trim(), 'namespace/kube-system', `${c.name} through the door: ${String(r.stderr)}`);
  }
  // alpha's credentials at beta's name: beta answers with beta's certificate, which alpha's CA does not sign.
  const crossed = await through(clusters[0]!, `beta.${DOMAIN}`);
  assert.notEqual(crossed.exitCode, 0);
  assert.match(String(crossed.stderr), /x509|certificate signed by unknown authority/);
  // A name nobody has: closed before any TLS.
  const nobody = await through(clusters[0]!, `gamma.${DOMAIN}`);
  assert.notEqual(nobody.exitCode, 0);
  assert.match(String(nobody.stderr), /EOF|connection reset|handshake/i);

  // alpha stops: its name is closed, beta's still leads to beta (beta's door may take every connection now).
  clusters[0]!.proc!.child.kill('SIGTERM');
  await clusters[0]!.proc!.exited;
  const gone = await through(clusters[0]!, `alpha.${DOMAIN}`);
  assert.notEqual(gone.exitCode, 0, 'alpha answered after it stopped');
  for (let i = 0; i < 5; i++) {
    const r = await through(clusters[1]!, `beta.${DOMAIN}`);
    assert.equal(String(r.stdout).trim(), 'namespace/kube-system', String(r.stderr));
  }
  assert.ok(
    clusters[1]!.proc!.saw('"msg":"front door closed a connection: no cluster has this name'),
    "beta's door did not log the refused names",
  );
});

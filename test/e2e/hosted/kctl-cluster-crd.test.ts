// The KctlCluster CRD in a real kube-apiserver (an api-only kctl control plane on this host):
// `kctl operator crd` applies, a cluster written as an object is stored, `kubectl get kctlclusters`
// shows its columns, and a bad object is refused by the CRD's schema and CEL rules with the
// field's path in the message, as config load names it for a file.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { test } from 'node:test';
import { stringify } from 'yaml';
import { tempDir } from '../../helpers.ts';
import { track } from '../lab/cluster.ts';
import { kctl, requireKctl } from '../lab/kctl.ts';
import { waitFor } from '../../wait.ts';

const PORT = 12000 + Math.floor(Math.random() * 700) * 10;

const cluster = (name: string, spec: Record<string, unknown>) =>
  stringify({ apiVersion: 'kctl.dev/v1alpha1', kind: 'KctlCluster', metadata: { name }, spec });

test('the KctlCluster CRD: a cluster as an object is stored and listed; bad objects are refused naming the field', async (t) => {
  const kctlBin = requireKctl();
  const dir = await tempDir(t, 'kctl-crd-');
  const config = join(dir, 'kctl.yaml');
  await writeFile(
    config,
    `spec:\n  profile: api-only\n  api: { address: 127.0.0.1, port: ${PORT} }\n  controllerManager: { port: ${PORT + 1} }\n`,
  );
  const dataDir = join(dir, 'data');
  const proc = track(
    spawn(kctlBin, ['controller', '--config', config, '--data-dir', dataDir, '--run-dir', join(dir, 'run')]),
  );
  t.after(async () => {
    proc.child.kill('SIGTERM');
    await proc.exited;
  });
  await waitFor('control plane ready', 180_000, async () => proc.saw('"msg":"controller ready"'), proc.log);
  const kubectl = (args: string[], input?: string) =>
    kctl(['--data-dir', dataDir, 'kubectl', ...args], { input, timeout: 60_000 });

  const crd = await kctl(['operator', 'crd']);
  assert.equal(crd.exitCode, 0, String(crd.stderr));
  const applied = await kubectl(['apply', '-f', '-'], String(crd.stdout));
  assert.equal(applied.exitCode, 0, String(applied.stderr));
  const established = await kubectl([
    'wait',
    '--for=condition=Established',
    'crd/kctlclusters.kctl.dev',
    '--timeout=60s',
  ]);
  assert.equal(established.exitCode, 0, String(established.stderr));

  // A full cluster with the fields of a config file, and how it runs as pods.
  const goodSpec = {
    version: '0.2.0',
    replicas: 2,
    config: {
      profile: 'full',
      network: { podCIDR: '10.50.0.0/16', serviceCIDR: '10.60.0.0/16', mode: 'vxlan' },
      addons: { coredns: { replicas: 1 } },
      konnectivity: { trustedAgents: [{ node: 'relay-1' }] },
      upgrade: { drainTimeout: '10m' },
    },
    datastore: { postgres: { secretName: 'pg-admin' } },
    exposure: { type: 'NodePort', nodePort: 30643 },
    resources: { requests: { cpu: '250m', memory: '300Mi' } },
  };
  const good = cluster('edge-1', goodSpec);
  const created = await kubectl(['apply', '-f', '-'], good);
  assert.equal(created.exitCode, 0, String(created.stderr));
  const listed = await kubectl(['get', 'kc']);
  assert.match(String(listed.stdout), /^NAME\s+READY\s+PROFILE\s+VERSION\s+NODES\s+ENDPOINT\s+AGE\n/);
  assert.match(String(listed.stdout), /\nedge-1\s+full\s+/);
  const stored = await kubectl(['get', 'kc', 'edge-1', '-o', 'jsonpath={.spec.config.network.podCIDR}']);
  assert.equal(String(stored.stdout), '10.50.0.0/16');

  const refused: [string, Record<string, unknown>, RegExp][] = [
    [
      'bad-cidr',
      { version: '0.2.0', config: { network: { podCIDR: '10.0.0.0/33' } } },
      /spec\.config\.network\.podCIDR: Invalid value: .*expected a CIDR/,
    ],
    [
      'bad-profile',
      { version: '0.2.0', config: { profile: 'tiny' } },
      /spec\.config\.profile: Unsupported value: "tiny"/,
    ],
    [
      'bad-field',
      { version: '0.2.0', config: { network: { podCidr: '10.0.0.0/16' } } },
      /unknown field "spec\.config\.network\.podCidr"/,
    ],
    [
      'bad-port',
      { version: '0.2.0', config: { api: { port: 70000 } } },
      /spec\.config\.api\.port: Invalid value: 70000/,
    ],
    ['no-version', { config: {} }, /spec\.version: Required value/],
    ['bad-replicas', { version: '0.2.0', replicas: 0 }, /spec\.replicas: Invalid value: 0/],
    [
      'bad-agent',
      { version: '0.2.0', config: { konnectivity: { trustedAgents: [{ node: 'a', serviceAccount: 'ns/sa' }] } } },
      /spec\.config\.konnectivity\.trustedAgents\[0\]: Invalid value: .*set exactly one of node or serviceAccount/,
    ],
    [
      'bad-duration',
      { version: '0.2.0', config: { upgrade: { readyTimeout: '10ms' } } },
      /spec\.config\.upgrade\.readyTimeout: Invalid value: .*expected a duration of at least 1s/,
    ],
    [
      'bad-address',
      { version: '0.2.0', config: { api: { address: 'controller.example' } } },
      /spec\.config\.api\.address: Invalid value: .*expected an IP address/,
    ],
    [
      'bad-exposure',
      { version: '0.2.0', exposure: { type: 'ClusterIP', nodePort: 30001 } },
      /spec\.exposure: Invalid value: .*nodePort is for type NodePort/,
    ],
    [
      'door-address',
      { version: '0.2.0', exposure: { type: 'FrontDoor', address: '192.0.2.10' } },
      /spec\.exposure: Invalid value: .*address is the door's for type FrontDoor/,
    ],
    [
      'same-ports',
      { version: '0.2.0', exposure: { nodePort: 30001, agentNodePort: 30001 } },
      /spec\.exposure: Invalid value: .*nodePort and agentNodePort must differ/,
    ],
    [
      'bad-account',
      { version: '0.2.0', serviceAccounts: [{ namespace: 'Apps', name: 'w', secretName: 's' }] },
      /spec\.serviceAccounts\[0\]\.namespace: Invalid value: "Apps"/,
    ],
  ];
  for (const [name, spec, why] of refused) {
    const r = await kubectl(['apply', '-f', '-'], cluster(name, spec));
    assert.notEqual(r.exitCode, 0, `${name} was accepted`);
    assert.match(String(r.stderr), why, name);
    assert.notEqual((await kubectl(['get', 'kc', name])).exitCode, 0, `${name} was stored`);
  }
  // A full cluster and an api-only one keep different keys: the profile is for good.
  const changed = await kubectl(
    ['apply', '-f', '-'],
    cluster('edge-1', { ...goodSpec, config: { ...goodSpec.config, profile: 'api-only' } }),
  );
  assert.notEqual(changed.exitCode, 0, 'the profile was changed');
  assert.match(String(changed.stderr), /config\.profile cannot change/);
});

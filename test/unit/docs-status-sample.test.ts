// The `kctl status` sample in docs/install.md is what kctl prints: rendered by the real renderer from
// a report whose components and certificates come from the code (a first controller, --single),
// so a component or a section the code adds shows up here as a difference to paste into the docs.
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { test } from 'node:test';
import { renderStatus } from '../../src/cli/status.ts';
import { parseConfig } from '../../src/controller/config/config.ts';
import { controllerComponents } from '../../src/controller/index.ts';
import { controllerPaths } from '../../src/controller/config/paths.ts';
import type { ControllerStatusReport } from '../../src/controller/leases/status.ts';
import { CertificateWatch, controllerCertificates, ensurePkiFiles } from '../../src/pki/index.ts';
import { pkiOptions } from '../../src/controller/pki/pki-renewer.ts';
import { RestartRequest } from '../../src/supervisor/handover.ts';
import { quietLogger } from './konnectivity/fixtures.ts';
import { KCTL_VERSION } from '../../src/base/version.ts';
import { tempDir } from '../helpers.ts';

const DOC = new URL('../../docs/install.md', import.meta.url).pathname;
const RELEASE = { version: KCTL_VERSION, kubernetes: 'v1.36.3', etcd: 'v3.6.14' };

/** The block between "$ dist/kctl status" and the next command of the sample. */
function sampleOf(doc: string): string {
  const start = doc.indexOf('$ dist/kctl status\n');
  const end = doc.indexOf('\n$ ', start + 1);
  assert.ok(start >= 0 && end > start, 'docs/install.md has a "$ dist/kctl status" sample followed by another command');
  return doc.slice(start + '$ dist/kctl status\n'.length, end + 1);
}

test('the kctl status sample in docs/install.md is what the renderer prints for a first controller', async (t) => {
  // The controller's own PKI, made as at its start (fixed clock: the dates in the sample do not move),
  // and its components, only built, never started.
  const dir = await tempDir(t);
  const cfg = parseConfig({ spec: { api: { address: '192.0.2.2' } } }, 'kctl.yaml', { single: true });
  const paths = controllerPaths(join(dir, 'data'), join(dir, 'run'));
  const now = new Date('2026-11-29T10:00:00.000Z');
  const { paths: pki } = await ensurePkiFiles({ ...pkiOptions(cfg, paths), now }, quietLogger());
  const certificates = await new CertificateWatch(controllerCertificates(pki)).check(now);
  const names = controllerComponents({ cfg, paths, pki, release: RELEASE, restart: new RestartRequest() })
    .map((c) => c.name)
    .filter((n) => n !== 'status');
  const supervised = new Map([
    ['kine', 20861],
    ['kube-apiserver', 20881],
    ['kube-scheduler', 20902],
    ['kube-controller-manager', 20909],
  ]);
  const report: ControllerStatusReport = {
    role: 'controller',
    version: KCTL_VERSION,
    pid: 20829,
    uptimeSeconds: 13,
    // Started in order: storage, tunnel and API first, then the rest once kube-apiserver is ready.
    components: names.map((name, i) => ({
      name,
      state: 'running',
      pid: supervised.get(name),
      restarts: 0,
      uptimeSeconds: i < 4 ? 9 : 5,
    })),
    konnectivity: {
      serverId: 'db375696-37cb-4b89-883c-441707945e8d',
      serverCount: 1,
      agents: [],
      establishedConnections: 0,
      pendingDials: 0,
      closingConnections: 0,
    },
    controllers: [
      {
        name: 'kctl-controller-192-0-2-2',
        apiServer: 'https://192.0.2.2:6443',
        konnectivity: '192.0.2.2:8132',
        agents: [],
      },
    ],
    nodes: { ready: 0, total: 0 },
    storage: { type: 'kine', datastore: 'sqlite' },
    certificates,
  };
  const expected = renderStatus(report);
  const doc = await readFile(DOC, 'utf8');
  assert.equal(
    sampleOf(doc),
    expected,
    `docs/install.md's kctl status sample differs from what kctl prints; replace it with:\n${expected}`,
  );
});

test("the front door's kctl status sample in docs/front-door.md is what the renderer prints", async () => {
  const doc = await readFile(new URL('../../docs/front-door.md', import.meta.url).pathname, 'utf8');
  const start = doc.indexOf('```\nFront door on port');
  assert.ok(start >= 0, 'docs/front-door.md has a "Front door on port" sample');
  const sample = doc.slice(start + 4, doc.indexOf('```', start + 4));
  const api = 'alpha.clusters.example.com';
  const text = renderStatus({
    role: 'controller',
    version: KCTL_VERSION,
    pid: 1,
    uptimeSeconds: 1,
    components: [],
    frontDoor: {
      port: 443,
      names: { api, konnectivity: `konnectivity.${api}`, join: `join.${api}`, nodeApi: `node-api.${api}` },
      door: {
        port: 443,
        clusters: { alpha: { open: 3, total: 41 }, beta: { open: 1, total: 7 } },
        refused: { total: 2, notTls: 1, noName: 0, names: { 'gamma.clusters.example.com': 1 } },
      },
    },
  });
  assert.equal(sample, text.slice(text.indexOf('Front door on port')));
});

// The conformance suite's smoke subset, in `npm test`: one [Conformance] spec for each way the
// control plane reaches into the node network through kctl's tunnel (logs, exec, the pod and
// service proxy, an admission webhook, the admission of an attach, an aggregated API server with its
// own etcd, and cluster DNS from a pod), run by the real e2e.test against a lab cluster with isolated
// workers (test/conformance). The whole suite is `npm run conformance`. The conformance lab (conf)
// is this file's own.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { runConformance } from '../../conformance/conformance.ts';
import { tempDir } from '../../helpers.ts';

/** The specs, as the suite names them (no regex characters but the separators). */
const SMOKE = [
  '[sig-cli] Kubectl logs logs should be able to retrieve and filter logs',
  '[sig-node] Pods should support remote command execution over websockets',
  '[sig-network] Proxy version v1 should proxy through a service and a pod',
  '[sig-api-machinery] AdmissionWebhook [Privileged:ClusterAdmin] should mutate configmap',
  '[sig-api-machinery] AdmissionWebhook [Privileged:ClusterAdmin] should be able to deny attaching pod',
  '[sig-api-machinery] Aggregator Should be able to support the 1.17 Sample API Server using the current Aggregator',
  '[sig-network] DNS should provide DNS for the cluster',
];

const escape = (s: string) => s.replace(/[[\]().*+?^$|\\]/g, '\\$&');

test('the conformance smoke subset passes through the tunnel: logs, exec, proxy, webhooks, an aggregated API, DNS', async (t) => {
  const out = await tempDir(t, 'kctl-conformance-smoke-');
  const r = await runConformance({ focus: SMOKE.map(escape).join('|'), out, nodes: 4 });
  t.diagnostic(`${r.passed.length} passed in ${r.minutes.toFixed(1)} min`);
  if (r.failed.length || r.exits.some((e) => e !== 0)) {
    // The folder goes with the test: what ginkgo said about each failure, here.
    const log = (await readFile(join(out, 'e2e.log'), 'utf8').catch(() => '')).split('\n');
    const at = log.flatMap((l, i) => (/\[FAILED\]|\[PANICKED\]|\[TIMEDOUT\]/.test(l) ? [i] : []));
    const excerpt = at.flatMap((i) => log.slice(Math.max(0, i - 5), i + 15)).join('\n') || log.slice(-60).join('\n');
    assert.fail(`failed: ${r.failed.join('; ') || 'no spec'}; ginkgo exited ${r.exits.join(', ')}\n${excerpt}`);
  }
  for (const spec of SMOKE)
    assert.ok(
      r.passed.some((p) => p.startsWith(spec)),
      `${spec} did not run; it ran: ${r.passed.join('; ')}`,
    );
  assert.equal(r.passed.length, SMOKE.length, r.passed.join('\n'));
});

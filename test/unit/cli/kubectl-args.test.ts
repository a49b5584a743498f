// `kctl kubectl ... --data-dir D`: D is kctl's (where kubectl is staged and admin.conf read), not kubectl's.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { splitKubectlArgs } from '../../../src/cli/kubeconfig.ts';

test("--data-dir and --run-dir after kubectl stay kctl's; everything else, and all after --, is kubectl's", () => {
  assert.deepEqual(splitKubectlArgs(['version', '--client', '--data-dir', '/tmp/d']), {
    kctl: ['--data-dir', '/tmp/d'],
    kubectl: ['version', '--client'],
  });
  assert.deepEqual(splitKubectlArgs(['get', 'pods', '--data-dir=/tmp/d', '-n', 'x', '--run-dir', '/tmp/r']), {
    kctl: ['--data-dir=/tmp/d', '--run-dir', '/tmp/r'],
    kubectl: ['get', 'pods', '-n', 'x'],
  });
  assert.deepEqual(splitKubectlArgs(['exec', 'p', '--', 'tool', '--data-dir', '/x']), {
    kctl: [],
    kubectl: ['exec', 'p', '--', 'tool', '--data-dir', '/x'],
  });
  assert.deepEqual(splitKubectlArgs(['get', 'nodes', '-o', 'name']), {
    kctl: [],
    kubectl: ['get', 'nodes', '-o', 'name'],
  });
  assert.deepEqual(splitKubectlArgs(['--data-dir']), { kctl: ['--data-dir'], kubectl: [] });
});

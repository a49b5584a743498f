// The manifest applier against a real kube-apiserver: stacks under <data-dir>/manifests/ are
// applied and labelled, re-applied on change, pruned when objects or whole stacks go (also across
// a restart), and a stack with bad YAML is reported with file and line without stopping others.
import assert from 'node:assert/strict';
import { mkdir, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { test, type TestContext } from 'node:test';
import { controllerReady, labController, track } from '../lab/cluster.ts';
import { startLab } from '../lab/lab-test.ts';
import { waitFor } from '../../wait.ts';

const configMap = (name: string, value: string, namespace?: string) =>
  `apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ${name}\n${namespace ? `  namespace: ${namespace}\n` : ''}data:\n  value: "${value}"\n`;

test('manifest stacks: applied with a stack label, re-applied on change, pruned, bad YAML reported per stack', async (t: TestContext) => {
  const { lab, dir, kctlBin } = await startLab(t, 'mf', ['ctl'], { dir: 'kctl-manifests-' });
  const ctl = lab.host('ctl');
  const c = await labController(kctlBin, ctl, dir);
  const stacks = join(c.dataDir, 'manifests');
  // Stacks written before the first start are applied at start.
  await mkdir(join(stacks, 'demo'), { recursive: true });
  await writeFile(join(stacks, 'demo', '00-ns.yaml'), 'apiVersion: v1\nkind: Namespace\nmetadata:\n  name: demo\n');
  await writeFile(
    join(stacks, 'demo', '10-config.yaml'),
    configMap('one', '1', 'demo') + '---\n' + configMap('two', '2', 'demo'),
  );
  await mkdir(join(stacks, 'broken'));
  await writeFile(join(stacks, 'broken', 'x.yaml'), 'apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: [unclosed\n');
  await mkdir(join(stacks, 'extra'));
  await writeFile(join(stacks, 'extra', 'cm.yml'), configMap('extra', 'x'));
  // An operator's own kind: the CRD and an object of it in one file.
  await mkdir(join(stacks, 'widgets'));
  await writeFile(
    join(stacks, 'widgets', 'all.yaml'),
    `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.kctl.dev
spec:
  group: example.kctl.dev
  scope: Namespaced
  names: { plural: widgets, singular: widget, kind: Widget }
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema: { type: object, x-kubernetes-preserve-unknown-fields: true }
---
apiVersion: example.kctl.dev/v1
kind: Widget
metadata: { name: w1, namespace: default }
spec: { size: 3 }
`,
  );
  const start = () => track(ctl.spawn(kctlBin, c.args));
  let controller = start();
  await controllerReady(controller);
  const value = async (name: string, ns = 'demo') =>
    String((await c.kubectl(['get', 'configmap', name, '-n', ns, '-o', 'jsonpath={.data.value}'])).stdout);
  const exists = async (name: string, ns = 'demo') =>
    (await c.kubectl(['get', 'configmap', name, '-n', ns])).exitCode === 0;

  assert.equal(await value('one'), '1');
  assert.equal(await value('two'), '2');
  assert.equal(await value('extra', 'default'), 'x', 'a namespaced object without a namespace goes to default');
  const label = await c.kubectl([
    'get',
    'configmap',
    'one',
    '-n',
    'demo',
    '-o',
    'jsonpath={.metadata.labels.kctl\\.dev/stack}',
  ]);
  assert.equal(String(label.stdout), 'demo');
  const managers = await c.kubectl([
    'get',
    'configmap',
    'one',
    '-n',
    'demo',
    '--show-managed-fields',
    '-o',
    'jsonpath={.metadata.managedFields[*].manager}',
  ]);
  assert.match(String(managers.stdout), /\bkctl\b/);
  assert.ok(controller.saw('bad manifest broken/x.yaml:'), 'the bad stack was not reported with file and line');

  await waitFor(
    'the custom resource applied after its CRD',
    30_000,
    async () =>
      String((await c.kubectl(['get', 'widgets.example.kctl.dev', 'w1', '-o', 'jsonpath={.spec.size}'])).stdout) ===
      '3',
    controller.log,
  );

  // A change is applied within seconds; a removed object is pruned; the broken stack stays broken without stopping this.
  await writeFile(join(stacks, 'demo', '10-config.yaml'), configMap('one', 'changed', 'demo'));
  await waitFor('change applied', 30_000, async () => (await value('one')) === 'changed', controller.log);
  await waitFor('two pruned', 30_000, async () => !(await exists('two')), controller.log);

  // A whole stack removed: its objects go.
  await rm(join(stacks, 'extra'), { recursive: true });
  await waitFor('extra pruned', 30_000, async () => !(await exists('extra', 'default')), controller.log);

  // Fixed YAML is applied.
  await writeFile(join(stacks, 'broken', 'x.yaml'), configMap('fixed', 'ok'));
  await waitFor('fixed stack applied', 30_000, async () => (await value('fixed', 'default')) === 'ok', controller.log);

  // While the controller is down an object leaves its stack: the next start prunes it.
  controller.child.kill('SIGTERM');
  assert.equal(await controller.exited, 0);
  await writeFile(join(stacks, 'demo', '10-config.yaml'), configMap('three', '3', 'demo'));
  controller = start();
  await controllerReady(controller, 'controller ready again');
  assert.equal(await value('three'), '3');
  assert.equal(await exists('one'), false, 'an object removed while the controller was down was not pruned');
  assert.equal(await value('fixed', 'default'), 'ok');
});

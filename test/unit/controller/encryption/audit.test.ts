// The audit log's flags, default policy and the checks on an operator's policy file.
import assert from 'node:assert/strict';
import { readFile, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { test } from 'node:test';
import { parse } from 'yaml';
import { apiserverArgs } from '../../../../src/controller/components/apiserver.ts';
import {
  auditPaths,
  checkAuditPolicy,
  defaultAuditPolicy,
  prepareAudit,
} from '../../../../src/controller/encryption/audit.ts';
import { parseConfig } from '../../../../src/controller/config/config.ts';
import { controllerPaths } from '../../../../src/controller/config/paths.ts';
import { pkiPaths } from '../../../../src/pki/index.ts';
import { tempDir } from '../../../helpers.ts';

const paths = controllerPaths('/var/lib/kctl', '/run/kctl');
const pki = pkiPaths('/var/lib/kctl/pki');
const flag = (args: string[], name: string) => args.find((a) => a.startsWith(`--${name}=`))?.slice(name.length + 3);

test('audit: on by default for both profiles, into <data-dir>/audit with size rotation and a bounded number of files', () => {
  for (const profile of ['full', 'api-only'] as const) {
    const args = apiserverArgs(parseConfig({ spec: { profile } }, 'kctl.yaml'), paths, pki, { egress: true });
    assert.equal(flag(args, 'audit-log-path'), '/var/lib/kctl/audit/audit.log');
    assert.equal(flag(args, 'audit-policy-file'), '/var/lib/kctl/audit-policy.yaml');
    assert.equal(flag(args, 'audit-log-maxsize'), '100');
    assert.equal(flag(args, 'audit-log-maxbackup'), '5');
  }
  const own = parseConfig(
    { spec: { api: { audit: { policyFile: '/etc/audit.yaml', maxSize: 1, maxBackups: 2 } } } },
    'kctl.yaml',
  );
  const args = apiserverArgs(own, paths, pki, { egress: true });
  assert.equal(flag(args, 'audit-policy-file'), '/etc/audit.yaml');
  assert.equal(flag(args, 'audit-log-maxsize'), '1');
  assert.equal(flag(args, 'audit-log-maxbackup'), '2');
  const off = apiserverArgs(parseConfig({ spec: { api: { audit: { enabled: false } } } }, 'kctl.yaml'), paths, pki, {
    egress: true,
  });
  assert.equal(
    off.some((a) => a.startsWith('--audit-')),
    false,
  );
  assert.throws(
    () => parseConfig({ spec: { api: { audit: { maxBackups: 0 } } } }, 'kctl.yaml'),
    /spec\.api\.audit\.maxBackups/,
  );
  assert.throws(
    () => parseConfig({ spec: { api: { audit: { maxsize: 1 } } } }, 'kctl.yaml'),
    /spec\.api\.audit: unknown field\(s\) "maxsize"/,
  );
});

test("audit: the default policy keeps Secret, ConfigMap and token bodies out, records RBAC bodies, and drops probes and leases renewed by their holders, not others' lease reads and writes", () => {
  type Rule = {
    level: string;
    resources?: { group: string; resources?: string[] }[];
    verbs?: string[];
    users?: string[];
    namespaces?: string[];
    nonResourceURLs?: string[];
  };
  const rules = (defaultAuditPolicy() as { rules: Rule[] }).rules;
  /** The level of the first rule that matches, as kube-apiserver picks it. */
  const levelOf = (group: string, resource: string, verb: string, who = { user: 'alice', namespace: 'default' }) =>
    rules.find(
      (r) =>
        !r.nonResourceURLs &&
        (!r.verbs || r.verbs.includes(verb)) &&
        (!r.users || r.users.includes(who.user)) &&
        (!r.namespaces || r.namespaces.includes(who.namespace)) &&
        (!r.resources ||
          r.resources.some((g) => g.group === group && (!g.resources || g.resources.includes(resource)))),
    )?.level;
  const lease = (verb: string, user: string, namespace: string) =>
    levelOf('coordination.k8s.io', 'leases', verb, { user, namespace });
  assert.equal(lease('update', 'system:node:w1', 'kube-node-lease'), 'None', 'node heartbeats');
  assert.equal(lease('update', 'system:kube-scheduler', 'kube-system'), 'None', 'leader election');
  assert.equal(lease('update', 'kubernetes-admin', 'kube-system'), 'None', "a controller's own lease");
  assert.equal(
    lease('update', 'kubernetes-admin', 'kctl-controllers'),
    'None',
    "a controller's own lease, the nodes' copy",
  );
  assert.equal(
    lease('update', 'system:serviceaccount:kube-system:evil', 'kctl-controllers'),
    'Metadata',
    'anyone else writing the copy nodes follow',
  );
  assert.equal(
    lease('update', 'system:serviceaccount:kube-system:evil', 'kube-system'),
    'Metadata',
    "anyone else writing kctl's controller leases",
  );
  assert.equal(lease('get', 'system:node:w1', 'kube-system'), 'Metadata', "a node reading a controller's lease");
  assert.equal(levelOf('', 'secrets', 'create'), 'Metadata');
  assert.equal(levelOf('', 'configmaps', 'update'), 'Metadata');
  assert.equal(levelOf('', 'serviceaccounts/token', 'create'), 'Metadata');
  assert.equal(levelOf('rbac.authorization.k8s.io', 'clusterrolebindings', 'create'), 'RequestResponse');
  assert.equal(levelOf('', 'pods/exec', 'create'), 'Metadata');
  assert.equal(lease('delete', 'kubernetes-admin', 'kube-system'), 'Metadata');
  // No rule anywhere records a request or response body of the secret-bearing kinds.
  for (const r of rules.filter((x) => x.level === 'Request' || x.level === 'RequestResponse'))
    assert.ok(
      r.resources?.every((g) => g.group === 'rbac.authorization.k8s.io'),
      JSON.stringify(r),
    );
});

test("audit: kctl's policy is written once with the log dir 0700; an operator's policy is checked in one line before anything starts", async (t) => {
  const dir = await tempDir(t, 'kctl-audit-');
  await prepareAudit(parseConfig({}, 'kctl.yaml'), dir);
  const written = parse(await readFile(auditPaths(dir).defaultPolicy, 'utf8')) as { kind: string };
  assert.equal(written.kind, 'Policy');
  assert.equal((await stat(auditPaths(dir).dir)).mode & 0o777, 0o700);

  const file = join(dir, 'mine.yaml');
  const withPolicy = parseConfig({ spec: { api: { audit: { policyFile: file } } } }, 'kctl.yaml');
  await assert.rejects(
    checkAuditPolicy(withPolicy),
    /^Error: cannot read spec\.api\.audit\.policyFile .*mine\.yaml: ENOENT; give a readable audit policy file/,
  );
  await writeFile(file, 'rules: [');
  await assert.rejects(checkAuditPolicy(withPolicy), /spec\.api\.audit\.policyFile .*mine\.yaml is not valid YAML/);
  await writeFile(file, 'apiVersion: v1\nkind: ConfigMap\n');
  await assert.rejects(
    checkAuditPolicy(withPolicy),
    /is not an audit policy: expected apiVersion audit\.k8s\.io\/v1, kind Policy and a list of rules/,
  );
  await writeFile(file, 'apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n  - level: Metadata\n');
  await checkAuditPolicy(withPolicy);
});

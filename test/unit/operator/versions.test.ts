// Which version a KctlCluster may roll to: never back, one Kubernetes minor at a time when the
// operator knows the target's Kubernetes (its own version), and nothing to check before a first roll.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { kubernetesOfGitVersion, rolling, rollProblem } from '../../../src/operator/versions.ts';

const own = { version: '0.5.0', kubernetes: '1.36.3', etcd: '3.6.14' };

test('a roll to the operator’s own version is checked against the Kubernetes the control plane runs', () => {
  assert.equal(rollProblem('0.5.0', { version: '0.4.0', kubernetesVersion: '1.35.2' }, own), undefined);
  assert.equal(rollProblem('0.5.0', { version: '0.4.2', kubernetesVersion: '1.36.1' }, own), undefined);
  const skip = rollProblem('0.5.0', { version: '0.3.0', kubernetesVersion: '1.34.4' }, own);
  assert.equal(skip?.reason, 'VersionSkewRefused');
  assert.match(
    skip!.message,
    /^cannot roll to kctl 0\.5\.0 \(Kubernetes 1\.36\.3\): .*1\.34\.4 -> 1\.36\.3 skips minor version 1\.35/,
  );
  const back = rollProblem('0.5.0', { version: '0.4.0', kubernetesVersion: '1.37.0' }, own);
  assert.equal(back?.reason, 'VersionSkewRefused');
  assert.match(back!.message, /Kubernetes 1\.36\.3 is older than the running 1\.37\.0/);
  assert.equal(rolling('0.5.0', own), 'rolling to kctl 0.5.0');
});

test('never back; a first roll or a version the operator cannot look into is not refused', () => {
  const down = rollProblem('0.4.0', { version: '0.5.0', kubernetesVersion: '1.36.3' }, own);
  assert.equal(down?.reason, 'DowngradeRefused');
  assert.match(down!.message, /set spec\.version to 0\.5\.0 or newer$/);
  // Not rolled yet (a new cluster), or already there: nothing to check.
  assert.equal(rollProblem('0.5.0', {}, own), undefined);
  assert.equal(rollProblem('0.5.0', { version: '0.5.0', kubernetesVersion: '1.30.0' }, own), undefined);
  // Another kctl's Kubernetes is unknown here, so its step cannot be checked (and the status says so).
  assert.equal(rollProblem('0.6.0', { version: '0.3.0', kubernetesVersion: '1.34.4' }, own), undefined);
  assert.match(
    rolling('0.6.0', own),
    /^rolling to kctl 0\.6\.0 \(its Kubernetes step not checked: .*kctl 0\.5\.0 only\)$/,
  );
  // A status written before the operator recorded Kubernetes: only the kctl rule applies.
  assert.equal(rollProblem('0.5.0', { version: '0.3.0' }, own), undefined);
});

test("kube-apiserver's gitVersion reads as a Kubernetes version", () => {
  assert.equal(kubernetesOfGitVersion('v1.36.3'), '1.36.3');
  assert.equal(kubernetesOfGitVersion('v1.36.3-kctl.1+abc'), '1.36.3');
  assert.equal(kubernetesOfGitVersion('banana'), undefined);
  assert.equal(kubernetesOfGitVersion(undefined), undefined);
});

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { compareVersions } from '../../../src/base/version.ts';

test('versions sort by semver precedence: a pre-release before its release', () => {
  const sorted = ['0.1.0-prev.1', '0.1.0', '0.1.1-broken', '0.1.1', '0.2.0', '1.0.0'];
  for (let i = 1; i < sorted.length; i++) {
    assert.ok(compareVersions(sorted[i - 1]!, sorted[i]!) < 0, `${sorted[i - 1]} < ${sorted[i]}`);
    assert.ok(compareVersions(sorted[i]!, sorted[i - 1]!) > 0, `${sorted[i]} > ${sorted[i - 1]}`);
  }
  assert.equal(compareVersions('0.1.0', 'v0.1.0+build.7'), 0, 'build metadata and a leading v do not count');
  assert.ok(compareVersions('0.10.0', '0.9.0') > 0, 'numbers, not text');
});

test('pre-release identifiers compare as semver.org says', () => {
  // The example list of semver.org, item 11, in ascending order.
  const sorted = [
    '1.0.0-alpha',
    '1.0.0-alpha.1',
    '1.0.0-alpha.beta',
    '1.0.0-beta',
    '1.0.0-beta.2',
    '1.0.0-beta.11',
    '1.0.0-rc.1',
    '1.0.0',
  ];
  for (let i = 1; i < sorted.length; i++)
    assert.ok(compareVersions(sorted[i - 1]!, sorted[i]!) < 0, `${sorted[i - 1]} < ${sorted[i]}`);
});

test('a string that is not a version is refused in one line', () => {
  assert.throws(() => compareVersions('0.1', '0.1.0'), /"0\.1" is not a version/);
  assert.throws(() => compareVersions('0.1.0', 'latest'), /"latest" is not a version/);
});

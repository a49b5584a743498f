// Reading containerd's CRI plugin state from `ctr plugins ls --detailed` (the text of containerd 2.3).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { criPluginError } from '../../../src/worker/containerd.ts';

const block = (type: string, id: string, error?: string) =>
  [
    `Type:             ${type}`,
    `ID:               ${id}`,
    'Requires:        ',
    '                  io.containerd.warning.v1',
    ...(error
      ? ['Error:           ', '                  Code:        Unknown', `                  Message:     ${error}`]
      : ['Platforms:        linux/amd64']),
    '                         ',
  ].join('\n');

const INOTIFY =
  'failed to create CRI service: failed to create cni conf monitor for default: failed to create fsnotify watcher: too many open files';

test('a loaded CRI plugin is no error, even beside another plugin that failed', () => {
  const out = [
    block('io.containerd.cri.v1', 'images', 'failed to find snapshotter "x"'),
    block('io.containerd.grpc.v1', 'cri'),
    block('io.containerd.server.v1', 'ttrpc'),
  ].join('\n');
  assert.equal(criPluginError(out), undefined);
});

test("a failed CRI plugin gives containerd's own message", () => {
  const out = [
    block('io.containerd.cri.v1', 'runtime'),
    block('io.containerd.grpc.v1', 'cri', INOTIFY),
    block('io.containerd.server.v1', 'ttrpc'),
  ].join('\n');
  assert.equal(criPluginError(out), INOTIFY);
});

test('no CRI plugin at all (disabled in a drop-in) is an error too', () => {
  const out = [block('io.containerd.cri.v1', 'cri'), block('io.containerd.grpc.v1', 'introspection')].join('\n');
  assert.match(criPluginError(out) ?? '', /no CRI plugin/);
});

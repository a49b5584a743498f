// The server's defaults live in one object (SERVER_DEFAULTS), as the agent's do.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { SERVER_DEFAULTS, withServerDefaults } from '../../../src/konnectivity/server/options.ts';
import { quietLogger } from './fixtures.ts';

test('an option left out or given as undefined keeps its default; one given wins', () => {
  const tls = { cert: 'c', key: 'k' };
  const o = withServerDefaults({
    tls,
    log: quietLogger(),
    agentPort: 0,
    dialTimeoutMs: undefined,
    closeTimeoutMs: 3_000,
    extensions: false,
  });
  assert.equal(o.dialTimeoutMs, SERVER_DEFAULTS.dialTimeoutMs);
  assert.equal(o.closeTimeoutMs, 3_000);
  assert.equal(o.extensions, false);
  assert.equal(o.agentBindAddress, '0.0.0.0');
  assert.equal(o.adminBindAddress, '127.0.0.1');
  assert.deepEqual(o.proxyStrategies, ['destHost', 'default']);
  assert.equal(o.tls, tls);
});

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { renderStatus } from '../../../src/cli/status.ts';
import type { ControllerStatusReport } from '../../../src/controller/status.ts';

const none = { host: [], ipv4: [], ipv6: [], cidr: [], defaultRoute: false };

test('kctl status shows, per agent, what it claimed, what routing uses, and why the rest was dropped', () => {
  const report: ControllerStatusReport = {
    role: 'controller',
    version: 'test',
    pid: 1,
    uptimeSeconds: 5,
    components: [],
    konnectivity: {
      serverId: 's1',
      serverCount: 1,
      pendingDials: 0,
      establishedConnections: 0,
      closingConnections: 0,
      agents: [
        {
          id: 'x1',
          node: 'x1',
          user: 'system:node:x1',
          auth: 'certificate',
          claimed: { ...none, host: ['victim'], ipv4: ['10.123.4.5'], ipv6: ['fd00::5'] },
          accepted: none,
          dropped: [
            { claim: 'host=victim', reason: 'node x1 is not registered' },
            { claim: 'ipv4=10.123.4.5', reason: 'reported by node edge-1' },
          ],
          draining: false,
          extensions: [],
          connections: 0,
          pendingDials: 0,
          connectedAt: new Date(0).toISOString(),
        },
      ],
    },
  };
  const text = renderStatus(report);
  assert.match(text, /^ {4}claimed: {2}host=victim&ipv4=10\.123\.4\.5&ipv6=fd00::5$/m);
  assert.match(text, /^ {4}accepted: \(nothing: only dials any agent may take\)$/m);
  assert.match(text, /^ {4}dropped: {2}ipv4=10\.123\.4\.5 \(reported by node edge-1\)$/m);
});

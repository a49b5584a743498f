// Relays in wireguard mode: who carries whose addresses, and when a peer counts as heard from.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  CONTROLLERS,
  PeerLiveness,
  planRelays,
  RELAY_AFTER_SILENT_MS,
  type RelayCandidate,
} from '../../../src/worker/relay.ts';
import type { WireguardDeviceState } from '../../../src/host/wireguard.ts';

const peer = (name: string, relay = false): RelayCandidate => ({
  name,
  publicKey: `key-${name}`,
  relay,
  allowedIPs: [`10.244.${name.length}.0/24`, `192.0.2.${name.charCodeAt(0)}/32`],
});
const device = (rx: Record<string, number>): WireguardDeviceState => ({
  peers: Object.entries(rx).map(([name, rxBytes]) => ({
    publicKey: `key-${name}`,
    allowedIPs: [],
    lastHandshake: 0,
    rxBytes,
    txBytes: 0,
    keepaliveSeconds: 25,
  })),
});

test('a peer heard from keeps its own addresses; a silent one moves to a relay that is heard from', () => {
  const [a, b, r] = [peer('a'), peer('bb'), peer('relay', true)];
  const heard = new Set(['key-a', 'key-relay']);
  const plan = planRelays([a, b, r], (k) => heard.has(k));
  assert.deepEqual(plan.allowedIPs.get('key-a'), a.allowedIPs);
  assert.deepEqual(plan.allowedIPs.get('key-bb'), []);
  assert.deepEqual(plan.allowedIPs.get('key-relay'), [...b.allowedIPs, ...r.allowedIPs]);
  assert.deepEqual([...plan.via], [['bb', 'relay']]);
});

test('without a relay that is heard from, a silent peer keeps its own addresses (and waits for a handshake)', () => {
  const [a, r] = [peer('a'), peer('relay', true)];
  const plan = planRelays([a, r], () => false);
  assert.deepEqual(plan.allowedIPs.get('key-a'), a.allowedIPs);
  assert.deepEqual(plan.allowedIPs.get('key-relay'), r.allowedIPs);
  assert.equal(plan.via.size, 0);
});

test('every node picks the same relay: the first by name among those heard from', () => {
  const peers = [peer('silent'), peer('r2', true), peer('r1', true)];
  const plan = planRelays(peers, (k) => k !== 'key-silent');
  assert.equal(plan.via.get('silent'), 'r1');
  // A relay that is itself silent is not used; nor does a relay carry its own addresses twice.
  const plan2 = planRelays(peers, (k) => k === 'key-r2');
  assert.equal(plan2.via.get('silent'), 'r2');
  assert.equal(plan2.via.get('r1'), 'r2');
});

test('through the controllers: only without a relay node heard from, keeping its own addresses, and it sticks', () => {
  const [a, b, r] = [peer('a'), peer('bb'), peer('relay', true)];
  // Off: a silent peer waits, as before.
  assert.equal(planRelays([a, b], () => false).via.size, 0);
  const silentB = (k: string): boolean => k !== 'key-bb';
  const plan = planRelays([a, b], silentB, { controllers: true });
  assert.deepEqual([...plan.via], [['bb', CONTROLLERS]]);
  assert.deepEqual(plan.allowedIPs.get('key-bb'), b.allowedIPs, 'its addresses stay: only its endpoint moves');
  // Its packets now come through the controllers, so hearing from it says nothing: it stays.
  const sticky = new Set(['key-bb']);
  assert.equal(
    planRelays([a, b], () => true, { controllers: true, throughControllers: sticky }).via.get('bb'),
    CONTROLLERS,
  );
  // A relay node heard from wins (the controllers carry only what no node can).
  const withRelay = planRelays([a, b, r], (k) => k !== 'key-bb', { controllers: true, throughControllers: sticky });
  assert.equal(withRelay.via.get('bb'), 'relay');
  assert.deepEqual(withRelay.allowedIPs.get('key-relay'), [...b.allowedIPs, ...r.allowedIPs]);
  // Switched off: the sticky peer is judged by what is heard again.
  assert.equal(planRelays([a, b], () => true, { controllers: false, throughControllers: sticky }).via.size, 0);
});

test('liveness: received bytes moving mean heard from; a new peer has its grace; silence past the bound means not', () => {
  const live = new PeerLiveness();
  const t0 = 1_000_000;
  live.update(device({ a: 0, b: 100 }), t0);
  assert.equal(live.direct('key-a', t0 + RELAY_AFTER_SILENT_MS - 1), true, 'grace for a peer just configured');
  assert.equal(live.direct('key-unknown', t0), true);
  live.update(device({ a: 0, b: 200 }), t0 + 40_000);
  live.update(device({ a: 0, b: 200 }), t0 + RELAY_AFTER_SILENT_MS + 1);
  assert.equal(live.direct('key-a', t0 + RELAY_AFTER_SILENT_MS + 1), false, 'never heard from');
  assert.equal(live.direct('key-b', t0 + RELAY_AFTER_SILENT_MS + 1), true, 'heard 20 s ago');
  live.update(device({ a: 148 }), t0 + 70_000);
  assert.equal(live.direct('key-a', t0 + 70_000), true, 'a handshake got through: direct again');
  assert.equal(
    live.direct('key-b', t0 + 70_000),
    true,
    'a peer gone from the device is forgotten (and new again if it returns)',
  );
});

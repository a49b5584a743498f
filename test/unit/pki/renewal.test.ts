// The renewal rule, short leaf lifetimes (spec.pki.leafValidity) and the certificate watch that
// `kctl status` lists: what the renewer relies on, with the real ensure step on a temporary PKI.
import assert from 'node:assert/strict';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { test } from 'node:test';
import {
  CertificateWatch,
  controllerCertificates,
  ensurePkiFiles,
  pkiPaths,
  renewalTime,
} from '../../../src/pki/index.ts';
import { captureLogger, FULL_CONTROLLER_LEAVES, tempDir, smallPkiOptions } from '../../helpers.ts';

const MIN = 60_000;
const DAY = 24 * 60 * MIN;

const options = smallPkiOptions;

const at = (ms: number) => new Date(Date.UTC(2030, 0, 1) + ms);
const after = (notBefore: number, notAfter: number) =>
  renewalTime(at(notBefore), at(notAfter)).getTime() - at(0).getTime();

test('the renewal rule: two thirds of the lifetime, or 30 days before expiry when earlier, never before half', () => {
  // A year: two thirds (243 days) comes before 30 days ahead of expiry (335 days).
  assert.equal(after(0, 365 * DAY), (365 * DAY * 2) / 3);
  // 60 days: 30 days before expiry is day 30, earlier than two thirds (day 40) and not before half.
  assert.equal(after(0, 60 * DAY), 30 * DAY);
  // 50 days: 30 days before expiry would be day 20, before half: two thirds (day 33.3) counts.
  assert.equal(after(0, 50 * DAY), (50 * DAY * 2) / 3);
  // 10 minutes: 30 days before expiry lies before issuance, so two thirds.
  assert.equal(after(0, 10 * MIN), (10 * MIN * 2) / 3);
  // 15 minutes as kctl writes a 10-minute leaf (valid from 5 minutes back): 10 minutes after notBefore.
  assert.equal(after(-5 * MIN, 10 * MIN), 5 * MIN);
});

test('leaves live spec.pki.leafValidity, renew when due, and the watch counts the renewals', async (t) => {
  const dir = await tempDir(t, 'kctl-pki-renewal-');
  const now = new Date();
  const { log } = captureLogger();
  const first = await ensurePkiFiles(options(dir, { now, leafValidityMs: 10 * MIN }), log);
  assert.ok(first.changed.includes(first.paths.serverCert));
  const watch = new CertificateWatch(controllerCertificates(first.paths));
  const listed = await watch.check(now);
  const server = listed.find((c) => c.name === 'server.crt')!;
  assert.equal(new Date(server.notAfter!).getTime() - now.getTime() < 10 * MIN + 1000, true);
  assert.ok(new Date(server.notAfter!).getTime() - now.getTime() > 10 * MIN - 1000);
  // Valid from 5 minutes back: 15 minutes in all, due two thirds in (5 minutes from issue).
  assert.equal(server.renewAt, new Date(new Date(server.notBefore!).getTime() + 10 * MIN).toISOString());
  assert.equal(listed.find((c) => c.name === 'admin.conf')?.kind, 'kubeconfig');
  assert.equal(listed.find((c) => c.name === 'ca.crt')?.renewAt, undefined);
  assert.ok(listed.every((c) => c.renewals === 0 && c.error === undefined));
  const next = watch.nextRenewal()!;

  // Just before: nothing changes; at the renewal time: every leaf and kubeconfig, not the CAs.
  const before = await ensurePkiFiles(
    options(dir, { now: new Date(next.getTime() - 1000), leafValidityMs: 10 * MIN }),
    log,
  );
  assert.deepEqual(before.changed, []);
  const due = await ensurePkiFiles(
    options(dir, { now: new Date(next.getTime() + 1000), leafValidityMs: 10 * MIN }),
    log,
  );
  const p = pkiPaths(dir);
  assert.deepEqual(due.changed.map((f) => f.slice(p.dir.length + 1)).sort(), FULL_CONTROLLER_LEAVES);
  const again = await watch.check();
  for (const c of again) assert.equal(c.renewals, c.kind === 'ca' ? 0 : 1, c.name);
  assert.notEqual(again.find((c) => c.name === 'server.crt')?.serial, server.serial);
});

test('a shorter spec.pki.leafValidity applies at the next start; a longer one at the next renewal', async (t) => {
  const dir = await tempDir(t, 'kctl-pki-validity-');
  const { log } = captureLogger();
  await ensurePkiFiles(options(dir), log);
  const shorter = await ensurePkiFiles(options(dir, { leafValidityMs: 10 * MIN }), log);
  assert.ok(shorter.changed.includes(shorter.paths.serverCert));
  const longer = await ensurePkiFiles(options(dir, { leafValidityMs: 365 * DAY }), log);
  assert.deepEqual(longer.changed, []);
});

test('the watch reports an unreadable file as an error and a CA within a year of expiry as a warning', async (t) => {
  const dir = await tempDir(t, 'kctl-pki-watch-');
  const { paths } = await ensurePkiFiles(options(dir), captureLogger().log);
  await writeFile(join(dir, 'broken.crt'), 'not a certificate\n');
  const watch = new CertificateWatch([
    { name: 'ca.crt', file: paths.caCert, kind: 'ca' },
    { name: 'broken.crt', file: join(dir, 'broken.crt'), kind: 'leaf' },
    { name: 'absent.crt', file: join(dir, 'absent.crt'), kind: 'leaf' },
  ]);
  const inNineYears = new Date(Date.now() + 9.5 * 365 * DAY);
  const list = await watch.check(inNineYears);
  assert.deepEqual(
    list.map((c) => c.name),
    ['ca.crt', 'broken.crt'],
  );
  assert.match(list[0]!.warning ?? '', /within a year/);
  assert.match(list[1]!.error ?? '', /no certificate/);
  assert.equal((await watch.check()).find((c) => c.name === 'ca.crt')?.warning, undefined);
});

// The host's front-door registry: a cluster's names lead to its backends while its kctl runs; two
// clusters never share a name; a cluster whose kctl died leads nowhere (its file left behind);
// a cluster that stops removes its names.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { mkdir, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import {
  FrontDoorRoutes,
  registerFrontDoor,
  unregisterFrontDoor,
  type FrontDoorRegistration,
} from '../../../src/host/front-door-routes.ts';
import { useHostStateDir } from '../../../src/host/port-claims.ts';
import { claimDataDir, ownerFile, ownerRecord, releaseDataDir } from '../../../src/supervisor/owner.ts';
import { waitFor } from '../../wait.ts';

const root = mkdtempSync(join(tmpdir(), 'kctl-front-door-'));
useHostStateDir(join(root, 'host'));
after(() => rmSync(root, { recursive: true, force: true }));

const api = (port: number) => ({ endpoint: 'api', host: '127.0.0.1', port });

test('names lead to their cluster while its kctl runs; a taken name is refused; a dead kctl leads nowhere; stop removes', async () => {
  // This process is the kctl of cluster "alpha".
  const alphaDir = join(root, 'alpha');
  assert.equal(await claimDataDir(alphaDir, 'controller'), undefined);
  after(() => releaseDataDir(alphaDir));
  const alpha: FrontDoorRegistration = {
    cluster: 'alpha',
    dataDir: alphaDir,
    pid: process.pid,
    names: {
      'alpha.example.test': api(16001),
      'konnectivity.alpha.example.test': { ...api(16002), endpoint: 'konnectivity' },
    },
  };
  await registerFrontDoor(alpha);

  // Another process is the kctl of cluster "beta".
  const beta = spawn('sleep', ['60'], { stdio: 'ignore' });
  after(() => beta.kill());
  const betaDir = join(root, 'beta');
  await mkdir(betaDir, { recursive: true });
  await writeFile(ownerFile(betaDir), await ownerRecord(beta.pid!, 'controller'));
  await assert.rejects(
    registerFrontDoor({
      cluster: 'beta',
      dataDir: betaDir,
      pid: beta.pid!,
      names: { 'alpha.example.test': api(16003) },
    }),
    /front door name alpha\.example\.test belongs to cluster "alpha" on this host \(pid \d+, data dir .*alpha\)/,
  );
  await registerFrontDoor({
    cluster: 'beta',
    dataDir: betaDir,
    pid: beta.pid!,
    names: { 'beta.example.test': api(16003) },
  });

  const routes = new FrontDoorRoutes();
  assert.deepEqual(await routes.route('ALPHA.example.test'), {
    cluster: 'alpha',
    endpoint: 'api',
    host: '127.0.0.1',
    port: 16001,
  });
  assert.equal((await routes.route('konnectivity.alpha.example.test'))?.endpoint, 'konnectivity');
  assert.deepEqual(await routes.route('beta.example.test'), {
    cluster: 'beta',
    endpoint: 'api',
    host: '127.0.0.1',
    port: 16003,
  });
  assert.equal(await routes.route('gamma.example.test'), undefined);

  // beta's kctl dies without a word: its file stays, its names lead nowhere within the refresh.
  beta.kill('SIGKILL');
  await waitFor("beta's names gone", 5_000, async () => (await routes.route('beta.example.test')) === undefined);
  // ... and its name is free for another cluster.
  const gammaDir = join(root, 'gamma');
  const gamma = spawn('sleep', ['60'], { stdio: 'ignore' });
  after(() => gamma.kill());
  await mkdir(gammaDir, { recursive: true });
  await writeFile(ownerFile(gammaDir), await ownerRecord(gamma.pid!, 'controller'));
  await registerFrontDoor({
    cluster: 'gamma',
    dataDir: gammaDir,
    pid: gamma.pid!,
    names: { 'beta.example.test': api(16004) },
  });
  await waitFor(
    'beta.example.test leads to gamma',
    5_000,
    async () => (await routes.route('beta.example.test'))?.cluster === 'gamma',
  );

  // alpha stops: its names go with its file.
  await unregisterFrontDoor(alphaDir);
  await waitFor("alpha's names gone", 5_000, async () => (await routes.route('alpha.example.test')) === undefined);
  assert.deepEqual([...(await routes.names()).keys()], ['beta.example.test']);
});

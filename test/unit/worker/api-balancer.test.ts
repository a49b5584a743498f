// The node-local API balancer with two stand-in API servers (HTTPS, the test cluster's serving
// certificate): connections spread over the healthy ones, an unhealthy one loses its open
// connections and gets no new ones, and the upstream list follows setUpstreams; an upstream
// that stops answering is cut only after several silent checks in a row.
import assert from 'node:assert/strict';
import { writeFile } from 'node:fs/promises';
import { createServer, request, type Server } from 'node:https';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { test } from 'node:test';
import { ApiBalancerComponent } from '../../../src/worker/api-balancer.ts';
import { captureLogger, initialised, tempDir } from '../../helpers.ts';
import { makePki } from '../konnectivity/fixtures.ts';
import { waitFor } from '../../wait.ts';

async function apiServer(t: { after: (fn: () => Promise<void>) => void }, name: string, cert: string, key: string) {
  const state = { ready: true, silent: false, checks: 0 };
  const server: Server = createServer({ cert, key }, (req, res) => {
    if (req.url === '/readyz') {
      state.checks++;
      if (state.silent) return; // a controller behind a partition: the check gets no answer
      res.writeHead(state.ready ? 200 : 500).end(state.ready ? 'ok' : 'etcd down');
      return;
    }
    if (req.url === '/hang') return; // a long watch: the connection stays open
    res.end(name);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  t.after(() => new Promise<void>((r) => server.close(() => r())));
  server.on('listening', () => undefined);
  return { url: `https://127.0.0.1:${(server.address() as AddressInfo).port}`, state, server };
}

/** The test cluster's PKI, with its CA also in a file (the balancer reads the CA from one). */
async function balancerPki(t: Parameters<typeof tempDir>[0]) {
  const pki = await makePki();
  const caFile = join(await tempDir(t), 'ca.crt');
  await writeFile(caFile, pki.ca);
  return { pki, caFile };
}

function get(port: number, ca: string, path = '/'): Promise<string> {
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port, path, ca, agent: false }, (res) => {
      let body = '';
      res.on('data', (c: Buffer) => (body += c.toString()));
      res.on('end', () => resolve(body));
    });
    req.on('error', reject);
    req.end();
  });
}

test(
  'the API balancer spreads over healthy API servers, cuts an unhealthy one off, and follows its upstream list',
  { timeout: 30_000 },
  async (t) => {
    const { pki, caFile } = await balancerPki(t);
    const a = await apiServer(t, 'api-a', pki.serverCert, pki.serverKey);
    const b = await apiServer(t, 'api-b', pki.serverCert, pki.serverKey);
    const { log } = captureLogger();
    const lb = await initialised(
      new ApiBalancerComponent({ caFile, apiServers: [{ url: a.url }, { url: b.url }], port: 0 }),
      log,
    );
    await lb.start();
    t.after(() => lb.stop());
    const port = lb.listenPort();

    // TLS passes through: the client verifies the API server's own certificate against the CA.
    const seen = new Set<string>();
    for (let i = 0; i < 6; i++) seen.add(await get(port, pki.ca));
    assert.deepEqual([...seen].sort(), ['api-a', 'api-b']);

    // api-a turns unhealthy: its open connection (one of two long requests, one per upstream) is cut,
    // and new connections go to api-b only.
    const hang = () =>
      new Promise<string>((resolve) => {
        const req = request({ host: '127.0.0.1', port, path: '/hang', ca: pki.ca, agent: false }, () => undefined);
        req.on('error', (err) => resolve(`closed: ${err.message}`));
        req.end();
      });
    const hanging = [hang(), hang()];
    const connections = (url: string) =>
      lb.snapshot().upstreams.find((u) => url.endsWith(`:${u.address.split(':')[1]}`))?.connections ?? 0;
    await waitFor(
      'a long request on each upstream',
      10_000,
      () => connections(a.url) === 1 && connections(b.url) === 1,
    );
    a.state.ready = false;
    assert.match(await Promise.race(hanging), /^closed: socket hang up/);
    assert.equal(connections(a.url), 0);
    assert.equal(connections(b.url), 1, "api-b's connection must stay");
    for (let i = 0; i < 4; i++) assert.equal(await get(port, pki.ca), 'api-b');
    a.state.ready = true;
    await waitFor('api-a healthy again', 5_000, () => lb.snapshot().upstreams.every((u) => u.healthy));

    // The controllers' leases now name only api-a.
    lb.setUpstreams([{ url: a.url }]);
    assert.deepEqual(
      lb.snapshot().upstreams.map((u) => u.address),
      [`127.0.0.1:${a.url.split(':')[2]}`],
    );
    for (let i = 0; i < 3; i++) assert.equal(await get(port, pki.ca), 'api-a');
    lb.setUpstreams([]);
    assert.equal(lb.snapshot().upstreams.length, 1, 'an empty list must keep the current upstreams');
  },
);

test(
  'an API server that stops answering is cut after three silent checks, not one, and reported when it answers again',
  { timeout: 30_000 },
  async (t) => {
    const { pki, caFile } = await balancerPki(t);
    const a = await apiServer(t, 'api-a', pki.serverCert, pki.serverKey);
    const { log, raw } = captureLogger();
    const answered: string[] = [];
    const timings = { checkEveryMs: 200, checkTimeoutMs: 300, recheckAfterFailureMs: 100, silentChecksToCut: 3 };
    const lb = await initialised(
      new ApiBalancerComponent({
        caFile,
        apiServers: [{ url: a.url }],
        port: 0,
        timings,
        onHealthy: (h) => answered.push(h),
      }),
      log,
    );
    await lb.start();
    t.after(() => lb.stop());
    assert.deepEqual(answered, ['127.0.0.1'], 'the first good check reports the host');
    let cut = false;
    const req = request(
      { host: '127.0.0.1', port: lb.listenPort(), path: '/hang', ca: pki.ca, agent: false },
      () => undefined,
    );
    req.on('error', () => (cut = true));
    req.end();
    await waitFor('the long request through the balancer', 10_000, () => lb.snapshot().upstreams[0]?.connections === 1);

    a.state.silent = true;
    const before = a.state.checks;
    // The second silent check has begun, so the first one already failed: the connection must still be up.
    await waitFor('two silent checks', 5_000, () => a.state.checks >= before + 2);
    assert.equal(cut, false, 'one silent check must not cut the connections');
    assert.equal(lb.snapshot().upstreams[0]?.healthy, true);
    await waitFor('the connection is cut', 5_000, () => cut);
    assert.ok(a.state.checks >= before + 3, `cut after ${a.state.checks - before} checks`);
    assert.match(raw(), /API server unhealthy \(3 checks in a row without an answer\)/);

    a.state.silent = false;
    await waitFor('healthy again', 5_000, () => lb.snapshot().upstreams[0]?.healthy);
    assert.deepEqual(answered, ['127.0.0.1', '127.0.0.1'], 'answering again is reported (the agent retries that host)');
  },
);

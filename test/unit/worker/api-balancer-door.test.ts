// The node-local API balancer in front of a front door (real TLS on loopback: a stand-in
// kube-apiserver, the door, its handoff and the controller's node API tunnel). A client that names
// the cluster's API passes through the door untouched; one that names nothing (kubelet after its
// TLS bootstrap) goes inside the node API tunnel, opened with the node's certificate, and still
// talks TLS with the API server itself. The tunnel takes only a node's certificate.
import assert from 'node:assert/strict';
import { readFile, writeFile } from 'node:fs/promises';
import { createServer, request } from 'node:https';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { test } from 'node:test';
import type { TLSSocket } from 'node:tls';
import { NodeApiTunnel } from '../../../src/controller/components/node-api-tunnel.ts';
import { DoorHandoff, newHandoffKey } from '../../../src/frontdoor/handoff.ts';
import { FrontDoor, type FrontDoorRoute } from '../../../src/frontdoor/router.ts';
import { pkiPaths } from '../../../src/pki/index.ts';
import { ApiBalancerComponent } from '../../../src/worker/api-balancer.ts';
import { initialised, tempDir } from '../../helpers.ts';
import { makePkiWithNames, quietLogger } from '../konnectivity/fixtures.ts';
import { waitFor } from '../../wait.ts';

const API = 'alpha.c.test';
const NODE_API = `node-api.${API}`;

/** GET / through the balancer; the answer is the server name the API server saw. */
function ask(port: number, ca: string, servername?: string): Promise<string> {
  return new Promise((resolve) => {
    const req = request({ host: '127.0.0.1', port, path: '/', ca, servername, agent: false }, (res) => {
      let body = '';
      res.on('data', (c: Buffer) => (body += c.toString()));
      res.on('end', () => resolve(body));
    });
    req.on('error', (err: NodeJS.ErrnoException) => resolve(`error: ${err.code ?? err.message}`));
    req.end();
  });
}

test('through a front door: a client naming the API passes through, one naming nothing rides the node API tunnel with the node certificate; other certificates are refused', async (t) => {
  const pki = await makePkiWithNames(t, [API, NODE_API]);
  const paths = pkiPaths(pki.dir);
  const dir = await tempDir(t);
  const caFile = join(dir, 'ca.crt');
  await writeFile(caFile, pki.ca);
  const [cert, key] = await Promise.all([readFile(paths.serverCert, 'utf8'), readFile(paths.serverKey, 'utf8')]);
  const api = createServer({ cert, key }, (req, res) => {
    if (req.url === '/readyz') return void res.end('ok');
    res.end(`sni=${String((req.socket as TLSSocket).servername || 'none')}`);
  });
  await new Promise<void>((r) => api.listen(0, '127.0.0.1', r));
  t.after(() => new Promise<void>((r) => api.close(() => r())));
  const apiPort = (api.address() as AddressInfo).port;

  const log = quietLogger();
  const tunnel = new NodeApiTunnel(paths, { host: '127.0.0.1', port: apiPort }, log);
  t.after(() => tunnel.close());
  const handoffKey = newHandoffKey();
  const handoff = new DoorHandoff('nodeApi', handoffKey, (s, c) => tunnel.accept(s, c.address), log);
  const handoffPort = await handoff.listen();
  t.after(() => handoff.close());
  const routes: Record<string, FrontDoorRoute> = {
    [API]: { cluster: 'alpha', endpoint: 'api', host: '127.0.0.1', port: apiPort },
    [NODE_API]: {
      cluster: 'alpha',
      endpoint: 'nodeApi',
      host: '127.0.0.1',
      port: handoffPort,
      key: handoffKey.toString('hex'),
    },
  };
  const door = new FrontDoor({ port: 0, address: '127.0.0.1' }, { route: async (n) => routes[n] }, log);
  await door.listen();
  t.after(() => door.close());
  const frontDoor = {
    address: `127.0.0.1:${door.port}`,
    api: API,
    konnectivity: `konnectivity.${API}`,
    join: `join.${API}`,
    nodeApi: NODE_API,
  };

  const balancer = async (certFile: string) => {
    const lb = await initialised(
      new ApiBalancerComponent({
        caFile,
        // The direct address is unused: everything goes through the door.
        apiServers: [{ url: 'https://127.0.0.1:1', door: frontDoor }],
        nodeCertFile: certFile,
        port: 0,
      }),
      log,
    );
    await lb.start();
    t.after(() => lb.stop());
    await waitFor('the door healthy', 5_000, () => lb.snapshot().upstreams.every((u) => u.healthy));
    assert.deepEqual(
      lb.snapshot().upstreams.map((u) => u.address),
      [frontDoor.address],
    );
    return lb.listenPort();
  };
  const node = await pki.nodeCert('w1');
  const nodePem = join(dir, 'node.pem');
  await writeFile(nodePem, node.cert + node.key);
  const port = await balancer(nodePem);
  assert.equal(await ask(port, pki.ca, API), `sni=${API}`, 'a client naming the API');
  // kubelet after bootstrap: its kubeconfig names 127.0.0.1, so its ClientHello names nothing.
  assert.equal(await ask(port, pki.ca), 'sni=none', 'a client naming nothing, through the tunnel');
  assert.equal(await ask(port, pki.ca), 'sni=none');

  const user = await pki.clientCert({ commonName: 'jane', organizations: ['developers'] });
  const userPem = join(dir, 'user.pem');
  await writeFile(userPem, user.cert + user.key);
  const refusedPort = await balancer(userPem);
  assert.equal(await ask(refusedPort, pki.ca, API), `sni=${API}`, 'passing through needs no node certificate');
  assert.match(await ask(refusedPort, pki.ca), /^error: /, 'the tunnel took a certificate that is not a node');
  const nonePort = await balancer(join(dir, 'missing.pem'));
  assert.match(await ask(nonePort, pki.ca), /^error: /, 'the tunnel opened without a certificate');
});

// kctl-only figures from the real binary (dist/kctl): controller start to kube-apiserver
// /readyz, and the controller process's RSS idle with one konnectivity agent connected and the
// manifest applier running (it has applied the add-on stacks; with no node their pods stay Pending).
import { existsSync } from 'node:fs';
import { writeFile } from 'node:fs/promises';
import { request } from 'node:https';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { execa } from 'execa';
import { gauges, rssKiB, rssSplitKiB, startProc, waitUntil, type Proc } from './procs.ts';
import { freePort, freePorts } from '../test/ports.ts';
import { nodeCert } from '../test/e2e/lab/node-cert.ts';

export const KCTL = new URL('../dist/kctl', import.meta.url).pathname;

function readyz(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const req = request(
      { host: '127.0.0.1', port, path: '/readyz', rejectUnauthorized: false, timeout: 2_000 },
      (res) => {
        let body = '';
        res.on('data', (c: Buffer) => (body += c.toString()));
        res.on('end', () => resolve(res.statusCode === 200 && body.trim() === 'ok'));
      },
    );
    req.on('error', () => resolve(false));
    req.on('timeout', () => req.destroy());
    req.end();
  });
}

export interface ControllerFigures {
  readySeconds: number;
  rssMiB: number;
  /** The part of the RSS that is heaps (the rest: the executable's code pages, file-backed). */
  anonMiB: number;
}

/** One controller start (after --init-only staged everything) and its idle RSS with one agent. */
export async function controllerFigures(dir: string, log: (m: string) => void): Promise<ControllerFigures> {
  if (!existsSync(KCTL)) throw new Error(`${KCTL} is missing; run npm run build first`);
  const [api, agent, admin, etcdClient, etcdPeer, scheduler, cm, joinPort] = (await freePorts(8)) as [
    number,
    number,
    number,
    number,
    number,
    number,
    number,
    number,
  ];
  const ports = { api, agent, admin, etcdClient, etcdPeer, scheduler, cm, joinPort };
  const cfg = join(dir, 'kctl.yaml');
  await writeFile(
    cfg,
    [
      'apiVersion: kctl.dev/v1alpha1',
      'kind: ClusterConfig',
      'spec:',
      `  api: { address: 127.0.0.1, port: ${ports.api}, joinPort: ${ports.joinPort} }`,
      `  konnectivity: { agentPort: ${ports.agent}, adminPort: ${ports.admin} }`,
      `  storage: { etcd: { clientPort: ${ports.etcdClient}, peerPort: ${ports.etcdPeer} } }`,
      `  scheduler: { port: ${ports.scheduler} }`,
      `  controllerManager: { port: ${ports.cm} }`,
      '',
    ].join('\n'),
  );
  const dataDir = join(dir, 'data');
  const args = ['controller', '--single', '--config', cfg, '--data-dir', dataDir, '--run-dir', join(dir, 'run')];
  const init = await execa(KCTL, [...args, '--init-only'], { reject: false, all: true });
  if (init.exitCode !== 0) throw new Error(`kctl controller --init-only failed:\n${init.all}`);
  log('controller: staged, starting');
  const procs: Proc[] = [];
  try {
    const start = Date.now();
    const ctl = startProc('kctl controller', KCTL, args);
    procs.push(ctl);
    await waitUntil(
      'kube-apiserver /readyz ok',
      () => readyz(ports.api),
      300_000,
      () => ctl.output().split('\n').slice(-15).join('\n'),
      [ctl],
    );
    const readySeconds = (Date.now() - start) / 1000;
    log(`controller: /readyz ok after ${readySeconds.toFixed(1)} s; connecting one agent`);
    const certs = await nodeCert(join(dataDir, 'pki'), dir, 'bench-node');
    const agent = startProc('kctl konnectivity-agent', KCTL, [
      'konnectivity-agent',
      '--proxy-server-host=127.0.0.1',
      `--proxy-server-port=${ports.agent}`,
      `--ca-cert=${join(dataDir, 'pki/ca.crt')}`,
      `--agent-cert=${certs.cert}`,
      `--agent-key=${certs.key}`,
      '--agent-id=bench-node',
      '--agent-identifiers=host=bench-node',
      `--health-server-port=${await freePort()}`,
      `--admin-server-port=${await freePort()}`,
    ]);
    procs.push(agent);
    await waitUntil(
      'agent connected to the controller',
      async () =>
        (await gauges(`http://127.0.0.1:${ports.admin}/metrics`, [
          'konnectivity_network_proxy_server_ready_backend_connections',
        ])) === 1,
      60_000,
      () => agent.output(),
      [ctl, agent],
    );
    await sleep(15_000); // let start-up garbage settle
    return { readySeconds, rssMiB: rssKiB(ctl.pid) / 1024, anonMiB: rssSplitKiB(ctl.pid).anon / 1024 };
  } finally {
    for (const p of procs.reverse()) await p.stop();
  }
}

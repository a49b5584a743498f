// The whole loop: two isolated workers join with tokens, run pods, and logs / exec /
// port-forward / attach reach them only through the konnectivity tunnel.
import { waitFor } from '../../wait.ts';
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { test, type TestContext } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { decodeToken } from '../../../src/join/token.ts';
import { controllerReady, labController, nodeReady as isNodeReady, track } from '../lab/cluster.ts';
import { type LabHost } from '../lab/lab.ts';
import { startLab } from '../lab/lab-test.ts';
import { BUSYBOX_IMAGE } from '../../../src/payload/images.ts';
import { CONTAINERD_GC_PERCENT, shimPids } from '../../../src/worker/containerd.ts';
import { workerPaths } from '../../../src/worker/paths.ts';

/** The GOGC= entry of a process's environment, if it has one. */
const gogc = async (pid: number) =>
  (await readFile(`/proc/${pid}/environ`, 'utf8')).split('\0').find((e) => e.startsWith('GOGC='));

/** What a worker host looks like, for "reset leaves it as it was". */
async function hostState(h: LabHost, dataDir: string): Promise<string> {
  const links = String((await h.run('ip', ['-o', 'link', 'show'])).stdout)
    .split('\n')
    .map((l) =>
      l
        .replace(/^\d+: /, '')
        .split(/[:@]/)[0]!
        .trim(),
    )
    .sort();
  const routes = String((await h.run('ip', ['route', 'show'])).stdout)
    .split('\n')
    .sort();
  // Rules only: an empty table that got loaded (*nat, *mangle) is no change kctl can undo.
  const ipt = String((await h.run('iptables-save', [])).stdout)
    .split('\n')
    .filter((l) => l.startsWith('-A ') || l.startsWith('-N '))
    .sort();
  const mounts = String((await h.run('cat', ['/proc/self/mountinfo'])).stdout)
    .split('\n')
    .filter((l) => l.includes(dataDir));
  return JSON.stringify({ links, routes, ipt, mounts, dataDir: existsSync(dataDir) }, null, 1);
}

const DEPLOYMENT = (name: string) => ({
  apiVersion: 'apps/v1',
  kind: 'Deployment',
  metadata: { name },
  spec: {
    replicas: 2,
    selector: { matchLabels: { app: name } },
    template: {
      metadata: { labels: { app: name } },
      spec: {
        topologySpreadConstraints: [
          {
            maxSkew: 1,
            topologyKey: 'kubernetes.io/hostname',
            whenUnsatisfiable: 'DoNotSchedule',
            labelSelector: { matchLabels: { app: name } },
          },
        ],
        containers: [
          {
            name: 'c',
            image: BUSYBOX_IMAGE,
            imagePullPolicy: 'Never',
            command: [
              'sh',
              '-c',
              'mkdir -p /www && hostname > /www/index.html && httpd -p 8080 -h /www && echo started && while true; do echo tick; sleep 1; done',
            ],
            ports: [{ containerPort: 8080 }],
          },
        ],
      },
    },
  },
});

/** Runs as nobody on w1 and reads the files made for it: its hostname, resolv.conf and hosts, a nested volume path, its token. */
const NONROOT = {
  apiVersion: 'v1',
  kind: 'List',
  items: [
    { apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'nonroot' }, data: { key: 'value' } },
    {
      apiVersion: 'v1',
      kind: 'Pod',
      metadata: { name: 'nonroot' },
      spec: {
        nodeName: 'w1',
        restartPolicy: 'Never',
        securityContext: { runAsUser: 65534, runAsGroup: 65534 },
        volumes: [{ name: 'cfg', configMap: { name: 'nonroot', items: [{ key: 'key', path: 'nested/key' }] } }],
        containers: [
          {
            name: 'c',
            image: BUSYBOX_IMAGE,
            imagePullPolicy: 'Never',
            command: [
              'sh',
              '-c',
              'cat /etc/hostname /etc/resolv.conf /etc/hosts /cfg/nested/key /var/run/secrets/kubernetes.io/serviceaccount/token >/dev/null && echo nonroot-ok',
            ],
            volumeMounts: [{ name: 'cfg', mountPath: '/cfg' }],
          },
        ],
      },
    },
  ],
};

test('two isolated workers join, run pods, and are reachable only through the tunnel', async (t: TestContext) => {
  const { lab, dir, kctlBin } = await startLab(t, 'wk', ['ctl', 'w1', 'w2'], {
    dir: 'kctl-worker-',
    workers: ['w1', 'w2'],
  });
  const [ctl, w1, w2] = ['ctl', 'w1', 'w2'].map((n) => lab.host(n)) as [LabHost, LabHost, LabHost];
  const c = await labController(kctlBin, ctl, dir);
  const cData = c.dataDir;
  const controller = track(ctl.spawn(kctlBin, c.args));
  // Everything that talks to the API runs on the controller host: lab addresses exist only in the lab.
  const kubectl = c.kubectl;
  await controllerReady(controller);

  const token = await c.createToken('1h');

  // Bad tokens: each refused with one line, nothing written on the worker.
  const refused = async (badToken: string, expect: RegExp) => {
    const d = join(dir, `bad-${Math.random().toString(36).slice(2)}`);
    const r = await w1.run(kctlBin, [
      'worker',
      '--token',
      badToken,
      '--data-dir',
      d,
      '--run-dir',
      `${d}-run`,
      '--node-name',
      'bad',
    ]);
    assert.notEqual(r.exitCode, 0);
    const lines = String(r.stderr).trim().split('\n');
    assert.equal(lines.length, 1, String(r.stderr));
    assert.match(lines[0]!, expect);
    assert.equal(existsSync(d), false, 'a refused token wrote into the data dir');
    assert.equal(existsSync(`${d}-run`), false, 'a refused token wrote into the run dir');
  };
  await refused('not-a-token', /join token is malformed/);
  await refused(
    token.slice(0, 60) + (token[60] === 'a' ? 'b' : 'a') + token.slice(61),
    /join token is malformed|rejected the join token|not signed by the CA/,
  );
  const expired = await c.createToken('1s');
  await sleep(2500);
  await refused(expired, /rejected the join token \(expired, invalidated or never issued\)/);
  const revoked = await c.createToken();
  const [revokedId, revokedSecret] = decodeToken(revoked).bootstrapToken.split('.') as [string, string];
  const list = await ctl.run(kctlBin, ['--data-dir', cData, 'token', 'list', '-o', 'json']);
  assert.ok((JSON.parse(String(list.stdout)) as { id: string }[]).some((x) => x.id === revokedId));
  assert.ok(!String(list.stdout).includes(revokedSecret), 'token list must not print secrets');
  const listed = await ctl.run(kctlBin, ['--data-dir', cData, 'token', 'list']);
  assert.match(String(listed.stdout), /^ID\s+ROLE\s+EXPIRES/);

  // Workers: isolated from the controller host, dialing out only.
  await lab.isolate(w1, ctl);
  await lab.isolate(w2, ctl);
  const before = { w2: await hostState(w2, join(dir, 'w2-data')) };
  const startWorker = (h: LabHost, joinToken?: string) => {
    const p = track(
      h.spawn(kctlBin, [
        'worker',
        ...(joinToken ? ['--token', joinToken] : []),
        '--data-dir',
        join(dir, `${h.name}-data`),
        '--run-dir',
        join(dir, `${h.name}-run`),
        '--node-name',
        h.name,
        '--node-ip',
        h.ip,
        '--labels',
        `kctl.dev/lab=${lab.name}`,
      ]),
    );
    return p;
  };
  let p1 = startWorker(w1, token);
  const p2 = startWorker(w2, token);
  const nodeReady = (n: string) => isNodeReady(kubectl, n);
  await waitFor('both nodes Ready', 300_000, async () => (await nodeReady('w1')) && (await nodeReady('w2')), {
    log: () => `w1:\n${p1.log()}\nw2:\n${p2.log()}`,
    stopIf: () => (p1.child.exitCode !== null || p2.child.exitCode !== null) && 'a worker exited',
  });

  // The join token given with --token is gone from the worker's command line (ps, /proc/<pid>/cmdline),
  // and nothing else is; kctl runs with umask 0077, containerd and kubelet with 0022 (containers read what they write);
  // containerd and its shims collect garbage at CONTAINERD_GC_PERCENT, kubelet at Go's default.
  for (const [p, h] of [
    [p1, w1],
    [p2, w2],
  ] as const) {
    const pid = p.child.pid!;
    const cmdline = await readFile(`/proc/${pid}/cmdline`, 'utf8');
    assert.ok(!cmdline.includes(token), `the join token is in the worker's command line: ${cmdline}`);
    assert.match(
      cmdline,
      new RegExp(`^${kctlBin} worker --token \\*\\*\\* --data-dir ${join(dir, `${h.name}-data`)} `),
    );
    // The thread name every kctl has (ps -o comm, pgrep), not the title's first bytes.
    assert.equal(
      await readFile(`/proc/${pid}/comm`, 'utf8'),
      await readFile(`/proc/${controller.child.pid}/comm`, 'utf8'),
    );
    const umask = async (of: number) => /^Umask:\s+(\d+)$/m.exec(await readFile(`/proc/${of}/status`, 'utf8'))?.[1];
    const runPid = async (child: string) => Number(await readFile(join(dir, `${h.name}-run`, `${child}.pid`), 'utf8'));
    assert.equal(await umask(pid), '0077');
    for (const child of ['containerd', 'kubelet']) assert.equal(await umask(await runPid(child)), '0022', child);
    assert.equal(await gogc(await runPid('containerd')), `GOGC=${CONTAINERD_GC_PERCENT}`);
    assert.equal(await gogc(await runPid('kubelet')), undefined);
  }

  // The invalidated token is refused now (tokens are checked at join, not afterwards).
  assert.equal((await ctl.run(kctlBin, ['--data-dir', cData, 'token', 'invalidate', revokedId])).exitCode, 0);
  await refused(revoked, /rejected the join token/);

  // A 2-replica busybox Deployment spreads over both workers; a pod as nobody reads what kubelet and containerd wrote for it.
  assert.equal((await kubectl(['apply', '-f', '-'], JSON.stringify(DEPLOYMENT('bb')))).exitCode, 0);
  assert.equal((await kubectl(['apply', '-f', '-'], JSON.stringify(NONROOT))).exitCode, 0);
  type Pod = {
    metadata: { name: string; uid: string };
    spec: { nodeName: string };
    status: { phase: string; podIP: string; containerStatuses?: { restartCount: number; containerID: string }[] };
  };
  const pods = async () =>
    (JSON.parse(String((await kubectl(['get', 'pods', '-l', 'app=bb', '-o', 'json'])).stdout)) as { items: Pod[] })
      .items;
  await waitFor(
    '2 pods running on both nodes',
    180_000,
    async () => {
      const p = await pods();
      return (
        p.length === 2 &&
        p.every((x) => x.status.phase === 'Running') &&
        new Set(p.map((x) => x.spec.nodeName)).size === 2
      );
    },
    () => String(controller.log()),
  );
  for (const h of [w1, w2]) {
    const shims = await shimPids(workerPaths(join(dir, `${h.name}-data`), join(dir, `${h.name}-run`)));
    assert.ok(shims.length > 0, `no containerd shim on ${h.name}`);
    for (const shim of shims) assert.equal(await gogc(shim), `GOGC=${CONTAINERD_GC_PERCENT}`, `shim ${shim}`);
  }
  let phase = '';
  await waitFor('the pod running as nobody to finish', 60_000, async () => {
    phase = (
      JSON.parse(String((await kubectl(['get', 'pod', 'nonroot', '-o', 'json'])).stdout)) as {
        status: { phase: string };
      }
    ).status.phase;
    return phase === 'Succeeded' || phase === 'Failed';
  }).catch(() => undefined);
  if (phase !== 'Succeeded') {
    const why = await Promise.all([kubectl(['describe', 'pod', 'nonroot']), kubectl(['logs', 'nonroot'])]);
    assert.fail(
      `the pod running as nobody is ${phase}:\n${why.map((r) => `${String(r.stdout)}${String(r.stderr)}`).join('\n')}`,
    );
  }
  assert.match(String((await kubectl(['logs', 'nonroot'])).stdout), /^nonroot-ok$/m);
  const running = await pods();
  const podOn = (n: string) => running.find((x) => x.spec.nodeName === n)!;
  const a = podOn('w1');
  const b = podOn('w2');

  // The controller host cannot reach a kubelet directly ...
  assert.equal(await lab.canConnect(ctl, w1, 10250), false, "the controller host reached w1's kubelet directly");
  // ... yet logs, exec (with stdin), port-forward and attach work: through the tunnel.
  await waitFor('logs', 30_000, async () =>
    String((await kubectl(['logs', a.metadata.name])).stdout).includes('started'),
  );
  const exec = await kubectl(
    ['exec', '-i', a.metadata.name, '--', 'sh', '-c', 'cat; echo " from $(hostname)"'],
    'stdin reached the pod',
  );
  assert.equal(exec.exitCode, 0, String(exec.stderr));
  assert.equal(String(exec.stdout).trim(), `stdin reached the pod from ${a.metadata.name}`);
  const pf = track(
    ctl.spawn(kctlBin, ['--data-dir', cData, 'kubectl', 'port-forward', `pod/${b.metadata.name}`, '18080:8080']),
  );
  await waitFor(
    'port-forward',
    30_000,
    async () => {
      const r = await ctl.run('/bin/busybox', ['wget', '-qO-', 'http://127.0.0.1:18080/'], { timeout: 5000 });
      return String(r.stdout).trim() === b.metadata.name;
    },
    pf.log,
  );
  pf.child.kill('SIGTERM');
  const attach = await ctl.run(
    'timeout',
    ['8', kctlBin, '--data-dir', cData, 'kubectl', 'attach', a.metadata.name, '-c', 'c'],
    { timeout: 20_000 },
  );
  assert.match(String(attach.stdout), /tick/, String(attach.stderr));

  // Pod to pod across workers.
  const p2p = await kubectl([
    'exec',
    a.metadata.name,
    '--',
    'timeout',
    '10',
    'wget',
    '-qO-',
    `http://${b.status.podIP}:8080/`,
  ]);
  assert.equal(String(p2p.stdout).trim(), b.metadata.name, String(p2p.stderr));
  // ... keeping the source pod IP: b's web server (a CGI printing REMOTE_ADDR) sees a's pod IP.
  const cgi = await kubectl([
    'exec',
    b.metadata.name,
    '--',
    'sh',
    '-c',
    'mkdir -p /www/cgi-bin && printf "#!/bin/sh\\necho Content-Type: text/plain\\necho\\necho \\$REMOTE_ADDR\\n" > /www/cgi-bin/ip && chmod +x /www/cgi-bin/ip',
  ]);
  assert.equal(cgi.exitCode, 0, String(cgi.stderr));
  const seen = await kubectl([
    'exec',
    a.metadata.name,
    '--',
    'timeout',
    '10',
    'wget',
    '-qO-',
    `http://${b.status.podIP}:8080/cgi-bin/ip`,
  ]);
  // busybox httpd listens on IPv6 too, so it writes IPv4 peers mapped: [::ffff:10.244.1.2].
  const peer = String(seen.stdout)
    .trim()
    .replace(/^\[::ffff:(.*)\]$/, '$1');
  assert.equal(
    peer,
    a.status.podIP,
    `pod-to-pod traffic was masqueraded: ${String(seen.stdout)} ${String(seen.stderr)}`,
  );
  // Traffic leaving the cluster CIDR is masqueraded (the controller host has no route to pods): the API server answers.
  const out = await kubectl(['exec', a.metadata.name, '--', 'timeout', '10', 'wget', '-qO-', `http://${ctl.ip}:6443/`]);
  assert.match(
    String(out.stderr),
    /400 Bad Request/,
    `a pod could not reach the controller host: ${String(out.stderr)}`,
  );

  // Restarting a worker's kctl keeps its pods running and the node Ready.
  p1.child.kill('SIGTERM');
  assert.equal(await p1.exited, 0);
  p1 = startWorker(w1);
  await waitFor('w1 worker back', 180_000, async () => p1.saw('"msg":"worker ready"'), p1.log);
  await waitFor('w1 Ready again', 120_000, () => nodeReady('w1'));
  const after = (await pods()).find((x) => x.metadata.uid === a.metadata.uid);
  assert.ok(after, 'the pod on w1 was replaced');
  assert.equal(after.status.phase, 'Running');
  assert.equal(
    after.status.containerStatuses?.[0]?.containerID,
    a.status.containerStatuses?.[0]?.containerID,
    'the container was restarted',
  );
  assert.equal(after.status.containerStatuses?.[0]?.restartCount, 0);

  // kctl reset refuses while the worker runs (also with another --run-dir: the data dir records
  // who runs on it), naming it; the node keeps working. Stopped, reset leaves w2 as it was.
  for (const runDir of [join(dir, 'w2-run'), join(dir, 'w2-other-run')]) {
    const refusedReset = await w2.run(kctlBin, ['reset', '--data-dir', join(dir, 'w2-data'), '--run-dir', runDir]);
    assert.notEqual(refusedReset.exitCode, 0);
    assert.equal(
      String(refusedReset.stderr),
      `kctl: a kctl worker (pid ${p2.child.pid}) is running on ${join(dir, 'w2-data')}; stop it first (kill -TERM ${p2.child.pid}), then run kctl reset`,
    );
  }
  assert.equal(p2.child.exitCode, null, 'the worker exited');
  assert.ok(existsSync(join(dir, 'w2-data', 'worker.json')));
  assert.equal(await nodeReady('w2'), true);
  const stillServing = await kubectl([
    'exec',
    a.metadata.name,
    '--',
    'timeout',
    '10',
    'wget',
    '-qO-',
    `http://${b.status.podIP}:8080/`,
  ]);
  assert.equal(String(stillServing.stdout).trim(), b.metadata.name, String(stillServing.stderr));
  const logsAfter = await kubectl(['logs', '--tail', '1', b.metadata.name]);
  assert.match(String(logsAfter.stdout), /tick|started/, String(logsAfter.stderr));
  p2.child.kill('SIGTERM');
  assert.equal(await p2.exited, 0);
  const reset = await w2.run(kctlBin, ['reset', '--data-dir', join(dir, 'w2-data'), '--run-dir', join(dir, 'w2-run')]);
  assert.equal(reset.exitCode, 0, String(reset.stderr));
  assert.match(String(reset.stdout), /"msg":"resetting the worker in /);
  assert.ok(
    String(reset.stdout).includes(`"msg":"removed ${join(dir, 'w2-data', 'kubelet')}"`),
    'reset did not list what it removed',
  );
  assert.equal(await hostState(w2, join(dir, 'w2-data')), before.w2);
  assert.equal(existsSync(join(dir, 'w2-run')), false, 'reset left the run dir kctl made');
  const leftovers = String((await ctl.run('pgrep', ['-f', join(dir, 'w2-')])).stdout).trim();
  assert.equal(leftovers, '', 'processes of the reset worker are still running');

  // The reset host joins again. The token it joined with first cannot take the name w2 any more:
  // the Node is registered, and the join is denied with the reason (kubelet logs it). A token made
  // for that name, for one join, can; it is gone after that join.
  const refusedJoin = startWorker(w2, token);
  await waitFor(
    'the join as w2 denied',
    120_000,
    async () => refusedJoin.saw('node w2 is already registered'),
    refusedJoin.log,
  );
  refusedJoin.child.kill('SIGTERM');
  await refusedJoin.exited;
  assert.equal(
    (await w2.run(kctlBin, ['reset', '--data-dir', join(dir, 'w2-data'), '--run-dir', join(dir, 'w2-run')])).exitCode,
    0,
  );
  const made = await ctl.run(kctlBin, [
    '--data-dir',
    cData,
    'token',
    'create',
    '--role',
    'worker',
    '--node-name',
    'w2',
    '--uses',
    '1',
  ]);
  assert.equal(made.exitCode, 0, String(made.stderr));
  const rejoinToken = String(made.stdout).trim();
  const rejoinId = decodeToken(rejoinToken).bootstrapToken.split('.')[0]!;
  const bound = JSON.parse(
    String((await ctl.run(kctlBin, ['--data-dir', cData, 'token', 'list', '-o', 'json'])).stdout),
  ) as {
    id: string;
    nodeName?: string;
    usesLeft: number | null;
  }[];
  assert.deepEqual(
    bound.filter((x) => x.id === rejoinId).map((x) => [x.nodeName, x.usesLeft]),
    [['w2', 1]],
  );
  const rejoined = startWorker(w2, rejoinToken);
  await waitFor('w2 Ready after re-joining', 300_000, () => nodeReady('w2'), rejoined.log);
  await waitFor('the single-use token gone', 30_000, async () => {
    const l = JSON.parse(
      String((await ctl.run(kctlBin, ['--data-dir', cData, 'token', 'list', '-o', 'json'])).stdout),
    ) as { id: string }[];
    return !l.some((x) => x.id === rejoinId);
  });
  assert.ok(controller.saw(`token ${rejoinId} is used up and was deleted`));
  rejoined.child.kill('SIGTERM');
  assert.equal(await rejoined.exited, 0);
});

// Controllers as lab hosts, for the HA tests (etcd and kine): start and stop them, join by token,
// read their status, and wait until every worker agent holds a stream to every live controller.
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { CONTROLLER_TOKEN_TYPE, controllerTokenSecretName } from '../../../src/controller/join/controller-tokens.ts';
import type { ControllerStatusReport } from '../../../src/controller/leases/status.ts';
import type { TokenSummary } from '../../../src/controller/join/tokens.ts';
import { decodeToken } from '../../../src/join/token.ts';
import { controllerLeaseName } from '../../../src/kube/controller-leases.ts';
import { killControllerProcesses, track, type Tracked } from './cluster.ts';
import { hostStateArgs } from './kctl.ts';
import type { LabHost } from './lab.ts';
import { waitFor } from '../../wait.ts';
import { BUSYBOX_IMAGE } from '../../../src/payload/images.ts';

export interface LabCtl {
  host: LabHost;
  dataDir: string;
  runDir: string;
  config: string;
  /** A named control plane on the host (--name): its dirs are under dataDir/tenants and runDir/tenants. */
  tenant?: string;
  /** The host's own state dir (--host-state-dir): lab hosts share one file system, real hosts do not (front doors register there). */
  hostState?: string;
  proc?: Tracked;
}

/** kctl's global flags that address controller `c`. */
const root = (c: LabCtl): string[] => [
  '--data-dir',
  c.dataDir,
  '--run-dir',
  c.runDir,
  ...(c.hostState ? ['--host-state-dir', c.hostState] : c.tenant ? hostStateArgs() : []),
  ...(c.tenant ? ['--name', c.tenant] : []),
];

/** Where `c` keeps its state: its data dir, or its tenant's under it. */
const stateDir = (c: LabCtl): string => (c.tenant ? join(c.dataDir, 'tenants', c.tenant) : c.dataDir);

export class HaLab {
  constructor(
    readonly kctlBin: string,
    readonly dir: string,
  ) {}

  /** A controller on `host` with data and run dirs under the lab dir (named `name`) and `spec` (YAML) as its config's spec. */
  async controller(host: LabHost, spec: string, name = host.name, tenant?: string): Promise<LabCtl> {
    const config = join(this.dir, `${name}.yaml`);
    await writeFile(config, `spec:\n${spec}`);
    return { host, dataDir: join(this.dir, `${name}-data`), runDir: join(this.dir, `${name}-run`), config, tenant };
  }

  run(c: LabCtl, args: string[], input?: string) {
    return c.host.run(this.kctlBin, [...root(c), ...args], { input, timeout: 120_000 });
  }

  kubectl(c: LabCtl, args: string[], input?: string) {
    return this.run(c, ['kubectl', ...args], input);
  }

  /** `kctl controller` on its host (joining with `tokenFile`), resolved once it logs ready. */
  async start(c: LabCtl, tokenFile?: string): Promise<void> {
    const args = [...root(c), 'controller', '--config', c.config];
    const proc = track(c.host.spawn(this.kctlBin, [...args, ...(tokenFile ? ['--token-file', tokenFile] : [])]));
    c.proc = proc;
    const outcome = await waitFor(
      `${c.host.name} ready`,
      240_000,
      async () => (proc.child.exitCode !== null ? 'exited' : proc.saw('"msg":"controller ready"') && 'ready'),
      proc.log,
    );
    if (outcome === 'exited') throw new Error(`${c.host.name} exited before it was ready:\n${proc.log()}`);
  }

  /** `kctl secrets rotate-key -o json` on `c` (minutes: every step waits for kube-apiserver's reload): its result and progress lines. */
  async rotateKey(c: LabCtl): Promise<{ key: string; controllers: string[]; progress: string }> {
    const r = await c.host.run(this.kctlBin, [...root(c), 'secrets', 'rotate-key', '-o', 'json'], {
      timeout: 900_000,
    });
    assert.equal(r.exitCode, 0, String(r.stderr));
    return { ...(JSON.parse(String(r.stdout)) as { key: string; controllers: string[] }), progress: String(r.stderr) };
  }

  /** `kctl pki rotate-ca -o json` on `c`: its result and progress lines. */
  async rotateCa(
    c: LabCtl,
  ): Promise<{ oldCa: string; newCa: string; controllers: string[]; nodes: string[]; progress: string }> {
    const r = await c.host.run(this.kctlBin, [...root(c), 'pki', 'rotate-ca', '--timeout', '5m', '-o', 'json'], {
      timeout: 1_200_000,
    });
    assert.equal(r.exitCode, 0, String(r.stderr));
    return {
      ...(JSON.parse(String(r.stdout)) as { oldCa: string; newCa: string; controllers: string[]; nodes: string[] }),
      progress: String(r.stderr),
    };
  }

  async stop(c: LabCtl): Promise<void> {
    c.proc!.child.kill('SIGTERM');
    assert.equal(await c.proc!.exited, 0, c.proc!.log());
  }

  async status(c: LabCtl): Promise<ControllerStatusReport> {
    const r = await this.run(c, ['status', '-o', 'json']);
    assert.equal(r.exitCode, 0, String(r.stderr));
    return JSON.parse(String(r.stdout)) as ControllerStatusReport;
  }

  async tokenFile(name: string, text: string): Promise<string> {
    const f = join(this.dir, name);
    await writeFile(f, text, { mode: 0o600 });
    return f;
  }

  /**
   * What `kctl token list` on `c` says of controller token `token`, after checking that the cluster
   * keeps only the SHA-256 of its secret: no Secret in kube-system holds the secret itself.
   */
  async storedControllerToken(c: LabCtl, token: string): Promise<TokenSummary | undefined> {
    const [id, secret] = decodeToken(token).bootstrapToken.split('.') as [string, string];
    const r = await this.kubectl(c, ['get', 'secrets', '-n', 'kube-system', '-o', 'json']);
    assert.equal(r.exitCode, 0, String(r.stderr));
    const all = String(r.stdout);
    for (const plain of [
      secret,
      Buffer.from(secret).toString('base64'),
      Buffer.from(`${id}.${secret}`).toString('base64'),
    ])
      assert.ok(!all.includes(plain), `a Secret in kube-system holds the secret of controller token ${id}`);
    const items = (
      JSON.parse(all) as { items: { type: string; metadata: { name: string }; data?: Record<string, string> }[] }
    ).items;
    const stored = items.find((s) => s.metadata.name === controllerTokenSecretName(id));
    if (stored) {
      assert.equal(stored.type, CONTROLLER_TOKEN_TYPE);
      assert.equal(
        Buffer.from(stored.data?.['secret-sha256'] ?? '', 'base64').toString(),
        createHash('sha256').update(secret).digest('hex'),
      );
    }
    assert.ok(
      !items.some((s) => s.metadata.name === `bootstrap-token-${id}`),
      `controller token ${id} is a bootstrap token`,
    );
    const list = await this.run(c, ['token', 'list', '-o', 'json']);
    assert.equal(list.exitCode, 0, String(list.stderr));
    assert.ok(!String(list.stdout).includes(secret), 'token list printed a secret');
    return (JSON.parse(String(list.stdout)) as TokenSummary[]).find((x) => x.id === id);
  }

  /** A join that must fail with one line matching `expect` and leave the data dir unwritten. */
  async refused(c: LabCtl, tokenFile: string, expect: RegExp): Promise<void> {
    const r = await c.host.run(
      this.kctlBin,
      [...root(c), 'controller', '--config', c.config, '--token-file', tokenFile],
      { timeout: 120_000 },
    );
    assert.notEqual(r.exitCode, 0, `${c.host.name} joined with ${tokenFile}`);
    const lines = String(r.stderr).trim().split('\n');
    assert.equal(lines.length, 1, String(r.stderr));
    assert.match(lines[0]!, expect);
    assert.equal(existsSync(stateDir(c)), false, `a refused join wrote ${stateDir(c)}`);
  }

  /**
   * Waits until every controller in `list` sees exactly `list` alive, announces that many servers,
   * holds every one of `agents`, and its status says (from the leases) that each agent is on all of them.
   */
  agentsFollow(list: LabCtl[], agents: string[], timeoutMs = 60_000): Promise<true> {
    const names = list.map((c) => controllerLeaseName(c.host.ip)).sort();
    return waitFor(
      `agents ${agents.join(', ')} on ${list.map((c) => c.host.name).join(', ')} (server count ${list.length})`,
      timeoutMs,
      async () => {
        for (const c of list) {
          const s = await this.status(c);
          const held = (s.konnectivity?.agents ?? []).map((a) => a.id);
          if (
            s.konnectivity?.serverCount !== list.length ||
            (s.controllers ?? []).map((x) => x.name).join() !== names.join()
          )
            return false;
          // A node's agent is known by its certificate's user, whatever agentid it sends.
          const ids = agents.map((a) => `system:node:${a}`);
          if (!ids.every((a) => held.includes(a))) return false;
          for (const a of ids)
            if (s.agentServers?.find((x) => x.agent === a)?.servers.join() !== names.join()) return false;
        }
        return true;
      },
    );
  }

  /** Polls `kubectl exec POD -- echo survived` through `c` until it works; when it first did (ms since the epoch). */
  firstExec(c: LabCtl, pod: string, o: { timeoutMs?: number; intervalMs?: number } = {}): Promise<number> {
    return waitFor(
      `exec in ${pod} through ${c.host.name}`,
      o.timeoutMs ?? 30_000,
      async () =>
        String((await this.kubectl(c, ['exec', pod, '--', 'echo', 'survived'])).stdout).trim() === 'survived'
          ? Date.now()
          : undefined,
      { intervalMs: o.intervalMs },
    );
  }

  /**
   * Controller `lost` loses every process at once (its host gone); then exec in `pod` is polled
   * through `via` until it works. When it was killed, and how many seconds later exec worked.
   */
  async loseController(
    lost: LabCtl,
    via: LabCtl,
    pod: string,
    o: { intervalMs?: number } = {},
  ): Promise<{ killedAt: number; execAfterS: number }> {
    const killedAt = Date.now();
    killControllerProcesses(await this.status(lost));
    await lost.proc!.exited;
    const execOk = await this.firstExec(via, pod, o);
    return { killedAt, execAfterS: (execOk - killedAt) / 1000 };
  }

  /** `kubectl run NAME` through `c` (bundled busybox, never pulled), resolved once it runs on a node whose name matches `node`. */
  async runNewPod(c: LabCtl, name: string, node: RegExp): Promise<void> {
    await this.kubectl(c, [
      'run',
      name,
      `--image=${BUSYBOX_IMAGE}`,
      '--image-pull-policy=Never',
      '--restart=Never',
      '--',
      'sleep',
      '3600',
    ]);
    await waitFor(`pod ${name} scheduled and running`, 90_000, async () => {
      const [on, phase] = String(
        (await this.kubectl(c, ['get', 'pod', name, '-o', 'jsonpath={.spec.nodeName} {.status.phase}'])).stdout,
      ).split(' ');
      return phase === 'Running' && node.test(on ?? '');
    });
  }

  /** `kubectl port-forward` on controller `c` to `pod`:`port`; resolves with what GET / answered through it. */
  async portForward(c: LabCtl, pod: string, port: number): Promise<string> {
    const pf = track(c.host.spawn(this.kctlBin, [...root(c), 'kubectl', 'port-forward', `pod/${pod}`, `:${port}`]));
    try {
      const local = await waitFor(
        `port-forward to ${pod} through ${c.host.name}`,
        30_000,
        async () => /127\.0\.0\.1:(\d+) ->/.exec(pf.log())?.[1],
        pf.log,
      );
      return await waitFor(
        `GET / through port-forward on ${c.host.name}`,
        20_000,
        async () =>
          String(
            (await c.host.run('/bin/busybox', ['wget', '-qO-', `http://127.0.0.1:${local}/`], { timeout: 10_000 }))
              .stdout,
          ).trim(),
        pf.log,
      );
    } finally {
      pf.child.kill('SIGTERM');
    }
  }
}

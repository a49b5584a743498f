// Staging in a short-lived child kctl. Decompressing and hashing ~700 MB grows glibc's heap
// (the decompressor's window, stream buffers) and glibc keeps what was freed: a worker that staged
// in its own process idled at ~175 MiB RSS for the rest of its life. The child's heap goes away
// when it exits, so the long-lived worker and controller never hold it. The child reports its
// log lines and its result over the IPC channel; the parent logs them as its own.
import { spawn } from 'node:child_process';
import { basename, join } from 'node:path';
import { isSea } from 'node:sea';
import { pino } from 'pino';
import { kctlExecutable } from '../base/executable.ts';
import { KCTL_VERSION } from '../base/version.ts';
import type { Logger } from '../base/log.ts';
import type { Role } from './manifest.ts';
import { findPayload } from './payload.ts';
import {
  PayloadChecksumError,
  alreadyStaged,
  stageComponents,
  stageImages,
  workerImages,
  type StageResult,
} from './stage.ts';
import { STAGE_COMMAND } from './stage-command.ts';
import { currentStage, pruneStages, stageId, turnCurrent } from './versions.ts';
import type { Payload } from './payload.ts';
import { messageOf } from '../base/errors.ts';

export type StageJob =
  { kind: 'components'; roles: Role[]; dir: string; seed?: string } | { kind: 'images'; dir: string };

type ChildMessage = { log: Record<string, unknown> } | { result: StageResult } | { error: string; checksum: boolean };

/** How to start this kctl again: the executable itself, or node running this checkout's CLI. */
function selfInvocation(): { file: string; args: string[] } | null {
  // The launcher, not the unpacked runtime: it unpacks the runtime again if it went away meanwhile.
  if (isSea()) return { file: kctlExecutable() ?? process.execPath, args: [] };
  const script = process.argv[1] ?? '';
  if (/[/\\]src[/\\]cli[/\\]index\.ts$/.test(script))
    return { file: process.execPath, args: [...process.execArgv, script] };
  return null; // a library caller (unit tests): no kctl entry point to start
}

async function runJob(job: StageJob, log: Logger, payload?: Payload): Promise<StageResult> {
  payload ??= await findPayload(KCTL_VERSION);
  return job.kind === 'components'
    ? stageComponents(payload, job.dir, job.roles, log, job.seed)
    : stageImages(payload, job.dir, log);
}

const LEVELS: Record<number, 'debug' | 'info' | 'warn' | 'error'> = {
  20: 'debug',
  30: 'info',
  40: 'warn',
  50: 'error',
  60: 'error',
};

function relog(log: Logger, line: Record<string, unknown>): void {
  const { level, msg, time: _time, component: _component, pid: _pid, hostname: _hostname, ...fields } = line;
  log[LEVELS[Number(level)] ?? 'info'](fields, String(msg ?? ''));
}

/**
 * Stages in a child kctl when there is work to do and a kctl to start; in this process when every
 * file is stamped as unchanged (a restart, or one of many tenants sharing the bin dir: no hashing,
 * and no child to start).
 */
export async function stage(job: StageJob, log: Logger): Promise<StageResult> {
  const payload = await findPayload(KCTL_VERSION);
  const entries = job.kind === 'components' ? payload.forRoles(job.roles) : workerImages(payload);
  const self = selfInvocation();
  if (!self || (await alreadyStaged(entries, job.dir))) return runJob(job, log, payload);
  const child = spawn(self.file, [...self.args, STAGE_COMMAND, JSON.stringify(job)], {
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    env: { ...process.env, KCTL_LOG_LEVEL: log.level },
  });
  let outcome: ChildMessage | undefined;
  child.on('message', (m: ChildMessage) => {
    if ('log' in m) relog(log, m.log);
    else outcome = m;
  });
  const code = await new Promise<number | null>((resolve, reject) => {
    child.once('error', reject);
    child.once('exit', (c, signal) => resolve(signal ? null : c));
  });
  if (outcome && 'result' in outcome) return outcome.result;
  if (outcome && 'error' in outcome)
    throw outcome.checksum ? new PayloadChecksumError(outcome.error) : new Error(outcome.error);
  throw new Error(
    `staging stopped before it finished (child kctl exit ${code ?? 'by signal'}); see the lines above and start again`,
  );
}

/** The child's side: run one job, send every log line and the outcome to the parent, exit. */
export async function runStageChild(jobJson: string): Promise<void> {
  const send = process.send?.bind(process);
  if (!send)
    throw new Error(
      `kctl ${STAGE_COMMAND} is run by kctl itself while it stages; run kctl controller or kctl worker instead`,
    );
  // When the kctl that started this child stopped (killed, or its command timed out), nobody waits
  // for the messages: staging still finishes (each file is written under a temporary name and
  // renamed), so the next start finds it done.
  const post = (m: ChildMessage) =>
    new Promise<void>((resolve) => (process.connected ? send(m, undefined, undefined, () => resolve()) : resolve()));
  const pending: Promise<void>[] = [];
  const destination = {
    write: (line: string) => void pending.push(post({ log: JSON.parse(line) as Record<string, unknown> })),
  };
  const log = pino({ level: process.env.KCTL_LOG_LEVEL ?? 'info', base: {} }, destination);
  try {
    const result = await runJob(JSON.parse(jobJson) as StageJob, log);
    await Promise.all(pending);
    await post({ result });
  } catch (err) {
    await Promise.all(pending);
    await post({ error: messageOf(err), checksum: err instanceof PayloadChecksumError });
  }
  if (process.connected) process.disconnect?.();
}

/** This kctl's components for a role, staged in their own directory under the bin root, linked where they equal the current version's. */
async function stageInto(root: string, roles: Role[], log: Logger): Promise<{ dir: string; current?: string }> {
  const dir = join(root, stageId(await findPayload(KCTL_VERSION)));
  const current = await currentStage(root);
  const seed = current ? join(root, current) : root; // the older layout's files lie in the root
  await stage({ kind: 'components', roles, dir, seed }, log);
  return { dir, current };
}

/**
 * This kctl's components (see versions.ts), for commands that need one (kubectl, etcdctl) beside
 * whatever kctl runs the host: `current` is turned to them only when there is none (a host where
 * no controller or worker ran).
 */
export async function stageOwn(root: string, roles: Role[], log: Logger): Promise<string> {
  const { dir, current } = await stageInto(root, roles, log);
  if (!current) await turnCurrent(root, basename(dir));
  return dir;
}

/**
 * A starting controller's or worker's components: staged, then `current` turned to them. The
 * version it named before stays as `previous` until the upgrade is done (a rollback stages
 * nothing); versions older than that go.
 */
export async function stageForStart(root: string, roles: Role[], log: Logger): Promise<void> {
  const id = basename((await stageInto(root, roles, log)).dir);
  const previous = await turnCurrent(root, id);
  if (previous !== undefined)
    log.info(
      { version: id, previous },
      "this kctl's components are now the current ones; the previous stay until the upgrade is done",
    );
  await pruneStages(root, log);
}

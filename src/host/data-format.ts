// The format of what kctl keeps in a data dir, recorded in <data-dir>/kctl-data.json as
// { "format": N, "writtenBy": "<kctl version>" }. A kctl reads every format up to its own: at
// start it runs each step from the recorded format to its own, in order, and records the new
// format. A data dir recorded by a newer format is refused before anything in it is touched
// (an older kctl cannot know what the newer one changed). A step that changes a file must leave
// what the previous format reads in place until the upgrade that ran it is done, so a rollback
// to the previous executable still starts (src/kube/upgrade-plan.ts); no step changes files yet.
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { UserError } from '../base/errors.ts';
import { writeFileAtomic } from '../base/fs.ts';
import type { Logger } from '../base/log.ts';

export const DATA_FORMAT_FILE = 'kctl-data.json';

export interface DataFormatStep {
  /** The format it produces (the one before it is to - 1). */
  to: number;
  /** What it changes, for the log. */
  what: string;
  run(dataDir: string): Promise<void>;
}

/** Every step, in order: the last one's `to` is the format this kctl writes. */
export const DATA_FORMAT_STEPS: readonly DataFormatStep[] = [
  // Format 0 is a data dir from before the record existed: its files are what format 1 reads.
  { to: 1, what: 'record the data dir format', run: async () => undefined },
];

export interface DataFormat {
  format: number;
  writtenBy?: string;
}

/** The recorded format; null for a data dir with no record (new, or from before format 1). */
export async function readDataFormat(dataDir: string): Promise<DataFormat | null> {
  const file = join(dataDir, DATA_FORMAT_FILE);
  const text = await readFile(file, 'utf8').catch((err: NodeJS.ErrnoException) => {
    if (err.code === 'ENOENT') return null;
    throw new UserError(`cannot read ${file}: ${err.message}; check the data dir's permissions`);
  });
  if (text === null) return null;
  let v: Partial<DataFormat>;
  try {
    v = JSON.parse(text) as Partial<DataFormat>;
  } catch {
    v = {};
  }
  if (!Number.isInteger(v.format) || v.format! < 0)
    throw new UserError(
      `${file} is damaged (no integer "format"); restore it from a backup, or remove it if this data dir was made by kctl 0.1.0`,
    );
  return { format: v.format!, ...(typeof v.writtenBy === 'string' ? { writtenBy: v.writtenBy } : {}) };
}

/** The one-line refusal of a record newer than `steps` reach, if it is. */
function refuseNewer(
  found: DataFormat | null,
  dataDir: string,
  version: string,
  steps: readonly DataFormatStep[],
): void {
  const known = steps.at(-1)?.to ?? 0;
  if (found && found.format > known)
    throw new UserError(
      `${dataDir} was written by kctl ${found.writtenBy ?? '(unknown)'} (data format ${found.format}); this kctl ${version} reads up to format ${known}: run the newer kctl, or restore a backup made by this version`,
    );
}

/** Refuses a data dir written by a newer format than `steps` reach, with one line. Reads only. */
export async function refuseNewerDataDir(dataDir: string, version: string, steps = DATA_FORMAT_STEPS): Promise<void> {
  refuseNewer(await readDataFormat(dataDir), dataDir, version, steps);
}

/**
 * Brings a data dir to the newest format: each step past the recorded one runs, in order, and
 * the record follows each step (a step that fails leaves the record at the last finished one).
 */
export async function migrateDataDir(
  dataDir: string,
  version: string,
  log: Logger,
  steps = DATA_FORMAT_STEPS,
): Promise<DataFormat> {
  const recorded = await readDataFormat(dataDir);
  refuseNewer(recorded, dataDir, version, steps);
  const record = (format: number) =>
    writeFileAtomic(join(dataDir, DATA_FORMAT_FILE), JSON.stringify({ format, writtenBy: version }) + '\n', 0o644);
  let format = recorded?.format ?? 0;
  for (const step of steps) {
    if (step.to <= format) continue;
    await step.run(dataDir);
    format = step.to;
    await record(format);
    if (recorded) log.info({ dataDir, format }, `data dir: ${step.what} (format ${step.to - 1} -> ${step.to})`);
  }
  if (recorded && recorded.format === format && recorded.writtenBy !== version) await record(format);
  return { format, writtenBy: version };
}

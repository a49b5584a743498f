// List, then watch from the list's resourceVersion, for as long as the signal allows (client-go's
// reflector, small): a watch the server ends is reopened from the last resourceVersion seen
// (bookmarks included); 410 Expired or an ERROR event means list again; other failures back off.
import { setTimeout as sleep } from 'node:timers/promises';
import { KubeApiError, type KubeClient, type Selectors } from './client.ts';
import { asError } from '../base/errors.ts';

export type ChangeType = 'ADDED' | 'MODIFIED' | 'DELETED';

/** What a list or watch needs of an object (list items carry no apiVersion or kind). */
export interface WatchedObject {
  metadata: { name: string; namespace?: string; resourceVersion?: string };
}

export interface ListWatchHandler<T> {
  /** The complete set after every (re)list: replaces whatever the caller held. */
  onList(items: T[]): void | Promise<void>;
  onEvent(type: ChangeType, object: T): void | Promise<void>;
  /** A list or watch failed; it is retried after a backoff. */
  onError?(err: Error): void;
}

export interface ListWatchOptions extends Selectors {
  /** Backoff after a failure, doubling from min to max. Default 500 ms .. 10 s. */
  backoffMinMs?: number;
  backoffMaxMs?: number;
  /** Passed to each watch request (tests use short ones). */
  watchTimeoutSeconds?: number;
  /** Told each list's outcome (HTTP status, Status reason, seconds) and each watch's (for metrics). */
  observe?: {
    list?(status: number, reason: string, seconds: number): void;
    watch?(status: number, reason: string): void;
  };
}

/**
 * For a node's watches: they end and reopen every minute, so one carried by a connection that a
 * NAT on the way dropped silently (its mapping expired or was flushed) is noticed when it stays
 * silent past its end (a minute and 30 s) instead of after the default 5-10 minutes. One request a
 * minute per watch is the cost.
 */
export const NODE_WATCH: ListWatchOptions = { watchTimeoutSeconds: 60 };

/** The HTTP status and Status reason of a failed request (0 when it never got an answer). */
function outcome(err: unknown): [number, string] {
  return err instanceof KubeApiError ? [err.status, err.reason] : [0, ''];
}

/** Runs until signal aborts; never rejects for API or network errors (they go to onError). */
export async function listAndWatch<T extends WatchedObject>(
  kube: KubeClient,
  path: string,
  opts: ListWatchOptions,
  handler: ListWatchHandler<T>,
  signal: AbortSignal,
): Promise<void> {
  const min = opts.backoffMinMs ?? 500;
  const max = opts.backoffMaxMs ?? 10_000;
  const sel: Selectors = { fieldSelector: opts.fieldSelector, labelSelector: opts.labelSelector };
  let resourceVersion: string | undefined;
  let delay = min;
  const backOff = async () => {
    await sleep(delay, undefined, { signal }).catch(() => undefined);
    delay = Math.min(delay * 2, max);
  };
  while (!signal.aborted) {
    try {
      if (resourceVersion === undefined) {
        const started = performance.now();
        const list = await kube.list<T>(path, sel, signal).then(
          (l) => {
            opts.observe?.list?.(200, '', (performance.now() - started) / 1000);
            return l;
          },
          (err: unknown) => {
            if (!signal.aborted) opts.observe?.list?.(...outcome(err), (performance.now() - started) / 1000);
            throw err;
          },
        );
        await handler.onList(list.items);
        resourceVersion = list.metadata?.resourceVersion ?? '';
      }
      const openedAt = Date.now();
      let events = 0;
      await kube
        .watch<T>(
          path,
          { ...sel, resourceVersion, timeoutSeconds: opts.watchTimeoutSeconds },
          async (e) => {
            events += 1;
            resourceVersion = e.object.metadata?.resourceVersion || resourceVersion;
            if (e.type !== 'BOOKMARK') await handler.onEvent(e.type, e.object);
          },
          signal,
        )
        .then(
          () => opts.observe?.watch?.(200, ''),
          (err: unknown) => {
            if (!signal.aborted) opts.observe?.watch?.(...outcome(err));
            throw err;
          },
        );
      // Ended by the server: reopen from where we are; only a watch that ends at once, empty, backs off.
      if (events === 0 && Date.now() - openedAt < 1000) await backOff();
      else delay = min;
    } catch (err) {
      if (signal.aborted) break;
      resourceVersion = undefined;
      // 410 Expired (too old a resourceVersion) is routine: list again at once.
      if (err instanceof KubeApiError && err.status === 410) continue;
      handler.onError?.(asError(err));
      await backOff();
    }
  }
}

/** Key of an object in an Informer's store. */
export function objectKey(o: WatchedObject): string {
  return o.metadata.namespace ? `${o.metadata.namespace}/${o.metadata.name}` : o.metadata.name;
}

/**
 * listAndWatch with a store of the current objects. onChange runs after the store has taken
 * each change (type LIST after a (re)list); changes are delivered one at a time, in order.
 */
export class Informer<T extends WatchedObject> {
  readonly store = new Map<string, T>();
  private abort?: AbortController;
  private running?: Promise<void>;
  private listed = false;

  constructor(
    private readonly kube: KubeClient,
    private readonly path: string,
    private readonly opts: ListWatchOptions,
    private readonly onChange: (type: ChangeType | 'LIST', object?: T) => void | Promise<void>,
    private readonly onError?: (err: Error) => void,
  ) {}

  /** True once the first list has arrived. */
  get hasSynced(): boolean {
    return this.listed;
  }

  get(name: string, namespace?: string): T | undefined {
    return this.store.get(namespace ? `${namespace}/${name}` : name);
  }

  start(): void {
    if (this.running) return;
    const abort = new AbortController();
    this.abort = abort;
    this.running = listAndWatch<T>(
      this.kube,
      this.path,
      this.opts,
      {
        onList: async (items) => {
          this.store.clear();
          for (const o of items) this.store.set(objectKey(o), o);
          this.listed = true;
          await this.onChange('LIST');
        },
        onEvent: async (type, o) => {
          if (type === 'DELETED') this.store.delete(objectKey(o));
          else this.store.set(objectKey(o), o);
          await this.onChange(type, o);
        },
        onError: this.onError,
      },
      abort.signal,
    );
  }

  async stop(): Promise<void> {
    this.abort?.abort();
    await this.running;
    this.running = undefined;
  }
}

// Two TCP sockets joined in the kernel: kctl's native addon hands both descriptors to its relay
// thread, which moves the bytes between them with splice(2), so they never pass through
// JavaScript (assets/native/relay.c; the front door's relay costs a fraction of the CPU a
// pipe() costs). Node hands the connection over whole: its reading is stopped with nothing left
// in its buffers (libuv would take bytes meant for the other side), nothing it was asked to write
// waits in libuv (the kernel's copy would overtake it), and then its sockets are destroyed at
// once: the relay holds duplicates of both descriptors, so the connections live on without a
// Node socket each (a relayed connection costs the process a few hundred bytes). Without the
// addon (a checkout) spliceSockets says so and its caller pipes in JavaScript.
import type { Socket } from 'node:net';
import { nativeFd } from './native.ts';

/** A relay started: what it moved once it ends, and a way to end it early. */
export interface Relay {
  done: Promise<SpliceResult>;
  /** Ends the relay and both connections now (done follows with error "stopped"). */
  stop(): void;
}

export interface SpliceResult {
  aToB: number;
  bToA: number;
  /** Why the relay ended early (a reset, an error, a socket destroyed); none when both sides closed. */
  error?: string;
}

/** The part of a socket's libuv handle Node reads through (stream_wrap). */
interface StreamHandle {
  reading?: boolean;
  readStart?(): number;
  readStop?(): number;
}

function handleOf(socket: Socket): StreamHandle | undefined {
  // Node has no public way to stop reading a socket: pause() only stops delivering, libuv goes on
  // reading into the socket's buffer until its high-water mark.
  // eslint-disable-next-line no-restricted-syntax
  return (socket as unknown as { _handle?: StreamHandle | null })._handle ?? undefined;
}

/** Whether spliceSockets could take these two now: the addon is loaded and both have a descriptor. */
export function canSplice(a: Socket, b: Socket): boolean {
  return nativeFd(a) !== undefined && nativeFd(b) !== undefined;
}

/**
 * Stops Node reading a socket (paused, and libuv's read stopped) and returns what it had read and
 * not delivered yet, for the caller to pass on. resumeReading undoes it.
 */
export function holdReading(socket: Socket): Buffer[] {
  socket.pause();
  const chunks: Buffer[] = [];
  for (let chunk: unknown = socket.read(); chunk !== null; chunk = socket.read()) {
    chunks.push(typeof chunk === 'string' ? Buffer.from(chunk) : (chunk as Buffer));
  }
  // After the last read() in this same turn: it may have asked libuv to read again.
  const handle = handleOf(socket);
  if (handle?.reading && !socket.destroyed) {
    handle.reading = false;
    handle.readStop?.();
  }
  return chunks;
}

/**
 * Lets libuv read a held socket again (for a caller that pipes after all). Node's stream may still
 * count a read as asked for, and would then never ask again: the handle is restarted directly.
 */
export function resumeReading(socket: Socket): void {
  const handle = handleOf(socket);
  if (!handle || handle.reading || socket.destroyed) return;
  handle.reading = true;
  handle.readStart?.();
}

/**
 * Relays two connected TCP sockets in the kernel until both sides have closed their sending
 * (each side's end passed on to the other: half-close), or either fails, or stop(). Both Node
 * sockets are destroyed at once: from then on the relay alone holds the connections. Undefined,
 * leaving both as they were, when it cannot: no addon or descriptor, bytes Node read that nobody
 * consumed, or a write of Node's not yet flushed.
 */
export function spliceSockets(a: Socket, b: Socket): Relay | undefined {
  const na = nativeFd(a);
  const nb = nativeFd(b);
  if (!na || !nb) return undefined;
  for (const s of [a, b]) {
    if (s.destroyed || s.connecting || s.writableEnded || s.readableLength > 0 || s.writableLength > 0)
      return undefined;
  }
  const wasReading = [a, b].map((s) => handleOf(s)?.reading === true);
  for (const s of [a, b]) holdReading(s); // reads nothing: both buffers are empty
  const native = na.native;
  let id = 0;
  let ended = false;
  let finish!: (r: SpliceResult) => void;
  const done = new Promise<SpliceResult>((resolve) => (finish = resolve));
  try {
    id = native.relay(na.fd, nb.fd, (aToB, bToA, error) => {
      ended = true;
      finish(error === undefined ? { aToB, bToA } : { aToB, bToA, error });
    });
  } catch {
    [a, b].forEach((s, i) => wasReading[i] && resumeReading(s));
    return undefined;
  }
  // Closes Node's descriptors only (libuv takes them out of its epoll first): no FIN, no reset.
  a.destroy();
  b.destroy();
  return {
    done,
    stop: () => {
      if (!ended) native.relayStop(id);
    },
  };
}

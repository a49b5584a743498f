// The one way both ends write packets to an agent stream: honour backpressure. When write()
// returns false the stream's buffer is full; callers then stop reading their sources (targets,
// frontends) until 'drain', when `onDrain` lets them resume. The stream itself is never paused
// from the reading side, so one full buffer never stops the other direction.

interface PacketStream<T> {
  write(p: T): boolean;
  once(event: 'drain', listener: () => void): unknown;
}

export class StreamWriter<T> {
  private blocked = false;

  constructor(private readonly onDrain: () => void) {}

  /** False while the stream's send buffer is full. */
  get ready(): boolean {
    return !this.blocked;
  }

  write(stream: PacketStream<T>, p: T): void {
    if (!stream.write(p) && !this.blocked) {
      this.blocked = true;
      stream.once('drain', () => {
        this.blocked = false;
        this.onDrain();
      });
    }
  }
}

// Failed join attempts per source address: a controller join token hands over the CA keys, so a
// source that keeps presenting bad tokens is refused for a while instead of guessing on. Written
// by hand: the rate-limit libraries count requests, not failures, and this is a dozen lines.

export interface FailureLimiterOptions {
  /** Failures within `windowMs` that start a block. */
  failures: number;
  windowMs: number;
  blockMs: number;
  /** Sources tracked before stale ones are dropped (a flood from many addresses stays bounded). */
  maxSources: number;
  now: () => number;
}

export const JOIN_LIMITS: FailureLimiterOptions = {
  failures: 10,
  windowMs: 60_000,
  blockMs: 60_000,
  maxSources: 10_000,
  now: Date.now,
};

interface SourceState {
  /** When each failure inside the window happened, oldest first. */
  failures: number[];
  blockedUntil: number;
}

export class FailureLimiter {
  private readonly o: FailureLimiterOptions;
  private readonly sources = new Map<string, SourceState>();

  constructor(options: Partial<FailureLimiterOptions> = {}) {
    this.o = { ...JOIN_LIMITS, ...options };
  }

  /** Milliseconds `source` is still refused for; 0 when it may try. */
  blockedFor(source: string): number {
    const s = this.sources.get(source);
    return s ? Math.max(0, s.blockedUntil - this.o.now()) : 0;
  }

  /** Counts one failure of `source`; true when it starts a block (the one moment worth a log line). */
  fail(source: string): boolean {
    const now = this.o.now();
    let s = this.sources.get(source);
    if (!s) {
      if (this.sources.size >= this.o.maxSources) this.dropStale(now);
      s = { failures: [], blockedUntil: 0 };
      this.sources.set(source, s);
    }
    if (s.blockedUntil > now) return false;
    s.failures = s.failures.filter((t) => t > now - this.o.windowMs);
    s.failures.push(now);
    if (s.failures.length < this.o.failures) return false;
    s.failures = [];
    s.blockedUntil = now + this.o.blockMs;
    return true;
  }

  /** How many sources are tracked now (for tests of the bound). */
  get size(): number {
    return this.sources.size;
  }

  private dropStale(now: number): void {
    for (const [source, s] of this.sources)
      if (s.blockedUntil <= now && s.failures.every((t) => t <= now - this.o.windowMs)) this.sources.delete(source);
    // Still full: forget the oldest entries (Map keeps insertion order) rather than grow without bound.
    for (const source of this.sources.keys()) {
      if (this.sources.size < this.o.maxSources) break;
      this.sources.delete(source);
    }
  }
}

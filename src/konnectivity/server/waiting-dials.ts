// Dials that wait for their agent. A konnectivity server that has just started (a controller
// restarting, during an upgrade or after a crash) is asked for dials by its kube-apiserver before
// the agents are back: they dial it only once they learn it is alive again. Upstream fails such a
// dial at once ("No agent available"), so an exec through a restarted controller fails for the
// seconds the agents take. Here a dial whose host no connected agent serves, but whose agent is
// expected (the server's owner says which: another server holds it, or this one is young), waits
// up to `waitMs` for an agent that may serve it, then goes to the broker like any dial (which
// fails it with the usual reason, saying how long it waited). A dial nobody expects fails at once.
import { splitHostPort } from '../../base/addresses.ts';
import type { DialRequest } from '../wire/protocol.ts';
import type { Frontend, Tunnel } from './tunnel.ts';

export interface DialWait {
  /** True when an agent that may serve `host` should connect soon. */
  expected(host: string): boolean;
  /** The longest a dial waits for it. */
  waitMs: number;
}

/** What the waiting dials need of the broker. */
export interface DialTarget {
  /** True when a connected agent may serve `host` now. */
  servable(host: string): boolean;
  dial(frontend: Frontend, req: DialRequest, waitedMs?: number): Tunnel | null;
}

interface Parked {
  frontend: Frontend;
  req: DialRequest;
  host: string;
  since: number;
  onTunnel: (t: Tunnel | null) => void;
}

/** How often parked dials look for their agent (they are few, and only for seconds). */
const LOOK_EVERY_MS = 100;

export class WaitingDials {
  private readonly parked = new Set<Parked>();
  private timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly target: DialTarget,
    /** Without it no dial waits (the drop-in server, as upstream's). */
    private readonly o: DialWait | undefined,
  ) {}

  get size(): number {
    return this.parked.size;
  }

  /**
   * Dials now, or once an agent may serve the host (at most waitMs). `onTunnel` gets what the
   * broker's dial returns, synchronously when there is no wait. When the dial waits, returns how to
   * cancel it (the frontend went away: nothing is dialed then); otherwise undefined.
   */
  dial(frontend: Frontend, req: DialRequest, onTunnel: (t: Tunnel | null) => void): (() => void) | undefined {
    const host = splitHostPort(req.address)?.host;
    if (!this.o || host === undefined || this.target.servable(host) || !this.o.expected(host)) {
      onTunnel(this.target.dial(frontend, req));
      return undefined;
    }
    const p: Parked = { frontend, req, host, since: Date.now(), onTunnel };
    this.parked.add(p);
    this.timer ??= setInterval(() => this.look(), LOOK_EVERY_MS);
    return () => this.unpark(p);
  }

  /** Every parked dial goes to the broker now (server shutdown: they fail there). */
  flush(): void {
    for (const p of [...this.parked]) this.release(p);
  }

  private look(): void {
    const now = Date.now();
    for (const p of [...this.parked])
      if (this.target.servable(p.host) || now - p.since >= (this.o?.waitMs ?? 0)) this.release(p);
  }

  private release(p: Parked): void {
    this.unpark(p);
    p.onTunnel(this.target.dial(p.frontend, p.req, Date.now() - p.since));
  }

  private unpark(p: Parked): void {
    this.parked.delete(p);
    if (this.parked.size === 0 && this.timer) {
      clearInterval(this.timer);
      this.timer = undefined;
    }
  }
}

// One reconcile at a time: a request while one runs is folded into a single run after it, so
// bursts of changes cost at most two runs and none is lost.
export class SerialRunner {
  private running: Promise<void> | undefined;
  private again = false;

  constructor(private readonly run: () => Promise<void>) {}

  /** Runs now, or once more after the run under way. */
  schedule(): void {
    if (this.running) {
      this.again = true;
      return;
    }
    this.running = this.run().finally(() => {
      this.running = undefined;
      if (this.again) {
        this.again = false;
        this.schedule();
      }
    });
  }

  /** Resolves when no run is under way (for a stop). */
  async idle(): Promise<void> {
    while (this.running) await this.running;
  }
}

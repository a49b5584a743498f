// Progress for long build steps: a live line on a terminal, plain start lines otherwise.
export interface Progress {
  step(label: string): void;
  done(): void;
}

export function progress(total: number, what: string): Progress {
  const tty = process.stdout.isTTY === true;
  const started = Date.now();
  let n = 0;
  let stepStart = Date.now();
  const elapsed = (t: number) => `${Math.round((Date.now() - t) / 1000)}s`;
  let timer: NodeJS.Timeout | undefined;
  let current = '';
  const draw = () => process.stdout.write(`\r\x1b[K${what} [${n}/${total}] ${current} (${elapsed(stepStart)})`);
  return {
    step(label) {
      n += 1;
      current = label;
      stepStart = Date.now();
      if (tty) {
        draw();
        if (!timer) timer = setInterval(draw, 1000);
      } else {
        process.stdout.write(`${what} [${n}/${total}] ${label}\n`);
      }
    },
    done() {
      if (timer) clearInterval(timer);
      process.stdout.write(`${tty ? '\r\x1b[K' : ''}${what}: ${total} done in ${elapsed(started)}\n`);
    },
  };
}

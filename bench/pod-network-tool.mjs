// The pod network bench's probe, run with nsenter in a pod's network namespace (or a lab host's,
// for the host-to-host baseline). One JSON line on stdout per measurement.
//   serve PORT               tput on PORT (count bytes until the end, answer "ok"), echo on PORT+1
//   tput HOST PORT BYTES     send BYTES, wait for "ok": {"seconds", "mbps"}
//   rtt HOST PORT COUNT      COUNT one-byte round trips on one connection: {"medianUs", "p99Us"}
import { createServer, connect } from 'node:net';

const [cmd, ...args] = process.argv.slice(2);

if (cmd === 'serve') {
  const port = Number(args[0]);
  createServer((s) => {
    s.on('data', () => undefined);
    s.on('end', () => s.end('ok\n'));
    s.on('error', () => undefined);
  }).listen(port);
  createServer((s) => {
    s.setNoDelay(true);
    s.on('data', (d) => s.write(d));
    s.on('error', () => undefined);
  }).listen(port + 1);
} else if (cmd === 'tput') {
  const [host, port, bytes] = [args[0], Number(args[1]), Number(args[2])];
  const chunk = Buffer.alloc(256 * 1024);
  const s = connect(port, host);
  let start = 0;
  s.on('connect', () => {
    start = performance.now();
    let left = bytes;
    const pump = () => {
      while (left > 0) {
        const n = Math.min(left, chunk.length);
        left -= n;
        if (!s.write(n === chunk.length ? chunk : chunk.subarray(0, n))) return void s.once('drain', pump);
      }
      s.end();
    };
    pump();
  });
  s.on('data', () => {
    const seconds = (performance.now() - start) / 1000;
    process.stdout.write(`${JSON.stringify({ seconds, mbps: (bytes * 8) / seconds / 1e6 })}\n`);
    s.destroy();
  });
  s.on('error', (err) => {
    process.stderr.write(`${err.message}\n`);
    process.exit(1);
  });
} else if (cmd === 'rtt') {
  const [host, port, count] = [args[0], Number(args[1]), Number(args[2])];
  const s = connect(port, host);
  s.setNoDelay(true);
  const times = [];
  let sent = 0;
  const one = () => {
    sent = performance.now();
    s.write('x');
  };
  s.on('connect', one);
  s.on('data', () => {
    times.push((performance.now() - sent) * 1000);
    if (times.length < count) return one();
    times.sort((a, b) => a - b);
    const at = (q) => times[Math.min(times.length - 1, Math.floor(q * times.length))];
    process.stdout.write(`${JSON.stringify({ medianUs: at(0.5), p99Us: at(0.99) })}\n`);
    s.destroy();
  });
  s.on('error', (err) => {
    process.stderr.write(`${err.message}\n`);
    process.exit(1);
  });
} else {
  process.stderr.write('usage: serve PORT | tput HOST PORT BYTES | rtt HOST PORT COUNT\n');
  process.exit(2);
}

// The TLS server behind the front door in the bench's front-door section (front-door.ts), in a
// process of its own: argv CERT KEY. A connection whose first byte is "p" gets one byte back for
// every byte it sends (round trips); any other is counted to its end and answered with the count.
// Prints {"port"} when it listens.
import { readFileSync } from 'node:fs';
import { createServer } from 'node:tls';

const [cert, key] = process.argv.slice(2).map((f) => readFileSync(f));
const server = createServer({ cert, key }, (s) => {
  s.setNoDelay(true);
  let mode = '';
  let bytes = 0;
  s.on('data', (d) => {
    if (!mode) mode = d[0] === 0x70 ? 'ping' : 'sink';
    if (mode === 'ping') s.write(d.subarray(0, 1));
    else bytes += d.length;
  });
  s.on('end', () => s.end(`${bytes}\n`));
  s.on('error', () => undefined);
});
server.listen(0, '127.0.0.1', () => process.stdout.write(`${JSON.stringify({ port: server.address().port })}\n`));

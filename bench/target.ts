// The target every path reaches: a TCP server on 127.0.0.1 (or the address in argv[2]), in its
// own process so that it costs the same for every path. Two ports:
//   source: the client sends "<bytes>\n"; the target answers that many bytes and closes.
//   echo:   everything is sent back.
// Prints {"source": port, "echo": port} when listening.
import { createServer, type Server, type Socket } from 'node:net';

const CHUNK = Buffer.alloc(64 * 1024, 0x5a);

function source(s: Socket): void {
  let head = '';
  const onData = (c: Buffer): void => {
    head += c.toString('latin1');
    const nl = head.indexOf('\n');
    if (nl < 0) return;
    s.off('data', onData);
    s.resume(); // discard anything after the request
    let left = Number(head.slice(0, nl));
    const pump = (): void => {
      while (left > 0) {
        const n = Math.min(left, CHUNK.length);
        left -= n;
        if (!s.write(n === CHUNK.length ? CHUNK : CHUNK.subarray(0, n))) return void s.once('drain', pump);
      }
      s.end();
    };
    pump();
  };
  s.on('data', onData);
}

const host = process.argv[2] ?? '127.0.0.1';

function listen(onConn: (s: Socket) => void): Promise<number> {
  const server: Server = createServer((s) => {
    s.on('error', () => {});
    s.setNoDelay(true);
    onConn(s);
  });
  return new Promise((r) => server.listen(0, host, 4096, () => r((server.address() as { port: number }).port)));
}

const [src, echo] = await Promise.all([listen(source), listen((s) => s.pipe(s))]);
process.stdout.write(`${JSON.stringify({ source: src, echo })}\n`);

// The test lab itself: hosts reach each other, isolation blocks what it must and nothing
// more, and destroy() leaves nothing behind.
import assert from 'node:assert/strict';
import type { ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { execa } from 'execa';
import { labNamespacesLeft, type LabHost } from './lab.ts';
import { startLab } from './lab-test.ts';

const PORT = 18080;

/** A TCP server in `host` that answers the first bytes of every connection with the host's name. */
async function listen(host: LabHost, port = PORT): Promise<ChildProcess> {
  const code = `require('net').createServer((s) => { s.on('error', () => {}); s.on('data', () => s.end(${JSON.stringify(host.name)})); }).listen(${port}, '0.0.0.0', () => console.log('listening'))`;
  const child = host.spawn(process.execPath, ['-e', code]);
  const [chunk] = (await once(child.stdout!, 'data')) as [Buffer];
  assert.match(chunk.toString(), /listening/);
  return child;
}

test(
  'lab hosts reach each other, isolation drops new connections from the controller only, destroy cleans up',
  { timeout: 120_000 },
  async (t) => {
    const { lab } = await startLab(t, 'labt', ['ctl', 'wrk']);
    const ctl = lab.host('ctl');
    const wrk = lab.host('wrk');
    assert.notEqual(ctl.ip, wrk.ip);

    // Nothing of the lab in the root namespace: no address on the lab subnet.
    const rootAddrs = await execa('ip', ['-o', 'addr']);
    assert.doesNotMatch(rootAddrs.stdout, new RegExp(lab.subnet.split('.').slice(0, 3).join('\\.') + '\\.'));

    assert.ok(await lab.ping(ctl, wrk), 'ctl pings wrk');
    assert.ok(await lab.ping(wrk, ctl), 'wrk pings ctl');
    await listen(ctl);
    await listen(wrk);
    assert.ok(await lab.canConnect(ctl, wrk, PORT), 'ctl -> wrk TCP before isolation');
    assert.ok(await lab.canConnect(wrk, ctl, PORT), 'wrk -> ctl TCP');
    // A port nobody listens on is refused: canConnect can say no.
    assert.equal(await lab.canConnect(wrk, ctl, PORT + 1), false);

    // A connection the worker opened before isolation (conntrack ESTABLISHED) keeps working.
    const held = wrk.spawn('bash', ['-c', `exec 3<>/dev/tcp/${ctl.ip}/${PORT}; sleep 8; echo x >&3; cat <&3`]);
    let heldOut = '';
    held.stdout!.on('data', (c: Buffer) => {
      heldOut += c.toString();
    });
    const heldExit = once(held, 'close');
    await sleep(500);

    await lab.isolate(wrk, ctl);
    assert.equal(await lab.canConnect(ctl, wrk, PORT, 2000), false, 'ctl -> wrk must be dropped after isolation');
    assert.equal(await lab.ping(ctl, wrk), false, 'ping ctl -> wrk is a new flow too');
    assert.ok(await lab.canConnect(wrk, ctl, PORT), 'wrk -> ctl still works (replies are ESTABLISHED)');
    assert.ok(await lab.ping(wrk, ctl), 'wrk pings ctl after isolation');
    await heldExit;
    assert.equal(heldOut, 'ctl');
    // Isolation is idempotent.
    await lab.isolate(wrk, ctl);
    const rules = await wrk.run('iptables', ['-S', 'INPUT']);
    assert.equal(
      String(rules.stdout)
        .split('\n')
        .filter((l) => l.includes('KCTL-LAB-ISOLATE')).length,
      1,
    );

    await lab.destroy();
    assert.deepEqual(await labNamespacesLeft('labt'), []);
    const links = await execa('ip', ['-o', 'link']);
    assert.doesNotMatch(links.stdout, /kctl|br0/);
    // Servers the lab started are gone.
    const r = await execa('pgrep', ['-f', `listen\\(${PORT}`], { reject: false });
    assert.equal(r.stdout.trim(), '');
    await lab.destroy();
  },
);

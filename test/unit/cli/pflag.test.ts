// pflag-compatible parsing: every form a manifest written for a Go program may use.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { AGENT_FLAGS } from '../../../src/cli/flags/agent-flags.ts';
import { inertFlagsSet, parseGoBool, parsePflags, renderPflagHelp, splitCsv } from '../../../src/cli/flags/pflag.ts';

const parse = (argv: string[]) => parsePflags('konnectivity-agent', AGENT_FLAGS, argv);

test('defaults are upstream proxy-agent v0.36.0 defaults', () => {
  const v = parse([]).values;
  assert.equal(v.get('admin-bind-address'), '127.0.0.1');
  assert.equal(v.get('admin-server-port'), '8094');
  assert.equal(v.get('health-server-host'), '');
  assert.equal(v.get('health-server-port'), '8093');
  assert.equal(v.get('keepalive-time'), '1h0m0s');
  assert.equal(v.get('proxy-server-host'), '127.0.0.1');
  assert.equal(v.get('proxy-server-port'), '8091');
  assert.equal(v.get('logtostderr'), true);
  assert.equal(v.get('sync-forever'), false);
  assert.deepEqual(v.get('alpn-proto'), []);
  assert.equal(v.get('v'), '4');
});

test('--flag=value, --flag value, bare booleans, --flag=false and shorthands all parse as pflag does', () => {
  const p = parse([
    '--proxy-server-host=konnectivity.example',
    '--proxy-server-port',
    '8132',
    '--sync-forever',
    '--logtostderr=false',
    '--count-server-leases=true',
    '-v=5',
    '--alpn-proto=konnectivity,h2',
    '--alpn-proto',
    'x',
    '--log_dir=/tmp',
    'extra',
  ]);
  assert.equal(p.values.get('proxy-server-host'), 'konnectivity.example');
  assert.equal(p.values.get('proxy-server-port'), '8132');
  assert.equal(p.values.get('sync-forever'), true);
  assert.equal(p.values.get('logtostderr'), false);
  assert.equal(p.values.get('count-server-leases'), true);
  assert.equal(p.values.get('v'), '5');
  assert.deepEqual(p.values.get('alpn-proto'), ['konnectivity', 'h2', 'x']);
  assert.equal(p.values.get('log-dir'), '/tmp');
  assert.deepEqual(p.args, ['extra']);
  assert.equal(parse(['-v', '2']).values.get('v'), '2');
  assert.equal(parse(['-v3']).values.get('v'), '3');
  // A bare boolean does not take the next word as its value.
  assert.deepEqual(parse(['--sync-forever', 'false']).args, ['false']);
  assert.equal(parse(['-h']).help, true);
  assert.equal(parse(['--help']).help, true);
});

test('bad input is one line naming the flag', () => {
  assert.throws(
    () => parse(['--admin-bind-adress=1.2.3.4']),
    /^Error: konnectivity-agent: unknown flag --admin-bind-adress; see konnectivity-agent --help/,
  );
  assert.throws(() => parse(['-x']), /unknown flag -x/);
  assert.throws(() => parse(['--proxy-server-port']), /flag --proxy-server-port needs a value/);
  assert.throws(
    () => parse(['--proxy-server-port=http']),
    /invalid value "http" for --proxy-server-port: expected an integer/,
  );
  assert.throws(() => parse(['--sync-forever=yes']), /invalid value "yes" for --sync-forever: expected true or false/);
  assert.throws(() => parse(['--sync-interval=5']), /invalid value "5" for --sync-interval: expected a Go duration/);
  assert.throws(() => parse(['--alpn-proto="a,b']), /unterminated quote/);
});

test('Go booleans, durations and CSV lists', () => {
  for (const t of ['1', 't', 'T', 'TRUE', 'true', 'True']) assert.equal(parseGoBool(t), true);
  for (const f of ['0', 'f', 'F', 'FALSE', 'false', 'False']) assert.equal(parseGoBool(f), false);
  assert.equal(parseGoBool('yes'), null);
  for (const d of ['1h0m0s', '500ms', '1.5s', '0', '2h45m'])
    assert.equal(parse([`--keepalive-time=${d}`]).values.get('keepalive-time'), d);
  assert.deepEqual(splitCsv('a,"b,c",d'), ['a', 'b,c', 'd']);
  assert.deepEqual(splitCsv(''), []);
});

test('flags kctl accepts but does not act on are listed when set to something else', () => {
  const p = parse(['--xfr-channel-size=150', '--log-dir=/var/log', '--warn-on-channel-limit', '--logtostderr=true']);
  assert.deepEqual(
    inertFlagsSet(AGENT_FLAGS, p).map((s) => s.split(' ')[0]),
    ['--warn-on-channel-limit', '--log-dir'],
  );
});

test('--help lists every upstream flag with its type and default', () => {
  const help = renderPflagHelp('proxy-agent', 'desc', AGENT_FLAGS);
  for (const f of AGENT_FLAGS) assert.match(help, new RegExp(`--${f.name}\\b`), f.name);
  assert.match(help, /--admin-server-port int\s+The port the admin server is listening on\. \(default 8094\)/);
  assert.match(help, /-v, --v Level\s+number for the log level verbosity/);
  assert.match(help, /--keepalive-time duration\s+Time for gRPC agent server keepalive\. \(default 1h0m0s\)/);
  assert.match(help, /--xfr-channel-size int .*\[kctl: accepted, no effect/);
});

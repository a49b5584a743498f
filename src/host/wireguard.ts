// WireGuard without the wg tool: X25519 key pairs from Node's crypto (in WireGuard's base64 form),
// and the cross-platform userspace API (UAPI) that wireguard-go serves on a unix socket: `get=1`
// and `set=1` requests of key=value lines, hex keys, answered with `errno=N`.
import { createPrivateKey, createPublicKey, generateKeyPairSync } from 'node:crypto';
import { connect } from 'node:net';

/** PKCS#8 DER of an X25519 private key, before its 32 raw bytes. */
const PKCS8_X25519_PREFIX = Buffer.from('302e020100300506032b656e04220420', 'hex');

/** A new private key, base64 (as `wg genkey` prints one). */
export function generatePrivateKey(): string {
  const der = generateKeyPairSync('x25519').privateKey.export({ format: 'der', type: 'pkcs8' });
  return der.subarray(der.length - 32).toString('base64');
}

/** True for a WireGuard key: 32 bytes in base64. */
export function isWireguardKey(s: string | undefined): s is string {
  return !!s && /^[A-Za-z0-9+/]{43}=$/.test(s) && Buffer.from(s, 'base64').length === 32;
}

/** The public key of a base64 private key. */
export function publicKeyOf(privateKey: string): string {
  const key = createPrivateKey({
    key: Buffer.concat([PKCS8_X25519_PREFIX, Buffer.from(privateKey, 'base64')]),
    format: 'der',
    type: 'pkcs8',
  });
  const spki = createPublicKey(key).export({ format: 'der', type: 'spki' });
  return spki.subarray(spki.length - 32).toString('base64');
}

export const keyHex = (base64: string): string => Buffer.from(base64, 'base64').toString('hex');
const keyBase64 = (hex: string): string => Buffer.from(hex, 'hex').toString('base64');

export interface WireguardPeerState {
  publicKey: string;
  endpoint?: string;
  allowedIPs: string[];
  /** Unix seconds of the last handshake; 0: none yet. */
  lastHandshake: number;
  rxBytes: number;
  txBytes: number;
  keepaliveSeconds: number;
}

export interface WireguardDeviceState {
  publicKey?: string;
  listenPort?: number;
  peers: WireguardPeerState[];
}

/** One UAPI request; resolves with the answer's lines (errno=0 checked), rejects with the errno. */
async function uapi(socket: string, request: string, timeoutMs = 5000): Promise<string[]> {
  const answer = await new Promise<string>((resolve, reject) => {
    const s = connect(socket);
    let text = '';
    const timer = setTimeout(() => s.destroy(new Error(`no answer from ${socket} within ${timeoutMs} ms`)), timeoutMs);
    s.setEncoding('utf8');
    s.on('data', (chunk: string) => {
      text += chunk;
      if (/(^|\n)errno=-?\d+\n\n$/.test(text)) s.end();
    });
    s.on('error', reject);
    s.on('close', () => {
      clearTimeout(timer);
      resolve(text);
    });
    s.end(request);
  });
  const lines = answer.split('\n').filter(Boolean);
  const errno = lines.find((l) => l.startsWith('errno='));
  if (errno !== 'errno=0')
    throw new Error(`wireguard ${request.split('\n')[0]} on ${socket} failed: ${errno ?? 'no answer'}`);
  return lines.filter((l) => !l.startsWith('errno='));
}

/** The device and its peers as wireguard-go reports them. */
export async function wireguardGet(socket: string): Promise<WireguardDeviceState> {
  const state: WireguardDeviceState = { peers: [] };
  let peer: WireguardPeerState | undefined;
  for (const line of await uapi(socket, 'get=1\n\n')) {
    const eq = line.indexOf('=');
    const [k, v] = [line.slice(0, eq), line.slice(eq + 1)];
    if (k === 'private_key') state.publicKey = publicKeyOf(keyBase64(v));
    else if (k === 'listen_port') state.listenPort = Number(v);
    else if (k === 'public_key')
      state.peers.push(
        (peer = {
          publicKey: keyBase64(v),
          allowedIPs: [],
          lastHandshake: 0,
          rxBytes: 0,
          txBytes: 0,
          keepaliveSeconds: 0,
        }),
      );
    else if (!peer) continue;
    else if (k === 'endpoint') peer.endpoint = v;
    else if (k === 'allowed_ip') peer.allowedIPs.push(v);
    else if (k === 'last_handshake_time_sec') peer.lastHandshake = Number(v);
    else if (k === 'rx_bytes') peer.rxBytes = Number(v);
    else if (k === 'tx_bytes') peer.txBytes = Number(v);
    else if (k === 'persistent_keepalive_interval') peer.keepaliveSeconds = Number(v);
  }
  return state;
}

export interface WireguardPeerConfig {
  publicKey: string;
  /** Set only when given: a peer behind NAT has none, and one learnt from its handshake stays. */
  endpoint?: string;
  allowedIPs: string[];
  keepaliveSeconds: number;
}

/** The `set=1` request for these changes (exported for tests). */
export function wireguardSetRequest(o: {
  privateKey?: string;
  listenPort?: number;
  peers?: WireguardPeerConfig[];
  remove?: string[];
}): string {
  const lines = ['set=1'];
  if (o.privateKey) lines.push(`private_key=${keyHex(o.privateKey)}`);
  if (o.listenPort !== undefined) lines.push(`listen_port=${o.listenPort}`);
  for (const key of o.remove ?? []) lines.push(`public_key=${keyHex(key)}`, 'remove=true');
  for (const p of o.peers ?? []) {
    lines.push(`public_key=${keyHex(p.publicKey)}`);
    if (p.endpoint) lines.push(`endpoint=${p.endpoint}`);
    lines.push(`persistent_keepalive_interval=${p.keepaliveSeconds}`, 'replace_allowed_ips=true');
    for (const ip of p.allowedIPs) lines.push(`allowed_ip=${ip}`);
  }
  return lines.join('\n') + '\n\n';
}

export async function wireguardSet(socket: string, o: Parameters<typeof wireguardSetRequest>[0]): Promise<void> {
  await uapi(socket, wireguardSetRequest(o));
}

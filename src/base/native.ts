// kctl's Node-API addon (assets/native), carried inside dist/kctl: malloc_trim(0), a TCP
// socket's kernel state, and a relay of two sockets in the kernel (splice.ts). Node loads addons
// from files only, so it is written to a private directory, loaded and removed. A run from a
// checkout has none unless a test loads one it built (useNativeAddon); every caller then falls
// back to what Node alone can do.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import type { Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as sea from 'node:sea';
import { messageOf } from './errors.ts';
import { TcpState } from './tcp-table.ts';

/** The addon's name among the executable's assets. */
export const NATIVE_ASSET = 'kctl-native.node';

export interface NativeAddon {
  /** malloc_trim(0): true if memory went back to the system. */
  trim(): boolean;
  /** TCP_INFO's tcpi_state of a socket fd, -1 when it is not a TCP socket. */
  tcpState(fd: number): number;
  /** Bytes in a socket's receive queue (SIOCINQ), -1 when it cannot tell. */
  unreadBytes(fd: number): number;
  /**
   * Moves bytes both ways between two connected, non-blocking TCP sockets in the addon's thread
   * (splice); `onDone` gets the bytes each way and why it ended early, if it did. Returns the
   * relay's id. Throws when it cannot start one (out of descriptors).
   */
  relay(fdA: number, fdB: number, onDone: (aToB: number, bToA: number, error: string | undefined) => void): number;
  /** Ends a relay now (onDone follows with "stopped"); a relay already done is left alone. */
  relayStop(id: number): void;
  /** Relays not done yet. */
  relayCount(): number;
}

let addon: NativeAddon | null | undefined;
let loadError: string | undefined;

function loadFile(file: string): NativeAddon {
  const mod: { exports: Partial<NativeAddon> } = { exports: {} };
  process.dlopen(mod, file);
  const { trim, tcpState, unreadBytes, relay, relayStop, relayCount } = mod.exports;
  if (!trim || !tcpState || !unreadBytes || !relay || !relayStop || !relayCount)
    throw new Error(`${file} is not kctl's native addon (no trim, tcpState, unreadBytes or relay)`);
  return { trim, tcpState, unreadBytes, relay, relayStop, relayCount };
}

function loadAsset(): NativeAddon | null {
  if (!sea.isSea()) return null;
  const dir = mkdtempSync(join(tmpdir(), 'kctl-addon-'));
  try {
    const file = join(dir, NATIVE_ASSET);
    writeFileSync(file, Buffer.from(sea.getRawAsset(NATIVE_ASSET)), { mode: 0o700 });
    return loadFile(file);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** The addon, or null (a checkout, or a temporary directory mounted noexec: see nativeAddonError). */
export function nativeAddon(): NativeAddon | null {
  if (addon === undefined) {
    try {
      addon = loadAsset();
    } catch (err) {
      addon = null;
      loadError = messageOf(err);
    }
  }
  return addon;
}

/** Why the addon could not be loaded, if it could not. */
export function nativeAddonError(): string | undefined {
  return loadError;
}

/** Tests from a checkout: use the addon built at `file` (null: none, as a checkout runs). */
export function useNativeAddon(file: string | null): void {
  addon = file === null ? null : loadFile(file);
  loadError = undefined;
}

/** The addon and a socket's descriptor, or undefined when this runtime cannot tell (no addon, no descriptor). */
export function nativeFd(socket: Socket): { native: NativeAddon; fd: number } | undefined {
  // Node keeps a TCP socket's descriptor on its internal handle and has no public way to it.
  // eslint-disable-next-line no-restricted-syntax
  const fd = (socket as unknown as { _handle?: { fd?: number } })._handle?.fd;
  const native = nativeAddon();
  return native && typeof fd === 'number' && fd >= 0 ? { native, fd } : undefined;
}

/**
 * Whether a connected TCP socket is quiet: established (the peer has not closed), nothing unread
 * in its receive queue. Undefined when this runtime cannot tell (no addon, no descriptor).
 */
export function tcpQuiet(socket: Socket): boolean | undefined {
  const n = nativeFd(socket);
  if (!n) return undefined;
  const state = n.native.tcpState(n.fd);
  const unread = n.native.unreadBytes(n.fd);
  if (state < 0 || unread < 0) return undefined;
  return state === TcpState.ESTABLISHED && unread === 0;
}

/** Whether bytes the peer sent wait unread in a TCP socket's receive queue; undefined when this runtime cannot tell. */
export function tcpUnread(socket: Socket): boolean | undefined {
  const n = nativeFd(socket);
  const unread = n ? n.native.unreadBytes(n.fd) : -1;
  return unread < 0 ? undefined : unread > 0;
}

// kctl's Node-API addon: the calls kctl needs that Node has none for.
//
// trim(): glibc's malloc_trim(0). After start, a kctl process keeps 10-20 MiB of heap that the
// start freed (compiling its code, reading files): glibc returns free memory at the top of its
// heap on its own, but only malloc_trim gives back the free pages in the middle of it.
//
// tcpState(fd): the kernel's TCP state of a socket (TCP_INFO's tcpi_state: 1 ESTABLISHED, 8
// CLOSE_WAIT once the peer's FIN arrived), or -1 when fd is not a TCP socket. unreadBytes(fd):
// the bytes waiting in its receive queue (SIOCINQ), or -1. The agent asks both before it writes
// to a target it has just been reading behind: a write to a peer that has closed draws a reset,
// which throws away whatever the peer still had to send.
//
// relay(), relayStop(), relayCount(): the front door's kernel relay, in relay.c (its thread in
// relay-thread.c).
#define _GNU_SOURCE
#include <malloc.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <node_api.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include "relay.h"
#include <linux/sockios.h>

static napi_value trim(napi_env env, napi_callback_info info) {
  (void)info;
  napi_value released;
  if (napi_get_boolean(env, malloc_trim(0) != 0, &released) != napi_ok) return NULL;
  return released;
}

/* The first argument as a descriptor; -1 when it is missing or not a number. */
static int32_t fd_arg(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  int32_t fd = -1;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 1) return -1;
  if (napi_get_value_int32(env, argv[0], &fd) != napi_ok) return -1;
  return fd;
}

static napi_value int32_value(napi_env env, int32_t n) {
  napi_value out;
  if (napi_create_int32(env, n, &out) != napi_ok) return NULL;
  return out;
}

static napi_value tcp_state(napi_env env, napi_callback_info info) {
  int32_t fd = fd_arg(env, info);
  struct tcp_info ti;
  socklen_t len = sizeof(ti);
  if (fd < 0 || getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) != 0) return int32_value(env, -1);
  return int32_value(env, ti.tcpi_state);
}

static napi_value unread_bytes(napi_env env, napi_callback_info info) {
  int32_t fd = fd_arg(env, info);
  int n = -1;
  if (fd < 0 || ioctl(fd, SIOCINQ, &n) != 0) n = -1;
  return int32_value(env, n);
}

NAPI_MODULE_INIT() {
  napi_value fn;
  if (napi_create_function(env, "trim", NAPI_AUTO_LENGTH, trim, NULL, &fn) != napi_ok) return NULL;
  if (napi_set_named_property(env, exports, "trim", fn) != napi_ok) return NULL;
  if (napi_create_function(env, "tcpState", NAPI_AUTO_LENGTH, tcp_state, NULL, &fn) != napi_ok) return NULL;
  if (napi_set_named_property(env, exports, "tcpState", fn) != napi_ok) return NULL;
  if (napi_create_function(env, "unreadBytes", NAPI_AUTO_LENGTH, unread_bytes, NULL, &fn) != napi_ok) return NULL;
  if (napi_set_named_property(env, exports, "unreadBytes", fn) != napi_ok) return NULL;
  if (napi_create_function(env, "relay", NAPI_AUTO_LENGTH, relay, NULL, &fn) != napi_ok) return NULL;
  if (napi_set_named_property(env, exports, "relay", fn) != napi_ok) return NULL;
  if (napi_create_function(env, "relayStop", NAPI_AUTO_LENGTH, relay_stop, NULL, &fn) != napi_ok) return NULL;
  if (napi_set_named_property(env, exports, "relayStop", fn) != napi_ok) return NULL;
  if (napi_create_function(env, "relayCount", NAPI_AUTO_LENGTH, relay_count, NULL, &fn) != napi_ok) return NULL;
  if (napi_set_named_property(env, exports, "relayCount", fn) != napi_ok) return NULL;
  return exports;
}

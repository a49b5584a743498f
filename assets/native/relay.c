// kctl's native addon, its relay (native.c registers it; the thread is in relay-thread.c).
//
// relay(fdA, fdB, onDone): moves the bytes between two connected TCP sockets (the front door's
// client and backend) in the kernel, splice(2) through a pipe, so they never pass through
// JavaScript. One thread of the addon, started on first use, serves every pair from an epoll set
// (edge-triggered: each side is read until EAGAIN, or until its destination is full, which is
// the backpressure: a direction reads its source again only once EPOLLOUT says its destination
// took the pipe's bytes; a side asks for EPOLLOUT only once it was full). relay() adds both sides
// to the set itself, asking for input only: a quiet new pair wakes nobody (a wake-up of the
// thread cost the JS thread about 40 us per connection here). A source's EOF, once its bytes are
// passed on, becomes shutdown(SHUT_WR) of the destination (half-close); the pair is done when both
// directions are, or at once on an error (a reset). relay() duplicates both descriptors: Node may
// close its own at any time (kctl does at once) and the thread must never splice to a number
// reused since. When a pair is done the thread closes its duplicates, which ends the connections
// once Node has closed its own, and calls onDone(bytesAtoB, bytesBtoA, errorText or undefined) on
// the JS thread. relayStop(id) ends a pair early; relayCount() is the pairs open. A direction
// borrows a pipe from the thread's pool while it has bytes in flight (grown to 1 MiB once it
// moves bulk) and gives it back once empty, so an idle connection holds two descriptors and no
// pipe. All pairs share one thread-safe function to reach JS (each pair's onDone is a
// reference), made on the first relay() of the one JS thread that uses it.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "relay.h"
#include "relay-internal.h"

/* The JS thread's own: the pairs it waits for (it holds the loop while any are) and the last id. */
static int relay_js_waiting;
static int64_t relay_last_id;

static void relay_call_js(napi_env env, napi_value unused, void *context, void *data) {
  (void)unused;
  (void)context;
  struct relay_result *r = data;
  napi_value argv[3], undefined, on_done;
  if (env != NULL && napi_get_undefined(env, &undefined) == napi_ok &&
      napi_get_reference_value(env, r->on_done, &on_done) == napi_ok &&
      napi_create_double(env, r->a_to_b, &argv[0]) == napi_ok &&
      napi_create_double(env, r->b_to_a, &argv[1]) == napi_ok) {
    argv[2] = undefined;
    if (r->error[0] == 0 || napi_create_string_utf8(env, r->error, NAPI_AUTO_LENGTH, &argv[2]) == napi_ok)
      napi_call_function(env, undefined, on_done, 3, argv, NULL);
  }
  if (env != NULL) {
    napi_delete_reference(env, r->on_done);
    if (--relay_js_waiting == 0) napi_unref_threadsafe_function(env, relay_done_fn);
  }
  free(r);
}

static napi_value relay_throw(napi_env env, const char *what, int err) {
  char text[160], buf[100];
  snprintf(text, sizeof(text), "relay: %s: %s", what, strerror_r(err, buf, sizeof(buf)));
  napi_throw_error(env, NULL, text);
  return NULL;
}

napi_value relay(napi_env env, napi_callback_info info) {
  size_t argc = 3;
  napi_value argv[3], name, out;
  int32_t fd[2] = {-1, -1};
  napi_valuetype type = napi_undefined;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 3 ||
      napi_get_value_int32(env, argv[0], &fd[0]) != napi_ok || napi_get_value_int32(env, argv[1], &fd[1]) != napi_ok ||
      napi_typeof(env, argv[2], &type) != napi_ok || type != napi_function || fd[0] < 0 || fd[1] < 0) {
    napi_throw_type_error(env, NULL, "relay(fdA, fdB, onDone): two descriptors and a function");
    return NULL;
  }
  for (int i = 0; i < 2; i++) {
    int fl = fcntl(fd[i], F_GETFL);
    if (fl < 0) return relay_throw(env, "a descriptor", errno);
    if (!(fl & O_NONBLOCK)) return relay_throw(env, "a blocking descriptor", EINVAL);
  }
  pthread_mutex_lock(&relay_lock);
  int err = relay_start();
  pthread_mutex_unlock(&relay_lock);
  if (err != 0) return relay_throw(env, "its thread", err);
  struct relay_pair *p = calloc(1, sizeof(*p));
  if (!p) return relay_throw(env, "a pair", ENOMEM);
  for (int i = 0; i < 2; i++) {
    p->fd[i] = p->dir[i].pipe[0] = p->dir[i].pipe[1] = -1;
    p->end[i] = (struct relay_end){.pair = p, .side = i};
    p->dir[i].src = i;
    p->dir[i].dst = 1 - i;
  }
  p->result = malloc(sizeof(*p->result));
  if (!p->result) err = ENOMEM;
  for (int i = 0; i < 2 && err == 0; i++) {
    p->fd[i] = fcntl(fd[i], F_DUPFD_CLOEXEC, 0);
    if (p->fd[i] < 0) err = errno;
  }
  if (err == 0 && relay_done_fn == NULL &&
      (napi_create_string_utf8(env, "kctl relay", NAPI_AUTO_LENGTH, &name) != napi_ok ||
       napi_create_threadsafe_function(env, NULL, NULL, name, 0, 1, NULL, NULL, NULL, relay_call_js,
                                       &relay_done_fn) != napi_ok ||
       napi_unref_threadsafe_function(env, relay_done_fn) != napi_ok))
    err = ENOMEM;
  if (err == 0 && napi_create_reference(env, argv[2], 1, &p->on_done) != napi_ok) err = ENOMEM;
  if (err != 0) {
    relay_free_fds(p);
    free(p->result);
    free(p);
    return relay_throw(env, "a pair's descriptors", err);
  }
  if (relay_js_waiting++ == 0) napi_ref_threadsafe_function(env, relay_done_fn);
  __atomic_add_fetch(&relay_open, 1, __ATOMIC_SEQ_CST);
  pthread_mutex_lock(&relay_lock);
  int64_t id = p->id = ++relay_last_id;
  p->next = relay_pairs;
  if (relay_pairs) relay_pairs->prev = p;
  relay_pairs = p;
  for (int i = 0; i < 2 && p->add_error == 0; i++) {
    struct epoll_event ev = {.events = RELAY_EVENTS, .data.ptr = &p->end[i]};
    if (epoll_ctl(relay_epoll, EPOLL_CTL_ADD, p->fd[i], &ev) != 0) {
      p->add_error = errno;
      p->add_side = i;
    }
  }
  // A side may be in the set already, its events on the thread now: the thread ends the pair.
  bool failed = p->add_error != 0;
  if (failed) {
    p->queued_next = relay_failed;
    relay_failed = p;
  }
  pthread_mutex_unlock(&relay_lock);
  if (failed) relay_wake_up();
  if (napi_create_int64(env, id, &out) != napi_ok) return NULL;
  return out;
}

napi_value relay_stop(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  int64_t id;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 1 ||
      napi_get_value_int64(env, argv[0], &id) != napi_ok) {
    napi_throw_type_error(env, NULL, "relayStop(id): the id relay() returned");
    return NULL;
  }
  struct relay_stop *s = malloc(sizeof(*s));
  if (!s) return relay_throw(env, "a stop", ENOMEM);
  s->id = id;
  pthread_mutex_lock(&relay_lock);
  bool started = relay_epoll >= 0;
  if (started) {
    s->next = relay_stops;
    relay_stops = s;
  }
  pthread_mutex_unlock(&relay_lock);
  if (started) relay_wake_up();
  else free(s);
  return NULL;
}

napi_value relay_count(napi_env env, napi_callback_info info) {
  (void)info;
  napi_value out;
  if (napi_create_int32(env, __atomic_load_n(&relay_open, __ATOMIC_SEQ_CST), &out) != napi_ok) return NULL;
  return out;
}

// kctl's native addon, its relay (native.c registers it).
//
// relay(fdA, fdB, onDone): moves the bytes between two connected TCP sockets (the front door's
// client and backend) in the kernel, splice(2) through a pipe per direction, so they never pass
// through JavaScript. One thread of the addon, started on first use, holds every pair in an epoll
// set (edge-triggered: each side is read until EAGAIN, or until its pipe's destination is full,
// which is the backpressure: a direction reads its source again only once EPOLLOUT says its
// destination took the pipe's bytes). A source's EOF, once its pipe is empty, becomes
// shutdown(SHUT_WR) of the destination (half-close); the pair is done when both directions are,
// or at once on an error (a reset). relay() duplicates both descriptors: Node may close its own
// at any time (a destroyed socket) and the thread must never splice to a number reused since.
// When a pair is done the thread closes its duplicates and pipes and calls onDone(bytesAtoB,
// bytesBtoA, errorText or undefined) on the JS thread; JS then destroys its sockets, which ends
// the connections. relayStop(id) ends a pair early (its sockets were destroyed); relayCount() is
// the pairs open. A pipe starts at the kernel's default size and grows to 1 MiB once a direction
// moves bulk, so idle connections cost no more than they must.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <node_api.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>
#include "relay.h"

/* A direction of a pair: from its source side to its destination side through a pipe. */
struct relay_dir {
  int src, dst; /* 0: a, 1: b */
  int pipe[2];
  size_t queued; /* bytes in the pipe */
  size_t size;   /* the pipe's size */
  double moved;  /* bytes written to the destination */
  bool eof, ended, grown;
};

struct relay_pair;
/* What epoll hands back for a socket: its pair and which side it is. */
struct relay_end {
  struct relay_pair *pair;
  int side;
};

struct relay_pair {
  int64_t id;
  int fd[2]; /* the relay's duplicates of a and b */
  struct relay_end end[2];
  struct relay_dir dir[2]; /* a to b, b to a */
  napi_threadsafe_function on_done;
  bool finished;
  struct relay_pair *prev, *next; /* the thread's open pairs */
  struct relay_pair *queued_next; /* new pairs for the thread; then its finished ones */
};

struct relay_result {
  double a_to_b, b_to_a;
  char error[160]; /* empty: none */
};

struct relay_stop {
  int64_t id;
  struct relay_stop *next;
};

#define RELAY_PIPE_BYTES (1 << 20)
#define RELAY_EVENTS (EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET)

/* Shared with the JS thread, under relay_lock. */
static pthread_mutex_t relay_lock = PTHREAD_MUTEX_INITIALIZER;
static struct relay_pair *relay_new;
static struct relay_stop *relay_stops;
static int64_t relay_last_id;
static int relay_epoll = -1, relay_wake = -1;
static int relay_open; /* atomic */
/* The thread's own. */
static struct relay_pair *relay_pairs, *relay_finished;

static const char SIDE[2] = {'a', 'b'};

static void relay_call_js(napi_env env, napi_value on_done, void *context, void *data) {
  (void)context;
  struct relay_result *r = data;
  napi_value argv[3], undefined;
  if (env != NULL && on_done != NULL && napi_get_undefined(env, &undefined) == napi_ok &&
      napi_create_double(env, r ? r->a_to_b : 0, &argv[0]) == napi_ok &&
      napi_create_double(env, r ? r->b_to_a : 0, &argv[1]) == napi_ok) {
    const char *error = r ? r->error : "out of memory";
    argv[2] = undefined;
    if (error[0] == 0 || napi_create_string_utf8(env, error, NAPI_AUTO_LENGTH, &argv[2]) == napi_ok)
      napi_call_function(env, undefined, on_done, 3, argv, NULL);
  }
  free(r);
}

static void relay_free_fds(struct relay_pair *p) {
  for (int i = 0; i < 2; i++) {
    if (p->fd[i] >= 0) close(p->fd[i]);
    if (p->dir[i].pipe[0] >= 0) close(p->dir[i].pipe[0]);
    if (p->dir[i].pipe[1] >= 0) close(p->dir[i].pipe[1]);
  }
}

/* Ends a pair: out of epoll, its duplicates and pipes closed, onDone called; freed after the batch. */
static void relay_finish(struct relay_pair *p, const char *error) {
  p->finished = true;
  for (int i = 0; i < 2; i++) epoll_ctl(relay_epoll, EPOLL_CTL_DEL, p->fd[i], NULL);
  relay_free_fds(p);
  if (p->prev) p->prev->next = p->next;
  else relay_pairs = p->next;
  if (p->next) p->next->prev = p->prev;
  __atomic_sub_fetch(&relay_open, 1, __ATOMIC_SEQ_CST);
  struct relay_result *r = malloc(sizeof(*r));
  if (r) {
    r->a_to_b = p->dir[0].moved;
    r->b_to_a = p->dir[1].moved;
    snprintf(r->error, sizeof(r->error), "%s", error ? error : "");
  }
  if (napi_call_threadsafe_function(p->on_done, r, napi_tsfn_nonblocking) != napi_ok) free(r);
  napi_release_threadsafe_function(p->on_done, napi_tsfn_release);
  p->queued_next = relay_finished;
  relay_finished = p;
}

static void relay_fail(struct relay_pair *p, const char *what, int side, int err) {
  char text[120], buf[100];
  snprintf(text, sizeof(text), "%s %c: %s", what, SIDE[side], strerror_r(err, buf, sizeof(buf)));
  relay_finish(p, text);
}

/* A pipe grows once, when its direction moves bulk; the kernel may refuse (pipe-max-size), then it stays. */
static void relay_grow(struct relay_dir *d) {
  if (d->grown) return;
  d->grown = true;
  int size = fcntl(d->pipe[1], F_SETPIPE_SZ, RELAY_PIPE_BYTES);
  if (size > 0) d->size = (size_t)size;
}

/* Moves what a direction can now; returns when its source is dry, its destination full, or it ended. */
static void relay_pump(struct relay_pair *p, struct relay_dir *d) {
  const unsigned flags = SPLICE_F_NONBLOCK | SPLICE_F_MOVE;
  for (;;) {
    bool moved = false;
    if (!d->eof) {
      ssize_t n = splice(p->fd[d->src], NULL, d->pipe[1], NULL, RELAY_PIPE_BYTES, flags);
      if (n > 0) {
        d->queued += (size_t)n;
        moved = true;
        if ((size_t)n >= d->size / 2) relay_grow(d);
      } else if (n == 0) {
        d->eof = true;
      } else if (errno != EAGAIN) {
        relay_fail(p, "splice from", d->src, errno);
        return;
      }
    }
    if (d->queued > 0) {
      ssize_t n = splice(d->pipe[0], NULL, p->fd[d->dst], NULL, d->queued, flags);
      if (n > 0) {
        d->queued -= (size_t)n;
        d->moved += (double)n;
        moved = true;
      } else if (n < 0 && errno == EAGAIN) {
        // The destination is full: its EPOLLOUT resumes this direction, the source waits in its kernel.
        relay_grow(d);
        return;
      } else if (n < 0) {
        relay_fail(p, "splice to", d->dst, errno);
        return;
      }
    }
    if (d->eof && d->queued == 0) {
      if (shutdown(p->fd[d->dst], SHUT_WR) != 0) relay_fail(p, "shutdown", d->dst, errno);
      d->ended = true;
      return;
    }
    // Edge-triggered: stop only with the source read dry (EAGAIN and an empty pipe).
    if (!moved) return;
  }
}

static void relay_event(struct relay_pair *p, int side, uint32_t events) {
  if (events & EPOLLERR) {
    int err = 0;
    socklen_t len = sizeof(err);
    if (getsockopt(p->fd[side], SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
    if (err != 0) {
      relay_fail(p, "socket", side, err);
      return;
    }
  }
  for (int i = 0; i < 2 && !p->finished; i++) {
    struct relay_dir *d = &p->dir[i];
    bool go = (events & (EPOLLERR | EPOLLHUP)) || (d->src == side && (events & (EPOLLIN | EPOLLRDHUP))) ||
              (d->dst == side && (events & EPOLLOUT) && d->queued > 0);
    if (go && !d->ended) relay_pump(p, d);
  }
  if (!p->finished && p->dir[0].ended && p->dir[1].ended) relay_finish(p, NULL);
}

/* Takes the pairs and stops the JS thread queued. */
static void relay_take(void) {
  uint64_t n;
  if (read(relay_wake, &n, sizeof(n)) < 0) { /* EAGAIN: nothing new. */ }
  pthread_mutex_lock(&relay_lock);
  struct relay_pair *fresh = relay_new;
  struct relay_stop *stops = relay_stops;
  relay_new = NULL;
  relay_stops = NULL;
  pthread_mutex_unlock(&relay_lock);
  while (fresh) {
    struct relay_pair *p = fresh;
    fresh = p->queued_next;
    p->prev = NULL;
    p->next = relay_pairs;
    if (relay_pairs) relay_pairs->prev = p;
    relay_pairs = p;
    for (int i = 0; i < 2 && !p->finished; i++) {
      struct epoll_event ev = {.events = RELAY_EVENTS, .data.ptr = &p->end[i]};
      if (epoll_ctl(relay_epoll, EPOLL_CTL_ADD, p->fd[i], &ev) != 0) relay_fail(p, "epoll", i, errno);
    }
    // What arrived before the pair was added is moved now (its edge may have passed).
    if (!p->finished) relay_event(p, 0, EPOLLIN | EPOLLOUT);
    if (!p->finished) relay_event(p, 1, EPOLLIN | EPOLLOUT);
  }
  while (stops) {
    struct relay_stop *s = stops;
    stops = s->next;
    for (struct relay_pair *p = relay_pairs; p; p = p->next) {
      if (p->id == s->id) {
        relay_finish(p, "stopped");
        break;
      }
    }
    free(s);
  }
}

static void *relay_loop(void *unused) {
  (void)unused;
  struct epoll_event events[64];
  for (;;) {
    int n = epoll_wait(relay_epoll, events, 64, -1);
    for (int i = 0; i < n; i++) {
      struct relay_end *end = events[i].data.ptr;
      if (end == NULL) relay_take();
      else if (!end->pair->finished) relay_event(end->pair, end->side, events[i].events);
    }
    // A pair finished in this batch may still have had events in it: freed only now.
    while (relay_finished) {
      struct relay_pair *p = relay_finished;
      relay_finished = p->queued_next;
      free(p);
    }
  }
  return NULL;
}

/* Starts the thread once (under relay_lock); 0 or an errno. */
static int relay_start(void) {
  if (relay_epoll >= 0) return 0;
  int ep = epoll_create1(EPOLL_CLOEXEC);
  int wake = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
  int err = ep < 0 || wake < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, wake, &ev) != 0 ? errno : 0;
  pthread_t thread;
  pthread_attr_t attr;
  sigset_t all, old;
  if (err == 0) {
    relay_epoll = ep;
    relay_wake = wake;
    // Signals stay the JS thread's; a write to a closed peer gets EPIPE, never SIGPIPE here.
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    err = pthread_create(&thread, &attr, relay_loop, NULL);
    pthread_attr_destroy(&attr);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
  }
  if (err != 0) {
    if (ep >= 0) close(ep);
    if (wake >= 0) close(wake);
    relay_epoll = relay_wake = -1;
  }
  return err;
}

static void relay_wake_up(void) {
  uint64_t one = 1;
  if (write(relay_wake, &one, sizeof(one)) < 0) { /* EAGAIN: the counter is full, the thread is awake anyway. */ }
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
  for (int i = 0; i < 2 && err == 0; i++) {
    p->fd[i] = fcntl(fd[i], F_DUPFD_CLOEXEC, 0);
    if (p->fd[i] < 0 || pipe2(p->dir[i].pipe, O_NONBLOCK | O_CLOEXEC) != 0) err = errno;
    else p->dir[i].size = (size_t)fcntl(p->dir[i].pipe[1], F_GETPIPE_SZ);
  }
  if (err == 0 && (napi_create_string_utf8(env, "kctl relay", NAPI_AUTO_LENGTH, &name) != napi_ok ||
                   napi_create_threadsafe_function(env, argv[2], NULL, name, 0, 1, NULL, NULL, NULL, relay_call_js,
                                                   &p->on_done) != napi_ok))
    err = ENOMEM;
  if (err != 0) {
    relay_free_fds(p);
    free(p);
    return relay_throw(env, "a pair's descriptors", err);
  }
  __atomic_add_fetch(&relay_open, 1, __ATOMIC_SEQ_CST);
  pthread_mutex_lock(&relay_lock);
  int64_t id = p->id = ++relay_last_id; // p is the thread's once queued
  p->queued_next = relay_new;
  relay_new = p;
  pthread_mutex_unlock(&relay_lock);
  relay_wake_up();
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
  bool started = relay_wake >= 0;
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

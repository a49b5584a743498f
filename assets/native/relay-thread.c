// kctl's native addon: the relay's thread (relay.c says how the relay works). It alone ends pairs.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>
#include "relay-internal.h"

#define RELAY_PIPE_BYTES (1 << 20)

pthread_mutex_t relay_lock = PTHREAD_MUTEX_INITIALIZER;
struct relay_pair *relay_pairs;
struct relay_pair *relay_failed;
struct relay_stop *relay_stops;
int relay_epoll = -1;
int relay_open;
napi_threadsafe_function relay_done_fn;
static int relay_wake = -1;
/* Pairs ended in this batch of events, freed after it. */
static struct relay_pair *relay_finished;

static const char SIDE[2] = {'a', 'b'};

void relay_free_fds(struct relay_pair *p) {
  for (int i = 0; i < 2; i++) {
    if (p->fd[i] >= 0) close(p->fd[i]);
    if (p->dir[i].pipe[0] >= 0) close(p->dir[i].pipe[0]);
    if (p->dir[i].pipe[1] >= 0) close(p->dir[i].pipe[1]);
  }
}

/* Ends a pair: out of epoll, its duplicates and pipes closed, onDone called; freed after the batch. */
static void relay_finish(struct relay_pair *p, const char *error) {
  p->finished = true;
  pthread_mutex_lock(&relay_lock);
  for (int i = 0; i < 2; i++) epoll_ctl(relay_epoll, EPOLL_CTL_DEL, p->fd[i], NULL);
  relay_free_fds(p);
  if (p->prev) p->prev->next = p->next;
  else if (relay_pairs == p) relay_pairs = p->next;
  if (p->next) p->next->prev = p->prev;
  pthread_mutex_unlock(&relay_lock);
  __atomic_sub_fetch(&relay_open, 1, __ATOMIC_SEQ_CST);
  // Sized ahead (relay()): a failed malloc here would leave JS waiting for ever.
  struct relay_result *r = p->result;
  p->result = NULL;
  r->on_done = p->on_done;
  r->a_to_b = p->dir[0].moved;
  r->b_to_a = p->dir[1].moved;
  snprintf(r->error, sizeof(r->error), "%s", error ? error : "");
  if (napi_call_threadsafe_function(relay_done_fn, r, napi_tsfn_nonblocking) != napi_ok) free(r);
  p->queued_next = relay_finished;
  relay_finished = p;
}

static void relay_fail(struct relay_pair *p, const char *what, int side, int err) {
  char text[120], buf[100];
  snprintf(text, sizeof(text), "%s %c: %s", what, SIDE[side], strerror_r(err, buf, sizeof(buf)));
  relay_finish(p, text);
}

/* Pipes are lent to a direction while it has bytes in flight and given back once it is empty:
   an idle connection holds none, and a flight seldom waits for a pipe to be made. */
struct relay_pipe {
  int fd[2];
  size_t size;
};
#define RELAY_POOL_MAX 64
static struct relay_pipe relay_pool[RELAY_POOL_MAX];
static int relay_pooled;

static bool relay_lend(struct relay_dir *d) {
  if (relay_pooled > 0) {
    struct relay_pipe *x = &relay_pool[--relay_pooled];
    d->pipe[0] = x->fd[0];
    d->pipe[1] = x->fd[1];
    d->size = x->size;
    return true;
  }
  if (pipe2(d->pipe, O_NONBLOCK | O_CLOEXEC) != 0) {
    d->pipe[0] = d->pipe[1] = -1;
    return false;
  }
  int size = fcntl(d->pipe[1], F_GETPIPE_SZ);
  d->size = size > 0 ? (size_t)size : 65536;
  return true;
}

static void relay_give_back(struct relay_dir *d) {
  if (d->pipe[0] < 0 || d->queued > 0) return;
  if (relay_pooled < RELAY_POOL_MAX) {
    relay_pool[relay_pooled++] = (struct relay_pipe){{d->pipe[0], d->pipe[1]}, d->size};
  } else {
    close(d->pipe[0]);
    close(d->pipe[1]);
  }
  d->pipe[0] = d->pipe[1] = -1;
}

/* A direction that moves bulk grows its pipe to 1 MiB, once; the kernel may refuse (pipe-max-size). */
static void relay_grow(struct relay_dir *d) {
  if (d->grown || d->size >= RELAY_PIPE_BYTES) return;
  d->grown = true;
  int size = fcntl(d->pipe[1], F_SETPIPE_SZ, RELAY_PIPE_BYTES);
  if (size > 0) d->size = (size_t)size;
}

/* Asks for EPOLLOUT on a side from now on (edge-triggered: a MOD reports it at once if it is writable already). */
static void relay_want_out(struct relay_pair *p, int side) {
  if (p->out[side]) return;
  struct epoll_event ev = {.events = RELAY_EVENTS | EPOLLOUT, .data.ptr = &p->end[side]};
  pthread_mutex_lock(&relay_lock);
  int rc = epoll_ctl(relay_epoll, EPOLL_CTL_MOD, p->fd[side], &ev);
  pthread_mutex_unlock(&relay_lock);
  if (rc != 0) relay_fail(p, "epoll", side, errno);
  else p->out[side] = true;
}

/* Moves what a direction can now; returns when its source is dry, its destination full, or it ended. */
static void relay_pump(struct relay_pair *p, struct relay_dir *d) {
  const unsigned flags = SPLICE_F_NONBLOCK | SPLICE_F_MOVE;
  if (d->pipe[0] < 0 && !relay_lend(d)) {
    relay_fail(p, "a pipe for", d->src, errno);
    return;
  }
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
        relay_want_out(p, d->dst);
        return;
      } else if (n < 0) {
        relay_fail(p, "splice to", d->dst, errno);
        return;
      }
    }
    if (d->eof && d->queued == 0) {
      relay_give_back(d);
      if (shutdown(p->fd[d->dst], SHUT_WR) != 0) relay_fail(p, "shutdown", d->dst, errno);
      d->ended = true;
      return;
    }
    // Edge-triggered: stop only with the source read dry (EAGAIN and an empty pipe).
    if (!moved) return relay_give_back(d);
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

/* Ends the pairs relay() could not add and those the JS thread stopped. */
static void relay_take(void) {
  uint64_t n;
  if (read(relay_wake, &n, sizeof(n)) < 0) { /* EAGAIN: nothing new. */ }
  pthread_mutex_lock(&relay_lock);
  struct relay_pair *failed = relay_failed;
  struct relay_stop *stops = relay_stops;
  relay_failed = NULL;
  relay_stops = NULL;
  pthread_mutex_unlock(&relay_lock);
  while (failed) {
    struct relay_pair *p = failed;
    failed = p->queued_next;
    if (!p->finished) relay_fail(p, "epoll", p->add_side, p->add_error);
  }
  while (stops) {
    struct relay_stop *s = stops;
    stops = s->next;
    pthread_mutex_lock(&relay_lock);
    struct relay_pair *p = relay_pairs;
    while (p && p->id != s->id) p = p->next;
    pthread_mutex_unlock(&relay_lock); // only this thread ends pairs: p stays valid
    if (p && !p->finished) relay_finish(p, "stopped");
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

int relay_start(void) {
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

void relay_wake_up(void) {
  uint64_t one = 1;
  if (write(relay_wake, &one, sizeof(one)) < 0) { /* EAGAIN: the counter is full, the thread is awake anyway. */ }
}

// The relay's two halves share these (relay-internal.h): relay.c is what JS calls, relay-thread.c
// the thread that moves the bytes. See relay.c for how it works.
#ifndef KCTL_RELAY_INTERNAL_H
#define KCTL_RELAY_INTERNAL_H
#include <node_api.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/epoll.h>


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
  napi_ref on_done;       /* touched on the JS thread only */
  struct relay_result *result;
  int add_error, add_side; /* relay() could not add a side */
  bool out[2];             /* EPOLLOUT asked for on a side */
  bool finished;
  struct relay_pair *prev, *next; /* the thread's open pairs */
  struct relay_pair *queued_next; /* new pairs for the thread; then its finished ones */
};

struct relay_result {
  napi_ref on_done;
  double a_to_b, b_to_a;
  char error[160]; /* empty: none */
};

struct relay_stop {
  int64_t id;
  struct relay_stop *next;
};

#define RELAY_EVENTS (EPOLLIN | EPOLLRDHUP | EPOLLET)

/* Shared with the JS thread, under relay_lock: also held while relay() adds a pair's sides, so the
   thread never changes or ends a pair half added. */
extern pthread_mutex_t relay_lock;
extern struct relay_pair *relay_pairs;  /* open pairs */
extern struct relay_pair *relay_failed; /* pairs relay() could not add, for the thread to end */
extern struct relay_stop *relay_stops;
extern int relay_epoll;
extern int relay_open; /* atomic */
/* Made by the JS thread on its first relay(); the thread calls it when a pair is done. */
extern napi_threadsafe_function relay_done_fn;

void relay_free_fds(struct relay_pair *p);
/* Starts the thread once (under relay_lock); 0 or an errno. */
int relay_start(void);
void relay_wake_up(void);

#endif

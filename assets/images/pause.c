/*
 * kctl's pod sandbox ("pause") process: holds the pod's namespaces open and does nothing
 * else. Exits 0 on SIGINT/SIGTERM; reaps zombies on SIGCHLD (it is PID 1 of a pod that
 * shares its PID namespace). Built with `gcc -static -Os` by assets/build-images.ts.
 */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

static void on_exit_signal(int sig) {
  (void)sig;
  _exit(0);
}

static void on_child(int sig) {
  (void)sig;
  while (waitpid(-1, NULL, WNOHANG) > 0) {
  }
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "-v") == 0) {
    puts("kctl pause 1.0");
    return 0;
  }
  if (getpid() != 1) fprintf(stderr, "pause: warning: not running as PID 1\n");

  /* Block everything except the signals we act on (and the ones that cannot be blocked). */
  sigset_t blocked;
  sigfillset(&blocked);
  sigdelset(&blocked, SIGINT);
  sigdelset(&blocked, SIGTERM);
  sigdelset(&blocked, SIGCHLD);
  sigprocmask(SIG_SETMASK, &blocked, NULL);

  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_exit_signal;
  if (sigaction(SIGINT, &sa, NULL) < 0 || sigaction(SIGTERM, &sa, NULL) < 0) return 1;
  sa.sa_handler = on_child;
  sa.sa_flags = SA_NOCLDSTOP | SA_RESTART;
  if (sigaction(SIGCHLD, &sa, NULL) < 0) return 2;

  for (;;) pause();
  return 42; /* not reached */
}

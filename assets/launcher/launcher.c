// The first bytes of dist/kctl. The Node runtime that runs kctl (with kctl's code inside it) is
// ~110 MB and cannot be compressed in place: the kernel maps an executable as it lies. So the
// executable starts with this small static program, carries the runtime zstd-compressed, and
// this program unpacks it once per kctl build into a runtime directory, checks its sha256, and
// execs it with the same argv (argv[0] included: `proxy-agent` still selects the agent).
// KCTL_EXECUTABLE tells kctl which file carries its payload, since /proc/self/exe will be the
// unpacked runtime. Later starts check the unpacked file's stamp (inode, ctime, size, written
// after verifying) and exec at once; a file that changed since is hashed again, and unpacked again
// if its bytes are no longer right.
//
// Written in C, not in Node: it must run before there is a runtime. Layout in
// src/payload/payload.ts (the trailer at the end of the file says where the runtime lies).
#define _GNU_SOURCE
#include <errno.h>
#include <dirent.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

#include "sha256.h"

#define TRAILER_MAGIC "KCTLPAY2"
#define TRAILER_SIZE 80
#define RUNTIME_DIR_ROOT "/var/cache/kctl/runtime"
#define PATH_BUF 4096
#define TMP_BUF (PATH_BUF + 32)

struct trailer {
  uint64_t runtime_offset, runtime_stored, runtime_size;
  uint8_t sha256[32];
};

static void die(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("kctl: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  exit(1);
}

static uint64_t le64(const unsigned char *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
  return v;
}

static int read_at(int fd, void *buf, size_t len, off_t at) {
  size_t done = 0;
  while (done < len) {
    ssize_t n = pread(fd, (char *)buf + done, len - done, at + (off_t)done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return -1;
    done += (size_t)n;
  }
  return 0;
}

static int write_all(int fd, const void *buf, size_t len) {
  size_t done = 0;
  while (done < len) {
    ssize_t n = write(fd, (const char *)buf + done, len - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return -1;
    done += (size_t)n;
  }
  return 0;
}

static struct trailer read_trailer(int fd, const char *exe) {
  struct stat st;
  unsigned char raw[TRAILER_SIZE];
  if (fstat(fd, &st) != 0 || st.st_size < TRAILER_SIZE || read_at(fd, raw, TRAILER_SIZE, st.st_size - TRAILER_SIZE) != 0 ||
      memcmp(raw, TRAILER_MAGIC, 8) != 0)
    die("%s carries no kctl runtime (no payload trailer); it is damaged or not a kctl build, reinstall kctl", exe);
  uint64_t index_offset = le64(raw + 8), index_length = le64(raw + 16);
  struct trailer t = {le64(raw + 24), le64(raw + 32), le64(raw + 40), {0}};
  memcpy(t.sha256, raw + 48, 32);
  // Each sum is checked against its bound without overflowing: the trailer is untrusted input.
  uint64_t size = (uint64_t)st.st_size - TRAILER_SIZE;
  if (index_offset > size || index_length != size - index_offset || t.runtime_stored == 0 || t.runtime_stored > index_offset ||
      t.runtime_offset > index_offset - t.runtime_stored)
    die("%s: its payload trailer is inconsistent; the executable is damaged, reinstall kctl", exe);
  return t;
}

static void hex(const uint8_t *sha, char out[65]) {
  for (int i = 0; i < 32; i++) sprintf(out + 2 * i, "%02x", sha[i]);
}

/**
 * mkdir, giving a directory it makes exactly `mode` whatever the umask: kctl runs with 0077 and
 * starts itself again (the staging child), and the parents made here (/var/cache) are everyone's.
 */
static void make_dir(const char *path, mode_t mode) {
  if (mkdir(path, mode) == 0) {
    if (chmod(path, mode) != 0) die("cannot set the mode of %s: %s", path, strerror(errno));
  } else if (errno != EEXIST) {
    die("cannot create %s: %s; set KCTL_RUNTIME_DIR to a writable directory", path, strerror(errno));
  }
}

static void mkdirs(const char *path, mode_t mode) {
  char buf[PATH_BUF];
  if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf) die("runtime directory %s: path too long", path);
  for (char *p = buf + 1; *p; p++) {
    if (*p != '/') continue;
    *p = 0;
    make_dir(buf, 0755);
    *p = '/';
  }
  make_dir(buf, mode);
}

/** Where runtimes are unpacked: KCTL_RUNTIME_DIR, else a system cache for root, else the user's cache. */
static const char *runtime_dir(void) {
  static char buf[PATH_BUF];
  const char *env = getenv("KCTL_RUNTIME_DIR");
  if (env && *env) {
    if (env[0] != '/') die("KCTL_RUNTIME_DIR=%s is not an absolute path", env);
    return env;
  }
  if (geteuid() == 0) return RUNTIME_DIR_ROOT;
  const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
  if (xdg && xdg[0] == '/') snprintf(buf, sizeof buf, "%s/kctl/runtime", xdg);
  else if (home && home[0] == '/') snprintf(buf, sizeof buf, "%s/.cache/kctl/runtime", home);
  else die("no place to unpack the kctl runtime: HOME is not set; set KCTL_RUNTIME_DIR to a private directory");
  return buf;
}

/** The directory must be ours and writable by nobody else: whoever can write there chooses what kctl runs. */
static void check_private(const char *dir) {
  struct stat st;
  if (lstat(dir, &st) != 0) die("runtime directory %s: %s", dir, strerror(errno));
  if (!S_ISDIR(st.st_mode)) die("runtime directory %s is not a directory; remove it or set KCTL_RUNTIME_DIR", dir);
  if (st.st_uid != geteuid() || (st.st_mode & 022))
    die("runtime directory %s is owned by uid %u with mode %03o: it must belong to uid %u and be writable by no one else; fix it or set KCTL_RUNTIME_DIR",
        dir, (unsigned)st.st_uid, (unsigned)(st.st_mode & 0777), (unsigned)geteuid());
}

static void stamp_text(const struct stat *st, char *out, size_t len) {
  snprintf(out, len, "%llu %lld.%09ld %lld\n", (unsigned long long)st->st_ino, (long long)st->st_ctim.tv_sec, st->st_ctim.tv_nsec,
           (long long)st->st_size);
}

static int stamp_matches(const char *stamp, const struct stat *st) {
  char want[128], have[128] = {0};
  stamp_text(st, want, sizeof want);
  int fd = open(stamp, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  ssize_t n = read(fd, have, sizeof have - 1);
  close(fd);
  return n > 0 && strcmp(want, have) == 0;
}

static void write_stamp(const char stamp[PATH_BUF], const char *file) {
  struct stat st;
  char text[128], tmp[TMP_BUF];
  if (stat(file, &st) != 0) return;
  stamp_text(&st, text, sizeof text);
  snprintf(tmp, sizeof tmp, "%s.%d.tmp", stamp, (int)getpid());
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return; // without a stamp the next start hashes the file again: slower, still right
  int ok = write_all(fd, text, strlen(text)) == 0;
  close(fd);
  if (!ok || rename(tmp, stamp) != 0) unlink(tmp);
}

/** Whether `file` holds exactly the runtime: the right size, owned by us, not writable by others, the right sha256. */
static int verify_file(const char *file, const struct trailer *t) {
  struct stat st;
  if (lstat(file, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 022) ||
      (uint64_t)st.st_size != t->runtime_size)
    return 0;
  int fd = open(file, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  static unsigned char buf[1 << 20];
  struct sha256 h;
  sha256_init(&h);
  ssize_t n;
  while ((n = read(fd, buf, sizeof buf)) > 0) sha256_update(&h, buf, (size_t)n);
  close(fd);
  uint8_t sum[32];
  sha256_final(&h, sum);
  return n == 0 && memcmp(sum, t->sha256, 32) == 0;
}

/**
 * Unpacks the runtime into `file` (through a temporary file and a rename). Returns NULL, or why
 * not, leaving nothing; `*damaged` says whether the fault is in the executable's bytes.
 */
#define BAD(reason) (*damaged = 1, (reason))
static const char *unpack(int exe_fd, const struct trailer *t, const char file[PATH_BUF], int *damaged) {
  *damaged = 0;
  char tmp[TMP_BUF];
  snprintf(tmp, sizeof tmp, "%s.%d.tmp", file, (int)getpid());
  int out = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0700);
  if (out < 0) return strerror(errno);
  ZSTD_DCtx *z = ZSTD_createDCtx();
  size_t in_cap = ZSTD_DStreamInSize(), out_cap = ZSTD_DStreamOutSize();
  unsigned char *in_buf = malloc(in_cap), *out_buf = malloc(out_cap);
  if (!z || !in_buf || !out_buf) die("out of memory unpacking the runtime");
  struct sha256 h;
  sha256_init(&h);
  uint64_t read_so_far = 0, written = 0;
  const char *why = NULL;
  size_t last = 1;
  while (!why && read_so_far < t->runtime_stored) {
    size_t want = t->runtime_stored - read_so_far < in_cap ? (size_t)(t->runtime_stored - read_so_far) : in_cap;
    if (read_at(exe_fd, in_buf, want, (off_t)(t->runtime_offset + read_so_far)) != 0) {
      why = BAD("cannot be read");
      break;
    }
    read_so_far += want;
    ZSTD_inBuffer zin = {in_buf, want, 0};
    while (!why && zin.pos < zin.size) {
      ZSTD_outBuffer zout = {out_buf, out_cap, 0};
      last = ZSTD_decompressStream(z, &zout, &zin);
      if (ZSTD_isError(last)) why = BAD("is not valid zstd");
      else if (written + zout.pos > t->runtime_size) why = BAD("is longer than its trailer says");
      else if (write_all(out, out_buf, zout.pos) != 0) why = strerror(errno);
      else {
        sha256_update(&h, out_buf, zout.pos);
        written += zout.pos;
      }
    }
  }
  uint8_t sum[32];
  sha256_final(&h, sum);
  if (!why && (last != 0 || written != t->runtime_size)) why = BAD("is truncated");
  if (!why && memcmp(sum, t->sha256, 32) != 0) why = BAD("does not match its sha256");
  if (!why && (fchmod(out, 0755) != 0 || fsync(out) != 0)) why = strerror(errno);
  close(out);
  ZSTD_freeDCtx(z);
  free(in_buf);
  free(out_buf);
  if (!why && rename(tmp, file) != 0) why = strerror(errno);
  if (why) unlink(tmp);
  return why;
}

/**
 * Creates `path` and holds a shared lock on it until exec, so that another build's launcher does not
 * prune it between this one's check and its exec (after exec, /proc/<pid>/exe marks it in use). A
 * pruner may have removed the directory between mkdir and the lock: then it is made again.
 */
static void hold_version_dir(const char *path) {
  for (int attempt = 0; attempt < 20; attempt++) {
    mkdirs(path, 0755);
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT) continue;
    if (fd < 0) die("cannot open %s: %s; set KCTL_RUNTIME_DIR to a writable directory", path, strerror(errno));
    if (flock(fd, LOCK_SH) != 0) die("cannot lock %s: %s", path, strerror(errno));
    struct stat held, now;
    if (fstat(fd, &held) == 0 && stat(path, &now) == 0 && held.st_ino == now.st_ino && held.st_dev == now.st_dev) return; // fd stays open: the lock lasts until exec
    close(fd);
  }
  die("%s keeps being removed while kctl starts; set KCTL_RUNTIME_DIR to a directory only kctl uses", path);
}

/** Whether any process runs `file` (its /proc/<pid>/exe). */
static int in_use(const char *file) {
  DIR *proc = opendir("/proc");
  if (!proc) return 1; // cannot tell: keep it
  struct dirent *e;
  char link[64], target[PATH_BUF];
  int used = 0;
  while (!used && (e = readdir(proc))) {
    if (e->d_name[0] < '1' || e->d_name[0] > '9') continue;
    snprintf(link, sizeof link, "/proc/%.20s/exe", e->d_name);
    ssize_t n = readlink(link, target, sizeof target - 1);
    if (n <= 0) continue;
    target[n] = 0;
    char *deleted = strstr(target, " (deleted)");
    if (deleted) *deleted = 0;
    used = strcmp(target, file) == 0;
  }
  closedir(proc);
  return used;
}

static int is_build_dir(const char *name) { return strlen(name) == 64 && strspn(name, "0123456789abcdef") == 64; }

/**
 * The other build whose runtime was checked last (the newest stamp): the build an upgrade came
 * from, which a rollback starts again. Empty when there is none.
 */
static void newest_other(const char *dir, const char *self, char out[65]) {
  out[0] = 0;
  DIR *d = opendir(dir);
  if (!d) return;
  struct dirent *e;
  struct stat st;
  char stamp[PATH_BUF];
  struct timespec newest = {0, 0};
  while ((e = readdir(d))) {
    if (!is_build_dir(e->d_name) || strcmp(e->d_name, self) == 0) continue;
    snprintf(stamp, sizeof stamp, "%s/%s/kctl.stamp", dir, e->d_name);
    if (stat(stamp, &st) != 0) continue;
    if (!out[0] || st.st_mtim.tv_sec > newest.tv_sec || (st.st_mtim.tv_sec == newest.tv_sec && st.st_mtim.tv_nsec > newest.tv_nsec)) {
      newest = st.st_mtim;
      memcpy(out, e->d_name, 65);
    }
  }
  closedir(d);
}

/**
 * After an upgrade unpacked a new runtime: removes the runtimes of other kctl builds that no
 * process runs, so upgrades do not pile up ~110 MB each, but keeps the previous build's (a
 * rollback starts it without unpacking). A build started later unpacks its own again.
 */
static void prune_others(const char *dir, const char *keep) {
  char previous[65];
  newest_other(dir, keep, previous);
  DIR *d = opendir(dir);
  if (!d) return;
  struct dirent *e;
  char file[PATH_BUF], other[PATH_BUF - 16];
  while ((e = readdir(d))) {
    if (!is_build_dir(e->d_name) || strcmp(e->d_name, keep) == 0 || strcmp(e->d_name, previous) == 0) continue;
    snprintf(other, sizeof other, "%s/%s", dir, e->d_name);
    // A launcher of that build between its check and its exec holds a shared lock: leave it be.
    int fd = open(other, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) continue;
    snprintf(file, sizeof file, "%s/kctl", other);
    if (flock(fd, LOCK_EX | LOCK_NB) == 0 && !in_use(file)) {
      unlink(file);
      snprintf(file, sizeof file, "%s/kctl.stamp", other);
      unlink(file);
      rmdir(other);
    }
    close(fd);
  }
  closedir(d);
}

int main(int argc, char **argv) {
  (void)argc;
  char exe[PATH_BUF];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) die("cannot find this executable (/proc/self/exe): %s; is /proc mounted?", strerror(errno));
  exe[n] = 0;
  int fd = open(exe, O_RDONLY | O_CLOEXEC);
  if (fd < 0) die("cannot read %s: %s", exe, strerror(errno));
  struct trailer t = read_trailer(fd, exe);

  const char *dir = runtime_dir();
  if (strlen(dir) > PATH_BUF - 100) die("runtime directory %s: path too long", dir);
  mkdirs(dir, 0755);
  check_private(dir);
  // <dir>/<sha256>/kctl: one directory per build, and every kctl process's /proc/<pid>/exe ends in kctl.
  char sha[65], version_dir[PATH_BUF - 16], file[PATH_BUF], stamp[PATH_BUF];
  hex(t.sha256, sha);
  snprintf(version_dir, sizeof version_dir, "%s/%s", dir, sha);
  hold_version_dir(version_dir);
  check_private(version_dir);
  snprintf(file, sizeof file, "%s/kctl", version_dir);
  snprintf(stamp, sizeof stamp, "%s/kctl.stamp", version_dir);

  struct stat st;
  int fresh = lstat(file, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == geteuid() && !(st.st_mode & 022) && stamp_matches(stamp, &st);
  if (!fresh) {
    int damaged = 0, unpacked = !verify_file(file, &t);
    const char *why = unpacked ? unpack(fd, &t, file, &damaged) : NULL;
    if (why) {
      rmdir(version_dir); // only when empty: nothing half-written stays behind
      if (damaged) die("the runtime inside %s %s; the executable is damaged, reinstall kctl", exe, why);
      die("cannot unpack the runtime into %s: %s; set KCTL_RUNTIME_DIR to a writable directory", version_dir, why);
    }
    write_stamp(stamp, file);
    if (unpacked) prune_others(dir, sha);
  }
  close(fd);

  if (setenv("KCTL_EXECUTABLE", exe, 1) != 0) die("cannot set KCTL_EXECUTABLE: %s", strerror(errno));
  execv(file, argv);
  die("cannot run %s: %s%s", file, strerror(errno),
      errno == EACCES ? " (is its file system mounted noexec? set KCTL_RUNTIME_DIR to a directory that allows execution)" : "");
  return 1;
}

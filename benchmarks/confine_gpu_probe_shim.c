// LD_PRELOAD library of benchmarks/confine_gpu_probe.py: logs every file, ioctl, mmap and socket call that
// fails with EACCES, EPERM, ECONNREFUSED or EAFNOSUPPORT (what Landlock and seccomp answer) to $PROBE_DENIED_LOG,
// one line each: program, operation, error, path.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>
#include <dirent.h>
#include <sys/mman.h>

static void note(const char *op, const char *path, int err) {
  if (err != EACCES && err != EPERM && err != ECONNREFUSED && err != EAFNOSUPPORT) return;
  const char *log = getenv("PROBE_DENIED_LOG");
  if (!log || !path) return;
  char comm[64] = "?";
  int (*real_open)(const char *, int, ...) = dlsym(RTLD_NEXT, "open");
  int fd = real_open("/proc/self/comm", O_RDONLY);
  if (fd >= 0) { ssize_t n = read(fd, comm, sizeof comm - 1); if (n > 0) comm[n - 1] = 0; close(fd); }
  int out = real_open(log, O_WRONLY | O_APPEND | O_CREAT, 0600);
  if (out < 0) return;
  char line[4600];
  int n = snprintf(line, sizeof line, "%s\t%s\t%s\t%s\n", comm, op, strerror(err), path);
  if (n > 0) write(out, line, n > (int)sizeof line ? (int)sizeof line : n);
  close(out);
  errno = err;
}

static void note_fd(const char *op, int fd, int err) {
  char link[64], path[4096];
  snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  ssize_t n = readlink(link, path, sizeof path - 1);
  path[n > 0 ? n : 0] = 0;
  note(op, n > 0 ? path : "?", err);
}
int ioctl(int fd, unsigned long req, ...) { va_list ap; va_start(ap, req); void *arg = va_arg(ap, void *); va_end(ap);
  static int (*f)(int, unsigned long, ...); if (!f) f = dlsym(RTLD_NEXT, "ioctl");
  int r = f(fd, req, arg); if (r < 0) { int e = errno; char op[48]; snprintf(op, sizeof op, "ioctl 0x%lx", req); note_fd(op, fd, e); errno = e; } return r; }
void *mmap(void *a, size_t l, int p, int fl, int fd, off_t o) { static void *(*f)(void *, size_t, int, int, int, off_t);
  if (!f) f = dlsym(RTLD_NEXT, "mmap");
  void *r = f(a, l, p, fl, fd, o); if (r == (void *)-1 && fd >= 0) { int e = errno; note_fd("mmap", fd, e); errno = e; } return r; }
int socket(int d, int t, int pr) { static int (*f)(int, int, int); if (!f) f = dlsym(RTLD_NEXT, "socket");
  int r = f(d, t, pr); if (r < 0) { int e = errno; char what[64]; snprintf(what, sizeof what, "family %d type %d", d, t); note("socket", what, e); errno = e; } return r; }
#include <sys/socket.h>
#include <sys/un.h>
int connect(int fd, const struct sockaddr *a, socklen_t l) { static int (*f)(int, const struct sockaddr *, socklen_t);
  if (!f) f = dlsym(RTLD_NEXT, "connect");
  int r = f(fd, a, l); if (r < 0) { int e = errno; char what[200] = "?";
    if (a && a->sa_family == AF_UNIX) snprintf(what, sizeof what, "unix:%s%s", ((struct sockaddr_un *)a)->sun_path[0] ? "" : "@", ((struct sockaddr_un *)a)->sun_path + (((struct sockaddr_un *)a)->sun_path[0] ? 0 : 1));
    else if (a) snprintf(what, sizeof what, "family %d", a->sa_family);
    note("connect", what, e); errno = e; } return r; }

#define MODE_ARG mode_t mode = 0; if (flags & (O_CREAT | O_TMPFILE)) { va_list ap; va_start(ap, flags); mode = va_arg(ap, mode_t); va_end(ap); }
int open(const char *p, int flags, ...) { MODE_ARG; static int (*f)(const char *, int, ...); if (!f) f = dlsym(RTLD_NEXT, "open");
  int r = f(p, flags, mode); if (r < 0) note("open", p, errno); return r; }
int open64(const char *p, int flags, ...) { MODE_ARG; static int (*f)(const char *, int, ...); if (!f) f = dlsym(RTLD_NEXT, "open64");
  int r = f(p, flags, mode); if (r < 0) note("open", p, errno); return r; }
int openat(int d, const char *p, int flags, ...) { MODE_ARG; static int (*f)(int, const char *, int, ...); if (!f) f = dlsym(RTLD_NEXT, "openat");
  int r = f(d, p, flags, mode); if (r < 0) note("openat", p, errno); return r; }
int openat64(int d, const char *p, int flags, ...) { MODE_ARG; static int (*f)(int, const char *, int, ...); if (!f) f = dlsym(RTLD_NEXT, "openat64");
  int r = f(d, p, flags, mode); if (r < 0) note("openat", p, errno); return r; }
int __open_2(const char *p, int flags) { static int (*f)(const char *, int); if (!f) f = dlsym(RTLD_NEXT, "__open_2");
  int r = f(p, flags); if (r < 0) note("open", p, errno); return r; }
int __open64_2(const char *p, int flags) { static int (*f)(const char *, int); if (!f) f = dlsym(RTLD_NEXT, "__open64_2");
  int r = f(p, flags); if (r < 0) note("open", p, errno); return r; }
FILE *fopen(const char *p, const char *m) { static FILE *(*f)(const char *, const char *); if (!f) f = dlsym(RTLD_NEXT, "fopen");
  FILE *r = f(p, m); if (!r) note("fopen", p, errno); return r; }
FILE *fopen64(const char *p, const char *m) { static FILE *(*f)(const char *, const char *); if (!f) f = dlsym(RTLD_NEXT, "fopen64");
  FILE *r = f(p, m); if (!r) note("fopen", p, errno); return r; }
int access(const char *p, int m) { static int (*f)(const char *, int); if (!f) f = dlsym(RTLD_NEXT, "access");
  int r = f(p, m); if (r < 0) note("access", p, errno); return r; }
int mkdir(const char *p, mode_t m) { static int (*f)(const char *, mode_t); if (!f) f = dlsym(RTLD_NEXT, "mkdir");
  int r = f(p, m); if (r < 0) note("mkdir", p, errno); return r; }
int unlink(const char *p) { static int (*f)(const char *); if (!f) f = dlsym(RTLD_NEXT, "unlink");
  int r = f(p); if (r < 0) note("unlink", p, errno); return r; }
int rename(const char *a, const char *b) { static int (*f)(const char *, const char *); if (!f) f = dlsym(RTLD_NEXT, "rename");
  int r = f(a, b); if (r < 0) note("rename", b, errno); return r; }
DIR *opendir(const char *p) { static DIR *(*f)(const char *); if (!f) f = dlsym(RTLD_NEXT, "opendir");
  DIR *r = f(p); if (!r) note("opendir", p, errno); return r; }
int stat(const char *p, struct stat *s) { static int (*f)(const char *, struct stat *); if (!f) f = dlsym(RTLD_NEXT, "stat");
  int r = f(p, s); if (r < 0) note("stat", p, errno); return r; }

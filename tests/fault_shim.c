/* An LD_PRELOAD shim that makes one of the I/O calls Chassis makes fail, in the spirit of
 * SQLite's fault-injecting VFS. tests/test_faults.py compiles it with the system cc and runs
 * child processes under it.
 *
 * Every call below is a failure point when it touches a file whose path contains
 * CHASSIS_FAULT_MATCH (a folder of the test's): the shim numbers those calls 1, 2, 3, ... and
 * appends "<n> <call> <path>" to CHASSIS_FAULT_LOG if set. Call number CHASSIS_FAULT_AT fails
 * with errno CHASSIS_FAULT_ERRNO (5 = EIO by default) without doing anything, and with
 * CHASSIS_FAULT_MODE=always so does every later one. CHASSIS_FAULT_AT=0 fails nothing (a
 * counting run). CHASSIS_FAULT_MODE=kill fails call N once and SIGKILLs the process at the
 * next failure point: a writer killed while it handles a failing disk.
 *
 * Covered calls: fsync, fdatasync, msync, pwrite64, pwrite, write, ftruncate64, ftruncate,
 * posix_fallocate64, posix_fallocate, fallocate64, fallocate, rename, renameat, renameat2,
 * link, linkat, unlink, open/openat for creating files. A call the core makes that is not in
 * this list is not a failure point: test_faults.py checks the calls it saw against the
 * system calls the core's source names, so a new kind of call fails the test until it is
 * covered here. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <signal.h>
#include <sys/types.h>
#include <unistd.h>

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static long counter = 0;

static const char *env(const char *name) {
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

/* The path an open descriptor names ("" if unknown). */
static void fd_path(int fd, char *out, size_t n) {
    char link[64];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t len = readlink(link, out, n - 1);
    out[len > 0 ? len : 0] = 0;
}

/* Whether this call on `path` fails; counts and logs it if it is a failure point. */
static int fails(const char *call, const char *path) {
    const char *match = env("CHASSIS_FAULT_MATCH");
    if (!match || !path || !strstr(path, match)) return 0;
    /* The undo log's temporary names and the index's are all failure points; the shim's own
     * log is not. */
    const char *log = env("CHASSIS_FAULT_LOG");
    if (log && strcmp(path, log) == 0) return 0;
    pthread_mutex_lock(&lock);
    long n = ++counter;
    if (log) {
        FILE *f = fopen(log, "a");
        if (f) {
            fprintf(f, "%ld %s %s\n", n, call, path);
            fclose(f);
        }
    }
    pthread_mutex_unlock(&lock);
    const char *at_s = env("CHASSIS_FAULT_AT");
    long at = at_s ? atol(at_s) : 0;
    const char *mode = env("CHASSIS_FAULT_MODE");
    int always = mode && strcmp(mode, "always") == 0;
    if (at > 0 && n > at && mode && strcmp(mode, "kill") == 0) kill(getpid(), SIGKILL);
    if (at > 0 && (n == at || (always && n > at))) {
        const char *e = env("CHASSIS_FAULT_ERRNO");
        errno = e ? atoi(e) : EIO;
        return 1;
    }
    return 0;
}

static int fd_fails(const char *call, int fd) {
    if (!env("CHASSIS_FAULT_MATCH")) return 0;
    char path[PATH_MAX];
    fd_path(fd, path, sizeof path);
    return fails(call, path);
}

#define REAL(name) static __typeof__(name) *real_##name; \
    if (!real_##name) real_##name = (__typeof__(name) *)dlsym(RTLD_NEXT, #name)

int fsync(int fd) {
    REAL(fsync);
    if (fd_fails("fsync", fd)) return -1;
    return real_fsync(fd);
}

int fdatasync(int fd) {
    REAL(fdatasync);
    if (fd_fails("fdatasync", fd)) return -1;
    return real_fdatasync(fd);
}

int msync(void *addr, size_t len, int flags) {
    REAL(msync);
    /* No descriptor: a failure point only while a match is set, named by no path. */
    if (env("CHASSIS_FAULT_MATCH") && fails("msync", env("CHASSIS_FAULT_MATCH"))) return -1;
    return real_msync(addr, len, flags);
}

ssize_t pwrite64(int fd, const void *buf, size_t n, off_t off) {
    REAL(pwrite64);
    if (fd_fails("pwrite", fd)) return -1;
    return real_pwrite64(fd, buf, n, off);
}

ssize_t pwrite(int fd, const void *buf, size_t n, off_t off) {
    REAL(pwrite);
    if (fd_fails("pwrite", fd)) return -1;
    return real_pwrite(fd, buf, n, off);
}

ssize_t write(int fd, const void *buf, size_t n) {
    REAL(write);
    if (fd > 2 && fd_fails("write", fd)) return -1;
    return real_write(fd, buf, n);
}

int ftruncate64(int fd, off_t len) {
    REAL(ftruncate64);
    if (fd_fails("ftruncate", fd)) return -1;
    return real_ftruncate64(fd, len);
}

int ftruncate(int fd, off_t len) {
    REAL(ftruncate);
    if (fd_fails("ftruncate", fd)) return -1;
    return real_ftruncate(fd, len);
}

int posix_fallocate64(int fd, off_t off, off_t len) {
    REAL(posix_fallocate64);
    if (fd_fails("fallocate", fd)) return errno;
    return real_posix_fallocate64(fd, off, len);
}

int posix_fallocate(int fd, off_t off, off_t len) {
    REAL(posix_fallocate);
    if (fd_fails("fallocate", fd)) return errno;
    return real_posix_fallocate(fd, off, len);
}

int fallocate64(int fd, int mode, off_t off, off_t len) {
    REAL(fallocate64);
    if (fd_fails("fallocate", fd)) return -1;
    return real_fallocate64(fd, mode, off, len);
}

int fallocate(int fd, int mode, off_t off, off_t len) {
    REAL(fallocate);
    if (fd_fails("fallocate", fd)) return -1;
    return real_fallocate(fd, mode, off, len);
}

int rename(const char *from, const char *to) {
    REAL(rename);
    if (fails("rename", to)) return -1;
    return real_rename(from, to);
}

int renameat(int a, const char *from, int b, const char *to) {
    REAL(renameat);
    if (fails("rename", to)) return -1;
    return real_renameat(a, from, b, to);
}

int renameat2(int a, const char *from, int b, const char *to, unsigned flags) {
    REAL(renameat2);
    if (fails("rename", to)) return -1;
    return real_renameat2(a, from, b, to, flags);
}

int link(const char *from, const char *to) {
    REAL(link);
    if (fails("link", to)) return -1;
    return real_link(from, to);
}

int linkat(int a, const char *from, int b, const char *to, int flags) {
    REAL(linkat);
    if (fails("link", to)) return -1;
    return real_linkat(a, from, b, to, flags);
}

int unlink(const char *path) {
    REAL(unlink);
    if (fails("unlink", path)) return -1;
    return real_unlink(path);
}

/* Opening to create (O_CREAT) is a failure point: a full disk or a read-only folder. */
static int open_fails(const char *path, int flags) {
    return (flags & O_CREAT) && fails("create", path);
}

/* open, open64, openat and openat64 alike: the mode argument read only when the flags carry
 * one, then the real call (with the directory descriptor for the *at forms). */
#define OPEN_WRAPPER(name, params, args) \
    int name params { \
        REAL(name); \
        mode_t mode = 0; \
        if (flags & (O_CREAT | O_TMPFILE)) { \
            va_list ap; \
            va_start(ap, flags); \
            mode = va_arg(ap, mode_t); \
            va_end(ap); \
        } \
        if (open_fails(path, flags)) return -1; \
        return real_##name args; \
    }

OPEN_WRAPPER(open64, (const char *path, int flags, ...), (path, flags, mode))
OPEN_WRAPPER(open, (const char *path, int flags, ...), (path, flags, mode))
OPEN_WRAPPER(openat64, (int dir, const char *path, int flags, ...), (dir, path, flags, mode))
OPEN_WRAPPER(openat, (int dir, const char *path, int flags, ...), (dir, path, flags, mode))

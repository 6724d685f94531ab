/* Saving a file atomically: atomic_file.h. */
#define _POSIX_C_SOURCE 200809L /* fsync, mkstemp, fchmod, readlink, strndup */
#include "atomic_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"

const char *rkv__file_kind(unsigned mode) {
    const mode_t m = (mode_t)mode;
    return S_ISDIR(m)    ? "a folder"
           : S_ISCHR(m)  ? "a character device"
           : S_ISBLK(m)  ? "a block device"
           : S_ISFIFO(m) ? "a named pipe (FIFO)"
           : S_ISSOCK(m) ? "a socket"
           : S_ISLNK(m)  ? "a symbolic link"
           : S_ISREG(m)  ? "a regular file"
                         : "not a regular file";
}

/* The folder holding path ("." for a bare name), malloc'ed; NULL when out of memory. */
static char *dir_of(const char *path) {
    const char *slash = strrchr(path, '/');
    return slash ? strndup(path, slash == path ? 1 : (size_t)(slash - path)) : strdup(".");
}

/* fsync of the directory holding path, so that a rename is durable (best
 * effort: some file systems refuse to fsync a directory). */
static void sync_dir_of(const char *path) {
    char *dir = dir_of(path);
    const int dfd = dir ? open(dir, O_RDONLY | O_CLOEXEC) : -1;
    if (dfd >= 0) {
        (void)fsync(dfd);
        close(dfd);
    }
    free(dir);
}

/* RKV_ERR_IO "WHAT: <before><path><after>: <strerror(errno)>", the path
 * shown escaped (errno taken first: showing it may change errno). */
static rkv_status io_fail(const char *what, const char *before, const char *path,
                          const char *after) {
    const int err = errno;
    rkv__path_shown e;
    return rkv__fail(RKV_ERR_IO, "%s: %s%s%s: %s", what, before, RKV__SHOW_PATH(e, path), after,
                     strerror(err));
}

/* Links followed before a save gives up, as the kernel's own limit (ELOOP). */
#define MAX_LINKS 40

/* The path a save to `path` replaces (atomic_file.h: a link's final
 * target, a relative target read from the link's folder; it may not exist
 * yet). *out: malloc'ed. RKV_ERR_IO for a loop or an unreadable link. */
static rkv_status follow_links(const char *what, const char *path, char **out) {
    char *p = strdup(path);
    for (int hops = 0; p; hops++) {
        struct stat sb;
        if (lstat(p, &sb) != 0 || !S_ISLNK(sb.st_mode)) break; /* the end of the chain */
        char target[4096];
        const ssize_t n = hops < MAX_LINKS ? readlink(p, target, sizeof target - 1) : -1;
        if (n < 0 || (size_t)n >= sizeof target - 1) {
            rkv__path_shown e1, e2;
            rkv_status st = rkv__fail(RKV_ERR_IO, "%s: cannot save to '%s': link '%s': %s", what,
                                      RKV__SHOW_PATH(e1, path), RKV__SHOW_PATH(e2, p),
                                      hops >= MAX_LINKS ? "too many levels of symbolic links"
                                      : n < 0           ? strerror(errno)
                                                        : "target too long");
            free(p);
            return st;
        }
        target[n] = '\0';
        const char *slash = target[0] == '/' ? NULL : strrchr(p, '/');
        const size_t dir = slash ? (size_t)(slash - p) + 1 : 0; /* keep "folder/" */
        char *next = malloc(dir + (size_t)n + 1);
        if (next) {
            memcpy(next, p, dir);
            memcpy(next + dir, target, (size_t)n + 1);
        }
        free(p);
        p = next;
    }
    if (!p) return rkv__fail(RKV_ERR_NO_MEMORY, "%s: out of memory", what);
    *out = p;
    return RKV_OK;
}

/* RKV_ERR_IO unless `target` (path, or the final target of the link path)
 * is a regular file or a new name in an existing folder, checked before
 * anything is written: rename would fail on a folder only after the whole
 * file went into a temporary one, and would replace a device, named pipe
 * or socket by a regular file. */
static rkv_status check_save_path(const char *what, const char *path, const char *target) {
    rkv__path_shown shown, e;
    char via[sizeof e + 32] = "";
    RKV__SHOW_PATH(shown, path);
    if (strcmp(path, target))
        snprintf(via, sizeof via, " (a symbolic link to '%s')", RKV__SHOW_PATH(e, target));
    struct stat sb;
    if (stat(target, &sb) == 0 && S_ISDIR(sb.st_mode))
        return rkv__fail(RKV_ERR_IO, "%s: '%s'%s is a folder; expected a file path", what, shown,
                         via);
    if (stat(target, &sb) == 0 && !S_ISREG(sb.st_mode))
        return rkv__fail(RKV_ERR_IO,
                         "%s: '%s'%s is %s, not a regular file; only a regular file or a new "
                         "path is saved to",
                         what, shown, via, rkv__file_kind(sb.st_mode));
    char *dir = dir_of(target);
    if (!dir) return rkv__fail(RKV_ERR_NO_MEMORY, "%s: out of memory", what);
    rkv_status st = RKV_OK;
    if (stat(dir, &sb) != 0) {
        const int err = errno;
        st = rkv__fail(RKV_ERR_IO, "%s: cannot save to '%s'%s: folder '%s': %s", what, shown, via,
                       RKV__SHOW_PATH(e, dir), err == ENOENT ? "does not exist" : strerror(err));
    } else if (!S_ISDIR(sb.st_mode)) {
        st = rkv__fail(RKV_ERR_IO, "%s: cannot save to '%s'%s: '%s' is not a folder", what, shown,
                       via, RKV__SHOW_PATH(e, dir));
    }
    free(dir);
    return st;
}

rkv_status rkv__atomic_begin(rkv__atomic_file *f, const char *what, const char *path) {
    memset(f, 0, sizeof *f);
    f->what = what;
    f->fd = -1;
    char *target = NULL;
    rkv_status st = follow_links(what, path, &target);
    if (st == RKV_OK) st = check_save_path(what, path, target);
    /* the temporary file next to the file replaced, so that rename is
     * atomic; a short name when NAME cannot take the suffix: every name
     * the folder can hold can be saved to */
    const size_t cap = st == RKV_OK ? strlen(target) + 32 : 0;
    char *tmp = st == RKV_OK ? malloc(cap) : NULL;
    if (st == RKV_OK && !tmp) st = rkv__fail(RKV_ERR_NO_MEMORY, "%s: out of memory", what);
    if (st == RKV_OK) {
        const char *slash = strrchr(target, '/');
        const char *base = slash ? slash + 1 : target;
        if (strlen(base) + sizeof ".tmp-XXXXXX" - 1 <= 255)
            snprintf(tmp, cap, "%s.tmp-XXXXXX", target);
        else
            snprintf(tmp, cap, "%.*s.ringkv.tmp-XXXXXX", (int)(base - target), target);
        if ((f->fd = mkstemp(tmp)) < 0)
            st = io_fail(what, "cannot create a temporary file next to ", target, "");
    }
    if (st != RKV_OK) { /* f->fd: still -1, or mkstemp's -1 */
        free(tmp);
        free(target);
        return st;
    }
    struct stat old;
    (void)fchmod(f->fd, stat(target, &old) == 0 ? (old.st_mode & 07777) : 0644);
    f->target = target;
    f->tmp = tmp;
    return RKV_OK;
}

rkv_status rkv__atomic_write(rkv__atomic_file *f, const void *p, size_t n) {
    if (!f->tmp || f->fd < 0)
        return rkv__fail(RKV_ERR_STATE, "%s: the temporary file is closed", f->what);
    const uint8_t *q = p;
    while (n) {
        ssize_t put = write(f->fd, q, n);
        if (put < 0 && errno == EINTR) continue;
        if (put <= 0) {
            rkv__path_shown e;
            return rkv__fail(RKV_ERR_IO, "%s: writing %s failed at byte %llu: %s", f->what,
                             RKV__SHOW_PATH(e, f->tmp), (unsigned long long)f->off,
                             put < 0 ? strerror(errno) : "no progress");
        }
        q += put;
        n -= (size_t)put;
        f->off += (uint64_t)put;
    }
    return RKV_OK;
}

rkv_status rkv__atomic_finish(rkv__atomic_file *f) {
    if (!f->tmp) return rkv__fail(RKV_ERR_STATE, "%s: no file being saved", f->what);
    if (f->fd < 0) return RKV_OK; /* finished before */
    rkv_status st = fsync(f->fd) ? io_fail(f->what, "fsync of ", f->tmp, " failed") : RKV_OK;
    if (close(f->fd) && st == RKV_OK) st = io_fail(f->what, "closing ", f->tmp, " failed");
    f->fd = -1;
    return st;
}

static void release(rkv__atomic_file *f) {
    free(f->tmp);
    free(f->target);
    f->tmp = f->target = NULL;
}

rkv_status rkv__atomic_commit(rkv__atomic_file *f) {
    rkv_status st = rkv__atomic_finish(f);
    if (st == RKV_OK && rename(f->tmp, f->target)) {
        const int err = errno;
        rkv__path_shown e1, e2;
        st = rkv__fail(RKV_ERR_IO, "%s: cannot rename %s to %s: %s", f->what,
                       RKV__SHOW_PATH(e1, f->tmp), RKV__SHOW_PATH(e2, f->target), strerror(err));
    }
    if (st != RKV_OK) {
        rkv__atomic_abort(f);
        return st;
    }
    sync_dir_of(f->target);
    release(f);
    return RKV_OK;
}

void rkv__atomic_abort(rkv__atomic_file *f) {
    if (f->tmp) { /* fd is valid only while tmp is set: a zeroed f closes nothing */
        if (f->fd >= 0) close(f->fd);
        unlink(f->tmp);
    }
    f->fd = -1;
    release(f);
}

/* Checks of `ringkv rollout` before any frame: the default image, the
 * output paths and the memory (rollout_checks.h). */
#define _XOPEN_SOURCE 700 /* readlink, lstat, realpath */

#include "rollout_checks.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../src/atomic_file.h" /* rkv__file_kind */
#include "camera.h"
#include "cli.h"
#include "escape.h"
#include "sheet.h"
#include "tokens.h"

/* The default image: data/earth.jpg from the working directory, else beside
 * the repository the executable was built in (its folder and up to 3 above),
 * else earth.jpg in an install's data folder (../share/ringkv from the
 * executable's folder, as realpath gives it: PREFIX/share/ringkv/earth.jpg,
 * else RKV_INSTALL_DATA_DIR, the configured one). NULL when it is in none of
 * them; `exe` receives the executable's path (or ""). A file that exists
 * but cannot be read is returned: the load says why. */
const char *rollout_default_image(char *buf, size_t n, char *exe, size_t exe_n) {
    exe[0] = '\0';
    if (access(DEFAULT_IMAGE, F_OK) == 0) return DEFAULT_IMAGE;
    char dir[4096];
    ssize_t len = readlink("/proc/self/exe", dir, sizeof dir - 1);
    if (len > 0) {
        dir[len] = '\0';
        snprintf(exe, exe_n, "%s", dir);
        for (int up = 0; up < 4; up++) {
            char *slash = strrchr(dir, '/');
            if (!slash) break;
            *slash = '\0';
            if (snprintf(buf, n, "%s/%s", dir, DEFAULT_IMAGE) >= (int)n) break;
            if (access(buf, F_OK) == 0) return buf;
        }
    }
    /* an install: PREFIX/bin/ringkv and PREFIX/share/ringkv/earth.jpg,
     * wherever the prefix was moved, else where it was configured */
    if (exe[0]) {
        char bindir[4096];
        snprintf(bindir, sizeof bindir, "%s", exe);
        char *slash = strrchr(bindir, '/');
        if (slash) {
            *slash = '\0';
            char *found = NULL;
            if (snprintf(buf, n, "%s/../share/ringkv/earth.jpg", bindir) < (int)n &&
                (found = realpath(buf, NULL)) && snprintf(buf, n, "%s", found) < (int)n) {
                free(found);
                return buf;
            }
            free(found);
        }
    }
#ifdef RKV_INSTALL_DATA_DIR
    if (snprintf(buf, n, "%s/earth.jpg", RKV_INSTALL_DATA_DIR) < (int)n && access(buf, F_OK) == 0)
        return buf;
#endif
    return NULL;
}

/* The folder a file path is in: "." for a bare name, "/" for "/name". */
static void folder_of(const char *path, char *dir, size_t n) {
    snprintf(dir, n, "%s", path);
    char *slash = strrchr(dir, '/');
    if (!slash) snprintf(dir, n, ".");
    else if (slash == dir) slash[1] = '\0';
    else *slash = '\0';
}

/* Whether a file can really be created in the folder `dir`: one is created
 * there and removed (access() says yes to root for /proc or /sys, where no
 * file can be made, and knows nothing of read-only mounts). 0, or -1 with
 * errno. */
static int probe_create(const char *dir) {
    char probe[PATH_MAX_LEN + 64];
    const int k = snprintf(probe, sizeof probe, "%s%s.ringkv-probe-XXXXXX", dir,
                           dir[0] && dir[strlen(dir) - 1] == '/' ? "" : "/");
    if (k < 0 || (size_t)k >= sizeof probe) {
        errno = ENAMETOOLONG;
        return -1;
    }
    const int fd = mkstemp(probe);
    if (fd < 0) return -1;
    close(fd);
    unlink(probe);
    return 0;
}

/* Checks that a file can be written in the existing folder `dir`: it is a
 * folder, access() allows it and a probe file can be created there
 * (probe_create). 0, or -1 with a message. */
static int check_folder_writable(const char *what, const char *dir, char *err, size_t n) {
    struct stat st;
    if (stat(dir, &st) != 0) {
        snprintf(err, n, "%s: folder '%s': %s", what, rkv_tool_shown(dir),
                 errno == ENOENT ? "no such folder" : strerror(errno));
        return -1;
    }
    if (!S_ISDIR(st.st_mode)) {
        snprintf(err, n, "%s: '%s' is not a folder", what, rkv_tool_shown(dir));
        return -1;
    }
    if (access(dir, W_OK | X_OK) != 0) {
        snprintf(err, n, "%s: cannot write in folder '%s': %s", what, rkv_tool_shown(dir),
                 strerror(errno));
        return -1;
    }
    if (probe_create(dir) != 0) {
        snprintf(err, n, "%s: cannot create a file in folder '%s': %s", what,
                 rkv_tool_shown(dir), strerror(errno));
        return -1;
    }
    return 0;
}

/* The file a path names after its symbolic links, followed one by one as
 * the library's save does (a relative target from the link's folder),
 * whether that file exists or not (a dangling link names where the file
 * would go): into out. -1 (errno ELOOP) after 40 links. */
static int final_target(const char *path, char *out, size_t n) {
    snprintf(out, n, "%s", path);
    for (int hops = 0; hops < 40; hops++) {
        struct stat st;
        if (lstat(out, &st) != 0 || !S_ISLNK(st.st_mode)) return 0;
        char to[PATH_MAX_LEN + 1], dir[PATH_MAX_LEN + 1];
        const ssize_t len = readlink(out, to, sizeof to - 1);
        if (len < 0) return 0;
        to[len] = '\0';
        folder_of(out, dir, sizeof dir);
        const int k = to[0] == '/' || !strcmp(dir, ".")
                          ? snprintf(out, n, "%s", to)
                          : snprintf(out, n, "%s%s%s", dir, strcmp(dir, "/") ? "/" : "", to);
        if (k < 0 || (size_t)k >= n) {
            errno = ENAMETOOLONG;
            return -1;
        }
    }
    errno = ELOOP;
    return -1;
}

/* " (a link to 'TARGET')" when path is a symbolic link, else "". */
static void via_link(const char *path, char *via, size_t n) {
    char target[PATH_MAX_LEN + 1];
    struct stat st;
    via[0] = '\0';
    if (lstat(path, &st) == 0 && S_ISLNK(st.st_mode) &&
        final_target(path, target, sizeof target) == 0)
        snprintf(via, n, " (a link to '%s')", rkv_tool_shown(target));
}

/* Checks that the file `path` can be (over)written, its folder existing: when
 * it exists (after symbolic links), a writable regular file, not a folder,
 * device, named pipe or socket. 0, or -1 with a message. */
int rollout_check_output_file(const char *what, const char *path, char *err, size_t n) {
    struct stat st;
    if (stat(path, &st) == 0) {
        if (S_ISDIR(st.st_mode)) {
            snprintf(err, n, "%s: '%s' is a folder, not a file", what, rkv_tool_shown(path));
            return -1;
        }
        if (!S_ISREG(st.st_mode)) { /* a device or pipe is never replaced nor written */
            char via[4 * PATH_MAX_LEN + 32];
            via_link(path, via, sizeof via);
            snprintf(err, n, "%s: '%s'%s is %s, not a regular file; a file is written there",
                     what, rkv_tool_shown(path), via, rkv__file_kind(st.st_mode));
            return -1;
        }
        if (access(path, W_OK) != 0) {
            snprintf(err, n, "%s: cannot overwrite '%s': %s", what, rkv_tool_shown(path),
                     strerror(errno));
            return -1;
        }
        return 0;
    }
    if (errno != ENOENT) {
        const int e = errno;
        char via[4 * PATH_MAX_LEN + 32];
        via_link(path, via, sizeof via);
        snprintf(err, n, "%s: '%s'%s: %s", what, rkv_tool_shown(path), via,
                 e == ENOTDIR ? "a part of the path is a file, not a folder" : strerror(e));
        return -1;
    }
    return 0;
}

/* When `part` (the --out path or a folder above it, which stat did not
 * find) is a symbolic link, whose target is then missing: -1 with a message
 * naming --out, the link and its target. Else 0, errno kept. */
static int out_dangling_link(const char *path, const char *part, char *err, size_t n) {
    const int e = errno;
    struct stat st;
    if (lstat(part, &st) != 0 || !S_ISLNK(st.st_mode)) {
        errno = e;
        return 0;
    }
    char via[4 * PATH_MAX_LEN + 32];
    via_link(part, via, sizeof via);
    snprintf(err, n, "--out '%s': '%s'%s is a dangling symbolic link: no folder there to "
             "write in, and none is created through it", rkv_tool_shown(path),
             rkv_tool_shown(part), via);
    return -1;
}

/* --out DIR before the run: an existing folder we can write in (and its
 * picture and legend savable: rollout_check_saved_file, which creates and
 * removes a probe file there), or a path mkdir -p can create (the nearest
 * existing folder above it writable by access(); rollout_check_out_files
 * probes it once made). Leaves nothing behind. 0, or -1 with a message. */
int rollout_check_out_folder(const char *path, char *err, size_t n) {
    struct stat st;
    if (stat(path, &st) == 0) {
        if (!S_ISDIR(st.st_mode)) {
            snprintf(err, n,
                     "--out '%s' is %s, not a folder (the picture %s and its legend %s "
                     "go into the folder --out DIR)",
                     rkv_tool_shown(path), rkv__file_kind(st.st_mode), PICTURE_NAME, LEGEND_NAME);
            return -1;
        }
        if (access(path, W_OK | X_OK) != 0) {
            snprintf(err, n, "--out: cannot write in folder '%s': %s", rkv_tool_shown(path),
                     strerror(errno));
            return -1;
        }
        /* the picture and the legend as the save will write them: a link
         * among them (dangling or not) to where nothing can be saved is
         * refused now, not after the frames */
        return rollout_check_out_files(path, err, n);
    }
    if (errno != ENOENT) {
        snprintf(err, n, "--out '%s': %s", rkv_tool_shown(path),
                 errno == ENOTDIR ? "a part of the path is a file, not a folder"
                                  : strerror(errno));
        return -1;
    }
    /* the nearest existing folder above it; a dangling link on the way
     * (the path itself or a folder above it) is refused: mkdir would fail
     * on it only after the model is built */
    char up[PATH_MAX_LEN + 1];
    snprintf(up, sizeof up, "%s", path);
    if (out_dangling_link(path, up, err, n)) return -1;
    for (;;) {
        size_t len = strlen(up);
        while (len > 1 && up[len - 1] == '/') up[--len] = '\0';
        char *slash = strrchr(up, '/');
        if (!slash) {
            snprintf(up, sizeof up, ".");
        } else if (slash == up) {
            up[1] = '\0';
        } else {
            *slash = '\0';
        }
        if (stat(up, &st) == 0) break;
        if (errno == ENOENT && out_dangling_link(path, up, err, n)) return -1;
        if (errno != ENOENT || !strcmp(up, ".") || !strcmp(up, "/")) {
            snprintf(err, n, "--out '%s': cannot create it: '%s': %s", rkv_tool_shown(path),
                     rkv_tool_shown(up),
                     errno == ENOTDIR ? "a part of the path is a file, not a folder"
                                      : strerror(errno));
            return -1;
        }
    }
    if (!S_ISDIR(st.st_mode)) {
        snprintf(err, n, "--out '%s': cannot create it: '%s' is %s, not a folder",
                 rkv_tool_shown(path), rkv_tool_shown(up), rkv__file_kind(st.st_mode));
        return -1;
    }
    if (access(up, W_OK | X_OK) != 0) {
        snprintf(err, n, "--out '%s': cannot create it in '%s': %s", rkv_tool_shown(path),
                 rkv_tool_shown(up), strerror(errno));
        return -1;
    }
    return 0;
}

int rollout_check_out_files(const char *path, char *err, size_t n) {
    char file[PATH_MAX_LEN + 64];
    snprintf(file, sizeof file, "%s/%s", path, PICTURE_NAME);
    if (rollout_check_saved_file("--out", file, err, n)) return -1;
    snprintf(file, sizeof file, "%s/%s", path, LEGEND_NAME);
    return rollout_check_saved_file("--out", file, err, n);
}

int rollout_make_dirs(const char *path, int64_t *made, char *err, size_t err_len) {
    char buf[PATH_MAX_LEN + 1];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf) {
        snprintf(err, err_len, "--out path too long");
        return -1;
    }
    int created = 0;
    for (char *p = buf + 1;; p++) {
        if (*p == '/' || *p == '\0') {
            char c = *p;
            *p = '\0';
            if (mkdir(buf, 0777) == 0) {
                if (!created) *made = (int64_t)(p - buf);
                created = 1;
            } else if (errno != EEXIST) {
                snprintf(err, err_len, "--out: cannot create folder '%s': %s",
                         rkv_tool_shown(buf), strerror(errno));
                return -1;
            }
            *p = c;
            if (c == '\0') break;
        }
    }
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode)) {
        snprintf(err, err_len, "--out '%s' is not a folder", rkv_tool_shown(path));
        return -1;
    }
    return 0;
}

void rollout_remove_made_dirs(const char *path, int64_t made) {
    char buf[PATH_MAX_LEN + 1];
    const size_t n = strlen(path);
    if (made < 1 || (size_t)made > n || n >= sizeof buf) return;
    memcpy(buf, path, n + 1);
    /* the prefixes rollout_make_dirs made, longest first: at each '/' and
     * the end, from the end down to length made */
    for (size_t end = n; end >= (size_t)made; end--) {
        if (end < n && buf[end] != '/') continue;
        buf[end] = '\0';
        if (rmdir(buf) != 0 && errno != ENOENT) return; /* not empty: kept, and those above */
    }
}

int rollout_check_saved_file(const char *what, const char *path, char *err, size_t n) {
    char dir[PATH_MAX_LEN + 1];
    if (rollout_check_output_file(what, path, err, n)) return -1;
    char target[PATH_MAX_LEN + 1];
    if (final_target(path, target, sizeof target) != 0) {
        snprintf(err, n, "%s '%s': %s", what, rkv_tool_shown(path), strerror(errno));
        return -1;
    }
    folder_of(target, dir, sizeof dir);
    if (strcmp(target, path)) { /* a link: its target's folder, named with the link */
        char named[4 * PATH_MAX_LEN + 64];
        snprintf(named, sizeof named, "%s '%s' (a link to '%s')", what, rkv_tool_shown(path),
                 rkv_tool_shown(target));
        return check_folder_writable(named, dir, err, n);
    }
    return check_folder_writable(what, dir, err, n);
}

/* Bytes of memory this process can still get: MemAvailable of /proc/meminfo
 * (else the free pages, sysconf), capped by a cgroup memory limit (v2
 * memory.max, v1 memory.limit_in_bytes) minus the cgroup's usage. 0 when
 * unknown. *source names where the figure comes from. */
static uint64_t read_u64_file(const char *path, int *ok) {
    *ok = 0;
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    unsigned long long v = 0;
    *ok = fscanf(f, "%llu", &v) == 1;
    fclose(f);
    return (uint64_t)v;
}

static uint64_t available_memory(const char **source) {
    uint64_t avail = 0;
    *source = "unknown";
    FILE *f = fopen("/proc/meminfo", "r");
    if (f) {
        char line[256];
        unsigned long long kib;
        while (fgets(line, sizeof line, f))
            if (sscanf(line, "MemAvailable: %llu kB", &kib) == 1) {
                avail = (uint64_t)kib * 1024u;
                *source = "MemAvailable in /proc/meminfo";
                break;
            }
        fclose(f);
    }
    if (!avail) {
        long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
        if (pages > 0 && page > 0) {
            avail = (uint64_t)pages * (uint64_t)page;
            *source = "free pages, sysconf(_SC_AVPHYS_PAGES)";
        }
    }
    static const char *const LIMITS[][2] = {
        {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"},
        {"/sys/fs/cgroup/memory/memory.limit_in_bytes",
         "/sys/fs/cgroup/memory/memory.usage_in_bytes"}};
    for (size_t k = 0; k < sizeof LIMITS / sizeof LIMITS[0]; k++) {
        int ok_max, ok_used;
        uint64_t max = read_u64_file(LIMITS[k][0], &ok_max); /* "max": not a number */
        uint64_t used = read_u64_file(LIMITS[k][1], &ok_used);
        if (!ok_max || !ok_used || max >= ((uint64_t)1 << 60)) continue;
        uint64_t left = max > used ? max - used : 0;
        if (!avail || left < avail) {
            avail = left;
            *source = k == 0 ? "the cgroup's memory.max less memory.current"
                             : "the cgroup's memory.limit_in_bytes less memory.usage_in_bytes";
        }
    }
    return avail;
}

tool_memory rollout_tool_memory(const rkv_model_config *cfg, int64_t frames, const world_map *w) {
    const uint64_t T = (uint64_t)cfg->tokens_per_frame, D = (uint64_t)cfg->d_head;
    const uint64_t H = (uint64_t)cfg->n_kv_heads, Hq = (uint64_t)cfg->n_q_heads;
    const uint64_t VD = D < WORLD_PATCH_PIXELS ? D : WORLD_PATCH_PIXELS;
    const uint64_t cells = (uint64_t)(w->cols * w->rows);
    tool_memory m = {0, 0, 0};
    uint64_t kv = 2 * H * T * D;
    m.per_session += kv * sizeof(float);                                 /* kv32    */
    if (cfg->dtype != RKV_DTYPE_F32) m.per_session += kv * rkv_dtype_size(cfg->dtype);
    m.per_session += 3 * Hq * T * D * sizeof(float);                     /* q, out (, LE copy) */
    m.per_session += 3 * T * VD * sizeof(float);                         /* truth, recalled */
    m.per_session += 2 * cells * sizeof(int64_t);                        /* last seen x 2 */
    m.per_session += CAMERA_KEEP * sizeof(camera_pose); /* the camera path's last poses */
    m.fixed += (uint64_t)frames * TOKENS_PASSES * sizeof(double); /* pass latencies */
    m.fixed += 3 * T * D * sizeof(float);                         /* q0, k0, v0 */
    m.fixed += SHEET_MAX_ROWS * (3 * T * VD * sizeof(float) + T) * 2; /* rows, PNG */
    m.by_frames = (uint64_t)frames * TOKENS_PASSES * sizeof(double);
    return m;
}

static double gib(uint64_t bytes) { return (double)bytes / 1073741824.0; }

/* Refuses a run that needs more than MEMORY_SHARE of the available memory:
 * 0 to go on, or 2 with a message naming both and what to change. */
int rollout_check_memory(const rollout_opts *o, size_t model_session, const tool_memory *tm) {
    const char *source;
    const uint64_t avail = available_memory(&source);
    if (!avail) return 0; /* unknown: nothing to compare with */
    const uint64_t B = (uint64_t)o->sessions;
    const uint64_t model = o->backend == BACKEND_CPU ? (uint64_t)model_session : 0;
    const uint64_t tool = tm->per_session * B + tm->fixed;
    const uint64_t need = model * B + tool;
    const uint64_t budget = (uint64_t)((double)avail * MEMORY_SHARE);
    if (need <= budget) return 0;
    fprintf(stderr,
            "ringkv rollout: not enough memory: this run needs %" PRIu64 " bytes (%.1f GiB: ",
            need, gib(need));
    if (model)
        fprintf(stderr, "the model's K/V %" PRIu64 " bytes per session x %" PRIu64
                        " session(s), ", model, B);
    fprintf(stderr,
            "the rollout's own buffers %" PRIu64 " bytes), but %" PRIu64
            " bytes (%.1f GiB) are available (%s) and a run may use %.0f%% of them\n",
            tool, avail, gib(avail), source, 100.0 * MEMORY_SHARE);
    const uint64_t per = model + tm->per_session;
    const uint64_t fit = budget > tm->fixed && per ? (budget - tm->fixed) / per : 0;
    if (fit >= 1 && fit < B && !o->resume) {
        fprintf(stderr,
                "ringkv rollout: at most %" PRIu64 " session(s) fit: use --sessions %" PRIu64
                " or fewer ('ringkv plan --preset %s --memory-gib X' sizes a machine)\n",
                fit, fit, o->preset);
    } else if (tm->by_frames > need / 2) {
        fprintf(stderr,
                "ringkv rollout: most of it grows with the frame count (%" PRIu64
                " bytes for the pass latencies of %" PRId64 " frames): use fewer --frames\n",
                tm->by_frames, o->frames);
    } else {
        fprintf(stderr,
                "ringkv rollout: even one session does not fit: use a smaller preset or "
                "--dtype, or a machine with more memory\n");
    }
    return 2;
}

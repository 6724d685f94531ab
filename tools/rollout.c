/* `ringkv rollout`: streams sessions through every layer of a model, frame by
 * frame, on frames cut from a real image, through the public API only
 * (rkv_model_*). Each frame: begin_frame, then 5 passes (the 5th commits), in
 * each pass every layer does an upsert and then attention for every session.
 * Reports speed, per-pass latency, memory and how well each layer class
 * "recalls" the world (docs/rollout.md), and writes a picture.
 *
 * The world is world.c, the camera path camera.c, the tokens tokens.c, the
 * recall metrics recall.c, the picture sheet.c and the CUDA path
 * rollout_gpu.c; this file holds the options, the frame loop, snapshots and
 * resume, the timings and the report.
 *
 * Resume (--resume FILE): session 0 is loaded from a snapshot and the run
 * continues at the saved clock + 1. Every input is a pure function of the
 * absolute frame clock, the session and --seed, so the resumed run sees
 * exactly what an uninterrupted run would; the recall bookkeeping (when each
 * world cell was last in view) is rebuilt by replaying the camera path over
 * the frames before the snapshot, without touching the model. */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <xxhash.h>

#include "camera.h"
#include "commands.h"
#include "recall.h"
#include "ringkv.h"
#include "rollout_gpu.h"
#include "sheet.h"
#include "splitmix.h"
#include "tokens.h"
#include "world.h"

/* Default --frames by preset (docs/rollout.md, "Run time"). The demo preset
 * fills every band with thousands of textured patches on the earth map in
 * well under a minute on 2 cores. The waypoint presets take about 1-2 s
 * (360p) and 50 s (720p) a frame on 2 cores once the rings are full: their
 * defaults fill the local ring (16 frames) and stop; the mid and far recall
 * bands need the demo preset's frame counts. */
#define DEMO_FRAMES 2048
#define WAYPOINT_360P_FRAMES 32
#define WAYPOINT_720P_FRAMES 16
#define DEFAULT_OUT "rollout-out"
#define DEFAULT_IMAGE "data/earth.jpg"
#define DEFAULT_SEED 0
#define MAX_SESSIONS 4096
#define PICTURE_NAME "rollout.png"
#define LEGEND_NAME "rollout.txt"
/* Longest --out, --snapshot-out or --image path handled. */
#define PATH_MAX_LEN 4000
/* A run is refused when it needs more than this share of the memory the
 * machine has available. */
#define MEMORY_SHARE 0.9
/* Runs expected to take longer than this get a warning (and, when stderr is
 * not a terminal, a progress line every PROGRESS_EVERY_S seconds). */
#define LONG_RUN_S 120.0
#define PROGRESS_EVERY_S 60.0
/* The camera path keeps every pose from frame 0 (a resumed run replays it):
 * absolute clocks stay below this. */
#define MAX_CLOCK INT32_MAX

typedef enum rollout_backend { BACKEND_CPU = 0, BACKEND_CUDA } rollout_backend;

typedef struct rollout_opts {
    const char *preset;
    int full_global_ring;
    int64_t sessions;
    int64_t frames;           /* 0: the preset's default */
    const char *image; /* NULL: the default image */
    const char *out;
    uint64_t seed;
    int have_dtype;
    rkv_dtype dtype;
    int json;
    int threads;              /* 0: the machine's cores (CPU backend)   */
    rollout_backend backend;
    const char *snapshot_out; /* save session 0 here at the end, or NULL */
    const char *resume;       /* load session 0 from here first, or NULL */
} rollout_opts;

static void usage(FILE *f) {
    fprintf(f,
            "usage: ringkv rollout [--preset NAME] [--full-global-ring] [--sessions N]\n"
            "                      [--frames N] [--image PATH] [--out DIR] [--seed N]\n"
            "                      [--dtype f32|f16|bf16] [--threads N] [--backend cpu|cuda]\n"
            "                      [--snapshot-out FILE] [--resume FILE] [--json]\n\n"
            "Streams N sessions through every layer of a model preset, frame by frame\n"
            "(5 passes a frame, the 5th commits), on views of a camera moving over a\n"
            "real image, and reports frames per second, per-pass latency, memory and\n"
            "how well the first local and first global layer recall the world.\n\n"
            "  --preset NAME        model preset (default demo):\n"
            "                      ");
    for (const char *const *n = rkv_model_preset_names(); n && *n; n++) fprintf(f, " %s", *n);
    fprintf(f,
            "\n"
            "  --full-global-ring   global layers allocate the full 128-frame ring; only\n"
            "                       16 buckets are addressed (SEMANTICS 7): memory grows,\n"
            "                       recall does not\n"
            "  --sessions N         sessions streamed side by side, 1..%d (default 1; the\n"
            "                       run is refused when it does not fit in the memory\n"
            "                       available: see 'ringkv plan')\n"
            "  --frames N           frames per session, 1..%d (default %d with\n"
            "                       the demo preset; %d with waypoint-1.5-360p and %d\n"
            "                       with waypoint-1.5-720p, about 1-2 s and 50 s a frame\n"
            "                       on 2 cores: enough to fill the local ring; the mid\n"
            "                       and far recall bands need the demo preset's counts)\n"
            "  --image PATH         JPEG or PNG world map (default %s;\n"
            "                       columns wrap)\n"
            "  --out DIR            folder for the picture %s and its legend\n"
            "                       %s (default %s; checked before the run)\n"
            "  --seed N             seed of the camera path and noise, 0..2^64-1 (default %d)\n"
            "  --dtype TYPE         storage dtype (default: the preset's)\n"
            "  --threads N          attention threads, CPU backend, 1..1024 (default: the\n"
            "                       machine's cores)\n"
            "  --backend NAME       cpu (default) or cuda (GPU 0; builds with CUDA only)\n"
            "  --snapshot-out FILE  save session 0 to FILE at the end (a snapshot file)\n"
            "  --resume FILE        load session 0 from FILE and continue at its clock + 1\n"
            "                       for --frames frames (same --preset, --dtype, --seed,\n"
            "                       --image as the run that saved it; one session)\n"
            "  --json               print one JSON object on stdout (with last_frame and\n"
            "                       output_digest: XXH3-64 of the last frame's outputs)\n"
            "\nA run expected to take more than 2 minutes says so on stderr. Exit status:\n"
            "0; 1 when a library call or the run fails; 2 for bad options, an image that\n"
            "cannot be read, an output path that cannot be written, or too little memory.\n"
            "See docs/rollout.md for the construction and the figures.\n",
            MAX_SESSIONS, INT32_MAX, DEMO_FRAMES, WAYPOINT_360P_FRAMES, WAYPOINT_720P_FRAMES,
            DEFAULT_IMAGE, PICTURE_NAME, LEGEND_NAME, DEFAULT_OUT, DEFAULT_SEED);
}

/* The default --frames of a preset (see DEMO_FRAMES). */
static int64_t default_frames(const char *preset) {
    if (!strcmp(preset, "demo")) return DEMO_FRAMES;
    if (!strcmp(preset, "waypoint-1.5-720p")) return WAYPOINT_720P_FRAMES;
    return WAYPOINT_360P_FRAMES;
}

static int bad_option(const char *what, const char *arg) {
    fprintf(stderr, "ringkv rollout: %s '%s'\n(see 'ringkv rollout --help')\n", what, arg);
    return 2;
}

static int parse_int(const char *s, int64_t lo, int64_t hi, int64_t *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

/* Returns -1 to go on, else an exit status (0 after --help, 2 on error). */
static int parse_args(int argc, char **argv, rollout_opts *o) {
    memset(o, 0, sizeof *o);
    o->preset = "demo";
    o->sessions = 1;
    o->frames = 0; /* the preset's default, set once the preset is known */
    o->out = DEFAULT_OUT;
    o->seed = DEFAULT_SEED;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--json")) {
            o->json = 1;
            continue;
        }
        if (!strcmp(a, "--full-global-ring")) {
            o->full_global_ring = 1;
            continue;
        }
        /* options with a value: --name VALUE or --name=VALUE */
        static const char *const WITH_VALUE[] = {
            "--preset", "--sessions", "--frames",       "--image",  "--out",     "--seed",
            "--dtype",  "--threads",  "--snapshot-out", "--resume", "--backend", NULL};
        const char *name = NULL, *val = NULL;
        for (int k = 0; WITH_VALUE[k]; k++) {
            size_t n = strlen(WITH_VALUE[k]);
            if (!strncmp(a, WITH_VALUE[k], n) && (a[n] == '\0' || a[n] == '=')) {
                name = WITH_VALUE[k];
                if (a[n] == '=') {
                    val = a + n + 1;
                } else {
                    if (i + 1 >= argc) return bad_option("missing value after", a);
                    val = argv[++i];
                }
                break;
            }
        }
        if (!name) return bad_option("unknown option", a);
        int64_t v;
        if (!strcmp(name, "--preset")) {
            o->preset = val;
        } else if (!strcmp(name, "--sessions")) {
            if (parse_int(val, 1, MAX_SESSIONS, &v))
                return bad_option("--sessions expects an integer in 1..4096 (the rollout's "
                                  "limit), got",
                                  val);
            o->sessions = v;
        } else if (!strcmp(name, "--frames")) {
            if (parse_int(val, 1, INT32_MAX, &v))
                return bad_option("--frames expects an integer in 1..2147483647, got", val);
            o->frames = v;
        } else if (!strcmp(name, "--image")) {
            if (!*val) return bad_option("--image expects a JPEG or PNG file, got", val);
            if (strlen(val) > PATH_MAX_LEN) return bad_option("--image: path too long:", val);
            o->image = val;
        } else if (!strcmp(name, "--out")) {
            if (!*val) return bad_option("--out expects a folder, got", val);
            if (strlen(val) > PATH_MAX_LEN) return bad_option("--out: path too long:", val);
            o->out = val;
        } else if (!strcmp(name, "--seed")) {
            char *end;
            errno = 0;
            unsigned long long s = strtoull(val, &end, 0);
            if (errno || end == val || *end || val[0] == '-')
                return bad_option("--seed expects an integer in 0..18446744073709551615, got",
                                  val);
            o->seed = (uint64_t)s;
        } else if (!strcmp(name, "--dtype")) {
            if (rkv_dtype_parse(val, &o->dtype) != RKV_OK)
                return bad_option("--dtype expects f32, f16 or bf16, got", val);
            o->have_dtype = 1;
        } else if (!strcmp(name, "--threads")) {
            if (parse_int(val, 1, 1024, &v))
                return bad_option("--threads expects an integer in 1..1024, got", val);
            o->threads = (int)v;
        } else if (!strcmp(name, "--backend")) {
            if (!strcmp(val, "cpu")) {
                o->backend = BACKEND_CPU;
            } else if (!strcmp(val, "cuda")) {
                o->backend = BACKEND_CUDA;
            } else {
                return bad_option("--backend expects cpu or cuda, got", val);
            }
        } else if (!strcmp(name, "--snapshot-out")) {
            if (!*val) return bad_option("--snapshot-out expects a file, got", val);
            if (strlen(val) > PATH_MAX_LEN)
                return bad_option("--snapshot-out: path too long:", val);
            o->snapshot_out = val;
        } else if (!strcmp(name, "--resume")) {
            if (!*val) return bad_option("--resume expects a snapshot file, got", val);
            o->resume = val;
        }
    }
    if (o->backend == BACKEND_CUDA && !rollout_gpu_built()) {
        fprintf(stderr, "ringkv rollout: --backend cuda: ringkv was built without CUDA\n");
        return 2;
    }
    if (o->backend == BACKEND_CUDA && (o->snapshot_out || o->resume)) {
        fprintf(stderr, "ringkv rollout: --snapshot-out and --resume work with --backend cpu "
                        "only (the CUDA path keeps no host-side session to save or load)\n");
        return 2;
    }
    if (o->resume && o->sessions != 1) {
        fprintf(stderr, "ringkv rollout: --resume continues one session (a snapshot holds "
                        "session 0 only): use --sessions 1\n");
        return 2;
    }
    return -1;
}

/* The default image: data/earth.jpg from the working directory, else beside
 * the repository the executable was built in (its folder and up to 3 above).
 * NULL when it is in none of them; `exe` receives the executable's path (or
 * ""). A file that exists but cannot be read is returned: the load says why. */
static const char *default_image(char *buf, size_t n, char *exe, size_t exe_n) {
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

/* Checks that a file can be written in the existing folder `dir`. 0, or -1
 * with a message. */
static int check_folder_writable(const char *what, const char *dir, char *err, size_t n) {
    struct stat st;
    if (stat(dir, &st) != 0) {
        snprintf(err, n, "%s: folder '%s': %s", what, dir,
                 errno == ENOENT ? "no such folder" : strerror(errno));
        return -1;
    }
    if (!S_ISDIR(st.st_mode)) {
        snprintf(err, n, "%s: '%s' is not a folder", what, dir);
        return -1;
    }
    if (access(dir, W_OK | X_OK) != 0) {
        snprintf(err, n, "%s: cannot write in folder '%s': %s", what, dir, strerror(errno));
        return -1;
    }
    return 0;
}

/* Checks that the file `path` can be (over)written, its folder existing: not
 * a folder itself, writable when it exists. 0, or -1 with a message. */
static int check_output_file(const char *what, const char *path, char *err, size_t n) {
    struct stat st;
    if (stat(path, &st) == 0) {
        if (S_ISDIR(st.st_mode)) {
            snprintf(err, n, "%s: '%s' is a folder; a file is written there", what, path);
            return -1;
        }
        if (access(path, W_OK) != 0) {
            snprintf(err, n, "%s: cannot overwrite '%s': %s", what, path, strerror(errno));
            return -1;
        }
        return 0;
    }
    if (errno != ENOENT) {
        snprintf(err, n, "%s: '%s': %s", what, path, strerror(errno));
        return -1;
    }
    return 0;
}

/* --out DIR before the run: an existing folder we can write in (and its
 * picture and legend files writable), or a path mkdir -p can create (the
 * nearest existing folder above it writable). Creates nothing. 0, or -1 with
 * a message. */
static int check_out_folder(const char *path, char *err, size_t n) {
    struct stat st;
    char file[PATH_MAX_LEN + 64];
    if (stat(path, &st) == 0) {
        if (!S_ISDIR(st.st_mode)) {
            snprintf(err, n,
                     "--out '%s' is a file, not a folder (the picture %s and its legend %s "
                     "go into the folder --out DIR)",
                     path, PICTURE_NAME, LEGEND_NAME);
            return -1;
        }
        if (access(path, W_OK | X_OK) != 0) {
            snprintf(err, n, "--out: cannot write in folder '%s': %s", path, strerror(errno));
            return -1;
        }
        snprintf(file, sizeof file, "%s/%s", path, PICTURE_NAME);
        if (check_output_file("--out", file, err, n)) return -1;
        snprintf(file, sizeof file, "%s/%s", path, LEGEND_NAME);
        return check_output_file("--out", file, err, n);
    }
    if (errno != ENOENT) {
        snprintf(err, n, "--out '%s': %s", path,
                 errno == ENOTDIR ? "a part of the path is a file, not a folder"
                                  : strerror(errno));
        return -1;
    }
    /* the nearest existing folder above it */
    char up[PATH_MAX_LEN + 1];
    snprintf(up, sizeof up, "%s", path);
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
        if (errno != ENOENT || !strcmp(up, ".") || !strcmp(up, "/")) {
            snprintf(err, n, "--out '%s': cannot create it: '%s': %s", path, up,
                     errno == ENOTDIR ? "a part of the path is a file, not a folder"
                                      : strerror(errno));
            return -1;
        }
    }
    if (!S_ISDIR(st.st_mode)) {
        snprintf(err, n, "--out '%s': cannot create it: '%s' is a file, not a folder", path, up);
        return -1;
    }
    if (access(up, W_OK | X_OK) != 0) {
        snprintf(err, n, "--out '%s': cannot create it in '%s': %s", path, up, strerror(errno));
        return -1;
    }
    return 0;
}

/* mkdir -p */
static int make_dirs(const char *path, char *err, size_t err_len) {
    char buf[PATH_MAX_LEN + 1];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf) {
        snprintf(err, err_len, "--out path too long");
        return -1;
    }
    for (char *p = buf + 1;; p++) {
        if (*p == '/' || *p == '\0') {
            char c = *p;
            *p = '\0';
            if (mkdir(buf, 0777) != 0 && errno != EEXIST) {
                snprintf(err, err_len, "cannot create folder '%.300s': %s", buf, strerror(errno));
                return -1;
            }
            *p = c;
            if (c == '\0') break;
        }
    }
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode)) {
        snprintf(err, err_len, "'%s' is not a folder", path);
        return -1;
    }
    return 0;
}

/* --snapshot-out FILE before the run: not a folder, in a folder we can write
 * in (the library writes FILE.tmp-XXXXXX there and renames it). */
static int check_snapshot_out(const char *path, char *err, size_t n) {
    char dir[PATH_MAX_LEN + 1];
    if (check_output_file("--snapshot-out", path, err, n)) return -1;
    folder_of(path, dir, sizeof dir);
    return check_folder_writable("--snapshot-out", dir, err, n);
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

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Nearest-rank percentile of sorted values. */
static double percentile(const double *sorted, int64_t n, double p) {
    int64_t k = (int64_t)ceil(p / 100.0 * (double)n);
    if (k < 1) k = 1;
    if (k > n) k = n;
    return sorted[k - 1];
}

/* The frames shown in the picture, all within the run's clocks [first, end):
 * for session 0, one frame of each kind of move (a pan's 5th frame, the first
 * frame of a revisit or a jump): the first one once the local ring is full
 * (clock >= 16), else the last one, in frame order; the run's last frame when
 * none falls in the range. The first ones are on the most textured ground
 * (camera.c). */
static int pick_frames(camera_path *path, int64_t first, int64_t end, int64_t *picks) {
    static const camera_move ORDER[] = {CAMERA_PAN, CAMERA_REVISIT_NEAR, CAMERA_REVISIT_MID,
                                        CAMERA_REVISIT_FAR, CAMERA_JUMP};
    const int64_t settled = 16;
    int n = 0;
    for (size_t k = 0; k < sizeof ORDER / sizeof ORDER[0]; k++) {
        const int64_t offset = ORDER[k] == CAMERA_PAN ? 4 : 0;
        int64_t best = -1;
        for (int64_t m = first / CAMERA_SEGMENT * CAMERA_SEGMENT; m + offset < end;
             m += CAMERA_SEGMENT) {
            if (m + offset < first) continue;
            const camera_pose *p = camera_path_pose(path, m);
            if (!p || p->move != ORDER[k]) continue;
            best = m + offset;
            if (best >= settled) break;
        }
        if (best >= 0) picks[n++] = best;
    }
    if (n == 0) picks[n++] = end - 1;
    /* frame order */
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && picks[j - 1] > picks[j]; j--) {
            int64_t t = picks[j];
            picks[j] = picks[j - 1];
            picks[j - 1] = t;
        }
    return n;
}

/* Everything one run allocates (freed by run_free). */
typedef struct run {
    rkv_model *model;
    world_map world;
    tokens_codec codec;
    camera_path **paths;
    recall_memory *memory;
    int64_t *sessions;
    int64_t *frame_pos;
    float *kv32;
    void *kv_store; /* storage dtype when not f32, else NULL */
    float *q, *out;
    float *q0, *k0, *v0;
    float *truth;       /* [B][T][VD] */
    float *recalled[2]; /* [B][T][VD] per class */
    int8_t *band0;      /* [T] band of session 0's tokens */
    double *pass_us;
    sheet pic;
    int64_t n_paths, n_memory;
    rkv_threadpool *pool;       /* CPU backend                       */
    rollout_gpu *gpu;           /* CUDA backend                      */
    XXH3_state_t *digest;       /* the last frame's outputs          */
    float *digest_le;           /* big-endian hosts: byte-swapped copy */
} run;

static void run_free(run *r) {
    rkv_model_destroy(r->model);
    rollout_gpu_destroy(r->gpu);
    rkv_threadpool_destroy(r->pool);
    if (r->digest) XXH3_freeState(r->digest);
    free(r->digest_le);
    for (int64_t s = 0; s < r->n_paths; s++) camera_path_destroy(r->paths[s]);
    for (int64_t s = 0; s < r->n_memory; s++) recall_memory_free(&r->memory[s]);
    free(r->paths);
    free(r->memory);
    free(r->sessions);
    free(r->frame_pos);
    free(r->kv32);
    free(r->kv_store);
    free(r->q);
    free(r->out);
    free(r->q0);
    free(r->k0);
    free(r->v0);
    free(r->truth);
    free(r->recalled[0]);
    free(r->recalled[1]);
    free(r->band0);
    free(r->pass_us);
    sheet_free(&r->pic);
    tokens_codec_free(&r->codec);
    world_free(&r->world);
}

static int lib_fail(const char *call, rkv_status st) {
    fprintf(stderr, "ringkv rollout: %s failed: %s: %s\n", call, rkv_status_str(st),
            rkv_last_error());
    return 1;
}

static void *alloc_floats(size_t n) { return malloc((n ? n : 1) * sizeof(float)); }

static cJSON *band_object(const recall_tally *t, int what) {
    /* what: 0 mean PSNR, 1 rate, 2 count */
    cJSON *o = cJSON_CreateObject();
    for (int b = 0; b < RECALL_BANDS; b++) {
        const recall_tally *x = t ? &t[b] : NULL;
        const char *name = recall_band_name((recall_band)b);
        if (what == 2)
            cJSON_AddNumberToObject(o, name, x ? (double)x->patches : 0.0);
        else if (!x || x->patches == 0)
            cJSON_AddNullToObject(o, name);
        else
            cJSON_AddNumberToObject(o, name, what == 0 ? recall_mean_psnr_db(x) : recall_rate(x));
    }
    return o;
}

static cJSON *class_object(const recall_stats *st, const int have[2], int what) {
    cJSON *o = cJSON_CreateObject();
    for (int c = 0; c < RECALL_CLASSES; c++)
        cJSON_AddItemToObject(o, recall_class_name((recall_class)c),
                              band_object(have[c] ? st->tally[c] : NULL, what));
    return o;
}

static int host_little_endian(void) {
    const uint32_t one = 1;
    unsigned char b;
    memcpy(&b, &one, 1);
    return b == 1;
}

/* Identity of the map for the request id: XXH3-64 of its luma and size. */
static uint64_t map_hash(const world_map *w) {
    return XXH3_64bits_withSeed(w->luma,
                                (size_t)(w->rows * WORLD_PATCH) * (size_t)w->width_px * sizeof(float),
                                (uint64_t)w->cols);
}

/* Request id of rollout session s: names the seed and the map, so that a
 * snapshot says which camera path its ring followed (the library checks the
 * geometry, this the world). */
static void session_request_id(char *buf, size_t n, int64_t s, uint64_t seed, uint64_t map_id) {
    snprintf(buf, n, "rollout-%lld seed=%" PRIu64 " map=%016" PRIx64, (long long)s, seed, map_id);
}

/* A resumed run must continue session 0's camera path of the same seed and
 * map. 0 to go on (a snapshot of another program only gets a warning: its
 * ring is taken as having followed that path), -1 when the snapshot names
 * another session, seed or map. */
static int check_resume_source(const char *path, const rkv_snapshot_info *info, uint64_t seed,
                               uint64_t map_id) {
    long long session;
    unsigned long long saved_seed, saved_map;
    int used = -1;
    if (sscanf(info->request_id, "rollout-%lld seed=%llu map=%16llx%n", &session, &saved_seed,
               &saved_map, &used) != 3 ||
        used < 0 || (size_t)used != strlen(info->request_id)) {
        fprintf(stderr,
                "ringkv rollout: warning: %s was not saved by ringkv rollout (request id '%s'); "
                "continuing session 0's camera path of seed %" PRIu64 " as if its ring had "
                "followed it\n",
                path, info->request_id, seed);
        return 0;
    }
    if (session != 0 || saved_seed != seed || saved_map != map_id) {
        char mine[RKV_MAX_REQUEST_ID];
        session_request_id(mine, sizeof mine, 0, seed, map_id);
        fprintf(stderr,
                "ringkv rollout: %s holds '%s', this run would continue '%s': resume with the "
                "--seed and --image of the run that saved it (the camera path and the recall "
                "bookkeeping depend on them)\n",
                path, info->request_id, mine);
        return -1;
    }
    return 0;
}

/* The outputs the rollout reads: the recall layers' on the first pass, and
 * every layer's on the run's last frame (the digest). */
static int output_needed(const int64_t layer_of[2], int pass, int64_t l, int last_frame) {
    return last_frame || (pass == 0 && (l == layer_of[0] || l == layer_of[1]));
}

/* Takes layer l's attention outputs of this pass from r->out ([B][Hq][T][D]
 * f32): the recalled views (head 0, first VD dims) on the first pass, and the
 * digest on the last frame (float32 little-endian bytes, all sessions and
 * heads; called in the order pass, layer). 0, or -1 with a message. */
static int use_output(run *r, const int64_t layer_of[2], int pass, int64_t l, int last_frame,
                      int64_t B, int64_t T, int64_t Hq, int64_t D, int64_t VD, size_t n_q) {
    for (int c = 0; c < RECALL_CLASSES; c++)
        if (pass == 0 && l == layer_of[c])
            for (int64_t s = 0; s < B; s++)
                for (int64_t t = 0; t < T; t++)
                    memcpy(r->recalled[c] + (s * T + t) * VD, r->out + ((size_t)s * Hq * T + t) * D,
                           (size_t)VD * sizeof(float));
    if (!last_frame) return 0;
    const float *bytes = r->out;
    if (r->digest_le) { /* a big-endian host: hash the little-endian bytes */
        const unsigned char *src = (const unsigned char *)r->out;
        unsigned char *dst = (unsigned char *)r->digest_le;
        for (size_t i = 0; i < n_q; i++)
            for (int k = 0; k < 4; k++) dst[4 * i + (size_t)k] = src[4 * i + 3 - (size_t)k];
        bytes = r->digest_le;
    }
    if (XXH3_64bits_update(r->digest, bytes, n_q * sizeof(float)) != XXH_OK) {
        fprintf(stderr, "ringkv rollout: XXH3_64bits_update failed\n");
        return -1;
    }
    return 0;
}

static void print_band_row(const char *cls, const recall_tally *t) {
    printf("  %-7s", cls);
    for (int b = 0; b < RECALL_BANDS; b++) {
        if (!t || t[b].patches == 0)
            printf("  %5s %7s %6d", "-", "-", 0);
        else
            printf("  %5.2f %7.1f %6lld", recall_rate(&t[b]), recall_mean_psnr_db(&t[b]),
                   (long long)t[b].patches);
    }
    printf("\n");
}

/* What the rollout allocates besides the model, an upper bound of its large
 * buffers (see the buffers section of rkv_cmd_rollout). */
typedef struct tool_memory {
    uint64_t per_session; /* tokens of a pass and a frame, camera path, clocks */
    uint64_t fixed;       /* pass latencies, the picture, the map            */
    uint64_t by_frames;   /* of both, what grows with the last frame clock    */
} tool_memory;

static tool_memory rollout_tool_memory(const rkv_model_config *cfg, int64_t sessions,
                                       int64_t frames, int64_t end, const world_map *w) {
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
    uint64_t cap = 256; /* the camera path keeps every pose, grown by doubling */
    while (cap < (uint64_t)end) cap *= 2;
    const uint64_t poses = cap / 2 * 3 * sizeof(camera_pose); /* realloc: old + new */
    m.per_session += poses;
    m.fixed += (uint64_t)frames * TOKENS_PASSES * sizeof(double); /* pass latencies */
    m.fixed += 3 * T * D * sizeof(float);                         /* q0, k0, v0 */
    m.fixed += SHEET_MAX_ROWS * (3 * T * VD * sizeof(float) + T) * 2; /* rows, PNG */
    m.by_frames = poses * (uint64_t)sessions + (uint64_t)frames * TOKENS_PASSES * sizeof(double);
    return m;
}

static double gib(uint64_t bytes) { return (double)bytes / 1073741824.0; }

/* Refuses a run that needs more than MEMORY_SHARE of the available memory:
 * 0 to go on, or 2 with a message naming both and what to change. */
static int check_memory(const rollout_opts *o, size_t model_session, const tool_memory *tm,
                        int64_t end) {
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
                " bytes for the camera path and the latencies up to frame clock %" PRId64
                "): use fewer --frames\n",
                tm->by_frames, end - 1);
    } else {
        fprintf(stderr,
                "ringkv rollout: even one session does not fit: use a smaller preset or "
                "--dtype, or a machine with more memory\n");
    }
    return 2;
}

/* Relative cost of frames [a, b) (attention over every visible ring frame
 * of every layer, plus one unit for the current frame and the upsert): a
 * layer with PD p and RB buckets sees about min(f / p, RB) earlier frames at
 * clock f. Used to project a run's time from its first frames. */
static double frames_cost(const rkv_model_config *cfg, int64_t a, int64_t b) {
    double c = 0.0;
    if (b <= a) return 0.0;
    for (int64_t l = 0; l < cfg->n_layers; l++) {
        const double pd = (double)(cfg->layers[l].pinned_dilation > 0
                                       ? cfg->layers[l].pinned_dilation
                                       : 1);
        const int64_t rb = cfg->layers[l].ring_buckets;
        const int64_t knee = (int64_t)pd * rb; /* from here the ring is full */
        c += (double)(b - a);
        const int64_t lo = a, hi = b < knee ? b : knee;
        if (hi > lo) c += ((double)lo + (double)hi - 1.0) * (double)(hi - lo) / 2.0 / pd;
        const int64_t full_from = a > knee ? a : knee;
        if (b > full_from) c += (double)rb * (double)(b - full_from);
    }
    return c;
}

/* "15 ms", "2.5 s", "12 s", "4 min", "2.1 h" */
static void say_duration(char *buf, size_t n, double s) {
    if (s < 1.0) snprintf(buf, n, "%.0f ms", s * 1e3);
    else if (s < 10.0) snprintf(buf, n, "%.1f s", s);
    else if (s < 90.0) snprintf(buf, n, "%.0f s", s);
    else if (s < 5400.0) snprintf(buf, n, "%.0f min", s / 60.0);
    else snprintf(buf, n, "%.1f h", s / 3600.0);
}

int rkv_cmd_rollout(int argc, char **argv) {
    rollout_opts o;
    int rc = parse_args(argc, argv, &o);
    if (rc >= 0) return rc;

    char err[PATH_MAX_LEN + 512], image_buf[PATH_MAX_LEN + 200], exe[PATH_MAX_LEN + 100];
    const int progress = isatty(STDERR_FILENO);
    const double t_start = now_s();

    run R;
    memset(&R, 0, sizeof R);

    /* Everything that can be checked is checked before the model is created
     * and before any frame: the preset, the image, the output paths, the
     * snapshot to resume and the memory. Exit 2 for what the user passed. */

    /* ---- the preset ---- */
    rkv_model_config cfg;
    rkv_status st = rkv_model_preset(o.preset, o.full_global_ring, &cfg);
    if (st != RKV_OK) {
        fprintf(stderr, "ringkv rollout: %s\n", rkv_last_error());
        return 2;
    }
    cfg.num_sessions = o.sessions;
    if (o.have_dtype) cfg.dtype = o.dtype;
    if (!o.frames) o.frames = default_frames(o.preset);
    size_t mem_session = 0, mem_total = 0;
    if ((st = rkv_model_config_memory(&cfg, &mem_session, &mem_total)) != RKV_OK)
        return lib_fail("rkv_model_config_memory", st);

    /* ---- the image and the output paths ---- */
    const char *image = o.image;
    if (!image && !(image = default_image(image_buf, sizeof image_buf, exe, sizeof exe))) {
        fprintf(stderr,
                "ringkv rollout: cannot find the default image %s: it is neither in the "
                "working directory nor beside the executable%s%s%s (its folder and 3 above); "
                "pass --image PATH (any JPEG or PNG file)\n",
                DEFAULT_IMAGE, exe[0] ? " (" : "", exe, exe[0] ? ")" : "");
        return 2;
    }
    if (check_out_folder(o.out, err, sizeof err) ||
        (o.snapshot_out && check_output_file("--snapshot-out", o.snapshot_out, err, sizeof err))) {
        fprintf(stderr, "ringkv rollout: %s\n", err);
        return 2;
    }
    rc = 2;

    const int64_t B = o.sessions, F = o.frames, L = cfg.n_layers;
    const int64_t T = cfg.tokens_per_frame, D = cfg.d_head, H = cfg.n_kv_heads,
                  Hq = cfg.n_q_heads;
    const rkv_dtype dtype = cfg.dtype;
    int64_t layer_of[2] = {-1, -1}; /* first local, first global */
    for (int64_t l = 0; l < L; l++) {
        int c = cfg.layers[l].pinned_dilation > 1 ? RECALL_GLOBAL : RECALL_LOCAL;
        if (layer_of[c] < 0) layer_of[c] = l;
    }
    const int have[2] = {layer_of[0] >= 0, layer_of[1] >= 0};

    /* ---- the world ---- */
    const camera_view view = camera_view_for_tokens(T);
    if (world_load(&R.world, image, err, sizeof err)) {
        fprintf(stderr, "ringkv rollout: %s\n", err);
        goto done;
    }
    if (R.world.cols < view.cols || R.world.rows < view.rows) {
        fprintf(stderr,
                "ringkv rollout: the map of '%s' is %lld cols x %lld rows of 8 x 8-pixel "
                "cells; the view of %lld tokens needs at least %lld cols x %lld rows (an "
                "image of at least %lld x %lld pixels, width x height)\n",
                image, (long long)R.world.cols, (long long)R.world.rows, (long long)T,
                (long long)view.cols, (long long)view.rows,
                (long long)(view.cols * WORLD_PATCH), (long long)(view.rows * WORLD_PATCH));
        goto done;
    }
    const uint64_t map_id = map_hash(&R.world);

    /* ---- resume: the snapshot's clock, and whether it followed this path ---- */
    int64_t first = 0; /* the run's first frame clock */
    rkv_snapshot_info snap_info;
    memset(&snap_info, 0, sizeof snap_info);
    if (o.resume) {
        if ((st = rkv_snapshot_inspect(o.resume, &snap_info)) != RKV_OK) {
            rc = lib_fail("rkv_snapshot_inspect", st);
            goto done;
        }
        rc = 1;
        if (check_resume_source(o.resume, &snap_info, o.seed, map_id)) goto done;
        const int64_t last = snap_info.last_committed;
        if (last >= MAX_CLOCK - F) {
            fprintf(stderr,
                    "ringkv rollout: %s: the saved clock %lld + %lld frames goes beyond the "
                    "last clock the rollout's camera path covers (%lld)\n",
                    o.resume, (long long)last, (long long)F, (long long)MAX_CLOCK);
            goto done;
        }
        first = last + 1; /* -1 (no clock): from frame 0 */
        rc = 2;
    }
    const int64_t end = first + F; /* one past the last frame */

    /* ---- memory: the model and the tool's buffers against what is available ---- */
    const tool_memory tool_mem = rollout_tool_memory(&cfg, B, F, end, &R.world);
    if ((rc = check_memory(&o, mem_session, &tool_mem, end)) != 0) goto done;

    /* ---- the output folder (created now), the snapshot's folder ---- */
    if (make_dirs(o.out, err, sizeof err) ||
        (o.snapshot_out && check_snapshot_out(o.snapshot_out, err, sizeof err))) {
        fprintf(stderr, "ringkv rollout: %s\n", err);
        rc = 2;
        goto done;
    }
    rc = 1;

    /* ---- the model ---- */
    if (o.backend == BACKEND_CPU) {
        if ((st = rkv_model_create(&cfg, &R.model)) != RKV_OK) {
            rc = lib_fail("rkv_model_create", st);
            goto done;
        }
        if ((st = rkv_threadpool_create(o.threads, &R.pool)) != RKV_OK) {
            rc = lib_fail("rkv_threadpool_create", st);
            goto done;
        }
    } else if (!(R.gpu = rollout_gpu_create(&cfg, o.sessions, err, sizeof err))) {
        fprintf(stderr, "ringkv rollout: --backend cuda: %s\n", err);
        goto done;
    }
    if (!(R.digest = XXH3_createState())) {
        fprintf(stderr, "ringkv rollout: out of memory for the output digest\n");
        goto done;
    }

    /* ---- the tokens ---- */
    if (tokens_codec_init(&R.codec, &R.world, D, err, sizeof err)) {
        fprintf(stderr, "ringkv rollout: %s\n", err);
        goto done;
    }
    const int64_t VD = R.codec.value_dims;

    /* ---- buffers ---- */
    const size_t n_kv = 2 * (size_t)H * (size_t)B * (size_t)T * (size_t)D;
    const size_t n_q = (size_t)B * (size_t)Hq * (size_t)T * (size_t)D;
    R.paths = calloc((size_t)B, sizeof *R.paths);
    R.memory = calloc((size_t)B, sizeof *R.memory);
    R.sessions = malloc((size_t)B * sizeof *R.sessions);
    R.frame_pos = malloc((size_t)B * sizeof *R.frame_pos);
    R.kv32 = alloc_floats(n_kv);
    R.kv_store = dtype == RKV_DTYPE_F32 ? NULL : malloc(n_kv * rkv_dtype_size(dtype));
    R.q = alloc_floats(n_q);
    R.out = alloc_floats(n_q);
    R.q0 = alloc_floats((size_t)(T * D));
    R.k0 = alloc_floats((size_t)(T * D));
    R.v0 = alloc_floats((size_t)(T * D));
    R.truth = alloc_floats((size_t)(B * T * VD));
    R.recalled[0] = calloc((size_t)(B * T * VD), sizeof(float));
    R.recalled[1] = calloc((size_t)(B * T * VD), sizeof(float));
    R.band0 = malloc((size_t)T);
    R.pass_us = malloc((size_t)F * TOKENS_PASSES * sizeof *R.pass_us);
    if (!host_little_endian()) R.digest_le = alloc_floats(n_q);
    if (!R.paths || !R.memory || !R.sessions || !R.frame_pos || !R.kv32 ||
        (dtype != RKV_DTYPE_F32 && !R.kv_store) || !R.q || !R.out || !R.q0 || !R.k0 ||
        !R.v0 || !R.truth || !R.recalled[0] || !R.recalled[1] || !R.band0 || !R.pass_us ||
        (!host_little_endian() && !R.digest_le)) {
        fprintf(stderr, "ringkv rollout: out of memory for the frame buffers\n");
        goto done;
    }
    for (int64_t s = 0; s < B; s++) {
        if (R.model) {
            char id[RKV_MAX_REQUEST_ID];
            session_request_id(id, sizeof id, s, o.seed, map_id);
            if ((st = rkv_model_claim(R.model, id, &R.sessions[s])) != RKV_OK) {
                rc = lib_fail("rkv_model_claim", st);
                goto done;
            }
        } else {
            R.sessions[s] = s; /* the CUDA path's sessions 0..B-1 */
        }
        R.paths[s] = camera_path_create(&R.world, view, o.seed, s);
        R.n_paths = s + 1;
        if (!R.paths[s] || recall_memory_init(&R.memory[s], R.world.cols, R.world.rows)) {
            fprintf(stderr, "ringkv rollout: out of memory for the camera paths\n");
            goto done;
        }
        R.n_memory = s + 1;
    }

    /* ---- resume: session 0 from the snapshot (inspected above) ---- */
    if (o.resume) {
        if ((st = rkv_model_load_session(R.model, R.sessions[0], o.resume)) != RKV_OK) {
            rc = lib_fail("rkv_model_load_session", st);
            goto done;
        }
        int64_t last = -1;
        if ((st = rkv_model_clock(R.model, R.sessions[0], &last)) != RKV_OK) {
            rc = lib_fail("rkv_model_clock", st);
            goto done;
        }
        if (last != first - 1) { /* the file changed since it was inspected */
            fprintf(stderr,
                    "ringkv rollout: %s: loaded clock %lld, but the file said %lld when "
                    "inspected (was it rewritten during the run?)\n",
                    o.resume, (long long)last, (long long)(first - 1));
            goto done;
        }
    }
    for (int64_t s = 0; s < B; s++)
        if (!camera_path_pose(R.paths[s], end - 1)) {
            fprintf(stderr, "ringkv rollout: out of memory for the camera paths\n");
            goto done;
        }
    /* The recall bookkeeping of a resumed session: the ring holds what the
     * camera saw before the snapshot, so 'last seen' is rebuilt by replaying
     * the path over frames 0 .. first-1 (the model is not touched). */
    for (int64_t f = 0; f < first; f++) {
        const camera_pose *p = camera_path_pose(R.paths[0], f);
        recall_memory_see(&R.memory[0], p->col, p->row, view.rows, view.cols, f);
    }
    int64_t picks[8];
    const int n_picks = pick_frames(R.paths[0], first, end, picks);
    sheet_init(&R.pic, view, VD);
    R.pic.layer[0] = layer_of[0];
    R.pic.layer[1] = layer_of[1];

    /* ---- the frame loop ---- */
    recall_stats stats;
    memset(&stats, 0, sizeof stats);
    int64_t move_frames[CAMERA_MOVE_COUNT] = {0};
    if (XXH3_64bits_reset(R.digest) != XXH_OK) {
        fprintf(stderr, "ringkv rollout: XXH3_64bits_reset failed\n");
        goto done;
    }
    double pass_total_s = 0.0, last_progress = 0.0;
    const double loop_start = now_s();
    double last_note = loop_start, first_done = loop_start;
    int estimated = 0, long_run = 0; /* the run-time estimate: made; over LONG_RUN_S */
    const void *kv_buf = dtype == RKV_DTYPE_F32 ? (const void *)R.kv32 : R.kv_store;
    rkv_attention_args args;
    memset(&args, 0, sizeof args);
    args.batch = B;
    args.n_q_heads = Hq;
    args.n_queries = T;
    args.q = R.q;
    args.q_dtype = RKV_DTYPE_F32;
    args.out = R.out;
    args.out_dtype = RKV_DTYPE_F32;
    args.scale = 1.0f; /* the queries carry their scale (tokens.h) */
    args.pool = R.pool;

    for (int64_t f = first; f < end; f++) {
        const int last_frame = f == end - 1;
        for (int64_t s = 0; s < B; s++) R.frame_pos[s] = f;
        if (R.model) {
            if ((st = rkv_model_begin_frame(R.model, B, R.sessions, R.frame_pos)) != RKV_OK) {
                rc = lib_fail("rkv_model_begin_frame", st);
                goto done;
            }
        } else if (rollout_gpu_begin_frame(R.gpu, f, err, sizeof err)) {
            goto gpu_failed;
        }
        /* queries and true pixels: the same on every pass */
        for (int64_t s = 0; s < B; s++) {
            camera_pose pose = *camera_path_pose(R.paths[s], f);
            move_frames[pose.move]++;
            tokens_frame(&R.codec, &R.world, view, &pose, o.seed, s, f, 0,
                         R.truth + s * T * VD, R.q0, NULL, NULL);
            for (int64_t h = 0; h < Hq; h++)
                memcpy(R.q + ((size_t)s * Hq + h) * T * D, R.q0, (size_t)(T * D) * sizeof(float));
        }
        if (R.gpu && rollout_gpu_set_queries(R.gpu, R.q, err, sizeof err)) goto gpu_failed;
        for (int pass = 0; pass < TOKENS_PASSES; pass++) {
            const int commit = pass == TOKENS_PASSES - 1;
            for (int64_t s = 0; s < B; s++) {
                camera_pose pose = *camera_path_pose(R.paths[s], f);
                tokens_frame(&R.codec, &R.world, view, &pose, o.seed, s, f, pass, NULL, NULL,
                             R.k0, R.v0);
                for (int64_t h = 0; h < H; h++) {
                    size_t row = (size_t)s * T * D;
                    memcpy(R.kv32 + (0 * (size_t)H + h) * B * T * D + row, R.k0,
                           (size_t)(T * D) * sizeof(float));
                    memcpy(R.kv32 + (1 * (size_t)H + h) * B * T * D + row, R.v0,
                           (size_t)(T * D) * sizeof(float));
                }
            }
            if (dtype != RKV_DTYPE_F32 &&
                (st = rkv_convert(R.kv32, RKV_DTYPE_F32, R.kv_store, dtype, n_kv)) != RKV_OK) {
                rc = lib_fail("rkv_convert", st);
                goto done;
            }
            double pass_s = 0.0;
            if (R.model) {
                for (int64_t l = 0; l < L; l++) {
                    const double t0 = now_s();
                    st = rkv_model_upsert(R.model, l, B, R.sessions, kv_buf, dtype, commit);
                    if (st != RKV_OK) {
                        rc = lib_fail("rkv_model_upsert", st);
                        goto done;
                    }
                    st = rkv_model_attend(R.model, l, B, R.sessions, &args);
                    pass_s += now_s() - t0;
                    if (st != RKV_OK) {
                        rc = lib_fail("rkv_model_attend", st);
                        goto done;
                    }
                    if (use_output(&R, layer_of, pass, l, last_frame, B, T, Hq, D, VD, n_q))
                        goto done;
                }
            } else {
                /* CUDA: one upload per pass, every layer enqueued, one wait */
                if (rollout_gpu_set_kv(R.gpu, kv_buf, err, sizeof err)) goto gpu_failed;
                const double t0 = now_s();
                for (int64_t l = 0; l < L; l++)
                    if (rollout_gpu_layer(R.gpu, l, commit, err, sizeof err)) goto gpu_failed;
                if (rollout_gpu_finish_pass(R.gpu, commit, err, sizeof err)) goto gpu_failed;
                pass_s = now_s() - t0;
                for (int64_t l = 0; l < L; l++) {
                    if (!output_needed(layer_of, pass, l, last_frame)) continue;
                    if (rollout_gpu_output(R.gpu, l, R.out, err, sizeof err)) goto gpu_failed;
                    if (use_output(&R, layer_of, pass, l, last_frame, B, T, Hq, D, VD, n_q))
                        goto done;
                }
            }
            R.pass_us[(f - first) * TOKENS_PASSES + pass] = pass_s * 1e6;
            pass_total_s += pass_s;
        }
        if (R.gpu && rollout_gpu_check(R.gpu, err, sizeof err)) goto gpu_failed;

        /* recall of this frame's first pass */
        for (int64_t s = 0; s < B; s++) {
            camera_pose pose = *camera_path_pose(R.paths[s], f);
            for (int64_t t = 0; t < T; t++) {
                int64_t col = pose.col + t % view.cols, row = pose.row + t / view.cols;
                stats.measured++;
                int8_t band = SHEET_FLAT;
                if (world_cell_textured(&R.world, col, row)) {
                    recall_band b = recall_band_of_gap(recall_memory_gap(&R.memory[s], col, row, f));
                    band = (int8_t)b;
                    if (b == RECALL_UNSEEN) {
                        stats.unseen++;
                    } else {
                        const float *truth = R.truth + (s * T + t) * VD;
                        for (int c = 0; c < RECALL_CLASSES; c++)
                            if (have[c])
                                recall_stats_add(&stats, (recall_class)c, b,
                                                 recall_psnr_db(truth, R.recalled[c] + (s * T + t) * VD, VD));
                    }
                } else {
                    stats.flat++;
                }
                if (s == 0) R.band0[t] = band;
            }
            recall_memory_see(&R.memory[s], pose.col, pose.row, view.rows, view.cols, f);
        }
        for (int i = 0; i < n_picks; i++)
            if (picks[i] == f)
                sheet_add(&R.pic, f, camera_move_name(camera_path_pose(R.paths[0], f)->move),
                          R.truth, R.recalled[0], R.recalled[1], R.band0);

        /* the time left, projected from the frames so far by their cost (the
         * first frames are cheap: the rings are still filling); the run's
         * first frame (warm-up: threads, first touch of the rings) is left out
         * once there are others */
        {
            const double t = now_s(), el = t - loop_start;
            const int64_t done_frames = f - first + 1;
            if (f == first) first_done = t;
            const int64_t from = f > first ? first + 1 : first;
            const double base = f > first ? t - first_done : el;
            const double done_cost = frames_cost(&cfg, from, f + 1);
            const double per_cost = done_cost > 0.0 ? base / done_cost : 0.0;
            const double left = per_cost * frames_cost(&cfg, f + 1, end);
            char when[32], left_s[48];
            if (!estimated && !last_frame &&
                ((done_frames >= 3 && (el >= 1.0 || done_frames >= 64)) || el >= 10.0)) {
                estimated = 1;
                if (el + left > LONG_RUN_S) {
                    long_run = 1;
                    char per[32];
                    say_duration(when, sizeof when, el + left);
                    say_duration(per, sizeof per,
                                 per_cost * frames_cost(&cfg, MAX_CLOCK, (int64_t)MAX_CLOCK + 1));
                    if (progress) fprintf(stderr, "\r%*s\r", 79, "");
                    fprintf(stderr,
                            "ringkv rollout: this run should take about %s: %lld frames x "
                            "%lld session(s) of %s at about %s a frame once the rings are "
                            "full (projected from the first %lld frames); --frames N runs "
                            "fewer\n",
                            when, (long long)F, (long long)B, o.preset, per,
                            (long long)done_frames);
                }
            }
            if (progress && (t - last_progress > 0.25 || last_frame)) {
                last_progress = t;
                if (done_frames >= 3) { /* the first frame is left out of the estimate */
                    char tmp[32];
                    say_duration(tmp, sizeof tmp, left);
                    snprintf(left_s, sizeof left_s, "%s left", tmp);
                } else {
                    left_s[0] = '\0';
                }
                fprintf(stderr,
                        "\rringkv rollout: frame %lld (%lld/%lld)  %.2f frames/s per session  "
                        "%s ",
                        (long long)f, (long long)done_frames, (long long)F,
                        (double)done_frames / el, left_s);
                fflush(stderr);
            } else if (!progress && long_run && !last_frame && t - last_note >= PROGRESS_EVERY_S) {
                last_note = t;
                say_duration(when, sizeof when, el);
                say_duration(left_s, sizeof left_s, left);
                fprintf(stderr,
                        "ringkv rollout: frame %lld (%lld/%lld), %s so far, about %s left\n",
                        (long long)f, (long long)done_frames, (long long)F, when, left_s);
                fflush(stderr);
            }
        }
    }
    if (progress) fprintf(stderr, "\r%*s\r", 79, "");
    const double loop_s = now_s() - loop_start;
    char digest_hex[17];
    snprintf(digest_hex, sizeof digest_hex, "%016" PRIx64, (uint64_t)XXH3_64bits_digest(R.digest));

    /* ---- the snapshot: session 0, between frames ---- */
    if (o.snapshot_out &&
        (st = rkv_model_save_session(R.model, R.sessions[0], o.snapshot_out)) != RKV_OK) {
        rc = lib_fail("rkv_model_save_session", st);
        goto done;
    }

    /* ---- the picture ---- */
    char picture[PATH_MAX_LEN + 64], legend[PATH_MAX_LEN + 64], about[1024];
    snprintf(picture, sizeof picture, "%s/%s", o.out, PICTURE_NAME);
    snprintf(legend, sizeof legend, "%s/%s", o.out, LEGEND_NAME);
    {
        int n = snprintf(about, sizeof about,
                         "Run: preset %s%s, seed %" PRIu64 ", frames %lld..%lld, image %s.\n"
                         "Recall layers:",
                         o.preset, o.full_global_ring ? " (full global ring)" : "", o.seed,
                         (long long)first, (long long)(end - 1), image);
        for (int c = 0; c < RECALL_CLASSES && n > 0 && (size_t)n < sizeof about; c++)
            if (have[c]) {
                const rkv_layer_spec *ls = &cfg.layers[layer_of[c]];
                n += snprintf(about + n, sizeof about - (size_t)n,
                              " %s layer %lld (RF %lld, RB %lld, PD %lld);",
                              recall_class_name((recall_class)c), (long long)layer_of[c],
                              (long long)ls->ring_frames, (long long)ls->ring_buckets,
                              (long long)ls->pinned_dilation);
            }
        if (n > 0 && (size_t)n < sizeof about && about[n - 1] == ';') about[n - 1] = '.';
    }
    if (make_dirs(o.out, err, sizeof err) || sheet_write_png(&R.pic, picture, err, sizeof err) ||
        sheet_write_legend(&R.pic, legend, PICTURE_NAME, about, err, sizeof err)) {
        fprintf(stderr, "ringkv rollout: %s\n", err);
        goto done;
    }

    /* ---- figures ---- */
    const int64_t n_pass = F * TOKENS_PASSES;
    qsort(R.pass_us, (size_t)n_pass, sizeof *R.pass_us, cmp_double);
    double mean_us = 0.0;
    for (int64_t i = 0; i < n_pass; i++) mean_us += R.pass_us[i];
    mean_us /= (double)n_pass;
    const double p50 = percentile(R.pass_us, n_pass, 50.0), p99 = percentile(R.pass_us, n_pass, 99.0);
    const double fps_session = pass_total_s > 0 ? (double)F / pass_total_s : 0.0;
    const double fps_all = fps_session * (double)B;
    const size_t model_bytes = R.model ? rkv_model_memory_bytes(R.model) : rollout_gpu_memory_bytes(R.gpu);
    const char *backend_name = o.backend == BACKEND_CUDA ? "cuda" : "cpu";
    const int threads = R.pool ? rkv_threadpool_size(R.pool) : 0;

    if (o.json) {
        cJSON *j = cJSON_CreateObject();
        cJSON_AddStringToObject(j, "command", "rollout");
        cJSON_AddStringToObject(j, "ringkv_version", rkv_version());
        cJSON *opt = cJSON_AddObjectToObject(j, "options");
        cJSON_AddStringToObject(opt, "preset", o.preset);
        cJSON_AddBoolToObject(opt, "full_global_ring", o.full_global_ring);
        cJSON_AddNumberToObject(opt, "sessions", (double)B);
        cJSON_AddNumberToObject(opt, "frames", (double)F);
        cJSON_AddStringToObject(opt, "image", image);
        cJSON_AddStringToObject(opt, "out", o.out);
        char seed_s[32];
        snprintf(seed_s, sizeof seed_s, "%" PRIu64, o.seed);
        cJSON_AddNumberToObject(opt, "seed", (double)o.seed);
        cJSON_AddStringToObject(opt, "seed_exact", seed_s);
        cJSON_AddStringToObject(opt, "dtype", rkv_dtype_name(dtype));
        cJSON_AddStringToObject(opt, "backend", backend_name);
        if (R.pool)
            cJSON_AddNumberToObject(opt, "threads", (double)threads);
        else
            cJSON_AddNullToObject(opt, "threads");
        if (o.snapshot_out)
            cJSON_AddStringToObject(opt, "snapshot_out", o.snapshot_out);
        else
            cJSON_AddNullToObject(opt, "snapshot_out");
        if (o.resume)
            cJSON_AddStringToObject(opt, "resume", o.resume);
        else
            cJSON_AddNullToObject(opt, "resume");

        cJSON *geo = cJSON_AddObjectToObject(j, "geometry");
        cJSON_AddStringToObject(geo, "model", cfg.name);
        cJSON_AddNumberToObject(geo, "n_layers", (double)L);
        cJSON_AddNumberToObject(geo, "num_sessions", (double)cfg.num_sessions);
        cJSON_AddNumberToObject(geo, "n_q_heads", (double)Hq);
        cJSON_AddNumberToObject(geo, "n_kv_heads", (double)H);
        cJSON_AddNumberToObject(geo, "d_head", (double)D);
        cJSON_AddNumberToObject(geo, "tokens_per_frame", (double)T);
        cJSON_AddStringToObject(geo, "dtype", rkv_dtype_name(dtype));
        cJSON *layers = cJSON_AddArrayToObject(geo, "layers");
        for (int64_t l = 0; l < L; l++) {
            cJSON *x = cJSON_CreateObject();
            cJSON_AddNumberToObject(x, "layer", (double)l);
            cJSON_AddNumberToObject(x, "ring_frames", (double)cfg.layers[l].ring_frames);
            cJSON_AddNumberToObject(x, "ring_buckets", (double)cfg.layers[l].ring_buckets);
            cJSON_AddNumberToObject(x, "pinned_dilation", (double)cfg.layers[l].pinned_dilation);
            cJSON_AddStringToObject(x, "class", cfg.layers[l].pinned_dilation > 1 ? "global" : "local");
            cJSON_AddItemToArray(layers, x);
        }
        cJSON *vw = cJSON_AddObjectToObject(geo, "view");
        cJSON_AddNumberToObject(vw, "rows", (double)view.rows);
        cJSON_AddNumberToObject(vw, "cols", (double)view.cols);
        cJSON_AddNumberToObject(vw, "patch_px", WORLD_PATCH);
        cJSON *map = cJSON_AddObjectToObject(geo, "map");
        cJSON_AddNumberToObject(map, "cols", (double)R.world.cols);
        cJSON_AddNumberToObject(map, "rows", (double)R.world.rows);
        cJSON_AddNumberToObject(map, "textured_fraction", R.world.textured_fraction);
        cJSON *tok = cJSON_AddObjectToObject(geo, "tokens");
        cJSON_AddNumberToObject(tok, "position_pairs_x", R.codec.n_pairs_x);
        cJSON_AddNumberToObject(tok, "position_pairs_y", R.codec.n_pairs_y);
        cJSON_AddNumberToObject(tok, "margin", R.codec.margin);
        cJSON_AddNumberToObject(tok, "q_scale", R.codec.q_scale);
        cJSON_AddNumberToObject(tok, "value_dims", (double)VD);
        cJSON *rl = cJSON_AddObjectToObject(j, "recall_layers");
        for (int c = 0; c < RECALL_CLASSES; c++) {
            if (have[c])
                cJSON_AddNumberToObject(rl, recall_class_name((recall_class)c), (double)layer_of[c]);
            else
                cJSON_AddNullToObject(rl, recall_class_name((recall_class)c));
        }

        cJSON *fps = cJSON_AddObjectToObject(j, "frames_per_second");
        cJSON_AddNumberToObject(fps, "all_sessions", fps_all);
        cJSON_AddNumberToObject(fps, "per_session", fps_session);
        cJSON *lat = cJSON_AddObjectToObject(j, "pass_latency_us");
        cJSON_AddNumberToObject(lat, "p50", p50);
        cJSON_AddNumberToObject(lat, "p99", p99);
        cJSON_AddNumberToObject(lat, "mean", mean_us);
        cJSON_AddNumberToObject(lat, "max", R.pass_us[n_pass - 1]);
        cJSON_AddNumberToObject(lat, "passes", (double)n_pass);
        cJSON *secs = cJSON_AddObjectToObject(j, "seconds");
        cJSON_AddNumberToObject(secs, "passes", pass_total_s);
        cJSON_AddNumberToObject(secs, "frame_loop", loop_s);
        cJSON_AddNumberToObject(secs, "total", now_s() - t_start);
        cJSON *mem = cJSON_AddObjectToObject(j, "memory_bytes");
        cJSON_AddNumberToObject(mem, "per_session", (double)mem_session);
        cJSON_AddNumberToObject(mem, "total", (double)mem_total);
        cJSON_AddNumberToObject(mem, "model", (double)model_bytes);

        cJSON_AddItemToObject(j, "recall_psnr_db", class_object(&stats, have, 0));
        cJSON_AddItemToObject(j, "recall_rate", class_object(&stats, have, 1));
        cJSON_AddItemToObject(j, "recall_patches", class_object(&stats, have, 2));
        cJSON *pt = cJSON_AddObjectToObject(j, "patches");
        cJSON_AddNumberToObject(pt, "measured", (double)stats.measured);
        cJSON_AddNumberToObject(pt, "flat", (double)stats.flat);
        cJSON_AddNumberToObject(pt, "unseen", (double)stats.unseen);
        cJSON *mv = cJSON_AddObjectToObject(j, "camera_frames");
        for (int m = 0; m < CAMERA_MOVE_COUNT; m++)
            cJSON_AddNumberToObject(mv, camera_move_name((camera_move)m), (double)move_frames[m]);

        cJSON *be = cJSON_AddObjectToObject(j, "backend");
        cJSON_AddStringToObject(be, "name", backend_name);
        if (R.pool) {
            cJSON_AddNumberToObject(be, "threads", (double)threads);
            cJSON_AddStringToObject(be, "isa", rkv_attention_isa());
        } else {
            cJSON *plans = cJSON_AddObjectToObject(be, "attention_plans");
            for (int c = 0; c < RECALL_CLASSES; c++) {
                char plan[512];
                if (!have[c]) continue;
                rollout_gpu_describe(R.gpu, layer_of[c], plan, sizeof plan);
                cJSON_AddStringToObject(plans, recall_class_name((recall_class)c), plan);
            }
        }

        cJSON_AddNumberToObject(j, "first_frame", (double)first);
        cJSON_AddNumberToObject(j, "last_frame", (double)(end - 1));
        if (o.resume) {
            cJSON *rs = cJSON_AddObjectToObject(j, "resumed");
            cJSON_AddStringToObject(rs, "file", o.resume);
            cJSON_AddNumberToObject(rs, "last_committed", (double)(first - 1));
            cJSON_AddStringToObject(rs, "request_id", snap_info.request_id);
            cJSON_AddNumberToObject(rs, "history_replayed_frames", (double)first);
        } else {
            cJSON_AddNullToObject(j, "resumed");
        }
        if (o.snapshot_out)
            cJSON_AddStringToObject(j, "snapshot", o.snapshot_out);
        else
            cJSON_AddNullToObject(j, "snapshot");
        cJSON_AddStringToObject(j, "output_digest", digest_hex);
        cJSON_AddStringToObject(j, "output_digest_algorithm", "xxh3_64");
        cJSON_AddStringToObject(j, "output_digest_input",
                                "float32 little-endian bytes of every attention output of the "
                                "last frame, in the order pass, layer, session ([Hq][T][D] each)");
        cJSON_AddStringToObject(j, "picture", picture);
        cJSON_AddStringToObject(j, "legend", legend);
        cJSON *pf = cJSON_AddArrayToObject(j, "picture_frames");
        for (int i = 0; i < R.pic.n_rows; i++) {
            cJSON *x = cJSON_CreateObject();
            cJSON_AddNumberToObject(x, "frame", (double)R.pic.rows[i].frame);
            cJSON_AddStringToObject(x, "move", R.pic.rows[i].label);
            cJSON_AddItemToArray(pf, x);
        }
        char *text = cJSON_Print(j);
        if (!text) {
            cJSON_Delete(j);
            fprintf(stderr, "ringkv rollout: out of memory for the JSON report\n");
            goto done;
        }
        printf("%s\n", text);
        free(text);
        cJSON_Delete(j);
    } else {
        printf("ringkv rollout: preset %s%s, %lld session(s) x %lld frames (clocks %lld..%lld), "
               "dtype %s, seed %" PRIu64 "\n",
               o.preset, o.full_global_ring ? " (full global ring)" : "", (long long)B,
               (long long)F, (long long)first, (long long)(end - 1), rkv_dtype_name(dtype), o.seed);
        if (R.pool)
            printf("  backend cpu, %d thread(s), %s\n", threads, rkv_attention_isa());
        else
            printf("  backend cuda (GPU 0)\n");
        if (o.resume && first > 0)
            printf("  resumed session 0 from %s (last committed frame %lld; recall history "
                   "replayed over frames 0..%lld)\n",
                   o.resume, (long long)(first - 1), (long long)(first - 1));
        else if (o.resume)
            printf("  resumed session 0 from %s (no clock saved: from frame 0)\n", o.resume);
        printf("  image %s: %lld cols x %lld rows of 8 x 8-pixel cells, %.0f%% textured; view "
               "%lld cols x %lld rows\n",
               image, (long long)R.world.cols, (long long)R.world.rows,
               100.0 * R.world.textured_fraction, (long long)view.cols, (long long)view.rows);
        printf("  %lld layers, Hq %lld, H %lld, d_head %lld, %lld tokens/frame; recall at layer "
               "%lld (local) and %lld (global)\n",
               (long long)L, (long long)Hq, (long long)H, (long long)D, (long long)T,
               (long long)layer_of[0], (long long)layer_of[1]);
        printf("speed:   %.2f frames/s all sessions, %.2f per session (%.1f s in passes, "
               "%.1f s frame loop)\n",
               fps_all, fps_session, pass_total_s, loop_s);
        printf("latency: pass (upsert + attention, every layer, every session) p50 %.0f us, "
               "p99 %.0f us\n",
               p50, p99);
        printf("memory:  %zu bytes per session (%.1f MiB), %zu in total (%.1f MiB)\n", mem_session,
               mem_session / 1048576.0, mem_total, mem_total / 1048576.0);
        printf("recall on first passes (textured patches; rate >= 30 dB, mean PSNR dB, count):\n");
        printf("  %-7s  %-20s  %-20s  %-20s\n", "", "near (1-15)", "mid (16-127)", "far (>=128)");
        for (int c = 0; c < RECALL_CLASSES; c++)
            print_band_row(recall_class_name((recall_class)c), have[c] ? stats.tally[c] : NULL);
        printf("  (%lld patches measured: %lld flat, %lld textured but never seen before)\n",
               (long long)stats.measured, (long long)stats.flat, (long long)stats.unseen);
        printf("digest:  %s (xxh3_64 of frame %lld's attention outputs, f32 LE, by pass, layer, "
               "session)\n",
               digest_hex, (long long)(end - 1));
        if (o.snapshot_out)
            printf("snapshot: session 0 saved to %s (last committed frame %lld)\n", o.snapshot_out,
                   (long long)(end - 1));
        printf("picture: %s (rows: frames", picture);
        for (int i = 0; i < R.pic.n_rows; i++)
            printf(" %lld %s", (long long)R.pic.rows[i].frame, R.pic.rows[i].label);
        printf("; panels: true view, local recall, global recall, bands)\n");
        printf("legend:  %s (panels, rows and band colours of the picture)\n", legend);
    }
    rc = 0;
    goto done;
gpu_failed:
    fprintf(stderr, "ringkv rollout: --backend cuda: %s\n", err);
    rc = 1;
done:
    run_free(&R);
    return rc;
}

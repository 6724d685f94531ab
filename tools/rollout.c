/* `ringkv rollout`: streams sessions through every layer of a model, frame by
 * frame, on frames cut from a real image, through the public API only
 * (rkv_model_*). Each frame: begin_frame, then 5 passes (the 5th commits), in
 * each pass every layer does an upsert and then attention for every session.
 * Reports speed, per-pass latency, memory and how well each layer class
 * "recalls" the world (docs/rollout.md), and writes a picture.
 *
 * The world is world.c, the camera path camera.c, the tokens tokens.c, the
 * recall metrics recall.c and the picture sheet.c; this file holds the
 * options, the frame loop, the timings and the report. */
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

#include "camera.h"
#include "commands.h"
#include "recall.h"
#include "ringkv.h"
#include "sheet.h"
#include "splitmix.h"
#include "tokens.h"
#include "world.h"

/* Fills every band with thousands of textured patches on the earth map with
 * the demo preset, in well under a minute on 2 cores (docs/rollout.md). */
#define DEFAULT_FRAMES 2048
#define DEFAULT_OUT "rollout-out"
#define DEFAULT_IMAGE "data/earth.jpg"
#define DEFAULT_SEED 0
#define MAX_SESSIONS 4096
#define PICTURE_NAME "rollout.png"

typedef struct rollout_opts {
    const char *preset;
    int full_global_ring;
    int64_t sessions;
    int64_t frames;
    const char *image; /* NULL: the default image */
    const char *out;
    uint64_t seed;
    int have_dtype;
    rkv_dtype dtype;
    int json;
} rollout_opts;

static void usage(FILE *f) {
    fprintf(f,
            "usage: ringkv rollout [--preset NAME] [--full-global-ring] [--sessions N]\n"
            "                      [--frames N] [--image PATH] [--out DIR] [--seed N]\n"
            "                      [--dtype f32|f16|bf16] [--json]\n\n"
            "Streams N sessions through every layer of a model preset, frame by frame\n"
            "(5 passes a frame, the 5th commits), on views of a camera moving over a\n"
            "real image, and reports frames per second, per-pass latency, memory and\n"
            "how well the first local and first global layer recall the world.\n\n"
            "  --preset NAME        model preset (default demo):");
    for (const char *const *n = rkv_model_preset_names(); n && *n; n++) fprintf(f, " %s", *n);
    fprintf(f,
            "\n"
            "  --full-global-ring   global layers allocate the full 128-frame ring\n"
            "  --sessions N         sessions streamed side by side (default 1)\n"
            "  --frames N           frames per session (default %d)\n"
            "  --image PATH         JPEG or PNG world map (default %s; columns wrap)\n"
            "  --out DIR            folder for the picture %s (default %s)\n"
            "  --seed N             seed of the camera path and noise (default %d)\n"
            "  --dtype TYPE         storage dtype (default: the preset's)\n"
            "  --json               print one JSON object on stdout\n"
            "\nSee docs/rollout.md for the construction and the figures.\n",
            DEFAULT_FRAMES, DEFAULT_IMAGE, PICTURE_NAME, DEFAULT_OUT, DEFAULT_SEED);
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
    o->frames = DEFAULT_FRAMES;
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
        static const char *const WITH_VALUE[] = {"--preset", "--sessions", "--frames", "--image",
                                                 "--out",    "--seed",     "--dtype",  NULL};
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
                return bad_option("--sessions expects an integer in 1..4096, got", val);
            o->sessions = v;
        } else if (!strcmp(name, "--frames")) {
            if (parse_int(val, 1, INT32_MAX, &v))
                return bad_option("--frames expects a positive integer, got", val);
            o->frames = v;
        } else if (!strcmp(name, "--image")) {
            o->image = val;
        } else if (!strcmp(name, "--out")) {
            if (!*val) return bad_option("--out expects a folder, got", val);
            o->out = val;
        } else if (!strcmp(name, "--seed")) {
            char *end;
            errno = 0;
            unsigned long long s = strtoull(val, &end, 0);
            if (errno || end == val || *end || val[0] == '-')
                return bad_option("--seed expects a non-negative integer, got", val);
            o->seed = (uint64_t)s;
        } else if (!strcmp(name, "--dtype")) {
            if (rkv_dtype_parse(val, &o->dtype) != RKV_OK)
                return bad_option("--dtype expects f32, f16 or bf16, got", val);
            o->have_dtype = 1;
        }
    }
    return -1;
}

/* The default image: data/earth.jpg from the working directory, else beside
 * the repository the executable was built in (its folder and up to 3 above). */
static const char *default_image(char *buf, size_t n) {
    if (access(DEFAULT_IMAGE, R_OK) == 0) return DEFAULT_IMAGE;
    char exe[4096];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len > 0) {
        exe[len] = '\0';
        for (int up = 0; up < 4; up++) {
            char *slash = strrchr(exe, '/');
            if (!slash) break;
            *slash = '\0';
            snprintf(buf, n, "%s/%s", exe, DEFAULT_IMAGE);
            if (access(buf, R_OK) == 0) return buf;
        }
    }
    return DEFAULT_IMAGE; /* fails to load with a clear message */
}

/* mkdir -p */
static int make_dirs(const char *path, char *err, size_t err_len) {
    char buf[4096];
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

/* The frames shown in the picture: for session 0, one frame of each kind of
 * move (a pan's 5th frame, the first frame of a revisit or a jump): the first
 * one once the local ring is full (frame >= 16), else the last one, in frame
 * order. The first ones are on the most textured ground (camera.c). */
static int pick_frames(camera_path *path, int64_t frames, int64_t *picks) {
    static const camera_move ORDER[] = {CAMERA_PAN, CAMERA_REVISIT_NEAR, CAMERA_REVISIT_MID,
                                        CAMERA_REVISIT_FAR, CAMERA_JUMP};
    const int64_t settled = 16;
    int n = 0;
    for (size_t k = 0; k < sizeof ORDER / sizeof ORDER[0]; k++) {
        const int64_t offset = ORDER[k] == CAMERA_PAN ? 4 : 0;
        int64_t best = -1;
        for (int64_t m = 0; m + offset < frames; m += CAMERA_SEGMENT) {
            const camera_pose *p = camera_path_pose(path, m);
            if (!p || p->move != ORDER[k]) continue;
            best = m + offset;
            if (best >= settled) break;
        }
        if (best >= 0) picks[n++] = best;
    }
    if (n == 0) picks[n++] = frames - 1;
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
} run;

static void run_free(run *r) {
    rkv_model_destroy(r->model);
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

int rkv_cmd_rollout(int argc, char **argv) {
    rollout_opts o;
    int rc = parse_args(argc, argv, &o);
    if (rc >= 0) return rc;

    char err[512], image_buf[4200];
    const char *image = o.image ? o.image : default_image(image_buf, sizeof image_buf);
    const int progress = isatty(STDERR_FILENO);
    const double t_start = now_s();

    run R;
    memset(&R, 0, sizeof R);
    rc = 1;

    /* ---- the model ---- */
    rkv_model_config cfg;
    rkv_status st = rkv_model_preset(o.preset, o.full_global_ring, &cfg);
    if (st != RKV_OK) {
        fprintf(stderr, "ringkv rollout: %s\n", rkv_last_error());
        return 2;
    }
    cfg.num_sessions = o.sessions;
    if (o.have_dtype) cfg.dtype = o.dtype;
    size_t mem_session = 0, mem_total = 0;
    if ((st = rkv_model_config_memory(&cfg, &mem_session, &mem_total)) != RKV_OK)
        return lib_fail("rkv_model_config_memory", st);
    if ((st = rkv_model_create(&cfg, &R.model)) != RKV_OK)
        return lib_fail("rkv_model_create", st);

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

    /* ---- the world, the camera, the tokens ---- */
    const camera_view view = camera_view_for_tokens(T);
    if (world_load(&R.world, image, err, sizeof err)) {
        fprintf(stderr, "ringkv rollout: %s\n", err);
        goto done;
    }
    if (R.world.cols < view.cols || R.world.rows < view.rows) {
        fprintf(stderr,
                "ringkv rollout: the map of '%s' is %lld x %lld cells of 8 x 8 pixels; the "
                "view of %lld tokens needs at least %lld x %lld\n",
                image, (long long)R.world.cols, (long long)R.world.rows, (long long)T,
                (long long)view.cols, (long long)view.rows);
        goto done;
    }
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
    if (!R.paths || !R.memory || !R.sessions || !R.frame_pos || !R.kv32 ||
        (dtype != RKV_DTYPE_F32 && !R.kv_store) || !R.q || !R.out || !R.q0 || !R.k0 ||
        !R.v0 || !R.truth || !R.recalled[0] || !R.recalled[1] || !R.band0 || !R.pass_us) {
        fprintf(stderr, "ringkv rollout: out of memory for the frame buffers\n");
        goto done;
    }
    for (int64_t s = 0; s < B; s++) {
        char id[64];
        snprintf(id, sizeof id, "rollout-%lld", (long long)s);
        if ((st = rkv_model_claim(R.model, id, &R.sessions[s])) != RKV_OK) {
            rc = lib_fail("rkv_model_claim", st);
            goto done;
        }
        R.paths[s] = camera_path_create(&R.world, view, o.seed, s);
        R.n_paths = s + 1;
        if (!R.paths[s] || !camera_path_pose(R.paths[s], F - 1) ||
            recall_memory_init(&R.memory[s], R.world.cols, R.world.rows)) {
            fprintf(stderr, "ringkv rollout: out of memory for the camera paths\n");
            goto done;
        }
        R.n_memory = s + 1;
    }
    int64_t picks[8];
    const int n_picks = pick_frames(R.paths[0], F, picks);
    sheet_init(&R.pic, view, VD);

    /* ---- the frame loop ---- */
    recall_stats stats;
    memset(&stats, 0, sizeof stats);
    int64_t move_frames[CAMERA_MOVE_COUNT] = {0};
    uint64_t digest = FNV1A64_OFFSET;
    double pass_total_s = 0.0, last_progress = 0.0;
    const double loop_start = now_s();
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

    for (int64_t f = 0; f < F; f++) {
        for (int64_t s = 0; s < B; s++) R.frame_pos[s] = f;
        if ((st = rkv_model_begin_frame(R.model, B, R.sessions, R.frame_pos)) != RKV_OK) {
            rc = lib_fail("rkv_model_begin_frame", st);
            goto done;
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
                for (int c = 0; c < RECALL_CLASSES; c++)
                    if (pass == 0 && l == layer_of[c])
                        for (int64_t s = 0; s < B; s++)
                            for (int64_t t = 0; t < T; t++)
                                memcpy(R.recalled[c] + (s * T + t) * VD,
                                       R.out + ((size_t)s * Hq * T + t) * D,
                                       (size_t)VD * sizeof(float));
                if (f == F - 1) digest = fnv1a64(digest, R.out, n_q * sizeof(float));
            }
            R.pass_us[f * TOKENS_PASSES + pass] = pass_s * 1e6;
            pass_total_s += pass_s;
        }

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

        if (progress) {
            double t = now_s();
            if (t - last_progress > 0.25 || f == F - 1) {
                last_progress = t;
                double el = t - loop_start, fps = (double)(f + 1) / el;
                fprintf(stderr, "\rringkv rollout: frame %lld/%lld  %.1f frames/s per session  %.0f s left ",
                        (long long)(f + 1), (long long)F, fps, (double)(F - f - 1) / fps);
                fflush(stderr);
            }
        }
    }
    if (progress) fprintf(stderr, "\r%*s\r", 79, "");
    const double loop_s = now_s() - loop_start;

    /* ---- the picture ---- */
    char picture[4200];
    snprintf(picture, sizeof picture, "%s/%s", o.out, PICTURE_NAME);
    if (make_dirs(o.out, err, sizeof err) || sheet_write_png(&R.pic, picture, err, sizeof err)) {
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
    char digest_hex[17];
    snprintf(digest_hex, sizeof digest_hex, "%016" PRIx64, digest);

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
        cJSON_AddNumberToObject(mem, "model", (double)rkv_model_memory_bytes(R.model));

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

        cJSON_AddStringToObject(j, "output_digest", digest_hex);
        cJSON_AddStringToObject(j, "output_digest_algorithm",
                                "fnv1a64 over the f32 outputs of the last frame, by pass, layer, session");
        cJSON_AddStringToObject(j, "picture", picture);
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
        printf("ringkv rollout: preset %s%s, %lld session(s) x %lld frames, dtype %s, seed %" PRIu64 "\n",
               o.preset, o.full_global_ring ? " (full global ring)" : "", (long long)B,
               (long long)F, rkv_dtype_name(dtype), o.seed);
        printf("  image %s: %lld x %lld cells, %.0f%% textured; view %lld x %lld cells\n", image,
               (long long)R.world.cols, (long long)R.world.rows, 100.0 * R.world.textured_fraction,
               (long long)view.rows, (long long)view.cols);
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
        printf("digest:  %s (fnv1a64 of the last frame's attention outputs)\n", digest_hex);
        printf("picture: %s (rows: frames", picture);
        for (int i = 0; i < R.pic.n_rows; i++)
            printf(" %lld %s", (long long)R.pic.rows[i].frame, R.pic.rows[i].label);
        printf("; panels: true view, local recall, global recall, bands)\n");
    }
    rc = 0;
done:
    run_free(&R);
    return rc;
}

/* `ringkv rollout`: streams sessions through every layer of a model, frame by
 * frame, on frames cut from a real image, through the public API only
 * (rkv_model_*). Each frame: begin_frame, then 5 passes (the 5th commits), in
 * each pass every layer does an upsert and then attention for every session.
 * Reports speed, per-pass latency, memory and how well each layer class
 * "recalls" the world (docs/rollout.md), and writes a picture.
 *
 * The world is world.c, the camera path camera.c, the tokens tokens.c, the
 * recall metrics recall.c, the picture sheet.c, the device the model runs on
 * (the CPU, or GPU 0 with --backend cuda) device.c; the options
 * rollout_options.c, the checks before the run (paths, memory)
 * rollout_checks.c and the report rollout_report.c. This file drives a run:
 * the setup, the frame loop, snapshots and resume, the timings and the
 * picture.
 *
 * One model on either backend (issue 11): the run goes through rkv_model's
 * calls only (claim, begin_frame, the per-pass rkv_model_frame_step, end
 * frame, save/load session), on the CPU or the GPU alike; what differs is
 * where the BACKEND buffers live (device.h: on the GPU the keys, values and
 * queries are copied there and the outputs the run reads copied back) and
 * how a frame runs on the GPU: recorded once into a CUDA graph (every layer,
 * every pass) and replayed, each frame being begin_frame, one graph launch
 * and end_frame (the capture contract of ringkv.h). The run's last frame
 * runs pass by pass on every backend, since the digest reads every output;
 * so do all frames with RKV_ROLLOUT_GRAPH=0 (for comparing the two ways).
 *
 * Resume (--resume FILE): session 0 is loaded from a snapshot and the run
 * continues at the saved clock + 1. Every input is a pure function of the
 * absolute frame clock, the session and --seed, so the resumed run sees
 * exactly what an uninterrupted run would; the recall bookkeeping (when each
 * world cell was last in view) is rebuilt by replaying the camera path over
 * the frames before the snapshot, without touching the model. */
#define _POSIX_C_SOURCE 200809L

#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <xxhash.h>

#include "camera.h"
#include "cli.h"
#include "commands.h"
#include "device.h"
#include "escape.h"
#include "recall.h"
#include "ringkv.h"
#include "rollout_checks.h"
#include "rollout_migrate.h"
#include "rollout_options.h"
#include "rollout_report.h"
#include "sheet.h"
#include "splitmix.h"
#include "tokens.h"
#include "world.h"

/* Runs expected to take longer than this get a warning (and, when stderr is
 * not a terminal, a progress line every PROGRESS_EVERY_S seconds). */
#define LONG_RUN_S 120.0
#define PROGRESS_EVERY_S 60.0
/* A run's frame clocks stay below this (its last clock is at most
 * MAX_CLOCK - 1, the last of --frames' range from frame 0): a resumed run
 * replays its camera path from frame 0 (about 20 us a frame: 2^31 frames
 * are half a day) and the projected cost of a frame is taken there. */
#define MAX_CLOCK INT32_MAX

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The frames shown in the picture, all within the run's clocks [first, end):
 * for session 0, one frame of each kind of move (a pan's 5th frame, the first
 * frame of a revisit or a jump): the first one once the local ring is full
 * (clock >= 16), else the last one, in frame order; the run's last frame when
 * none falls in the range. The first ones are on the most textured ground
 * (camera.c). */
static int pick_frames(const camera_path *path, int64_t first, int64_t end, int64_t *picks) {
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
            int64_t gap;
            if (camera_segment_move(path, m / CAMERA_SEGMENT, &gap) != ORDER[k]) continue;
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
    rkv_model *spare;           /* --migrate-every: the second model  */
    int64_t migrations;         /* --migrate-every: moves done        */
    uint64_t migrated_bytes;
    double migrate_s;
    world_map world;
    tokens_codec codec;
    camera_path **paths;
    recall_memory *memory;
    int64_t *sessions;
    int64_t *frame_pos;
    float *kv32;
    void *kv_store; /* storage dtype when not f32, else NULL */
    float *q, *out;             /* HOST f32 queries, outputs         */
    void *q_store;              /* HOST queries in q_dtype when not f32 */
    float *q0, *k0, *v0;
    float *truth;       /* [B][T][VD] */
    float *recalled[2]; /* [B][T][VD] per class */
    int8_t *band0;      /* [T] band of session 0's tokens */
    double *pass_us;
    sheet pic;
    int64_t n_paths, n_memory;
    rkv_threadpool *pool;       /* CPU backend                       */
    device *dev;                /* where the model runs (device.h)   */
    device_graph *graph;        /* GPU: the recorded frame, or NULL  */
    int use_graph;              /* GPU frames replay a graph          */
    /* BACKEND buffers (device.h). On the CPU pass by pass they are the
     * host buffers (kv_dev[0] = kv_buf, q_dev = q, out_dev = out) and not
     * owned; otherwise (the GPU, or the replay path) allocated and owned
     * here: kv_dev[p] the K/V of pass p (a replayed frame reads all five;
     * a pass-by-pass frame kv_dev[0]), rec_dev[c] the first pass's outputs
     * of recall layer c in a replayed frame, out_dev every other output. */
    void *kv_dev[TOKENS_PASSES], *q_dev, *out_dev, *rec_dev[2];
    int own_dev;                /* the BACKEND buffers are owned here  */
    rkv_dtype q_dtype;          /* f32, or the storage dtype on the GPU */
    char plan[2][512];          /* GPU: the attention plan of each recall layer */
    XXH3_state_t *digest;       /* the last frame's outputs          */
    float *digest_le;           /* big-endian hosts: byte-swapped copy */

    /* the run's setup (check_run, setup_run) */
    rollout_opts o;
    rkv_model_config cfg;
    const char *image;          /* --image, or the default image     */
    int64_t B, F, L, T, D, H, Hq, VD; /* sessions, frames, geometry    */
    rkv_dtype dtype;
    int64_t layer_of[2];        /* first local, first global layer   */
    int have[2];                /* layer_of[c] >= 0                  */
    camera_view view;
    uint64_t map_id;            /* map_hash of the world             */
    int64_t first, end;         /* the run's frame clocks [first, end) */
    rkv_snapshot_info snap_info; /* --resume: the snapshot inspected */
    size_t mem_session, mem_total; /* rkv_model_config_memory        */
    size_t n_kv, n_q;           /* floats of a pass's K/V, queries   */
    int64_t picks[8];           /* the picture's frames (pick_frames) */
    int n_picks;
    const void *kv_buf;         /* the K/V upserted: kv32 or kv_store */
    rkv_attention_args args;

    /* the frame loop (run_frame, note_progress) */
    recall_stats stats;
    int64_t move_frames[CAMERA_MOVE_COUNT];
    int progress;               /* stderr is a terminal              */
    double t_start, loop_start, last_progress, last_note, first_done;
    double pass_total_s;        /* in upserts and attention          */
    int estimated, long_run;    /* the run-time estimate: made; over LONG_RUN_S */
    cli_load load;              /* the machine's load when the command started */
    double cpu_start;           /* cli_cpu_seconds at t_start              */
    int64_t out_made;           /* --out: length of the path's prefix naming the
                                   first folder this run created; -1 none */
    int pictured;               /* the picture and legend are written */
    int header_printed;         /* the text report's header, before the frames */
    char err[4 * PATH_MAX_LEN + 512], image_buf[PATH_MAX_LEN + 200], exe[PATH_MAX_LEN + 100];
} run;

static void run_free(run *r) {
    device_graph_destroy(r->graph);
    rkv_model_destroy(r->model);
    rkv_model_destroy(r->spare);
    if (r->own_dev) {
        for (int p = 0; p < TOKENS_PASSES; p++) device_free(r->dev, r->kv_dev[p]);
        device_free(r->dev, r->q_dev);
        device_free(r->dev, r->out_dev);
        device_free(r->dev, r->rec_dev[0]);
        device_free(r->dev, r->rec_dev[1]);
    }
    device_close(r->dev);
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
    free(r->q_store);
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

/* A library call failed at run time: says what the rollout was doing and
 * the library's reason in the user's terms (cli_lib_detail); exit status 1. */
static int lib_fail(const char *doing, rkv_status st) {
    (void)st;
    fprintf(stderr, "ringkv rollout: %s failed: %s\n", doing, cli_lib_detail(NULL));
    return CLI_EXIT_FAILURE;
}

/* The device failed at run time (a copy to or from the GPU, the frame's
 * graph): says what the rollout was doing and why (r->err); exit status 1. */
static int device_fail(const run *r, const char *doing) {
    fprintf(stderr, "ringkv rollout: %s failed (--backend %s): %s\n", doing,
            device_name(r->dev), r->err);
    return CLI_EXIT_FAILURE;
}

static void *alloc_floats(size_t n) { return malloc((n ? n : 1) * sizeof(float)); }

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
    char saved[4 * RKV_MAX_REQUEST_ID + 1]; /* the file's id: any bytes, escaped */
    rkv_tool_escape(saved, sizeof saved, info->request_id);
    if (sscanf(info->request_id, "rollout-%lld seed=%llu map=%16llx%n", &session, &saved_seed,
               &saved_map, &used) != 3 ||
        used < 0 || (size_t)used != strlen(info->request_id)) {
        fprintf(stderr,
                "ringkv rollout: warning: --resume '%s' was not saved by ringkv rollout "
                "(request id '%s'); continuing session 0's camera path of seed %" PRIu64 " as if its ring had "
                "followed it\n",
                rkv_tool_shown(path), saved, seed);
        return 0;
    }
    if (session != 0 || saved_seed != seed || saved_map != map_id) {
        char mine[RKV_MAX_REQUEST_ID];
        session_request_id(mine, sizeof mine, 0, seed, map_id);
        fprintf(stderr,
                "ringkv rollout: --resume '%s' holds '%s', this run would continue '%s': "
                "resume with the --seed and --image of the run that saved it (the camera path and the recall "
                "bookkeeping depend on them)\n",
                rkv_tool_shown(path), saved, mine);
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
static int use_output(run *r, int pass, int64_t l, int last_frame) {
    const int64_t B = r->B, T = r->T, Hq = r->Hq, D = r->D, VD = r->VD;
    const int64_t *layer_of = r->layer_of;
    const size_t n_q = r->n_q;
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

/* "2 layers, n_kv_heads 1, d_head 64, tokens_per_frame 128, global rings of
 * 16 frames" (what --preset and --full-global-ring choose) */
static void describe_geometry(const rkv_model_config *c, char *buf, size_t n) {
    int64_t global_rf = -1;
    for (int64_t l = 0; l < c->n_layers && global_rf < 0; l++)
        if (c->layers[l].pinned_dilation > 1) global_rf = c->layers[l].ring_frames;
    snprintf(buf, n,
             "%lld layers, n_kv_heads %lld, d_head %lld, tokens_per_frame %lld, global rings "
             "of %lld frames",
             (long long)c->n_layers, (long long)c->n_kv_heads, (long long)c->d_head,
             (long long)c->tokens_per_frame, (long long)global_rf);
}

/* The first difference between a snapshot's model and this run's, in the
 * options that choose them (--preset, --full-global-ring, --dtype), or NULL
 * when the snapshot fits (the geometry rkv_model_load_session requires). */
static const char *snapshot_mismatch(const rkv_model_config *snap, const rkv_model_config *mine,
                                     char *buf, size_t n) {
    int same = snap->n_layers == mine->n_layers && snap->n_kv_heads == mine->n_kv_heads &&
               snap->d_head == mine->d_head && snap->tokens_per_frame == mine->tokens_per_frame;
    for (int64_t l = 0; same && l < mine->n_layers; l++)
        same = snap->layers[l].ring_frames == mine->layers[l].ring_frames &&
               snap->layers[l].ring_buckets == mine->layers[l].ring_buckets &&
               snap->layers[l].pinned_dilation == mine->layers[l].pinned_dilation;
    if (!same) {
        char theirs[512], ours[512];
        describe_geometry(snap, theirs, sizeof theirs);
        describe_geometry(mine, ours, sizeof ours);
        snprintf(buf, n,
                 "it holds a session of model '%s' (%s), this run's model is '%s' (%s): use "
                 "the --preset and --full-global-ring of the run that saved it",
                 snap->name, theirs, mine->name, ours);
        return buf;
    }
    if (snap->dtype != mine->dtype) {
        snprintf(buf, n, "it holds dtype %s, this run %s: use --dtype %s",
                 rkv_dtype_name(snap->dtype), rkv_dtype_name(mine->dtype),
                 rkv_dtype_name(snap->dtype));
        return buf;
    }
    return NULL;
}

/* --resume FILE before anything runs: a readable, valid snapshot (the
 * library's full check) of this run's model. 0, or -1 with a message. */
static int check_resume_file(run *r) {
    const char *path = r->o.resume;
    if (cli_check_input_file("--resume", path, "a snapshot file", r->err, sizeof r->err) ||
        cli_check_snapshot_kind("--resume", path, r->err, sizeof r->err)) {
        cli_refuse("rollout", "%s", r->err);
        return -1;
    }
    r->snap_info = (rkv_snapshot_info)RKV_SNAPSHOT_INFO_INIT;
    if (rkv_snapshot_inspect(path, NULL, 0, &r->snap_info) != RKV_OK) {
        fprintf(stderr, "ringkv rollout: --resume '%s' is not a valid snapshot: %s\n",
                rkv_tool_shown(path),
                cli_lib_detail(path));
        return -1;
    }
    if (snapshot_mismatch(&r->snap_info.config, &r->cfg, r->err, sizeof r->err)) {
        fprintf(stderr, "ringkv rollout: --resume '%s' does not fit this run: %s\n",
                rkv_tool_shown(path),
                r->err);
        return -1;
    }
    return 0;
}

/* check_run's first step: a GPU to run on where --backend cuda asks for
 * one, the preset's model config and its memory. 0, or the exit status
 * with a message. */
static int check_model(run *r) {
    rkv_status st;
    if (r->o.backend == BACKEND_CUDA && device_cuda_count() < 1) {
        fprintf(stderr,
                "ringkv rollout: --backend cuda: no GPU: the CUDA runtime sees 0 device(s) (no "
                "NVIDIA GPU here, no driver, or a driver older than the CUDA runtime ringkv was "
                "built with); run with --backend cpu\n");
        return CLI_EXIT_USAGE;
    }
    /* ---- the preset ---- */
    st = rkv_model_preset(r->o.preset, r->o.full_global_ring, &r->cfg);
    if (st != RKV_OK) return cli_refuse("rollout", "%s", cli_lib_detail(NULL));
    r->cfg.num_sessions = r->o.sessions;
    if (r->o.dtype.given) r->cfg.dtype = r->o.dtype.dtype;
    if (!r->o.frames) r->o.frames = rollout_default_frames(r->o.preset);
    if ((st = rkv_model_config_memory(&r->cfg, &r->mem_session, &r->mem_total)) != RKV_OK) {
        fprintf(stderr, "ringkv rollout: the model's memory cannot be computed: %s\n",
                cli_lib_detail(NULL));
        return CLI_EXIT_USAGE;
    }
    return 0;
}

/* check_run's second step: the image (--image or the default one), the
 * output paths and the snapshot to resume. 0, or the exit status with a
 * message. */
static int check_paths(run *r) {
    r->image = r->o.image;
    if (!r->image && !(r->image = rollout_default_image(r->image_buf, sizeof r->image_buf, r->exe,
                                                        sizeof r->exe))) {
        fprintf(stderr,
                "ringkv rollout: cannot find the default image %s: it is neither in the "
                "working directory nor beside the executable%s%s%s (its folder and 3 above)"
#ifdef RKV_INSTALL_DATA_DIR
                " nor installed in " RKV_INSTALL_DATA_DIR
#endif
                "; pass --image PATH (any JPEG or PNG file)\n",
                DEFAULT_IMAGE, r->exe[0] ? " (" : "", rkv_tool_shown(r->exe), r->exe[0] ? ")" : "");
        return 2;
    }
    if (rollout_check_out_folder(r->o.out, r->err, sizeof r->err) ||
        (r->o.snapshot_out &&
         rollout_check_output_file("--snapshot-out", r->o.snapshot_out, r->err, sizeof r->err)))
        return cli_refuse("rollout", "%s", r->err);
    if (r->o.resume && check_resume_file(r)) return CLI_EXIT_USAGE;
    return 0;
}

/* The run's sizes from the options and the config, and its recall layers:
 * the first local and the first global one. */
static void note_shape(run *r) {
    r->B = r->o.sessions;
    r->F = r->o.frames;
    r->L = r->cfg.n_layers;
    r->T = r->cfg.tokens_per_frame;
    r->D = r->cfg.d_head;
    r->H = r->cfg.n_kv_heads;
    r->Hq = r->cfg.n_q_heads;
    r->dtype = r->cfg.dtype;
    r->layer_of[0] = r->layer_of[1] = -1; /* first local, first global */
    for (int64_t l = 0; l < r->L; l++) {
        int c = r->cfg.layers[l].pinned_dilation > 1 ? RECALL_GLOBAL : RECALL_LOCAL;
        if (r->layer_of[c] < 0) r->layer_of[c] = l;
    }
    r->have[0] = r->layer_of[0] >= 0;
    r->have[1] = r->layer_of[1] >= 0;
}

/* Loads the world from the image and checks that the view fits in it. 0, or
 * 2 with a message. */
static int load_world(run *r) {
    r->view = camera_view_for_tokens(r->T);
    if (world_load(&r->world, r->image, r->err, sizeof r->err))
        return cli_refuse("rollout", "%s", r->err);
    if (r->world.cols < r->view.cols || r->world.rows < r->view.rows) {
        fprintf(stderr,
                "ringkv rollout: the map of '%s' is %lld cols x %lld rows of 8 x 8-pixel "
                "cells; the view of %lld tokens needs at least %lld cols x %lld rows (an "
                "image of at least %lld x %lld pixels, width x height)\n",
                rkv_tool_shown(r->image), (long long)r->world.cols, (long long)r->world.rows,
                (long long)r->T,
                (long long)r->view.cols, (long long)r->view.rows,
                (long long)(r->view.cols * WORLD_PATCH), (long long)(r->view.rows * WORLD_PATCH));
        return 2;
    }
    r->map_id = map_hash(&r->world);
    return 0;
}

/* The run's frame clocks [first, end): from 0, or with --resume from the
 * snapshot's clock + 1 when it followed this run's camera path. 0, or the
 * exit status with a message. */
static int plan_clocks(run *r) {
    r->first = 0; /* the run's first frame clock */
    if (r->o.resume) {
        if (check_resume_source(r->o.resume, &r->snap_info, r->o.seed, r->map_id))
            return CLI_EXIT_USAGE;
        const int64_t last = r->snap_info.last_committed, last_clock = MAX_CLOCK - 1;
        if (last >= last_clock) { /* no frame after it is a rollout clock */
            fprintf(stderr,
                    "ringkv rollout: --resume '%s': the saved clock %lld is %s the last clock a "
                    "rollout runs (%lld): no --frames can continue it (a rollout's clocks are "
                    "0..%lld)\n",
                    rkv_tool_shown(r->o.resume), (long long)last,
                    last == last_clock ? "already" : "past", (long long)last_clock,
                    (long long)last_clock);
            return CLI_EXIT_USAGE;
        }
        if (last > last_clock - r->F) {
            fprintf(stderr,
                    "ringkv rollout: --resume '%s': the saved clock %lld + %lld frames would "
                    "end at clock %lld, past the last clock a rollout runs (%lld): ask for at "
                    "most --frames %lld\n",
                    rkv_tool_shown(r->o.resume), (long long)last, (long long)r->F,
                    (long long)(last + r->F), (long long)last_clock,
                    (long long)(last_clock - last));
            return CLI_EXIT_USAGE;
        }
        r->first = last + 1; /* -1 (no clock): from frame 0 */
    }
    r->end = r->first + r->F; /* one past the last frame */
    return 0;
}

/* Everything that can be checked is checked before the model is created
 * and before any frame: the preset, the image, the output paths, the
 * snapshot to resume and the memory; loads the world. 0 to go on, else the
 * exit status (2 for what the user passed), with a message. */
static int check_run(run *r) {
    int rc;
    if ((rc = check_model(r)) || (rc = check_paths(r))) return rc;
    note_shape(r);
    if ((rc = load_world(r)) || (rc = plan_clocks(r))) return rc;

    /* ---- memory: the model and the tool's buffers against what is available ---- */
    const tool_memory tool_mem = rollout_tool_memory(&r->cfg, r->F, &r->world);
    if ((rc = rollout_check_memory(&r->o, r->mem_session, &tool_mem))) return rc;

    /* ---- the output folder (created now: --snapshot-out may name a file
     * in it), the snapshot's folder; a refusal removes the folders created
     * (rkv_cmd_rollout) ---- */
    if (rollout_make_dirs(r->o.out, &r->out_made, r->err, sizeof r->err) ||
        rollout_check_out_files(r->o.out, r->err, sizeof r->err) ||
        (r->o.snapshot_out &&
         rollout_check_saved_file("--snapshot-out", r->o.snapshot_out, r->err, sizeof r->err))) {
        fprintf(stderr, "ringkv rollout: %s\n", r->err);
        return 2;
    }
    return 0;
}

/* The BACKEND buffer of `bytes` for host buffer `host`: the host buffer
 * itself on the CPU pass by pass, else one of its own (device memory on
 * the GPU). NULL with a message. */
static void *backend_buffer(run *r, void *host, size_t bytes) {
    if (!r->own_dev) return host;
    return device_alloc(r->dev, bytes, r->err, sizeof r->err);
}

/* setup_run's first step: the device, the model on it (and the second one
 * for --migrate-every), the CPU's threads, the way frames run (a graph or
 * pass by pass) and the output digest. 0, or 1 with a message. */
static int open_device(run *r) {
    rkv_status st;
    const device_kind kind = r->o.backend == BACKEND_CUDA ? DEVICE_CUDA : DEVICE_CPU;
    if (!(r->dev = device_open(kind, r->err, sizeof r->err))) {
        fprintf(stderr, "ringkv rollout: --backend %s: %s\n", kind == DEVICE_CUDA ? "cuda" : "cpu",
                r->err);
        return CLI_EXIT_FAILURE;
    }
    if ((st = device_model_create(r->dev, &r->cfg, &r->model)) != RKV_OK)
        return lib_fail("creating the model", st);
    if (kind == DEVICE_CPU && (st = rkv_threadpool_create(r->o.threads, &r->pool)) != RKV_OK)
        return lib_fail("starting the attention threads", st);
    /* A frame in one CUDA graph on the GPU; RKV_ROLLOUT_GRAPH=0 runs every
     * frame pass by pass, RKV_ROLLOUT_GRAPH=1 takes the replay path on the
     * CPU too (device.h's stand-in: the recorded calls made again), so that
     * its bookkeeping is tested where there is no GPU. */
    const char *graph_env = getenv("RKV_ROLLOUT_GRAPH");
    r->use_graph = graph_env && !strcmp(graph_env, "0")   ? 0
                   : graph_env && !strcmp(graph_env, "1") ? 1
                                                          : device_has_graphs(r->dev);
    /* BACKEND buffers of their own on the GPU, and for the replay path
     * (which keeps each pass's keys and values and the recall outputs) */
    r->own_dev = kind == DEVICE_CUDA || r->use_graph;
    /* The tensor-core kernels take the queries in the storage dtype. */
    r->q_dtype = kind == DEVICE_CUDA ? r->dtype : RKV_DTYPE_F32;
    if (r->o.migrate_every && (st = device_model_create(r->dev, &r->cfg, &r->spare)) != RKV_OK)
        return lib_fail("creating the second model for --migrate-every", st);
    if (!(r->digest = XXH3_createState())) {
        fprintf(stderr, "ringkv rollout: out of memory for the output digest\n");
        return 1;
    }
    return 0;
}

/* setup_run's second step: the token codec and the host buffers of a frame
 * (keys and values, queries, outputs, recall views, timings). 0, or 1 with
 * a message. */
static int alloc_host_buffers(run *r) {
    if (tokens_codec_init(&r->codec, &r->world, r->D, r->err, sizeof r->err)) {
        fprintf(stderr, "ringkv rollout: %s\n", r->err);
        return 1;
    }
    r->VD = r->codec.value_dims;
    r->n_kv = 2 * (size_t)r->H * (size_t)r->B * (size_t)r->T * (size_t)r->D;
    r->n_q = (size_t)r->B * (size_t)r->Hq * (size_t)r->T * (size_t)r->D;
    r->paths = calloc((size_t)r->B, sizeof *r->paths);
    r->memory = calloc((size_t)r->B, sizeof *r->memory);
    r->sessions = malloc((size_t)r->B * sizeof *r->sessions);
    r->frame_pos = malloc((size_t)r->B * sizeof *r->frame_pos);
    r->kv32 = alloc_floats(r->n_kv);
    r->kv_store = r->dtype == RKV_DTYPE_F32 ? NULL : malloc(r->n_kv * rkv_dtype_size(r->dtype));
    r->q = alloc_floats(r->n_q);
    if (r->q_dtype != RKV_DTYPE_F32) r->q_store = malloc(r->n_q * rkv_dtype_size(r->q_dtype));
    r->out = alloc_floats(r->n_q);
    r->q0 = alloc_floats((size_t)(r->T * r->D));
    r->k0 = alloc_floats((size_t)(r->T * r->D));
    r->v0 = alloc_floats((size_t)(r->T * r->D));
    r->truth = alloc_floats((size_t)(r->B * r->T * r->VD));
    r->recalled[0] = calloc((size_t)(r->B * r->T * r->VD), sizeof(float));
    r->recalled[1] = calloc((size_t)(r->B * r->T * r->VD), sizeof(float));
    r->band0 = malloc((size_t)r->T);
    r->pass_us = malloc((size_t)r->F * TOKENS_PASSES * sizeof *r->pass_us);
    if (!host_little_endian()) r->digest_le = alloc_floats(r->n_q);
    if (!r->paths || !r->memory || !r->sessions || !r->frame_pos || !r->kv32 ||
        (r->dtype != RKV_DTYPE_F32 && !r->kv_store) || !r->q || !r->out || !r->q0 || !r->k0 ||
        (r->q_dtype != RKV_DTYPE_F32 && !r->q_store) ||
        !r->v0 || !r->truth || !r->recalled[0] || !r->recalled[1] || !r->band0 || !r->pass_us ||
        (!host_little_endian() && !r->digest_le)) {
        fprintf(stderr, "ringkv rollout: out of memory for the frame buffers\n");
        return 1;
    }
    return 0;
}

/* setup_run's third step: the BACKEND buffers, the host ones on the CPU
 * pass by pass, device memory on the GPU (backend_buffer). 0, or 1 with a
 * message. */
static int alloc_backend_buffers(run *r) {
    r->kv_buf = r->dtype == RKV_DTYPE_F32 ? (const void *)r->kv32 : r->kv_store;
    const size_t kv_bytes = r->n_kv * rkv_dtype_size(r->dtype);
    const int n_kv_dev = r->use_graph ? TOKENS_PASSES : 1;
    for (int p = 0; p < n_kv_dev; p++)
        if (!(r->kv_dev[p] = backend_buffer(r, (void *)r->kv_buf, kv_bytes)))
            return device_fail(r, "allocating the keys and values");
    if (!(r->q_dev = backend_buffer(r, r->q, r->n_q * rkv_dtype_size(r->q_dtype))) ||
        !(r->out_dev = backend_buffer(r, r->out, r->n_q * sizeof(float))))
        return device_fail(r, "allocating the queries and outputs");
    for (int c = 0; c < RECALL_CLASSES && r->use_graph; c++)
        if (r->have[c] && !(r->rec_dev[c] = backend_buffer(r, r->out, r->n_q * sizeof(float))))
            return device_fail(r, "allocating the recall layers' outputs");
    return 0;
}

/* setup_run's fourth step: a session of the model per rollout session, with
 * its camera path and recall memory. 0, or 1 with a message. */
static int claim_sessions(run *r) {
    rkv_status st;
    for (int64_t s = 0; s < r->B; s++) {
        char id[RKV_MAX_REQUEST_ID];
        session_request_id(id, sizeof id, s, r->o.seed, r->map_id);
        if ((st = rkv_model_claim(r->model, id, &r->sessions[s])) != RKV_OK)
            return lib_fail("claiming a session", st);
        r->paths[s] = camera_path_create(&r->world, r->view, r->o.seed, s);
        r->n_paths = s + 1;
        if (!r->paths[s] || recall_memory_init(&r->memory[s], r->world.cols, r->world.rows)) {
            fprintf(stderr, "ringkv rollout: out of memory for the camera paths\n");
            return 1;
        }
        r->n_memory = s + 1;
    }
    return 0;
}

/* setup_run's fifth step: with --resume, session 0 from the snapshot
 * (inspected by check_run), its clock checked against the inspection. 0,
 * or 1 with a message. */
static int resume_session(run *r) {
    rkv_status st;
    if (r->o.resume) {
        if ((st = rkv_model_load_session(r->model, r->sessions[0], r->o.resume)) != RKV_OK) {
            /* checked in check_run: the file changed since, or an I/O error */
            fprintf(stderr, "ringkv rollout: loading --resume '%s' failed: %s\n",
                    rkv_tool_shown(r->o.resume), cli_lib_detail(r->o.resume));
            return CLI_EXIT_FAILURE;
        }
        int64_t last = -1;
        if ((st = rkv_model_clock(r->model, r->sessions[0], &last)) != RKV_OK) {
            return lib_fail("reading the resumed clock", st);
        }
        if (last != r->first - 1) { /* the file changed since it was inspected */
            fprintf(stderr,
                    "ringkv rollout: %s: loaded clock %lld, but the file said %lld when "
                    "inspected (was it rewritten during the run?)\n",
                    rkv_tool_shown(r->o.resume), (long long)last, (long long)(r->first - 1));
            return 1;
        }
    }
    return 0;
}

/* setup_run's last step: the recall history of a resumed session, the
 * picture's frames, and the frame loop's figures, digest and attention
 * arguments. The camera paths are computed frame by frame in the loop
 * (camera.h), so the loop starts at once whatever --frames is. 0, or 1
 * with a message. */
static int prepare_frame_loop(run *r) {
    /* The recall bookkeeping of a resumed session: the ring holds what the
     * camera saw before the snapshot, so 'last seen' is rebuilt by replaying
     * the path over frames 0 .. first-1 (the model is not touched). */
    for (int64_t f = 0; f < r->first; f++) {
        const camera_pose *p = camera_path_pose(r->paths[0], f);
        recall_memory_see(&r->memory[0], p->col, p->row, r->view.rows, r->view.cols, f);
    }
    r->n_picks = pick_frames(r->paths[0], r->first, r->end, r->picks);
    sheet_init(&r->pic, r->view, r->VD);
    r->pic.layer[0] = r->layer_of[0];
    r->pic.layer[1] = r->layer_of[1];

    /* ---- the frame loop's figures, digest and attention arguments ---- */
    memset(&r->stats, 0, sizeof r->stats);
    if (XXH3_64bits_reset(r->digest) != XXH_OK) {
        fprintf(stderr, "ringkv rollout: XXH3_64bits_reset failed\n");
        return 1;
    }
    r->args = (rkv_attention_args)RKV_ATTENTION_ARGS_INIT;
    r->args.batch = r->B;
    r->args.n_q_heads = r->Hq;
    r->args.n_queries = r->T;
    r->args.q = r->q_dev;
    r->args.q_dtype = r->q_dtype;
    r->args.out = r->out_dev;
    r->args.out_dtype = RKV_DTYPE_F32;
    r->args.scale = 1.0f; /* the queries carry their scale (tokens.h) */
    r->args.pool = r->pool;
    return 0;
}

static rollout_result run_result(const run *r);

/* Creates the model on its device, the tokens, the buffers and the
 * sessions, loads the snapshot to resume, prints the text report's header
 * (what runs: before the replay of a resumed session's recall history and
 * the first frame; the rest of the report comes after the last) and
 * rebuilds that history. 0, or 1 with a message. */
static int setup_run(run *r) {
    int rc;
    if ((rc = open_device(r)) || (rc = alloc_host_buffers(r)) || (rc = alloc_backend_buffers(r)) ||
        (rc = claim_sessions(r)) || (rc = resume_session(r)))
        return rc;
    if (!r->o.json) {
        const rollout_result head = run_result(r);
        rollout_report_header(&head);
        fflush(stdout);
        r->header_printed = 1;
    }
    return prepare_frame_loop(r);
}

/* The keys and values of pass `pass` of frame f, every session's, into
 * kv32 [2][H][B*T][D], then in the storage dtype (kv_buf) to the BACKEND
 * buffer dst (on the CPU dst is kv_buf: nothing to copy). 0, or 1 with a
 * message. */
static int make_kv(run *r, int64_t f, int pass, void *dst) {
    rkv_status st;
    for (int64_t s = 0; s < r->B; s++) {
        camera_pose pose = *camera_path_pose(r->paths[s], f);
        tokens_frame(&r->codec, &r->world, r->view, &pose, r->o.seed, s, f, pass, NULL, NULL,
                     r->k0, r->v0);
        for (int64_t h = 0; h < r->H; h++) {
            size_t row = (size_t)s * r->T * r->D;
            memcpy(r->kv32 + (0 * (size_t)r->H + h) * r->B * r->T * r->D + row, r->k0,
                   (size_t)(r->T * r->D) * sizeof(float));
            memcpy(r->kv32 + (1 * (size_t)r->H + h) * r->B * r->T * r->D + row, r->v0,
                   (size_t)(r->T * r->D) * sizeof(float));
        }
    }
    if (r->dtype != RKV_DTYPE_F32 &&
        (st = rkv_convert(r->kv32, RKV_DTYPE_F32, r->kv_store, r->dtype, r->n_kv)) != RKV_OK)
        return lib_fail("converting the keys and values to the storage dtype", st);
    if (device_upload(r->dev, dst, r->kv_buf, r->n_kv * rkv_dtype_size(r->dtype), r->err,
                      sizeof r->err))
        return device_fail(r, "copying the keys and values to the GPU");
    return 0;
}

/* The frame's queries (r->q, f32) to the BACKEND buffer, in q_dtype. */
static int put_queries(run *r) {
    const void *src = r->q;
    if (r->q_dtype != RKV_DTYPE_F32) {
        rkv_status st = rkv_convert(r->q, RKV_DTYPE_F32, r->q_store, r->q_dtype, r->n_q);
        if (st != RKV_OK) return lib_fail("converting the queries to the storage dtype", st);
        src = r->q_store;
    }
    if (device_upload(r->dev, r->q_dev, src, r->n_q * rkv_dtype_size(r->q_dtype), r->err,
                      sizeof r->err))
        return device_fail(r, "copying the queries to the GPU");
    return 0;
}

static void note_pass(run *r, int64_t f, int pass, double pass_s) {
    r->pass_us[(f - r->first) * TOKENS_PASSES + pass] = pass_s * 1e6;
    r->pass_total_s += pass_s;
}

/* One pass of frame f, pass by pass: every session's keys and values
 * upserted and then attention (rkv_model_frame_step), layer by layer; the
 * 5th pass commits. The outputs the run reads are copied back after their
 * layer (on the CPU they are read in place). The pass's time: the calls
 * and those copies, and on the GPU the wait for the pass's work. 0, or 1
 * with a message. */
static int run_pass(run *r, int64_t f, int pass, int last_frame) {
    rkv_status st;
    const int commit = pass == TOKENS_PASSES - 1;
    if (make_kv(r, f, pass, r->kv_dev[0])) return 1;
    double pass_s = 0.0;
    for (int64_t l = 0; l < r->L; l++) {
        const double t0 = now_s();
        st = rkv_model_frame_step(r->model, l, r->kv_dev[0], r->dtype, commit, &r->args);
        if (st != RKV_OK) return lib_fail("writing a frame's keys and values and attention", st);
        if (output_needed(r->layer_of, pass, l, last_frame) &&
            device_download(r->dev, r->out, r->out_dev, r->n_q * sizeof(float), r->err,
                            sizeof r->err))
            return device_fail(r, "copying attention outputs from the GPU");
        pass_s += now_s() - t0;
        if (output_needed(r->layer_of, pass, l, last_frame) && use_output(r, pass, l, last_frame))
            return 1;
    }
    const double t1 = now_s();
    if (device_sync(r->dev, NULL, r->err, sizeof r->err)) return device_fail(r, "a pass");
    note_pass(r, f, pass, pass_s + now_s() - t1);
    return 0;
}

/* The calls of one whole frame, recorded into the frame's CUDA graph once:
 * every pass (the 5th commits), every layer, rkv_model_frame_step on the
 * pass's keys and values; the first pass's outputs of the recall layers go
 * to their own buffers, every other output to out_dev. The model's batch
 * (sessions, clocks) is read from its device buffers by the kernels, so the
 * graph replays any frame of the same sessions. */
static int record_frame(void *arg) {
    run *r = arg;
    for (int pass = 0; pass < TOKENS_PASSES; pass++)
        for (int64_t l = 0; l < r->L; l++) {
            rkv_attention_args a = r->args;
            for (int c = 0; c < RECALL_CLASSES; c++)
                if (pass == 0 && r->have[c] && l == r->layer_of[c]) a.out = r->rec_dev[c];
            rkv_status st = rkv_model_frame_step(r->model, l, r->kv_dev[pass], r->dtype,
                                                 pass == TOKENS_PASSES - 1, &a);
            if (st != RKV_OK) {
                snprintf(r->err, sizeof r->err, "layer %lld, pass %d: %s", (long long)l, pass,
                         cli_lib_detail(NULL));
                return -1;
            }
        }
    return 0;
}

/* Frame f (begun) as one graph replay on the GPU: the five passes' keys and
 * values to their buffers, the graph (recorded on the first such frame:
 * recording the commit pass ends the frame on the host, the replay runs
 * it), the wait, rkv_model_end_frame, then the recall layers' first-pass
 * outputs. Each pass is counted as a fifth of the replay's time. 0, or 1
 * with a message. */
static int run_frame_graph(run *r, int64_t f) {
    for (int pass = 0; pass < TOKENS_PASSES; pass++)
        if (make_kv(r, f, pass, r->kv_dev[pass])) return 1;
    if (!r->graph && device_graph_record(r->dev, record_frame, r, &r->graph, r->err,
                                         sizeof r->err))
        return device_fail(r, "recording a frame in a CUDA graph");
    const double t0 = now_s();
    if (device_graph_launch(r->dev, r->graph, r->err, sizeof r->err) ||
        device_sync(r->dev, NULL, r->err, sizeof r->err))
        return device_fail(r, "a frame's graph replay");
    const double frame_s = now_s() - t0;
    rkv_status st = rkv_model_end_frame(r->model);
    if (st != RKV_OK) return lib_fail("ending a frame", st);
    for (int pass = 0; pass < TOKENS_PASSES; pass++)
        note_pass(r, f, pass, frame_s / TOKENS_PASSES);
    for (int c = 0; c < RECALL_CLASSES; c++) {
        if (!r->have[c]) continue;
        if (device_download(r->dev, r->out, r->rec_dev[c], r->n_q * sizeof(float), r->err,
                            sizeof r->err))
            return device_fail(r, "copying attention outputs from the GPU");
        if (use_output(r, 0, r->layer_of[c], 0)) return 1;
    }
    return 0;
}

/* Frame f: begin_frame, the queries, the passes (one graph replay on the
 * GPU, pass by pass for the run's last frame and on the CPU), the device's
 * check, the recall of the first pass and the picture's rows. 0, or 1 with
 * a message. */
static int run_frame(run *r, int64_t f) {
    rkv_status st;
    const int last_frame = f == r->end - 1;
    for (int64_t s = 0; s < r->B; s++) r->frame_pos[s] = f;
    if ((st = rkv_model_begin_frame(r->model, r->B, r->sessions, r->frame_pos)) != RKV_OK)
        return lib_fail("beginning a frame", st);
    /* queries and true pixels: the same on every pass */
    for (int64_t s = 0; s < r->B; s++) {
        camera_pose pose = *camera_path_pose(r->paths[s], f);
        r->move_frames[pose.move]++;
        tokens_frame(&r->codec, &r->world, r->view, &pose, r->o.seed, s, f, 0,
                     r->truth + s * r->T * r->VD, r->q0, NULL, NULL);
        for (int64_t h = 0; h < r->Hq; h++)
            memcpy(r->q + ((size_t)s * r->Hq + h) * r->T * r->D, r->q0,
                   (size_t)(r->T * r->D) * sizeof(float));
    }
    if (put_queries(r)) return 1;
    if (r->use_graph && !last_frame) {
        if (run_frame_graph(r, f)) return 1;
    } else {
        for (int pass = 0; pass < TOKENS_PASSES; pass++)
            if (run_pass(r, f, pass, last_frame)) return 1;
    }
    /* a failure the kernels recorded on the device (nothing on the CPU) */
    if (device_sync(r->dev, r->model, r->err, sizeof r->err))
        return device_fail(r, "checking the frame on the device");

    /* recall of this frame's first pass */
    for (int64_t s = 0; s < r->B; s++) {
        camera_pose pose = *camera_path_pose(r->paths[s], f);
        for (int64_t t = 0; t < r->T; t++) {
            int64_t col = pose.col + t % r->view.cols, row = pose.row + t / r->view.cols;
            r->stats.in_view++;
            int8_t band = SHEET_FLAT;
            if (world_cell_textured(&r->world, col, row)) {
                recall_band b = recall_band_of_gap(recall_memory_gap(&r->memory[s], col, row, f));
                band = (int8_t)b;
                if (b == RECALL_UNSEEN) {
                    r->stats.unseen++;
                } else {
                    const float *truth = r->truth + (s * r->T + t) * r->VD;
                    for (int c = 0; c < RECALL_CLASSES; c++)
                        if (r->have[c])
                            recall_stats_add(&r->stats, (recall_class)c, b,
                                             recall_psnr_db(truth,
                                                            r->recalled[c] + (s * r->T + t) * r->VD,
                                                            r->VD));
                }
            } else {
                r->stats.flat++;
            }
            if (s == 0) r->band0[t] = band;
        }
        recall_memory_see(&r->memory[s], pose.col, pose.row, r->view.rows, r->view.cols, f);
    }
    for (int i = 0; i < r->n_picks; i++)
        if (r->picks[i] == f)
            sheet_add(&r->pic, f, camera_move_name(camera_path_pose(r->paths[0], f)->move),
                      r->truth, r->recalled[0], r->recalled[1], r->band0);
    return 0;
}

/* After frame f: the time left, projected from the frames so far by their
 * cost (the first frames are cheap: the rings are still filling); the run's
 * first frame (warm-up: threads, first touch of the rings) is left out once
 * there are others. Warns of a long run; progress on stderr. */
static void note_progress(run *r, int64_t f) {
    const int last_frame = f == r->end - 1;
    const double t = now_s(), el = t - r->loop_start;
    const int64_t done_frames = f - r->first + 1;
    if (f == r->first) r->first_done = t;
    const int64_t from = f > r->first ? r->first + 1 : r->first;
    const double base = f > r->first ? t - r->first_done : el;
    const double done_cost = frames_cost(&r->cfg, from, f + 1);
    const double per_cost = done_cost > 0.0 ? base / done_cost : 0.0;
    const double left = per_cost * frames_cost(&r->cfg, f + 1, r->end);
    char when[32], left_s[48];
    if (!r->estimated && !last_frame &&
        ((done_frames >= 3 && (el >= 1.0 || done_frames >= 64)) || el >= 10.0)) {
        r->estimated = 1;
        if (el + left > LONG_RUN_S) {
            r->long_run = 1;
            char per[32];
            say_duration(when, sizeof when, el + left);
            say_duration(per, sizeof per,
                         per_cost * frames_cost(&r->cfg, MAX_CLOCK, (int64_t)MAX_CLOCK + 1));
            if (r->progress) fprintf(stderr, "\r%*s\r", 79, "");
            fprintf(stderr,
                    "ringkv rollout: this run should take about %s: %lld frames x "
                    "%lld session(s) of %s at about %s a frame once the rings are "
                    "full (projected from the first %lld frames); --frames N runs "
                    "fewer\n",
                    when, (long long)r->F, (long long)r->B, r->o.preset, per,
                    (long long)done_frames);
        }
    }
    if (r->progress && (t - r->last_progress > 0.25 || last_frame)) {
        r->last_progress = t;
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
                (long long)f, (long long)done_frames, (long long)r->F,
                (double)done_frames / el, left_s);
        fflush(stderr);
    } else if (!r->progress && r->long_run && !last_frame &&
               t - r->last_note >= PROGRESS_EVERY_S) {
        r->last_note = t;
        say_duration(when, sizeof when, el);
        say_duration(left_s, sizeof left_s, left);
        fprintf(stderr,
                "ringkv rollout: frame %lld (%lld/%lld), %s so far, about %s left\n",
                (long long)f, (long long)done_frames, (long long)r->F, when, left_s);
        fflush(stderr);
    }
}

/* The legend's line about the run: the preset, seed, frames, image and the
 * recall layers. */
static void legend_about(const run *r, char *about, size_t n_about) {
    int n = snprintf(about, n_about,
                     "Run: preset %s%s, seed %" PRIu64 ", frames %lld..%lld, image %s.\n"
                     "Recall layers:",
                     r->o.preset, r->o.full_global_ring ? " (full global ring)" : "", r->o.seed,
                     (long long)r->first, (long long)(r->end - 1), rkv_tool_shown(r->image));
    for (int c = 0; c < RECALL_CLASSES && n > 0 && (size_t)n < n_about; c++)
        if (r->have[c]) {
            const rkv_layer_spec *ls = &r->cfg.layers[r->layer_of[c]];
            n += snprintf(about + n, n_about - (size_t)n,
                          " %s layer %lld (RF %lld, RB %lld, PD %lld);",
                          recall_class_name((recall_class)c), (long long)r->layer_of[c],
                          (long long)ls->ring_frames, (long long)ls->ring_buckets,
                          (long long)ls->pinned_dilation);
        }
    if (n > 0 && (size_t)n < n_about && about[n - 1] == ';') about[n - 1] = '.';
}

/* What the report shows of the run so far (rollout_report.h): the setup,
 * and the frame loop's figures up to now; finish_run adds what only the
 * end knows (times, the digest, the files written). */
static rollout_result run_result(const run *r) {
    return (rollout_result){
        .opts = &r->o,
        .cfg = &r->cfg,
        .image = r->image,
        .layer_of = {r->layer_of[0], r->layer_of[1]},
        .have = {r->have[0], r->have[1]},
        .view = r->view,
        .world = &r->world,
        .codec = &r->codec,
        .stats = &r->stats,
        .move_frames = r->move_frames,
        .first = r->first,
        .end = r->end,
        .snap_info = &r->snap_info,
        .pass_us = r->pass_us,
        .pass_total_s = r->pass_total_s,
        .load = &r->load,
        .mem_session = r->mem_session,
        .mem_total = r->mem_total,
        .migrations = r->migrations,
        .migrated_bytes = r->migrated_bytes,
        .migrate_s = r->migrate_s,
        .pool = r->pool,
        .isa = rkv_attention_isa(rkv_model_layer(r->model, 0)), /* CPU only */
        .plan = {r->plan[0], r->plan[1]},
        .card = device_card(r->dev),
        .pic = &r->pic,
        .header_printed = r->header_printed,
    };
}

/* After the last frame: the snapshot, the picture and its legend, the
 * report. The report is printed whatever the snapshot and the picture
 * gave (the frames' figures are not lost to a full disk); then what
 * failed, on stderr, and 1. 0, or 1 with a message. */
static int finish_run(run *r, double loop_s) {
    rkv_status st;
    char digest_hex[17];
    snprintf(digest_hex, sizeof digest_hex, "%016" PRIx64, (uint64_t)XXH3_64bits_digest(r->digest));

    /* ---- the snapshot: session 0, between frames ---- */
    char snap_err[sizeof r->err] = "";
    if (r->o.snapshot_out &&
        (st = rkv_model_save_session(r->model, r->sessions[0], r->o.snapshot_out)) != RKV_OK)
        snprintf(snap_err, sizeof snap_err, "saving session 0 to --snapshot-out failed: %s",
                 cli_lib_detail(NULL));

    /* ---- the GPU's attention plans of the recall layers ---- */
    for (int c = 0; c < RECALL_CLASSES && device_kind_of(r->dev) == DEVICE_CUDA; c++)
        if (r->have[c]) /* the plan, or why there is none */
            (void)device_attention_plan(r->dev, r->model, r->layer_of[c], r->B, &r->args,
                                        r->plan[c], sizeof r->plan[c]);

    /* ---- the picture and its legend: both or neither ---- */
    char picture[PATH_MAX_LEN + 64], legend[PATH_MAX_LEN + 64], about[1024];
    snprintf(picture, sizeof picture, "%s/%s", r->o.out, PICTURE_NAME);
    snprintf(legend, sizeof legend, "%s/%s", r->o.out, LEGEND_NAME);
    legend_about(r, about, sizeof about);
    r->pictured = !rollout_make_dirs(r->o.out, &r->out_made, r->err, sizeof r->err) &&
                  !sheet_write_files(&r->pic, picture, legend, PICTURE_NAME, about, r->err,
                                     sizeof r->err);

    /* ---- the report ---- */
    rollout_result result = run_result(r);
    result.saved = r->o.snapshot_out && !snap_err[0];
    result.loop_s = loop_s;
    result.total_s = now_s() - r->t_start;
    result.cpu_s = cli_cpu_seconds() - r->cpu_start;
    size_t per_session = 0;
    rkv_model_config_memory(rkv_model_get_config(r->model), &per_session, &result.model_bytes);
    result.digest_hex = digest_hex;
    result.picture = r->pictured ? picture : NULL;
    result.legend = r->pictured ? legend : NULL;
    int rc = rollout_report(&result);
    fflush(stdout); /* the report, then what failed */
    if (snap_err[0]) fprintf(stderr, "ringkv rollout: %s\n", snap_err);
    if (!r->pictured) fprintf(stderr, "ringkv rollout: %s\n", r->err);
    return snap_err[0] || !r->pictured ? CLI_EXIT_FAILURE : rc;
}

/* SIGINT / SIGTERM during a run: the number of the signal, read between
 * frames. The run stops there, writes nothing more, removes the --out
 * folders it made while they are still empty, says so, and then dies of
 * the same signal (exit status 128 + N for a shell), as an uncaught one
 * would, minus the empty folder. One that comes during the last frame or
 * after it lets the run finish (report and files), says so, and then dies
 * of it. SIGPIPE (a line written to a pipe whose reader closed it:
 * `ringkv rollout 2>&1 | head`) is one more such signal, so the run still
 * ends of it (141, as before) but after that cleanup. The first signal
 * counts: the "stopped by" line to a closed pipe does not replace it. */
static volatile sig_atomic_t g_stop_signal;
static void on_stop_signal(int sig) {
    if (!g_stop_signal) g_stop_signal = sig;
}
static const char *stop_signal_name(void) {
    return g_stop_signal == SIGINT ? "SIGINT" : g_stop_signal == SIGPIPE ? "SIGPIPE" : "SIGTERM";
}

static void catch_stop_signals(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    (void)sigaction(SIGINT, &sa, NULL);
    (void)sigaction(SIGTERM, &sa, NULL);
    (void)sigaction(SIGPIPE, &sa, NULL);
}

int rkv_cmd_rollout(int argc, char **argv) {
    run R;
    memset(&R, 0, sizeof R);
    R.out_made = -1;
    int rc = rollout_parse_args(argc, argv, &R.o);
    if (rc >= 0) return rc;
    R.progress = isatty(STDERR_FILENO);
    R.t_start = now_s();
    R.cpu_start = cli_cpu_seconds();
    cli_load_read(&R.load); /* before this run adds to it */

    catch_stop_signals();
    int finished = 0; /* finish_run reached */
    if ((rc = check_run(&R)) != 0 || (rc = setup_run(&R)) != 0) goto done;

    /* ---- the frame loop ---- */
    R.pass_total_s = 0.0;
    R.last_progress = 0.0;
    R.loop_start = now_s();
    R.last_note = R.first_done = R.loop_start;
    for (int64_t f = R.first; f < R.end; f++) {
        if (g_stop_signal) {
            if (R.progress) fprintf(stderr, "\r%*s\r", 79, "");
            fprintf(stderr,
                    "ringkv rollout: stopped by %s after %lld of %lld frames; nothing written\n",
                    stop_signal_name(), (long long)(f - R.first),
                    (long long)(R.end - R.first));
            rc = CLI_EXIT_FAILURE;
            goto done;
        }
        if ((rc = run_frame(&R, f)) != 0) goto done;
        note_progress(&R, f);
        if (R.o.migrate_every && f + 1 < R.end && (f - R.first + 1) % R.o.migrate_every == 0) {
            const double t = now_s();
            if (rollout_migrate(&R.model, &R.spare, R.B, R.sessions, &R.migrated_bytes, R.err,
                                sizeof R.err)) {
                fprintf(stderr, "ringkv rollout: --migrate-every: %s\n", R.err);
                rc = 1;
                goto done;
            }
            R.migrations++;
            R.migrate_s += now_s() - t;
            /* a recorded frame replays the calls on the model it was
             * recorded on: record the next one on the new one */
            device_graph_destroy(R.graph);
            R.graph = NULL;
        }
    }
    if (R.migrations)
        fprintf(stderr,
                "ringkv rollout: %lld migration%s of %lld session%s between two models through "
                "export / import: %.1f MiB moved in %.3f s\n",
                (long long)R.migrations, R.migrations == 1 ? "" : "s", (long long)R.B,
                R.B == 1 ? "" : "s", (double)R.migrated_bytes / (1 << 20), R.migrate_s);
    if (R.progress) fprintf(stderr, "\r%*s\r", 79, "");
    rc = finish_run(&R, now_s() - R.loop_start);
    finished = 1;
done:
    /* a refusal or a failure before the picture leaves no empty folder of
     * its own making behind (only empty folders are removed) */
    if (!R.pictured && R.out_made >= 0) rollout_remove_made_dirs(R.o.out, R.out_made);
    run_free(&R);
    if (g_stop_signal) { /* die of it, as if it had not been caught */
        if (finished) /* it came during the last frame or after it */
            fprintf(stderr, "ringkv rollout: %s came after the last frame; %s\n",
                    stop_signal_name(),
                    rc ? "the run ended as said above"
                       : g_stop_signal == SIGPIPE ? "its files are complete (the report may not be)"
                                                  : "the run and its files are complete");
        const int sig = g_stop_signal;
        signal(sig, SIG_DFL);
        raise(sig);
    }
    return rc;
}

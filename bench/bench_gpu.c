/* `ringkv bench --backend cuda`: the one GPU bench (issues 9 and 11). The
 * CUDA backend on GPU 0, at the Waypoint-1.5 geometries (SEM 7: 24 layers,
 * Hq 32, H 16, D 64, bf16, RF = RB = 16, layers 3, 7, ..., 23 global with
 * PD 8; T 512 at 720P, 128 at 360P), every row through bench's one row
 * emitter (row.c), with the keys backend "cuda", card (the GPU's name),
 * commit ($RKV_COMMIT, which scripts/gpu_check.sh sets from `git describe
 * --always --dirty`; "unknown" otherwise) and kernel where one applies.
 * Everything runs on rkv_model (rkv_model_create_cuda, through device.c,
 * the same device layer as `ringkv rollout --backend cuda`), whose layers
 * are filled with random bf16 and every slot marked written (a steady
 * state: no frame is skipped as invisible where the count says visible):
 *  - cuda_copy_gbps: device-to-device cudaMemcpyAsync, bytes read +
 *    written: the ceiling of the upsert;
 *  - cuda_upsert_us / cuda_upsert_gbps: rkv_model_frame_upsert on the 24
 *    layers in one CUDA graph (clock 40: a write step of every layer),
 *    B = 1 and 8, commit off and on; us per call, and bytes moved (input
 *    read, scratch written, ring written on a commit) per second against
 *    the copy (issue 9: <= 5 us at B = 1; >= 70% of the copy at B = 8);
 *  - cuda_attention_tflops: rkv_model_frame_attend, keys read straight
 *    from the ring, counted as 4 * Tq * visible keys * D * Hq * B: 720P
 *    B = 1 and 8 on a local layer's write step (8,192 keys) and a global
 *    layer off one (8,704), 360P B = 8 (2,176), with the model's own split
 *    workspace; per kernel: mma.sync (2 cp.async stages; 3 too without
 *    --quick) and the Hopper wgmma kernel (RKV_CUDA_ATTN_KERNEL, read at
 *    creation), each with its plan string;
 *  - cuda_attention_f64_err: six output rows of 720P B = 1 against a
 *    float64 oracle per kernel (norm-wise relative error; pass <= 1e-2);
 *  - cuda_frame_ms / cuda_sessions_at_15fps: a whole 720P frame (24 layers
 *    x 5 passes of rkv_model_frame_step, the 5th commits) recorded once in
 *    a CUDA graph, each frame rkv_model_begin_frame, one replay,
 *    rkv_model_end_frame (the capture contract), for B = 1 and B = 8 per
 *    kernel; and the sessions one GPU runs at 15 frames per second.
 * Timings: CUDA events around the measured launches, medians of the reps
 * after warm-up. Every mma row comes before the first wgmma launch (a fault
 * there ends the process; the rows already printed stay). */
#define _POSIX_C_SOURCE 200809L
#include "bench.h"

#include <stdio.h>

#include "device.h"
#include "ringkv.h"

#ifndef RKV_HAVE_CUDA

int bench_cuda_run(const bench_opts *o) {
    (void)o;
    fprintf(stderr, "ringkv bench: --backend cuda: %s\n", DEVICE_NO_CUDA);
    return 2;
}

#else /* RKV_HAVE_CUDA */

#include <cuda_runtime_api.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ringkv_cuda.h"


#define MAX_REPS 64
#define PASSES 5
#define SESSIONS 8

typedef struct gpu_bench {
    const bench_opts *o;
    device *dev;
    cudaStream_t st;
    cudaEvent_t e0, e1;
    int have_events;
    int reps;
    const char *commit;
    void *pattern; /* DEVICE: random bf16, PATTERN_BYTES */
    char err[1024];
} gpu_bench;

#define PATTERN_BYTES ((size_t)16 << 20)

/* ---- failures: every step returns 0, or -1 with g->err set ----------------- */

static int cuda_fail(gpu_bench *g, cudaError_t e, const char *what) {
    (void)cudaGetLastError();
    snprintf(g->err, sizeof g->err, "%s: %s (%s)", what, cudaGetErrorName(e),
             cudaGetErrorString(e));
    return -1;
}
static int lib_fail(gpu_bench *g, const char *what) {
    snprintf(g->err, sizeof g->err, "%s: %s", what, rkv_last_error());
    return -1;
}
#define CK(call, what)                                                                   \
    do {                                                                                 \
        cudaError_t ck_e_ = (call);                                                      \
        if (ck_e_ != cudaSuccess) return cuda_fail(g, ck_e_, what);                      \
    } while (0)
#define OKR(call, what)                                                                  \
    do {                                                                                 \
        if ((call) != RKV_OK) return lib_fail(g, what);                                  \
    } while (0)

/* ---- rows ---------------------------------------------------------------------- */

static cJSON *params(const gpu_bench *g) {
    cJSON *p = cJSON_CreateObject();
    cJSON_AddStringToObject(p, "backend", "cuda");
    cJSON_AddStringToObject(p, "card", device_card(g->dev));
    cJSON_AddStringToObject(p, "git_commit", g->commit);
    cJSON_AddStringToObject(p, "isa", "cuda");
    return p;
}

static int cmp_float(const void *a, const void *b) {
    const float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}
static double median_ms(float *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_float);
    return n % 2 ? v[n / 2] : 0.5 * ((double)v[n / 2 - 1] + (double)v[n / 2]);
}

/* ---- memory -------------------------------------------------------------------- */

static void *dalloc(gpu_bench *g, size_t bytes) {
    return device_alloc(g->dev, bytes, g->err, sizeof g->err);
}

/* Random bf16 over `bytes` of DEVICE memory: the pattern tiled, on the
 * stream; waited for. */
static int fill_random(gpu_bench *g, void *d, size_t bytes) {
    for (size_t off = 0; off < bytes; off += PATTERN_BYTES) {
        const size_t n = bytes - off < PATTERN_BYTES ? bytes - off : PATTERN_BYTES;
        CK(cudaMemcpyAsync((char *)d + off, g->pattern, n, cudaMemcpyDeviceToDevice, g->st),
           "cudaMemcpyAsync (random fill)");
    }
    CK(cudaStreamSynchronize(g->st), "cudaStreamSynchronize (random fill)");
    return 0;
}

static int make_pattern(gpu_bench *g) {
    const size_t n = PATTERN_BYTES / 2;
    float *f = malloc(n * sizeof *f);
    uint16_t *h = malloc(PATTERN_BYTES);
    int rc = -1;
    if (!f || !h) {
        snprintf(g->err, sizeof g->err, "out of host memory");
        goto done;
    }
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (size_t i = 0; i < n; i++) {
        x ^= x >> 12, x ^= x << 25, x ^= x >> 27;
        f[i] = (float)((x * 2685821657736338717ull) >> 40) / 8388608.0f - 1.0f;
    }
    if (rkv_convert(f, RKV_DTYPE_F32, h, RKV_DTYPE_BF16, n) != RKV_OK) {
        lib_fail(g, "rkv_convert");
        goto done;
    }
    if (!(g->pattern = dalloc(g, PATTERN_BYTES))) goto done;
    if (device_upload(g->dev, g->pattern, h, PATTERN_BYTES, g->err, sizeof g->err)) goto done;
    rc = 0;
done:
    free(f);
    free(h);
    return rc;
}

/* ---- a model in steady state ----------------------------------------------------- */

typedef struct kernel_choice {
    const char *kernel; /* RKV_CUDA_ATTN_KERNEL: "mma" or "wgmma" */
    int stages;         /* RKV_CUDA_ATTN_STAGES (mma) */
} kernel_choice;

/* Every session without a clock (any frame may begin next) and the steady
 * state: every layer's K/V random, every slot written. */
static int restart(gpu_bench *g, rkv_model *m) {
    const rkv_model_config *cfg = rkv_model_get_config(m);
    OKR(rkv_model_abandon_frame(m), "rkv_model_abandon_frame");
    for (int64_t s = 0; s < SESSIONS; s++) OKR(rkv_model_reset(m, s), "rkv_model_reset");
    for (int64_t i = 0; i < cfg->n_layers; i++) {
        rkv_layer *l = rkv_model_layer(m, i);
        if (fill_random(g, (void *)rkv_layer_kv(l), rkv_geometry_memory_bytes(rkv_layer_geometry(l)))) return -1;
        CK(cudaMemsetAsync((void *)rkv_layer_written(l), 1, (size_t)rkv_geometry_total_slots(rkv_layer_geometry(l)),
                           g->st),
           "cudaMemsetAsync (written bits)");
    }
    return device_sync(g->dev, m, g->err, sizeof g->err);
}

/* The preset's model with SESSIONS sessions on GPU 0, the attention kernel
 * chosen by the environment at creation, sessions 0..SESSIONS-1 claimed,
 * in the steady state (restart). */
static int steady_model(gpu_bench *g, const char *preset, const kernel_choice *k,
                        rkv_model **out) {
    rkv_model_config cfg = RKV_MODEL_CONFIG_INIT;
    OKR(rkv_model_preset(preset, 0, &cfg), "rkv_model_preset");
    cfg.num_sessions = SESSIONS;
    char stages[8];
    snprintf(stages, sizeof stages, "%d", k->stages);
    setenv("RKV_CUDA_ATTN_KERNEL", k->kernel, 1);
    setenv("RKV_CUDA_ATTN_STAGES", stages, 1);
    const rkv_status st = device_model_create(g->dev, &cfg, out);
    unsetenv("RKV_CUDA_ATTN_KERNEL");
    unsetenv("RKV_CUDA_ATTN_STAGES");
    if (st != RKV_OK) return lib_fail(g, "creating the model (rkv_model_create_cuda)");
    for (int64_t s = 0; s < SESSIONS; s++) {
        char id[32];
        int64_t got = -1;
        snprintf(id, sizeof id, "bench-%lld", (long long)s);
        OKR(rkv_model_claim(*out, id, &got), "rkv_model_claim");
        if (got != s) {
            snprintf(g->err, sizeof g->err, "claim %lld gave session %lld", (long long)s,
                     (long long)got);
            return -1;
        }
    }
    return restart(g, *out);
}

/* Begins a frame of sessions 0..B-1 at `clock`, after closing the current
 * batch and, when `fresh`, dropping the sessions' clocks (rkv_model_reset:
 * any clock may begin; it zeroes them too: only the upsert's timings, which
 * do not depend on the rings' contents, use it). */
static int begin(gpu_bench *g, rkv_model *m, int64_t B, int64_t clock, int fresh) {
    int64_t sess[SESSIONS], fp[SESSIONS];
    OKR(rkv_model_abandon_frame(m), "rkv_model_abandon_frame");
    for (int64_t b = 0; b < B; b++) {
        sess[b] = b, fp[b] = clock;
        if (fresh) OKR(rkv_model_reset(m, b), "rkv_model_reset");
    }
    OKR(rkv_model_begin_frame(m, B, sess, fp), "rkv_model_begin_frame");
    return 0;
}

/* ---- device-to-device copy ------------------------------------------------------------ */

static int bench_copy(gpu_bench *g, double *gbps) {
    const size_t bytes = g->o->quick ? (size_t)256 << 20 : (size_t)1 << 30;
    void *a = dalloc(g, bytes), *b = a ? dalloc(g, bytes) : NULL;
    if (!a || !b) return -1;
    if (fill_random(g, a, bytes)) return -1;
    float t[MAX_REPS];
    for (int i = 0; i < g->reps + 2; i++) {
        CK(cudaEventRecord(g->e0, g->st), "cudaEventRecord");
        CK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, g->st), "cudaMemcpyAsync");
        CK(cudaEventRecord(g->e1, g->st), "cudaEventRecord");
        CK(cudaEventSynchronize(g->e1), "cudaEventSynchronize");
        if (i >= 2) CK(cudaEventElapsedTime(&t[i - 2], g->e0, g->e1), "cudaEventElapsedTime");
    }
    const double ms = median_ms(t, g->reps);
    *gbps = 2.0 * (double)bytes / (ms * 1e-3) / 1e9;
    cJSON *p = params(g);
    cJSON_AddNumberToObject(p, "bytes", (double)bytes);
    bench_emit(g->o, "cuda_copy_gbps", *gbps, "GB/s", p, 0, NULL);
    device_free(g->dev, a);
    device_free(g->dev, b);
    return 0;
}

/* ---- upsert: 24 calls in one graph ----------------------------------------------------- */

typedef struct upsert_rec {
    gpu_bench *g;
    rkv_model *m;
    void *const *in; /* [n_layers] DEVICE inputs */
    int commit;
} upsert_rec;

static int record_upserts(void *arg) {
    upsert_rec *u = arg;
    const rkv_model_config *cfg = rkv_model_get_config(u->m);
    for (int64_t i = 0; i < cfg->n_layers; i++)
        if (rkv_model_frame_upsert(u->m, i, u->in[i], cfg->dtype, u->commit) != RKV_OK) {
            snprintf(u->g->err, sizeof u->g->err, "rkv_model_frame_upsert (recorded): %s",
                     rkv_last_error());
            return -1;
        }
    return 0;
}

static int bench_upsert(gpu_bench *g, rkv_model *m, double copy_gbps) {
    const rkv_model_config *cfg = rkv_model_get_config(m);
    const int64_t L = cfg->n_layers;
    const size_t frame_bytes = 2 * (size_t)cfg->n_kv_heads * (size_t)cfg->tokens_per_frame *
                               (size_t)cfg->d_head * rkv_dtype_size(cfg->dtype);
    void **in = calloc((size_t)L, sizeof *in);
    if (!in) return snprintf(g->err, sizeof g->err, "out of host memory"), -1;
    int rc = -1;
    /* one input per layer (the layers read different buffers: not from L2) */
    for (int64_t i = 0; i < L; i++)
        if (!(in[i] = dalloc(g, frame_bytes * SESSIONS)) ||
            fill_random(g, in[i], frame_bytes * SESSIONS))
            goto done;
    const int64_t batches[2] = {1, SESSIONS};
    for (int bi = 0; bi < 2; bi++)
        for (int commit = 0; commit < 2; commit++) {
            const int64_t B = batches[bi];
            const int64_t clock = 40; /* a write step of every layer (PD 1 and 8) */
            if (begin(g, m, B, clock, 1)) goto done;
            upsert_rec u = {g, m, in, commit};
            device_graph *graph = NULL;
            if (device_graph_record(g->dev, record_upserts, &u, &graph, g->err, sizeof g->err))
                goto done;
            float t[MAX_REPS];
            int ok = 1;
            for (int r = 0; ok && r < g->reps + 2; r++) {
                /* the contract: begin_frame, replay, end_frame (a commit replays
                 * the same write step: the sessions' clocks are dropped first) */
                ok = !begin(g, m, B, clock, commit) &&
                     cudaEventRecord(g->e0, g->st) == cudaSuccess &&
                     !device_graph_launch(g->dev, graph, g->err, sizeof g->err) &&
                     cudaEventRecord(g->e1, g->st) == cudaSuccess &&
                     cudaEventSynchronize(g->e1) == cudaSuccess &&
                     (r < 2 || cudaEventElapsedTime(&t[r - 2], g->e0, g->e1) == cudaSuccess) &&
                     (!commit || rkv_model_end_frame(m) == RKV_OK);
            }
            device_graph_destroy(graph);
            if (!ok) {
                if (!g->err[0]) snprintf(g->err, sizeof g->err, "timing the upsert graph: %s",
                                         cudaGetErrorString(cudaGetLastError()));
                goto done;
            }
            if (device_sync(g->dev, m, g->err, sizeof g->err)) goto done;
            const double us = median_ms(t, g->reps) * 1e3 / (double)L;
            /* the input read, the scratch written, the ring written on a commit */
            const double bytes = (double)frame_bytes * (double)B * (commit ? 3.0 : 2.0);
            cJSON *p = params(g);
            cJSON_AddStringToObject(p, "dtype", rkv_dtype_name(cfg->dtype));
            cJSON_AddNumberToObject(p, "B", (double)B);
            cJSON_AddBoolToObject(p, "commit", commit);
            cJSON_AddStringToObject(p, "preset", cfg->name);
            cJSON_AddStringToObject(p, "mode", "graph");
            cJSON_AddNumberToObject(p, "calls", (double)L);
            bench_emit(g->o, "cuda_upsert_us", us, "us/call", p, 0, NULL);
            cJSON *p2 = params(g);
            cJSON_AddStringToObject(p2, "dtype", rkv_dtype_name(cfg->dtype));
            cJSON_AddNumberToObject(p2, "B", (double)B);
            cJSON_AddBoolToObject(p2, "commit", commit);
            cJSON_AddStringToObject(p2, "preset", cfg->name);
            cJSON_AddNumberToObject(p2, "bytes_per_call", bytes);
            bench_emit(g->o, "cuda_upsert_gbps", bytes / (us * 1e-6) / 1e9, "GB/s", p2,
                       copy_gbps, "device-to-device cudaMemcpy");
        }
    OKR(rkv_model_abandon_frame(m), "rkv_model_abandon_frame");
    rc = 0;
done:
    for (int64_t i = 0; i < L; i++) device_free(g->dev, in[i]);
    free(in);
    return rc;
}

/* ---- attention ---------------------------------------------------------------------------- */

typedef struct att_case {
    int64_t layer, B, clock; /* the layer's class: 0 local, 3 global */
    int64_t keys;            /* visible keys per row (the FLOP count) */
} att_case;

/* float64 attention of output rows of session 0 (row b = 0) against the
 * GPU's: K/V of the session read back through its span, the rule from the
 * clock and the written bits (SEM 4). Norm-wise relative error of `rows`
 * random (head, query) rows. */
static int spot_check(gpu_bench *g, rkv_model *m, int64_t layer, int64_t clock, const void *d_q,
                      const void *d_out, double *err) {
    const rkv_model_config *cfg = rkv_model_get_config(m);
    rkv_layer *l = rkv_model_layer(m, layer);
    const rkv_geometry *geo = rkv_layer_geometry(l);
    const int64_t Hq = cfg->n_q_heads, H = geo->n_kv_heads, T = geo->tokens_per_frame,
                  D = geo->d_head, RF = geo->ring_frames, C = (RF + 1) * T;
    const size_t nq = (size_t)(Hq * T * D); /* row 0 only */
    const size_t span = (size_t)(C * D) * rkv_dtype_size(geo->dtype); /* one head's K */
    uint16_t *q = malloc(nq * 2), *out = malloc(nq * 2), *k = malloc(span), *v = malloc(span);
    uint8_t *written = malloc((size_t)C);
    float *kf = malloc((size_t)(C * D) * sizeof(float)), *vf = malloc((size_t)(C * D) * sizeof(float));
    float *qf = malloc(nq * sizeof(float)), *of = malloc(nq * sizeof(float));
    double *w = malloc((size_t)C * sizeof(double));
    int rc = -1;
    if (!q || !out || !k || !v || !written || !kf || !vf || !qf || !of || !w) {
        snprintf(g->err, sizeof g->err, "out of host memory");
        goto done;
    }
    if (device_download(g->dev, q, d_q, nq * 2, g->err, sizeof g->err) ||
        device_download(g->dev, out, d_out, nq * 2, g->err, sizeof g->err))
        goto done;
    if (rkv_convert(q, RKV_DTYPE_BF16, qf, RKV_DTYPE_F32, nq) != RKV_OK ||
        rkv_convert(out, RKV_DTYPE_BF16, of, RKV_DTYPE_F32, nq) != RKV_OK ||
        rkv_layer_read_span(l, 0, RKV_SPAN_WRITTEN, 0, written) != RKV_OK) {
        lib_fail(g, "the spot check's reads");
        goto done;
    }
    const int64_t PD = geo->pinned_dilation, RB = geo->ring_buckets;
    const int64_t hidden = clock % PD == 0 ? (clock / PD) % RB : -1;
    double num = 0, den = 0;
    uint64_t x = 99;
    int64_t loaded_head = -1;
    for (int r = 0; r < 6; r++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        const int64_t h = (int64_t)((x >> 33) % (uint64_t)Hq);
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        const int64_t i = (int64_t)((x >> 33) % (uint64_t)T);
        const int64_t kvh = h / (Hq / H);
        if (kvh != loaded_head) {
            if (rkv_layer_read_span(l, 0, RKV_SPAN_K, kvh, k) != RKV_OK ||
                rkv_layer_read_span(l, 0, RKV_SPAN_V, kvh, v) != RKV_OK ||
                rkv_convert(k, RKV_DTYPE_BF16, kf, RKV_DTYPE_F32, (size_t)(C * D)) != RKV_OK ||
                rkv_convert(v, RKV_DTYPE_BF16, vf, RKV_DTYPE_F32, (size_t)(C * D)) != RKV_OK) {
                lib_fail(g, "the spot check's span reads");
                goto done;
            }
            loaded_head = kvh;
        }
        const float *qr = qf + (size_t)((h * T + i) * D);
        const double scale = 1.0 / sqrt((double)D);
        double mx = -INFINITY;
        for (int64_t j = 0; j < C; j++) {
            const int64_t frame = j / T;
            const int visible = frame == RF || (frame != hidden && written[frame * T]);
            w[j] = -INFINITY;
            if (!visible) continue;
            double dot = 0;
            for (int64_t d = 0; d < D; d++) dot += (double)qr[d] * (double)kf[j * D + d];
            w[j] = dot * scale;
            if (w[j] > mx) mx = w[j];
        }
        double sum = 0;
        for (int64_t j = 0; j < C; j++) sum += (w[j] = w[j] == -INFINITY ? 0 : exp(w[j] - mx));
        for (int64_t d = 0; d < D; d++) {
            double ref = 0;
            for (int64_t j = 0; j < C; j++) ref += w[j] / sum * (double)vf[j * D + d];
            const double got = of[(h * T + i) * D + d];
            num += (got - ref) * (got - ref);
            den += ref * ref;
        }
    }
    *err = den > 0 ? sqrt(num / den) : INFINITY;
    if (!isfinite(*err)) *err = INFINITY;
    rc = 0;
done:
    free(q), free(out), free(k), free(v), free(written), free(kf), free(vf), free(qf), free(of);
    free(w);
    return rc;
}

static int bench_attention(gpu_bench *g, rkv_model *m, const kernel_choice *k,
                           const att_case *c, int spot) {
    const rkv_model_config *cfg = rkv_model_get_config(m);
    const int64_t Hq = cfg->n_q_heads, T = cfg->tokens_per_frame, D = cfg->d_head, B = c->B;
    const size_t nq = (size_t)(B * Hq * T * D), bytes = nq * rkv_dtype_size(cfg->dtype);
    void *d_q = dalloc(g, bytes), *d_out = d_q ? dalloc(g, bytes) : NULL;
    int rc = -1;
    if (!d_q || !d_out || fill_random(g, d_q, bytes) || begin(g, m, B, c->clock, 0)) goto done;
    rkv_attention_args a = RKV_ATTENTION_ARGS_INIT;
    a.n_q_heads = Hq;
    a.q = d_q;
    a.q_dtype = cfg->dtype;
    a.out = d_out;
    a.out_dtype = cfg->dtype;
    char plan[512];
    if (rkv_model_cuda_attention_describe(m, c->layer, B, &a, plan, sizeof plan) != RKV_OK) {
        lib_fail(g, "rkv_model_cuda_attention_describe");
        goto done;
    }
    float t[MAX_REPS];
    for (int r = 0; r < g->reps + 3; r++) {
        if (cudaEventRecord(g->e0, g->st) != cudaSuccess ||
            rkv_model_frame_attend(m, c->layer, &a) != RKV_OK ||
            cudaEventRecord(g->e1, g->st) != cudaSuccess ||
            cudaEventSynchronize(g->e1) != cudaSuccess ||
            (r >= 3 && cudaEventElapsedTime(&t[r - 3], g->e0, g->e1) != cudaSuccess)) {
            snprintf(g->err, sizeof g->err, "timing rkv_model_frame_attend: %s / %s",
                     rkv_last_error(), cudaGetErrorString(cudaGetLastError()));
            goto done;
        }
    }
    if (device_sync(g->dev, m, g->err, sizeof g->err)) goto done;
    const double ms = median_ms(t, g->reps);
    const double flop = 4.0 * (double)T * (double)c->keys * (double)D * (double)Hq * (double)B;
    cJSON *p = params(g);
    cJSON_AddStringToObject(p, "kernel", k->kernel);
    cJSON_AddNumberToObject(p, "stages", k->stages);
    cJSON_AddStringToObject(p, "dtype", rkv_dtype_name(cfg->dtype));
    cJSON_AddNumberToObject(p, "B", (double)B);
    cJSON_AddStringToObject(p, "preset", cfg->name);
    cJSON_AddNumberToObject(p, "keys", (double)c->keys);
    cJSON_AddNumberToObject(p, "layer", (double)c->layer);
    cJSON_AddNumberToObject(p, "pinned_dilation", (double)cfg->layers[c->layer].pinned_dilation);
    cJSON_AddNumberToObject(p, "us", ms * 1e3);
    cJSON_AddStringToObject(p, "plan", plan);
    bench_emit(g->o, "cuda_attention_tflops", flop / (ms * 1e-3) / 1e12, "TFLOP/s", p, 0, NULL);
    if (spot) {
        double err = INFINITY;
        if (spot_check(g, m, c->layer, c->clock, d_q, d_out, &err)) goto done;
        cJSON *p2 = params(g);
        cJSON_AddStringToObject(p2, "kernel", k->kernel);
        cJSON_AddNumberToObject(p2, "B", (double)B);
        cJSON_AddStringToObject(p2, "preset", cfg->name);
        cJSON_AddNumberToObject(p2, "keys", (double)c->keys);
        cJSON_AddNumberToObject(p2, "rows", 6);
        cJSON_AddBoolToObject(p2, "pass", err <= 1e-2);
        cJSON_AddStringToObject(p2, "plan", plan);
        bench_emit(g->o, "cuda_attention_f64_err", err, "rel", p2, 0, NULL);
    }
    rc = 0;
done:
    (void)rkv_model_abandon_frame(m);
    device_free(g->dev, d_q);
    device_free(g->dev, d_out);
    return rc;
}

/* ---- a whole frame in one graph ---------------------------------------------------------- */

typedef struct frame_rec {
    gpu_bench *g;
    rkv_model *m;
    void *kv[PASSES], *q[PASSES], *out[PASSES];
} frame_rec;

/* The frame: every pass, every layer, rkv_model_frame_step (the 5th pass
 * commits); one input per pass (a real model writes new activations there
 * between layers). */
static int record_frame(void *arg) {
    frame_rec *f = arg;
    const rkv_model_config *cfg = rkv_model_get_config(f->m);
    for (int p = 0; p < PASSES; p++)
        for (int64_t i = 0; i < cfg->n_layers; i++) {
            rkv_attention_args a = RKV_ATTENTION_ARGS_INIT;
            a.n_q_heads = cfg->n_q_heads;
            a.q = f->q[p];
            a.q_dtype = cfg->dtype;
            a.out = f->out[p];
            a.out_dtype = cfg->dtype;
            if (rkv_model_frame_step(f->m, i, f->kv[p], cfg->dtype, p == PASSES - 1, &a) !=
                RKV_OK) {
                snprintf(f->g->err, sizeof f->g->err,
                         "rkv_model_frame_step (recorded; layer %lld, pass %d): %s", (long long)i,
                         p, rkv_last_error());
                return -1;
            }
        }
    return 0;
}

static int bench_frame(gpu_bench *g, rkv_model *m, const kernel_choice *k, int64_t B) {
    const rkv_model_config *cfg = rkv_model_get_config(m);
    const size_t es = rkv_dtype_size(cfg->dtype);
    const size_t kv_bytes = 2 * (size_t)(cfg->n_kv_heads * B * cfg->tokens_per_frame *
                                         cfg->d_head) * es;
    const size_t q_bytes = (size_t)(B * cfg->n_q_heads * cfg->tokens_per_frame * cfg->d_head) * es;
    frame_rec f;
    memset(&f, 0, sizeof f);
    f.g = g;
    f.m = m;
    device_graph *graph = NULL;
    int rc = -1;
    for (int p = 0; p < PASSES; p++)
        if (!(f.kv[p] = dalloc(g, kv_bytes)) || !(f.q[p] = dalloc(g, q_bytes)) ||
            !(f.out[p] = dalloc(g, q_bytes)) || fill_random(g, f.kv[p], kv_bytes) ||
            fill_random(g, f.q[p], q_bytes))
            goto done;
    int64_t clock = 1000;
    /* the first frame is recorded (the host ends it) and replayed */
    if (restart(g, m) || begin(g, m, B, clock, 0) ||
        device_graph_record(g->dev, record_frame, &f, &graph, g->err, sizeof g->err) ||
        device_graph_launch(g->dev, graph, g->err, sizeof g->err) ||
        device_sync(g->dev, m, g->err, sizeof g->err))
        goto done;
    const int reps = g->reps < 10 ? g->reps : 10;
    float t[MAX_REPS];
    int64_t sess[SESSIONS], fp[SESSIONS];
    for (int64_t b = 0; b < B; b++) sess[b] = b;
    for (int r = 0; r < reps + 2; r++) {
        clock++;
        for (int64_t b = 0; b < B; b++) fp[b] = clock;
        if (rkv_model_begin_frame(m, B, sess, fp) != RKV_OK) {
            lib_fail(g, "rkv_model_begin_frame (a replayed frame)");
            goto done;
        }
        if (cudaEventRecord(g->e0, g->st) != cudaSuccess ||
            device_graph_launch(g->dev, graph, g->err, sizeof g->err) ||
            cudaEventRecord(g->e1, g->st) != cudaSuccess ||
            cudaEventSynchronize(g->e1) != cudaSuccess ||
            (r >= 2 && cudaEventElapsedTime(&t[r - 2], g->e0, g->e1) != cudaSuccess)) {
            if (!g->err[0])
                snprintf(g->err, sizeof g->err, "timing the frame's graph: %s",
                         cudaGetErrorString(cudaGetLastError()));
            goto done;
        }
        if (rkv_model_end_frame(m) != RKV_OK) {
            lib_fail(g, "rkv_model_end_frame");
            goto done;
        }
    }
    if (device_sync(g->dev, m, g->err, sizeof g->err)) goto done;
    /* the model's clocks followed the replays (the host's bookkeeping) */
    for (int64_t b = 0; b < B; b++) {
        int64_t last = -1;
        if (rkv_model_clock(m, b, &last) != RKV_OK || last != clock) {
            snprintf(g->err, sizeof g->err, "session %lld: clock %lld after the replays, expected %lld",
                     (long long)b, (long long)last, (long long)clock);
            goto done;
        }
    }
    const double ms = median_ms(t, reps);
    cJSON *p = params(g);
    cJSON_AddStringToObject(p, "kernel", k->kernel);
    cJSON_AddStringToObject(p, "dtype", rkv_dtype_name(cfg->dtype));
    cJSON_AddNumberToObject(p, "B", (double)B);
    cJSON_AddStringToObject(p, "preset", cfg->name);
    cJSON_AddNumberToObject(p, "calls", (double)(cfg->n_layers * PASSES));
    cJSON_AddNumberToObject(p, "nodes", (double)device_graph_nodes(graph));
    cJSON_AddStringToObject(p, "mode", "graph");
    cJSON_AddNumberToObject(p, "per_session_ms", ms / (double)B);
    bench_emit(g->o, "cuda_frame_ms", ms, "ms/frame", p, 0, NULL);
    cJSON *p2 = params(g);
    cJSON_AddStringToObject(p2, "kernel", k->kernel);
    cJSON_AddNumberToObject(p2, "B", (double)B);
    cJSON_AddStringToObject(p2, "preset", cfg->name);
    cJSON_AddStringToObject(p2, "from", "cuda_frame_ms (cache and attention only)");
    bench_emit(g->o, "cuda_sessions_at_15fps", (double)B * (1000.0 / 15.0) / ms, "sessions", p2,
               0, NULL);
    rc = 0;
done:
    device_graph_destroy(graph);
    (void)rkv_model_abandon_frame(m);
    for (int pass = 0; pass < PASSES; pass++) {
        device_free(g->dev, f.kv[pass]);
        device_free(g->dev, f.q[pass]);
        device_free(g->dev, f.out[pass]);
    }
    return rc;
}

/* ---- the run ---------------------------------------------------------------------------- */

/* 720P: a local layer (0) on a write step, a global one (3) off one, B 1 and
 * 8; 360P: the global layer at B 8. */
static const att_case CASES_720P[] = {
    {0, 1, 1000, 16 * 512}, {3, 1, 1001, 17 * 512}, {0, 8, 1000, 16 * 512}, {3, 8, 1001, 17 * 512}};
static const att_case CASE_360P = {3, 8, 1001, 17 * 128};

/* Every row of one kernel: attention (720P and 360P; the rings steady, no
 * clock committed), the spot check, and with `full` the upsert (mma only)
 * and the whole frames (each from a restart). */
static int bench_kernel(gpu_bench *g, const kernel_choice *k, int full, double copy_gbps) {
    rkv_model *m = NULL;
    int rc = -1;
    if (steady_model(g, "waypoint-1.5-720p", k, &m)) goto done;
    for (size_t i = 0; i < sizeof CASES_720P / sizeof CASES_720P[0]; i++)
        if (bench_attention(g, m, k, &CASES_720P[i], full && i == 0)) goto done;
    if (full && !strcmp(k->kernel, "mma") && bench_upsert(g, m, copy_gbps)) goto done;
    if (full && (bench_frame(g, m, k, 1) || bench_frame(g, m, k, SESSIONS))) goto done;
    rkv_model_destroy(m);
    m = NULL;
    if (steady_model(g, "waypoint-1.5-360p", k, &m) || bench_attention(g, m, k, &CASE_360P, 0))
        goto done;
    rc = 0;
done:
    rkv_model_destroy(m);
    return rc;
}

int bench_cuda_run(const bench_opts *o) {
    if (device_cuda_count() < 1) {
        fprintf(stderr,
                "ringkv bench: --backend cuda: no GPU: the CUDA runtime sees 0 device(s) (no "
                "NVIDIA GPU here, no driver, or a driver older than the CUDA runtime ringkv was "
                "built with); run without --backend cuda for the CPU rows\n");
        return 2;
    }
    gpu_bench g;
    memset(&g, 0, sizeof g);
    g.o = o;
    g.reps = o->quick ? 5 : 20;
    g.commit = getenv("RKV_COMMIT") && *getenv("RKV_COMMIT") ? getenv("RKV_COMMIT") : "unknown";
    int rc = 1;
    if (!(g.dev = device_open(DEVICE_CUDA, g.err, sizeof g.err))) goto done;
    g.st = (cudaStream_t)device_stream(g.dev);
    cudaError_t e = cudaEventCreate(&g.e0);
    if (e == cudaSuccess) e = cudaEventCreate(&g.e1);
    if (e != cudaSuccess) {
        cuda_fail(&g, e, "cudaEventCreate");
        goto done;
    }
    g.have_events = 1;
    if (make_pattern(&g)) goto done;
    double copy_gbps = 0;
    if (bench_copy(&g, &copy_gbps)) goto done;
    /* every mma row first; the wgmma kernel (newer, opt-in) last */
    const kernel_choice mma2 = {"mma", 2}, mma3 = {"mma", 3}, wgmma = {"wgmma", 2};
    if (bench_kernel(&g, &mma2, 1, copy_gbps)) goto done;
    if (!o->quick && bench_kernel(&g, &mma3, 0, copy_gbps)) goto done;
    if (bench_kernel(&g, &wgmma, 1, copy_gbps)) goto done;
    rc = 0;
done:
    if (rc) fprintf(stderr, "ringkv bench: --backend cuda: %s\n", g.err);
    if (g.have_events) {
        cudaEventDestroy(g.e0);
        cudaEventDestroy(g.e1);
    }
    if (g.dev) device_free(g.dev, g.pattern);
    device_close(g.dev);
    return rc;
}

#endif /* RKV_HAVE_CUDA */

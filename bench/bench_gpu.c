/* `ringkv bench --backend cuda`: the CUDA backend on GPU 0, in the same row
 * format as the CPU bench (bench.h). A compact version of bench/gpu/bench_cuda
 * (the fuller program of scripts/gpu_check.sh), on the Waypoint-1.5 geometry
 * (SEM 7: H 16, Hq 32, D 64, bf16, RF = RB = 16; T 512 at 720P, 128 at 360P):
 *  - cuda_copy_gbps: device-to-device cudaMemcpy (bytes read + written), the
 *    ceiling of upsert;
 *  - cuda_upsert_us: one upsert call, B = 1 and 8, commit off and on, 24
 *    layers in turn (so the source and the ring are not L2-resident),
 *    enqueued eagerly (not in a graph), with its bandwidth against the copy;
 *  - cuda_attention_tflops: keys read straight from the ring, counted as
 *    4 * Tq * visible keys * D * Hq * B; 720P B = 1 and 8 on a local layer's
 *    write step (8,192 keys) and a global layer off one (8,704), 360P B = 8
 *    (2,176); with the split workspace the library asks for;
 *  - cuda_frame_ms: a whole 720P frame of one session (24 layers x 5 passes,
 *    upsert + attention, commit on the 5th, clock advanced on the device)
 *    captured in one CUDA graph and replayed; and the sessions that would
 *    run at 15 frames per second from it.
 * Timings are CUDA events around each measured call (medians of the reps
 * after warm-up). K/V are random bf16 and every ring slot is marked written,
 * so no frame is skipped as invisible where the count says it is visible.
 * Not yet run on a GPU (written on a machine without one). */
#include "bench.h"

#include <stdio.h>

#include "ringkv.h"

#ifndef RKV_HAVE_CUDA

int bench_cuda_built(void) { return 0; }
int bench_cuda_run(const bench_opts *o) {
    (void)o;
    fprintf(stderr, "ringkv bench: --backend cuda: ringkv was built without CUDA\n");
    return 2;
}

#else /* RKV_HAVE_CUDA */

#include <cuda_runtime_api.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ringkv_cuda.h"

int bench_cuda_built(void) { return 1; }

#define NLAYERS 24
#define SESSIONS 8

static void ck(cudaError_t e, const char *what) {
    if (e != cudaSuccess) {
        fprintf(stderr, "ringkv bench: --backend cuda: %s: %s (%s)\n", what, cudaGetErrorName(e),
                cudaGetErrorString(e));
        exit(1);
    }
}

static void okr(rkv_status st, const char *what) {
    if (st != RKV_OK) {
        fprintf(stderr, "ringkv bench: --backend cuda: %s: %s: %s\n", what, rkv_status_str(st),
                rkv_last_error());
        exit(1);
    }
}

static void *dmalloc(size_t n) {
    void *p = NULL;
    ck(cudaMalloc(&p, n ? n : 16), "cudaMalloc");
    return p;
}

/* A random bf16 pattern, tiled over device buffers. */
static void *g_pattern;
static size_t g_pattern_bytes;

static void make_pattern(void) {
    g_pattern_bytes = (size_t)16 << 20;
    const size_t n = g_pattern_bytes / 2;
    float *f = malloc(n * sizeof *f);
    g_pattern = malloc(g_pattern_bytes);
    if (!f || !g_pattern) {
        fprintf(stderr, "ringkv bench: out of host memory\n");
        exit(1);
    }
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (size_t i = 0; i < n; i++) {
        x ^= x >> 12, x ^= x << 25, x ^= x >> 27;
        f[i] = (float)((x * 2685821657736338717ull) >> 40) / 8388608.0f - 1.0f;
    }
    okr(rkv_convert(f, RKV_DTYPE_F32, g_pattern, RKV_DTYPE_BF16, n), "rkv_convert");
    free(f);
}

static void fill_random(void *d, size_t bytes) {
    for (size_t off = 0; off < bytes; off += g_pattern_bytes) {
        size_t n = bytes - off < g_pattern_bytes ? bytes - off : g_pattern_bytes;
        ck(cudaMemcpy((char *)d + off, g_pattern, n, cudaMemcpyHostToDevice), "cudaMemcpy");
    }
}

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

static float median(float *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_float);
    return n % 2 ? v[n / 2] : 0.5f * (v[n / 2 - 1] + v[n / 2]);
}

static rkv_geometry geom(int64_t T, int64_t PD) {
    rkv_geometry g = {SESSIONS, 16, 16, 16, 64, T, PD, RKV_DTYPE_BF16};
    return g;
}

/* A layer in steady state: random K/V, every slot written. */
static rkv_cuda_layer *steady_layer(const rkv_geometry *g) {
    rkv_cuda_layer *l = NULL;
    okr(rkv_cuda_layer_create(g, 0, &l), "rkv_cuda_layer_create");
    fill_random(rkv_cuda_layer_kv(l), rkv_cuda_layer_memory_bytes(l));
    ck(cudaMemset(rkv_cuda_layer_written(l), 1, (size_t)rkv_cuda_layer_total_slots(l)),
       "cudaMemset");
    return l;
}

typedef struct gpu_ctx {
    const bench_opts *o;
    cudaStream_t st;
    cudaEvent_t e0, e1;
    int reps;
    char device[256];
    int64_t *d_fp, *d_sess; /* DEVICE [SESSIONS] */
} gpu_ctx;

static cJSON *params(const gpu_ctx *c) {
    cJSON *p = cJSON_CreateObject();
    cJSON_AddStringToObject(p, "backend", "cuda");
    cJSON_AddStringToObject(p, "device", c->device);
    cJSON_AddStringToObject(p, "isa", "cuda");
    return p;
}

static void set_rows(gpu_ctx *c, int64_t B, int64_t clock) {
    int64_t fp[SESSIONS], sess[SESSIONS];
    for (int64_t b = 0; b < B; b++) fp[b] = clock, sess[b] = b;
    ck(cudaMemcpy(c->d_fp, fp, (size_t)B * sizeof *fp, cudaMemcpyHostToDevice), "cudaMemcpy");
    ck(cudaMemcpy(c->d_sess, sess, (size_t)B * sizeof *sess, cudaMemcpyHostToDevice),
       "cudaMemcpy");
}

static double bench_copy(gpu_ctx *c) {
    const size_t bytes = c->o->quick ? (size_t)256 << 20 : (size_t)1 << 30;
    void *a = dmalloc(bytes), *b = dmalloc(bytes);
    fill_random(a, bytes);
    float t[64];
    for (int i = 0; i < c->reps + 2; i++) {
        ck(cudaEventRecord(c->e0, c->st), "cudaEventRecord");
        ck(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, c->st), "cudaMemcpyAsync");
        ck(cudaEventRecord(c->e1, c->st), "cudaEventRecord");
        ck(cudaEventSynchronize(c->e1), "cudaEventSynchronize");
        if (i >= 2) ck(cudaEventElapsedTime(&t[i - 2], c->e0, c->e1), "cudaEventElapsedTime");
    }
    const double ms = median(t, c->reps);
    const double gbs = 2.0 * (double)bytes / (ms * 1e-3) / 1e9;
    cJSON *p = params(c);
    cJSON_AddNumberToObject(p, "bytes", (double)bytes);
    bench_emit(c->o, "cuda_copy_gbps", gbs, "GB/s", p, 0, NULL);
    cudaFree(a), cudaFree(b);
    return gbs;
}

static void bench_attention(gpu_ctx *c, rkv_cuda_layer *l, const char *preset, int64_t B,
                            int64_t clock, int64_t keys) {
    const rkv_geometry *g = rkv_cuda_layer_geometry(l);
    const int64_t Hq = 32, Tq = g->tokens_per_frame, D = g->d_head;
    const size_t nq = (size_t)(B * Hq * Tq * D);
    void *d_q = dmalloc(nq * 2), *d_out = dmalloc(nq * 2);
    fill_random(d_q, nq * 2);
    set_rows(c, B, clock);
    rkv_cuda_attention_args a;
    memset(&a, 0, sizeof a);
    a.batch = B;
    a.n_q_heads = Hq;
    a.q = d_q;
    a.q_dtype = RKV_DTYPE_BF16;
    a.out = d_out;
    a.out_dtype = RKV_DTYPE_BF16;
    a.session_idx = c->d_sess;
    a.frame_pos = c->d_fp;
    const size_t wsb = rkv_cuda_attention_workspace_bytes(l, &a);
    void *d_ws = wsb ? dmalloc(wsb) : NULL;
    a.workspace = d_ws;
    a.workspace_bytes = wsb;
    char plan[256];
    okr(rkv_cuda_attention_describe(l, &a, plan, sizeof plan), "rkv_cuda_attention_describe");
    float t[64];
    for (int r = 0; r < c->reps + 3; r++) {
        ck(cudaEventRecord(c->e0, c->st), "cudaEventRecord");
        okr(rkv_cuda_layer_attend(l, &a, (void *)c->st), "rkv_cuda_layer_attend");
        ck(cudaEventRecord(c->e1, c->st), "cudaEventRecord");
        ck(cudaEventSynchronize(c->e1), "cudaEventSynchronize");
        if (r >= 3) ck(cudaEventElapsedTime(&t[r - 3], c->e0, c->e1), "cudaEventElapsedTime");
    }
    okr(rkv_cuda_layer_check(l, (void *)c->st), "rkv_cuda_layer_check");
    const double ms = median(t, c->reps);
    const double flop = 4.0 * (double)Tq * (double)keys * (double)D * (double)Hq * (double)B;
    cJSON *p = params(c);
    cJSON_AddStringToObject(p, "dtype", "bf16");
    cJSON_AddNumberToObject(p, "B", (double)B);
    cJSON_AddStringToObject(p, "preset", preset);
    cJSON_AddNumberToObject(p, "keys", (double)keys);
    cJSON_AddNumberToObject(p, "pinned_dilation", (double)g->pinned_dilation);
    cJSON_AddNumberToObject(p, "us", ms * 1e3);
    cJSON_AddStringToObject(p, "plan", plan);
    bench_emit(c->o, "cuda_attention_tflops", flop / (ms * 1e-3) / 1e12, "TFLOP/s", p, 0, NULL);
    cudaFree(d_q), cudaFree(d_out), cudaFree(d_ws);
}

/* Upsert calls on the 24 layers in turn (eager), B rows of 720P frames. */
static void bench_upsert(gpu_ctx *c, rkv_cuda_layer **lay, double copy_gbs) {
    const size_t frame_bytes = (size_t)(2 * 16 * 512 * 64) * 2;
    void *in[NLAYERS];
    for (int i = 0; i < NLAYERS; i++) {
        in[i] = dmalloc(frame_bytes * SESSIONS);
        fill_random(in[i], frame_bytes * SESSIONS);
    }
    const int64_t batches[2] = {1, SESSIONS};
    for (int bi = 0; bi < 2; bi++)
        for (int commit = 0; commit < 2; commit++) {
            const int64_t B = batches[bi];
            set_rows(c, B, 40); /* a write step of every layer (PD 1 and 8) */
            float t[64];
            for (int r = 0; r < c->reps + 2; r++) {
                ck(cudaEventRecord(c->e0, c->st), "cudaEventRecord");
                for (int i = 0; i < NLAYERS; i++)
                    okr(rkv_cuda_layer_upsert(lay[i], in[i], RKV_DTYPE_BF16, B, c->d_fp, c->d_sess,
                                              commit, NULL, (void *)c->st),
                        "rkv_cuda_layer_upsert");
                ck(cudaEventRecord(c->e1, c->st), "cudaEventRecord");
                ck(cudaEventSynchronize(c->e1), "cudaEventSynchronize");
                if (r >= 2) ck(cudaEventElapsedTime(&t[r - 2], c->e0, c->e1), "cudaEventElapsedTime");
            }
            const double us = median(t, c->reps) * 1e3 / NLAYERS;
            /* read the input, write the scratch, and the ring on a commit */
            const double bytes = (double)frame_bytes * (double)B * (commit ? 3.0 : 2.0);
            cJSON *p = params(c);
            cJSON_AddStringToObject(p, "dtype", "bf16");
            cJSON_AddNumberToObject(p, "B", (double)B);
            cJSON_AddBoolToObject(p, "commit", commit);
            cJSON_AddStringToObject(p, "preset", "waypoint-1.5-720p");
            cJSON_AddStringToObject(p, "mode", "eager");
            bench_emit(c->o, "cuda_upsert_us", us, "us/call", p, 0, NULL);
            cJSON *p2 = params(c);
            cJSON_AddNumberToObject(p2, "B", (double)B);
            cJSON_AddBoolToObject(p2, "commit", commit);
            bench_emit(c->o, "cuda_upsert_gbps", bytes / (us * 1e-6) / 1e9, "GB/s", p2, copy_gbs,
                       "device-to-device cudaMemcpy");
        }
    for (int i = 0; i < NLAYERS; i++) okr(rkv_cuda_layer_check(lay[i], (void *)c->st), "check");
    for (int i = 0; i < NLAYERS; i++) cudaFree(in[i]);
}

/* One session's 720P frame (24 layers x 5 passes) in one CUDA graph. */
static void bench_frame(gpu_ctx *c, rkv_cuda_layer **lay) {
    const int64_t B = 1, Hq = 32, T = 512, D = 64, H = 16;
    const size_t kv_in = (size_t)(2 * H * B * T * D) * 2, nq = (size_t)(B * Hq * T * D);
    void *d_kv[5], *d_q[5], *d_out[5];
    for (int p = 0; p < 5; p++) {
        d_kv[p] = dmalloc(kv_in);
        d_q[p] = dmalloc(nq * 2);
        d_out[p] = dmalloc(nq * 2);
        fill_random(d_kv[p], kv_in);
        fill_random(d_q[p], nq * 2);
    }
    set_rows(c, B, 1000);
    rkv_cuda_attention_args a;
    memset(&a, 0, sizeof a);
    a.batch = B;
    a.n_q_heads = Hq;
    a.q_dtype = RKV_DTYPE_BF16;
    a.out_dtype = RKV_DTYPE_BF16;
    a.session_idx = c->d_sess;
    a.frame_pos = c->d_fp;
    a.q = d_q[0];
    a.out = d_out[0];
    size_t wsb = 0;
    for (int i = 0; i < NLAYERS; i++) {
        size_t w = rkv_cuda_attention_workspace_bytes(lay[i], &a);
        if (w > wsb) wsb = w;
    }
    void *d_ws = wsb ? dmalloc(wsb) : NULL;
    a.workspace = d_ws;
    a.workspace_bytes = wsb;
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    ck(cudaStreamBeginCapture(c->st, cudaStreamCaptureModeGlobal), "cudaStreamBeginCapture");
    for (int p = 0; p < 5; p++)
        for (int i = 0; i < NLAYERS; i++) {
            okr(rkv_cuda_layer_upsert(lay[i], d_kv[p], RKV_DTYPE_BF16, B, c->d_fp, c->d_sess,
                                      p == 4, NULL, (void *)c->st),
                "rkv_cuda_layer_upsert (capture)");
            a.q = d_q[p];
            a.out = d_out[p];
            okr(rkv_cuda_layer_attend(lay[i], &a, (void *)c->st), "rkv_cuda_layer_attend (capture)");
        }
    okr(rkv_cuda_clock_advance(c->d_fp, B, 1, (void *)c->st), "rkv_cuda_clock_advance");
    ck(cudaStreamEndCapture(c->st, &graph), "cudaStreamEndCapture");
    ck(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
    const int reps = c->reps < 10 ? c->reps : 10;
    float t[64];
    for (int r = 0; r < reps + 2; r++) {
        ck(cudaEventRecord(c->e0, c->st), "cudaEventRecord");
        ck(cudaGraphLaunch(exec, c->st), "cudaGraphLaunch");
        ck(cudaEventRecord(c->e1, c->st), "cudaEventRecord");
        ck(cudaEventSynchronize(c->e1), "cudaEventSynchronize");
        if (r >= 2) ck(cudaEventElapsedTime(&t[r - 2], c->e0, c->e1), "cudaEventElapsedTime");
    }
    for (int i = 0; i < NLAYERS; i++) okr(rkv_cuda_layer_check(lay[i], (void *)c->st), "check");
    const double ms = median(t, reps);
    cJSON *p = params(c);
    cJSON_AddStringToObject(p, "preset", "waypoint-1.5-720p");
    cJSON_AddNumberToObject(p, "B", 1);
    cJSON_AddNumberToObject(p, "calls", NLAYERS * 5 * 2 + 1);
    cJSON_AddStringToObject(p, "mode", "graph");
    bench_emit(c->o, "cuda_frame_ms", ms, "ms/frame", p, 0, NULL);
    cJSON *p2 = params(c);
    cJSON_AddStringToObject(p2, "from", "cuda_frame_ms (cache and attention only)");
    bench_emit(c->o, "cuda_sessions_at_15fps", (1000.0 / 15.0) / ms, "sessions", p2, 0, NULL);
    ck(cudaGraphExecDestroy(exec), "cudaGraphExecDestroy");
    ck(cudaGraphDestroy(graph), "cudaGraphDestroy");
    for (int k = 0; k < 5; k++) cudaFree(d_kv[k]), cudaFree(d_q[k]), cudaFree(d_out[k]);
    cudaFree(d_ws);
}

int bench_cuda_run(const bench_opts *o) {
    if (rkv_cuda_device_count() < 1) {
        /* the library's own message: a layer on device 0 is refused */
        rkv_geometry g = geom(128, 1);
        rkv_cuda_layer *l = NULL;
        rkv_status st = rkv_cuda_layer_create(&g, 0, &l);
        rkv_cuda_layer_destroy(l);
        fprintf(stderr, "ringkv bench: --backend cuda: no CUDA device or driver: %s\n",
                st != RKV_OK ? rkv_last_error() : "rkv_cuda_device_count() is 0");
        return 1;
    }
    gpu_ctx c;
    memset(&c, 0, sizeof c);
    c.o = o;
    c.reps = o->quick ? 5 : 20;
    struct cudaDeviceProp prop;
    ck(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
    snprintf(c.device, sizeof c.device, "%s", prop.name);
    ck(cudaSetDevice(0), "cudaSetDevice");
    ck(cudaStreamCreate(&c.st), "cudaStreamCreate"); /* blocking: after cudaMemcpy */
    ck(cudaEventCreate(&c.e0), "cudaEventCreate");
    ck(cudaEventCreate(&c.e1), "cudaEventCreate");
    c.d_fp = dmalloc(SESSIONS * sizeof(int64_t));
    c.d_sess = dmalloc(SESSIONS * sizeof(int64_t));
    make_pattern();

    const double copy = bench_copy(&c);
    /* 24 layers of the 720P preset (layers 3, 7, ..., 23 global), 8 sessions */
    rkv_cuda_layer *lay[NLAYERS];
    for (int i = 0; i < NLAYERS; i++) {
        rkv_geometry g = geom(512, i % 4 == 3 ? 8 : 1);
        lay[i] = steady_layer(&g);
    }
    rkv_geometry g360 = geom(128, 8);
    rkv_cuda_layer *l360 = steady_layer(&g360);
    /* local on a write step: 15 ring frames + scratch; global off a write
     * step: 16 + scratch */
    bench_attention(&c, lay[0], "waypoint-1.5-720p", 1, 1000, 16 * 512);
    bench_attention(&c, lay[3], "waypoint-1.5-720p", 1, 1001, 17 * 512);
    bench_attention(&c, lay[0], "waypoint-1.5-720p", SESSIONS, 1000, 16 * 512);
    bench_attention(&c, lay[3], "waypoint-1.5-720p", SESSIONS, 1001, 17 * 512);
    bench_attention(&c, l360, "waypoint-1.5-360p", SESSIONS, 1001, 17 * 128);
    rkv_cuda_layer_destroy(l360);
    bench_upsert(&c, lay, copy);
    bench_frame(&c, lay);

    for (int i = 0; i < NLAYERS; i++) rkv_cuda_layer_destroy(lay[i]);
    cudaFree(c.d_fp), cudaFree(c.d_sess);
    cudaEventDestroy(c.e0), cudaEventDestroy(c.e1);
    cudaStreamDestroy(c.st);
    free(g_pattern);
    return 0;
}

#endif /* RKV_HAVE_CUDA */

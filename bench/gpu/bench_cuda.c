/*
 * GPU benchmark of the CUDA backend at the Waypoint-1.5 geometries (SEM 7).
 * Prints one machine-readable line per measurement:
 *   RESULT bench=<name> value=<number> unit=<unit> [key=value ...]
 * and a table last. Measurements (CUDA events, medians, warm-up first,
 * never on zeros: K/V are filled with random bf16 and every ring frame is
 * marked written):
 *  - device-to-device copy bandwidth (bytes read + written), the ceiling
 *    for upsert;
 *  - upsert inside a CUDA graph (24 calls on 24 layers per replay): us per
 *    call and bandwidth (input read + scratch write + ring write on a
 *    committing write step) for B = 1 and B = 8, commit off and on;
 *  - attention, keys read straight from the ring: TFLOP/s counted as
 *    4 * Tq * visible keys * D * Hq * B, for B = 1 and B = 8 at 720P (8,192
 *    keys: local layer on a write step; 8,704: global layer off a write
 *    step) and B = 8 at 360P, with and without the split workspace, for the
 *    2- and 3-stage pipelines; plus a float64 spot check of a few rows;
 *  - a whole frame in one graph (24 layers x 5 passes: upsert + attention,
 *    commit on the 5th, clocks advanced on the device) for 1 session and for
 *    8 sessions per call, and the sessions one GPU holds at 15 frames/s.
 *
 * Usage: bench_cuda [--quick]        Exit 77 without a GPU.
 */
#include "../../tests/cuda/cuda_test_util.h"

static int g_reps = 20;

typedef struct summary_row {
    char name[96];
    double value;
    char unit[16];
    char note[512];
} summary_row;
static summary_row g_rows[64];
static int g_nrows;

static void result(const char *name, double value, const char *unit, const char *note) {
    printf("RESULT bench=%s value=%.4g unit=%s %s\n", name, value, unit, note ? note : "");
    if (g_nrows < 64) {
        summary_row *r = &g_rows[g_nrows++];
        snprintf(r->name, sizeof r->name, "%s", name);
        r->value = value;
        snprintf(r->unit, sizeof r->unit, "%s", unit);
        snprintf(r->note, sizeof r->note, "%s", note ? note : "");
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

/* Random bf16 pattern, tiled over a device buffer. */
static void *g_pattern;
static size_t g_pattern_bytes;
static void fill_random(void *d, size_t bytes) {
    for (size_t off = 0; off < bytes; off += g_pattern_bytes) {
        size_t n = bytes - off < g_pattern_bytes ? bytes - off : g_pattern_bytes;
        CK(cudaMemcpy((char *)d + off, g_pattern, n, cudaMemcpyHostToDevice));
    }
}

static rkv_geometry geom(int64_t S, int64_t T, int64_t PD) {
    rkv_geometry g = {S, 16, 16, 16, 64, T, PD, RKV_DTYPE_BF16};
    return g;
}

/* A layer in steady state: random K/V, every ring frame written. */
static rkv_cuda_layer *steady_layer(const rkv_geometry *g) {
    rkv_cuda_layer *l = NULL;
    OKR(rkv_cuda_layer_create(g, 0, &l));
    fill_random(rkv_cuda_layer_kv(l), rkv_cuda_layer_memory_bytes(l));
    CK(cudaMemset(rkv_cuda_layer_written(l), 1, (size_t)rkv_cuda_layer_total_slots(l)));
    return l;
}

/* ---- copy bandwidth -------------------------------------------------------- */
static double bench_copy(cudaStream_t st) {
    const size_t bytes = (size_t)1 << 30;
    void *a = ct_dmalloc(bytes), *b = ct_dmalloc(bytes);
    fill_random(a, bytes);
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    float t[32];
    for (int i = 0; i < g_reps + 3; i++) {
        CK(cudaEventRecord(e0, st));
        CK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, st));
        CK(cudaEventRecord(e1, st));
        CK(cudaEventSynchronize(e1));
        if (i >= 3) CK(cudaEventElapsedTime(&t[i - 3], e0, e1));
    }
    const double ms = median(t, g_reps);
    const double gbs = 2.0 * (double)bytes / (ms * 1e-3) / 1e9;
    char note[128];
    snprintf(note, sizeof note, "bytes=%zu ms=%.3f (read+written)", bytes, ms);
    result("copy_d2d_bandwidth", gbs, "GB/s", note);
    cudaFree(a), cudaFree(b);
    cudaEventDestroy(e0), cudaEventDestroy(e1);
    return gbs;
}

/* ---- upsert in a graph ------------------------------------------------------- */
static void bench_upsert(cudaStream_t st, double copy_gbs) {
    const int NLAY = 24;
    const int64_t S = 8;
    rkv_geometry g = geom(S, 512, 1);
    rkv_cuda_layer *lay[24];
    for (int i = 0; i < NLAY; i++) OKR(rkv_cuda_layer_create(&g, 0, &lay[i]));
    const size_t frame_bytes = (size_t)(2 * 16 * 512 * 64) * 2;
    void *in[24];
    for (int i = 0; i < NLAY; i++) {
        in[i] = ct_dmalloc(frame_bytes * (size_t)S);
        fill_random(in[i], frame_bytes * (size_t)S);
    }
    int64_t *d_fp = (int64_t *)ct_dmalloc(S * 8), *d_sess = (int64_t *)ct_dmalloc(S * 8);
    int64_t fp[8], sess[8];
    for (int b = 0; b < S; b++) fp[b] = 40 + b, sess[b] = (b * 5) % S; /* PD 1: all write steps */
    CK(cudaMemcpy(d_fp, fp, sizeof fp, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d_sess, sess, sizeof sess, cudaMemcpyHostToDevice));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    const int64_t batches[2] = {1, 8};
    for (int bi = 0; bi < 2; bi++)
        for (int commit = 0; commit < 2; commit++) {
            const int64_t Bn = batches[bi];
            cudaGraph_t graph;
            cudaGraphExec_t exec;
            CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
            for (int i = 0; i < NLAY; i++)
                OKR(rkv_cuda_layer_upsert(lay[i], in[i], RKV_DTYPE_BF16, Bn, d_fp, d_sess, commit,
                                          NULL, (void *)st));
            CK(cudaStreamEndCapture(st, &graph));
            CK(cudaGraphInstantiate(&exec, graph, 0));
            float t[32];
            for (int r = 0; r < g_reps + 3; r++) {
                CK(cudaEventRecord(e0, st));
                CK(cudaGraphLaunch(exec, st));
                CK(cudaEventRecord(e1, st));
                CK(cudaEventSynchronize(e1));
                if (r >= 3) CK(cudaEventElapsedTime(&t[r - 3], e0, e1));
            }
            const double ms = median(t, g_reps);
            const double us_call = ms * 1e3 / NLAY;
            const double bytes = (double)frame_bytes * (double)Bn * (commit ? 3.0 : 2.0);
            const double gbs = bytes / (us_call * 1e-6) / 1e9;
            char name[64], note[160];
            snprintf(name, sizeof name, "upsert_graph_B%lld_commit%d", (long long)Bn, commit);
            snprintf(note, sizeof note, "bandwidth=%.0fGB/s pct_of_copy=%.1f bytes_per_call=%.0f",
                     gbs, 100.0 * gbs / copy_gbs, bytes);
            result(name, us_call, "us/call", note);
            CK(cudaGraphExecDestroy(exec));
            CK(cudaGraphDestroy(graph));
        }
    for (int i = 0; i < NLAY; i++) OKR(rkv_cuda_layer_check(lay[i], (void *)st));
    for (int i = 0; i < NLAY; i++) rkv_cuda_layer_destroy(lay[i]), cudaFree(in[i]);
    cudaFree(d_fp), cudaFree(d_sess);
    cudaEventDestroy(e0), cudaEventDestroy(e1);
}

/* ---- attention -------------------------------------------------------------- */
typedef struct att_setup {
    const char *name;
    int64_t T, PD, B, f; /* f: clock of every row */
    int64_t keys;        /* visible keys per row (for the FLOP count) */
} att_setup;

/* kernel: "mma" or "wgmma" (RKV_CUDA_ATTN_KERNEL); stages: the mma
 * kernel's cp.async depth (the wgmma kernel has its own). */
static void bench_attention(cudaStream_t st, const att_setup *a, const char *kernel, int stages,
                            int spot) {
    const int64_t S = 8, Hq = 32, D = 64, Tq = a->T;
    char env[8];
    snprintf(env, sizeof env, "%d", stages);
    setenv("RKV_CUDA_ATTN_STAGES", env, 1);
    setenv("RKV_CUDA_ATTN_KERNEL", kernel, 1);
    rkv_geometry g = geom(S, a->T, a->PD);
    rkv_cuda_layer *l = steady_layer(&g);
    unsetenv("RKV_CUDA_ATTN_STAGES");
    unsetenv("RKV_CUDA_ATTN_KERNEL");
    const size_t nq = (size_t)(a->B * Hq * Tq * D);
    void *d_q = ct_dmalloc(nq * 2), *d_out = ct_dmalloc(nq * 2);
    fill_random(d_q, nq * 2);
    int64_t fp[8], sess[8];
    for (int b = 0; b < a->B; b++) fp[b] = a->f, sess[b] = b;
    int64_t *d_fp = (int64_t *)ct_dmalloc(64), *d_sess = (int64_t *)ct_dmalloc(64);
    CK(cudaMemcpy(d_fp, fp, (size_t)a->B * 8, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d_sess, sess, (size_t)a->B * 8, cudaMemcpyHostToDevice));
    rkv_cuda_attention_args ar;
    memset(&ar, 0, sizeof ar);
    ar.batch = a->B;
    ar.n_q_heads = Hq;
    ar.q = d_q;
    ar.q_dtype = RKV_DTYPE_BF16;
    ar.out = d_out;
    ar.out_dtype = RKV_DTYPE_BF16;
    ar.session_idx = d_sess;
    ar.frame_pos = d_fp;
    const size_t wsb = rkv_cuda_attention_workspace_bytes(l, &ar);
    void *d_ws = wsb ? ct_dmalloc(wsb) : NULL;
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    const double flop = 4.0 * (double)Tq * (double)a->keys * (double)D * (double)Hq * (double)a->B;
    for (int use_ws = 0; use_ws < (wsb ? 2 : 1); use_ws++) {
        ar.workspace = use_ws ? d_ws : NULL;
        ar.workspace_bytes = use_ws ? wsb : 0;
        char plan[256];
        OKR(rkv_cuda_attention_describe(l, &ar, plan, sizeof plan));
        float t[32];
        for (int r = 0; r < g_reps + 3; r++) {
            CK(cudaEventRecord(e0, st));
            OKR(rkv_cuda_layer_attend(l, &ar, (void *)st));
            CK(cudaEventRecord(e1, st));
            CK(cudaEventSynchronize(e1));
            if (r >= 3) CK(cudaEventElapsedTime(&t[r - 3], e0, e1));
        }
        const double ms = median(t, g_reps);
        char name[96], note[512];
        if (!strcmp(kernel, "wgmma"))
            snprintf(name, sizeof name, "attention_%s_wgmma%s", a->name, use_ws ? "_split" : "");
        else
            snprintf(name, sizeof name, "attention_%s_stages%d%s", a->name, stages,
                     use_ws ? "_split" : "");
        snprintf(note, sizeof note, "us=%.1f keys=%lld plan=\"%s\"", ms * 1e3, (long long)a->keys,
                 plan);
        result(name, flop / (ms * 1e-3) / 1e12, "TFLOP/s", note);
    }
    OKR(rkv_cuda_layer_check(l, (void *)st));
    if (spot) { /* float64 rows of session 0 against the oracle */
        const size_t kvb = rkv_cuda_layer_memory_bytes(l);
        void *h_kv = ct_malloc(kvb);
        uint8_t *h_w = (uint8_t *)ct_malloc((size_t)rkv_cuda_layer_total_slots(l));
        void *h_q = ct_malloc(nq * 2), *h_out = ct_malloc(nq * 2);
        OKR(rkv_cuda_layer_download(l, h_kv, h_w));
        CK(cudaMemcpy(h_q, d_q, nq * 2, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(h_out, d_out, nq * 2, cudaMemcpyDeviceToHost));
        ct_rng rng = {99};
        double num = 0, den = 0, row[64];
        for (int k = 0; k < 6; k++) {
            const int64_t h = ct_randint(&rng, Hq), i = ct_randint(&rng, Tq);
            ct_oracle_row(&g, h_kv, h_w, h_q, RKV_DTYPE_BF16, Hq, Tq, 0, h, i, 0, a->f,
                          1.0 / 8.0, row);
            for (int d = 0; d < D; d++) {
                const double gv = ct_get(h_out, RKV_DTYPE_BF16, (size_t)((h * Tq + i) * D + d));
                num += (gv - row[d]) * (gv - row[d]);
                den += row[d] * row[d];
            }
        }
        const double err = den > 0 ? sqrt(num / den) : INFINITY;
        char name[96], note[64];
        snprintf(name, sizeof name, "attention_%s_%s_f64_spot_err", a->name, kernel);
        snprintf(note, sizeof note, "rows=6 pass=%s", err <= 1e-2 ? "yes" : "NO");
        result(name, err, "rel", note);
        free(h_kv), free(h_w), free(h_q), free(h_out);
    }
    rkv_cuda_layer_destroy(l);
    cudaFree(d_q), cudaFree(d_out), cudaFree(d_fp), cudaFree(d_sess), cudaFree(d_ws);
    cudaEventDestroy(e0), cudaEventDestroy(e1);
}

/* ---- a whole frame in one graph ------------------------------------------------ */
static double bench_frame(cudaStream_t st, int64_t S, const char *kernel) {
    /* Waypoint-1.5 at 720P (SEM 7): 24 layers, Hq 32, H 16, D 64, T 512;
     * layers 3, 7, ..., 23 global (PD 8, RB = RF = 16), the rest local. */
    const int64_t NLAY = 24, B = S, Hq = 32, T = 512, D = 64, H = 16;
    rkv_cuda_layer **lay = (rkv_cuda_layer **)ct_malloc((size_t)NLAY * sizeof *lay);
    setenv("RKV_CUDA_ATTN_KERNEL", kernel, 1);
    for (int64_t i = 0; i < NLAY; i++) {
        rkv_geometry g = geom(S, T, i % 4 == 3 ? 8 : 1);
        lay[i] = steady_layer(&g);
    }
    unsetenv("RKV_CUDA_ATTN_KERNEL");
    const char *suffix = strcmp(kernel, "wgmma") ? "" : "_wgmma";
    const size_t kv_in = (size_t)(2 * H * B * T * D) * 2, nq = (size_t)(B * Hq * T * D);
    /* one input per pass (the layers read the same buffers: a real model
     * writes new activations there between layers) */
    void *d_kv[5], *d_q[5], *d_out[5];
    for (int p = 0; p < 5; p++) {
        d_kv[p] = ct_dmalloc(kv_in);
        d_q[p] = ct_dmalloc(nq * 2);
        d_out[p] = ct_dmalloc(nq * 2);
        fill_random(d_kv[p], kv_in);
        fill_random(d_q[p], nq * 2);
    }
    int64_t fp[8], sess[8];
    for (int b = 0; b < B; b++) fp[b] = 1000, sess[b] = b;
    int64_t *d_fp = (int64_t *)ct_dmalloc(64), *d_sess = (int64_t *)ct_dmalloc(64);
    CK(cudaMemcpy(d_fp, fp, (size_t)B * 8, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d_sess, sess, (size_t)B * 8, cudaMemcpyHostToDevice));
    rkv_cuda_attention_args ar;
    memset(&ar, 0, sizeof ar);
    ar.batch = B;
    ar.n_q_heads = Hq;
    ar.q_dtype = RKV_DTYPE_BF16;
    ar.out_dtype = RKV_DTYPE_BF16;
    ar.session_idx = d_sess;
    ar.frame_pos = d_fp;
    ar.q = d_q[0];
    ar.out = d_out[0];
    size_t wsb = 0;
    for (int64_t i = 0; i < NLAY; i++) {
        size_t w = rkv_cuda_attention_workspace_bytes(lay[i], &ar);
        if (w > wsb) wsb = w;
    }
    void *d_ws = wsb ? ct_dmalloc(wsb) : NULL;
    ar.workspace = d_ws;
    ar.workspace_bytes = wsb;
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
    for (int p = 0; p < 5; p++)
        for (int64_t i = 0; i < NLAY; i++) {
            OKR(rkv_cuda_layer_upsert(lay[i], d_kv[p], RKV_DTYPE_BF16, B, d_fp, d_sess, p == 4, NULL,
                                      (void *)st));
            ar.q = d_q[p];
            ar.out = d_out[p];
            OKR(rkv_cuda_layer_attend(lay[i], &ar, (void *)st));
        }
    OKR(rkv_cuda_clock_advance(d_fp, B, 1, (void *)st));
    CK(cudaStreamEndCapture(st, &graph));
    CK(cudaGraphInstantiate(&exec, graph, 0));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    const int reps = g_reps < 10 ? g_reps : 10;
    float t[32];
    for (int r = 0; r < reps + 2; r++) {
        CK(cudaEventRecord(e0, st));
        CK(cudaGraphLaunch(exec, st));
        CK(cudaEventRecord(e1, st));
        CK(cudaEventSynchronize(e1));
        if (r >= 2) CK(cudaEventElapsedTime(&t[r - 2], e0, e1));
    }
    const double ms = median(t, reps);
    for (int64_t i = 0; i < NLAY; i++) OKR(rkv_cuda_layer_check(lay[i], (void *)st));
    char name[64], note[160];
    snprintf(name, sizeof name, "frame_graph_%lld_session%s%s", (long long)S, S > 1 ? "s" : "",
             suffix);
    snprintf(note, sizeof note,
             "layers=%lld passes=5 calls=%lld(upsert+attend) per_session_ms=%.3f workspace=%zu",
             (long long)NLAY, (long long)(NLAY * 5), ms / (double)S, wsb);
    result(name, ms, "ms/frame", note);
    const double rt = (double)S * (1000.0 / 15.0) / ms;
    snprintf(name, sizeof name, "sessions_at_15fps_B%lld%s", (long long)S, suffix);
    snprintf(note, sizeof note, "from frame_graph_%lld%s (cache+attention only)", (long long)S,
             suffix);
    result(name, rt, "sessions", note);
    CK(cudaGraphExecDestroy(exec));
    CK(cudaGraphDestroy(graph));
    for (int64_t i = 0; i < NLAY; i++) rkv_cuda_layer_destroy(lay[i]);
    free(lay);
    for (int p = 0; p < 5; p++) cudaFree(d_kv[p]), cudaFree(d_q[p]), cudaFree(d_out[p]);
    cudaFree(d_fp), cudaFree(d_sess), cudaFree(d_ws);
    cudaEventDestroy(e0), cudaEventDestroy(e1);
    return ms;
}

int main(int argc, char **argv) {
    int quick = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) quick = 1;
        else {
            fprintf(stderr, "usage: %s [--quick]\n", argv[0]);
            return 2;
        }
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (!ct_have_gpu("bench_cuda")) return CT_SKIP;
    if (quick) g_reps = 5;
    const double t0 = ct_now();
    g_pattern_bytes = (size_t)64 << 20;
    g_pattern = ct_malloc(g_pattern_bytes);
    ct_rng rng = {12345};
    ct_fill(g_pattern, RKV_DTYPE_BF16, g_pattern_bytes / 2, 1.0f, &rng);
    cudaStream_t st;
    CK(cudaStreamCreate(&st)); /* blocking: ordered after the legacy-stream copies and memsets */

    const double copy = bench_copy(st);
    bench_upsert(st, copy);
    /* local layer on a write step: 15 ring frames + scratch = 8,192 keys;
     * global layer (PD 8) off a write step: 16 + scratch = 8,704 keys */
    const att_setup setups[] = {
        {"720p_B1_8192keys", 512, 1, 1, 1000, 16 * 512},
        {"720p_B1_8704keys", 512, 8, 1, 1001, 17 * 512},
        {"720p_B8_8192keys", 512, 1, 8, 1000, 16 * 512},
        {"720p_B8_8704keys", 512, 8, 8, 1001, 17 * 512},
        {"360p_B8_2176keys", 128, 8, 8, 1001, 17 * 128},
    };
    /* Everything on the mma kernel first: a fault in the (newer) wgmma
     * kernel would end the process, and must not cost the other numbers. */
    for (size_t i = 0; i < sizeof setups / sizeof setups[0]; i++) {
        bench_attention(st, &setups[i], "mma", 2, i == 0);
        if (!quick) bench_attention(st, &setups[i], "mma", 3, 0);
    }
    bench_frame(st, 1, "mma");
    bench_frame(st, 8, "mma");
    for (size_t i = 0; i < sizeof setups / sizeof setups[0]; i++)
        bench_attention(st, &setups[i], "wgmma", 2, i == 0);
    bench_frame(st, 1, "wgmma");
    bench_frame(st, 8, "wgmma");

    printf("\n%-44s %12s  %-9s %s\n", "measurement", "value", "unit", "note");
    for (int i = 0; i < g_nrows; i++)
        printf("%-44s %12.4g  %-9s %s\n", g_rows[i].name, g_rows[i].value, g_rows[i].unit,
               g_rows[i].note);
    printf("RESULT bench=bench_cuda_seconds value=%.1f unit=s\n", ct_now() - t0);
    free(g_pattern);
    CK(cudaStreamDestroy(st));
    return 0;
}

/*
 * Whole-model graph test (issue 11): a CUDA rkv_model's frame -- every
 * layer, every pass, B sessions, the per-pass rkv_model_frame_step calls --
 * recorded ONCE into a CUDA graph and replayed frame after frame (300 by
 * default) under the capture contract of ringkv.h ("Frames"): each frame is
 * rkv_model_begin_frame (host checks, the batch copied into the model's
 * device buffers), one graph launch, rkv_model_end_frame. A CPU rkv_model
 * with the same config runs the same frames through the calls that spell the
 * batch out (rkv_model_step), and after every frame:
 *  - K/V storage and written bits of every layer: exact (a mismatch names
 *    the layer, the part, head, session, frame slot, token and dim of the
 *    first differing element and both values);
 *  - every session's clock (rkv_model_clock) equal on both models;
 *  - attention outputs (sampled frames: the first 12, every 10th, around
 *    the reset, the last 3): ||gpu - cpu|| / ||cpu|| <= 1e-2 (bf16), the
 *    worst element named with both values;
 *  - on sampled frames, every held session's in-memory snapshot image (the
 *    span calls: K/V, bits and clock) byte-equal on both models.
 * Mid-run one session is reset on both models (outside the graph) and
 * restarts at a new clock: only the clock values the replay reads change.
 * Before the first frame, rkv_model_begin_frame inside a capture of the
 * model's stream must be refused (RKV_ERR_STATE) and change nothing.
 * Config: 2 layers, local (RF = RB = 4, PD 1) and global-like (RF 4, RB 3,
 * PD 2), S 3, H 2, Hq 4, D 64, T 128, bf16; B = 2 rows (sessions 2 and 0);
 * layer 0 attends with Tq = T and bf16 outputs, layer 1 with Tq = 64 and
 * f32 outputs (both through the model's split workspace).
 *
 * Usage: test_cuda_graph [--frames N] [--seed N]
 * Exit: 0 pass, 1 a check failed, 2 setup error, 77 no GPU (skipped).
 */
#include "cuda_test_util.h"
#ifdef RKV_CUDA_EXEC_PROGRAM
#include "rkvx_api.h" /* the executor's counters (tests/cuda_exec) */
#endif

#define NL 2
#define NP 5
#define B 2

static const char *part_name(int64_t c) { return c == 0 ? "K" : "V"; }

/* The first difference between the two models' storage of layer l, named
 * in the geometry's terms with both values; 0 when equal. */
static int compare_layer(const rkv_geometry *g, int l, int frame, const void *gpu_kv,
                         const uint8_t *gpu_written, const rkv_layer *cpu) {
    const size_t esz = rkv_dtype_size(g->dtype), bytes = rkv_geometry_memory_bytes(g);
    const uint8_t *a = (const uint8_t *)gpu_kv, *b = (const uint8_t *)rkv_layer_kv(cpu);
    const int64_t T = g->tokens_per_frame, C = (g->ring_frames + 1) * T;
    const int64_t N = g->num_sessions * C, D = g->d_head, H = g->n_kv_heads;
    if (memcmp(a, b, bytes)) {
        size_t i = 0;
        while (a[i] == b[i]) i++;
        const int64_t e = (int64_t)(i / esz), d = e % D, slot = (e / D) % N,
                      h = (e / D / N) % H, c = e / D / N / H;
        printf("FAIL frame %d layer %d (S %lld, H %lld, RF %lld, RB %lld, PD %lld, T %lld, D "
               "%lld, %s): storage differs first at element %lld = %s head %lld, session %lld, "
               "frame slot %lld, token %lld, dim %lld: gpu %g, cpu %g\n",
               frame, l, (long long)g->num_sessions, (long long)H, (long long)g->ring_frames,
               (long long)g->ring_buckets, (long long)g->pinned_dilation, (long long)T,
               (long long)D, rkv_dtype_name(g->dtype), (long long)e, part_name(c), (long long)h,
               (long long)(slot / C), (long long)(slot % C / T), (long long)(slot % T),
               (long long)d, rkvt_get(gpu_kv, g->dtype, (size_t)e),
               rkvt_get(rkv_layer_kv(cpu), g->dtype, (size_t)e));
        return 1;
    }
    const uint8_t *w = rkv_layer_written(cpu);
    for (int64_t s = 0; s < N; s++)
        if (gpu_written[s] != w[s]) {
            printf("FAIL frame %d layer %d: written bit of slot %lld (session %lld, frame slot "
                   "%lld, token %lld) differs first: gpu %d, cpu %d\n",
                   frame, l, (long long)s, (long long)(s / C), (long long)(s % C / T),
                   (long long)(s % T), gpu_written[s], w[s]);
            return 1;
        }
    return 0;
}

/* Attention outputs [B][Hq][Tq][D] (f32 both): the norm-wise relative error,
 * and on failure the element with the largest difference and both values. */
static int compare_out(int frame, int pass, int l, const float *got, const float *ref,
                       int64_t Hq, int64_t Tq, int64_t D, double tol, double *max_err) {
    const size_t n = (size_t)(B * Hq * Tq * D);
    size_t worst = 0;
    const double err = rkvt_rel_err(got, ref, n, &worst);
    if (err > *max_err) *max_err = err;
    if (err <= tol) return 0;
    const int64_t e = (int64_t)worst;
    printf("FAIL frame %d pass %d layer %d (B %d, Hq %lld, Tq %lld, D %lld): attention relative "
           "error %.3e > %.0e; largest difference at element %lld = row %lld, head %lld, query "
           "%lld, dim %lld: gpu %g, cpu %g\n",
           frame, pass, l, B, (long long)Hq, (long long)Tq, (long long)D, err, tol, (long long)e,
           (long long)(e / D / Tq / Hq), (long long)(e / D / Tq % Hq), (long long)(e / D % Tq),
           (long long)(e % D), got[worst], ref[worst]);
    return 1;
}

typedef struct frame_calls {
    rkv_model *m;
    void *kv[NL][NP];
    rkv_attention_args args[NL][NP];
    rkv_dtype dt;
} frame_calls;

/* The frame's per-pass calls, as recorded into the graph (and nothing else). */
static rkv_status record(const frame_calls *fc) {
    for (int p = 0; p < NP; p++)
        for (int l = 0; l < NL; l++) {
            rkv_status st = rkv_model_frame_step(fc->m, l, fc->kv[l][p], fc->dt, p == NP - 1,
                                                 &fc->args[l][p]);
            if (st != RKV_OK) return st;
        }
    return RKV_OK;
}

#ifdef RKV_CUDA_EXEC_PROGRAM
/* The executor checks' model: one session claimed as `name`, 1 query head
 * over 1 KV head, D 64, T 128, bf16, the given layers, on a new stream
 * (CK / OKR exit on a failure). */
static void small_model(const char *name, int n_layers, const rkv_layer_spec *layers,
                       cudaStream_t *st, rkv_model **m, int64_t *s) {
    rkv_model_config c = RKV_MODEL_CONFIG_INIT;
    snprintf(c.name, sizeof c.name, "%s", name);
    c.n_layers = n_layers;
    for (int l = 0; l < n_layers; l++) c.layers[l] = layers[l];
    c.num_sessions = 1;
    c.n_q_heads = 1;
    c.n_kv_heads = 1;
    c.d_head = 64;
    c.tokens_per_frame = 128;
    c.dtype = RKV_DTYPE_BF16;
    CK(cudaStreamCreateWithFlags(st, cudaStreamNonBlocking));
    OKR(rkv_model_create_cuda(&c, 0, (void *)*st, m));
    OKR(rkv_model_claim(*m, name, s));
}

/* Host syncs per frame on the executor (issue 22: at most 3 in the library):
 * a 24-layer CUDA model (the 720P preset's layer count, small rings), 12
 * frames of begin_frame, a committing upsert and an attention on every
 * layer, then rkv_model_synchronize (which reads every layer's error word:
 * one copy for all of them). Counted by the executor's runtime around each
 * frame's library calls; the test's own copies are outside the count. */
static int check_host_syncs(void) {
    enum { L = 24, FRAMES = 12 };
    rkv_layer_spec layers[L];
    for (int l = 0; l < L; l++) layers[l] = (rkv_layer_spec){2, 2, 1};
    cudaStream_t st;
    rkv_model *m = NULL;
    int64_t s = -1;
    small_model("syncs", L, layers, &st, &m, &s);
    const size_t kv_bytes = 2 * 128 * 64 * 2, q_bytes = 128 * 64 * 2;
    void *kv = NULL, *q = NULL, *out = NULL;
    CK(cudaMalloc(&kv, kv_bytes));
    CK(cudaMalloc(&q, q_bytes));
    CK(cudaMalloc(&out, q_bytes));
    CK(cudaMemset(kv, 0, kv_bytes));
    CK(cudaMemset(q, 0, q_bytes));
    rkv_attention_args a = RKV_ATTENTION_ARGS_INIT;
    a.n_q_heads = 1;
    a.q = q;
    a.q_dtype = RKV_DTYPE_BF16;
    a.out = out;
    a.out_dtype = RKV_DTYPE_BF16;
    long long worst = 0;
    for (int64_t f = 0; f < FRAMES; f++) {
        rkvx_stats before, after;
        rkvx_get_stats(&before);
        OKR(rkv_model_begin_frame(m, 1, &s, &f));
        for (int l = 0; l < L; l++) OKR(rkv_model_frame_step(m, l, kv, RKV_DTYPE_BF16, 1, &a));
        OKR(rkv_model_synchronize(m));
        rkvx_get_stats(&after);
        const long long n = after.host_syncs - before.host_syncs;
        if (n > worst) worst = n;
    }
    printf("host syncs per frame (%d layers, %d frames): at most %lld\n", L, FRAMES, worst);
    rkv_model_destroy(m);
    CK(cudaFree(kv));
    CK(cudaFree(q));
    CK(cudaFree(out));
    CK(cudaStreamDestroy(st));
    if (worst > 3 || worst < 1) {
        printf("FAIL: %lld host syncs in one frame; expected 1..3 (issue 22)\n", worst);
        return 1;
    }
    return 0;
}

/* rkv_model_cuda_attention_describe against what the model's attend runs,
 * on a model whose rings differ (a local layer RF 2, a global one RF 16:
 * the model's workspace is the global layer's need): for each layer and
 * Tq = T and 4T (more rows than the workspace was sized for, so the split
 * count is cut to fit it), the executor's count of launches and blocks of
 * one rkv_model_frame_attend equals the described plan's: its grid, plus
 * the combine kernel (256 threads, one per 4 outputs) when it splits. */
static int check_describe_runs(void) {
    enum { T = 128, D = 64 };
    const rkv_layer_spec layers[2] = {{2, 2, 1}, {16, 16, 1}};
    cudaStream_t st;
    rkv_model *m = NULL;
    int64_t s = -1, f = 0;
    small_model("describe", 2, layers, &st, &m, &s);
    OKR(rkv_model_begin_frame(m, 1, &s, &f));
    const size_t q_bytes = 4 * T * D * 2;
    void *q = NULL, *out = NULL;
    CK(cudaMalloc(&q, q_bytes));
    CK(cudaMalloc(&out, q_bytes));
    CK(cudaMemset(q, 0, q_bytes));
    int fails = 0, split_cases = 0;
    for (int l = 0; l < 2; l++)
        for (int64_t tq = T; tq <= 4 * T; tq *= 4) {
            rkv_attention_args a = RKV_ATTENTION_ARGS_INIT;
            a.n_q_heads = 1;
            a.n_queries = tq;
            a.q = q;
            a.q_dtype = RKV_DTYPE_BF16;
            a.out = out;
            a.out_dtype = RKV_DTYPE_BF16;
            char plan[256];
            OKR(rkv_model_cuda_attention_describe(m, l, 1, &a, plan, sizeof plan));
            long long gx = 0, gy = 0, gz = 0, rows = 0;
            int splits = 0;
            const char *g = strstr(plan, "grid "), *r = strstr(plan, " rows ");
            if (!g || !r ||
                sscanf(g, "grid %lldx%lldx%lld splits %d", &gx, &gy, &gz, &splits) != 4 ||
                sscanf(r, " rows %lld", &rows) != 1) {
                printf("FAIL: layer %d Tq %lld: cannot read the plan '%s'\n", l, (long long)tq,
                       plan);
                return 1;
            }
            const long long want_launches = splits > 1 ? 2 : 1;
            const long long want_blocks =
                gx * gy * gz + (splits > 1 ? (rows * (D / 4) + 255) / 256 : 0);
            rkvx_stats before, after;
            OKR(rkv_model_synchronize(m));
            rkvx_get_stats(&before);
            OKR(rkv_model_frame_attend(m, l, &a));
            OKR(rkv_model_synchronize(m));
            rkvx_get_stats(&after);
            const long long launches = after.launches - before.launches;
            const long long blocks = after.blocks - before.blocks;
            split_cases += splits > 1;
            printf("layer %d Tq %lld: described '%s'; ran %lld launch(es), %lld blocks\n", l,
                   (long long)tq, plan, launches, blocks);
            if (launches != want_launches || blocks != want_blocks) {
                printf("FAIL: layer %d Tq %lld: the attend ran %lld launch(es) of %lld blocks; "
                       "the described plan has %lld of %lld\n",
                       l, (long long)tq, launches, blocks, want_launches, want_blocks);
                fails++;
            }
        }
    rkv_model_destroy(m);
    CK(cudaFree(q));
    CK(cudaFree(out));
    CK(cudaStreamDestroy(st));
    if (split_cases == 0) {
        printf("FAIL: no described plan splits its keys; the check compares nothing of the "
               "workspace\n");
        return 1;
    }
    return fails != 0;
}
#endif

int main(int argc, char **argv) {
    int frames = 300;
    uint64_t seed = 7;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--frames") && i + 1 < argc) frames = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--seed") && i + 1 < argc) seed = strtoull(argv[++i], NULL, 0);
        else {
            fprintf(stderr, "usage: %s [--frames N] [--seed N]\n", argv[0]);
            return 2;
        }
    }
    if (frames < 1) frames = 1;
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (!ct_have_gpu("test_cuda_graph")) return CT_SKIP;
#ifdef RKV_CUDA_EXEC_PROGRAM
    if (check_host_syncs() || check_describe_runs()) return 1;
#endif
    const double t_start = ct_now();
    rkvt_rng rng = {seed};
    const rkv_dtype dt = RKV_DTYPE_BF16;
    const int64_t Hq = 4, Tq[NL] = {128, 64};
    const rkv_dtype out_dt[NL] = {RKV_DTYPE_BF16, RKV_DTYPE_F32};

    rkv_model_config cfg = RKV_MODEL_CONFIG_INIT;
    snprintf(cfg.name, sizeof cfg.name, "graph-test");
    cfg.n_layers = NL;
    cfg.layers[0] = (rkv_layer_spec){4, 4, 1};
    cfg.layers[1] = (rkv_layer_spec){4, 3, 2};
    cfg.num_sessions = 3;
    cfg.n_q_heads = Hq;
    cfg.n_kv_heads = 2;
    cfg.d_head = 64;
    cfg.tokens_per_frame = 128;
    cfg.dtype = dt;
    rkv_geometry g[NL];
    for (int l = 0; l < NL; l++) OKR(rkv_model_config_layer_geometry(&cfg, l, &g[l]));

    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    rkv_model *gm = NULL, *cm = NULL;
    OKR(rkv_model_create_cuda(&cfg, 0, (void *)st, &gm));
    OKR(rkv_model_create(&cfg, &cm));
    const rkv_backend_ops *gops = NULL, *cops = NULL;
    if (strcmp(rkv_model_backend_name(gm), "cuda") || !rkv_model_layer(gm, 0) ||
        !rkv_layer_backend_handle(rkv_model_layer(gm, 0), &gops, NULL) ||
        !rkv_layer_backend_handle(rkv_model_layer(cm, 0), &cops, NULL) ||
        strcmp(gops->name, "cuda") || cops != rkv_backend_cpu()) {
        printf("FAIL: backend accessors (name %s)\n", rkv_model_backend_name(gm));
        return 1;
    }
    const char *ids[3] = {"a", "b", "c"};
    for (int s = 0; s < 3; s++) {
        int64_t x = -1, y = -1;
        OKR(rkv_model_claim(gm, ids[s], &x));
        OKR(rkv_model_claim(cm, ids[s], &y));
        if (x != s || y != s) {
            printf("FAIL: claim %s gave sessions %lld and %lld\n", ids[s], (long long)x,
                   (long long)y);
            return 1;
        }
    }
    int64_t sess[B] = {2, 0}, clock[B] = {0, 3}; /* clock: the frame about to run */

    const size_t esz = rkv_dtype_size(dt);
    const size_t kv_elems = (size_t)(2 * cfg.n_kv_heads * B * cfg.tokens_per_frame * cfg.d_head);
    frame_calls fc;
    memset(&fc, 0, sizeof fc);
    fc.m = gm;
    fc.dt = dt;
    void *d_q[NL][NP], *d_out[NL][NP], *h_kv[NL][NP], *h_q[NL][NP];
    size_t q_elems[NL];
    for (int l = 0; l < NL; l++) {
        q_elems[l] = (size_t)(B * Hq * Tq[l] * cfg.d_head);
        for (int p = 0; p < NP; p++) {
            fc.kv[l][p] = ct_dmalloc(kv_elems * esz);
            d_q[l][p] = ct_dmalloc(q_elems[l] * esz);
            d_out[l][p] = ct_dmalloc(q_elems[l] * rkv_dtype_size(out_dt[l]));
            h_kv[l][p] = ct_malloc(kv_elems * esz);
            h_q[l][p] = ct_malloc(q_elems[l] * esz);
            rkv_attention_args *a = &fc.args[l][p];
            const rkv_attention_args init = RKV_ATTENTION_ARGS_INIT; /* struct_size set */
            *a = init;
            a->n_q_heads = Hq;
            a->n_queries = Tq[l];
            a->q = d_q[l][p];
            a->q_dtype = dt;
            a->out = d_out[l][p];
            a->out_dtype = out_dt[l];
        }
    }
    const size_t max_q = q_elems[0] > q_elems[1] ? q_elems[0] : q_elems[1];
    float *h_out = (float *)ct_malloc(max_q * 4), *h_ref = (float *)ct_malloc(max_q * 4);
    void *h_raw = ct_malloc(max_q * 4);
    for (int l = 0; l < NL; l++) {
        char plan[256];
        OKR(rkv_model_cuda_attention_describe(gm, l, B, &fc.args[l][0], plan, sizeof plan));
        printf("layer %d attention plan: %s\n", l, plan);
    }

    long checks = 0, fails = 0, att_checks = 0;

    /* ---- begin_frame inside a capture of the model's stream: refused ---- */
    {
        cudaGraph_t dummy = NULL;
        CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
        const rkv_status refused = rkv_model_begin_frame(gm, B, sess, clock);
        char msg[512];
        snprintf(msg, sizeof msg, "%s", rkv_last_error());
        /* (an empty capture: whatever it ends with, the stream leaves capture) */
        if (cudaStreamEndCapture(st, &dummy) == cudaSuccess && dummy) (void)cudaGraphDestroy(dummy);
        (void)cudaGetLastError();
        int64_t last = 0;
        OKR(rkv_model_clock(gm, sess[0], &last));
        checks++;
        if (refused != RKV_ERR_STATE || !strstr(msg, "captur") || last != -1) {
            fails++;
            printf("FAIL: rkv_model_begin_frame during a capture: %s '%s' (clock %lld); "
                   "expected RKV_ERR_STATE naming the capture, nothing changed\n",
                   rkv_status_str(refused), msg, (long long)last);
        }
        /* no batch was set: an upsert has no frame */
        const rkv_status none = rkv_model_frame_upsert(gm, 0, fc.kv[0][0], dt, 0);
        checks++;
        if (none != RKV_ERR_STATE) {
            fails++;
            printf("FAIL: frame_upsert after the refused begin_frame: %s\n", rkv_status_str(none));
        }
    }

    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    double max_err = 0, gpu_ms_total = 0;
    const int reset_at = frames / 2;
    const size_t snap_bytes = rkv_model_snapshot_bytes(gm);
    uint8_t *snap_g = (uint8_t *)ct_malloc(snap_bytes), *snap_c = (uint8_t *)ct_malloc(snap_bytes);
    uint8_t *h_written = (uint8_t *)ct_malloc((size_t)rkv_geometry_total_slots(&g[0]));
    void *h_state = ct_malloc(rkv_geometry_memory_bytes(&g[0]));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    for (int f = 0; f < frames; f++) {
        if (f == reset_at && f > 0) { /* lifecycle, outside the graph */
            OKR(rkv_model_reset(gm, sess[1]));
            OKR(rkv_model_reset(cm, sess[1]));
            clock[1] = 1000 + rkvt_randint(&rng, 7);
        }
        for (int l = 0; l < NL; l++)
            for (int p = 0; p < NP; p++) {
                ct_fill(h_kv[l][p], dt, kv_elems, 1.0f, &rng);
                ct_fill(h_q[l][p], dt, q_elems[l], f % 3 ? 1.0f : 5.0f, &rng);
                CK(cudaMemcpyAsync(fc.kv[l][p], h_kv[l][p], kv_elems * esz,
                                   cudaMemcpyHostToDevice, st));
                CK(cudaMemcpyAsync(d_q[l][p], h_q[l][p], q_elems[l] * esz,
                                   cudaMemcpyHostToDevice, st));
                CK(cudaMemsetAsync(d_out[l][p], 0xff, q_elems[l] * rkv_dtype_size(out_dt[l]), st));
            }
        CK(cudaStreamSynchronize(st)); /* the host buffers are refilled next frame */

        /* ---- the GPU: begin_frame, one replay, end_frame ---- */
        OKR(rkv_model_begin_frame(gm, B, sess, clock));
        if (!exec) {
            CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
            const rkv_status rs = record(&fc);
            CK(cudaStreamEndCapture(st, &graph));
            OKR(rs);
            CK(cudaGraphInstantiate(&exec, graph, 0));
            size_t nodes = 0;
            CK(cudaGraphGetNodes(graph, NULL, &nodes));
            printf("recorded one frame: %zu graph nodes (%d layers x %d passes)\n", nodes, NL, NP);
        }
        CK(cudaEventRecord(e0, st));
        CK(cudaGraphLaunch(exec, st));
        CK(cudaEventRecord(e1, st));
        CK(cudaStreamSynchronize(st));
        float ms = 0;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        gpu_ms_total += ms;
        OKR(rkv_model_end_frame(gm));
        const rkv_status sync = rkv_model_synchronize(gm);
        checks++;
        if (sync != RKV_OK) {
            fails++;
            printf("FAIL frame %d: device check %s: %s\n", f, rkv_status_str(sync),
                   rkv_last_error());
        }

        /* ---- the CPU model: the same frame through the spelled-out calls ---- */
        OKR(rkv_model_begin_frame(cm, B, sess, clock));
        const int compare_att = f < 12 || f % 10 == 0 || f >= frames - 3 ||
                                (f >= reset_at && f < reset_at + 4);
        for (int p = 0; p < NP; p++)
            for (int l = 0; l < NL; l++) {
                rkv_attention_args ca = fc.args[l][p];
                ca.q = h_q[l][p];
                ca.out = h_ref;
                ca.out_dtype = RKV_DTYPE_F32;
                OKR(rkv_model_step(cm, l, B, sess, h_kv[l][p], dt, p == NP - 1, &ca));
                if (!compare_att) continue;
                const size_t ob = q_elems[l] * rkv_dtype_size(out_dt[l]);
                CK(cudaMemcpyAsync(h_raw, d_out[l][p], ob, cudaMemcpyDeviceToHost, st));
                CK(cudaStreamSynchronize(st));
                OKR(rkv_convert(h_raw, out_dt[l], h_out, RKV_DTYPE_F32, q_elems[l]));
                checks++;
                att_checks++;
                fails += compare_out(f, p, l, h_out, h_ref, Hq, Tq[l], cfg.d_head, 1e-2, &max_err);
            }

        /* ---- storage, bits and clocks: exact ---- */
        for (int l = 0; l < NL; l++) {
            ct_layer_download(rkv_model_layer(gm, l), h_state, h_written);
            checks++;
            fails += compare_layer(&g[l], l, f, h_state, h_written, rkv_model_layer(cm, l));
        }
        for (int64_t s = 0; s < 3; s++) {
            int64_t a = -9, b = -9;
            OKR(rkv_model_clock(gm, s, &a));
            OKR(rkv_model_clock(cm, s, &b));
            checks++;
            if (a != b) {
                fails++;
                printf("FAIL frame %d: session %lld clock %lld on the GPU model, %lld on the "
                       "CPU\n", f, (long long)s, (long long)a, (long long)b);
            }
        }
        if (compare_att)
            for (int64_t s = 0; s < 3; s++) {
                OKR(rkv_model_snapshot(gm, s, snap_g, snap_bytes));
                OKR(rkv_model_snapshot(cm, s, snap_c, snap_bytes));
                checks++;
                if (memcmp(snap_g, snap_c, snap_bytes)) {
                    size_t i = 0;
                    while (snap_g[i] == snap_c[i]) i++;
                    fails++;
                    printf("FAIL frame %d: session %lld's snapshot image differs first at byte "
                           "%zu of %zu: gpu 0x%02x, cpu 0x%02x\n",
                           f, (long long)s, i, snap_bytes, snap_g[i], snap_c[i]);
                }
            }
        clock[0]++, clock[1]++; /* the frame committed: SEM 6 next = last + 1 */
        if (fails > 20) break;
    }
    printf("frames %d, checks %ld (attention %ld), fails %ld, max attention err %.2e, "
           "mean graph replay %.3f ms\n",
           frames, checks, att_checks, fails, max_err, gpu_ms_total / frames);
    printf("RESULT test=cuda_graph status=%s frames=%d fails=%ld max_err=%.3e seconds=%.1f\n",
           fails ? "FAIL" : "PASS", frames, fails, max_err, ct_now() - t_start);

    if (exec) CK(cudaGraphExecDestroy(exec));
    if (graph) CK(cudaGraphDestroy(graph));
    rkv_model_destroy(gm);
    rkv_model_destroy(cm);
    for (int l = 0; l < NL; l++)
        for (int p = 0; p < NP; p++) {
            cudaFree(fc.kv[l][p]), cudaFree(d_q[l][p]), cudaFree(d_out[l][p]);
            free(h_kv[l][p]), free(h_q[l][p]);
        }
    free(h_out), free(h_ref), free(h_raw), free(h_written), free(h_state), free(snap_g),
        free(snap_c);
    cudaEventDestroy(e0), cudaEventDestroy(e1);
    CK(cudaStreamDestroy(st));
    return fails ? 1 : 0;
}

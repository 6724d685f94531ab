/*
 * Graph-capture test: the whole schedule of a frame (5 passes x 2 layers,
 * each pass an upsert and an attention per layer, the commit on the 5th, the
 * clocks advanced on the device at the end) is captured ONCE into a CUDA
 * graph, then replayed frame after frame (300 by default) with only the
 * device-side clocks changing, and compared with the CPU backend running the
 * same operations:
 *  - K/V storage and written bits of both layers: exact, every frame;
 *  - the device clocks after each replay: exactly the host's clocks + 1;
 *  - attention outputs: ||gpu - cpu|| / ||cpu|| <= 1e-2 (bf16) on sampled
 *    frames (the first 12, every 10th, around the reset, the last 3);
 *  - mid-run, one session is reset (outside the graph) and restarted at a
 *    new clock written to device memory: the graph must follow it.
 * Layers: local (RF = RB = 4, PD 1) and global-like (RF 4, RB 3, PD 2), S 3,
 * H 2, Hq 4, D 64, T 128, bf16; B = 2 rows per call; 64 queries per row.
 *
 * Usage: test_cuda_graph [--frames N] [--seed N]
 * Exit: 0 pass, 1 a check failed, 2 setup error, 77 no GPU (skipped).
 */
#include "cuda_test_util.h"

#define NL 2
#define NP 5
#define B 2

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
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (!ct_have_gpu("test_cuda_graph")) return CT_SKIP;
    const double t_start = ct_now();
    ct_rng rng = {seed};
    const int64_t Hq = 4, Tq = 64;
    const rkv_dtype dt = RKV_DTYPE_BF16;
    rkv_geometry g[NL] = {{3, 2, 4, 4, 64, 128, 1, dt}, {3, 2, 4, 3, 64, 128, 2, dt}};
    rkv_layer *cpu[NL];
    rkv_cuda_layer *gpu[NL];
    for (int l = 0; l < NL; l++) {
        OKR(rkv_layer_create(&g[l], &cpu[l]));
        OKR(rkv_cuda_layer_create(&g[l], 0, &gpu[l]));
    }
    cudaStream_t st;
    CK(cudaStreamCreate(&st)); /* blocking: ordered after the legacy-stream copies and memsets */

    const size_t esz = rkv_dtype_size(dt);
    const size_t kv_elems = (size_t)(2 * g[0].n_kv_heads * B * g[0].tokens_per_frame * g[0].d_head);
    const size_t q_elems = (size_t)(B * Hq * Tq * g[0].d_head);
    void *d_kv[NL][NP], *d_q[NL][NP], *d_out[NL][NP], *h_kv[NL][NP], *h_q[NL][NP];
    float *h_out = (float *)ct_malloc(q_elems * 4), *h_ref = (float *)ct_malloc(q_elems * 4);
    void *h_raw = ct_malloc(q_elems * esz);
    for (int l = 0; l < NL; l++)
        for (int p = 0; p < NP; p++) {
            d_kv[l][p] = ct_dmalloc(kv_elems * esz);
            d_q[l][p] = ct_dmalloc(q_elems * esz);
            d_out[l][p] = ct_dmalloc(q_elems * esz);
            h_kv[l][p] = ct_malloc(kv_elems * esz);
            h_q[l][p] = ct_malloc(q_elems * esz);
        }
    int64_t *d_fp = (int64_t *)ct_dmalloc(B * 8), *d_sess = (int64_t *)ct_dmalloc(B * 8);
    int64_t sess[B] = {2, 0}, clock[B] = {0, 3}; /* clock = frame about to run */
    CK(cudaMemcpy(d_sess, sess, sizeof sess, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d_fp, clock, sizeof clock, cudaMemcpyHostToDevice));

    rkv_cuda_attention_args ga[NL][NP];
    size_t ws_bytes = 0;
    for (int l = 0; l < NL; l++)
        for (int p = 0; p < NP; p++) {
            rkv_cuda_attention_args *a = &ga[l][p];
            memset(a, 0, sizeof *a);
            a->batch = B;
            a->n_q_heads = Hq;
            a->n_queries = Tq;
            a->q = d_q[l][p];
            a->q_dtype = dt;
            a->out = d_out[l][p];
            a->out_dtype = dt;
            a->session_idx = d_sess;
            a->frame_pos = d_fp;
            size_t w = rkv_cuda_attention_workspace_bytes(gpu[l], a);
            if (w > ws_bytes) ws_bytes = w;
        }
    void *d_ws = ws_bytes ? ct_dmalloc(ws_bytes) : NULL;
    char plan[256];
    for (int l = 0; l < NL; l++)
        for (int p = 0; p < NP; p++) {
            ga[l][p].workspace = d_ws; /* one stream: the calls never overlap */
            ga[l][p].workspace_bytes = ws_bytes;
        }
    OKR(rkv_cuda_attention_describe(gpu[0], &ga[0][0], plan, sizeof plan));
    printf("attention plan: %s\n", plan);

    /* ---- capture one frame ---- */
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
    for (int p = 0; p < NP; p++)
        for (int l = 0; l < NL; l++) {
            OKR(rkv_cuda_layer_upsert(gpu[l], d_kv[l][p], dt, B, d_fp, d_sess, p == NP - 1, NULL,
                                      (void *)st));
            OKR(rkv_cuda_layer_attend(gpu[l], &ga[l][p], (void *)st));
        }
    OKR(rkv_cuda_clock_advance(d_fp, B, 1, (void *)st));
    CK(cudaStreamEndCapture(st, &graph));
    CK(cudaGraphInstantiate(&exec, graph, 0));
    size_t nodes = 0;
    CK(cudaGraphGetNodes(graph, NULL, &nodes));
    printf("captured %zu kernel nodes for one frame\n", nodes);

    long checks = 0, fails = 0, att_checks = 0;
    double max_err = 0, gpu_ms_total = 0;
    const int reset_at = frames / 2;
    uint8_t *h_written = (uint8_t *)ct_malloc((size_t)rkv_geometry_total_slots(&g[0]));
    void *h_state = ct_malloc(rkv_geometry_memory_bytes(&g[0]));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    for (int f = 0; f < frames; f++) {
        if (f == reset_at) { /* lifecycle, outside the graph */
            for (int l = 0; l < NL; l++) {
                OKR(rkv_layer_reset(cpu[l], sess[1]));
                OKR(rkv_cuda_layer_reset(gpu[l], sess[1], (void *)st));
            }
            clock[1] = 1000 + ct_randint(&rng, 7);
            CK(cudaStreamSynchronize(st));
            CK(cudaMemcpy(d_fp, clock, sizeof clock, cudaMemcpyHostToDevice));
        }
        /* the device clocks must be the host's (declared frame) */
        int64_t dev_clock[B];
        CK(cudaMemcpy(dev_clock, d_fp, sizeof dev_clock, cudaMemcpyDeviceToHost));
        checks++;
        if (dev_clock[0] != clock[0] || dev_clock[1] != clock[1]) {
            fails++;
            printf("FAIL frame %d: device clocks %lld,%lld, host %lld,%lld\n", f,
                   (long long)dev_clock[0], (long long)dev_clock[1], (long long)clock[0],
                   (long long)clock[1]);
        }
        for (int l = 0; l < NL; l++)
            for (int p = 0; p < NP; p++) {
                ct_fill(h_kv[l][p], dt, kv_elems, 1.0f, &rng);
                ct_fill(h_q[l][p], dt, q_elems, f % 3 ? 1.0f : 5.0f, &rng);
                CK(cudaMemcpy(d_kv[l][p], h_kv[l][p], kv_elems * esz, cudaMemcpyHostToDevice));
                CK(cudaMemcpy(d_q[l][p], h_q[l][p], q_elems * esz, cudaMemcpyHostToDevice));
                CK(cudaMemset(d_out[l][p], 0xff, q_elems * esz));
            }
        CK(cudaEventRecord(e0, st));
        CK(cudaGraphLaunch(exec, st));
        CK(cudaEventRecord(e1, st));
        CK(cudaStreamSynchronize(st));
        float ms = 0;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        gpu_ms_total += ms;
        for (int l = 0; l < NL; l++) {
            rkv_status chk = rkv_cuda_layer_check(gpu[l], (void *)st);
            checks++;
            if (chk != RKV_OK) {
                fails++;
                printf("FAIL frame %d layer %d: device check %s: %s\n", f, l, rkv_status_str(chk),
                       rkv_last_error());
            }
        }

        const int compare_att = f < 12 || f % 10 == 0 || f >= frames - 3 ||
                                (f >= reset_at && f < reset_at + 4);
        for (int p = 0; p < NP; p++)
            for (int l = 0; l < NL; l++) {
                OKR(rkv_layer_upsert(cpu[l], h_kv[l][p], dt, B, clock, sess, p == NP - 1, NULL));
                if (!compare_att) continue;
                rkv_attention_args ca;
                memset(&ca, 0, sizeof ca);
                ca.batch = B;
                ca.n_q_heads = Hq;
                ca.n_queries = Tq;
                ca.q = h_q[l][p];
                ca.q_dtype = dt;
                ca.out = h_ref;
                ca.out_dtype = RKV_DTYPE_F32;
                ca.session_idx = sess;
                ca.frame_pos = clock;
                OKR(rkv_layer_attend(cpu[l], &ca));
                CK(cudaMemcpy(h_raw, d_out[l][p], q_elems * esz, cudaMemcpyDeviceToHost));
                OKR(rkv_convert(h_raw, dt, h_out, RKV_DTYPE_F32, q_elems));
                const double err = ct_rel_err(h_out, h_ref, q_elems);
                if (err > max_err) max_err = err;
                checks++;
                att_checks++;
                if (!(err <= 1e-2)) {
                    fails++;
                    printf("FAIL frame %d pass %d layer %d: attention rel err %.3e\n", f, p, l, err);
                }
            }
        for (int l = 0; l < NL; l++) {
            OKR(rkv_cuda_layer_download(gpu[l], h_state, h_written));
            checks++;
            if (memcmp(h_state, rkv_layer_kv(cpu[l]), rkv_geometry_memory_bytes(&g[l])) ||
                memcmp(h_written, rkv_layer_written(cpu[l]),
                       (size_t)rkv_geometry_total_slots(&g[l]))) {
                fails++;
                printf("FAIL frame %d layer %d: state differs from the CPU backend\n", f, l);
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

    CK(cudaGraphExecDestroy(exec));
    CK(cudaGraphDestroy(graph));
    for (int l = 0; l < NL; l++) {
        rkv_layer_destroy(cpu[l]);
        rkv_cuda_layer_destroy(gpu[l]);
        for (int p = 0; p < NP; p++) {
            cudaFree(d_kv[l][p]), cudaFree(d_q[l][p]), cudaFree(d_out[l][p]);
            free(h_kv[l][p]), free(h_q[l][p]);
        }
    }
    free(h_out), free(h_ref), free(h_raw), free(h_written), free(h_state);
    cudaFree(d_fp), cudaFree(d_sess), cudaFree(d_ws);
    return fails ? 1 : 0;
}

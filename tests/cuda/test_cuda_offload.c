/* The CUDA offload path (issue 13), on the GPU: one 720P session (bf16, its
 * rings filled) of a CUDA model
 *  - offloaded into pinned host memory (rkv_model_host_alloc) and paged back
 *    in, then into pageable memory and back: bit-exact (the in-memory
 *    snapshot image, which holds every span, bit and the clock, equal to the
 *    one taken before), the clock continuing;
 *  - a damaged image refused (RKV_ERR_FORMAT), the model unchanged;
 *  - its session regions in device memory of GPU 0, inside the layers'
 *    storage;
 *  - exported into a second CUDA model (reserve, plain copy of the regions,
 *    digests of both ends, import): bit-exact.
 * Prints RESULT lines with the times and rates (pinned vs pageable
 * offload and page-in, device-to-device export). Exit 0 passed, 1 a
 * mismatch, 2 a CUDA or library failure, 77 no GPU (skipped).
 * scripts/gpu_check.sh runs it (step cuda_offload).
 *
 * Usage: test_cuda_offload [--small]
 *   --small: a small session (2 layers, local and global-like, D 64, T 128)
 *   instead of the 720P one: the CPU executor's size (tests/cuda_exec). */
#include "cuda_test_util.h"

#include "ringkv_backend.h"

#define FAILX(...)                                                                       \
    do {                                                                                 \
        fprintf(stderr, "test_cuda_offload: FAIL: " __VA_ARGS__);                        \
        fputc('\n', stderr);                                                             \
        exit(1);                                                                         \
    } while (0)

/* The session's in-memory snapshot image (the snapshot file's image: a header with
 * the clock and the session's identity, then its spans and written bits). */
static unsigned char *image_of(rkv_model *m, int64_t s, size_t *n) {
    *n = rkv_model_snapshot_bytes(m);
    unsigned char *p = ct_malloc(*n);
    OKR(rkv_model_snapshot(m, s, p, *n));
    return p;
}

static void same_as(rkv_model *m, int64_t s, const unsigned char *ref, size_t n, const char *what) {
    size_t k;
    unsigned char *now = image_of(m, s, &k);
    if (k != n || memcmp(now, ref, n)) {
        size_t i = 0;
        while (i < n && now[i] == ref[i]) i++;
        FAILX("%s: the session differs from before at byte %zu of %zu", what, i, n);
    }
    free(now);
}

/* Offloads session s into buf and pages it back in; returns the two times. */
static void round_trip(rkv_model *m, int64_t *s, void *buf, size_t n, double *t_out,
                       double *t_in) {
    size_t got = 0;
    double t = ct_now();
    OKR(rkv_model_offload(m, *s, buf, n, &got));
    *t_out = ct_now() - t;
    if (got != n) FAILX("offload wrote %zu bytes; expected %zu", got, n);
    t = ct_now();
    OKR(rkv_model_page_in(m, buf, n, s));
    *t_in = ct_now() - t;
}

int main(int argc, char **argv) {
    const int small = argc == 2 && !strcmp(argv[1], "--small");
    if (argc > 2 || (argc == 2 && !small)) {
        fprintf(stderr, "usage: %s [--small]\n", argv[0]);
        return 2;
    }
    if (rkv_cuda_device_count() < 1) {
        printf("test_cuda_offload: no CUDA device: skipped\n");
        return CT_SKIP;
    }
    rkv_model_config cfg = RKV_MODEL_CONFIG_INIT;
    if (small) {
        snprintf(cfg.name, sizeof cfg.name, "offload-small");
        cfg.n_layers = 2;
        cfg.layers[0] = (rkv_layer_spec){4, 4, 1};
        cfg.layers[1] = (rkv_layer_spec){4, 3, 2};
        cfg.n_q_heads = 4;
        cfg.n_kv_heads = 2;
        cfg.d_head = 64;
        cfg.tokens_per_frame = 128;
        cfg.dtype = RKV_DTYPE_BF16;
    } else {
        OKR(rkv_model_preset("waypoint-1.5-720p", 0, &cfg));
    }
    cfg.num_sessions = 2;
    rkv_model *m = NULL, *m2 = NULL;
    OKR(rkv_model_create_cuda(&cfg, 0, NULL, &m));
    int64_t s = -1;
    OKR(rkv_model_claim(m, "offload", &s));
    /* fill the rings: 17 frames of the commit pass (more than every ring of
     * either size holds) */
    const size_t kvn = (size_t)(2 * cfg.n_kv_heads * cfg.tokens_per_frame * cfg.d_head);
    uint16_t *kv = ct_malloc(kvn * 2);
    void *dkv = NULL;
    CK(cudaMalloc(&dkv, kvn * 2));
    for (int64_t f = 0; f < 17; f++) {
        for (size_t i = 0; i < kvn; i++) kv[i] = (uint16_t)(0x3c00 + ((i * 131 + (size_t)f * 7) & 0x3ff));
        CK(cudaMemcpy(dkv, kv, kvn * 2, cudaMemcpyHostToDevice));
        OKR(rkv_model_begin_frame(m, 1, &s, &f));
        for (int64_t l = 0; l < cfg.n_layers; l++)
            OKR(rkv_model_frame_upsert(m, l, dkv, RKV_DTYPE_BF16, 1));
    }
    OKR(rkv_model_synchronize(m));
    size_t ref_n;
    unsigned char *ref = image_of(m, s, &ref_n);

    /* pinned, then pageable */
    size_t n = 0;
    OKR(rkv_model_offload(m, s, NULL, 0, &n));
    void *pinned = NULL;
    OKR(rkv_model_host_alloc(m, n, &pinned));
    void *pageable = ct_malloc(n);
    double po = 0, pi = 0, qo = 0, qi = 0;
    round_trip(m, &s, pinned, n, &po, &pi); /* warm-up of both paths */
    round_trip(m, &s, pageable, n, &qo, &qi);
    round_trip(m, &s, pinned, n, &po, &pi);
    same_as(m, s, ref, ref_n, "after offload and page-in through pinned memory");
    round_trip(m, &s, pageable, n, &qo, &qi);
    same_as(m, s, ref, ref_n, "after offload and page-in through pageable memory");
    int64_t clock = -9, next = 17;
    OKR(rkv_model_clock(m, s, &clock));
    if (clock != 16) FAILX("clock %lld after the page-ins; expected 16", (long long)clock);
    OKR(rkv_model_begin_frame(m, 1, &s, &next)); /* the next frame is 17 */
    OKR(rkv_model_abandon_frame(m));

    /* a damaged image */
    size_t got = 0;
    OKR(rkv_model_offload(m, s, pinned, n, &got));
    ((unsigned char *)pinned)[n - 4096] ^= 0x20;
    int64_t bad = -1;
    rkv_status st = rkv_model_page_in(m, pinned, n, &bad);
    if (st != RKV_ERR_FORMAT) FAILX("a damaged image paged in: %s", rkv_status_str(st));
    if (rkv_model_offloaded_count(m) != 1) FAILX("the reservation went with a damaged image");
    ((unsigned char *)pinned)[n - 4096] ^= 0x20;
    OKR(rkv_model_page_in(m, pinned, n, &s));
    same_as(m, s, ref, ref_n, "after refusing a damaged image");

    /* regions: device memory of GPU 0, inside the layers' storage */
    const size_t nr = rkv_model_session_region_count(m);
    rkv_session_region *rg = ct_malloc(nr * sizeof *rg);
    size_t count = 0;
    OKR(rkv_model_session_regions(m, s, rg, nr, &count));
    for (size_t i = 0; i < count; i++) {
        const rkv_layer *l = rkv_model_layer(m, rg[i].layer);
        const uint8_t *lo = rg[i].part == RKV_SPAN_WRITTEN ? rkv_layer_written(l)
                                                            : (const uint8_t *)rkv_layer_kv(l);
        const size_t span = rg[i].part == RKV_SPAN_WRITTEN
                                ? (size_t)rkv_geometry_total_slots(rkv_layer_geometry(l))
                                : rkv_geometry_memory_bytes(rkv_layer_geometry(l));
        const uint8_t *p = rg[i].ptr;
        if (rg[i].device != 0 || p < lo || p + rg[i].bytes > lo + span)
            FAILX("region %zu (layer %lld part %d head %lld) is not in GPU 0's layer storage",
                  i, (long long)rg[i].layer, rg[i].part, (long long)rg[i].head);
    }

    /* export into a second CUDA model */
    OKR(rkv_model_create_cuda(&cfg, 0, NULL, &m2));
    const size_t mb = rkv_model_session_meta_bytes(m);
    uint8_t *meta = ct_malloc(mb);
    OKR(rkv_model_session_export_meta(m, s, meta, mb));
    int64_t d = -1;
    uint64_t d0 = 0, d1 = 1;
    double t = ct_now();
    OKR(rkv_model_import_reserve(m2, meta, mb, &d));
    OKR(rkv_model_transfer_session(m, s, m2, d));
    OKR(rkv_model_session_import(m2, d, meta, mb));
    const double t_export = ct_now() - t;
    OKR(rkv_model_session_digest(m, s, &d0));
    OKR(rkv_model_session_digest(m2, d, &d1));
    if (d0 != d1) FAILX("the digests of the two ends differ: %016llx, %016llx",
                        (unsigned long long)d0, (unsigned long long)d1);
    same_as(m2, d, ref, ref_n, "after the export into a second model");

    uint64_t data = 0;
    for (size_t i = 0; i < count; i++) data += rg[i].bytes;
    printf("RESULT cuda_offload_pinned_gbps %.2f (%.1f ms for %.1f MiB)\n", data / po / 1e9,
           po * 1e3, data / 1048576.0);
    printf("RESULT cuda_page_in_pinned_gbps %.2f (%.1f ms)\n", data / pi / 1e9, pi * 1e3);
    printf("RESULT cuda_offload_pageable_gbps %.2f (%.1f ms)\n", data / qo / 1e9, qo * 1e3);
    printf("RESULT cuda_page_in_pageable_gbps %.2f (%.1f ms)\n", data / qi / 1e9, qi * 1e3);
    printf("RESULT cuda_export_import_gbps %.2f (%.1f ms, through a host buffer)\n",
           data / t_export / 1e9, t_export * 1e3);
    printf("test_cuda_offload: passed (%s session, %llu bytes of regions)\n",
           small ? "small" : "720P", (unsigned long long)data);
    free(meta), free(rg), free(ref), free(kv), free(pageable);
    rkv_model_host_free(m, pinned);
    CK(cudaFree(dkv));
    rkv_model_destroy(m2);
    rkv_model_destroy(m);
    return 0;
}

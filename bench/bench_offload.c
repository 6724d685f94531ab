/* `ringkv bench` rows of sessions that leave and move (issue 13): one 360P
 * session (bf16, its rings filled) offloaded into a host buffer, paged back
 * in, and exported into a second model through its regions (reserve, plain
 * copy, import), each against memcpy of the same bytes in the same pieces
 * between the same addresses (the session's regions and the image's data
 * section, or the two models' regions), timed in turns (ABAB, best of
 * each), as the upsert rows. Bytes: the session's K/V and written bits. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"
#include "ringkv.h"

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void ok(rkv_status st, const char *what) {
    if (st != RKV_OK) {
        fprintf(stderr, "ringkv bench: %s: %s\n", what, rkv_last_error());
        exit(1);
    }
}

/* Seconds of copying every region of a session from (to_regions) or to
 * the data section `data` of its image, piece by piece: the same bytes
 * between the same addresses as page-in (or offload) copies them. */
static double time_pieces(const rkv_session_region *rg, size_t n, uint8_t *data, int to_regions) {
    double t = now_s();
    size_t off = 0;
    for (size_t i = 0; i < n; off += rg[i].bytes, i++)
        if (to_regions) memcpy(rg[i].ptr, data + off, rg[i].bytes);
        else memcpy(data + off, rg[i].ptr, rg[i].bytes);
    return now_s() - t;
}

/* Seconds of copying every region of one session into another's. */
static double time_regions(const rkv_session_region *from, const rkv_session_region *to,
                           size_t n) {
    double t = now_s();
    for (size_t i = 0; i < n; i++) memcpy(to[i].ptr, from[i].ptr, from[i].bytes);
    return now_s() - t;
}

static void emit(const bench_opts *o, const char *name, double bytes, double best,
                 double best_memcpy) {
    cJSON *p = cJSON_CreateObject();
    cJSON_AddStringToObject(p, "dtype", "bf16");
    cJSON_AddStringToObject(p, "preset", "waypoint-1.5-360p");
    cJSON_AddNumberToObject(p, "bytes", bytes);
    bench_emit(o, name, bytes / best / 1e9, "GB/s", p, bytes / best_memcpy / 1e9,
               "memcpy of the same pieces between the same addresses");
}

void bench_offload(const bench_opts *o) {
    rkv_model_config cfg = RKV_MODEL_CONFIG_INIT;
    ok(rkv_model_preset("waypoint-1.5-360p", 0, &cfg), "preset");
    rkv_model *src, *dst;
    ok(rkv_model_create(&cfg, &src), "model");
    ok(rkv_model_create(&cfg, &dst), "second model");
    int64_t s;
    ok(rkv_model_claim(src, "bench", &s), "claim");
    /* fill every ring: 20 frames of the commit pass, varied tokens */
    const size_t kvn = 2 * 16 * 128 * 64;
    uint16_t *kv = malloc(kvn * 2);
    if (!kv) ok(RKV_ERR_NO_MEMORY, "tokens");
    for (int64_t f = 0; f < 20; f++) {
        for (size_t i = 0; i < kvn; i++) kv[i] = (uint16_t)(0x3c00 + ((i * 31 + (size_t)f) & 0xff));
        ok(rkv_model_begin_frame(src, 1, &s, &f), "begin_frame");
        for (int64_t layer = 0; layer < cfg.n_layers; layer++)
            ok(rkv_model_upsert(src, layer, 1, &s, kv, RKV_DTYPE_BF16, 1), "upsert");
    }
    free(kv);
    size_t n = 0;
    ok(rkv_model_offload(src, s, NULL, 0, &n), "image size");
    void *img = NULL;
    ok(rkv_model_host_alloc(src, n, &img), "image buffer");
    memset(img, 1, n);
    const size_t mb = rkv_model_session_meta_bytes(src), nr = rkv_model_session_region_count(src);
    uint8_t *meta = malloc(mb);
    rkv_session_region *rs = calloc(nr, sizeof *rs), *rd = calloc(nr, sizeof *rd);
    if (!meta || !rs || !rd) ok(RKV_ERR_NO_MEMORY, "regions");
    uint64_t data_bytes = 0;
    double off = 1e30, in = 1e30, mc_out = 1e30, mc_in = 1e30, ei = 1e30, mc_ei = 1e30;
    for (int rep = 0; rep < (o->quick ? 3 : 6); rep++) {
        size_t count = 0;
        ok(rkv_model_session_regions(src, s, rs, nr, &count), "regions");
        data_bytes = 0;
        for (size_t i = 0; i < nr; i++) data_bytes += rs[i].bytes;
        uint8_t *data = (uint8_t *)img + (n - data_bytes);
        /* A: offload, then page-in; B: the same pieces copied out and in */
        double t = now_s();
        ok(rkv_model_offload(src, s, img, n, &n), "offload");
        t = now_s() - t;
        if (t < off) off = t;
        t = now_s();
        ok(rkv_model_page_in(src, img, n, &s), "page_in");
        t = now_s() - t;
        if (t < in) in = t;
        ok(rkv_model_session_regions(src, s, rs, nr, &count), "regions");
        if ((t = time_pieces(rs, nr, data, 0)) < mc_out) mc_out = t;
        if ((t = time_pieces(rs, nr, data, 1)) < mc_in) mc_in = t;
        /* export / import through the regions into the second model */
        ok(rkv_model_session_export_meta(src, s, meta, mb), "export_meta");
        int64_t d;
        t = now_s();
        ok(rkv_model_import_reserve(dst, meta, mb, &d), "import_reserve");
        ok(rkv_model_transfer_session(src, s, dst, d), "transfer");
        ok(rkv_model_session_import(dst, d, meta, mb), "import");
        t = now_s() - t;
        if (t < ei) ei = t;
        ok(rkv_model_session_regions(dst, d, rd, nr, &count), "regions");
        if ((t = time_regions(rs, rd, nr)) < mc_ei) mc_ei = t;
        ok(rkv_model_release(dst, d), "release");
    }
    emit(o, "offload_gbps", (double)data_bytes, off, mc_out);
    emit(o, "page_in_gbps", (double)data_bytes, in, mc_in);
    emit(o, "export_import_gbps", (double)data_bytes, ei, mc_ei);
    free(meta), free(rs), free(rd);
    rkv_model_host_free(src, img);
    rkv_model_destroy(dst);
    rkv_model_destroy(src);
}

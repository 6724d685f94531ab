/* libFuzzer target: the snapshot-file loader (rkv_model_restore,
 * rkv_snapshot_inspect on an image in memory) on arbitrary bytes.
 *
 * Checked for every input: no crash or sanitizer report; a refused load
 * leaves the whole model byte-identical (K/V, written bits, clocks); a load
 * that succeeds implies inspect succeeds, installs the image's clock, and
 * saving the loaded session and loading that image into another session
 * gives identical sessions.
 *
 * Random bytes rarely get both XXH3-64 checksums right, so when the first
 * input byte is odd the target "reseals" the rest first (recomputes
 * data_xxh3 and header_xxh3 where the header has their "key":"digits"
 * form, tests/snapshot_edit.h): the fuzzer then explores the JSON,
 * metadata, tensor table and written-bit validation behind the checksums.
 * Every refusal's message must be printable ASCII (file bytes escaped).
 * Seeds: valid images and headers damaged behind their checksums from
 * fuzz/gen_seeds.c (scripts/fuzz.sh makes them). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ringkv.h"
#include "snapshot_edit.h"

/* The geometry gen_seeds.c writes its first seeds for. */
static const rkv_layer_spec SPECS[2] = {{3, 2, 2}, {2, 2, 1}};

static rkv_model *M;
static uint8_t *base_snap, *cur_snap, *other_snap;
static size_t snap_bytes;

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz_snapshot: %s:%d: check failed: %s\n  ", __FILE__, __LINE__,      \
                    #cond);                                                                        \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fprintf(stderr, "\n  last error: %s\n", rkv_last_error());                           \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

static void setup(void) {
    rkv_model_config cfg = RKV_MODEL_CONFIG_INIT;
    snprintf(cfg.name, sizeof cfg.name, "fuzz");
    cfg.n_layers = 2;
    cfg.layers[0] = SPECS[0];
    cfg.layers[1] = SPECS[1];
    cfg.num_sessions = 2;
    cfg.n_q_heads = 2;
    cfg.n_kv_heads = 1;
    cfg.d_head = 2;
    cfg.tokens_per_frame = 128;
    cfg.dtype = RKV_DTYPE_F32;
    if (rkv_model_create(&cfg, &M) != RKV_OK) abort();
    int64_t s0, s1;
    if (rkv_model_claim(M, "target", &s0) || rkv_model_claim(M, "check", &s1)) abort();
    /* give the target some history so that "unchanged" means something */
    float kv[2 * 128 * 2];
    for (int64_t f = 0; f < 5; f++) {
        for (size_t i = 0; i < sizeof kv / sizeof kv[0]; i++) kv[i] = (float)(f * 1000 + (int64_t)i);
        if (rkv_model_begin_frame(M, 1, &s0, &f)) abort();
        for (int64_t l = 0; l < 2; l++)
            if (rkv_model_upsert(M, l, NULL, 1, &s0, kv, RKV_DTYPE_F32, 1)) abort();
    }
    snap_bytes = rkv_model_snapshot_bytes(M);
    base_snap = malloc(snap_bytes);
    cur_snap = malloc(snap_bytes);
    other_snap = malloc(snap_bytes);
    if (rkv_model_snapshot(M, 0, base_snap, snap_bytes)) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!M) setup();
    if (size < 1) return 0;
    const size_t n = size - 1;
    uint8_t *img = malloc(n ? n : 1);
    memcpy(img, data + 1, n);
    if (data[0] & 1) tsnap_reseal(img, n);

    rkv_snapshot_info info = RKV_SNAPSHOT_INFO_INIT;
    const rkv_status ist = rkv_snapshot_inspect(NULL, img, n, &info);
    const rkv_status st = rkv_model_restore(M, 0, img, n);
    if (st != RKV_OK) {
        CHECK(st == RKV_ERR_FORMAT || st == RKV_ERR_NO_MEMORY, "load returned %s",
              rkv_status_str(st));
        CHECK(rkv_last_error()[0] != '\0', "a refusal without a message");
        for (const unsigned char *c = (const unsigned char *)rkv_last_error(); *c; c++)
            CHECK(*c >= 0x20 && *c < 0x7f, "a message holds byte 0x%02x", *c);
        if (rkv_model_snapshot(M, 0, cur_snap, snap_bytes)) abort();
        CHECK(!memcmp(cur_snap, base_snap, snap_bytes), "a refused load changed the session");
        int64_t c;
        CHECK(rkv_model_clock(M, 0, &c) == RKV_OK && c == 4, "a refused load changed the clock");
    } else {
        CHECK(ist == RKV_OK, "load accepted what inspect refused (%s)", rkv_status_str(ist));
        int64_t c;
        CHECK(rkv_model_clock(M, 0, &c) == RKV_OK && c == info.last_committed,
              "clock %lld after load, the image says %lld", (long long)c,
              (long long)info.last_committed);
        size_t len = 0;
        CHECK(rkv_model_save_session_mem(M, 0, NULL, 0, &len) == RKV_OK, "size of a save");
        uint8_t *again = malloc(len);
        CHECK(rkv_model_save_session_mem(M, 0, again, len, &len) == RKV_OK, "save");
        CHECK(rkv_model_restore(M, 1, again, len) == RKV_OK, "reload of a save");
        free(again);
        if (rkv_model_snapshot(M, 0, cur_snap, snap_bytes) ||
            rkv_model_snapshot(M, 1, other_snap, snap_bytes))
            abort();
        /* the same state: data sections (the images' ends; their headers
         * name the two sessions) and clocks */
        const size_t data = (size_t)info.data_bytes;
        int64_t c1;
        CHECK(data <= snap_bytes && !memcmp(cur_snap + snap_bytes - data,
                                            other_snap + snap_bytes - data, data),
              "save/load of a loaded session differs");
        CHECK(rkv_model_clock(M, 1, &c1) == RKV_OK && c1 == c, "clock %lld after the reload",
              (long long)c1);
        /* back to the baseline */
        if (rkv_model_restore(M, 0, base_snap, snap_bytes)) abort();
    }
    free(img);
    return 0;
}

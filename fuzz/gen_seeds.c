/* Writes seed inputs for fuzz_snapshot into DIR: valid snapshot images (each
 * prefixed with the target's mode byte, 0 = as is, 1 = reseal) of the
 * fuzz target's geometry at a few clocks, and of other geometries (which the
 * target must refuse as wrong geometry); and images of the fuzz geometry
 * whose header was edited behind correct checksums (tests/snapshot_edit.h)
 * into what the loader must refuse: keys twice at each level, reals and
 * non-canonical integers, ESC sequences in texts, JSON-invalid numbers.
 * Usage: gen_seeds DIR */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ringkv.h"
#include "snapshot_edit.h"

static int write_seed(const char *dir, const char *name, int mode, const void *img, size_t n) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s-%d", dir, name, mode);
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    unsigned char m = (unsigned char)mode;
    int ok = fwrite(&m, 1, 1, f) == 1 && fwrite(img, 1, n, f) == n;
    return fclose(f) == 0 && ok ? 0 : -1;
}

/* Headers damaged behind their checksums, from a valid image of the fuzz
 * geometry at 23 frames (layer 0: C 512, H 1, D 2; last_committed 22). */
static const struct {
    const char *name, *from, *to;
    int valid; /* the loader accepts it (all others must be refused) */
} EDITS[] = {
    {"dup-clock", "\"last_committed\":\"22\"", "\"last_committed\":\"23\",\"last_committed\":\"7\"", 0},
    {"dup-meta", "\"__metadata__\":{", "\"__metadata__\":{\"format\":\"ringkv-snapshot\",", 0},
    {"dup-top", "\"layer.0.v\":", "\"__metadata__\":{},\"layer.0.v\":", 0},
    {"dup-tensor", "\"layer.0.k\":{", "\"layer.0.k\":{\"shape\":[1,512,2],", 0},
    {"dup-nested", "\"layer.1.k\":{", "\"layer.1.k\":{\"x\":[{\"a\":1,\"a\":1}],", 0},
    {"real-shape", "\"shape\":[1,512,2]", "\"shape\":[1.0, 512, 2]", 0},
    {"exp-offset", "\"data_offsets\":[0,4096]", "\"data_offsets\":[0,4.096e3]", 0},
    {"zero-shape", "\"shape\":[1,512,2]", "\"shape\":[01,512,2]", 0},
    {"plus-clock", "\"last_committed\":\"22\"", "\"last_committed\":\"+22\"", 0},
    {"zero-clock", "\"last_committed\":\"22\"", "\"last_committed\":\"022\"", 0},
    {"blank-list", "\"ring_frames\":\"3,2\"", "\"ring_frames\":\"3, 2\"", 0},
    {"exp-size", "\"d_head\":\"2\"", "\"d_head\":\"2e0\"", 0},
    {"huge-clock", "\"last_committed\":\"22\"", "\"last_committed\":\"9223372036854775808\"", 0},
    {"esc-id", "\"request_id\":\"seed\"", "\"request_id\":\"\\u001b[2J\"", 0},
    {"esc-id-hex", "\"request_id\":\"seed\"", "\"request_id_hex\":\"1b5b324a\"", 1},
    {"esc-model", "\"model\":\"fuzz\"", "\"model\":\"\\u001b[2J\"", 0},
    {"esc-version", "\"format_version\":\"1\"", "\"format_version\":\"\\u001b[2J\"", 0},
    {"esc-tensor", "\"layer.1.v\"", "\"layer.1.v\\u001b[2J\"", 0},
};

static int malformed_seeds(const char *dir, const uint8_t *img, size_t n) {
    for (size_t i = 0; i < sizeof EDITS / sizeof EDITS[0]; i++) {
        size_t m = 0;
        uint8_t *e = tsnap_edit(img, n, EDITS[i].from, EDITS[i].to, 1, &m);
        if (!e) {
            fprintf(stderr, "gen_seeds: %s: the header has no '%s'\n", EDITS[i].name,
                    EDITS[i].from);
            return -1;
        }
        const int valid = rkv_snapshot_inspect(NULL, e, m, NULL) == RKV_OK;
        if (valid != EDITS[i].valid)
            fprintf(stderr, "gen_seeds: %s: expected %s, got %s\n", EDITS[i].name,
                    EDITS[i].valid ? "a valid image" : "a refusal",
                    valid ? "a valid image" : rkv_last_error());
        int rc = valid != EDITS[i].valid || write_seed(dir, EDITS[i].name, 0, e, m) ||
                 write_seed(dir, EDITS[i].name, 1, e, m);
        free(e);
        if (rc) return -1;
    }
    return 0;
}

static int seeds_for(const char *dir, const char *tag, rkv_model_config *cfg, int frames) {
    rkv_model *m;
    int64_t s;
    if (rkv_model_create(cfg, &m) || rkv_model_claim(m, "seed", &s)) return -1;
    const size_t fr = (size_t)(2 * cfg->n_kv_heads * cfg->tokens_per_frame * cfg->d_head);
    float *x = malloc(fr * sizeof(float));
    void *kv = malloc(fr * 4);
    for (int64_t f = 0; f < frames; f++) {
        for (size_t i = 0; i < fr; i++) x[i] = (float)f + (float)i / (float)fr;
        if (rkv_convert(x, RKV_DTYPE_F32, kv, cfg->dtype, fr) || rkv_model_begin_frame(m, 1, &s, &f))
            return -1;
        for (int64_t l = 0; l < cfg->n_layers; l++)
            if (rkv_model_upsert(m, l, NULL, 1, &s, kv, cfg->dtype, 1)) return -1;
    }
    size_t n = 0;
    if (rkv_model_save_session_mem(m, s, NULL, 0, &n)) return -1;
    void *img = malloc(n);
    if (rkv_model_save_session_mem(m, s, img, n, &n)) return -1;
    char name[64];
    snprintf(name, sizeof name, "%s-f%d", tag, frames);
    int rc = write_seed(dir, name, 0, img, n) || write_seed(dir, name, 1, img, n);
    if (!rc && !strcmp(tag, "fuzz") && frames == 23) rc = malformed_seeds(dir, img, n);
    free(img);
    free(x);
    free(kv);
    rkv_model_destroy(m);
    return rc;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: gen_seeds DIR\n");
        return 2;
    }
    rkv_model_config cfg = RKV_MODEL_CONFIG_INIT;
    snprintf(cfg.name, sizeof cfg.name, "fuzz");
    cfg.n_layers = 2;
    cfg.layers[0] = (rkv_layer_spec){3, 2, 2};
    cfg.layers[1] = (rkv_layer_spec){2, 2, 1};
    cfg.num_sessions = 1;
    cfg.n_q_heads = 2;
    cfg.n_kv_heads = 1;
    cfg.d_head = 2;
    cfg.tokens_per_frame = 128;
    cfg.dtype = RKV_DTYPE_F32;
    int rc = seeds_for(argv[1], "fuzz", &cfg, 0) || seeds_for(argv[1], "fuzz", &cfg, 5) ||
             seeds_for(argv[1], "fuzz", &cfg, 23);
    rkv_model_config other = cfg;
    other.dtype = RKV_DTYPE_BF16;
    rc = rc || seeds_for(argv[1], "bf16", &other, 3);
    other = cfg;
    other.n_layers = 1;
    other.d_head = 1;
    rc = rc || seeds_for(argv[1], "onelayer", &other, 2);
    if (rc) {
        fprintf(stderr, "gen_seeds: %s\n", rkv_last_error());
        return 1;
    }
    return 0;
}

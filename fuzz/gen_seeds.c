/* Writes seed inputs for fuzz_snapshot into DIR: valid snapshot images (each
 * prefixed with the target's mode byte, 0 = as is, 1 = reseal) of the
 * fuzz target's geometry at a few clocks, and of other geometries (which the
 * target must refuse as wrong geometry).
 * Usage: gen_seeds DIR */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ringkv.h"

static int write_seed(const char *dir, const char *name, int mode, const void *img, size_t n) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s-%d", dir, name, mode);
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    unsigned char m = (unsigned char)mode;
    int ok = fwrite(&m, 1, 1, f) == 1 && fwrite(img, 1, n, f) == n;
    return fclose(f) == 0 && ok ? 0 : -1;
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
            if (rkv_model_upsert(m, l, 1, &s, kv, cfg->dtype, 1)) return -1;
    }
    size_t n = 0;
    if (rkv_model_save_session_mem(m, s, NULL, 0, &n)) return -1;
    void *img = malloc(n);
    if (rkv_model_save_session_mem(m, s, img, n, &n)) return -1;
    char name[64];
    snprintf(name, sizeof name, "%s-f%d", tag, frames);
    int rc = write_seed(dir, name, 0, img, n) || write_seed(dir, name, 1, img, n);
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
    rkv_model_config cfg;
    memset(&cfg, 0, sizeof cfg);
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

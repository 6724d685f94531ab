/* The README's example, complete: one session of the Waypoint-1.5 360P
 * model streams a few frames through every layer (5 passes per frame: 4
 * denoising passes, then the commit pass), with every status checked. The
 * same calls run a GPU model made by rkv_model_create_cuda (ringkv_cuda.h),
 * with kv, q and out in device memory.
 * Usage: stream [N_FRAMES]   (default 3)
 *
 * Build, with ringkv installed and PKG_CONFIG_PATH naming its pkgconfig
 * folder (README "Install and link"; tests/check_install.py runs these lines):
 *   cc -std=c11 stream.c -o stream $(pkg-config --cflags --libs ringkv) \
 *      -Wl,-rpath,$(pkg-config --variable=libdir ringkv)
 * or against the static library:
 *   cc -std=c11 stream.c -o stream-static $(pkg-config --cflags ringkv) \
 *      $(pkg-config --variable=libdir ringkv)/libringkv.a \
 *      $(pkg-config --libs --static ringkv | sed 's/-lringkv//')
 */
#include <ringkv.h>
#include <stdio.h>
#include <stdlib.h>

#define CHECK(call)                                                              \
    do {                                                                         \
        rkv_status st_ = (call);                                                 \
        if (st_ != RKV_OK) {                                                     \
            fprintf(stderr, "%s: %s\n", rkv_status_str(st_), rkv_last_error());  \
            exit(1);                                                             \
        }                                                                        \
    } while (0)

int main(int argc, char **argv) {
    const int64_t n_frames = argc > 1 ? atoll(argv[1]) : 3;
    if (argc > 2 || n_frames < 1) {
        fprintf(stderr, "usage: stream [N_FRAMES]   (N_FRAMES >= 1, default 3)\n");
        return 2;
    }
    rkv_model_config cfg; /* rkv_model_preset fills it, struct_size included */
    rkv_model *model;
    int64_t s;
    CHECK(rkv_model_preset("waypoint-1.5-360p", /*full_global_ring=*/0, &cfg));
    cfg.num_sessions = 2;
    CHECK(rkv_model_create(&cfg, &model));
    CHECK(rkv_model_claim(model, "request-42", &s)); /* a session for this stream */

    /* one layer's K/V of one frame [2][H][T][D], queries and output
     * [Hq][T][D], in the model's dtype (bf16: 2 bytes per element; zeros
     * stand in for the model's activations here) */
    const size_t kv_elems = 2 * (size_t)(cfg.n_kv_heads * cfg.tokens_per_frame * cfg.d_head);
    const size_t q_elems = (size_t)(cfg.n_q_heads * cfg.tokens_per_frame * cfg.d_head);
    void *kv = calloc(kv_elems, rkv_dtype_size(cfg.dtype));
    void *q = calloc(q_elems, rkv_dtype_size(cfg.dtype));
    void *out = calloc(q_elems, rkv_dtype_size(cfg.dtype));
    if (!kv || !q || !out) return 1;

    for (int64_t f = 0; f < n_frames; f++) {
        /* the frame's batch, set once: sessions and clocks (checked: last + 1) */
        CHECK(rkv_model_begin_frame(model, 1, &s, &f));
        for (int pass = 0; pass < 5; pass++)
            for (int64_t layer = 0; layer < cfg.n_layers; layer++) {
                /* per pass: only K/V, queries and outputs; the commit pass
                 * (pass 4) ends the frame once it has gone through every layer */
                CHECK(rkv_model_frame_upsert(model, layer, kv, cfg.dtype, pass == 4));
                rkv_attention_args a = {.struct_size = sizeof(rkv_attention_args),
                                        .n_q_heads = cfg.n_q_heads, .q = q, .q_dtype = cfg.dtype,
                                        .out = out, .out_dtype = cfg.dtype};
                CHECK(rkv_model_frame_attend(model, layer, &a)); /* bits + clock */
            }
    }
    int64_t last;
    CHECK(rkv_model_clock(model, s, &last));
    size_t per_session, model_bytes;
    CHECK(rkv_model_config_memory(rkv_model_get_config(model), &per_session, &model_bytes));
    printf("session %lld committed frames 0..%lld in %lld layers (%zu bytes of K/V)\n",
           (long long)s, (long long)last, (long long)cfg.n_layers, model_bytes);
    CHECK(rkv_model_release(model, s));
    rkv_model_destroy(model);
    free(kv), free(q), free(out);
    return last == n_frames - 1 ? 0 : 1;
}

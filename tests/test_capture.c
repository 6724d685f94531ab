/* The capture contract of a model's per-pass calls (ringkv.h, "Frames";
 * ringkv_cuda.h), tested on the CPU through the backend SPI:
 *  - a counting backend table wraps the CPU table and fails any allocation,
 *    free, host copy, synchronization, reset or span copy made while a
 *    per-pass call (rkv_model_frame_upsert/_attend/_step and the wrappers)
 *    runs: what a CUDA graph cannot record;
 *  - the same table records the per-pass operations of one frame and
 *    replays them, with the pointers they were given, for the next frames
 *    (what a graph replay does): each frame is then begin_frame (one copy
 *    of the batch), the replay, end_frame; the rings, clocks and outputs
 *    must equal a model that ran every frame through the per-pass calls. */
#include "testutil.h"

#include "ringkv_backend.h"

/* ---- the counting table ----------------------------------------------------- */

typedef struct record {
    int attend; /* 0: upsert, 1: attend */
    void *layer;
    const void *kv;
    rkv_dtype kv_dtype;
    int64_t batch;
    const int64_t *frame_pos, *session_idx;
    int commit;
    rkv_attention_args args;
    void *ws;
    size_t ws_bytes;
} record;

static struct counts {
    int in_pass;    /* the test sets it around each per-pass model call */
    int violations; /* a forbidden operation during a per-pass call     */
    long alloc, free, copy_in, sync, check, reset, span, layers, upserts, attends, ctx_destroyed;
    int recording;
    record rec[64];
    int n_rec;
} K;

static const rkv_backend_ops *cpu(void) { return rkv_backend_cpu(); }

#define FORBIDDEN(what)                                                                  \
    do {                                                                                 \
        if (K.in_pass) {                                                                 \
            K.violations++;                                                              \
            return rkv_error_set(RKV_ERR_STATE, "counting backend: %s during a per-pass " \
                                 "call", what);                                          \
        }                                                                                \
    } while (0)

static void k_ctx_destroy(void *ctx) {
    (void)ctx;
    K.ctx_destroyed++;
}
static rkv_status k_layer_create(void *ctx, const rkv_geometry *g, rkv_backend_storage *st,
                                 void **l) {
    K.layers++;
    FORBIDDEN("layer_create");
    return cpu()->layer_create(ctx, g, st, l);
}
static void k_layer_destroy(void *ctx, void *l) {
    if (K.in_pass) K.violations++;
    cpu()->layer_destroy(ctx, l);
}
static rkv_status k_alloc(void *ctx, size_t n, void **p) {
    K.alloc++;
    FORBIDDEN("alloc");
    return cpu()->alloc(ctx, n, p);
}
static void k_free(void *ctx, void *p) {
    K.free++;
    if (K.in_pass) K.violations++;
    cpu()->free(ctx, p);
}
static rkv_status k_copy_in(void *ctx, void *dst, const void *src, size_t n) {
    K.copy_in++;
    FORBIDDEN("copy_in");
    return cpu()->copy_in(ctx, dst, src, n);
}
static rkv_status k_sync(void *ctx) {
    K.sync++;
    FORBIDDEN("synchronize");
    return cpu()->synchronize(ctx);
}
static rkv_status k_check(void *ctx, void *const *layers, int64_t n, int64_t *bad) {
    (void)ctx, (void)layers, (void)n, (void)bad;
    K.check++;
    FORBIDDEN("check");
    return RKV_OK;
}
static rkv_status k_reset(void *ctx, void *layer, int64_t s) {
    K.reset++;
    FORBIDDEN("reset");
    return cpu()->reset(ctx, layer, s);
}
static rkv_status k_span_read(void *ctx, const void *l, int64_t s, rkv_span_part p, int64_t h,
                              void *dst) {
    K.span++;
    FORBIDDEN("span_read");
    return cpu()->span_read(ctx, l, s, p, h, dst);
}
static rkv_status k_span_write(void *ctx, void *l, int64_t s, rkv_span_part p, int64_t h,
                               const void *src) {
    K.span++;
    FORBIDDEN("span_write");
    return cpu()->span_write(ctx, l, s, p, h, src);
}
static rkv_status k_span_copy(void *ctx, void *l, int64_t a, int64_t b) {
    K.span++;
    FORBIDDEN("span_copy");
    return cpu()->span_copy(ctx, l, a, b);
}
static rkv_status k_upsert(void *ctx, void *layer, const void *kv, int64_t B, const int64_t *fp,
                           const int64_t *sess, int commit, uint8_t *visible) {
    (void)visible; /* the model passes NULL */
    K.upserts++;
    if (K.recording) {
        assert_true(K.n_rec < 64);
        record r = {0, layer, kv, RKV_DTYPE_F32, B, fp, sess, commit, {0}, NULL, 0};
        K.rec[K.n_rec++] = r;
    }
    return cpu()->upsert(ctx, layer, kv, B, fp, sess, commit, NULL);
}
static rkv_status k_attend(void *ctx, const void *layer, const rkv_attention_args *a, void *ws,
                           size_t wsb) {
    K.attends++;
    if (K.recording) {
        assert_true(K.n_rec < 64);
        record r = {1, (void *)layer, NULL, RKV_DTYPE_F32, 0, NULL, NULL, 0, *a, ws, wsb};
        K.rec[K.n_rec++] = r;
    }
    return cpu()->attend(ctx, layer, a, ws, wsb);
}

/* Limits of a table: a negative one (refused), one row per call. */
static void k_limits_negative(void *ctx, rkv_backend_limits *out) {
    (void)ctx;
    out->max_batch = -1;
}
static void k_limits_one(void *ctx, rkv_backend_limits *out) {
    (void)ctx;
    out->max_batch = 1;
}

static rkv_backend_ops counting_ops(void) {
    rkv_backend_ops o = *cpu();
    o.name = "counting";
    o.ctx_destroy = k_ctx_destroy;
    o.layer_create = k_layer_create;
    o.layer_destroy = k_layer_destroy;
    o.alloc = k_alloc;
    o.free = k_free;
    o.copy_in = k_copy_in;
    o.synchronize = k_sync;
    o.check = k_check;
    o.reset = k_reset;
    o.span_read = k_span_read;
    o.span_write = k_span_write;
    o.span_copy = k_span_copy;
    o.upsert = k_upsert;
    o.attend = k_attend;
    return o;
}
static rkv_backend_ops OPS;

/* Replays the recorded per-pass operations with their recorded pointers. */
static void replay(void) {
    for (int i = 0; i < K.n_rec; i++) {
        const record *r = &K.rec[i];
        if (r->attend)
            TU_OK(cpu()->attend(NULL, r->layer, &r->args, r->ws, r->ws_bytes));
        else
            TU_OK(cpu()->upsert(NULL, r->layer, r->kv, r->batch, r->frame_pos,
                                r->session_idx, r->commit, NULL));
    }
}

/* ---- the scene ------------------------------------------------------------------ */

static rkv_model_config cfg3(void) {
    rkv_layer_spec specs[2] = {{3, 3, 1}, {4, 2, 2}};
    return tu_model_cfg(2, specs, 3, 2, 1, 8, 128, RKV_DTYPE_F32);
}

enum { PASSES = 3, NL = 2, B = 2 };
/* Fixed buffers, as a graph's would be: kv and out per (pass, layer). */
typedef struct bufs {
    float *kv[PASSES][NL], *q, *out[PASSES][NL];
    size_t nkv, nq;
} bufs;

static void bufs_make(bufs *b, const rkv_model_config *c) {
    b->nkv = (size_t)(2 * c->n_kv_heads * B * c->tokens_per_frame * c->d_head);
    b->nq = (size_t)(B * c->n_q_heads * c->tokens_per_frame * c->d_head);
    for (int p = 0; p < PASSES; p++)
        for (int l = 0; l < NL; l++) {
            b->kv[p][l] = tu_xmalloc(b->nkv * 4);
            b->out[p][l] = tu_xmalloc(b->nq * 4);
        }
    b->q = tu_xmalloc(b->nq * 4);
}
static void bufs_free(bufs *b) {
    for (int p = 0; p < PASSES; p++)
        for (int l = 0; l < NL; l++) {
            free(b->kv[p][l]);
            free(b->out[p][l]);
        }
    free(b->q);
}
/* New inputs of frame f, written in place (the same addresses). */
static void bufs_fill(bufs *b, int64_t f) {
    for (int p = 0; p < PASSES; p++)
        for (int l = 0; l < NL; l++) {
            tu_rng r = {rkvt_mix((uint64_t)f * 131 + (uint64_t)p * 7 + (uint64_t)l)};
            tu_fill_uniform(b->kv[p][l], b->nkv, &r);
        }
    tu_rng r = {rkvt_mix((uint64_t)f ^ 0xABCD)};
    tu_fill_uniform(b->q, b->nq, &r);
}
static rkv_attention_args args_of(const rkv_model_config *c, bufs *b, int p, int l) {
    rkv_attention_args a = RKV_ATTENTION_ARGS_INIT;
    a.n_q_heads = c->n_q_heads;
    a.q = b->q;
    a.q_dtype = RKV_DTYPE_F32;
    a.out = b->out[p][l];
    a.out_dtype = RKV_DTYPE_F32;
    return a;
}

/* One frame's per-pass calls (the 2nd pass upserts and attends apart, the
 * others step; the last commits), each inside the in_pass guard. */
static void frame_calls(rkv_model *m, const rkv_model_config *c, bufs *b, const int64_t *rows,
                        int wrappers) {
    for (int p = 0; p < PASSES; p++)
        for (int l = 0; l < NL; l++) {
            rkv_attention_args a = args_of(c, b, p, l);
            const int commit = p == PASSES - 1;
            K.in_pass = 1;
            if (p == 1) {
                if (wrappers) {
                    TU_OK(rkv_model_upsert(m, l, NULL, B, rows, b->kv[p][l], c->dtype, commit));
                    TU_OK(rkv_model_attend(m, l, NULL, B, rows, &a));
                } else {
                    TU_OK(rkv_model_frame_upsert(m, l, b->kv[p][l], c->dtype, commit));
                    TU_OK(rkv_model_frame_attend(m, l, &a));
                }
            } else if (wrappers) {
                TU_OK(rkv_model_step(m, l, B, rows, b->kv[p][l], c->dtype, commit, &a));
            } else {
                TU_OK(rkv_model_frame_step(m, l, b->kv[p][l], c->dtype, commit, &a));
            }
            K.in_pass = 0;
        }
}

static void assert_models_equal(rkv_model *x, rkv_model *y, int64_t S) {
    const size_t n = rkv_model_snapshot_bytes(x);
    unsigned char *a = tu_xmalloc(n), *b = tu_xmalloc(n);
    for (int64_t s = 0; s < S; s++) {
        int64_t cx = -7, cy = -8;
        TU_OK(rkv_model_clock(x, s, &cx));
        TU_OK(rkv_model_clock(y, s, &cy));
        assert_int_equal(cx, cy);
        TU_OK(rkv_model_snapshot(x, s, a, n));
        TU_OK(rkv_model_snapshot(y, s, b, n));
        assert_memory_equal(a, b, n);
    }
    free(a);
    free(b);
}

/* ---- tests ------------------------------------------------------------------------ */

/* The per-pass calls and the wrappers never allocate, free, copy, reset or
 * synchronize through the table; begin_frame copies the batch once and
 * allocates nothing; end_frame and abandon_frame do nothing on it. */
static void test_per_pass_calls_enqueue_only(void **state) {
    (void)state;
    memset(&K, 0, sizeof K);
    OPS = counting_ops();
    rkv_model_config c = cfg3();
    rkv_model *m = NULL;
    TU_OK(rkv_model_create_with_backend(&c, &OPS, &K, &m));
    assert_int_equal(K.layers, 2);
    assert_int_equal(K.alloc, 1); /* the batch buffers (no workspace on the CPU) */
    assert_string_equal(rkv_model_backend_name(m), "counting");
    const rkv_backend_ops *model_ops = NULL;
    rkv_layer_backend_handle(rkv_model_layer(m, 0), &model_ops, NULL);
    assert_ptr_equal(model_ops, &OPS);
    /* a layer on any table: its handle, the backend's own layer and table */
    const rkv_backend_ops *lops = NULL;
    assert_non_null(rkv_layer_backend_handle(rkv_model_layer(m, 1), &lops, NULL));
    assert_ptr_equal(lops, &OPS);
    assert_null(rkv_model_layer(m, 2));
    int64_t a, b;
    TU_OK(rkv_model_claim(m, "a", &a));
    TU_OK(rkv_model_claim(m, "b", &b));
    bufs bf;
    bufs_make(&bf, &c);
    for (int wrappers = 0; wrappers < 2; wrappers++)
        for (int64_t f = 0; f < 4; f++) {
            const int64_t rows[B] = {b, a}, clocks[B] = {f + 4 * wrappers, f + 4 * wrappers + 3};
            bufs_fill(&bf, f);
            const struct counts before = K;
            TU_OK(rkv_model_begin_frame(m, B, rows, clocks));
            assert_int_equal(K.copy_in, before.copy_in + 1);
            assert_int_equal(K.alloc, before.alloc);
            frame_calls(m, &c, &bf, rows, wrappers);
            TU_OK(rkv_model_end_frame(m)); /* ended by the commit pass: nothing to do */
            assert_int_equal(K.violations, 0);
            assert_int_equal(K.alloc, before.alloc);
            assert_int_equal(K.free, before.free);
            assert_int_equal(K.copy_in, before.copy_in + 1);
            assert_int_equal(K.sync, before.sync);
            assert_int_equal(K.reset + K.span + K.check, before.reset + before.span + before.check);
            assert_int_equal(K.upserts, before.upserts + PASSES * NL);
            assert_int_equal(K.attends, before.attends + PASSES * NL);
            int64_t x;
            TU_OK(rkv_model_clock(m, a, &x));
            assert_int_equal(x, clocks[1]);
            TU_OK(rkv_model_abandon_frame(m));
            assert_int_equal(K.copy_in, before.copy_in + 1);
        }
    /* the harness can fail: a synchronization inside the guard is caught */
    K.in_pass = 1;
    TU_ERR(rkv_model_synchronize(m), RKV_ERR_STATE, "during a per-pass call");
    K.in_pass = 0;
    assert_int_equal(K.violations, 1);
    bufs_free(&bf);
    rkv_model_destroy(m);
    assert_int_equal(K.ctx_destroyed, 1);
    assert_int_equal(K.free, 1);
}

/* One frame recorded, then replayed for the next frames with only the
 * clock values changed by begin_frame: the same rings, clocks and outputs
 * as per-pass calls frame by frame on the CPU backend. */
static void test_replayed_frames_equal_called_frames(void **state) {
    (void)state;
    memset(&K, 0, sizeof K);
    OPS = counting_ops();
    rkv_model_config c = cfg3();
    rkv_model *m = NULL, *ref = NULL;
    TU_OK(rkv_model_create_with_backend(&c, &OPS, &K, &m));
    TU_OK(rkv_model_create(&c, &ref));
    int64_t s[3];
    for (int i = 0; i < 3; i++) {
        char id[8];
        snprintf(id, sizeof id, "s%d", i);
        TU_OK(rkv_model_claim(m, id, &s[i]));
        TU_OK(rkv_model_claim(ref, id, &s[i]));
    }
    bufs bm, br;
    bufs_make(&bm, &c);
    bufs_make(&br, &c);
    /* rows 2 and 0 at different clocks: filling, evicting, odd/even */
    const int64_t rows[B] = {s[2], s[0]};
    int64_t clocks[B] = {0, 5};
    /* frame 0: the per-pass calls, recorded ("captured") */
    bufs_fill(&bm, 0);
    bufs_fill(&br, 0);
    TU_OK(rkv_model_begin_frame(m, B, rows, clocks));
    TU_OK(rkv_model_begin_frame(ref, B, rows, clocks));
    K.recording = 1;
    frame_calls(m, &c, &bm, rows, 0);
    K.recording = 0;
    frame_calls(ref, &c, &br, rows, 0);
    assert_int_equal(K.n_rec, 2 * PASSES * NL);
    assert_models_equal(m, ref, 3);
    /* frames 1..9: begin_frame, replay, end_frame */
    for (int64_t f = 1; f < 10; f++) {
        clocks[0]++;
        clocks[1]++;
        bufs_fill(&bm, f);
        bufs_fill(&br, f);
        const struct counts before = K;
        TU_OK(rkv_model_begin_frame(m, B, rows, clocks));
        K.in_pass = 1;
        replay();
        K.in_pass = 0;
        TU_OK(rkv_model_end_frame(m));
        assert_int_equal(K.copy_in, before.copy_in + 1);
        assert_int_equal(K.alloc + K.free + K.sync, before.alloc + before.free + before.sync);
        TU_OK(rkv_model_begin_frame(ref, B, rows, clocks));
        frame_calls(ref, &c, &br, rows, 0);
        for (int p = 0; p < PASSES; p++)
            for (int l = 0; l < NL; l++)
                assert_memory_equal(bm.out[p][l], br.out[p][l], bm.nq * 4);
        assert_models_equal(m, ref, 3);
        /* the replay needed the new clocks: the slot of this frame moved */
    }
    int64_t x;
    TU_OK(rkv_model_clock(m, s[0], &x));
    assert_int_equal(x, 14);
    assert_int_equal(K.violations, 0);
    bufs_free(&bm);
    bufs_free(&br);
    rkv_model_destroy(m);
    rkv_model_destroy(ref);
}

/* A table the core cannot use is refused, naming why; the caller keeps its
 * context (not destroyed). */
static void test_bad_tables_refused(void **state) {
    (void)state;
    memset(&K, 0, sizeof K);
    rkv_model_config c = cfg3();
    rkv_model *sentinel = (rkv_model *)(uintptr_t)0x77, *m = sentinel;
    rkv_backend_ops o = counting_ops();
    TU_ERR(rkv_model_create_with_backend(&c, NULL, NULL, &m), RKV_ERR_NULL, "ops");
    TU_ERR(rkv_model_create_with_backend(NULL, &o, NULL, &m), RKV_ERR_NULL, NULL);
    TU_ERR(rkv_model_create_with_backend(&c, &o, NULL, NULL), RKV_ERR_NULL, "out");
    o.abi_version = 0;
    TU_ERR(rkv_model_create_with_backend(&c, &o, NULL, &m), RKV_ERR_INVALID_ARG, "version 0");
    /* the message names the call made, not rkv_model_create */
    o.abi_version = 2;
    TU_ERR(rkv_model_create_with_backend(&c, &o, NULL, &m), RKV_ERR_INVALID_ARG,
           "rkv_model_create_with_backend: backend table of ABI version 2");
    o.abi_version = 0;
    TU_ERR(rkv_model_create(NULL, &m), RKV_ERR_NULL, "rkv_model_create: cfg");
    o.abi_version = RKV_BACKEND_ABI_VERSION + 1;
    TU_ERR(rkv_model_create_with_backend(&c, &o, NULL, &m), RKV_ERR_INVALID_ARG, "newer");
    o = counting_ops();
    o.struct_size = 16;
    TU_ERR(rkv_model_create_with_backend(&c, &o, NULL, &m), RKV_ERR_INVALID_ARG, "16 bytes");
    o = counting_ops();
    o.span_copy = NULL;
    TU_ERR(rkv_model_create_with_backend(&c, &o, NULL, &m), RKV_ERR_INVALID_ARG, "span_copy");
    o = counting_ops();
    o.limits = k_limits_negative;
    TU_ERR(rkv_model_create_with_backend(&c, &o, NULL, &m), RKV_ERR_INVALID_ARG, "max_batch");
    /* a failing layer_create: the layers made so far are freed, the context
     * is the caller's */
    o = counting_ops();
    rkv_model_config bad = c;
    bad.layers[1].ring_buckets = 9;
    TU_ERR(rkv_model_create_with_backend(&bad, &o, NULL, &m), RKV_ERR_INVALID_ARG, "9");
    assert_ptr_equal(m, sentinel);
    assert_int_equal(K.ctx_destroyed, 0);
    /* max_batch caps begin_frame's B */
    o = counting_ops();
    o.limits = k_limits_one;
    TU_OK(rkv_model_create_with_backend(&c, &o, NULL, &m));
    int64_t a, b;
    TU_OK(rkv_model_claim(m, "a", &a));
    TU_OK(rkv_model_claim(m, "b", &b));
    const int64_t rows[2] = {a, b}, fp[2] = {0, 0};
    TU_ERR(rkv_model_begin_frame(m, 2, rows, fp), RKV_ERR_INVALID_ARG, "backend's largest");
    TU_OK(rkv_model_begin_frame(m, 1, rows, fp));
    rkv_model_destroy(m);
    assert_int_equal(K.ctx_destroyed, 1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_per_pass_calls_enqueue_only),
        cmocka_unit_test(test_replayed_frames_equal_called_frames),
        cmocka_unit_test(test_bad_tables_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* Layers over caller-owned storage (rkv_layer_wrap): upsert, visibility
 * row and attention on buffers the caller holds give exactly what the
 * layer calls give on the layer's own storage, touch nothing else, and
 * refuse bad storage with a message; the model's *_ring calls keep the
 * model's clocks while writing only the given buffers. */
#include "ringkv_backend.h"
#include "testutil.h"

/* A caller-owned copy of a layer's storage, and a layer that wraps it. */
typedef struct {
    rkv_geometry g;
    void *kv;
    uint8_t *written;
    rkv_layer *l;
    size_t kv_bytes, n;
} own_ring;

static own_ring own_copy(const rkv_layer *l)
{
    own_ring r;
    r.g = *rkv_layer_geometry(l);
    r.kv_bytes = rkv_geometry_memory_bytes(rkv_layer_geometry(l));
    r.n = (size_t)rkv_geometry_total_slots(rkv_layer_geometry(l));
    r.kv = tu_xmalloc(r.kv_bytes);
    r.written = tu_xmalloc(r.n);
    memcpy(r.kv, rkv_layer_kv(l), r.kv_bytes);
    memcpy(r.written, rkv_layer_written(l), r.n);
    const rkv_backend_storage st = {r.kv, r.written, NULL};
    TU_OK(rkv_layer_wrap(NULL, NULL, &r.g, &st, &r.l));
    return r;
}

static void own_free(own_ring *r)
{
    rkv_layer_destroy(r->l);
    free(r->kv);
    free(r->written);
}

/* The copy holds the same bytes as the layer's storage. */
static void assert_same_storage(const own_ring *r, const rkv_layer *l, const char *when)
{
    if (memcmp(r->kv, rkv_layer_kv(l), r->kv_bytes))
        fail_msg("%s: the view's K/V differ from the layer's", when);
    if (memcmp(r->written, rkv_layer_written(l), r->n))
        fail_msg("%s: the view's written bits differ from the layer's", when);
}

static void *frame_in(const rkv_geometry *g, int64_t B, uint64_t key)
{
    size_t n = (size_t)(2 * g->n_kv_heads * B * g->tokens_per_frame * g->d_head);
    float *f = tu_xmalloc(n * sizeof *f);
    tu_rng r = {rkvt_mix(key + 99)};
    tu_fill_uniform(f, n, &r);
    void *out = tu_to_dtype(f, n, g->dtype);
    free(f);
    return out;
}

/* A random stream of 4+1 frames with batches, dilation and jumps, run on a
 * layer and on a caller-owned copy of its storage side by side: after every
 * upsert both hold the same bytes, the rows returned are equal, and
 * rkv_ring_visible_row before the call gives the same row. */
static void test_upsert_and_row_match_the_layer(void **state)
{
    (void)state;
    const rkv_dtype dts[] = {RKV_DTYPE_F32, RKV_DTYPE_BF16, RKV_DTYPE_F16};
    for (int k = 0; k < 3; k++) {
        rkv_geometry g = tu_geom(3, 2, 4, 3, 8, 128, 2, dts[k]);
        rkv_layer *l = tu_layer_new(&g);
        own_ring r = own_copy(l);
        const int64_t N = tu_N(&g);
        uint8_t *row_l = tu_xmalloc((size_t)N), *row_v = tu_xmalloc((size_t)N),
                *row_pre = tu_xmalloc((size_t)N);
        int64_t clock[3] = {0, 5, 13};
        tu_rng rng = {7};
        int rows_compared = 0, hidden_rows = 0;
        for (int step = 0; step < 60; step++) {
            const int64_t B = 1 + tu_randint(&rng, 3);
            int64_t si[3], fp[3];
            for (int64_t b = 0; b < B; b++) {
                si[b] = (b + step) % 3;
                fp[b] = clock[si[b]];
            }
            const int pass = step % 5, commit = pass == 4;
            void *kv = frame_in(&g, B, (uint64_t)step);
            uint8_t *vl = B == 1 ? row_l : NULL, *vv = B == 1 ? row_v : NULL;
            if (B == 1) {
                TU_OK(rkv_layer_visible_row(r.l, si, fp, row_pre));
                if (tu_write_step(&g, fp[0]) && fp[0] > 0) hidden_rows++;
            }
            TU_OK(rkv_layer_upsert(l, kv, g.dtype, B, fp, si, commit, vl));
            TU_OK(rkv_layer_upsert(r.l, kv, g.dtype, B, fp, si, commit, vv));
            assert_same_storage(&r, l, "after an upsert");
            if (B == 1) {
                assert_memory_equal(row_l, row_v, (size_t)N);
                assert_memory_equal(row_l, row_pre, (size_t)N);
                rows_compared++;
            }
            if (commit)
                for (int64_t b = 0; b < B; b++) clock[si[b]] += 1 + (step % 7 == 4 ? 3 : 0);
            free(kv);
        }
        assert_true(rows_compared > 10);
        assert_true(hidden_rows > 0); /* rows with a hidden ring frame were compared */
        rkv_layer_destroy(l);
        own_free(&r);
        free(row_l), free(row_v), free(row_pre);
    }
}

/* A layer over another buffer writes that buffer only: the layer whose
 * storage was copied stays as it was. */
static void test_view_writes_only_its_buffers(void **state)
{
    (void)state;
    rkv_geometry g = tu_geom(2, 1, 2, 2, 4, 128, 1, RKV_DTYPE_F32);
    rkv_layer *l = tu_layer_new(&g);
    own_ring before = own_copy(l), r = own_copy(l);
    void *kv = frame_in(&g, 1, 3);
    int64_t s = 1, f = 0;
    TU_OK(rkv_layer_upsert(r.l, kv, g.dtype, 1, &f, &s, 1, NULL));
    assert_same_storage(&before, l, "the layer after an upsert on a copy");
    /* ... and the copy did change: the frame is in ring slot 0 of session 1 */
    const float *k = r.kv;
    assert_memory_equal(k + (size_t)tu_C(&g) * 4, kv, 128 * 4 * sizeof(float));
    assert_int_equal(r.written[tu_C(&g)], 1);
    /* the wrapped layer names the caller's buffers */
    assert_ptr_equal(rkv_layer_kv(r.l), r.kv);
    assert_ptr_equal(rkv_layer_written(r.l), r.written);
    assert_true(tu_geom_equal(rkv_layer_geometry(r.l), &g));
    free(kv);
    own_free(&before), own_free(&r);
    rkv_layer_destroy(l);
}

/* Attention on a wrapped layer is bit-identical to the layer's on the same bytes,
 * by the clock rule and with explicit rows. */
static void test_attend_matches_the_layer(void **state)
{
    (void)state;
    rkv_geometry g = tu_geom(2, 2, 4, 4, 32, 128, 1, RKV_DTYPE_BF16);
    rkv_layer *l = tu_layer_new(&g);
    for (int64_t f = 0; f < 6; f++) {
        int64_t s = f % 2;
        void *kv = frame_in(&g, 1, (uint64_t)(100 + f));
        TU_OK(rkv_layer_upsert(l, kv, g.dtype, 1, &f, &s, 1, NULL));
        free(kv);
    }
    own_ring r = own_copy(l);
    const int64_t Hq = 4, T = 128, D = 32, B = 2;
    size_t nq = (size_t)(B * Hq * T * D);
    float *q = tu_xmalloc(nq * sizeof *q), *o1 = tu_xmalloc(nq * 4), *o2 = tu_xmalloc(nq * 4);
    tu_rng rng = {5};
    tu_fill_uniform(q, nq, &rng);
    int64_t si[2] = {0, 1}, fp[2] = {6, 5};
    rkv_attention_args a = {.struct_size = sizeof(rkv_attention_args),
                            .batch = B, .n_q_heads = Hq, .q = q, .q_dtype = RKV_DTYPE_F32,
                            .out = o1, .out_dtype = RKV_DTYPE_F32, .session_idx = si,
                            .frame_pos = fp};
    TU_OK(rkv_layer_attend(l, &a));
    a.out = o2;
    memset(o2, 0xff, nq * 4);
    TU_OK(rkv_layer_attend(r.l, &a));
    assert_memory_equal(o1, o2, nq * 4);
    /* explicit rows */
    const int64_t N = tu_N(&g);
    uint8_t *rows = tu_xcalloc((size_t)(2 * N), 1);
    TU_OK(rkv_layer_visible_row(r.l, &si[0], &fp[0], rows));
    TU_OK(rkv_layer_visible_row(r.l, &si[1], &fp[1], rows + N));
    a.frame_pos = NULL;
    a.visible = rows;
    a.out = o1;
    TU_OK(rkv_layer_attend(l, &a));
    a.out = o2;
    TU_OK(rkv_layer_attend(r.l, &a));
    assert_memory_equal(o1, o2, nq * 4);
    /* a layer over other contents gives another result: it reads its own bytes */
    memset(r.kv, 0, r.kv_bytes);
    TU_OK(rkv_layer_attend(r.l, &a));
    assert_true(memcmp(o1, o2, nq * 4) != 0);
    free(q), free(o1), free(o2), free(rows);
    own_free(&r);
    rkv_layer_destroy(l);
}

/* Bad storage and bad arguments: the status, a message naming the call, and
 * nothing written. */
static void test_bad_views_refused(void **state)
{
    (void)state;
    rkv_geometry g = tu_geom(1, 1, 2, 2, 4, 128, 1, RKV_DTYPE_F32);
    rkv_layer *l = tu_layer_new(&g);
    own_ring r = own_copy(l), before = own_copy(l);
    void *kv = frame_in(&g, 1, 1);
    int64_t s = 0, f = 0, bad_s = 1, bad_f = -1, neg = -2;
    uint8_t *row = tu_xmalloc((size_t)tu_N(&g));
    rkv_layer *w = (rkv_layer *)(uintptr_t)0x77;
    TU_ERR(rkv_layer_upsert(NULL, kv, g.dtype, 1, &f, &s, 1, NULL), RKV_ERR_NULL,
           "rkv_layer_upsert: layer is NULL");
    rkv_backend_storage st = {NULL, r.written, NULL};
    TU_ERR(rkv_layer_wrap(NULL, NULL, &g, &st, &w), RKV_ERR_NULL, "storage->kv");
    st = (rkv_backend_storage){r.kv, NULL, NULL};
    TU_ERR(rkv_layer_wrap(NULL, NULL, &g, &st, &w), RKV_ERR_NULL, "storage->written");
    TU_ERR(rkv_layer_wrap(NULL, NULL, &g, NULL, &w), RKV_ERR_NULL, "storage");
    st = (rkv_backend_storage){(uint8_t *)r.kv + 1, r.written, NULL};
    TU_ERR(rkv_layer_wrap(NULL, NULL, &g, &st, &w), RKV_ERR_INVALID_ARG,
           "not 4-byte aligned (the cpu backend's alignment, at least the element size of f32)");
    rkv_geometry bad_g = g;
    bad_g.tokens_per_frame = 100;
    st = (rkv_backend_storage){r.kv, r.written, NULL};
    TU_ERR(rkv_layer_wrap(NULL, NULL, &bad_g, &st, &w), RKV_ERR_INVALID_ARG, "tokens_per_frame");
    assert_ptr_equal(w, (rkv_layer *)(uintptr_t)0x77); /* untouched */
    TU_ERR(rkv_layer_upsert(r.l, kv, g.dtype, 1, &f, &bad_s, 1, NULL), RKV_ERR_RANGE,
           "rkv_layer_upsert: session_idx[0] = 1 is out of range");
    TU_ERR(rkv_layer_upsert(r.l, kv, g.dtype, 1, &bad_f, &s, 1, NULL), RKV_ERR_INVALID_ARG,
           "rkv_layer_upsert: frame_pos[0] = -1");
    TU_ERR(rkv_layer_upsert(r.l, kv, RKV_DTYPE_BF16, 1, &f, &s, 1, NULL), RKV_ERR_DTYPE,
           "rkv_layer_upsert: kv dtype");
    /* worded as rkv_layer_upsert's row 0, the session checked first */
    TU_ERR(rkv_layer_visible_row(r.l, &bad_s, &f, row), RKV_ERR_RANGE,
           "rkv_layer_visible_row: session_idx[0] = 1 is out of range; expected 0..0");
    TU_ERR(rkv_layer_visible_row(r.l, &s, &neg, row), RKV_ERR_INVALID_ARG,
           "rkv_layer_visible_row: frame_pos[0] = -2; expected >= 0");
    TU_ERR(rkv_layer_visible_row(r.l, &bad_s, &neg, row), RKV_ERR_RANGE, "session_idx[0] = 1");
    TU_ERR(rkv_layer_visible_row(r.l, &s, &f, NULL), RKV_ERR_NULL, "row");
    rkv_attention_args a = {.struct_size = sizeof(rkv_attention_args),
                            .batch = 1, .n_q_heads = 1, .q = kv, .out = row,
                            .session_idx = &bad_s, .frame_pos = &f};
    TU_ERR(rkv_layer_attend(r.l, &a), RKV_ERR_RANGE, "rkv_layer_attend: session_idx[0]");
    assert_memory_equal(r.kv, before.kv, r.kv_bytes);
    assert_memory_equal(r.written, before.written, r.n);
    free(kv), free(row);
    own_free(&r), own_free(&before);
    rkv_layer_destroy(l);
}

/* The model's calls on a copy of a layer's storage: the copy receives what
 * rkv_model_upsert writes into a twin model's layer, the model's own layer
 * is untouched, the clocks advance as usual, and attention reads the copy. */
static void test_model_ring_calls(void **state)
{
    (void)state;
    rkv_model_config cfg = RKV_MODEL_CONFIG_INIT;
    TU_OK(rkv_model_preset("demo", 0, &cfg));
    cfg.num_sessions = 2;
    rkv_model *m, *twin;
    TU_OK(rkv_model_create(&cfg, &m));
    TU_OK(rkv_model_create(&cfg, &twin));
    int64_t s, s2;
    TU_OK(rkv_model_claim(m, "a", &s));
    TU_OK(rkv_model_claim(twin, "a", &s2));
    assert_int_equal(s, s2);
    const int64_t nl = cfg.n_layers;
    own_ring *rings = tu_xcalloc((size_t)nl, sizeof *rings);
    own_ring *untouched = tu_xcalloc((size_t)nl, sizeof *untouched);
    for (int64_t i = 0; i < nl; i++) {
        rings[i] = own_copy(rkv_model_layer(m, i));
        untouched[i] = own_copy(rkv_model_layer(m, i));
    }
    const int64_t T = cfg.tokens_per_frame, D = cfg.d_head, Hq = cfg.n_q_heads;
    size_t nq = (size_t)(Hq * T * D);
    float *q = tu_xmalloc(nq * 4), *o1 = tu_xmalloc(nq * 4), *o2 = tu_xmalloc(nq * 4);
    tu_rng rng = {11};
    for (int64_t f = 0; f < 12; f++) {
        TU_OK(rkv_model_begin_frame(m, 1, &s, &f));
        TU_OK(rkv_model_begin_frame(twin, 1, &s2, &f));
        for (int pass = 0; pass < 5; pass++)
            for (int64_t i = 0; i < nl; i++) {
                void *kv = frame_in(&rings[i].g, 1, (uint64_t)(f * 100 + pass * 10 + i));
                tu_fill_uniform(q, nq, &rng);
                TU_OK(rkv_model_upsert(m, i, rings[i].l, 1, &s, kv, cfg.dtype, pass == 4));
                TU_OK(rkv_model_upsert(twin, i, NULL, 1, &s2, kv, cfg.dtype, pass == 4));
                rkv_attention_args a = {.struct_size = sizeof(rkv_attention_args),
                                        .n_q_heads = Hq, .q = q, .q_dtype = RKV_DTYPE_F32,
                                        .out = o1, .out_dtype = RKV_DTYPE_F32};
                TU_OK(rkv_model_attend(m, i, rings[i].l, 1, &s, &a));
                a.out = o2;
                TU_OK(rkv_model_attend(twin, i, NULL, 1, &s2, &a));
                assert_memory_equal(o1, o2, nq * 4);
                free(kv);
            }
        int64_t c1, c2;
        TU_OK(rkv_model_clock(m, s, &c1));
        TU_OK(rkv_model_clock(twin, s2, &c2));
        assert_int_equal(c1, f); /* the frame ended on the model given copies */
        assert_int_equal(c2, f);
    }
    for (int64_t i = 0; i < nl; i++) {
        assert_same_storage(&rings[i], rkv_model_layer(twin, i), "the copy vs the twin");
        assert_same_storage(&untouched[i], rkv_model_layer(m, i), "the model's own layer");
    }
    /* the model's checks come first: a skipped clock, a layer out of range,
     * another layer's geometry; nothing changes */
    int64_t skip = 20;
    TU_ERR(rkv_model_begin_frame(m, 1, &s, &skip), RKV_ERR_CLOCK, "expected 12");
    void *kv = frame_in(&rings[0].g, 1, 1);
    TU_ERR(rkv_model_upsert(m, 0, rings[0].l, 1, &s, kv, cfg.dtype, 0), RKV_ERR_STATE,
           "rkv_model_upsert: frame 11 of session 0 was committed on every layer");
    TU_ERR(rkv_model_upsert(m, nl, rings[0].l, 1, &s, kv, cfg.dtype, 0), RKV_ERR_RANGE,
           "rkv_model_upsert: layer 2 out of range");
    TU_ERR(rkv_model_upsert(m, 1, rings[0].l, 1, &s, kv, cfg.dtype, 0),
           RKV_ERR_INVALID_ARG, "differs from layer 1's in pinned_dilation");
    rkv_attention_args a = {.struct_size = sizeof(rkv_attention_args),
                            .n_q_heads = Hq, .q = q, .out = o1};
    TU_OK(rkv_model_attend(m, 0, NULL, 1, &s, &a)); /* NULL: the layer's own storage */
    /* a model on another backend table than the ring's layer */
    rkv_backend_ops other = *rkv_backend_cpu();
    other.name = "other";
    rkv_model *m2;
    TU_OK(rkv_model_create_with_backend(&cfg, &other, NULL, &m2));
    TU_ERR(rkv_model_upsert(m2, 0, rings[0].l, 1, &s, kv, cfg.dtype, 0), RKV_ERR_STATE,
           "runs on the other backend");
    rkv_model_destroy(m2);
    for (int64_t i = 0; i < nl; i++) {
        assert_same_storage(&rings[i], rkv_model_layer(twin, i), "after refused calls");
        own_free(&rings[i]);
        own_free(&untouched[i]);
    }
    free(kv), free(q), free(o1), free(o2), free(rings), free(untouched);
    rkv_model_destroy(m);
    rkv_model_destroy(twin);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_upsert_and_row_match_the_layer),
        cmocka_unit_test(test_view_writes_only_its_buffers),
        cmocka_unit_test(test_attend_matches_the_layer),
        cmocka_unit_test(test_bad_views_refused),
        cmocka_unit_test(test_model_ring_calls),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

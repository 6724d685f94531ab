/* Bad input for every public function that returns rkv_status: the
 * documented status, a non-empty message set by that call that names the
 * bad value, and nothing changed (layer / model byte-identical, output
 * buffers untouched). rkv_*_destroy(NULL) is a no-op.
 * (rkv_dtype_parse / rkv_convert: test_dtype.c; rkv_geometry_check and
 * rkv_layer_create: test_geometry.c.) */
#define _POSIX_C_SOURCE 200809L
#include "ringkv_backend.h"
#include "testutil.h"
#include "snapshot_edit.h" /* tsnap_find */

#include <pthread.h>
#include <stdlib.h> /* mkstemp */
#include <unistd.h> /* write, close, unlink */

/* The call fails as expected and the layer is byte-identical. */
#define LAYER_ERR(l, expr, expected, needle)                                   \
    do {                                                                       \
        tu_layer_state s_ = tu_layer_save(l);                                  \
        TU_ERR(expr, expected, needle);                                        \
        if (!tu_layer_same(&s_, l))                                            \
            fail_msg("%s:%d: %s changed the layer", __FILE__, __LINE__,        \
                     #expr);                                                   \
        tu_layer_state_free(&s_);                                              \
    } while (0)
#define LAYER_ERR2(l, expr, e1, e2, needle)                                    \
    do {                                                                       \
        tu_layer_state s_ = tu_layer_save(l);                                  \
        TU_ERR2(expr, e1, e2, needle);                                         \
        if (!tu_layer_same(&s_, l))                                            \
            fail_msg("%s:%d: %s changed the layer", __FILE__, __LINE__,        \
                     #expr);                                                   \
        tu_layer_state_free(&s_);                                              \
    } while (0)
#define MODEL_ERR(m, expr, expected, needle)                                   \
    do {                                                                       \
        tu_model_state s_ = tu_model_save(m);                                  \
        TU_ERR(expr, expected, needle);                                        \
        tu_model_assert_same(&s_, m, #expr);                                   \
        tu_model_state_free(&s_);                                              \
    } while (0)
#define MODEL_ERR2(m, expr, e1, e2, needle)                                    \
    do {                                                                       \
        tu_model_state s_ = tu_model_save(m);                                  \
        TU_ERR2(expr, e1, e2, needle);                                         \
        tu_model_assert_same(&s_, m, #expr);                                   \
        tu_model_state_free(&s_);                                              \
    } while (0)
#define MODEL_FAILS(m, expr, needle)                                           \
    do {                                                                       \
        tu_model_state s_ = tu_model_save(m);                                  \
        TU_FAILS(expr, needle);                                                \
        tu_model_assert_same(&s_, m, #expr);                                   \
        tu_model_state_free(&s_);                                              \
    } while (0)

/* S 3, H 2, RF 4, RB 3, D 4, T 128, PD 2, f32, with some history. */
static rkv_geometry g0(void)
{
    return tu_geom(3, 2, 4, 3, 4, 128, 2, RKV_DTYPE_F32);
}
static rkv_layer *hist_layer(void)
{
    rkv_geometry g = g0();
    rkv_layer *l = tu_layer_new(&g);
    size_t fn = (size_t)(2 * 2 * 128 * 4);
    float *fr = tu_xmalloc(fn * 4);
    for (int64_t s = 0; s < 3; s++)
        for (int64_t f = 0; f < 3 + 2 * s; f++)
            for (int pass = 0; pass < 5; pass++) {
                tu_gen_frame(fr, &g, tu_key(s, f, (uint64_t)pass));
                TU_OK(rkv_layer_upsert(l, fr, RKV_DTYPE_F32, 1, &f, &s,
                                       pass == 4, NULL));
            }
    free(fr);
    return l;
}

/* ---- layer accessors ---------------------------------------------------- */

static void test_destroy_null(void **state)
{
    (void)state;
    rkv_layer_destroy(NULL);
    rkv_model_destroy(NULL);
    rkv_threadpool_destroy(NULL);
    assert_int_equal(rkv_threadpool_size(NULL), 0);
}

static void test_session_span_errors(void **state)
{
    (void)state;
    rkv_layer *l = hist_layer();
    int64_t lo = 11, hi = 22;
    TU_ERR(rkv_layer_session_span(NULL, 0, &lo, &hi), RKV_ERR_NULL, NULL);
    TU_ERR(rkv_layer_session_span(l, 0, NULL, &hi), RKV_ERR_NULL, NULL);
    TU_ERR(rkv_layer_session_span(l, 0, &lo, NULL), RKV_ERR_NULL, NULL);
    TU_ERR(rkv_layer_session_span(l, 3, &lo, &hi), RKV_ERR_RANGE, "3");
    TU_ERR(rkv_layer_session_span(l, -1, &lo, &hi), RKV_ERR_RANGE, "-1");
    TU_ERR(rkv_layer_session_span(l, INT64_MAX, &lo, &hi), RKV_ERR_RANGE,
           "9223372036854775807");
    assert_int_equal(lo, 11);
    assert_int_equal(hi, 22);
    rkv_layer_destroy(l);
}

static void test_reset_errors(void **state)
{
    (void)state;
    rkv_layer *l = hist_layer();
    TU_ERR(rkv_layer_reset(NULL, 0), RKV_ERR_NULL, NULL);
    LAYER_ERR(l, rkv_layer_reset(l, 3), RKV_ERR_RANGE, "3");
    LAYER_ERR(l, rkv_layer_reset(l, -4), RKV_ERR_RANGE, "-4");
    LAYER_ERR(l, rkv_layer_reset(l, INT64_MIN), RKV_ERR_RANGE, NULL);
    rkv_layer_destroy(l);
}

/* ---- upsert --------------------------------------------------------------- */

typedef struct upsert_in {
    float *kv; /* [2][H][3*T][D] f32 */
    int64_t fp[4];
    int64_t sess[4];
    uint8_t *vis;
    int64_t N;
} upsert_in;

static upsert_in upsert_in_new(const rkv_layer *l)
{
    upsert_in in;
    const rkv_geometry *g = rkv_layer_geometry(l);
    size_t n = (size_t)(2 * g->n_kv_heads * 4 * g->tokens_per_frame *
                        g->d_head);
    in.kv = tu_xmalloc(n * 4);
    tu_rng r = {31};
    tu_fill_uniform(in.kv, n, &r);
    /* valid clocks: continue each session */
    in.fp[0] = 3;
    in.fp[1] = 5;
    in.fp[2] = 7;
    in.fp[3] = 9;
    in.sess[0] = 0;
    in.sess[1] = 1;
    in.sess[2] = 2;
    in.sess[3] = 0;
    in.N = tu_N(g);
    in.vis = tu_xmalloc((size_t)in.N);
    memset(in.vis, 0xAB, (size_t)in.N);
    return in;
}
static void upsert_in_free(upsert_in *in)
{
    free(in->kv);
    free(in->vis);
}
static void vis_untouched(const upsert_in *in)
{
    for (int64_t j = 0; j < in->N; j++)
        if (in->vis[j] != 0xAB)
            fail_msg("visible[%lld] written by a failed upsert",
                     (long long)j);
}

static void test_upsert_null(void **state)
{
    (void)state;
    rkv_layer *l = hist_layer();
    upsert_in in = upsert_in_new(l);
    const rkv_dtype F = RKV_DTYPE_F32;
    for (int commit = 0; commit < 2; commit++) {
        TU_ERR(rkv_layer_upsert(NULL, in.kv, F, 1, in.fp, in.sess, commit,
                                in.vis),
               RKV_ERR_NULL, NULL);
        LAYER_ERR(l,
                  rkv_layer_upsert(l, NULL, F, 1, in.fp, in.sess, commit,
                                   in.vis),
                  RKV_ERR_NULL, NULL);
        LAYER_ERR(l,
                  rkv_layer_upsert(l, in.kv, F, 1, NULL, in.sess, commit,
                                   in.vis),
                  RKV_ERR_NULL, NULL);
        LAYER_ERR(l,
                  rkv_layer_upsert(l, in.kv, F, 1, in.fp, NULL, commit,
                                   in.vis),
                  RKV_ERR_NULL, NULL);
        vis_untouched(&in);
    }
    upsert_in_free(&in);
    rkv_layer_destroy(l);
}

static void test_upsert_batch(void **state)
{
    (void)state;
    rkv_layer *l = hist_layer();
    upsert_in in = upsert_in_new(l);
    const rkv_dtype F = RKV_DTYPE_F32;
    LAYER_ERR(l, rkv_layer_upsert(l, in.kv, F, 0, in.fp, in.sess, 1, NULL),
              RKV_ERR_INVALID_ARG, "0");
    LAYER_ERR(l, rkv_layer_upsert(l, in.kv, F, -4, in.fp, in.sess, 1, NULL),
              RKV_ERR_INVALID_ARG, "-4");
    /* visible with B > 1 */
    LAYER_ERR(l, rkv_layer_upsert(l, in.kv, F, 2, in.fp, in.sess, 0, in.vis),
              RKV_ERR_INVALID_ARG, "2");
    LAYER_ERR(l, rkv_layer_upsert(l, in.kv, F, 3, in.fp, in.sess, 1, in.vis),
              RKV_ERR_INVALID_ARG, "3");
    vis_untouched(&in);
    /* B = 4 > S = 3, every session in range (0, 1, 2, 0): the batch size
     * is what is said, before any row's repeat is looked for */
    LAYER_ERR(l, rkv_layer_upsert(l, in.kv, F, 4, in.fp, in.sess, 1, NULL),
              RKV_ERR_INVALID_ARG, "batch B = 4; expected 1..3");
    /* ... and a session out of range wins (the reference's IndexError) */
    in.sess[3] = 3;
    LAYER_ERR(l, rkv_layer_upsert(l, in.kv, F, 4, in.fp, in.sess, 1, NULL),
              RKV_ERR_RANGE, "session_idx[3] = 3");
    in.sess[3] = 0;
    upsert_in_free(&in);
    rkv_layer_destroy(l);
}

/* A bad value in any row: nothing written for the good rows either. */
static void test_upsert_bad_rows_no_partial_write(void **state)
{
    (void)state;
    rkv_layer *l = hist_layer();
    upsert_in in = upsert_in_new(l);
    const rkv_dtype F = RKV_DTYPE_F32;
    for (int commit = 0; commit < 2; commit++)
        for (int bad = 0; bad < 3; bad++) {
            int64_t fp[3] = {3, 5, 7}, sess[3] = {0, 1, 2};
            /* negative clock in row `bad` */
            fp[bad] = -5;
            LAYER_ERR(l,
                      rkv_layer_upsert(l, in.kv, F, 3, fp, sess, commit,
                                       NULL),
                      RKV_ERR_INVALID_ARG, "-5");
            fp[bad] = INT64_MIN;
            LAYER_ERR(l,
                      rkv_layer_upsert(l, in.kv, F, 3, fp, sess, commit,
                                       NULL),
                      RKV_ERR_INVALID_ARG, NULL);
            fp[bad] = 3 + 2 * bad;
            /* session out of range in row `bad` */
            sess[bad] = 37;
            LAYER_ERR(l,
                      rkv_layer_upsert(l, in.kv, F, 3, fp, sess, commit,
                                       NULL),
                      RKV_ERR_RANGE, "37");
            sess[bad] = -1;
            LAYER_ERR(l,
                      rkv_layer_upsert(l, in.kv, F, 3, fp, sess, commit,
                                       NULL),
                      RKV_ERR_RANGE, "-1");
            sess[bad] = 3; /* == S */
            LAYER_ERR(l,
                      rkv_layer_upsert(l, in.kv, F, 3, fp, sess, commit,
                                       NULL),
                      RKV_ERR_RANGE, "3");
            sess[bad] = bad;
            /* session repeated: row `bad` repeats another row's session */
            sess[bad] = sess[(bad + 1) % 3];
            LAYER_ERR2(l,
                       rkv_layer_upsert(l, in.kv, F, 3, fp, sess, commit,
                                        NULL),
                       RKV_ERR_INVALID_ARG, RKV_ERR_RANGE, NULL);
        }
    /* B = 2, sessions {1, 1} */
    int64_t s11[2] = {1, 1}, f2[2] = {5, 5};
    LAYER_ERR2(l, rkv_layer_upsert(l, in.kv, F, 2, f2, s11, 1, NULL),
               RKV_ERR_INVALID_ARG, RKV_ERR_RANGE, "1");
    /* B = 1 with a bad value and a visible buffer: buffer untouched */
    int64_t neg = -2, s0 = 0, bigs = 5, f0 = 3;
    LAYER_ERR(l, rkv_layer_upsert(l, in.kv, F, 1, &neg, &s0, 1, in.vis),
              RKV_ERR_INVALID_ARG, "-2");
    LAYER_ERR(l, rkv_layer_upsert(l, in.kv, F, 1, &f0, &bigs, 1, in.vis),
              RKV_ERR_RANGE, "5");
    vis_untouched(&in);
    upsert_in_free(&in);
    rkv_layer_destroy(l);
}

static void test_upsert_dtype(void **state)
{
    (void)state;
    rkv_layer *l = hist_layer();
    upsert_in in = upsert_in_new(l);
    LAYER_ERR(l,
              rkv_layer_upsert(l, in.kv, RKV_DTYPE_F16, 1, in.fp, in.sess, 1,
                               in.vis),
              RKV_ERR_DTYPE, "f16");
    LAYER_ERR(l,
              rkv_layer_upsert(l, in.kv, RKV_DTYPE_BF16, 2, in.fp, in.sess,
                               1, NULL),
              RKV_ERR_DTYPE, "bf16");
    LAYER_ERR(l,
              rkv_layer_upsert(l, in.kv, (rkv_dtype)9, 1, in.fp, in.sess, 1,
                               NULL),
              RKV_ERR_DTYPE, NULL);
    vis_untouched(&in);
    /* and a bf16 layer refuses f32 input */
    rkv_geometry g = g0();
    g.dtype = RKV_DTYPE_BF16;
    rkv_layer *lb = tu_layer_new(&g);
    LAYER_ERR(lb,
              rkv_layer_upsert(lb, in.kv, RKV_DTYPE_F32, 1, in.fp, in.sess,
                               1, NULL),
              RKV_ERR_DTYPE, "f32");
    rkv_layer_destroy(lb);
    upsert_in_free(&in);
    rkv_layer_destroy(l);
}

/* ---- visibility functions ---------------------------------------------- */

static void test_visible_frames_errors(void **state)
{
    (void)state;
    rkv_layer *l = hist_layer();
    int64_t fr[5] = {-9, -9, -9, -9, -9}, n = -9;
    TU_ERR(rkv_layer_visible_frames(NULL, 0, 3, fr, &n), RKV_ERR_NULL,
           NULL);
    LAYER_ERR(l, rkv_layer_visible_frames(l, 0, 3, NULL, &n), RKV_ERR_NULL,
              NULL);
    LAYER_ERR(l, rkv_layer_visible_frames(l, 0, 3, fr, NULL), RKV_ERR_NULL,
              NULL);
    LAYER_ERR(l, rkv_layer_visible_frames(l, 3, 3, fr, &n), RKV_ERR_RANGE,
              "3");
    LAYER_ERR(l, rkv_layer_visible_frames(l, -1, 3, fr, &n), RKV_ERR_RANGE,
              "-1");
    LAYER_ERR(l, rkv_layer_visible_frames(l, 0, -6, fr, &n),
              RKV_ERR_INVALID_ARG, "-6");
    for (int i = 0; i < 5; i++)
        assert_int_equal(fr[i], -9);
    assert_int_equal(n, -9);
    rkv_layer_destroy(l);
}

static void test_visible_frames_from_clock_errors(void **state)
{
    (void)state;
    rkv_geometry g = g0();
    int64_t fr[5] = {-9, -9, -9, -9, -9}, n = -9;
    TU_ERR(rkv_visible_frames_from_clock(NULL, 3, fr, &n), RKV_ERR_NULL,
           NULL);
    TU_ERR(rkv_visible_frames_from_clock(&g, 3, NULL, &n), RKV_ERR_NULL,
           NULL);
    TU_ERR(rkv_visible_frames_from_clock(&g, 3, fr, NULL), RKV_ERR_NULL,
           NULL);
    TU_ERR(rkv_visible_frames_from_clock(&g, -7, fr, &n),
           RKV_ERR_INVALID_ARG, "-7");
    rkv_geometry bad = g;
    bad.ring_buckets = 9;
    TU_ERR(rkv_visible_frames_from_clock(&bad, 3, fr, &n),
           RKV_ERR_INVALID_ARG, "9");
    bad = g;
    bad.pinned_dilation = 0;
    TU_ERR(rkv_visible_frames_from_clock(&bad, 3, fr, &n),
           RKV_ERR_INVALID_ARG, NULL);
    for (int i = 0; i < 5; i++)
        assert_int_equal(fr[i], -9);
    assert_int_equal(n, -9);
}

static void test_row_from_frames_errors(void **state)
{
    (void)state;
    rkv_geometry g = g0();
    int64_t N = tu_N(&g);
    uint8_t *row = tu_xmalloc((size_t)N);
    memset(row, 0xAB, (size_t)N);
    int64_t ok[2] = {1, 4};
    TU_ERR(rkv_visible_row_from_frames(NULL, 0, ok, 2, row), RKV_ERR_NULL,
           NULL);
    TU_ERR(rkv_visible_row_from_frames(&g, 0, NULL, 2, row), RKV_ERR_NULL,
           NULL);
    TU_ERR(rkv_visible_row_from_frames(&g, 0, ok, 2, NULL), RKV_ERR_NULL,
           NULL);
    TU_ERR(rkv_visible_row_from_frames(&g, 3, ok, 2, row), RKV_ERR_RANGE,
           "3");
    TU_ERR(rkv_visible_row_from_frames(&g, -2, ok, 2, row), RKV_ERR_RANGE,
           "-2");
    TU_ERR(rkv_visible_row_from_frames(&g, 0, ok, -1, row),
           RKV_ERR_INVALID_ARG, "-1");
    int64_t many[6] = {0, 1, 2, 3, 4, 4};
    TU_ERR(rkv_visible_row_from_frames(&g, 0, many, 6, row),
           RKV_ERR_INVALID_ARG, "6");
    int64_t out_of_ring[2] = {1, 5}; /* RF = 4: 4 is the scratch, 5 is bad */
    TU_ERR2(rkv_visible_row_from_frames(&g, 0, out_of_ring, 2, row),
            RKV_ERR_INVALID_ARG, RKV_ERR_RANGE, "5");
    int64_t negative[2] = {-3, 4};
    TU_ERR2(rkv_visible_row_from_frames(&g, 0, negative, 2, row),
            RKV_ERR_INVALID_ARG, RKV_ERR_RANGE, "-3");
    rkv_geometry bad = g;
    bad.tokens_per_frame = 100;
    TU_ERR(rkv_visible_row_from_frames(&bad, 0, ok, 2, row),
           RKV_ERR_INVALID_ARG, "100");
    for (int64_t j = 0; j < N; j++)
        if (row[j] != 0xAB)
            fail_msg("row[%lld] written by a failed call", (long long)j);
    free(row);
}

static void test_block_mask_errors(void **state)
{
    (void)state;
    rkv_layer *l = hist_layer();
    int64_t KB = rkv_geometry_total_slots(rkv_layer_geometry(l)) / 128;
    int32_t nb[1] = {-9};
    int32_t *idx = tu_xmalloc((size_t)KB * 4);
    for (int64_t i = 0; i < KB; i++)
        idx[i] = -9;
    TU_ERR(rkv_layer_block_mask(NULL, 0, 3, nb, idx), RKV_ERR_NULL, NULL);
    LAYER_ERR(l, rkv_layer_block_mask(l, 0, 3, NULL, idx), RKV_ERR_NULL,
              NULL);
    LAYER_ERR(l, rkv_layer_block_mask(l, 0, 3, nb, NULL), RKV_ERR_NULL,
              NULL);
    LAYER_ERR(l, rkv_layer_block_mask(l, 3, 3, nb, idx), RKV_ERR_RANGE, "3");
    LAYER_ERR(l, rkv_layer_block_mask(l, -1, 3, nb, idx), RKV_ERR_RANGE,
              "-1");
    LAYER_ERR(l, rkv_layer_block_mask(l, 1, -8, nb, idx),
              RKV_ERR_INVALID_ARG, "-8");
    assert_int_equal(nb[0], -9);
    for (int64_t i = 0; i < KB; i++)
        assert_int_equal(idx[i], -9);
    free(idx);
    rkv_layer_destroy(l);
}

/* ---- attention ------------------------------------------------------------ */

typedef struct attn_in {
    float *q;
    float *out;
    float *pattern; /* copy of out's initial bytes */
    uint8_t *vis;
    int64_t sess[3];
    int64_t fp[3];
    size_t n;
    rkv_attention_args a;
} attn_in;

/* Hq 4 (H 2), Tq = T = 128, D 4, B 2 (filled in place: the args point
 * into the struct) */
static void attn_in_init(attn_in *inp, const rkv_layer *l)
{
#define in (*inp)
    memset(&in, 0, sizeof in);
    int64_t N = rkv_geometry_total_slots(rkv_layer_geometry(l));
    in.n = (size_t)(3 * 4 * 300 * 4); /* room for the largest variant */
    in.q = tu_xmalloc(in.n * 4);
    in.out = tu_xmalloc(in.n * 4);
    in.pattern = tu_xmalloc(in.n * 4);
    tu_rng r = {41};
    tu_fill_uniform(in.q, in.n, &r);
    tu_fill_uniform(in.out, in.n, &r);
    memcpy(in.pattern, in.out, in.n * 4);
    in.vis = tu_xmalloc((size_t)(3 * N));
    memset(in.vis, 1, (size_t)(3 * N));
    in.sess[0] = 1;
    in.sess[1] = 0;
    in.sess[2] = 2;
    in.fp[0] = 5;
    in.fp[1] = 3;
    in.fp[2] = 7;
    in.a.struct_size = sizeof in.a;
    in.a.batch = 2;
    in.a.n_q_heads = 4;
    in.a.n_queries = 0;
    in.a.q = in.q;
    in.a.q_dtype = RKV_DTYPE_F32;
    in.a.out = in.out;
    in.a.out_dtype = RKV_DTYPE_F32;
    in.a.session_idx = in.sess;
    in.a.frame_pos = in.fp;
    in.a.visible = NULL;
    in.a.scale = 0;
#undef in
}
static void attn_in_free(attn_in *in)
{
    free(in->q);
    free(in->out);
    free(in->pattern);
    free(in->vis);
}

typedef rkv_status (*attend_fn)(const rkv_layer *,
                                const rkv_attention_args *);

/* One bad variant of the args: fails as expected, out untouched, layer
 * unchanged; then the valid args still work. */
static void attn_expect(attend_fn fn, const rkv_layer *l, attn_in *in,
                        rkv_attention_args a, rkv_status expected,
                        const char *needle, const char *what)
{
    tu_layer_state s = tu_layer_save(l);
    tu_set_marker();
    rkv_status st = fn(l, &a);
    const char *m = rkv_last_error();
    if (st != expected)
        fail_msg("attend (%s) -> %s (%d), expected %s: '%s'", what,
                 rkv_status_str(st), (int)st, rkv_status_str(expected), m);
    tu_check_message_(what, __FILE__, __LINE__, m, needle);
    if (memcmp(in->out, in->pattern, in->n * 4) != 0)
        fail_msg("attend (%s): output written by a failed call", what);
    if (!tu_layer_same(&s, l))
        fail_msg("attend (%s): layer changed", what);
    tu_layer_state_free(&s);
}

static void attend_errors_with(attend_fn fn)
{
    rkv_layer *l = hist_layer();
    attn_in in;
    attn_in_init(&in, l);
    rkv_attention_args a = RKV_ATTENTION_ARGS_INIT;

    /* the baseline args are valid */
    float *tmp = tu_xmalloc(in.n * 4);
    a = in.a;
    a.out = tmp;
    TU_OK(fn(l, &a));
    free(tmp);

    tu_set_marker();
    assert_int_equal(fn(NULL, &in.a), RKV_ERR_NULL);
    tu_check_message_("layer NULL", __FILE__, __LINE__, rkv_last_error(),
                      NULL);
    TU_ERR(fn(l, NULL), RKV_ERR_NULL, NULL);

    /* a growing struct's size (ringkv.h, "Structs that grow") */
    a = in.a; a.struct_size = 0; /* zero-initialized without it */
    attn_expect(fn, l, &in, a, RKV_ERR_INVALID_ARG, "args->struct_size is 0",
                "struct_size 0");
    a = in.a; a.struct_size = offsetof(rkv_attention_args, pool); /* below version 1 */
    attn_expect(fn, l, &in, a, RKV_ERR_INVALID_ARG, "smaller than the first version",
                "struct_size too small");
    a = in.a; a.struct_size = sizeof a + 8; /* a newer header's */
    attn_expect(fn, l, &in, a, RKV_ERR_INVALID_ARG, "newer ringkv header",
                "struct_size too large");
    a = in.a; a.q = NULL;
    attn_expect(fn, l, &in, a, RKV_ERR_NULL, NULL, "q NULL");
    a = in.a; a.out = NULL;
    attn_expect(fn, l, &in, a, RKV_ERR_NULL, NULL, "out NULL");
    a = in.a; a.session_idx = NULL;
    attn_expect(fn, l, &in, a, RKV_ERR_NULL, NULL,
                "session_idx NULL");
    a = in.a; a.frame_pos = NULL; /* needed when visible is NULL */
    attn_expect(fn, l, &in, a, RKV_ERR_NULL, NULL, "frame_pos NULL");

    a = in.a; a.batch = 0;
    attn_expect(fn, l, &in, a, RKV_ERR_INVALID_ARG, "0", "batch 0");
    a = in.a; a.batch = -3;
    attn_expect(fn, l, &in, a, RKV_ERR_INVALID_ARG, "-3", "batch -3");

    a = in.a; a.n_q_heads = 3; /* not a multiple of H = 2 */
    attn_expect(fn, l, &in, a, RKV_ERR_INVALID_ARG, "3", "Hq 3");
    a = in.a; a.n_q_heads = 0;
    attn_expect(fn, l, &in, a, RKV_ERR_INVALID_ARG, "0", "Hq 0");
    a = in.a; a.n_q_heads = -2;
    attn_expect(fn, l, &in, a, RKV_ERR_INVALID_ARG, "-2", "Hq -2");
    a = in.a; a.n_q_heads = 1; /* fewer query heads than KV heads */
    attn_expect(fn, l, &in, a, RKV_ERR_INVALID_ARG, "1", "Hq 1 < H 2");

    a = in.a; a.n_queries = -1;
    attn_expect(fn, l, &in, a, RKV_ERR_INVALID_ARG, "-1", "n_queries -1");
    /* B*Hq*Tq*D elements overflow: refused before q is read */
    a = in.a; a.n_queries = INT64_MAX / 8;
    attn_expect(fn, l, &in, a, RKV_ERR_OVERFLOW, NULL, "n_queries huge");

    a = in.a; a.q_dtype = (rkv_dtype)8;
    attn_expect(fn, l, &in, a, RKV_ERR_DTYPE, NULL, "q_dtype 8");
    a = in.a; a.out_dtype = (rkv_dtype)-5;
    attn_expect(fn, l, &in, a, RKV_ERR_DTYPE, NULL, "out_dtype -5");

    /* session out of range in the second row */
    int64_t s_bad[2] = {1, 3};
    a = in.a; a.session_idx = s_bad;
    attn_expect(fn, l, &in, a, RKV_ERR_RANGE, "3", "session 3");
    int64_t s_neg[2] = {-1, 0};
    a = in.a; a.session_idx = s_neg;
    attn_expect(fn, l, &in, a, RKV_ERR_RANGE, "-1", "session -1");
    /* with explicit rows, sessions are still checked */
    a = in.a; a.session_idx = s_bad; a.visible = in.vis; a.frame_pos = NULL;
    attn_expect(fn, l, &in, a, RKV_ERR_RANGE, "3", "session 3 (rows)");

    /* a scale that is not a number */
    a = in.a; a.scale = NAN;
    attn_expect(fn, l, &in, a, RKV_ERR_INVALID_ARG, NULL, "scale NaN");
    a = in.a; a.scale = INFINITY;
    attn_expect(fn, l, &in, a, RKV_ERR_INVALID_ARG, NULL, "scale inf");

    /* negative clock in the second row */
    int64_t f_bad[2] = {5, -2};
    a = in.a; a.frame_pos = f_bad;
    attn_expect(fn, l, &in, a, RKV_ERR_INVALID_ARG, "-2", "frame_pos -2");

    attn_in_free(&in);
    rkv_layer_destroy(l);
}

static void test_attend_errors(void **state)
{
    (void)state;
    attend_errors_with(rkv_layer_attend);
}
static void test_attend_reference_errors(void **state)
{
    (void)state;
    attend_errors_with(rkvt_attend_reference);
}

static void test_threadpool_errors(void **state)
{
    (void)state;
    rkv_threadpool *p = (rkv_threadpool *)(uintptr_t)0x77;
    TU_ERR(rkv_threadpool_create(2, NULL), RKV_ERR_NULL, NULL);
    TU_ERR(rkv_threadpool_create(-1, &p), RKV_ERR_INVALID_ARG, "-1");
    TU_ERR(rkv_threadpool_create(1025, &p), RKV_ERR_INVALID_ARG, "1025");
    assert_ptr_equal(p, (rkv_threadpool *)(uintptr_t)0x77);
}

/* ---- model ------------------------------------------------------------------ */

static rkv_model_config small_cfg(void)
{
    rkv_layer_spec specs[2] = {{4, 4, 1}, {4, 3, 2}};
    return tu_model_cfg(2, specs, 3, 4, 2, 4, 128, RKV_DTYPE_F32);
}

/* A model with sessions: "a" (session held, clock 4), "b" (held, inside a
 * frame at clock 0, committed on layer 0 only), one free session. */
static rkv_model *busy_model(int64_t *sa, int64_t *sb)
{
    rkv_model_config cfg = small_cfg();
    rkv_model *m = NULL;
    TU_OK(rkv_model_create(&cfg, &m));
    TU_OK(rkv_model_claim(m, "a", sa));
    TU_OK(rkv_model_claim(m, "b", sb));
    size_t fn = (size_t)(2 * 2 * 128 * 4);
    float *fr = tu_xmalloc(fn * 4);
    for (int64_t f = 0; f < 5; f++) {
        TU_OK(rkv_model_begin_frame(m, 1, sa, &f));
        for (int pass = 0; pass < 5; pass++)
            for (int64_t li = 0; li < 2; li++) {
                tu_gen_frame(fr, rkv_layer_geometry(rkv_model_layer(m, li)),
                             tu_key(li, f, (uint64_t)pass));
                TU_OK(rkv_model_upsert(m, li, NULL, 1, sa, fr, RKV_DTYPE_F32,
                                       pass == 4));
            }
    }
    int64_t f0 = 0;
    TU_OK(rkv_model_begin_frame(m, 1, sb, &f0));
    tu_gen_frame(fr, rkv_layer_geometry(rkv_model_layer(m, 0)), 5);
    TU_OK(rkv_model_upsert(m, 0, NULL, 1, sb, fr, RKV_DTYPE_F32, 1));
    free(fr);
    return m;
}

/* Host buffers that share bytes with what a call writes are refused
 * (RKV_ERR_INVALID_ARG, "overlaps", naming both) before anything is
 * written: the upsert's kv, frame_pos or visible in the layer's storage;
 * attention out over q (equal, or one element on) or over the storage; a
 * view whose written bits lie inside its K/V; a visibility row over the
 * written bits; span copies into or out of the layer over it; rkv_convert
 * in place across dtypes; the model's upsert, attend and step on the CPU
 * backend. Buffers that only touch (out right after q in one allocation),
 * and an in-place rkv_convert of one dtype, are fine. */
static void test_overlapping_buffers_refused(void **state)
{
    (void)state;
    rkv_layer *l = hist_layer();
    uint8_t *store = (uint8_t *)rkv_layer_kv(l), *written = (uint8_t *)rkv_layer_written(l);
    const size_t fn = (size_t)(2 * 2 * 128 * 4); /* one frame: 2 x H x T x D */
    float *fr = tu_xmalloc(fn * 4);
    tu_fill_uniform(fr, fn, &(tu_rng){71});
    int64_t f = 9, s = 1;
    LAYER_ERR(l, rkv_layer_upsert(l, store, RKV_DTYPE_F32, 1, &f, &s, 1, NULL),
              RKV_ERR_INVALID_ARG, "kv (");
    LAYER_ERR(l, rkv_layer_upsert(l, store + 4096, RKV_DTYPE_F32, 1, &f, &s, 1, NULL),
              RKV_ERR_INVALID_ARG, "overlaps kv");
    LAYER_ERR(l, rkv_layer_upsert(l, fr, RKV_DTYPE_F32, 1, &f, &s, 1, written),
              RKV_ERR_INVALID_ARG, "overlaps visible");
    LAYER_ERR(l, rkv_layer_upsert(l, fr, RKV_DTYPE_F32, 1, (const int64_t *)written, &s, 1,
                                  NULL),
              RKV_ERR_INVALID_ARG, "overlaps frame_pos");

    /* attention: out over q, one element on, over the storage; touching is fine */
    const size_t qn = (size_t)(2 * 128 * 4); /* B 1 x Hq 2 x Tq 128 x D 4 */
    float *qo = tu_xmalloc(2 * qn * 4);
    tu_fill_uniform(qo, 2 * qn, &(tu_rng){72});
    rkv_attention_args a = RKV_ATTENTION_ARGS_INIT;
    a.batch = 1;
    a.n_q_heads = 2;
    a.q = qo;
    a.q_dtype = a.out_dtype = RKV_DTYPE_F32;
    a.session_idx = &s;
    a.frame_pos = &f;
    a.out = qo;
    float *before = tu_xmalloc(2 * qn * 4);
    memcpy(before, qo, 2 * qn * 4);
    LAYER_ERR(l, rkv_layer_attend(l, &a), RKV_ERR_INVALID_ARG, "out (");
    a.out = qo + 1;
    LAYER_ERR(l, rkv_layer_attend(l, &a), RKV_ERR_INVALID_ARG, "overlaps q");
    a.out = qo - 1 + qn; /* its last element is q's first one on: shares q's last */
    LAYER_ERR(l, rkv_layer_attend(l, &a), RKV_ERR_INVALID_ARG, "overlaps q");
    a.out_dtype = RKV_DTYPE_BF16;
    a.out = store;
    LAYER_ERR(l, rkv_layer_attend(l, &a), RKV_ERR_INVALID_ARG, "the ring's K/V storage");
    LAYER_ERR(l, rkvt_attend_reference(l, &a), RKV_ERR_INVALID_ARG, "overlaps");
    assert_memory_equal(qo, before, 2 * qn * 4);
    a.out_dtype = RKV_DTYPE_F32;
    a.out = qo + qn;
    TU_OK(rkv_layer_attend(l, &a));
    assert_memory_equal(qo, before, qn * 4);

    /* wrapped storage: written bits inside the K/V buffer; a row over the
     * written bits; an output over the storage */
    rkv_layer *w = NULL;
    const rkv_backend_storage bad = {store, store + 64, NULL};
    TU_OK(rkv_layer_wrap(NULL, NULL, rkv_layer_geometry(l), &bad, &w));
    LAYER_ERR(l, rkv_layer_upsert(w, fr, RKV_DTYPE_F32, 1, &f, &s, 1, NULL),
              RKV_ERR_INVALID_ARG, "overlaps");
    rkv_layer_destroy(w);
    const int64_t s0 = 0, f3 = 3;
    LAYER_ERR(l, rkv_layer_visible_row(l, &s0, &f3, written + 5), RKV_ERR_INVALID_ARG,
              "row (");
    a.out = store;
    LAYER_ERR(l, rkv_layer_attend(l, &a), RKV_ERR_INVALID_ARG, "overlaps");

    /* span copies over the layer itself */
    LAYER_ERR(l, rkv_layer_read_span(l, 0, RKV_SPAN_V, 1, store + 8), RKV_ERR_INVALID_ARG,
              "dst (");
    LAYER_ERR(l, rkv_layer_read_span(l, 0, RKV_SPAN_K, 0, written), RKV_ERR_INVALID_ARG,
              "the layer's written bits");
    LAYER_ERR(l, rkv_layer_write_span(l, 0, RKV_SPAN_K, 0, store + 4), RKV_ERR_INVALID_ARG,
              "overlaps src");
    const size_t piece = tu_span_bytes(l, RKV_SPAN_K);
    TU_OK(rkv_layer_write_span(l, 0, RKV_SPAN_K, 0, store + piece)); /* another piece */
    assert_memory_equal(store, store + piece, piece);

    /* rkv_convert across dtypes in place */
    float c[8] = {1, 2, 3, 4, 5, 6, 7, 8}, c0[8];
    memcpy(c0, c, sizeof c);
    TU_ERR(rkv_convert(c, RKV_DTYPE_F32, c, RKV_DTYPE_F16, 8), RKV_ERR_INVALID_ARG,
           "rkv_convert: dst");
    TU_ERR(rkv_convert(c, RKV_DTYPE_F16, c + 1, RKV_DTYPE_F32, 4), RKV_ERR_INVALID_ARG,
           "overlaps src");
    assert_memory_equal(c, c0, sizeof c);
    TU_OK(rkv_convert(c, RKV_DTYPE_F32, c, RKV_DTYPE_F32, 8));
    assert_memory_equal(c, c0, sizeof c);
    free(before);
    rkv_layer_destroy(l);

    /* the model on the CPU backend: "b" has an open frame */
    int64_t sa, sb;
    rkv_model *m = busy_model(&sa, &sb);
    const void *layer1 = rkv_layer_kv(rkv_model_layer(m, 1));
    int64_t rows[1] = {sb};
    MODEL_ERR(m, rkv_model_upsert(m, 1, NULL, 1, rows, layer1, RKV_DTYPE_F32, 0),
              RKV_ERR_INVALID_ARG, "rkv_model_upsert: ");
    a.n_q_heads = 4;
    const size_t mq = (size_t)(4 * 128 * 4);
    float *mqo = tu_xmalloc(2 * mq * 4);
    tu_fill_uniform(mqo, 2 * mq, &(tu_rng){73});
    a.q = a.out = mqo;
    MODEL_ERR(m, rkv_model_attend(m, 0, NULL, 1, rows, &a), RKV_ERR_INVALID_ARG, "overlaps q");
    /* the step checks the attention before its upsert: nothing written */
    MODEL_ERR(m, rkv_model_step(m, 1, 1, rows, fr, RKV_DTYPE_F32, 1, &a), RKV_ERR_INVALID_ARG,
              "overlaps q");
    a.out = (void *)layer1;
    MODEL_ERR(m, rkv_model_frame_attend(m, 1, &a), RKV_ERR_INVALID_ARG, "overlaps");
    a.out = mqo + mq;
    TU_OK(rkv_model_step(m, 1, 1, rows, fr, RKV_DTYPE_F32, 1, &a));
    free(mqo);
    free(qo);
    free(fr);
    rkv_model_destroy(m);
}

static void test_preset_errors(void **state)
{
    (void)state;
    rkv_model_config cfg, before;
    memset(&cfg, 0x5C, sizeof cfg);
    memcpy(&before, &cfg, sizeof cfg);
    TU_ERR(rkv_model_preset(NULL, 0, &cfg), RKV_ERR_NULL, NULL);
    TU_ERR(rkv_model_preset("demo", 0, NULL), RKV_ERR_NULL, NULL);
    TU_ERR(rkv_model_preset("waypoint-2-4k", 0, &cfg), RKV_ERR_NOT_FOUND,
           "waypoint-2-4k");
    TU_ERR(rkv_model_preset("", 1, &cfg), RKV_ERR_NOT_FOUND, NULL);
    assert_memory_equal(&cfg, &before, sizeof cfg);
}

static void test_config_errors(void **state)
{
    (void)state;
    rkv_model_config cfg = small_cfg();
    rkv_geometry g, gb;
    memset(&g, 0x5C, sizeof g);
    memcpy(&gb, &g, sizeof g);
    TU_ERR(rkv_model_config_layer_geometry(NULL, 0, &g), RKV_ERR_NULL,
           NULL);
    TU_ERR(rkv_model_config_layer_geometry(&cfg, 0, NULL), RKV_ERR_NULL,
           NULL);
    TU_ERR(rkv_model_config_layer_geometry(&cfg, 2, &g), RKV_ERR_RANGE, "2");
    TU_ERR(rkv_model_config_layer_geometry(&cfg, -1, &g), RKV_ERR_RANGE,
           "-1");
    assert_memory_equal(&g, &gb, sizeof g);

    size_t ps = 12345, tot = 67890;
    TU_ERR(rkv_model_config_memory(NULL, &ps, &tot), RKV_ERR_NULL, NULL);
    rkv_model_config bad = cfg;
    bad.n_layers = 0;
    TU_ERR(rkv_model_config_memory(&bad, &ps, &tot), RKV_ERR_INVALID_ARG,
           NULL);
    bad = cfg;
    bad.layers[1].ring_buckets = 5; /* RF 4 */
    TU_ERR(rkv_model_config_memory(&bad, &ps, &tot), RKV_ERR_INVALID_ARG,
           "5");
    bad = cfg;
    bad.num_sessions = INT64_MAX / 4;
    TU_ERR(rkv_model_config_memory(&bad, &ps, &tot), RKV_ERR_OVERFLOW, NULL);
    /* a growing struct's size (ringkv.h, "Structs that grow") */
    const size_t sizes[] = {0, sizeof cfg - 8, sizeof cfg + 8};
    const char *says[] = {"cfg->struct_size is 0", "smaller than the first version",
                          "newer ringkv header"};
    for (int i = 0; i < 3; i++) {
        bad = cfg;
        bad.struct_size = sizes[i];
        TU_ERR(rkv_model_config_memory(&bad, &ps, &tot), RKV_ERR_INVALID_ARG, says[i]);
        TU_ERR(rkv_model_config_layer_geometry(&bad, 0, &g), RKV_ERR_INVALID_ARG, says[i]);
        rkv_model *sentinel = (rkv_model *)(uintptr_t)0x55, *m = sentinel;
        TU_ERR(rkv_model_create(&bad, &m), RKV_ERR_INVALID_ARG, says[i]);
        assert_ptr_equal(m, sentinel);
    }
    assert_memory_equal(&g, &gb, sizeof g);
    assert_int_equal(ps, 12345);
    assert_int_equal(tot, 67890);
    /* a config that says it is this header's is accepted */
    TU_OK(rkv_model_config_memory(&cfg, &ps, &tot));
    assert_true(ps > 0 && tot == ps * (size_t)cfg.num_sessions);
    /* either output alone (the total: rkv_model_memory_bytes's replacement) */
    size_t tot2 = 0, ps2 = 0;
    TU_OK(rkv_model_config_memory(&cfg, NULL, &tot2));
    assert_int_equal(tot2, tot);
    TU_OK(rkv_model_config_memory(&cfg, &ps2, NULL));
    assert_int_equal(ps2, ps);
    TU_OK(rkv_model_config_memory(&cfg, NULL, NULL));
}

static void test_model_create_errors(void **state)
{
    (void)state;
    rkv_model *sentinel = (rkv_model *)(uintptr_t)0x55, *m = sentinel;
    rkv_model_config cfg = small_cfg();
    TU_ERR(rkv_model_create(NULL, &m), RKV_ERR_NULL, NULL);
    TU_ERR(rkv_model_create(&cfg, NULL), RKV_ERR_NULL, NULL);
    /* scope: the layer a message names ("layer 1: "), or NULL for a model
     * field, whose message names no layer (every layer has it) */
    static const struct {
        int what;
        rkv_status st;
        const char *needle, *scope;
    } cases[] = {
        {0, RKV_ERR_INVALID_ARG, "0", NULL},                 /* n_layers 0 */
        {1, RKV_ERR_INVALID_ARG, "257", NULL},               /* n_layers 257 */
        {2, RKV_ERR_INVALID_ARG, "n_q_heads = 3", NULL},     /* Hq 3, H 2 */
        {3, RKV_ERR_INVALID_ARG, "n_q_heads = 0", NULL},     /* Hq 0 */
        {4, RKV_ERR_INVALID_ARG, "num_sessions must be >= 1; got 0", NULL},
        {5, RKV_ERR_INVALID_ARG, "ring_buckets (9)", "layer 1: "}, /* RB 9 > RF 4 */
        {6, RKV_ERR_INVALID_ARG, "tokens_per_frame (100)", NULL},
        {7, RKV_ERR_DTYPE, "dtype 5", NULL},
        {8, RKV_ERR_INVALID_ARG, "pinned_dilation must be >= 1; got -1", "layer 0: "},
        {9, RKV_ERR_INVALID_ARG, "n_kv_heads must be >= 1; got 0", NULL},
        {10, RKV_ERR_OVERFLOW, "too large", "layer 0: "},  /* huge S: layer 0's bytes */
        {11, RKV_ERR_INVALID_ARG, "-3", NULL},             /* n_layers -3 */
        {12, RKV_ERR_INVALID_ARG, "d_head must be >= 1; got 0", NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        rkv_model_config c = small_cfg();
        switch (cases[i].what) {
        case 0: c.n_layers = 0; break;
        case 1: c.n_layers = RKV_MAX_LAYERS + 1; break;
        case 2: c.n_q_heads = 3; break;
        case 3: c.n_q_heads = 0; break;
        case 4: c.num_sessions = 0; break;
        case 5: c.layers[1].ring_buckets = 9; break;
        case 6: c.tokens_per_frame = 100; break;
        case 7: c.dtype = (rkv_dtype)5; break;
        case 8: c.layers[0].pinned_dilation = -1; break;
        case 9: c.n_kv_heads = 0; break;
        case 10: c.num_sessions = INT64_MAX / 8; break;
        case 11: c.n_layers = -3; break;
        case 12: c.d_head = 0; break;
        }
        m = sentinel;
        TU_ERR(rkv_model_create(&c, &m), cases[i].st, cases[i].needle);
        assert_ptr_equal(m, sentinel);
        if (cases[i].scope ? strncmp(rkv_last_error(), cases[i].scope,
                                     strlen(cases[i].scope)) != 0
                           : strstr(rkv_last_error(), "layer ") != NULL)
            fail_msg("case %d: '%s' (expected %s%s)", cases[i].what, rkv_last_error(),
                     cases[i].scope ? "the prefix " : "no layer named",
                     cases[i].scope ? cases[i].scope : "");
        /* the memory query refuses it the same way */
        size_t ps = 1, tot = 2;
        TU_ERR(rkv_model_config_memory(&c, &ps, &tot), cases[i].st,
               cases[i].needle);
        assert_int_equal(ps, 1);
        assert_int_equal(tot, 2);
    }
}

/* A valid config whose host tables do not fit (2^40 sessions of the demo
 * preset): RKV_ERR_NO_MEMORY naming the bytes asked for and the K/V bytes
 * the layers would need on top (rkv_model_config_memory's total), *out
 * untouched (skipped under AddressSanitizer, whose allocator aborts on such
 * requests instead of returning NULL). */
static void test_model_create_no_memory(void **state)
{
    (void)state;
#if defined(__SANITIZE_ADDRESS__)
    skip();
#else
    rkv_model_config c;
    TU_OK(rkv_model_preset("demo", 0, &c));
    c.num_sessions = (int64_t)1 << 40;
    size_t per = 0, total = 0;
    TU_OK(rkv_model_config_memory(&c, &per, &total));
    rkv_model *m = (rkv_model *)(uintptr_t)0x77;
    TU_ERR(rkv_model_create(&c, &m), RKV_ERR_NO_MEMORY, "cannot allocate ");
    assert_ptr_equal(m, (rkv_model *)(uintptr_t)0x77);
    char want[96];
    snprintf(want, sizeof want, "1099511627776 sessions and 2 layers (the layers' K/V would "
                                "take %zu bytes more)", total);
    if (!strstr(rkv_last_error(), want) || !strstr(rkv_last_error(), " bytes of host tables"))
        fail_msg("'%s' (expected the bytes and '%s')", rkv_last_error(), want);
#endif
}

static void test_model_layer_out_of_range(void **state)
{
    (void)state;
    int64_t sa, sb;
    rkv_model *m = busy_model(&sa, &sb);
    assert_null(rkv_model_layer(m, -1));
    assert_null(rkv_model_layer(m, 2));
    assert_null(rkv_model_layer(m, INT64_MAX));
    assert_non_null(rkv_model_layer(m, 1));
    rkv_model_destroy(m);
}

static void test_claim_lookup_errors(void **state)
{
    (void)state;
    int64_t sa, sb, s = -77;
    rkv_model *m = busy_model(&sa, &sb);
    MODEL_ERR(m, rkv_model_claim(m, NULL, &s), RKV_ERR_NULL, NULL);
    MODEL_ERR(m, rkv_model_claim(m, "c", NULL), RKV_ERR_NULL, NULL);
    TU_ERR(rkv_model_claim(NULL, "c", &s), RKV_ERR_NULL, NULL);
    MODEL_ERR(m, rkv_model_claim(m, "", &s), RKV_ERR_INVALID_ARG, NULL);
    char longid[RKV_MAX_REQUEST_ID + 1];
    memset(longid, 'x', RKV_MAX_REQUEST_ID);
    longid[RKV_MAX_REQUEST_ID] = '\0'; /* 256 bytes + NUL: too long */
    MODEL_ERR(m, rkv_model_claim(m, longid, &s), RKV_ERR_INVALID_ARG,
              NULL);
    longid[RKV_MAX_REQUEST_ID - 1] = '\0'; /* 255 bytes + NUL: the limit */
    assert_int_equal(s, -77);
    TU_OK(rkv_model_claim(m, longid, &s));
    assert_true(s >= 0 && s < 3 && s != sa && s != sb);
    int64_t s2 = -1;
    TU_OK(rkv_model_lookup(m, longid, &s2));
    assert_int_equal(s2, s);

    s = -77;
    TU_ERR(rkv_model_lookup(NULL, "a", &s), RKV_ERR_NULL, NULL);
    TU_ERR(rkv_model_lookup(m, NULL, &s), RKV_ERR_NULL, NULL);
    TU_ERR(rkv_model_lookup(m, "a", NULL), RKV_ERR_NULL, NULL);
    TU_ERR(rkv_model_lookup(m, "ghost", &s), RKV_ERR_NOT_FOUND, "ghost");
    TU_ERR2(rkv_model_lookup(m, "", &s), RKV_ERR_NOT_FOUND,
            RKV_ERR_INVALID_ARG, NULL);
    assert_int_equal(s, -77);
    /* full: every session held (and the failed claim changes nothing) */
    MODEL_ERR(m, rkv_model_claim(m, "d", &s), RKV_ERR_FULL, NULL);
    assert_int_equal(s, -77);
    TU_ERR(rkv_model_lookup(m, "d", &s), RKV_ERR_NOT_FOUND, "d");
    rkv_model_destroy(m);
}

static void test_release_reset_clock_errors(void **state)
{
    (void)state;
    int64_t sa, sb, c = -77;
    rkv_model *m = busy_model(&sa, &sb);
    /* session 2 is not held */
    TU_ERR(rkv_model_release(NULL, 0), RKV_ERR_NULL, NULL);
    MODEL_ERR(m, rkv_model_release(m, 3), RKV_ERR_RANGE, "3");
    MODEL_ERR(m, rkv_model_release(m, -1), RKV_ERR_RANGE, "-1");
    MODEL_ERR(m, rkv_model_release(m, 2), RKV_ERR_STATE, "2");
    TU_ERR(rkv_model_reset(NULL, 0), RKV_ERR_NULL, NULL);
    MODEL_ERR(m, rkv_model_reset(m, 3), RKV_ERR_RANGE, "3");
    MODEL_ERR(m, rkv_model_reset(m, -9), RKV_ERR_RANGE, "-9");
    MODEL_ERR(m, rkv_model_reset(m, 2), RKV_ERR_STATE, "2");
    TU_ERR(rkv_model_clock(NULL, 0, &c), RKV_ERR_NULL, NULL);
    TU_ERR(rkv_model_clock(m, 0, NULL), RKV_ERR_NULL, NULL);
    TU_ERR(rkv_model_clock(m, 3, &c), RKV_ERR_RANGE, "3");
    TU_ERR(rkv_model_clock(m, -1, &c), RKV_ERR_RANGE, "-1");
    TU_FAILS(rkv_model_clock(m, 2, &c), "2"); /* not held */
    assert_int_equal(c, -77);
    /* ids are still held after all that */
    int64_t s = -1;
    TU_OK(rkv_model_lookup(m, "a", &s));
    assert_int_equal(s, sa);
    TU_OK(rkv_model_lookup(m, "b", &s));
    assert_int_equal(s, sb);
    rkv_model_destroy(m);
}

static void test_begin_frame_errors(void **state)
{
    (void)state;
    int64_t sa, sb;
    rkv_model *m = busy_model(&sa, &sb);
    int64_t s1[1] = {sa}, f5[1] = {5};
    TU_ERR(rkv_model_begin_frame(NULL, 1, s1, f5), RKV_ERR_NULL, NULL);
    MODEL_ERR(m, rkv_model_begin_frame(m, 1, NULL, f5), RKV_ERR_NULL,
              NULL);
    MODEL_ERR(m, rkv_model_begin_frame(m, 1, s1, NULL), RKV_ERR_NULL,
              NULL);
    MODEL_ERR(m, rkv_model_begin_frame(m, 0, s1, f5), RKV_ERR_INVALID_ARG,
              "0");
    MODEL_ERR(m, rkv_model_begin_frame(m, -2, s1, f5), RKV_ERR_INVALID_ARG,
              "-2");
    int64_t sr[2] = {sa, 3}, fr[2] = {5, 0};
    MODEL_ERR(m, rkv_model_begin_frame(m, 2, sr, fr), RKV_ERR_RANGE, "3");
    /* not held */
    int64_t sf[2] = {sa, 2}, ff[2] = {5, 0};
    MODEL_FAILS(m, rkv_model_begin_frame(m, 2, sf, ff), "2");
    /* a wrong clock in row 0 and an unclaimed session in row 1: every row
     * must be held before any clock is looked at, so the unclaimed row is
     * what is reported (fuzz/regressions/api/begin-held-before-clock) */
    int64_t sh[2] = {sa, 2}, fh[2] = {7, 0};
    MODEL_ERR(m, rkv_model_begin_frame(m, 2, sh, fh), RKV_ERR_STATE, "not claimed");
    /* repeated session */
    int64_t sd[2] = {sa, sa}, fd[2] = {5, 5};
    MODEL_FAILS(m, rkv_model_begin_frame(m, 2, sd, fd), NULL);
    /* clocks: negative, skipped, repeated, old; in either row */
    static const int64_t bad_clocks[] = {-1, 6, 4, 0, 1000};
    for (size_t i = 0; i < 5; i++) {
        int64_t f1[1] = {bad_clocks[i]};
        char needle[32];
        snprintf(needle, sizeof needle, "%lld", (long long)bad_clocks[i]);
        MODEL_ERR(m, rkv_model_begin_frame(m, 1, s1, f1), RKV_ERR_CLOCK,
                  needle);
    }
    /* "b" is inside a frame: begin_frame again refused, alone or in a
     * batch whose other row is fine */
    int64_t fb[1] = {1};
    /* (the header's sentence ends "RKV_ERR_CLOCK otherwise"; the library
     * answers RKV_ERR_STATE here: both accepted, see the report) */
    MODEL_ERR2(m, rkv_model_begin_frame(m, 1, &sb, fb), RKV_ERR_CLOCK,
               RKV_ERR_STATE, NULL);
    int64_t sab[2] = {sa, sb}, fab[2] = {5, 1};
    MODEL_ERR2(m, rkv_model_begin_frame(m, 2, sab, fab), RKV_ERR_CLOCK,
               RKV_ERR_STATE, NULL);
    /* the good row was not begun: an upsert on it is refused */
    size_t fn = (size_t)(2 * 2 * 128 * 4);
    float *kv = tu_xcalloc(fn, 4);
    MODEL_ERR(m, rkv_model_upsert(m, 0, NULL, 1, s1, kv, RKV_DTYPE_F32, 0),
              RKV_ERR_STATE, NULL);
    free(kv);
    rkv_model_destroy(m);
}

static void test_model_upsert_errors(void **state)
{
    (void)state;
    int64_t sa, sb;
    rkv_model *m = busy_model(&sa, &sb);
    size_t fn = (size_t)(2 * 2 * 128 * 4);
    float *kv = tu_xmalloc(fn * 3 * 4);
    tu_rng r = {51};
    tu_fill_uniform(kv, fn * 3, &r);
    int64_t s[1] = {sb};
    TU_ERR(rkv_model_upsert(NULL, 1, NULL, 1, s, kv, RKV_DTYPE_F32, 0),
           RKV_ERR_NULL, NULL);
    MODEL_ERR(m, rkv_model_upsert(m, 1, NULL, 1, NULL, kv, RKV_DTYPE_F32, 0),
              RKV_ERR_NULL, NULL);
    MODEL_ERR(m, rkv_model_upsert(m, 1, NULL, 1, s, NULL, RKV_DTYPE_F32, 0),
              RKV_ERR_NULL, NULL);
    MODEL_ERR(m, rkv_model_upsert(m, 2, NULL, 1, s, kv, RKV_DTYPE_F32, 0),
              RKV_ERR_RANGE, "2");
    MODEL_ERR(m, rkv_model_upsert(m, -1, NULL, 1, s, kv, RKV_DTYPE_F32, 0),
              RKV_ERR_RANGE, "-1");
    MODEL_ERR(m, rkv_model_upsert(m, 1, NULL, 0, s, kv, RKV_DTYPE_F32, 0),
              RKV_ERR_INVALID_ARG, "0");
    int64_t sr[1] = {3};
    MODEL_ERR(m, rkv_model_upsert(m, 1, NULL, 1, sr, kv, RKV_DTYPE_F32, 1),
              RKV_ERR_RANGE, "3");
    MODEL_ERR(m, rkv_model_upsert(m, 1, NULL, 1, s, kv, RKV_DTYPE_BF16, 1),
              RKV_ERR_DTYPE, "bf16");
    MODEL_ERR(m, rkv_model_upsert(m, 1, NULL, 1, s, kv, (rkv_dtype)4, 1),
              RKV_ERR_DTYPE, NULL);
    /* not inside a frame: "a" (between frames) and session 2 (not held) */
    int64_t sna[1] = {sa}, snh[1] = {2};
    MODEL_ERR(m, rkv_model_upsert(m, 1, NULL, 1, sna, kv, RKV_DTYPE_F32, 1),
              RKV_ERR_STATE, NULL);
    MODEL_FAILS(m, rkv_model_upsert(m, 1, NULL, 1, snh, kv, RKV_DTYPE_F32, 1),
                NULL);
    /* a batch with one row inside a frame and one not: nothing written */
    int64_t mix[2] = {sb, sa};
    MODEL_ERR(m, rkv_model_upsert(m, 1, NULL, 2, mix, kv, RKV_DTYPE_F32, 1),
              RKV_ERR_STATE, NULL);
    /* repeated session */
    int64_t dup[2] = {sb, sb};
    MODEL_FAILS(m, rkv_model_upsert(m, 1, NULL, 2, dup, kv, RKV_DTYPE_F32, 1),
                NULL);
    /* and "b"'s frame still ends normally afterwards */
    TU_OK(rkv_model_upsert(m, 1, NULL, 1, s, kv, RKV_DTYPE_F32, 1));
    int64_t c = -5;
    TU_OK(rkv_model_clock(m, sb, &c));
    assert_int_equal(c, 0);
    free(kv);
    rkv_model_destroy(m);
}

static void test_model_attend_errors(void **state)
{
    (void)state;
    int64_t sa, sb;
    rkv_model *m = busy_model(&sa, &sb);
    int64_t Hq = 4, T = 128, D = 4;
    size_t n = (size_t)(Hq * T * D);
    float *q = tu_xmalloc(n * 4), *out = tu_xmalloc(n * 4),
          *pat = tu_xmalloc(n * 4);
    tu_rng r = {61};
    tu_fill_uniform(q, n, &r);
    tu_fill_uniform(out, n, &r);
    memcpy(pat, out, n * 4);
    rkv_attention_args a = RKV_ATTENTION_ARGS_INIT;
    a.batch = 1;
    a.n_q_heads = Hq;
    a.q = q;
    a.q_dtype = RKV_DTYPE_F32;
    a.out = out;
    a.out_dtype = RKV_DTYPE_F32;
    int64_t s[1] = {sb};
    TU_ERR(rkv_model_attend(NULL, 0, NULL, 1, s, &a), RKV_ERR_NULL, NULL);
    MODEL_ERR(m, rkv_model_attend(m, 0, NULL, 1, NULL, &a), RKV_ERR_NULL,
              NULL);
    MODEL_ERR(m, rkv_model_attend(m, 0, NULL, 1, s, NULL), RKV_ERR_NULL, NULL);
    MODEL_ERR(m, rkv_model_attend(m, 2, NULL, 1, s, &a), RKV_ERR_RANGE, "2");
    MODEL_ERR(m, rkv_model_attend(m, -1, NULL, 1, s, &a), RKV_ERR_RANGE, "-1");
    MODEL_ERR(m, rkv_model_attend(m, 0, NULL, 0, s, &a), RKV_ERR_INVALID_ARG,
              "0");
    int64_t sr[1] = {7};
    MODEL_ERR(m, rkv_model_attend(m, 0, NULL, 1, sr, &a), RKV_ERR_RANGE, "7");
    rkv_attention_args b = a;
    b.n_q_heads = 3; /* H = 2 */
    MODEL_ERR(m, rkv_model_attend(m, 0, NULL, 1, s, &b), RKV_ERR_INVALID_ARG,
              "3");
    b.n_q_heads = 2 * Hq; /* a multiple of H, but not this model's Hq */
    MODEL_ERR(m, rkv_model_attend(m, 0, NULL, 1, s, &b), RKV_ERR_INVALID_ARG,
              "8");
    b = a;
    b.q = NULL;
    MODEL_ERR(m, rkv_model_attend(m, 0, NULL, 1, s, &b), RKV_ERR_NULL, NULL);
    b = a;
    b.struct_size = 0;
    MODEL_ERR(m, rkv_model_attend(m, 0, NULL, 1, s, &b), RKV_ERR_INVALID_ARG,
              "rkv_model_attend: args->struct_size is 0");
    /* not inside a frame (session 2: not held) */
    int64_t snh[1] = {2};
    MODEL_FAILS(m, rkv_model_attend(m, 0, NULL, 1, snh, &a), NULL);
    assert_memory_equal(out, pat, n * 4);
    /* the valid call works */
    TU_OK(rkv_model_attend(m, 0, NULL, 1, s, &a));
    assert_true(memcmp(out, pat, n * 4) != 0);
    free(q);
    free(out);
    free(pat);
    rkv_model_destroy(m);
}

/* The per-pass calls on the current batch, end/abandon/synchronize: every
 * refusal changes nothing (model, clocks, output buffer). busy_model: "b"
 * is the open batch (frame 0, committed on layer 0), "a" between frames. */
static void test_frame_calls_errors(void **state)
{
    (void)state;
    int64_t sa, sb;
    rkv_model *m = busy_model(&sa, &sb);
    size_t fn = (size_t)(2 * 2 * 128 * 4), n = (size_t)(4 * 128 * 4);
    float *kv = tu_xmalloc(fn * 4), *q = tu_xmalloc(n * 4), *out = tu_xmalloc(n * 4),
          *pat = tu_xmalloc(n * 4);
    tu_rng r = {71};
    tu_fill_uniform(kv, fn, &r);
    tu_fill_uniform(q, n, &r);
    tu_fill_uniform(out, n, &r);
    memcpy(pat, out, n * 4);
    rkv_attention_args a = RKV_ATTENTION_ARGS_INIT;
    a.n_q_heads = 4;
    a.q = q;
    a.q_dtype = RKV_DTYPE_F32;
    a.out = out;
    a.out_dtype = RKV_DTYPE_F32;

    TU_ERR(rkv_model_frame_upsert(NULL, 0, kv, RKV_DTYPE_F32, 0), RKV_ERR_NULL, NULL);
    MODEL_ERR(m, rkv_model_frame_upsert(m, 2, kv, RKV_DTYPE_F32, 0), RKV_ERR_RANGE, "2");
    MODEL_ERR(m, rkv_model_frame_upsert(m, -1, kv, RKV_DTYPE_F32, 0), RKV_ERR_RANGE, "-1");
    MODEL_ERR(m, rkv_model_frame_upsert(m, 1, NULL, RKV_DTYPE_F32, 1), RKV_ERR_NULL, "kv");
    MODEL_ERR(m, rkv_model_frame_upsert(m, 1, kv, RKV_DTYPE_BF16, 1), RKV_ERR_DTYPE, "bf16");
    MODEL_ERR(m, rkv_model_frame_upsert(m, 1, kv, (rkv_dtype)9, 1), RKV_ERR_DTYPE, NULL);

    TU_ERR(rkv_model_frame_attend(NULL, 0, &a), RKV_ERR_NULL, NULL);
    MODEL_ERR(m, rkv_model_frame_attend(m, 5, &a), RKV_ERR_RANGE, "5");
    MODEL_ERR(m, rkv_model_frame_attend(m, 0, NULL), RKV_ERR_NULL, "args");
    rkv_attention_args b = a;
    b.n_q_heads = 8;
    MODEL_ERR(m, rkv_model_frame_attend(m, 0, &b), RKV_ERR_INVALID_ARG, "8");
    b = a;
    b.q = NULL;
    MODEL_ERR(m, rkv_model_frame_attend(m, 0, &b), RKV_ERR_NULL, NULL);
    b = a;
    b.scale = -INFINITY;
    MODEL_ERR(m, rkv_model_frame_attend(m, 0, &b), RKV_ERR_INVALID_ARG, "scale");
    b = a;
    b.out_dtype = (rkv_dtype)7;
    MODEL_ERR(m, rkv_model_frame_attend(m, 0, &b), RKV_ERR_DTYPE, NULL);
    b = a;
    b.struct_size = sizeof b + 16;
    MODEL_ERR(m, rkv_model_frame_attend(m, 0, &b), RKV_ERR_INVALID_ARG, "newer ringkv header");

    /* step: each half's refusal, nothing upserted */
    TU_ERR(rkv_model_frame_step(NULL, 0, kv, RKV_DTYPE_F32, 1, &a), RKV_ERR_NULL, NULL);
    MODEL_ERR(m, rkv_model_frame_step(m, 3, kv, RKV_DTYPE_F32, 1, &a), RKV_ERR_RANGE, "3");
    MODEL_ERR(m, rkv_model_frame_step(m, 1, NULL, RKV_DTYPE_F32, 1, &a), RKV_ERR_NULL, "kv");
    MODEL_ERR(m, rkv_model_frame_step(m, 1, kv, RKV_DTYPE_F16, 1, &a), RKV_ERR_DTYPE, NULL);
    MODEL_ERR(m, rkv_model_frame_step(m, 1, kv, RKV_DTYPE_F32, 1, NULL), RKV_ERR_NULL, "args");
    b = a;
    b.q = NULL;
    MODEL_ERR(m, rkv_model_frame_step(m, 1, kv, RKV_DTYPE_F32, 1, &b), RKV_ERR_NULL, NULL);
    b = a;
    b.n_queries = -3;
    MODEL_ERR(m, rkv_model_frame_step(m, 1, kv, RKV_DTYPE_F32, 1, &b), RKV_ERR_INVALID_ARG,
              NULL);
    b = a;
    b.struct_size = 0;
    MODEL_ERR(m, rkv_model_frame_step(m, 1, kv, RKV_DTYPE_F32, 1, &b), RKV_ERR_INVALID_ARG,
              "rkv_model_frame_step: args->struct_size is 0");
    assert_memory_equal(out, pat, n * 4);

    /* a second batch while "b"'s is open (a's clock is right: 5) */
    int64_t f5 = 5;
    MODEL_ERR(m, rkv_model_begin_frame(m, 1, &sa, &f5), RKV_ERR_STATE, "open");

    TU_ERR(rkv_model_end_frame(NULL), RKV_ERR_NULL, NULL);
    TU_ERR(rkv_model_abandon_frame(NULL), RKV_ERR_NULL, NULL);
    TU_ERR(rkv_model_synchronize(NULL), RKV_ERR_NULL, NULL);
    TU_OK(rkv_model_synchronize(m));

    /* no batch at all */
    TU_OK(rkv_model_abandon_frame(m));
    MODEL_ERR(m, rkv_model_frame_upsert(m, 1, kv, RKV_DTYPE_F32, 1), RKV_ERR_STATE,
              "no frame begun");
    MODEL_ERR(m, rkv_model_frame_attend(m, 1, &a), RKV_ERR_STATE, "no frame begun");
    MODEL_ERR(m, rkv_model_frame_step(m, 1, kv, RKV_DTYPE_F32, 1, &a), RKV_ERR_STATE,
              "no frame begun");
    MODEL_ERR(m, rkv_model_end_frame(m), RKV_ERR_STATE, "no frame begun");
    assert_memory_equal(out, pat, n * 4);
    /* ... and the abandoned frame 0 of "b" may begin again */
    int64_t f0 = 0;
    TU_OK(rkv_model_begin_frame(m, 1, &sb, &f0));
    TU_OK(rkv_model_frame_attend(m, 1, &a));
    free(kv);
    free(q);
    free(out);
    free(pat);
    rkv_model_destroy(m);
}

/* A session's span, piece by piece: bad pieces and bad written bits are
 * refused, the layer and the caller's buffer untouched. */
static void test_span_errors(void **state)
{
    (void)state;
    rkv_layer *l = hist_layer(); /* S 3, H 2, RF 4, T 128, D 4, PD 2 */
    const int64_t C = 5 * 128;
    const size_t kb = (size_t)C * 4 * 4; /* one head's K or V: C*D f32 */
    unsigned char *buf = tu_xmalloc(kb), *pat = tu_xmalloc(kb);
    memset(buf, 0xA5, kb);
    memcpy(pat, buf, kb);
    TU_ERR(rkv_layer_read_span(NULL, 0, RKV_SPAN_K, 0, buf), RKV_ERR_NULL, NULL);
    TU_ERR(rkv_layer_read_span(l, 3, RKV_SPAN_K, 0, buf), RKV_ERR_RANGE, "3");
    TU_ERR(rkv_layer_read_span(l, -1, RKV_SPAN_V, 0, buf), RKV_ERR_RANGE, "-1");
    TU_ERR(rkv_layer_read_span(l, 0, (rkv_span_part)5, 0, buf), RKV_ERR_INVALID_ARG, "5");
    TU_ERR(rkv_layer_read_span(l, 0, RKV_SPAN_K, 2, buf), RKV_ERR_RANGE, "head 2");
    TU_ERR(rkv_layer_read_span(l, 0, RKV_SPAN_WRITTEN, 1, buf), RKV_ERR_INVALID_ARG, "head 1");
    TU_ERR(rkv_layer_read_span(l, 0, RKV_SPAN_K, 0, NULL), RKV_ERR_NULL, "dst");
    assert_memory_equal(buf, pat, kb);
    /* the pieces are the layer's bytes */
    int64_t lo, hi;
    TU_OK(rkv_layer_session_span(l, 2, &lo, &hi));
    TU_OK(rkv_layer_read_span(l, 2, RKV_SPAN_V, 1, buf));
    const rkv_geometry *g = rkv_layer_geometry(l);
    const size_t plane = (size_t)(3 * tu_N(g)) * 4 * 4; /* V of head 1: plane 3 */
    assert_memory_equal(buf, (const unsigned char *)rkv_layer_kv(l) + plane + (size_t)lo * 16,
                        kb);
    uint8_t *w = tu_xmalloc((size_t)C);
    TU_OK(rkv_layer_read_span(l, 2, RKV_SPAN_WRITTEN, 0, w));
    assert_memory_equal(w, rkv_layer_written(l) + lo, (size_t)C);
    /* written bits that break the invariant */
    LAYER_ERR(l, rkv_layer_write_span(l, 1, RKV_SPAN_WRITTEN, 0, NULL), RKV_ERR_NULL, "src");
    w[5] = 2;
    LAYER_ERR(l, rkv_layer_write_span(l, 1, RKV_SPAN_WRITTEN, 0, w), RKV_ERR_INVALID_ARG,
              "slot 5");
    w[5] = w[0];
    w[C - 1] = 0; /* scratch */
    LAYER_ERR(l, rkv_layer_write_span(l, 1, RKV_SPAN_WRITTEN, 0, w), RKV_ERR_INVALID_ARG,
              "slot 639");
    w[C - 1] = 1;
    w[130] = (uint8_t)!w[128]; /* half a frame */
    LAYER_ERR(l, rkv_layer_write_span(l, 1, RKV_SPAN_WRITTEN, 0, w), RKV_ERR_INVALID_ARG,
              "slot 130");
    LAYER_ERR(l, rkv_layer_write_span(l, 1, RKV_SPAN_K, 2, buf), RKV_ERR_RANGE, "head 2");
    LAYER_ERR(l, rkv_layer_copy_span(l, 0, 3), RKV_ERR_RANGE, "3");
    LAYER_ERR(l, rkv_layer_copy_span(l, -2, 0), RKV_ERR_RANGE, "-2");
    TU_ERR(rkv_layer_copy_span(NULL, 0, 1), RKV_ERR_NULL, NULL);
    /* and the valid calls: copy 2 over 0, bit-exact */
    TU_OK(rkv_layer_copy_span(l, 2, 0));
    unsigned char *buf0 = tu_xmalloc(kb);
    TU_OK(rkv_layer_read_span(l, 0, RKV_SPAN_V, 1, buf0));
    assert_memory_equal(buf0, buf, kb);
    free(buf0);
    free(buf);
    free(pat);
    free(w);
    rkv_layer_destroy(l);
}

static void test_snapshot_restore_errors(void **state)
{
    (void)state;
    int64_t sa, sb;
    rkv_model *m = busy_model(&sa, &sb);
    size_t nb = rkv_model_snapshot_bytes(m);
    assert_true(nb > 0);
    unsigned char *buf = tu_xmalloc(nb + 16);
    memset(buf, 0xEE, nb + 16);
    TU_ERR(rkv_model_snapshot(NULL, sa, buf, nb), RKV_ERR_NULL, NULL);
    MODEL_ERR(m, rkv_model_snapshot(m, sa, NULL, nb), RKV_ERR_NULL, NULL);
    MODEL_ERR(m, rkv_model_snapshot(m, 3, buf, nb), RKV_ERR_RANGE, "3");
    MODEL_ERR(m, rkv_model_snapshot(m, -1, buf, nb), RKV_ERR_RANGE, "-1");
    MODEL_FAILS(m, rkv_model_snapshot(m, 2, buf, nb), "2"); /* not held */
    MODEL_FAILS(m, rkv_model_snapshot(m, sa, buf, nb - 1), NULL);
    MODEL_FAILS(m, rkv_model_snapshot(m, sa, buf, 0), NULL);
    /* inside a frame */
    MODEL_ERR(m, rkv_model_snapshot(m, sb, buf, nb), RKV_ERR_STATE, NULL);
    for (size_t i = 0; i < nb + 16; i++)
        if (buf[i] != 0xEE)
            fail_msg("snapshot buffer byte %zu written by a failed call", i);

    /* a good snapshot of "a" */
    TU_OK(rkv_model_snapshot(m, sa, buf, nb));
    TU_ERR(rkv_model_restore(NULL, sa, buf, nb), RKV_ERR_NULL, NULL);
    MODEL_ERR(m, rkv_model_restore(m, sa, NULL, nb), RKV_ERR_NULL, NULL);
    MODEL_ERR(m, rkv_model_restore(m, 3, buf, nb), RKV_ERR_RANGE, "3");
    MODEL_FAILS(m, rkv_model_restore(m, 2, buf, nb), "2"); /* not held */
    MODEL_ERR(m, rkv_model_restore(m, sb, buf, nb), RKV_ERR_STATE, NULL);
    /* truncated */
    MODEL_ERR(m, rkv_model_restore(m, sa, buf, nb - 1), RKV_ERR_FORMAT,
              NULL);
    MODEL_ERR(m, rkv_model_restore(m, sa, buf, 0), RKV_ERR_FORMAT, NULL);
    MODEL_ERR(m, rkv_model_restore(m, sa, buf, 7), RKV_ERR_FORMAT, NULL);
    /* garbled: first bytes flipped; all garbage */
    unsigned char *bad = tu_xmalloc(nb);
    memcpy(bad, buf, nb);
    for (int i = 0; i < 4; i++)
        bad[i] ^= 0xFF;
    MODEL_ERR(m, rkv_model_restore(m, sa, bad, nb), RKV_ERR_FORMAT, NULL);
    memset(bad, 0xA7, nb);
    MODEL_ERR(m, rkv_model_restore(m, sa, bad, nb), RKV_ERR_FORMAT, NULL);
    memset(bad, 0, nb);
    MODEL_ERR(m, rkv_model_restore(m, sa, bad, nb), RKV_ERR_FORMAT, NULL);
    free(bad);
    TU_OK(rkv_model_restore(m, sa, buf, nb));

    /* a path: bytes must be 0, the path not empty; info untouched */
    rkv_snapshot_info info = {.struct_size = sizeof info}, info0;
    memcpy(&info0, &info, sizeof info);
    char path[] = "/tmp/rkv-test-errors-XXXXXX";
    const int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, buf, nb), (ssize_t)nb);
    close(fd);
    TU_ERR(rkv_snapshot_inspect(path, NULL, 5, &info), RKV_ERR_INVALID_ARG,
           "bytes is 5 with a path");
    TU_ERR(rkv_snapshot_inspect("", NULL, 0, &info), RKV_ERR_INVALID_ARG, "path is empty");
    assert_memory_equal(&info, &info0, sizeof info);
    TU_OK(rkv_snapshot_inspect(path, NULL, 0, &info));
    assert_int_equal(info.file_bytes, nb);
    MODEL_ERR(m, rkv_model_load_session(m, sa, ""), RKV_ERR_INVALID_ARG, "path is empty");
    MODEL_ERR(m, rkv_model_save_session(m, sa, ""), RKV_ERR_INVALID_ARG, "path is empty");
    unlink(path);
    free(buf);
    rkv_model_destroy(m);
}

/* ---- offload, page-in, regions and import (issue 13) -------------------------- */

/* Every bad input of the calls that move sessions: the status, a message
 * naming what was wrong, the model (storage, clocks, paged-out table)
 * byte-identical, and output buffers untouched. */
static void test_offload_import_errors(void **state)
{
    (void)state;
    int64_t sa, sb, got = -7;
    rkv_model *m = busy_model(&sa, &sb); /* sa between frames, sb inside one */
    size_t n = 0, count = 0;
    TU_OK(rkv_model_offload(m, sa, NULL, 0, &n));
    unsigned char *buf = tu_xmalloc(n + 8);
    memset(buf, 0xEE, n + 8);
    /* offload */
    TU_ERR(rkv_model_offload(NULL, sa, buf, n, &n), RKV_ERR_NULL, "model");
    MODEL_ERR(m, rkv_model_offload(m, sa, buf, n, NULL), RKV_ERR_NULL, "image_bytes");
    MODEL_ERR(m, rkv_model_offload(m, 3, buf, n, &n), RKV_ERR_RANGE, "3");
    MODEL_ERR(m, rkv_model_offload(m, -1, buf, n, &n), RKV_ERR_RANGE, "-1");
    MODEL_ERR(m, rkv_model_offload(m, 2, buf, n, &n), RKV_ERR_STATE, "not claimed");
    MODEL_ERR(m, rkv_model_offload(m, sb, buf, n, &n), RKV_ERR_STATE, "inside frame");
    MODEL_ERR(m, rkv_model_offload(m, sa, buf, n - 1, &n), RKV_ERR_INVALID_ARG, "buffer");
    MODEL_ERR(m, rkv_model_offload_file(m, sa, NULL), RKV_ERR_NULL, "path");
    MODEL_ERR(m, rkv_model_offload_file(m, sa, ""), RKV_ERR_INVALID_ARG, "empty");
    MODEL_ERR(m, rkv_model_offload_file(m, sb, "/tmp/x"), RKV_ERR_STATE, "inside frame");
    /* a destination that cannot be a file: refused up front (a folder used
     * to be written to a temporary file in full, then refused by rename) */
    static const struct {
        const char *path, *needle;
    } not_files[] = {
        {"/nonexistent-dir/x", "cannot save to '/nonexistent-dir/x': folder '/nonexistent-dir': "
                               "does not exist"},
        {"/tmp", "'/tmp' is a folder; expected a file path"},
        {"/tmp/", "'/tmp/' is a folder"},
        {"/", "'/' is a folder"},
        {"/dev/null/x", "'/dev/null' is not a folder"},
    };
    for (size_t i = 0; i < sizeof not_files / sizeof not_files[0]; i++) {
        MODEL_ERR(m, rkv_model_offload_file(m, sa, not_files[i].path), RKV_ERR_IO,
                  not_files[i].needle);
        MODEL_ERR(m, rkv_model_save_session(m, sa, not_files[i].path), RKV_ERR_IO,
                  not_files[i].needle);
    }
    for (size_t i = 0; i < n + 8; i++)
        if (buf[i] != 0xEE) fail_msg("offload buffer byte %zu written by a failed call", i);
    /* the table */
    TU_ERR(rkv_model_offloaded_clock(NULL, "a", &got), RKV_ERR_NULL, "model");
    MODEL_ERR(m, rkv_model_offloaded_clock(m, "a", NULL), RKV_ERR_NULL, "last_committed");
    MODEL_ERR(m, rkv_model_offloaded_clock(m, NULL, &got), RKV_ERR_NULL, "request_id");
    MODEL_ERR(m, rkv_model_offloaded_clock(m, "", &got), RKV_ERR_INVALID_ARG, "request_id");
    MODEL_ERR(m, rkv_model_offloaded_clock(m, "a", &got), RKV_ERR_NOT_FOUND, "'a'");
    TU_ERR(rkv_model_offload_discard(NULL, "a"), RKV_ERR_NULL, "model");
    MODEL_ERR(m, rkv_model_offload_discard(m, NULL), RKV_ERR_NULL, "request_id");
    MODEL_ERR(m, rkv_model_offload_discard(m, "zz"), RKV_ERR_NOT_FOUND, "'zz'");
    assert_int_equal(got, -7);
    /* page-in */
    TU_OK(rkv_model_offload(m, sa, buf, n, &n));
    TU_ERR(rkv_model_page_in(NULL, buf, n, &got), RKV_ERR_NULL, "model");
    MODEL_ERR(m, rkv_model_page_in(m, NULL, n, &got), RKV_ERR_NULL, "buf");
    MODEL_ERR(m, rkv_model_page_in(m, buf, n, NULL), RKV_ERR_NULL, "session");
    MODEL_ERR(m, rkv_model_page_in(m, buf, 0, &got), RKV_ERR_FORMAT, "truncated");
    MODEL_ERR(m, rkv_model_page_in(m, buf, 7, &got), RKV_ERR_FORMAT, "truncated");
    MODEL_ERR(m, rkv_model_page_in_file(m, NULL, &got), RKV_ERR_NULL, "path");
    MODEL_ERR(m, rkv_model_page_in_file(m, "/nonexistent-dir/x", &got), RKV_ERR_IO,
              "nonexistent-dir");
    assert_int_equal(got, -7);
    TU_OK(rkv_model_page_in(m, buf, n, &got));
    /* host memory */
    void *p = (void *)buf;
    TU_ERR(rkv_model_host_alloc(NULL, 8, &p), RKV_ERR_NULL, "model");
    MODEL_ERR(m, rkv_model_host_alloc(m, 8, NULL), RKV_ERR_NULL, "ptr");
    MODEL_ERR(m, rkv_model_host_alloc(m, 0, &p), RKV_ERR_INVALID_ARG, "0");
    assert_ptr_equal(p, buf);
    rkv_model_host_free(m, NULL);
    rkv_model_host_free(NULL, NULL);
    /* regions and metadata */
    const size_t nr = rkv_model_session_region_count(m), mb = rkv_model_session_meta_bytes(m);
    rkv_session_region *rg = tu_xcalloc(nr + 1, sizeof *rg);
    memset(rg, 0xEE, (nr + 1) * sizeof *rg);
    unsigned char *meta = tu_xmalloc(mb + 8);
    memset(meta, 0xEE, mb + 8);
    TU_ERR(rkv_model_session_regions(NULL, got, rg, nr, &count), RKV_ERR_NULL, "model");
    MODEL_ERR(m, rkv_model_session_regions(m, got, NULL, nr, &count), RKV_ERR_NULL, "regions");
    MODEL_ERR(m, rkv_model_session_regions(m, got, rg, nr, NULL), RKV_ERR_NULL, "count");
    MODEL_ERR(m, rkv_model_session_regions(m, 3, rg, nr, &count), RKV_ERR_RANGE, "3");
    MODEL_ERR(m, rkv_model_session_regions(m, 2 - got, rg, nr, &count), RKV_ERR_STATE, NULL);
    MODEL_ERR(m, rkv_model_session_regions(m, sb, rg, nr, &count), RKV_ERR_STATE,
              "inside frame");
    MODEL_ERR(m, rkv_model_session_regions(m, got, rg, nr - 1, &count), RKV_ERR_INVALID_ARG,
              "max_regions");
    TU_ERR(rkv_model_session_export_meta(NULL, got, meta, mb), RKV_ERR_NULL, "model");
    MODEL_ERR(m, rkv_model_session_export_meta(m, got, NULL, mb), RKV_ERR_NULL, "meta");
    MODEL_ERR(m, rkv_model_session_export_meta(m, got, meta, mb - 1), RKV_ERR_INVALID_ARG,
              "meta has");
    MODEL_ERR(m, rkv_model_session_export_meta(m, sb, meta, mb), RKV_ERR_STATE,
              "inside frame");
    uint64_t d = 42;
    TU_ERR(rkv_model_session_digest(NULL, got, &d), RKV_ERR_NULL, "model");
    MODEL_ERR(m, rkv_model_session_digest(m, got, NULL), RKV_ERR_NULL, "xxh3");
    MODEL_ERR(m, rkv_model_session_digest(m, -1, &d), RKV_ERR_RANGE, "-1");
    MODEL_ERR(m, rkv_model_session_digest(m, sb, &d), RKV_ERR_STATE, "inside frame");
    assert_int_equal(d, 42);
    for (size_t i = 0; i < (nr + 1) * sizeof *rg; i++)
        if (((unsigned char *)rg)[i] != 0xEE) fail_msg("regions byte %zu written", i);
    for (size_t i = 0; i < mb + 8; i++)
        if (meta[i] != 0xEE) fail_msg("meta byte %zu written by a failed call", i);
    /* import into a second model of the same geometry, then another */
    TU_OK(rkv_model_session_export_meta(m, got, meta, mb));
    rkv_model_config cfg = small_cfg();
    rkv_model *dst = NULL, *other = NULL;
    TU_OK(rkv_model_create(&cfg, &dst));
    cfg.layers[1].ring_buckets = 2;
    TU_OK(rkv_model_create(&cfg, &other));
    int64_t r = -7;
    TU_ERR(rkv_model_import_reserve(NULL, meta, mb, &r), RKV_ERR_NULL, "model");
    MODEL_ERR(dst, rkv_model_import_reserve(dst, NULL, mb, &r), RKV_ERR_NULL, "meta");
    MODEL_ERR(dst, rkv_model_import_reserve(dst, meta, mb, NULL), RKV_ERR_NULL, "session");
    MODEL_ERR(dst, rkv_model_import_reserve(dst, meta, 0, &r), RKV_ERR_FORMAT,
              "not ringkv session metadata");
    MODEL_ERR(other, rkv_model_import_reserve(other, meta, mb, &r), RKV_ERR_FORMAT,
              "ring_buckets");
    unsigned char *bad = tu_xmalloc(mb);
    static const char version[] = "\"session_meta_version\":\"3\"", clock[] = "\"last_committed\":\"";
    memcpy(bad, meta, mb);
    tsnap_find(bad, mb, version, strlen(version))[strlen(version) - 2] = '9';
    MODEL_ERR(dst, rkv_model_import_reserve(dst, bad, mb, &r), RKV_ERR_FORMAT, "version 9");
    memcpy(bad, meta, mb);
    tsnap_find(bad, mb, clock, strlen(clock))[strlen(clock)] ^= 1; /* the checksum catches it */
    MODEL_ERR(dst, rkv_model_import_reserve(dst, bad, mb, &r), RKV_ERR_FORMAT,
              "header checksum mismatch");
    assert_int_equal(r, -7);
    TU_OK(rkv_model_import_reserve(dst, meta, mb, &r));
    TU_ERR(rkv_model_import_check(NULL, r, meta, mb), RKV_ERR_NULL, "model");
    MODEL_ERR(dst, rkv_model_import_check(dst, r, NULL, mb), RKV_ERR_NULL, "meta");
    MODEL_ERR(dst, rkv_model_import_check(dst, 9, meta, mb), RKV_ERR_RANGE, "9");
    MODEL_ERR(dst, rkv_model_import_check(dst, r + 1, meta, mb), RKV_ERR_STATE,
              "not reserved");
    MODEL_ERR(dst, rkv_model_session_import(dst, r + 1, meta, mb), RKV_ERR_STATE,
              "not reserved");
    MODEL_ERR(dst, rkv_model_session_import(dst, r, bad, mb), RKV_ERR_FORMAT,
              "header checksum mismatch");
    TU_ERR(rkv_model_session_import(NULL, r, meta, mb), RKV_ERR_NULL, "model");
    TU_ERR(rkv_model_import_cancel(NULL, r), RKV_ERR_NULL, "model");
    MODEL_ERR(dst, rkv_model_import_cancel(dst, -2), RKV_ERR_RANGE, "-2");
    MODEL_ERR(dst, rkv_model_import_cancel(dst, r + 1), RKV_ERR_STATE, "free");
    TU_ERR(rkv_model_transfer_session(NULL, got, dst, r), RKV_ERR_NULL, "model");
    MODEL_ERR(dst, rkv_model_transfer_session(m, got, NULL, r), RKV_ERR_NULL, "model");
    MODEL_ERR(dst, rkv_model_transfer_session(m, sb, dst, r), RKV_ERR_STATE, "inside frame");
    MODEL_ERR(dst, rkv_model_transfer_session(m, got, dst, r + 1), RKV_ERR_STATE,
              "not reserved");
    int64_t o;
    MODEL_ERR(dst, rkv_model_import_reserve(dst, meta, mb, &o), RKV_ERR_STATE, "being imported");
    TU_OK(rkv_model_transfer_session(m, got, dst, r));
    TU_OK(rkv_model_session_import(dst, r, meta, mb));
    free(bad), free(meta), free(rg), free(buf);
    rkv_model_destroy(other), rkv_model_destroy(dst), rkv_model_destroy(m);
}

/* ---- messages that name the bad argument ------------------------------------ */

/* The header: the message "names the bad value and what was expected". For
 * a NULL pointer the bad value is the argument: its name (as in the header)
 * must appear. For an unknown dtype, its number. All cases are run and the
 * failures listed together. */
static int msg_failures;
static void msg_expect(const char *what, rkv_status st, rkv_status expected,
                       const char *needle)
{
    const char *m = rkv_last_error();
    if (st != expected) {
        print_message("  %s: %s, expected %s\n", what, rkv_status_str(st),
                      rkv_status_str(expected));
        msg_failures++;
    } else if (!m || !strstr(m, needle)) {
        print_message("  %s: '%s' does not name '%s'\n", what,
                      m ? m : "(null)", needle);
        msg_failures++;
    }
}
#define MSG(expr, expected, needle)                                            \
    do {                                                                       \
        tu_set_marker();                                                       \
        msg_expect(#expr, (expr), expected, needle);                           \
    } while (0)

static void test_messages_name_the_argument(void **state)
{
    (void)state;
    msg_failures = 0;
    rkv_layer *l = hist_layer();
    rkv_geometry g = g0();
    upsert_in in = upsert_in_new(l);
    const rkv_dtype F = RKV_DTYPE_F32;
    int64_t lo, hi, fr[5], n, s = 0, f = 3;
    int32_t nb[1], *idx = tu_xmalloc((size_t)rkv_geometry_total_slots(rkv_layer_geometry(l)) * 4);
    uint8_t *row = tu_xmalloc((size_t)tu_N(&g));

    MSG(rkv_layer_session_span(NULL, 0, &lo, &hi), RKV_ERR_NULL, "layer");
    MSG(rkv_layer_session_span(l, 0, NULL, &hi), RKV_ERR_NULL, "lo");
    MSG(rkv_layer_session_span(l, 0, &lo, NULL), RKV_ERR_NULL, "hi");
    MSG(rkv_layer_reset(NULL, 0), RKV_ERR_NULL, "layer");
    MSG(rkv_layer_upsert(NULL, in.kv, F, 1, in.fp, in.sess, 1, NULL),
        RKV_ERR_NULL, "layer");
    MSG(rkv_layer_upsert(l, NULL, F, 1, in.fp, in.sess, 1, NULL),
        RKV_ERR_NULL, "kv");
    MSG(rkv_layer_upsert(l, in.kv, F, 1, NULL, in.sess, 1, NULL),
        RKV_ERR_NULL, "frame_pos");
    MSG(rkv_layer_upsert(l, in.kv, F, 1, in.fp, NULL, 1, NULL),
        RKV_ERR_NULL, "session_idx");
    MSG(rkv_layer_upsert(l, in.kv, (rkv_dtype)9, 1, in.fp, in.sess, 1,
                         NULL),
        RKV_ERR_DTYPE, "9");
    MSG(rkv_layer_visible_frames(NULL, 0, 3, fr, &n), RKV_ERR_NULL, "layer");
    MSG(rkv_layer_visible_frames(l, 0, 3, NULL, &n), RKV_ERR_NULL, "frames");
    MSG(rkv_layer_visible_frames(l, 0, 3, fr, NULL), RKV_ERR_NULL, "count");
    MSG(rkv_visible_frames_from_clock(&g, 3, NULL, &n), RKV_ERR_NULL,
        "frames");
    MSG(rkv_visible_frames_from_clock(&g, 3, fr, NULL), RKV_ERR_NULL,
        "count");
    MSG(rkv_visible_row_from_frames(&g, 0, NULL, 2, row), RKV_ERR_NULL,
        "frames");
    MSG(rkv_visible_row_from_frames(&g, 0, fr, 0, NULL), RKV_ERR_NULL,
        "row");
    MSG(rkv_layer_block_mask(NULL, 0, 3, nb, idx), RKV_ERR_NULL, "layer");
    MSG(rkv_layer_block_mask(l, 0, 3, NULL, idx), RKV_ERR_NULL,
        "kv_num_blocks");
    MSG(rkv_layer_block_mask(l, 0, 3, nb, NULL), RKV_ERR_NULL, "kv_indices");

    float q[4 * 128 * 4], out[4 * 128 * 4];
    memset(q, 0, sizeof q);
    rkv_attention_args a = RKV_ATTENTION_ARGS_INIT;
    a.batch = 1;
    a.n_q_heads = 4;
    a.q = q;
    a.out = out;
    a.session_idx = &s;
    a.frame_pos = &f;
    rkv_attention_args b = a;
    MSG(rkv_layer_attend(NULL, &a), RKV_ERR_NULL, "layer");
    MSG(rkv_layer_attend(l, NULL), RKV_ERR_NULL, "args");
    b = a; b.q = NULL;
    MSG(rkv_layer_attend(l, &b), RKV_ERR_NULL, "q");
    b = a; b.out = NULL;
    MSG(rkv_layer_attend(l, &b), RKV_ERR_NULL, "out");
    b = a; b.session_idx = NULL;
    MSG(rkv_layer_attend(l, &b), RKV_ERR_NULL, "session_idx");
    b = a; b.frame_pos = NULL;
    MSG(rkv_layer_attend(l, &b), RKV_ERR_NULL, "frame_pos");
    b = a; b.q_dtype = (rkv_dtype)8;
    MSG(rkv_layer_attend(l, &b), RKV_ERR_DTYPE, "8");
    b = a; b.out_dtype = (rkv_dtype)11;
    MSG(rkv_layer_attend(l, &b), RKV_ERR_DTYPE, "11");

    rkv_model_config cfg = RKV_MODEL_CONFIG_INIT;
    rkv_model *m = NULL;
    int64_t sess, clk;
    MSG(rkv_model_preset(NULL, 0, &cfg), RKV_ERR_NULL, "name");
    MSG(rkv_model_preset("demo", 0, NULL), RKV_ERR_NULL, "out");
    MSG(rkv_model_config_layer_geometry(NULL, 0, &g), RKV_ERR_NULL, "cfg");
    MSG(rkv_model_config_memory(NULL, NULL, NULL), RKV_ERR_NULL, "cfg");
    MSG(rkv_model_create(NULL, &m), RKV_ERR_NULL, "config");
    cfg = small_cfg();
    MSG(rkv_model_create(&cfg, NULL), RKV_ERR_NULL, "out");
    cfg.dtype = (rkv_dtype)5;
    MSG(rkv_model_create(&cfg, &m), RKV_ERR_DTYPE, "5");
    cfg = small_cfg();
    TU_OK(rkv_model_create(&cfg, &m));
    TU_OK(rkv_model_claim(m, "held", &s));
    MSG(rkv_model_claim(m, NULL, &sess), RKV_ERR_NULL, "request_id");
    MSG(rkv_model_claim(m, "x", NULL), RKV_ERR_NULL, "session");
    MSG(rkv_model_lookup(m, NULL, &sess), RKV_ERR_NULL, "request_id");
    MSG(rkv_model_clock(m, 0, NULL), RKV_ERR_NULL, "last_committed");
    MSG(rkv_model_begin_frame(m, 1, NULL, &f), RKV_ERR_NULL, "session_idx");
    MSG(rkv_model_begin_frame(m, 1, &s, NULL), RKV_ERR_NULL, "frame_pos");
    MSG(rkv_model_snapshot(m, s, NULL, rkv_model_snapshot_bytes(m)),
        RKV_ERR_NULL, "buf");
    MSG(rkv_model_restore(m, s, NULL, rkv_model_snapshot_bytes(m)),
        RKV_ERR_NULL, "buf");
    TU_OK(rkv_model_begin_frame(m, 1, &s, &f));
    MSG(rkv_model_upsert(m, 0, NULL, 1, &s, NULL, F, 0), RKV_ERR_NULL, "kv");
    (void)clk;
    rkv_model_destroy(m);
    MSG(rkv_threadpool_create(2, NULL), RKV_ERR_NULL, "out");

    free(idx);
    free(row);
    upsert_in_free(&in);
    rkv_layer_destroy(l);
    if (msg_failures)
        fail_msg("%d messages do not name the bad argument (listed above)",
                 msg_failures);
}

/* rkv_last_error() is per thread: a failure on another thread does not
 * change this thread's message. */
static void *fail_on_thread(void *arg)
{
    (void)arg;
    rkv_dtype d;
    static char msg[512];
    (void)rkv_dtype_parse("other_thread_dtype", &d);
    snprintf(msg, sizeof msg, "%s", rkv_last_error());
    return msg;
}

/* Growing structs (ringkv.h, "Structs that grow") at the calls not
 * covered above: attention on a wrapped layer, and rkv_snapshot_info, an output
 * struct whose size is checked before anything is read or written. */
static void test_struct_size_refused(void **state)
{
    (void)state;
    rkv_layer *l = hist_layer();
    attn_in in;
    attn_in_init(&in, l);
    rkv_layer *v = NULL;
    const rkv_backend_storage own = {(void *)rkv_layer_kv(l), (uint8_t *)rkv_layer_written(l),
                                     NULL};
    TU_OK(rkv_layer_wrap(NULL, NULL, rkv_layer_geometry(l), &own, &v));
    rkv_attention_args a = in.a;
    a.struct_size = 0;
    TU_ERR(rkv_layer_attend(v, &a), RKV_ERR_INVALID_ARG,
           "rkv_layer_attend: args->struct_size is 0; set it to sizeof(rkv_attention_args)");
    assert_memory_equal(in.out, in.pattern, in.n * 4);
    rkv_layer_destroy(v);
    attn_in_free(&in);
    rkv_layer_destroy(l);

    int64_t sa, sb;
    rkv_model *m = busy_model(&sa, &sb);
    size_t n = 0;
    TU_OK(rkv_model_save_session_mem(m, sa, NULL, 0, &n));
    unsigned char *img = tu_xmalloc(n);
    TU_OK(rkv_model_save_session_mem(m, sa, img, n, &n));
    rkv_snapshot_info info, before;
    const size_t sizes[] = {0, sizeof info - 8, sizeof info + 8};
    const char *says[] = {"info->struct_size is 0", "smaller than the first version",
                          "newer ringkv header"};
    for (int i = 0; i < 3; i++) {
        memset(&info, 0x3C, sizeof info);
        info.struct_size = sizes[i];
        before = info;
        TU_ERR(rkv_snapshot_inspect(NULL, img, n, &info), RKV_ERR_INVALID_ARG, says[i]);
        /* checked first: a missing file is not even opened */
        TU_ERR(rkv_snapshot_inspect("/nonexistent/ringkv.safetensors", NULL, 0, &info),
               RKV_ERR_INVALID_ARG, says[i]);
        assert_memory_equal(&info, &before, sizeof info);
    }
    info = (rkv_snapshot_info)RKV_SNAPSHOT_INFO_INIT;
    TU_OK(rkv_snapshot_inspect(NULL, img, n, &info));
    assert_int_equal(info.struct_size, sizeof info);
    assert_int_equal(info.config.struct_size, sizeof info.config);
    assert_int_equal(info.last_committed, 4);
    free(img);
    rkv_model_destroy(m);
}

static void test_last_error_thread_local(void **state)
{
    (void)state;
    rkv_dtype d;
    TU_ERR(rkv_dtype_parse("main_thread_dtype", &d), RKV_ERR_DTYPE,
           "main_thread_dtype");
    pthread_t th;
    void *ret = NULL;
    assert_int_equal(pthread_create(&th, NULL, fail_on_thread, NULL), 0);
    pthread_join(th, &ret);
    assert_true(strstr((const char *)ret, "other_thread_dtype") != NULL);
    assert_true(strstr(rkv_last_error(), "main_thread_dtype") != NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_destroy_null),
        cmocka_unit_test(test_session_span_errors),
        cmocka_unit_test(test_reset_errors),
        cmocka_unit_test(test_upsert_null),
        cmocka_unit_test(test_upsert_batch),
        cmocka_unit_test(test_upsert_bad_rows_no_partial_write),
        cmocka_unit_test(test_upsert_dtype),
        cmocka_unit_test(test_visible_frames_errors),
        cmocka_unit_test(test_visible_frames_from_clock_errors),
        cmocka_unit_test(test_row_from_frames_errors),
        cmocka_unit_test(test_block_mask_errors),
        cmocka_unit_test(test_attend_errors),
        cmocka_unit_test(test_attend_reference_errors),
        cmocka_unit_test(test_threadpool_errors),
        cmocka_unit_test(test_preset_errors),
        cmocka_unit_test(test_config_errors),
        cmocka_unit_test(test_model_create_errors),
        cmocka_unit_test(test_model_create_no_memory),
        cmocka_unit_test(test_model_layer_out_of_range),
        cmocka_unit_test(test_claim_lookup_errors),
        cmocka_unit_test(test_release_reset_clock_errors),
        cmocka_unit_test(test_begin_frame_errors),
        cmocka_unit_test(test_model_upsert_errors),
        cmocka_unit_test(test_model_attend_errors),
        cmocka_unit_test(test_overlapping_buffers_refused),
        cmocka_unit_test(test_snapshot_restore_errors),
        cmocka_unit_test(test_frame_calls_errors),
        cmocka_unit_test(test_span_errors),
        cmocka_unit_test(test_offload_import_errors),
        cmocka_unit_test(test_struct_size_refused),
        cmocka_unit_test(test_last_error_thread_local),
        cmocka_unit_test(test_messages_name_the_argument),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

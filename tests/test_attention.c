/* Attention over the ring (SEM 5) against a float64 computation written
 * here: gather the row's visible slots, softmax, GQA head h -> h/(Hq/H). */
#define _POSIX_C_SOURCE 200809L
#include "testutil.h"

/* Every test runs twice: on rkv_layer_attend (the fast path) and on
 * rkvt_attend_reference (the oracle kept in the library: rkv_layer_attend on
 * the layer's storage wrapped on rkv_backend_cpu_reference). */
typedef rkv_status (*attend_fn)(const rkv_layer *,
                                const rkv_attention_args *);
static attend_fn g_attend = rkv_layer_attend;
#define ATTEND(l, a) g_attend((l), (a))

typedef struct fixture {
    rkv_geometry g;
    rkv_layer *l;
    int64_t clock[8];   /* the clock each session is at (frame in scratch) */
    uint8_t *rows;      /* [S][N]: reference rows of each session's last upsert */
    float *orig[8];     /* the f32 frame each session's scratch was given */
} fixture;

/* Sessions advance in order from 0 (4+1 schedule) to different clocks, then
 * each does one non-committing upsert of its current frame (the engine's
 * "upsert, then attention" on a denoising pass). */
static fixture fixture_new(rkv_geometry g, const int64_t *clocks)
{
    fixture fx;
    memset(&fx, 0, sizeof fx);
    fx.g = g;
    fx.l = tu_layer_new(&g);
    int64_t S = g.num_sessions, N = tu_N(&g);
    size_t fn = (size_t)(2 * g.n_kv_heads * g.tokens_per_frame * g.d_head);
    fx.rows = tu_xmalloc((size_t)(S * N));
    float *fr = tu_xmalloc(fn * 4);
    for (int64_t s = 0; s < S; s++) {
        fx.clock[s] = clocks[s];
        for (int64_t f = 0; f <= clocks[s]; f++) {
            int last = f == clocks[s];
            for (int pass = 0; pass < (last ? 1 : 5); pass++) {
                tu_gen_frame(fr, &g, tu_key(s, f, (uint64_t)pass));
                void *kv = tu_to_dtype(fr, fn, g.dtype);
                TU_OK(rkv_layer_upsert(fx.l, kv, g.dtype, 1, &f, &s,
                                       !last && pass == 4,
                                       last ? fx.rows + s * N : NULL));
                free(kv);
            }
        }
        fx.orig[s] = tu_xmalloc(fn * 4);
        memcpy(fx.orig[s], fr, fn * 4);
    }
    free(fr);
    return fx;
}
static void fixture_free(fixture *fx)
{
    for (int i = 0; i < 8; i++)
        free(fx->orig[i]);
    free(fx->rows);
    rkv_layer_destroy(fx->l);
}

static rkv_attention_args args_new(int64_t B, int64_t Hq, int64_t Tq,
                                   const void *q, rkv_dtype qdt, void *out,
                                   rkv_dtype odt, const int64_t *sess,
                                   const int64_t *fp, const uint8_t *vis,
                                   float scale)
{
    rkv_attention_args a = RKV_ATTENTION_ARGS_INIT;
    a.batch = B;
    a.n_q_heads = Hq;
    a.n_queries = Tq;
    a.q = q;
    a.q_dtype = qdt;
    a.out = out;
    a.out_dtype = odt;
    a.session_idx = sess;
    a.frame_pos = fp;
    a.visible = vis;
    a.scale = scale;
    return a;
}

/* float64 reference of B rows: q given in qdt (decoded), visibility from
 * `vis` rows or the test's bits rule. */
static double *reference(const fixture *fx, int64_t B, int64_t Hq,
                         int64_t Tq, const void *q, rkv_dtype qdt,
                         const int64_t *sess, const int64_t *fp,
                         const uint8_t *vis, double scale)
{
    int64_t N = tu_N(&fx->g), D = fx->g.d_head;
    size_t per = (size_t)(Hq * Tq * D);
    double *ref = tu_xmalloc(per * (size_t)B * 8);
    double *qd = tu_xmalloc(per * 8);
    uint8_t *row = tu_xmalloc((size_t)N);
    for (int64_t b = 0; b < B; b++) {
        for (size_t i = 0; i < per; i++)
            qd[i] = rkvt_get(q, qdt, (size_t)b * per + i);
        if (vis)
            memcpy(row, vis + b * N, (size_t)N);
        else
            tu_bits_rule_row(&fx->g, rkv_layer_written(fx->l), sess[b],
                             fp[b], row);
        tu_naive_attend(fx->l, Hq, Tq, qd, row, scale, ref + b * per);
    }
    free(qd);
    free(row);
    return ref;
}

static float *nan_buf(size_t n)
{
    float *x = tu_xmalloc(n * 4);
    for (size_t i = 0; i < n; i++)
        x[i] = NAN;
    return x;
}

/* out (in odt) within tol of the float64 reference (norm-wise); a failure
 * names the layer's geometry, the first element off and the largest
 * difference with both values (rkvt_check_close). */
static void expect_close(const rkv_geometry *g, const void *out, rkv_dtype odt,
                         const double *ref, size_t n, double tol,
                         const char *what)
{
    char geo[160], msg[1024];
    rkvt_describe_geometry(g, geo, sizeof geo);
    if (!tu_all_finite(out, odt, n))
        fail_msg("%s (%s): output not fully written (NaN/inf left)", what, geo);
    if (rkvt_check_close(what, geo, out, odt, ref, n, tol, msg, sizeof msg))
        fail_msg("%s", msg);
}

/* ---------------------------------------------------------------------- */

static const int64_t kClocks[3] = {2, 9, 13};

static rkv_geometry base_geom(rkv_dtype dt)
{
    /* S 3, H 2, RF 4, RB 3, D 16, T 128, PD 2 */
    return tu_geom(3, 2, 4, 3, 16, 128, 2, dt);
}

static void test_f32_single_rows_bits_path(void **state)
{
    (void)state;
    fixture fx = fixture_new(base_geom(RKV_DTYPE_F32), kClocks);
    int64_t Hq = 4, T = 128, D = 16;
    size_t n = (size_t)(Hq * T * D);
    float *q = tu_xmalloc(n * 4);
    tu_rng r = {11};
    for (int64_t s = 0; s < 3; s++) {
        tu_fill_uniform(q, n, &r);
        float *out = nan_buf(n);
        int64_t f = fx.clock[s];
        /* n_queries 0 means T */
        rkv_attention_args a = args_new(1, Hq, 0, q, RKV_DTYPE_F32, out,
                                        RKV_DTYPE_F32, &s, &f, NULL, 0.0f);
        TU_OK(ATTEND(fx.l, &a));
        double *ref = reference(&fx, 1, Hq, T, q, RKV_DTYPE_F32, &s, &f,
                                NULL, 1.0 / sqrt((double)D));
        expect_close(&fx.g, out, RKV_DTYPE_F32, ref, n, 1e-5, "f32 bits path");
        free(ref);
        free(out);
    }
    free(q);
    fixture_free(&fx);
}

/* B = 3 rows, sessions in a different order than their index, each with its
 * own clock. */
static void test_f32_batch_rows(void **state)
{
    (void)state;
    fixture fx = fixture_new(base_geom(RKV_DTYPE_F32), kClocks);
    int64_t Hq = 4, T = 128, D = 16, B = 3;
    size_t per = (size_t)(Hq * T * D), n = per * (size_t)B;
    float *q = tu_xmalloc(n * 4);
    tu_rng r = {12};
    tu_fill_uniform(q, n, &r);
    int64_t sess[3] = {2, 0, 1};
    int64_t fp[3] = {fx.clock[2], fx.clock[0], fx.clock[1]};
    float *out = nan_buf(n);
    rkv_attention_args a = args_new(B, Hq, T, q, RKV_DTYPE_F32, out,
                                    RKV_DTYPE_F32, sess, fp, NULL, 0.0f);
    TU_OK(ATTEND(fx.l, &a));
    double *ref = reference(&fx, B, Hq, T, q, RKV_DTYPE_F32, sess, fp, NULL,
                            1.0 / sqrt((double)D));
    expect_close(&fx.g, out, RKV_DTYPE_F32, ref, n, 1e-5, "batch");
    /* each row on its own, too */
    for (int64_t b = 0; b < B; b++) {
        char what[64];
        snprintf(what, sizeof what, "batch row %lld", (long long)b);
        expect_close(&fx.g, out + (size_t)b * per, RKV_DTYPE_F32,
                     ref + (size_t)b * per, per, 1e-5, what);
        /* same as a B = 1 call */
        float *one = nan_buf(per);
        rkv_attention_args a1 =
            args_new(1, Hq, T, q + (size_t)b * per, RKV_DTYPE_F32, one,
                     RKV_DTYPE_F32, &sess[b], &fp[b], NULL, 0.0f);
        TU_OK(ATTEND(fx.l, &a1));
        double d = 0, nn = 0;
        for (size_t i = 0; i < per; i++) {
            d += ((double)one[i] - out[(size_t)b * per + i]) *
                 ((double)one[i] - out[(size_t)b * per + i]);
            nn += (double)one[i] * one[i];
        }
        assert_true(sqrt(d / nn) <= 1e-6);
        free(one);
    }
    free(ref);
    free(out);
    free(q);
    fixture_free(&fx);
}

/* The explicit visible rows path equals the bits-and-clock path. */
static void test_explicit_rows_equal_bits_path(void **state)
{
    (void)state;
    fixture fx = fixture_new(base_geom(RKV_DTYPE_F32), kClocks);
    int64_t Hq = 2, T = 128, D = 16, B = 3, N = tu_N(&fx.g);
    size_t per = (size_t)(Hq * T * D), n = per * (size_t)B;
    float *q = tu_xmalloc(n * 4);
    tu_rng r = {13};
    tu_fill_uniform(q, n, &r);
    int64_t sess[3] = {1, 2, 0};
    int64_t fp[3] = {fx.clock[1], fx.clock[2], fx.clock[0]};
    uint8_t *vis = tu_xmalloc((size_t)(B * N));
    for (int64_t b = 0; b < B; b++)
        memcpy(vis + b * N, fx.rows + sess[b] * N, (size_t)N);
    float *o1 = nan_buf(n), *o2 = nan_buf(n);
    rkv_attention_args a1 = args_new(B, Hq, T, q, RKV_DTYPE_F32, o1,
                                     RKV_DTYPE_F32, sess, fp, NULL, 0.0f);
    /* frame_pos ignored (may be NULL) when visible is given */
    rkv_attention_args a2 = args_new(B, Hq, T, q, RKV_DTYPE_F32, o2,
                                     RKV_DTYPE_F32, sess, NULL, vis, 0.0f);
    TU_OK(ATTEND(fx.l, &a1));
    TU_OK(ATTEND(fx.l, &a2));
    double *ref = reference(&fx, B, Hq, T, q, RKV_DTYPE_F32, sess, fp, vis,
                            1.0 / sqrt((double)D));
    expect_close(&fx.g, o1, RKV_DTYPE_F32, ref, n, 1e-5, "bits path");
    expect_close(&fx.g, o2, RKV_DTYPE_F32, ref, n, 1e-5, "explicit rows");
    double *r1 = tu_xmalloc(n * 8);
    for (size_t i = 0; i < n; i++)
        r1[i] = o1[i];
    expect_close(&fx.g, o2, RKV_DTYPE_F32, r1, n, 1e-6, "explicit vs bits");
    free(r1);
    free(ref);
    free(o1);
    free(o2);
    free(vis);
    free(q);
    fixture_free(&fx);
}

/* An explicit row attends to whatever it marks, even another session's
 * slots; an all-zero row gives 0. */
static void test_explicit_row_any_slots(void **state)
{
    (void)state;
    fixture fx = fixture_new(base_geom(RKV_DTYPE_F32), kClocks);
    int64_t Hq = 4, T = 128, D = 16, N = tu_N(&fx.g), C = tu_C(&fx.g);
    size_t n = (size_t)(Hq * T * D);
    float *q = tu_xmalloc(n * 4);
    tu_rng r = {14};
    tu_fill_uniform(q, n, &r);
    uint8_t *vis = tu_xmalloc((size_t)N);
    /* session 0's row marks: its scratch, ring frame 1 of session 2, and a
     * few single slots of session 1 (value 2: nonzero counts) */
    memset(vis, 0, (size_t)N);
    memset(vis + tu_L(&fx.g), 1, (size_t)T);
    memset(vis + 2 * C + 1 * T, 1, (size_t)T);
    vis[C + 5] = 2;
    vis[C + 300] = 255;
    int64_t s = 0;
    float *out = nan_buf(n);
    rkv_attention_args a = args_new(1, Hq, T, q, RKV_DTYPE_F32, out,
                                    RKV_DTYPE_F32, &s, NULL, vis, 0.0f);
    TU_OK(ATTEND(fx.l, &a));
    double *ref = reference(&fx, 1, Hq, T, q, RKV_DTYPE_F32, &s, NULL, vis,
                            1.0 / sqrt((double)D));
    expect_close(&fx.g, out, RKV_DTYPE_F32, ref, n, 1e-5, "cross-session row");
    free(ref);

    memset(vis, 0, (size_t)N);
    for (size_t i = 0; i < n; i++)
        out[i] = NAN;
    TU_OK(ATTEND(fx.l, &a));
    for (size_t i = 0; i < n; i++)
        if (out[i] != 0.0f)
            fail_msg("all-zero row: out[%zu] = %g, expected 0", i, out[i]);
    free(out);
    free(vis);
    free(q);
    fixture_free(&fx);
}

static void test_scale(void **state)
{
    (void)state;
    fixture fx = fixture_new(base_geom(RKV_DTYPE_F32), kClocks);
    int64_t Hq = 4, T = 128, D = 16;
    size_t n = (size_t)(Hq * T * D);
    float *q = tu_xmalloc(n * 4);
    tu_rng r = {15};
    tu_fill_uniform(q, n, &r);
    int64_t s = 1, f = fx.clock[1];
    float *o0 = nan_buf(n), *o1 = nan_buf(n), *o2 = nan_buf(n);
    rkv_attention_args a = args_new(1, Hq, T, q, RKV_DTYPE_F32, o0,
                                     RKV_DTYPE_F32, &s, &f, NULL, 0.0f);
    TU_OK(ATTEND(fx.l, &a));
    a.out = o1;
    a.scale = 1.0f / sqrtf(16.0f); /* 0.25 exactly */
    TU_OK(ATTEND(fx.l, &a));
    assert_memory_equal(o0, o1, n * 4);
    double *ref = reference(&fx, 1, Hq, T, q, RKV_DTYPE_F32, &s, &f, NULL,
                            0.25);
    expect_close(&fx.g, o0, RKV_DTYPE_F32, ref, n, 1e-5, "default scale");
    free(ref);
    /* another scale changes the result, and matches the reference */
    a.out = o2;
    a.scale = 1.7f;
    TU_OK(ATTEND(fx.l, &a));
    ref = reference(&fx, 1, Hq, T, q, RKV_DTYPE_F32, &s, &f, NULL,
                    (double)1.7f);
    expect_close(&fx.g, o2, RKV_DTYPE_F32, ref, n, 1e-5, "scale 1.7");
    assert_true(memcmp(o0, o2, n * 4) != 0);
    free(ref);
    /* a huge scale: logits far beyond exp's range must stay stable */
    a.scale = 400.0f;
    TU_OK(ATTEND(fx.l, &a));
    ref = reference(&fx, 1, Hq, T, q, RKV_DTYPE_F32, &s, &f, NULL, 400.0);
    /* f32 logit rounding is amplified 400x here: looser tolerance; the
     * point is no overflow (inf/NaN) */
    expect_close(&fx.g, o2, RKV_DTYPE_F32, ref, n, 1e-3, "scale 400");
    free(ref);
    free(o0);
    free(o1);
    free(o2);
    free(q);
    fixture_free(&fx);
}

/* D not a perfect square: default scale 1/sqrt(D). */
static void test_default_scale_odd_d(void **state)
{
    (void)state;
    rkv_geometry g = tu_geom(1, 1, 3, 3, 7, 128, 1, RKV_DTYPE_F32);
    int64_t clocks[1] = {5};
    fixture fx = fixture_new(g, clocks);
    int64_t Hq = 3, T = 128, D = 7;
    size_t n = (size_t)(Hq * T * D);
    float *q = tu_xmalloc(n * 4);
    tu_rng r = {16};
    for (size_t i = 0; i < n; i++)
        q[i] = 4.0f * tu_uniform(&r); /* sharper softmax: scale matters */
    int64_t s = 0, f = 5;
    float *out = nan_buf(n);
    rkv_attention_args a = args_new(1, Hq, T, q, RKV_DTYPE_F32, out,
                                    RKV_DTYPE_F32, &s, &f, NULL, 0.0f);
    TU_OK(ATTEND(fx.l, &a));
    double *ref = reference(&fx, 1, Hq, T, q, RKV_DTYPE_F32, &s, &f, NULL,
                            1.0 / sqrt(7.0));
    expect_close(&fx.g, out, RKV_DTYPE_F32, ref, n, 1e-5, "D=7 default scale");
    free(ref);
    /* and it is not the unscaled result */
    ref = reference(&fx, 1, Hq, T, q, RKV_DTYPE_F32, &s, &f, NULL, 1.0);
    assert_true(rkvt_rel_err_f64(out, RKV_DTYPE_F32, ref, n, NULL) > 1e-3);
    free(ref);
    free(out);
    free(q);
    fixture_free(&fx);
}

/* n_queries != T: fewer and more queries than a frame has tokens. */
static void test_n_queries(void **state)
{
    (void)state;
    fixture fx = fixture_new(base_geom(RKV_DTYPE_F32), kClocks);
    int64_t Hq = 4, D = 16;
    int64_t tqs[] = {1, 5, 300};
    tu_rng r = {17};
    for (int k = 0; k < 3; k++) {
        int64_t Tq = tqs[k], B = 2;
        size_t per = (size_t)(Hq * Tq * D), n = per * (size_t)B;
        float *q = tu_xmalloc(n * 4);
        tu_fill_uniform(q, n, &r);
        int64_t sess[2] = {2, 1}, fp[2] = {fx.clock[2], fx.clock[1]};
        /* poison beyond the output too: nothing past B*Hq*Tq*D written */
        float *out = nan_buf(n + 64);
        for (int i = 0; i < 64; i++)
            out[n + (size_t)i] = 123.0f;
        rkv_attention_args a = args_new(B, Hq, Tq, q, RKV_DTYPE_F32, out,
                                        RKV_DTYPE_F32, sess, fp, NULL, 0.0f);
        TU_OK(ATTEND(fx.l, &a));
        double *ref = reference(&fx, B, Hq, Tq, q, RKV_DTYPE_F32, sess, fp,
                                NULL, 0.25);
        char what[64];
        snprintf(what, sizeof what, "n_queries %lld", (long long)Tq);
        expect_close(&fx.g, out, RKV_DTYPE_F32, ref, n, 1e-5, what);
        for (int i = 0; i < 64; i++)
            assert_true(out[n + (size_t)i] == 123.0f);
        free(ref);
        free(out);
        free(q);
    }
    fixture_free(&fx);
}

/* GQA: Hq = H (no grouping) and Hq = 4H; a wrong head mapping would read
 * other K/V (every head holds different data). */
static void test_gqa(void **state)
{
    (void)state;
    rkv_geometry g = tu_geom(2, 3, 3, 2, 8, 128, 1, RKV_DTYPE_F32);
    int64_t clocks[2] = {4, 1};
    fixture fx = fixture_new(g, clocks);
    int64_t hqs[] = {3, 6, 12};
    tu_rng r = {18};
    for (int k = 0; k < 3; k++) {
        int64_t Hq = hqs[k], T = 128, D = 8;
        size_t n = (size_t)(Hq * T * D) * 2;
        float *q = tu_xmalloc(n * 4);
        for (size_t i = 0; i < n; i++)
            q[i] = 3.0f * tu_uniform(&r);
        int64_t sess[2] = {0, 1}, fp[2] = {4, 1};
        float *out = nan_buf(n);
        rkv_attention_args a = args_new(2, Hq, T, q, RKV_DTYPE_F32, out,
                                        RKV_DTYPE_F32, sess, fp, NULL, 0.0f);
        TU_OK(ATTEND(fx.l, &a));
        double *ref = reference(&fx, 2, Hq, T, q, RKV_DTYPE_F32, sess, fp,
                                NULL, 1.0 / sqrt(8.0));
        char what[64];
        snprintf(what, sizeof what, "Hq %lld H 3", (long long)Hq);
        expect_close(&fx.g, out, RKV_DTYPE_F32, ref, n, 1e-5, what);
        free(ref);
        free(out);
        free(q);
    }
    fixture_free(&fx);
}

/* Several query blocks and a larger head dim (T 256, D 64). */
static void test_larger_frame(void **state)
{
    (void)state;
    rkv_geometry g = tu_geom(2, 2, 3, 3, 64, 256, 1, RKV_DTYPE_F32);
    int64_t clocks[2] = {3, 7};
    fixture fx = fixture_new(g, clocks);
    int64_t Hq = 4, T = 256, D = 64;
    size_t n = (size_t)(Hq * T * D);
    float *q = tu_xmalloc(n * 4);
    tu_rng r = {19};
    tu_fill_uniform(q, n, &r);
    int64_t s = 1, f = 7;
    float *out = nan_buf(n);
    rkv_attention_args a = args_new(1, Hq, 0, q, RKV_DTYPE_F32, out,
                                    RKV_DTYPE_F32, &s, &f, NULL, 0.0f);
    TU_OK(ATTEND(fx.l, &a));
    double *ref = reference(&fx, 1, Hq, T, q, RKV_DTYPE_F32, &s, &f, NULL,
                            0.125);
    expect_close(&fx.g, out, RKV_DTYPE_F32, ref, n, 1e-5, "T 256 D 64");
    free(ref);
    free(out);
    free(q);
    fixture_free(&fx);
}

/* f16 / bf16 storage and queries: f32 accumulation over the stored values
 * (tight), and within ~1e-2 of the float64 result on the unrounded
 * inputs; output in f32 or in the half dtype. */
static void test_half_dtypes(void **state)
{
    (void)state;
    rkv_dtype dts[] = {RKV_DTYPE_BF16, RKV_DTYPE_F16};
    for (int k = 0; k < 2; k++) {
        rkv_dtype dt = dts[k];
        fixture fx = fixture_new(base_geom(dt), kClocks);
        /* the same history in f32, for the unrounded reference */
        fixture fx32 = fixture_new(base_geom(RKV_DTYPE_F32), kClocks);
        int64_t Hq = 4, T = 128, D = 16, B = 3;
        size_t n = (size_t)(Hq * T * D * B);
        float *q = tu_xmalloc(n * 4);
        tu_rng r = {20};
        tu_fill_uniform(q, n, &r);
        void *qh = tu_to_dtype(q, n, dt);
        int64_t sess[3] = {0, 1, 2};
        int64_t fp[3] = {fx.clock[0], fx.clock[1], fx.clock[2]};
        float *out = nan_buf(n);
        rkv_attention_args a = args_new(B, Hq, T, qh, dt, out, RKV_DTYPE_F32,
                                        sess, fp, NULL, 0.0f);
        TU_OK(ATTEND(fx.l, &a));
        double *ref = reference(&fx, B, Hq, T, qh, dt, sess, fp, NULL, 0.25);
        char what[64];
        snprintf(what, sizeof what, "%s storage, exact inputs",
                 rkv_dtype_name(dt));
        expect_close(&fx.g, out, RKV_DTYPE_F32, ref, n, 1e-5, what);
        double *ref32 = reference(&fx32, B, Hq, T, q, RKV_DTYPE_F32, sess, fp,
                                  NULL, 0.25);
        snprintf(what, sizeof what, "%s vs float64 of f32 inputs",
                 rkv_dtype_name(dt));
        expect_close(&fx.g, out, RKV_DTYPE_F32, ref32, n, 1e-2, what);
        /* output in the half dtype */
        uint16_t *oh = tu_xmalloc(n * 2);
        for (size_t i = 0; i < n; i++)
            oh[i] = 0x7FFF; /* NaN in both */
        a.out = oh;
        a.out_dtype = dt;
        TU_OK(ATTEND(fx.l, &a));
        snprintf(what, sizeof what, "%s output", rkv_dtype_name(dt));
        expect_close(&fx.g, oh, dt, ref, n, 1e-2, what);
        /* the half output is the f32 output rounded */
        uint16_t *want = tu_to_dtype(out, n, dt);
        size_t diff = 0;
        for (size_t i = 0; i < n; i++)
            diff += want[i] != oh[i];
        /* allow rare 1-ulp differences from a different summation order */
        assert_true(diff <= n / 100);
        free(want);
        free(oh);
        /* f32 queries on half storage */
        for (size_t i = 0; i < n; i++)
            out[i] = NAN;
        a.q = q;
        a.q_dtype = RKV_DTYPE_F32;
        a.out = out;
        a.out_dtype = RKV_DTYPE_F32;
        rkv_status st = ATTEND(fx.l, &a);
        if (st == RKV_OK) {
            double *refq = reference(&fx, B, Hq, T, q, RKV_DTYPE_F32, sess,
                                     fp, NULL, 0.25);
            expect_close(&fx.g, out, RKV_DTYPE_F32, refq, n, 1e-5,
                         "f32 queries on half storage");
            free(refq);
        } else {
            assert_int_equal(st, RKV_ERR_DTYPE);
        }
        free(ref);
        free(ref32);
        free(out);
        free(qh);
        free(q);
        fixture_free(&fx);
        fixture_free(&fx32);
    }
}

/* The attention reads the current scratch: attending right after each pass
 * of a frame gives the attention over that pass's frame. */
static void test_attention_follows_passes(void **state)
{
    (void)state;
    rkv_geometry g = tu_geom(1, 1, 3, 3, 8, 128, 1, RKV_DTYPE_F32);
    rkv_layer *l = tu_layer_new(&g);
    fixture fx;
    memset(&fx, 0, sizeof fx);
    fx.g = g;
    fx.l = l;
    int64_t Hq = 2, T = 128, D = 8;
    size_t n = (size_t)(Hq * T * D), fn = (size_t)(2 * T * D);
    float *q = tu_xmalloc(n * 4), *fr = tu_xmalloc(fn * 4);
    float *prev = nan_buf(n);
    tu_rng r = {21};
    tu_fill_uniform(q, n, &r);
    for (int64_t f = 0; f < 6; f++)
        for (int pass = 0; pass < 5; pass++) {
            int64_t s = 0;
            tu_gen_frame(fr, &g, tu_key(0, f, (uint64_t)pass));
            TU_OK(rkv_layer_upsert(l, fr, RKV_DTYPE_F32, 1, &f, &s,
                                   pass == 4, NULL));
            float *out = nan_buf(n);
            rkv_attention_args a = args_new(1, Hq, T, q, RKV_DTYPE_F32, out,
                                            RKV_DTYPE_F32, &s, &f, NULL,
                                            0.0f);
            TU_OK(ATTEND(l, &a));
            double *ref = reference(&fx, 1, Hq, T, q, RKV_DTYPE_F32, &s, &f,
                                    NULL, 1.0 / sqrt(8.0));
            expect_close(&fx.g, out, RKV_DTYPE_F32, ref, n, 1e-5, "per pass");
            /* each pass has a different frame: a different output */
            assert_true(memcmp(out, prev, n * 4) != 0);
            memcpy(prev, out, n * 4);
            free(ref);
            free(out);
        }
    free(prev);
    free(q);
    free(fr);
    rkv_layer_destroy(l);
}

/* Head dims and query counts that are not multiples of any vector width or
 * tile size. */
static void test_odd_dims(void **state)
{
    (void)state;
    static const int64_t dims[] = {1, 3, 7, 9, 17, 33, 65, 100, 128};
    /* 129: two query tiles of 64 and one query more; under a sanitizer 65
     * (one tile and one more: the same edge, half the float64 work) */
    const int64_t tqs[] = {1, 13, 37, RKVT_SIZE(129, 65)};
    tu_rng r = {22};
    for (size_t di = 0; di < sizeof dims / sizeof dims[0]; di++) {
        int64_t D = dims[di];
        rkv_geometry g = tu_geom(2, 1, 3, 2, D, 128, 1, RKV_DTYPE_F32);
        int64_t clocks[2] = {3, 1};
        fixture fx = fixture_new(g, clocks);
        for (size_t ti = 0; ti < sizeof tqs / sizeof tqs[0]; ti++) {
            int64_t Tq = tqs[ti], Hq = 2, B = 2;
            size_t n = (size_t)(B * Hq * Tq * D);
            float *q = tu_xmalloc(n * 4);
            for (size_t i = 0; i < n; i++)
                q[i] = 2.0f * tu_uniform(&r);
            int64_t sess[2] = {1, 0}, fp[2] = {1, 3};
            float *out = nan_buf(n + 8);
            for (int i = 0; i < 8; i++)
                out[n + (size_t)i] = -77.0f;
            rkv_attention_args a = args_new(B, Hq, Tq, q, RKV_DTYPE_F32, out,
                                            RKV_DTYPE_F32, sess, fp, NULL,
                                            0.0f);
            TU_OK(ATTEND(fx.l, &a));
            double *ref = reference(&fx, B, Hq, Tq, q, RKV_DTYPE_F32, sess,
                                    fp, NULL, 1.0 / sqrt((double)D));
            char what[64];
            snprintf(what, sizeof what, "D %lld Tq %lld", (long long)D,
                     (long long)Tq);
            expect_close(&fx.g, out, RKV_DTYPE_F32, ref, n, 1e-5, what);
            for (int i = 0; i < 8; i++)
                if (out[n + (size_t)i] != -77.0f)
                    fail_msg("%s: wrote past the output", what);
            free(ref);
            free(out);
            free(q);
        }
        fixture_free(&fx);
    }
}

/* Explicit rows with scattered single slots (not frame- or block-aligned),
 * of several densities, including a single visible slot. */
static void test_sparse_explicit_rows(void **state)
{
    (void)state;
    fixture fx = fixture_new(base_geom(RKV_DTYPE_F32), kClocks);
    int64_t Hq = 4, T = 128, D = 16, N = tu_N(&fx.g), B = 3;
    size_t per = (size_t)(Hq * T * D), n = per * (size_t)B;
    float *q = tu_xmalloc(n * 4);
    uint8_t *vis = tu_xmalloc((size_t)(B * N));
    tu_rng r = {23};
    tu_fill_uniform(q, n, &r);
    static const int dens[] = {1, 3, 30, 97};
    for (int k = 0; k < 4; k++) {
        for (int64_t j = 0; j < B * N; j++)
            vis[j] = tu_randint(&r, 100) < dens[k];
        vis[1 * N + 17] = 1; /* never empty */
        /* row 2: exactly one visible slot */
        memset(vis + 2 * N, 0, (size_t)N);
        vis[2 * N + 1000] = 1;
        int64_t sess[3] = {0, 1, 2};
        float *out = nan_buf(n);
        rkv_attention_args a = args_new(B, Hq, T, q, RKV_DTYPE_F32, out,
                                        RKV_DTYPE_F32, sess, NULL, vis, 0.0f);
        TU_OK(ATTEND(fx.l, &a));
        double *ref = reference(&fx, B, Hq, T, q, RKV_DTYPE_F32, sess, NULL,
                                vis, 0.25);
        char what[64];
        snprintf(what, sizeof what, "density %d%%", dens[k]);
        /* row 0 may be empty at 1%: the reference gives 0 there too */
        expect_close(&fx.g, out, RKV_DTYPE_F32, ref, n, 1e-5, what);
        /* a single visible slot: the output is that slot's V exactly */
        for (int64_t h = 0; h < Hq; h++)
            for (int64_t i = 0; i < T; i++)
                for (int64_t d = 0; d < D; d++) {
                    double v = tu_kv_at(fx.l, 1, h / 2, 1000, d);
                    float o = out[2 * per + (size_t)((h * T + i) * D + d)];
                    if (fabs(o - v) > 1e-6 * (fabs(v) + 1e-3))
                        fail_msg("%s: one-slot row gives %g, expected V %g",
                                 what, o, v);
                }
        free(ref);
        free(out);
    }
    free(vis);
    free(q);
    fixture_free(&fx);
}


/* The header puts no distinctness rule on attention rows: the same session
 * twice in one call (e.g. at two clocks, or two query sets) must work. */
static void test_same_session_twice(void **state)
{
    (void)state;
    fixture fx = fixture_new(base_geom(RKV_DTYPE_F32), kClocks);
    int64_t Hq = 2, T = 128, D = 16, B = 2;
    size_t n = (size_t)(B * Hq * T * D);
    float *q = tu_xmalloc(n * 4);
    tu_rng r = {25};
    tu_fill_uniform(q, n, &r);
    int64_t sess[2] = {1, 1}, fp[2] = {fx.clock[1], fx.clock[1] + 1};
    float *out = nan_buf(n);
    rkv_attention_args a = args_new(B, Hq, T, q, RKV_DTYPE_F32, out,
                                    RKV_DTYPE_F32, sess, fp, NULL, 0.0f);
    TU_OK(ATTEND(fx.l, &a));
    double *ref = reference(&fx, B, Hq, T, q, RKV_DTYPE_F32, sess, fp, NULL,
                            0.25);
    expect_close(&fx.g, out, RKV_DTYPE_F32, ref, n, 1e-5, "same session twice");
    free(ref);
    free(out);
    free(q);
    fixture_free(&fx);
}

/* f32 (and bf16) storage can hold subnormal values; attention over them is
 * still f32 arithmetic and must match the float64 result norm-wise. */
static void test_subnormal_values(void **state)
{
    (void)state;
    rkv_geometry g = tu_geom(1, 1, 2, 2, 8, 128, 1, RKV_DTYPE_F32);
    rkv_layer *l = tu_layer_new(&g);
    size_t fn = (size_t)(2 * 128 * 8);
    float *fr = tu_xmalloc(fn * 4);
    tu_rng r = {26};
    for (int64_t f = 0; f < 3; f++) {
        tu_fill_uniform(fr, fn / 2, &r);            /* K: normal */
        for (size_t i = fn / 2; i < fn; i++)       /* V: subnormal */
            fr[i] = tu_uniform(&r) * 1e-39f;
        int64_t s = 0;
        TU_OK(rkv_layer_upsert(l, fr, RKV_DTYPE_F32, 1, &f, &s, f < 2,
                               NULL));
    }
    fixture fx;
    memset(&fx, 0, sizeof fx);
    fx.g = g;
    fx.l = l;
    int64_t Hq = 1, T = 128, D = 8, s = 0, f = 2;
    size_t n = (size_t)(Hq * T * D);
    float *q = tu_xmalloc(n * 4);
    tu_fill_uniform(q, n, &r);
    float *out = nan_buf(n);
    rkv_attention_args a = args_new(1, Hq, T, q, RKV_DTYPE_F32, out,
                                    RKV_DTYPE_F32, &s, &f, NULL, 0.0f);
    TU_OK(ATTEND(l, &a));
    double *ref = reference(&fx, 1, Hq, T, q, RKV_DTYPE_F32, &s, &f, NULL,
                            1.0 / sqrt(8.0));
    /* subnormal outputs carry fewer bits: 1e-3 is still far from the 100%
     * error of flushing them to zero */
    expect_close(&fx.g, out, RKV_DTYPE_F32, ref, n, 1e-3, "subnormal V");
    free(ref);
    free(out);
    free(q);
    free(fr);
    rkv_layer_destroy(l);
}

/* bf16 storage with d_head 64 and 128: the shapes the AMX path takes (on
 * CPUs with AMX; elsewhere the f32-widening kernel). That path rounds the
 * queries and the softmax weights to bf16, so the fast path is held to the
 * bf16 tolerance of SEMANTICS 5 (1e-2; ~2e-3 measured) against the float64
 * result on the stored values, with odd Tq, B > 1 and explicit rows, and
 * stays bit-identical whatever the thread count. */
static void test_bf16_tile_shapes(void **state)
{
    (void)state;
    static const int64_t dims[2] = {64, 128};
    for (int k = 0; k < 2; k++) {
        /* B 2 under a sanitizer (still a batch; a third of the work less) */
        const int64_t D = dims[k], Hq = 4, T = 128, Tq = 77, B = RKVT_SIZE(3, 2);
        rkv_geometry g = tu_geom(3, 2, 4, 3, D, T, 2, RKV_DTYPE_BF16);
        fixture fx = fixture_new(g, kClocks);
        int64_t N = tu_N(&g);
        size_t n = (size_t)(B * Hq * Tq * D);
        float *q = tu_xmalloc(n * 4);
        tu_rng r = {40 + (uint64_t)k};
        tu_fill_uniform(q, n, &r);
        int64_t sess[3] = {2, 0, 1};
        int64_t fp[3] = {fx.clock[2], fx.clock[0], fx.clock[1]};
        float *o = nan_buf(n), *o1 = nan_buf(n);
        for (int explicit_rows = 0; explicit_rows < 2; explicit_rows++) {
            uint8_t *vis = NULL;
            if (explicit_rows) {
                vis = tu_xmalloc((size_t)(B * N));
                for (size_t i = 0; i < (size_t)(B * N); i++)
                    vis[i] = tu_uniform(&r) > 0.4f;
            }
            rkv_attention_args a = args_new(B, Hq, Tq, q, RKV_DTYPE_F32, o,
                                            RKV_DTYPE_F32, sess, fp, vis,
                                            0.0f);
            TU_OK(ATTEND(fx.l, &a));
            double *ref = reference(&fx, B, Hq, Tq, q, RKV_DTYPE_F32, sess,
                                    fp, vis, 1.0 / sqrt((double)D));
            char what[64];
            snprintf(what, sizeof what, "bf16 D %lld%s", (long long)D,
                     explicit_rows ? " explicit rows" : "");
            expect_close(&fx.g, o, RKV_DTYPE_F32, ref, n, 1e-2, what);
            rkv_threadpool *p = NULL;
            TU_OK(rkv_threadpool_create(1, &p));
            a.out = o1;
            a.pool = p;
            TU_OK(ATTEND(fx.l, &a));
            assert_memory_equal(o, o1, n * 4);
            rkv_threadpool_destroy(p);
            free(ref);
            free(vis);
        }
        free(o);
        free(o1);
        free(q);
        fixture_free(&fx);
    }
}

/* ---- scores that are not plain numbers (issue 10) -------------------------
 * The layer: S 1, H 1, RF = RB = 4, PD 1, D 64, T 128 (or 256), in
 * each storage dtype; frames 0 and 1 committed, frame 2 in the scratch, so
 * at clock 2 the row sees frame 0, frame 1, the scratch: 3T keys in that
 * order, i.e. 128-key tiles 0 .. 3T/128 - 1. Keys uniform in [-0.5, 0.5],
 * values uniform in [-1, 1]; queries 0.1, with q0 in dimension 0; the keys
 * of the marked tiles get k0 in dimension 0 (other keys other_k0 there, or
 * uniform when NAN). Scores of -inf weigh 0 (float64 math, SDPA); a row whose
 * every key scores -inf gives 0 (the header's definition); +inf or NaN
 * scores give NaN. Every engine and dtype: the per-ISA ctest entries. */

enum { WANT_FINITE, WANT_ZERO, WANT_NAN };

typedef struct special_case {
    const char *name;
    int64_t T;
    unsigned mark;   /* bit i: key tile i marked */
    float k0, q0, other_k0;
    int want;
    int nan_key0; /* key 0 of frame 0: NaN in dimension 0 */
} special_case;

#define SP_D 64
/* Queries: every query row is the same, so 128 (two query tiles of 64) and,
 * under a sanitizer, 65 (a full tile and a partial one) test the same. */
#define SP_TQ RKVT_SIZE(128, 65)

/* The layer of a case; swap: frames 0 and 1 exchange contents (marks
 * included), the same keys in the other slot order. */
static rkv_layer *special_layer(rkv_dtype dt, const special_case *c, int swap)
{
    const int64_t T = c->T, D = SP_D;
    rkv_geometry g = tu_geom(1, 1, 4, 4, D, T, 1, dt);
    rkv_layer *l = tu_layer_new(&g);
    const size_t half = (size_t)(T * D), fn = 2 * half;
    tu_rng r = {0x1010 + (uint64_t)T};
    float *frames[3];
    for (int f = 0; f < 3; f++) {
        frames[f] = tu_xmalloc(fn * 4);
        for (size_t i = 0; i < half; i++) /* K */
            frames[f][i] = 0.5f * tu_uniform(&r);
        for (size_t i = half; i < fn; i++) /* V */
            frames[f][i] = tu_uniform(&r);
        for (int64_t t = 0; t < T; t++) {
            const int64_t tile = (f * T + t) / 128;
            if (c->mark >> tile & 1)
                frames[f][t * D] = c->k0;
            else if (!isnan(c->other_k0))
                frames[f][t * D] = c->other_k0;
        }
    }
    if (c->nan_key0)
        frames[0][0] = NAN;
    for (int64_t f = 0; f < 3; f++) {
        const int src = swap && f < 2 ? 1 - (int)f : (int)f;
        void *kv = tu_to_dtype(frames[src], fn, dt);
        int64_t s = 0;
        TU_OK(rkv_layer_upsert(l, kv, dt, 1, &f, &s, f < 2, NULL));
        free(kv);
    }
    for (int f = 0; f < 3; f++)
        free(frames[f]);
    return l;
}

/* The engine's tolerance (SEM 5): f32 accumulation over the stored values,
 * 1e-5; the bf16 pair engines round queries and weights to bf16, 1e-2. */
static double special_tol(const rkv_layer *l)
{
    const char *isa = rkv_attention_isa(l);
    const int pairs = !strcmp(isa, "amx") || !strcmp(isa, "avx512bf16");
    return g_attend == rkv_layer_attend && pairs ? 1e-2 : 1e-5;
}

/* Attends the layer at clock 2 with the case's queries: out [SP_TQ][D] f32;
 * also the float64 result into ref. */
static void special_attend(const rkv_layer *l, const special_case *c, float *out, double *ref)
{
    const size_t n = (size_t)SP_TQ * SP_D;
    float *q = tu_xmalloc(n * 4);
    double *qd = tu_xmalloc(n * 8);
    for (size_t i = 0; i < n; i++)
        q[i] = i % SP_D ? 0.1f : c->q0;
    for (size_t i = 0; i < n; i++)
        qd[i] = q[i];
    int64_t s = 0, f = 2;
    for (size_t i = 0; i < n; i++)
        out[i] = 12345.0f;
    rkv_attention_args a = args_new(1, 1, SP_TQ, q, RKV_DTYPE_F32, out, RKV_DTYPE_F32, &s, &f,
                                    NULL, 0.0f);
    TU_OK(ATTEND(l, &a));
    const rkv_geometry *g = rkv_layer_geometry(l);
    uint8_t *row = tu_xmalloc((size_t)tu_N(g));
    tu_bits_rule_row(g, rkv_layer_written(l), 0, 2, row);
    tu_naive_attend(l, 1, SP_TQ, qd, row, 1.0 / 8.0, ref);
    free(row);
    free(qd);
    free(q);
}

static const special_case k_special[] = {
    /* the input: frame 0's keys +inf in dimension 0, the query -1
     * there: the first key tile scores -inf (NaN everywhere before) */
    {"issue: first tile -inf", 128, 0x1, INFINITY, -1.0f, NAN, WANT_FINITE, 0},
    /* the same by overflow of finite f32 inputs: 1e30 x -1e10 (the other
     * keys 0 there, so that their scores stay finite; f16 stores 1e30 as
     * +inf, the same case) */
    {"finite 1e30 x -1e10", 128, 0x1, 1e30f, -1e10f, 0.0f, WANT_FINITE, 0},
    /* the same keys in a later frame, in the scratch */
    {"frame 1 -inf", 128, 0x2, INFINITY, -1.0f, NAN, WANT_FINITE, 0},
    {"scratch -inf", 128, 0x4, INFINITY, -1.0f, NAN, WANT_FINITE, 0},
    /* T 256: one tile of frame 0 and one of frame 1, the others finite */
    {"T 256: tiles 0 and 3 -inf", 256, 0x9, INFINITY, -1.0f, NAN, WANT_FINITE, 0},
    {"T 256: tiles 1 and 2 -inf", 256, 0x6, INFINITY, -1.0f, NAN, WANT_FINITE, 0},
    /* every visible key scores -inf: 0, as a row with no key */
    {"every key -inf", 128, 0x7, INFINITY, -1.0f, NAN, WANT_ZERO, 0},
    {"every key -inf, T 256", 256, 0x3f, INFINITY, -1.0f, NAN, WANT_ZERO, 0},
    /* a later frame's keys scoring above the first's max: by 2.5 (weights
     * up to 2^3.6 against the running max: the pair engine keeps it) and
     * by 12.5 (past its 2^8: the chunk is redone with the max raised) */
    {"frame 1 scores 2.5 above", 128, 0x2, 20.0f, 1.0f, NAN, WANT_FINITE, 0},
    {"frame 1 scores 12.5 above", 128, 0x2, 100.0f, 1.0f, NAN, WANT_FINITE, 0},
    {"scratch scores 12.5 above", 128, 0x4, 100.0f, 1.0f, NAN, WANT_FINITE, 0},
    /* +inf and NaN scores: NaN, as float64 math gives */
    {"frame 1 +inf", 128, 0x2, INFINITY, 1.0f, NAN, WANT_NAN, 0},
    {"first tile +inf", 128, 0x1, INFINITY, 1.0f, NAN, WANT_NAN, 0},
    {"frame 1 NaN", 128, 0x2, NAN, -1.0f, NAN, WANT_NAN, 0},
    {"one NaN key, the rest -inf", 128, 0x7, INFINITY, -1.0f, NAN, WANT_NAN, 1},
};

static void test_special_scores(void **state)
{
    (void)state;
    static const rkv_dtype dts[3] = {RKV_DTYPE_F32, RKV_DTYPE_F16, RKV_DTYPE_BF16};
    const size_t n = (size_t)SP_TQ * SP_D;
    float *out = tu_xmalloc(n * 4), *other = tu_xmalloc(n * 4);
    double *ref = tu_xmalloc(n * 8), *ref2 = tu_xmalloc(n * 8);
    for (int k = 0; k < 3; k++)
        for (size_t ci = 0; ci < sizeof k_special / sizeof k_special[0]; ci++) {
            const special_case c = k_special[ci];
            char what[160];
            snprintf(what, sizeof what, "%s storage, %s", rkv_dtype_name(dts[k]), c.name);
            rkv_layer *l = special_layer(dts[k], &c, 0);
            special_attend(l, &c, out, ref);
            const double tol = special_tol(l);
            if (c.want == WANT_FINITE) {
                expect_close(rkv_layer_geometry(l), out, RKV_DTYPE_F32, ref, n, tol, what);
                if (g_attend == rkv_layer_attend) { /* and the library's reference */
                    g_attend = rkvt_attend_reference;
                    special_attend(l, &c, other, ref2);
                    g_attend = rkv_layer_attend;
                    for (size_t i = 0; i < n; i++)
                        ref2[i] = other[i];
                    expect_close(rkv_layer_geometry(l), out, RKV_DTYPE_F32, ref2, n, tol, what);
                }
                /* the same keys in the other slot order */
                if (c.T == 128 && (c.mark == 0x1 || c.mark == 0x2)) {
                    rkv_layer *l2 = special_layer(dts[k], &c, 1);
                    special_attend(l2, &c, other, ref2);
                    for (size_t i = 0; i < n; i++)
                        ref2[i] = out[i];
                    snprintf(what, sizeof what, "%s storage, %s, frames 0 and 1 swapped",
                             rkv_dtype_name(dts[k]), c.name);
                    expect_close(rkv_layer_geometry(l2), other, RKV_DTYPE_F32, ref2, n, tol, what);
                    rkv_layer_destroy(l2);
                }
            } else {
                for (size_t i = 0; i < n; i++) {
                    const int ok = c.want == WANT_ZERO ? out[i] == 0.0f && ref[i] == 0.0
                                                        : isnan(out[i]) && isnan(ref[i]);
                    if (!ok)
                        fail_msg("%s: out[%zu] = %g (float64 %g), expected %s", what, i,
                                 (double)out[i], ref[i], c.want == WANT_ZERO ? "0" : "NaN");
                }
            }
            rkv_layer_destroy(l);
        }
    free(out);
    free(other);
    free(ref);
    free(ref2);
}

/* ---- fast path only ---------------------------------------------------------- */

static void test_isa(void **state)
{
    (void)state;
    const char *isa = rkv_attention_isa(NULL);
    assert_non_null(isa);
    assert_true(!strcmp(isa, "amx") || !strcmp(isa, "avx512bf16") || !strcmp(isa, "avx512") ||
                !strcmp(isa, "avx2") || !strcmp(isa, "generic"));
    print_message("  attention ISA: %s\n", isa);
    /* RKV_ISA names a path this CPU has: that path runs (so the ctest runs
     * under RKV_ISA=... really test the kernel they name) */
    const char *want = getenv("RKV_ISA");
    int have = want && !strcmp(want, "generic");
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    const int avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                       __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
                       __builtin_cpu_supports("fma");
    if (want && !strcmp(want, "avx512")) have = avx512;
    if (want && !strcmp(want, "avx512bf16"))
        have = avx512 && __builtin_cpu_supports("avx512bf16");
    if (want && !strcmp(want, "avx2"))
        have = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#endif
    if (have) assert_string_equal(isa, want);
    /* per layer: the same, except that f32 storage never runs on bf16 pairs */
    assert_string_equal(rkv_attention_isa(NULL), isa); /* NULL: the CPU's choice */
    rkv_geometry g32 = tu_geom(1, 1, 2, 2, 64, 128, 1, RKV_DTYPE_F32);
    rkv_geometry g16 = tu_geom(1, 1, 2, 2, 64, 128, 1, RKV_DTYPE_BF16);
    rkv_layer *l32, *l16;
    assert_int_equal(rkv_layer_create(&g32, &l32), RKV_OK);
    assert_int_equal(rkv_layer_create(&g16, &l16), RKV_OK);
    assert_string_equal(rkv_attention_isa(l16), isa);
    const int pairs = !strcmp(isa, "amx") || !strcmp(isa, "avx512bf16");
    assert_string_equal(rkv_attention_isa(l32), pairs ? "avx512" : isa);
    /* the same storage on the reference table: its attention is the oracle */
    const rkv_backend_storage st = {(void *)rkv_layer_kv(l32), (uint8_t *)rkv_layer_written(l32),
                                    NULL};
    rkv_layer *ref = NULL;
    assert_int_equal(rkv_layer_wrap(rkv_backend_cpu_reference(), NULL, &g32, &st, &ref), RKV_OK);
    assert_string_equal(rkv_attention_isa(ref), "reference");
    rkv_layer_destroy(ref);
    rkv_layer_destroy(l32);
    rkv_layer_destroy(l16);
}

/* Outputs are bit-identical whatever the pool's thread count, and the fast
 * path agrees with the library's reference. The thread count changes how
 * many (query head, query tile) units of a KV head one task takes (8, 4, 2
 * or 1, keeping >= 4 tasks a thread), so each shape runs several groupings;
 * the second has 3 query heads a KV head and 2 tiles (6 units: groups of 4
 * leave a task of 2), 100 queries of 128 tokens (a last tile of 36) and
 * d_head 40. */
static void thread_count_case(rkv_geometry g, int64_t Hq, int64_t T, int64_t D)
{
    int64_t clocks[3] = {5, 8, 2};
    fixture fx = fixture_new(g, clocks);
    const int64_t B = 3;
    size_t n = (size_t)(B * Hq * T * D);
    float *q = tu_xmalloc(n * 4);
    tu_rng r = {24};
    tu_fill_uniform(q, n, &r);
    int64_t sess[3] = {2, 0, 1}, fp[3] = {2, 5, 8};
    float *o0 = nan_buf(n), *o = nan_buf(n);
    rkv_attention_args a = args_new(B, Hq, T, q, RKV_DTYPE_F32, o0,
                                    RKV_DTYPE_F32, sess, fp, NULL, 0.0f);
    TU_OK(rkv_layer_attend(fx.l, &a)); /* default pool */
    static const int nthreads[] = {1, 2, 3, 5, 8};
    for (int k = 0; k < 5; k++) {
        rkv_threadpool *p = NULL;
        TU_OK(rkv_threadpool_create(nthreads[k], &p));
        assert_non_null(p);
        assert_int_equal(rkv_threadpool_size(p), nthreads[k]);
        for (size_t i = 0; i < n; i++)
            o[i] = NAN;
        a.out = o;
        a.pool = p;
        TU_OK(rkv_layer_attend(fx.l, &a));
        if (memcmp(o, o0, n * 4) != 0)
            fail_msg("%d threads: output differs from the default pool's",
                     nthreads[k]);
        /* the same pool again (reused threads) */
        TU_OK(rkv_layer_attend(fx.l, &a));
        assert_memory_equal(o, o0, n * 4);
        rkv_threadpool_destroy(p);
    }
    /* pool of 0 = the machine's cores */
    rkv_threadpool *p = NULL;
    TU_OK(rkv_threadpool_create(0, &p));
    assert_true(rkv_threadpool_size(p) >= 1);
    a.pool = p;
    TU_OK(rkv_layer_attend(fx.l, &a));
    assert_memory_equal(o, o0, n * 4);
    rkv_threadpool_destroy(p);
    /* the reference agrees */
    a.pool = NULL;
    a.out = o;
    TU_OK(rkvt_attend_reference(fx.l, &a));
    double *ref = tu_xmalloc(n * 8);
    for (size_t i = 0; i < n; i++)
        ref[i] = o[i];
    expect_close(&fx.g, o0, RKV_DTYPE_F32, ref, n, 2e-6, "fast vs reference");
    free(ref);
    ref = reference(&fx, B, Hq, T, q, RKV_DTYPE_F32, sess, fp, NULL, 1.0 / sqrt((double)D));
    expect_close(&fx.g, o0, RKV_DTYPE_F32, ref, n, 1e-5, "fast vs float64");
    free(ref);
    free(o0);
    free(o);
    free(q);
    fixture_free(&fx);
}

static void test_thread_count_bit_identical(void **state)
{
    (void)state;
    /* Hq 4 under a sanitizer: still GQA (2 query heads a KV head) */
    thread_count_case(tu_geom(3, 2, 4, 3, 64, 256, 2, RKV_DTYPE_F32), RKVT_SIZE(8, 4), 256, 64);
    thread_count_case(tu_geom(3, 1, 4, 3, 40, 128, 2, RKV_DTYPE_BF16), 3, 100, 40);
}


/* Calls from several threads at once, on the default pool and on one
 * shared pool: each gets its own right answer, nobody deadlocks (an alarm
 * turns a hang into a failure). */
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

typedef struct conc_job {
    const fixture *fx;
    rkv_threadpool *pool;
    int64_t s, f;
    const float *q;
    const float *want;
    size_t n;
    int bad;
} conc_job;

static void *conc_main(void *arg)
{
    conc_job *j = arg;
    float *out = tu_xmalloc(j->n * 4);
    for (int it = 0; it < 25; it++) {
        rkv_attention_args a = args_new(1, 4, 128, j->q, RKV_DTYPE_F32, out,
                                        RKV_DTYPE_F32, &j->s, &j->f, NULL,
                                        0.0f);
        a.pool = j->pool;
        if (rkv_layer_attend(j->fx->l, &a) != RKV_OK ||
            memcmp(out, j->want, j->n * 4) != 0)
            j->bad++;
    }
    free(out);
    return NULL;
}

static void test_concurrent_calls(void **state)
{
    (void)state;
    fixture fx = fixture_new(base_geom(RKV_DTYPE_F32), kClocks);
    size_t n = (size_t)(4 * 128 * 16);
    float *q[3], *want[3];
    tu_rng r = {27};
    for (int i = 0; i < 3; i++) {
        q[i] = tu_xmalloc(n * 4);
        want[i] = tu_xmalloc(n * 4);
        tu_fill_uniform(q[i], n, &r);
        int64_t s = i, f = fx.clock[i];
        rkv_attention_args a = args_new(1, 4, 128, q[i], RKV_DTYPE_F32,
                                        want[i], RKV_DTYPE_F32, &s, &f, NULL,
                                        0.0f);
        TU_OK(rkv_layer_attend(fx.l, &a));
    }
    rkv_threadpool *shared = NULL;
    TU_OK(rkv_threadpool_create(3, &shared));
    alarm(120);
    for (int mode = 0; mode < 2; mode++) {
        conc_job jobs[3];
        pthread_t th[3];
        for (int i = 0; i < 3; i++) {
            jobs[i] = (conc_job){&fx, mode ? shared : NULL, i, fx.clock[i],
                                 q[i], want[i], n, 0};
            assert_int_equal(pthread_create(&th[i], NULL, conc_main,
                                            &jobs[i]), 0);
        }
        for (int i = 0; i < 3; i++) {
            pthread_join(th[i], NULL);
            if (jobs[i].bad)
                fail_msg("%s pool: thread %d got %d wrong answers",
                         mode ? "shared" : "default", i, jobs[i].bad);
        }
    }
    alarm(0);
    rkv_threadpool_destroy(shared);
    for (int i = 0; i < 3; i++) {
        free(q[i]);
        free(want[i]);
    }
    fixture_free(&fx);
}

static int use_fast(void **state)
{
    (void)state;
    g_attend = rkv_layer_attend;
    return 0;
}
static int use_reference(void **state)
{
    (void)state;
    g_attend = rkvt_attend_reference;
    return 0;
}

#define ATTENTION_TESTS                                                        \
    cmocka_unit_test(test_f32_single_rows_bits_path),                          \
        cmocka_unit_test(test_f32_batch_rows),                                 \
        cmocka_unit_test(test_explicit_rows_equal_bits_path),                  \
        cmocka_unit_test(test_explicit_row_any_slots),                         \
        cmocka_unit_test(test_scale), cmocka_unit_test(test_default_scale_odd_d), \
        cmocka_unit_test(test_n_queries), cmocka_unit_test(test_gqa),          \
        cmocka_unit_test(test_larger_frame),                                   \
        cmocka_unit_test(test_half_dtypes),                                    \
        cmocka_unit_test(test_attention_follows_passes),                       \
        cmocka_unit_test(test_odd_dims),                                       \
        cmocka_unit_test(test_sparse_explicit_rows),                           \
        cmocka_unit_test(test_same_session_twice),                             \
        cmocka_unit_test(test_subnormal_values),                               \
        cmocka_unit_test(test_bf16_tile_shapes),                              \
        cmocka_unit_test(test_special_scores)

/* The plain ctest entry (no RKV_ISA) runs both engines: the fast path on
 * the kernel this CPU picks, and the reference. The per-ISA entries run the
 * fast path only (the reference engine never reads RKV_ISA), and each
 * kernel once: an entry whose kernel another entry tests is skipped, exit
 * 77 (tests/common/rkvt.h), after test_isa (a kernel the CPU has must run when
 * RKV_ISA names it, so that a skip cannot hide a wrong pick). */
int main(void)
{
    char why[256];
    if (rkvt_isa_entry_redundant(why, sizeof why)) {
        /* still: RKV_ISA names a kernel this CPU has -> that kernel runs */
        const struct CMUnitTest isa_only[] = {cmocka_unit_test(test_isa)};
        if (cmocka_run_group_tests_name("rkv_attention_isa", isa_only, NULL, NULL))
            return 1;
        printf("skipped: %s\n", why);
        return 77;
    }
    const char *isa_env = getenv("RKV_ISA");
    const int isa_entry = isa_env && *isa_env;
    const struct CMUnitTest fast[] = {
        ATTENTION_TESTS,
        cmocka_unit_test(test_isa),
        cmocka_unit_test(test_thread_count_bit_identical),
        cmocka_unit_test(test_concurrent_calls),
    };
    const struct CMUnitTest reference_tests[] = {ATTENTION_TESTS};
    int fails = cmocka_run_group_tests_name("rkv_layer_attend", fast,
                                            use_fast, NULL);
    if (!isa_entry)
        fails += cmocka_run_group_tests_name("rkv_layer_attend_reference",
                                             reference_tests, use_reference,
                                             NULL);
    return fails;
}

/* Visibility (SEM 3 step 3, SEM 4, SEM 5 block mask).
 *
 * The property the issue demands: for sessions that advance in order from
 * frame 0, on all 5 passes of every frame, over runs that wrap every ring
 * several times, three rules agree:
 *   - the reference row returned by upsert(visible = buf),
 *   - rkv_layer_visible_frames (written bits + clock), expanded with
 *     rkv_visible_row_from_frames,
 *   - rkv_visible_frames_from_clock (clock alone),
 * and the block mask equals the row's 128-token blocks. Also checked
 * against the test's own implementation of the rules (testutil.h).
 * Then: the bits rule after a reset mid-stream and for restored snapshots.
 */
#include "testutil.h"

typedef struct ctx {
    rkv_geometry g;
    int64_t N, C, T, QB, KB;
    uint8_t *ref, *bits, *clock, *mine, *mine_clock;
    int64_t *frames;
    int32_t *num_blocks, *indices;
} ctx;

static void ctx_init(ctx *c, const rkv_geometry *g)
{
    c->g = *g;
    c->N = tu_N(g);
    c->C = tu_C(g);
    c->T = g->tokens_per_frame;
    c->QB = c->T / 128;
    c->KB = c->N / 128;
    c->ref = tu_xmalloc((size_t)c->N);
    c->bits = tu_xmalloc((size_t)c->N);
    c->clock = tu_xmalloc((size_t)c->N);
    c->mine = tu_xmalloc((size_t)c->N);
    c->mine_clock = tu_xmalloc((size_t)c->N);
    c->frames = tu_xmalloc((size_t)(g->ring_frames + 1) * 8);
    c->num_blocks = tu_xmalloc((size_t)c->QB * 4);
    c->indices = tu_xmalloc((size_t)(c->QB * c->KB) * 4);
}
static void ctx_free(ctx *c)
{
    free(c->ref);
    free(c->bits);
    free(c->clock);
    free(c->mine);
    free(c->mine_clock);
    free(c->frames);
    free(c->num_blocks);
    free(c->indices);
}

/* A frame list must be ascending, within [0, RF], scratch last. */
static void check_list(const ctx *c, const int64_t *fr, int64_t n,
                       const char *what)
{
    if (n < 1 || n > c->g.ring_frames + 1)
        fail_msg("%s: count %lld outside [1, RF+1]", what, (long long)n);
    for (int64_t i = 0; i < n; i++) {
        if (fr[i] < 0 || fr[i] > c->g.ring_frames)
            fail_msg("%s: frame %lld out of range", what, (long long)fr[i]);
        if (i && fr[i] <= fr[i - 1])
            fail_msg("%s: list not ascending", what);
    }
    if (fr[n - 1] != RKV_SCRATCH_FRAME(&c->g))
        fail_msg("%s: scratch (%lld) not last", what,
                 (long long)RKV_SCRATCH_FRAME(&c->g));
}

/* Row of the bits rule via the library (frames -> row). */
static void lib_bits_row(ctx *c, const rkv_layer *l, int64_t s, int64_t f,
                         uint8_t *row)
{
    int64_t n = -1;
    for (int64_t i = 0; i <= c->g.ring_frames; i++)
        c->frames[i] = -99;
    TU_OK(rkv_layer_visible_frames(l, s, f, c->frames, &n));
    check_list(c, c->frames, n, "visible_frames");
    memset(row, 0xCC, (size_t)c->N);
    TU_OK(rkv_visible_row_from_frames(&c->g, s, c->frames, n, row));
}
static void lib_clock_row(ctx *c, int64_t s, int64_t f, uint8_t *row)
{
    int64_t n = -1;
    TU_OK(rkv_visible_frames_from_clock(&c->g, f, c->frames, &n));
    check_list(c, c->frames, n, "visible_frames_from_clock");
    memset(row, 0xCC, (size_t)c->N);
    TU_OK(rkv_visible_row_from_frames(&c->g, s, c->frames, n, row));
}

static void check_block_mask(ctx *c, const rkv_layer *l, int64_t s,
                             int64_t f, const uint8_t *row, const char *what)
{
    for (int64_t i = 0; i < c->QB; i++)
        c->num_blocks[i] = -7;
    for (int64_t i = 0; i < c->QB * c->KB; i++)
        c->indices[i] = -7;
    TU_OK(rkv_layer_block_mask(l, s, f, c->num_blocks, c->indices));
    /* expected: the row's blocks, every block full or empty */
    int64_t want_n = 0;
    for (int64_t kb = 0; kb < c->KB; kb++) {
        int any = 0, all = 1;
        for (int64_t t = 0; t < 128; t++) {
            any |= row[kb * 128 + t] != 0;
            all &= row[kb * 128 + t] != 0;
        }
        if (any != all)
            fail_msg("%s: block %lld partially visible", what,
                     (long long)kb);
        if (any) {
            for (int64_t q = 0; q < c->QB; q++)
                if (c->indices[q * c->KB + want_n] != kb)
                    fail_msg("%s: query block %lld, entry %lld is %d, "
                             "expected block %lld", what, (long long)q,
                             (long long)want_n,
                             c->indices[q * c->KB + want_n], (long long)kb);
            want_n++;
        }
    }
    for (int64_t q = 0; q < c->QB; q++) {
        if (c->num_blocks[q] != want_n)
            fail_msg("%s: kv_num_blocks[%lld] = %d, expected %lld", what,
                     (long long)q, c->num_blocks[q], (long long)want_n);
        for (int64_t i = want_n; i < c->KB; i++)
            if (c->indices[q * c->KB + i] != 0)
                fail_msg("%s: padding kv_indices[%lld][%lld] = %d, "
                         "expected 0", what, (long long)q, (long long)i,
                         c->indices[q * c->KB + i]);
    }
}

static void fail_rows(ctx *c, int64_t s, const char *what, const uint8_t *a,
                      const char *an, const uint8_t *b, const char *bn)
{
    print_message("%s (RF %lld RB %lld PD %lld, session %lld):\n", what,
                  (long long)c->g.ring_frames, (long long)c->g.ring_buckets,
                  (long long)c->g.pinned_dilation, (long long)s);
    tu_print_row(an, &c->g, s, a);
    tu_print_row(bn, &c->g, s, b);
    fail_msg("%s: %s != %s", what, an, bn);
}

static void expect_rows_equal(ctx *c, int64_t s, const char *what,
                              const uint8_t *a, const char *an,
                              const uint8_t *b, const char *bn)
{
    if (memcmp(a, b, (size_t)c->N) != 0)
        fail_rows(c, s, what, a, an, b, bn);
}

/* The main property: S sessions, session s starts `lag * s` frames late, all
 * advance in order from 0 with the 4+1 schedule. */
static void run_in_order(const rkv_geometry *g, int64_t extra, int64_t lag)
{
    ctx c;
    ctx_init(&c, g);
    rkv_layer *l = tu_layer_new(g);
    int64_t S = g->num_sessions, RB = g->ring_buckets,
            PD = g->pinned_dilation;
    int64_t nframes = 3 * RB * PD + extra;
    size_t fn = (size_t)(2 * g->n_kv_heads * g->tokens_per_frame * g->d_head);
    float *fr = tu_xmalloc(fn * 4);
    char what[160];
    for (int64_t step = 0; step < nframes + lag * (S - 1); step++) {
        for (int64_t s = 0; s < S; s++) {
            int64_t f = step - lag * s;
            if (f < 0 || f >= nframes)
                continue;
            for (int pass = 0; pass < 5; pass++) {
                int commit = pass == 4;
                snprintf(what, sizeof what, "session %lld frame %lld pass %d",
                         (long long)s, (long long)f, pass);
                if (pass == 0) {
                    /* before the first upsert of the frame the bits rule
                     * already gives the frame's set */
                    lib_bits_row(&c, l, s, f, c.bits);
                    lib_clock_row(&c, s, f, c.clock);
                    expect_rows_equal(&c, s, what, c.bits, "bits(before)",
                                      c.clock, "clock");
                }
                tu_gen_frame(fr, g, tu_key(s, f, (uint64_t)pass));
                void *kv = tu_to_dtype(fr, fn, g->dtype);
                memset(c.ref, 0xCC, (size_t)c.N);
                TU_OK(rkv_layer_upsert(l, kv, g->dtype, 1, &f, &s, commit,
                                       c.ref));
                free(kv);
                lib_bits_row(&c, l, s, f, c.bits);
                lib_clock_row(&c, s, f, c.clock);
                tu_clock_rule_row(g, s, f, c.mine_clock);
                expect_rows_equal(&c, s, what, c.ref, "upsert row", c.bits,
                                  "bits rule");
                expect_rows_equal(&c, s, what, c.ref, "upsert row", c.clock,
                                  "clock rule");
                expect_rows_equal(&c, s, what, c.ref, "upsert row",
                                  c.mine_clock, "test's clock rule");
                check_block_mask(&c, l, s, f, c.ref, what);
            }
            /* after the commit, the bits rule at the frame's clock still
             * gives the same set (the committed slot stays hidden) */
            lib_bits_row(&c, l, s, f, c.bits);
            expect_rows_equal(&c, s, "after commit", c.ref, "upsert row",
                              c.bits, "bits rule");
            /* and the written bits agree with the test's bits rule */
            tu_bits_rule_row(g, rkv_layer_written(l), s, f, c.mine);
            expect_rows_equal(&c, s, "after commit", c.ref, "upsert row",
                              c.mine, "test's bits rule");
        }
    }
    free(fr);
    rkv_layer_destroy(l);
    ctx_free(&c);
}

static void test_in_order_local_pd1(void **state)
{
    (void)state;
    rkv_geometry g = tu_geom(2, 1, 4, 4, 2, 128, 1, RKV_DTYPE_F32);
    run_in_order(&g, 5, 3);
    g = tu_geom(1, 1, 16, 16, 2, 128, 1, RKV_DTYPE_F32);
    run_in_order(&g, 2, 0);
}

static void test_in_order_pd2_rb_lt_rf(void **state)
{
    (void)state;
    /* the worked example's geometry, two sessions */
    rkv_geometry g = tu_geom(2, 1, 4, 3, 2, 128, 2, RKV_DTYPE_F32);
    run_in_order(&g, 7, 5);
    g = tu_geom(3, 2, 7, 5, 2, 256, 2, RKV_DTYPE_BF16);
    run_in_order(&g, 3, 2);
}

static void test_in_order_pd8_global(void **state)
{
    (void)state;
    /* the Waypoint global layer, compact and full ring */
    rkv_geometry g = tu_geom(2, 1, 16, 16, 1, 128, 8, RKV_DTYPE_F32);
    run_in_order(&g, 9, 11);
    g = tu_geom(1, 1, 128, 16, 1, 128, 8, RKV_DTYPE_F16);
    run_in_order(&g, 3, 0);
}

static void test_in_order_rb1(void **state)
{
    (void)state;
    rkv_geometry g = tu_geom(2, 1, 1, 1, 2, 128, 1, RKV_DTYPE_F32);
    run_in_order(&g, 4, 1);
    g = tu_geom(2, 1, 3, 1, 2, 128, 3, RKV_DTYPE_F32);
    run_in_order(&g, 5, 2);
}

static void test_in_order_odd_dilations(void **state)
{
    (void)state;
    rkv_geometry g = tu_geom(2, 1, 5, 4, 2, 128, 3, RKV_DTYPE_F32);
    run_in_order(&g, 4, 7);
    g = tu_geom(1, 1, 2, 2, 2, 128, 5, RKV_DTYPE_F32);
    run_in_order(&g, 6, 0);
}

/* Steady state of SEM 4: a local layer (PD 1, RB 16) shows 15 ring frames
 * plus the scratch, a global one (PD 8, RB 16) 15 on write steps, else 16. */
static void test_steady_state_counts(void **state)
{
    (void)state;
    rkv_geometry loc = tu_geom(1, 1, 16, 16, 64, 512, 1, RKV_DTYPE_BF16);
    rkv_geometry glb = tu_geom(1, 1, 16, 16, 64, 512, 8, RKV_DTYPE_BF16);
    rkv_geometry full = tu_geom(1, 1, 128, 16, 64, 512, 8, RKV_DTYPE_BF16);
    int64_t fr[129], n;
    for (int64_t f = 200; f < 400; f++) {
        TU_OK(rkv_visible_frames_from_clock(&loc, f, fr, &n));
        assert_int_equal(n, 16);
        TU_OK(rkv_visible_frames_from_clock(&glb, f, fr, &n));
        assert_int_equal(n, f % 8 == 0 ? 16 : 17);
        TU_OK(rkv_visible_frames_from_clock(&full, f, fr, &n));
        assert_int_equal(n, f % 8 == 0 ? 16 : 17);
        assert_int_equal(fr[n - 1], 128);
        for (int64_t i = 0; i + 1 < n; i++)
            assert_true(fr[i] < 16); /* only RB slots are addressed */
    }
    /* early clocks */
    TU_OK(rkv_visible_frames_from_clock(&loc, 0, fr, &n));
    assert_int_equal(n, 1);
    assert_int_equal(fr[0], 16);
    TU_OK(rkv_visible_frames_from_clock(&glb, 1, fr, &n));
    assert_int_equal(n, 2);
    assert_int_equal(fr[0], 0);
    TU_OK(rkv_visible_frames_from_clock(&glb, 8, fr, &n));
    assert_int_equal(n, 2); /* slot 1 is about to be written: hidden */
    assert_int_equal(fr[0], 0);
    TU_OK(rkv_visible_frames_from_clock(&glb, 9, fr, &n));
    assert_int_equal(n, 3);
    assert_int_equal(fr[0], 0);
    assert_int_equal(fr[1], 1);
}

/* Periodicity: the clock rule repeats with period RB*PD once every bucket
 * has been written. */
static void test_clock_rule_periodic(void **state)
{
    (void)state;
    static const int64_t geo[][3] = {{16, 16, 8}, {4, 3, 2}, {6, 6, 1},
                                     {5, 2, 3}};
    for (size_t i = 0; i < 4; i++) {
        rkv_geometry g = tu_geom(1, 1, geo[i][0], geo[i][1], 1, 128,
                                 geo[i][2], RKV_DTYPE_F32);
        int64_t period = geo[i][1] * geo[i][2];
        int64_t a[17], b[17], na, nb;
        for (int64_t f = period + 1; f < 4 * period; f++) {
            TU_OK(rkv_visible_frames_from_clock(&g, f, a, &na));
            TU_OK(rkv_visible_frames_from_clock(&g, f + period, b, &nb));
            assert_int_equal(na, nb);
            assert_memory_equal(a, b, (size_t)na * 8);
        }
    }
}

static void test_row_from_frames(void **state)
{
    (void)state;
    rkv_geometry g = tu_geom(3, 1, 4, 3, 2, 256, 2, RKV_DTYPE_F32);
    enum { N = 3 * 5 * 256 };
    int64_t C = tu_C(&g), T = 256;
    assert_int_equal(tu_N(&g), N);
    uint8_t *row = tu_xmalloc((size_t)N);
    int64_t fr[3] = {0, 2, 4};
    memset(row, 0xCC, (size_t)N);
    TU_OK(rkv_visible_row_from_frames(&g, 1, fr, 3, row));
    for (int64_t j = 0; j < N; j++) {
        int64_t s = j / C, r = (j % C) / T;
        int want = s == 1 && (r == 0 || r == 2 || r == 4);
        if (row[j] != want)
            fail_msg("row[%lld] = %d, expected %d", (long long)j, row[j],
                     want);
    }
    /* empty list: all zero */
    memset(row, 0xCC, (size_t)N);
    TU_OK(rkv_visible_row_from_frames(&g, 2, fr, 0, row));
    for (int64_t j = 0; j < N; j++)
        assert_int_equal(row[j], 0);
    free(row);
}

/* Block mask with several query blocks (T = 384): every query block gets
 * the same list; padded with 0. */
static void test_block_mask_multi_query_blocks(void **state)
{
    (void)state;
    rkv_geometry g = tu_geom(2, 1, 4, 3, 2, 384, 2, RKV_DTYPE_F32);
    ctx c;
    ctx_init(&c, &g);
    rkv_layer *l = tu_layer_new(&g);
    size_t fn = (size_t)(2 * 384 * 2);
    float *fr = tu_xmalloc(fn * 4);
    for (int64_t f = 0; f < 9; f++)
        for (int64_t s = 0; s < 2; s++)
            for (int pass = 0; pass < 5; pass++) {
                tu_gen_frame(fr, &g, tu_key(s, f, 0));
                TU_OK(rkv_layer_upsert(l, fr, RKV_DTYPE_F32, 1, &f, &s,
                                       pass == 4, c.ref));
                check_block_mask(&c, l, s, f, c.ref, "T=384");
            }
    /* one explicit case: session 1 at clock 8 (frame 8 committed; ring
     * [6,8,4,-] as in the worked example): ring slots 0 (frame 6) and 2
     * (frame 4) and the scratch; slot 1 is the write slot, hidden */
    int64_t C = tu_C(&g);
    int64_t s = 1, f = 8;
    TU_OK(rkv_layer_block_mask(l, s, f, c.num_blocks, c.indices));
    int64_t b0 = s * C / 128;
    int32_t want[] = {(int32_t)b0, (int32_t)b0 + 1, (int32_t)b0 + 2,
                      (int32_t)(b0 + 6), (int32_t)(b0 + 7), (int32_t)(b0 + 8),
                      (int32_t)(b0 + 12), (int32_t)(b0 + 13),
                      (int32_t)(b0 + 14)};
    for (int64_t q = 0; q < 3; q++) {
        assert_int_equal(c.num_blocks[q], 9);
        for (int i = 0; i < 9; i++)
            assert_int_equal(c.indices[q * c.KB + i], want[i]);
    }
    free(fr);
    rkv_layer_destroy(l);
    ctx_free(&c);
}

/* After a reset mid-stream, the session restarts at an arbitrary clock: the
 * clock rule no longer applies, the bits rule still equals the reference
 * row; after a restart at frame 0 the clock rule agrees again. */
static void test_bits_rule_after_reset(void **state)
{
    (void)state;
    static const int64_t geo[][3] = {{4, 3, 2}, {16, 16, 8}, {5, 5, 1}};
    for (size_t gi = 0; gi < 3; gi++) {
        rkv_geometry g = tu_geom(2, 1, geo[gi][0], geo[gi][1], 2, 128,
                                 geo[gi][2], RKV_DTYPE_F32);
        ctx c;
        ctx_init(&c, &g);
        rkv_layer *l = tu_layer_new(&g);
        size_t fn = (size_t)(2 * 128 * 2);
        float *fr = tu_xmalloc(fn * 4);
        int64_t period = geo[gi][1] * geo[gi][2];
        /* phase 0: in order from 0; phase 1: reset, restart at 37 (any
         * history); phase 2: reset, restart at 0 (clock rule again) */
        int64_t starts[3] = {0, 37, 0};
        for (int phase = 0; phase < 3; phase++) {
            if (phase)
                TU_OK(rkv_layer_reset(l, 1));
            for (int64_t f = starts[phase];
                 f < starts[phase] + 2 * period + 3; f++) {
                for (int64_t s = 0; s < 2; s++) {
                    /* session 0 keeps going in its own order */
                    int64_t fs = s == 0 ? f + 1000 * phase : f;
                    for (int pass = 0; pass < 5; pass++) {
                        tu_gen_frame(fr, &g, tu_key(s, fs, (uint64_t)pass));
                        TU_OK(rkv_layer_upsert(l, fr, RKV_DTYPE_F32, 1, &fs,
                                               &s, pass == 4, c.ref));
                        lib_bits_row(&c, l, s, fs, c.bits);
                        expect_rows_equal(&c, s, "after reset", c.ref,
                                          "upsert row", c.bits, "bits rule");
                        tu_bits_rule_row(&g, rkv_layer_written(l), s, fs,
                                         c.mine);
                        expect_rows_equal(&c, s, "after reset", c.ref,
                                          "upsert row", c.mine,
                                          "test's bits rule");
                        check_block_mask(&c, l, s, fs, c.ref, "after reset");
                        if (s == 1 && phase != 1) {
                            lib_clock_row(&c, s, fs, c.clock);
                            expect_rows_equal(&c, s, "restart at 0", c.ref,
                                              "upsert row", c.clock,
                                              "clock rule");
                        }
                    }
                }
            }
        }
        /* a restart at 37 right after reset: only the scratch visible */
        TU_OK(rkv_layer_reset(l, 1));
        int64_t s = 1, f = 37;
        tu_gen_frame(fr, &g, 4242);
        TU_OK(rkv_layer_upsert(l, fr, RKV_DTYPE_F32, 1, &f, &s, 0, c.ref));
        lib_bits_row(&c, l, s, f, c.bits);
        expect_rows_equal(&c, s, "restart", c.ref, "upsert row", c.bits,
                          "bits rule");
        int64_t n = -1;
        TU_OK(rkv_layer_visible_frames(l, s, f, c.frames, &n));
        assert_int_equal(n, 1);
        assert_int_equal(c.frames[0], g.ring_frames);
        lib_clock_row(&c, s, f, c.clock);
        assert_true(memcmp(c.clock, c.bits, (size_t)c.N) != 0);
        free(fr);
        rkv_layer_destroy(l);
        ctx_free(&c);
    }
}

/* A session restored from a snapshot (into another session of the model)
 * continues with the same visibility as the original: bits rule on the
 * restored session == reference row == clock rule, and both sessions hold
 * the same K/V from then on. */
static void test_bits_rule_restored_snapshot(void **state)
{
    (void)state;
    rkv_layer_spec specs[3] = {{4, 3, 2}, {5, 5, 1}, {16, 16, 8}};
    rkv_model_config cfg = tu_model_cfg(3, specs, 3, 2, 1, 2, 128,
                                        RKV_DTYPE_F32);
    rkv_model *m = NULL;
    TU_OK(rkv_model_create(&cfg, &m));
    int64_t a = -1, b = -1;
    TU_OK(rkv_model_claim(m, "original", &a));
    size_t fn = (size_t)(2 * 128 * 2);
    float *fr = tu_xmalloc(fn * 4);
    int64_t K = 29;
    for (int64_t f = 0; f < K; f++) {
        TU_OK(rkv_model_begin_frame(m, 1, &a, &f));
        for (int pass = 0; pass < 5; pass++)
            for (int64_t li = 0; li < 3; li++) {
                tu_gen_frame(fr, rkv_layer_geometry(rkv_model_layer(m, li)),
                             tu_key(li, f, (uint64_t)pass));
                TU_OK(rkv_model_upsert(m, li, NULL, 1, &a, fr, RKV_DTYPE_F32,
                                       pass == 4));
            }
    }
    size_t nbytes = rkv_model_snapshot_bytes(m);
    assert_true(nbytes > 0);
    void *buf = tu_xmalloc(nbytes);
    TU_OK(rkv_model_snapshot(m, a, buf, nbytes));
    TU_OK(rkv_model_claim(m, "copy", &b));
    assert_true(a != b);
    TU_OK(rkv_model_restore(m, b, buf, nbytes));
    int64_t clk = -5;
    TU_OK(rkv_model_clock(m, b, &clk));
    assert_int_equal(clk, K - 1);

    ctx cs[3];
    for (int64_t li = 0; li < 3; li++)
        ctx_init(&cs[li], rkv_layer_geometry(rkv_model_layer(m, li)));
    uint8_t *row_a = tu_xmalloc((size_t)cs[2].N);
    for (int64_t f = K; f < K + 40; f++)
        for (int pass = 0; pass < 5; pass++)
            for (int64_t li = 0; li < 3; li++) {
                rkv_layer *l = rkv_model_layer(m, li);
                const rkv_geometry *g = rkv_layer_geometry(l);
                ctx *c = &cs[li];
                tu_gen_frame(fr, g, tu_key(li, f, (uint64_t)pass));
                /* direct layer upserts (they bypass the model's clocks,
                 * which is fine here) so that we get the reference rows */
                TU_OK(rkv_layer_upsert(l, fr, RKV_DTYPE_F32, 1, &f, &a,
                                       pass == 4, row_a));
                TU_OK(rkv_layer_upsert(l, fr, RKV_DTYPE_F32, 1, &f, &b,
                                       pass == 4, c->ref));
                lib_bits_row(c, l, b, f, c->bits);
                lib_clock_row(c, b, f, c->clock);
                expect_rows_equal(c, b, "restored", c->ref, "upsert row",
                                  c->bits, "bits rule");
                expect_rows_equal(c, b, "restored", c->ref, "upsert row",
                                  c->clock, "clock rule");
                /* same frames as the original session, shifted */
                int64_t n = c->N / g->num_sessions;
                assert_memory_equal(row_a + a * n, c->ref + b * n,
                                    (size_t)n);
                size_t na, nb;
                unsigned char *ka = tu_copy_span(l, a * n, (a + 1) * n, &na);
                unsigned char *kb = tu_copy_span(l, b * n, (b + 1) * n, &nb);
                assert_memory_equal(ka, kb, na);
                free(ka);
                free(kb);
            }
    for (int64_t li = 0; li < 3; li++)
        ctx_free(&cs[li]);
    free(row_a);
    free(buf);
    free(fr);
    rkv_model_destroy(m);
}

/* Block mask against rkv_layer_visible_frames' list expanded by hand, on
 * written bits of any pattern (not only in-order sessions), every clock
 * over two turns of the ring, dilated and not, one and three query
 * blocks. */
static void test_block_mask_any_written_bits(void **state)
{
    (void)state;
    const rkv_geometry gs[] = {
        tu_geom(2, 1, 5, 5, 2, 128, 1, RKV_DTYPE_F32),
        tu_geom(2, 1, 6, 4, 2, 384, 2, RKV_DTYPE_F32),
        tu_geom(3, 1, 9, 3, 2, 128, 8, RKV_DTYPE_F32),
    };
    uint32_t seed = 12345u;
    for (size_t gi = 0; gi < sizeof gs / sizeof gs[0]; gi++) {
        const rkv_geometry *g = &gs[gi];
        ctx c;
        ctx_init(&c, g);
        rkv_layer *l = tu_layer_new(g);
        uint8_t *span = tu_xmalloc((size_t)c.C);
        const int64_t RF = g->ring_frames, pf = c.T / 128;
        for (int pattern = 0; pattern < 8; pattern++)
            for (int64_t s = 0; s < g->num_sessions; s++) {
                for (int64_t r = 0; r <= RF; r++) {
                    seed = seed * 1103515245u + 12345u;
                    memset(span + r * c.T, r == RF || ((seed >> 16) & 1), (size_t)c.T);
                }
                TU_OK(rkv_layer_write_span(l, s, RKV_SPAN_WRITTEN, 0, span));
                for (int64_t f = 0; f < 2 * g->ring_buckets * g->pinned_dilation + 3; f++) {
                    int64_t n = 0;
                    TU_OK(rkv_layer_visible_frames(l, s, f, c.frames, &n));
                    TU_OK(rkv_layer_block_mask(l, s, f, c.num_blocks, c.indices));
                    for (int64_t q = 0; q < c.QB; q++) {
                        assert_int_equal(c.num_blocks[q], n * pf);
                        for (int64_t i = 0; i < c.KB; i++) {
                            const int64_t want = i < n * pf ? s * c.C / 128 +
                                                 c.frames[i / pf] * pf + i % pf : 0;
                            if (c.indices[q * c.KB + i] != want)
                                fail_msg("RF %lld PD %lld session %lld clock %lld: "
                                         "kv_indices[%lld][%lld] = %d, expected %lld",
                                         (long long)RF, (long long)g->pinned_dilation,
                                         (long long)s, (long long)f, (long long)q,
                                         (long long)i, c.indices[q * c.KB + i],
                                         (long long)want);
                        }
                    }
                }
            }
        free(span);
        rkv_layer_destroy(l);
        ctx_free(&c);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_in_order_local_pd1),
        cmocka_unit_test(test_in_order_pd2_rb_lt_rf),
        cmocka_unit_test(test_in_order_pd8_global),
        cmocka_unit_test(test_in_order_rb1),
        cmocka_unit_test(test_in_order_odd_dilations),
        cmocka_unit_test(test_steady_state_counts),
        cmocka_unit_test(test_clock_rule_periodic),
        cmocka_unit_test(test_row_from_frames),
        cmocka_unit_test(test_block_mask_multi_query_blocks),
        cmocka_unit_test(test_block_mask_any_written_bits),
        cmocka_unit_test(test_bits_rule_after_reset),
        cmocka_unit_test(test_bits_rule_restored_snapshot),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

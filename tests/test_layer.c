/* One layer's ring (SEM 2, 3): initial state, the worked example of SEM 3
 * pass by pass, reset, session_span, the properties of SEM 3, batched
 * upserts, f16/bf16 storage. */
#include "testutil.h"

/* One upsert of one session row from an f32 frame [2][H][T][D]
 * (converted to the storage dtype). */
static void upsert1(rkv_layer *l, const float *frame, int64_t s, int64_t f,
                    int commit, uint8_t *visible)
{
    const rkv_geometry *g = rkv_layer_geometry(l);
    size_t n = (size_t)(2 * g->n_kv_heads * g->tokens_per_frame * g->d_head);
    void *kv = tu_to_dtype(frame, n, g->dtype);
    TU_OK(rkv_layer_upsert(l, kv, g->dtype, 1, &f, &s, commit, visible));
    free(kv);
}

static float *frame_new(const rkv_geometry *g)
{
    return tu_xmalloc((size_t)(2 * g->n_kv_heads * g->tokens_per_frame *
                               g->d_head) *
                      sizeof(float));
}

/* ---------------------------------------------------------------------- */

static void test_initial_state(void **state)
{
    (void)state;
    rkv_dtype dts[] = {RKV_DTYPE_F32, RKV_DTYPE_F16, RKV_DTYPE_BF16};
    for (int k = 0; k < 3; k++) {
        rkv_geometry g = tu_geom(3, 2, 4, 3, 8, 256, 2, dts[k]);
        rkv_layer *l = tu_layer_new(&g);
        int64_t C = tu_C(&g), N = tu_N(&g), L = tu_L(&g);
        assert_int_equal(rkv_geometry_capacity(rkv_layer_geometry(l)), C);
        assert_int_equal(rkv_geometry_total_slots(rkv_layer_geometry(l)), N);
        size_t bytes = (size_t)(2 * 2 * N * 8) * tu_esize(dts[k]);
        assert_int_equal(rkv_geometry_memory_bytes(rkv_layer_geometry(l)), bytes);
        /* K/V zero */
        const unsigned char *kv = rkv_layer_kv(l);
        assert_non_null(kv);
        for (size_t i = 0; i < bytes; i++)
            if (kv[i])
                fail_msg("%s: K/V byte %zu is %d, expected 0",
                         rkv_dtype_name(dts[k]), i, kv[i]);
        /* written: ring 0, scratch 1, per session */
        const uint8_t *w = rkv_layer_written(l);
        assert_non_null(w);
        for (int64_t j = 0; j < N; j++) {
            int want = (j % C) >= L;
            if (w[j] != want)
                fail_msg("written[%lld] = %d, expected %d", (long long)j,
                         w[j], want);
        }
        rkv_layer_destroy(l);
    }
}

static void test_session_span(void **state)
{
    (void)state;
    rkv_geometry g = tu_geom(4, 1, 3, 2, 4, 128, 1, RKV_DTYPE_F32);
    rkv_layer *l = tu_layer_new(&g);
    for (int64_t s = 0; s < 4; s++) {
        int64_t lo = -1, hi = -1;
        TU_OK(rkv_layer_session_span(l, s, &lo, &hi));
        assert_int_equal(lo, s * 512);
        assert_int_equal(hi, s * 512 + 512);
    }
    int64_t lo = 77, hi = 88;
    TU_ERR(rkv_layer_session_span(l, 4, &lo, &hi), RKV_ERR_RANGE, "4");
    TU_ERR(rkv_layer_session_span(l, -1, &lo, &hi), RKV_ERR_RANGE, "-1");
    assert_int_equal(lo, 77);
    assert_int_equal(hi, 88);
    rkv_layer_destroy(l);
}

/* SEM 3, worked example: RF 4, RB 3, PD 2, run on session 1 of 2 (session
 * 0 must stay untouched), on all 5 passes of every frame. */
static void test_worked_example(void **state)
{
    (void)state;
    rkv_geometry g = tu_geom(2, 2, 4, 3, 4, 128, 2, RKV_DTYPE_F32);
    rkv_layer *l = tu_layer_new(&g);
    const int64_t s = 1, T = 128, C = tu_C(&g), N = tu_N(&g), L = tu_L(&g);
    static const int commit_slot[9] = {0, -1, 1, -1, 2, -1, 0, -1, 1};
    static const int vis[9][4] = {
        {0, 0, 0, 0}, {1, 0, 0, 0}, {1, 0, 0, 0}, {1, 1, 0, 0},
        {1, 1, 0, 0}, {1, 1, 1, 0}, {0, 1, 1, 0}, {1, 1, 1, 0},
        {1, 0, 1, 0},
    };
    static const int ring_after[9][4] = {
        {0, -1, -1, -1}, {0, -1, -1, -1}, {0, 2, -1, -1}, {0, 2, -1, -1},
        {0, 2, 4, -1},   {0, 2, 4, -1},   {6, 2, 4, -1},  {6, 2, 4, -1},
        {6, 8, 4, -1},
    };
    float *frames[9];
    for (int p = 0; p < 9; p++) {
        frames[p] = frame_new(&g);
        tu_gen_frame(frames[p], &g, tu_key(s, p, 0));
    }
    uint8_t *row = tu_xmalloc((size_t)N);
    uint8_t *want = tu_xmalloc((size_t)N);
    for (int p = 0; p < 9; p++) {
        for (int pass = 0; pass < 5; pass++) {
            int commit = pass == 4;
            memset(row, 0xCC, (size_t)N);
            upsert1(l, frames[p], s, p, commit, row);
            /* expected row: listed ring slots + scratch of session 1 */
            memset(want, 0, (size_t)N);
            for (int r = 0; r < 4; r++)
                if (vis[p][r])
                    memset(want + s * C + r * T, 1, (size_t)T);
            memset(want + s * C + L, 1, (size_t)T);
            if (memcmp(row, want, (size_t)N) != 0) {
                print_message("frame %d pass %d:\n", p, pass);
                tu_print_row("got ", &g, s, row);
                tu_print_row("want", &g, s, want);
                for (int64_t j = 0; j < N; j++)
                    if (row[j] != want[j])
                        fail_msg("visible[%lld] = %d, expected %d",
                                 (long long)j, row[j], want[j]);
            }
            /* the scratch holds the frame being denoised */
            assert_true(tu_slots_hold(l, s * C + L, frames[p]));
            /* the bits rule gives the same set on every pass */
            int64_t fr[5], n = -1;
            TU_OK(rkv_layer_visible_frames(l, s, p, fr, &n));
            int64_t k = 0;
            for (int r = 0; r < 4; r++)
                if (vis[p][r]) {
                    assert_true(k < n);
                    assert_int_equal(fr[k], r);
                    k++;
                }
            assert_int_equal(n, k + 1);
            assert_int_equal(fr[k], RKV_SCRATCH_FRAME(&g));
        }
        /* committed: where the frame went */
        if (commit_slot[p] >= 0)
            assert_true(
                tu_slots_hold(l, s * C + commit_slot[p] * T, frames[p]));
        /* ring contents and written bits after the commit */
        const uint8_t *w = rkv_layer_written(l);
        for (int r = 0; r < 4; r++) {
            int fr = ring_after[p][r];
            int64_t lo = s * C + r * T;
            if (fr >= 0) {
                if (!tu_slots_hold(l, lo, frames[fr]))
                    fail_msg("after frame %d: ring slot %d does not hold "
                             "frame %d", p, r, fr);
            } else {
                if (!tu_slots_zero(l, lo, T))
                    fail_msg("after frame %d: ring slot %d should be empty",
                             p, r);
            }
            for (int64_t t = 0; t < T; t++)
                assert_int_equal(w[lo + t], fr >= 0);
        }
        for (int64_t t = 0; t < T; t++)
            assert_int_equal(w[s * C + L + t], 1);
        /* session 0 untouched: zero, ring unwritten, scratch armed */
        assert_true(tu_slots_zero(l, 0, C));
        for (int64_t j = 0; j < C; j++)
            assert_int_equal(w[j], j >= L);
    }
    for (int p = 0; p < 9; p++)
        free(frames[p]);
    free(row);
    free(want);
    rkv_layer_destroy(l);
}

static void test_reset(void **state)
{
    (void)state;
    rkv_geometry g = tu_geom(3, 2, 4, 4, 4, 128, 1, RKV_DTYPE_BF16);
    rkv_layer *l = tu_layer_new(&g);
    int64_t C = tu_C(&g), L = tu_L(&g);
    float *fr = frame_new(&g);
    for (int64_t f = 0; f < 6; f++)
        for (int64_t s = 0; s < 3; s++) {
            tu_gen_frame(fr, &g, tu_key(s, f, 4));
            upsert1(l, fr, s, f, 1, NULL);
        }
    /* save sessions 0 and 2 */
    size_t n0, n2;
    unsigned char *s0 = tu_copy_span(l, 0, C, &n0);
    unsigned char *s2 = tu_copy_span(l, 2 * C, 3 * C, &n2);
    uint8_t *w0 = tu_xmalloc((size_t)tu_N(&g));
    memcpy(w0, rkv_layer_written(l), (size_t)tu_N(&g));
    assert_false(tu_slots_zero(l, C, C));

    TU_OK(rkv_layer_reset(l, 1));
    assert_true(tu_slots_zero(l, C, C));
    const uint8_t *w = rkv_layer_written(l);
    for (int64_t j = C; j < 2 * C; j++)
        assert_int_equal(w[j], (j - C) >= L);
    size_t m0, m2;
    unsigned char *t0 = tu_copy_span(l, 0, C, &m0);
    unsigned char *t2 = tu_copy_span(l, 2 * C, 3 * C, &m2);
    assert_int_equal(n0, m0);
    assert_memory_equal(s0, t0, n0);
    assert_memory_equal(s2, t2, n2);
    assert_memory_equal(w0, w, (size_t)C);
    assert_memory_equal(w0 + 2 * C, w + 2 * C, (size_t)C);

    /* reset twice is harmless, and the session works again */
    TU_OK(rkv_layer_reset(l, 1));
    assert_true(tu_slots_zero(l, C, C));
    tu_gen_frame(fr, &g, 991);
    uint8_t *row = tu_xmalloc((size_t)tu_N(&g));
    int64_t s = 1, f = 57;
    void *kv = tu_to_dtype(fr, (size_t)(2 * 2 * 128 * 4), g.dtype);
    TU_OK(rkv_layer_upsert(l, kv, g.dtype, 1, &f, &s, 1, row));
    /* only the scratch is visible after a reset */
    for (int64_t j = 0; j < tu_N(&g); j++)
        assert_int_equal(row[j], j >= C + L && j < 2 * C);
    free(kv);
    free(row);
    free(s0);
    free(s2);
    free(t0);
    free(t2);
    free(w0);
    free(fr);
    TU_ERR(rkv_layer_reset(l, 3), RKV_ERR_RANGE, "3");
    TU_ERR(rkv_layer_reset(l, -2), RKV_ERR_RANGE, "-2");
    rkv_layer_destroy(l);
}

/* All 5 passes of a frame see byte-identical K/V: the visible rows and the
 * gathered visible K/V are the same on every pass (commit pass included). */
static void test_five_passes_identical(void **state)
{
    (void)state;
    static const int64_t geo[][3] = {{4, 3, 2}, {3, 3, 1}, {5, 2, 4}};
    for (size_t gi = 0; gi < 3; gi++) {
        rkv_geometry g = tu_geom(2, 2, geo[gi][0], geo[gi][1], 4, 128,
                                 geo[gi][2], RKV_DTYPE_F32);
        rkv_layer *l = tu_layer_new(&g);
        int64_t N = tu_N(&g), C = tu_C(&g), L = tu_L(&g);
        float *fr = frame_new(&g);
        uint8_t *row0 = tu_xmalloc((size_t)N), *row = tu_xmalloc((size_t)N);
        int64_t nframes = 3 * geo[gi][1] * geo[gi][2] + 3;
        for (int64_t f = 0; f < nframes; f++) {
            for (int64_t s = 0; s < 2; s++) {
                unsigned char *kv0 = NULL;
                size_t nb0 = 0;
                for (int pass = 0; pass < 5; pass++) {
                    /* a denoising pass changes the frame: only the
                     * history part must be identical across passes */
                    tu_gen_frame(fr, &g, tu_key(s, f, (uint64_t)pass));
                    upsert1(l, fr, s, f, pass == 4, row);
                    /* history part of the row (scratch excluded) */
                    memset(row + s * C + L, 0, (size_t)128);
                    size_t nb;
                    unsigned char *kvs = tu_gather_visible(l, row, &nb);
                    if (pass == 0) {
                        memcpy(row0, row, (size_t)N);
                        kv0 = kvs;
                        nb0 = nb;
                    } else {
                        if (memcmp(row0, row, (size_t)N) != 0)
                            fail_msg("geometry %zu frame %lld: pass %d sees "
                                     "other slots than pass 0",
                                     gi, (long long)f, pass);
                        assert_int_equal(nb, nb0);
                        if (memcmp(kv0, kvs, nb) != 0)
                            fail_msg("geometry %zu frame %lld: pass %d sees "
                                     "other K/V than pass 0",
                                     gi, (long long)f, pass);
                        free(kvs);
                    }
                    assert_true(tu_slots_hold(l, s * C + L, fr));
                }
                free(kv0);
            }
        }
        free(fr);
        free(row0);
        free(row);
        rkv_layer_destroy(l);
    }
}

/* Same frame on all passes: the whole visible K/V (scratch included) is
 * byte-identical, and so is the attention output. */
static void test_five_passes_same_frame_same_attention(void **state)
{
    (void)state;
    rkv_geometry g = tu_geom(1, 2, 4, 3, 8, 128, 2, RKV_DTYPE_F32);
    rkv_layer *l = tu_layer_new(&g);
    int64_t N = tu_N(&g), Hq = 4, T = 128, D = 8;
    float *fr = frame_new(&g);
    float *q = tu_xmalloc((size_t)(Hq * T * D) * 4);
    float *out0 = tu_xmalloc((size_t)(Hq * T * D) * 4);
    float *out = tu_xmalloc((size_t)(Hq * T * D) * 4);
    uint8_t *row0 = tu_xmalloc((size_t)N), *row = tu_xmalloc((size_t)N);
    tu_rng r = {5};
    for (int64_t f = 0; f < 14; f++) {
        tu_gen_frame(fr, &g, tu_key(0, f, 0));
        tu_fill_uniform(q, (size_t)(Hq * T * D), &r);
        unsigned char *kv0 = NULL;
        size_t nb0 = 0;
        for (int pass = 0; pass < 5; pass++) {
            upsert1(l, fr, 0, f, pass == 4, row);
            rkv_attention_args a = RKV_ATTENTION_ARGS_INIT;
            int64_t s = 0;
            a.batch = 1;
            a.n_q_heads = Hq;
            a.q = q;
            a.q_dtype = RKV_DTYPE_F32;
            a.out = pass ? out : out0;
            a.out_dtype = RKV_DTYPE_F32;
            a.session_idx = &s;
            a.frame_pos = &f;
            TU_OK(rkv_layer_attend(l, &a));
            size_t nb;
            unsigned char *kvs = tu_gather_visible(l, row, &nb);
            if (pass == 0) {
                memcpy(row0, row, (size_t)N);
                kv0 = kvs;
                nb0 = nb;
            } else {
                assert_memory_equal(row0, row, (size_t)N);
                assert_int_equal(nb, nb0);
                assert_memory_equal(kv0, kvs, nb);
                free(kvs);
                if (memcmp(out0, out, (size_t)(Hq * T * D) * 4) != 0)
                    fail_msg("frame %lld: attention on pass %d differs from "
                             "pass 0", (long long)f, pass);
            }
        }
        free(kv0);
    }
    free(fr);
    free(q);
    free(out0);
    free(out);
    free(row0);
    free(row);
    rkv_layer_destroy(l);
}

/* Re-running an upsert (or a whole frame) is idempotent. */
static void test_rerun_idempotent(void **state)
{
    (void)state;
    rkv_geometry g = tu_geom(2, 1, 4, 3, 4, 128, 2, RKV_DTYPE_F32);
    rkv_layer *a = tu_layer_new(&g), *b = tu_layer_new(&g);
    int64_t N = tu_N(&g);
    float *fr = frame_new(&g);
    uint8_t *ra = tu_xmalloc((size_t)N), *rb = tu_xmalloc((size_t)N);
    for (int64_t f = 0; f < 20; f++) {
        for (int64_t s = 0; s < 2; s++)
            for (int pass = 0; pass < 5; pass++) {
                int commit = pass == 4;
                tu_gen_frame(fr, &g, tu_key(s, f, (uint64_t)pass));
                upsert1(a, fr, s, f, commit, ra);
                upsert1(b, fr, s, f, commit, rb);
                /* b runs every upsert twice */
                uint8_t *rb2 = tu_xmalloc((size_t)N);
                upsert1(b, fr, s, f, commit, rb2);
                assert_memory_equal(rb, rb2, (size_t)N);
                assert_memory_equal(ra, rb, (size_t)N);
                free(rb2);
                if (!tu_layers_equal(a, b))
                    fail_msg("frame %lld session %lld pass %d: repeated "
                             "upsert changed the state",
                             (long long)f, (long long)s, pass);
            }
        /* and b re-runs the whole frame of session 0 */
        for (int pass = 0; pass < 5; pass++) {
            tu_gen_frame(fr, &g, tu_key(0, f, (uint64_t)pass));
            upsert1(b, fr, 0, f, pass == 4, rb);
        }
        /* the scratch of a holds session 0's last pass too */
        if (!tu_layers_equal(a, b))
            fail_msg("frame %lld: re-running the frame changed the state",
                     (long long)f);
    }
    free(fr);
    free(ra);
    free(rb);
    rkv_layer_destroy(a);
    rkv_layer_destroy(b);
}

/* Committing on every pass leaves the same state as the 4+1 schedule (with
 * a different frame on each pass: the last pass's frame is what stays). */
static void test_commit_every_pass_equals_4plus1(void **state)
{
    (void)state;
    static const int64_t geo[][3] = {{4, 3, 2}, {3, 3, 1}, {16, 16, 8},
                                     {6, 1, 3}};
    for (size_t gi = 0; gi < 4; gi++) {
        rkv_geometry g = tu_geom(2, 2, geo[gi][0], geo[gi][1], 4, 128,
                                 geo[gi][2], RKV_DTYPE_F32);
        rkv_layer *a = tu_layer_new(&g), *b = tu_layer_new(&g);
        int64_t N = tu_N(&g);
        float *fr = frame_new(&g);
        uint8_t *ra = tu_xmalloc((size_t)N), *rb = tu_xmalloc((size_t)N);
        int64_t nframes = 2 * geo[gi][1] * geo[gi][2] + 5;
        for (int64_t f = 0; f < nframes; f++)
            for (int64_t s = 0; s < 2; s++) {
                for (int pass = 0; pass < 5; pass++) {
                    tu_gen_frame(fr, &g, tu_key(s, f, (uint64_t)pass));
                    upsert1(a, fr, s, f, pass == 4, ra);
                    upsert1(b, fr, s, f, 1, rb);
                    if (memcmp(ra, rb, (size_t)N) != 0)
                        fail_msg("geometry %zu frame %lld pass %d: rows "
                                 "differ", gi, (long long)f, pass);
                }
                if (!tu_layers_equal(a, b))
                    fail_msg("geometry %zu frame %lld session %lld: commit "
                             "on every pass differs from 4+1",
                             gi, (long long)f, (long long)s);
            }
        free(fr);
        free(ra);
        free(rb);
        rkv_layer_destroy(a);
        rkv_layer_destroy(b);
    }
}

/* With PD > 1, frames with f mod PD != 0 never reach the ring: the ring part
 * is unchanged by their commits, and every ring slot holds a write-step
 * frame (the latest one that maps to it). */
static void test_dilated_nonwrite_never_reach_ring(void **state)
{
    (void)state;
    rkv_geometry g = tu_geom(1, 2, 4, 3, 4, 128, 4, RKV_DTYPE_F32);
    rkv_layer *l = tu_layer_new(&g);
    int64_t T = 128, L = tu_L(&g);
    float *fr = frame_new(&g);
    float *held[4] = {0};
    int64_t held_f[4] = {-1, -1, -1, -1};
    for (int64_t f = 0; f < 3 * 3 * 4 + 7; f++) {
        size_t nb_before;
        unsigned char *before = tu_copy_span(l, 0, L, &nb_before);
        uint8_t wb[4 * 128];
        memcpy(wb, rkv_layer_written(l), (size_t)L);
        for (int pass = 0; pass < 5; pass++) {
            tu_gen_frame(fr, &g, tu_key(0, f, (uint64_t)pass));
            upsert1(l, fr, 0, f, pass == 4, NULL);
        }
        size_t nb_after;
        unsigned char *after = tu_copy_span(l, 0, L, &nb_after);
        if (f % 4 != 0) {
            if (memcmp(before, after, nb_before) != 0)
                fail_msg("frame %lld (not a write step) changed the ring",
                         (long long)f);
            assert_memory_equal(wb, rkv_layer_written(l), (size_t)L);
        } else {
            int64_t slot = (f / 4) % 3;
            if (!held[slot])
                held[slot] = frame_new(&g);
            memcpy(held[slot], fr,
                   (size_t)(2 * 2 * 128 * 4) * sizeof(float));
            held_f[slot] = f;
        }
        for (int r = 0; r < 4; r++) {
            if (held_f[r] >= 0) {
                assert_true(held_f[r] % 4 == 0);
                if (!tu_slots_hold(l, r * T, held[r]))
                    fail_msg("after frame %lld ring slot %d does not hold "
                             "frame %lld", (long long)f, r,
                             (long long)held_f[r]);
            } else {
                assert_true(tu_slots_zero(l, r * T, T));
            }
        }
        free(before);
        free(after);
    }
    for (int r = 0; r < 4; r++)
        free(held[r]);
    free(fr);
    rkv_layer_destroy(l);
}

/* Sessions never see each other: a session's upserts change only its own
 * span, and its visibility row is zero outside its span. */
static void test_sessions_isolated(void **state)
{
    (void)state;
    rkv_geometry g = tu_geom(3, 2, 3, 3, 4, 128, 1, RKV_DTYPE_F32);
    rkv_layer *l = tu_layer_new(&g);
    int64_t C = tu_C(&g), N = tu_N(&g);
    float *fr = frame_new(&g);
    uint8_t *row = tu_xmalloc((size_t)N);
    int64_t clock[3] = {0, 5, 100};
    tu_rng r = {77};
    for (int step = 0; step < 60; step++) {
        int64_t s = tu_randint(&r, 3);
        tu_layer_state before = tu_layer_save(l);
        for (int pass = 0; pass < 5; pass++) {
            tu_gen_frame(fr, &g, tu_key(s, clock[s], (uint64_t)pass));
            upsert1(l, fr, s, clock[s], pass == 4, row);
            for (int64_t j = 0; j < N; j++)
                if (row[j] && (j < s * C || j >= (s + 1) * C))
                    fail_msg("session %lld sees slot %lld of session %lld",
                             (long long)s, (long long)j,
                             (long long)(j / C));
        }
        clock[s]++;
        /* other sessions byte-identical */
        for (int64_t o = 0; o < 3; o++) {
            if (o == s)
                continue;
            const rkv_geometry *lg = rkv_layer_geometry(l);
            size_t es = tu_esize(lg->dtype);
            const unsigned char *kv = rkv_layer_kv(l);
            for (int64_t ch = 0; ch < 2 * lg->n_kv_heads; ch++) {
                size_t off = (size_t)((ch * N + o * C) * lg->d_head) * es;
                if (memcmp(before.kv + off, kv + off,
                           (size_t)(C * lg->d_head) * es) != 0)
                    fail_msg("upsert of session %lld changed session %lld",
                             (long long)s, (long long)o);
            }
            assert_memory_equal(before.written + o * C,
                                rkv_layer_written(l) + o * C, (size_t)C);
        }
        tu_layer_state_free(&before);
    }
    free(fr);
    free(row);
    rkv_layer_destroy(l);
}

/* A batched upsert of B rows equals B single upserts, in any row order,
 * with and without commit. */
static void test_batched_equals_single(void **state)
{
    (void)state;
    rkv_dtype dts[] = {RKV_DTYPE_F32, RKV_DTYPE_BF16};
    for (int k = 0; k < 2; k++) {
        rkv_geometry g = tu_geom(5, 2, 4, 3, 4, 128, 2, dts[k]);
        rkv_layer *a = tu_layer_new(&g), *b = tu_layer_new(&g);
        int64_t clock[5] = {0, 3, 10, 0, 7};
        size_t fn = (size_t)(2 * 2 * 128 * 4);
        tu_rng r = {1234};
        for (int step = 0; step < 40; step++) {
            /* pick B distinct sessions in random order */
            int64_t perm[5] = {0, 1, 2, 3, 4};
            for (int i = 4; i > 0; i--) {
                int64_t j = tu_randint(&r, i + 1), t = perm[i];
                perm[i] = perm[j];
                perm[j] = t;
            }
            int64_t B = 1 + tu_randint(&r, 5);
            int commit = (int)tu_randint(&r, 2);
            int64_t fp[5];
            float *rows[5];
            for (int64_t i = 0; i < B; i++) {
                fp[i] = clock[perm[i]];
                rows[i] = tu_xmalloc(fn * 4);
                tu_gen_frame(rows[i], &g,
                             tu_key(perm[i], fp[i], (uint64_t)step));
            }
            float *packed = tu_xmalloc(fn * (size_t)B * 4);
            tu_pack(packed, (const float *const *)rows, B, &g);
            void *kv = tu_to_dtype(packed, fn * (size_t)B, g.dtype);
            TU_OK(rkv_layer_upsert(a, kv, g.dtype, B, fp, perm, commit,
                                   NULL));
            for (int64_t i = 0; i < B; i++)
                upsert1(b, rows[i], perm[i], fp[i], commit, NULL);
            if (!tu_layers_equal(a, b))
                fail_msg("%s step %d: batched upsert (B=%lld commit=%d) "
                         "differs from single upserts",
                         rkv_dtype_name(dts[k]), step, (long long)B, commit);
            if (commit)
                for (int64_t i = 0; i < B; i++)
                    clock[perm[i]]++;
            for (int64_t i = 0; i < B; i++)
                free(rows[i]);
            free(packed);
            free(kv);
        }
        rkv_layer_destroy(a);
        rkv_layer_destroy(b);
    }
}

/* The batched path writes each row where its own session and clock say,
 * checked directly (not only against single upserts). */
static void test_batched_rows_land_in_their_slots(void **state)
{
    (void)state;
    rkv_geometry g = tu_geom(3, 1, 4, 4, 2, 128, 1, RKV_DTYPE_F32);
    rkv_layer *l = tu_layer_new(&g);
    int64_t C = tu_C(&g), L = tu_L(&g), T = 128;
    size_t fn = (size_t)(2 * 1 * 128 * 2);
    float *rows[3];
    for (int i = 0; i < 3; i++) {
        rows[i] = tu_xmalloc(fn * 4);
        tu_gen_frame(rows[i], &g, (uint64_t)(900 + i));
    }
    float *packed = tu_xmalloc(fn * 3 * 4);
    tu_pack(packed, (const float *const *)rows, 3, &g);
    int64_t sess[3] = {2, 0, 1}, fp[3] = {6, 1, 3};
    TU_OK(rkv_layer_upsert(l, packed, RKV_DTYPE_F32, 3, fp, sess, 1, NULL));
    for (int i = 0; i < 3; i++) {
        int64_t s = sess[i], slot = fp[i] % 4;
        assert_true(tu_slots_hold(l, s * C + slot * T, rows[i]));
        assert_true(tu_slots_hold(l, s * C + L, rows[i]));
        for (int64_t r = 0; r < 4; r++) {
            assert_int_equal(rkv_layer_written(l)[s * C + r * T],
                             r == slot);
            if (r != slot)
                assert_true(tu_slots_zero(l, s * C + r * T, T));
        }
    }
    for (int i = 0; i < 3; i++)
        free(rows[i]);
    free(packed);
    rkv_layer_destroy(l);
}

/* f16 and bf16 storage: exactly representable values round-trip bit for
 * bit, into the scratch and into the ring. */
static void test_half_storage_round_trip(void **state)
{
    (void)state;
    rkv_dtype dts[] = {RKV_DTYPE_F16, RKV_DTYPE_BF16};
    for (int k = 0; k < 2; k++) {
        rkv_geometry g = tu_geom(2, 2, 3, 3, 8, 128, 1, dts[k]);
        rkv_layer *l = tu_layer_new(&g);
        int64_t C = tu_C(&g), L = tu_L(&g), T = 128;
        size_t n = (size_t)(2 * 2 * 128 * 8);
        float *x = tu_xmalloc(n * 4);
        /* k/8 for k in [-128, 128): exact in both f16 and bf16 (8 bits) */
        for (size_t i = 0; i < n; i++)
            x[i] = (float)((int)(i * 37 % 256) - 128) / 8.0f;
        x[0] = 65504.0f * (dts[k] == RKV_DTYPE_F16); /* f16 max */
        x[1] = -0.0f;
        x[2] = dts[k] == RKV_DTYPE_F16 ? ldexpf(1, -24) : ldexpf(1, -126);
        x[3] = dts[k] == RKV_DTYPE_BF16 ? 3.0e38f : 0.25f;
        if (dts[k] == RKV_DTYPE_BF16) {
            /* make x[3] exact in bf16 */
            uint32_t u;
            memcpy(&u, &x[3], 4);
            u &= 0xFFFF0000u;
            memcpy(&x[3], &u, 4);
        }
        void *kv = tu_to_dtype(x, n, dts[k]);
        int64_t s = 1, f = 2;
        TU_OK(rkv_layer_upsert(l, kv, dts[k], 1, &f, &s, 1, NULL));
        assert_true(tu_slots_hold(l, s * C + 2 * T, x));
        assert_true(tu_slots_hold(l, s * C + L, x));
        /* bit-exact: storage bytes equal the input bytes */
        const unsigned char *st = rkv_layer_kv(l);
        int64_t N = tu_N(&g);
        for (int64_t ch = 0; ch < 4; ch++) {
            const unsigned char *src =
                (const unsigned char *)kv + (size_t)(ch * T * 8) * 2;
            assert_memory_equal(st + (size_t)((ch * N + s * C + 2 * T) * 8) *
                                         2,
                                src, (size_t)(T * 8) * 2);
        }
        /* the sign of -0 survives */
        uint16_t z;
        memcpy(&z, st + (size_t)((s * C + 2 * T) * 8) * 2 + 2, 2);
        assert_int_equal(z, 0x8000);
        /* and widening the storage gives the original floats back */
        float *back = tu_xmalloc(n * 4);
        for (int64_t ch = 0; ch < 4; ch++)
            TU_OK(rkv_convert(st + (size_t)((ch * N + s * C + L) * 8) * 2,
                              dts[k], back + ch * T * 8, RKV_DTYPE_F32,
                              (size_t)(T * 8)));
        assert_memory_equal(back, x, n * 4);
        free(back);
        free(kv);
        free(x);
        rkv_layer_destroy(l);
    }
}

/* Clocks near INT64_MAX: the slot arithmetic does not overflow. */
static void test_huge_clocks(void **state)
{
    (void)state;
    rkv_geometry g = tu_geom(1, 1, 4, 3, 2, 128, 8, RKV_DTYPE_F32);
    rkv_layer *l = tu_layer_new(&g);
    float *fr = frame_new(&g);
    uint8_t *row = tu_xmalloc((size_t)tu_N(&g));
    int64_t T = 128;
    /* INT64_MAX - 7 is a multiple of 8: a write step */
    static const int64_t clocks[] = {INT64_MAX - 7, INT64_MAX - 1,
                                     INT64_MAX};
    for (int i = 0; i < 3; i++) {
        int64_t f = clocks[i], s = 0;
        tu_gen_frame(fr, &g, (uint64_t)i);
        TU_OK(rkv_layer_upsert(l, fr, RKV_DTYPE_F32, 1, &f, &s, 1, row));
        if (tu_write_step(&g, f))
            assert_true(tu_slots_hold(l, tu_slot(&g, f) * T, fr));
        assert_true(tu_slots_hold(l, tu_L(&g), fr));
        int64_t frames[5], n;
        TU_OK(rkv_layer_visible_frames(l, 0, f, frames, &n));
        assert_int_equal(frames[n - 1], 4);
    }
    free(row);
    free(fr);
    rkv_layer_destroy(l);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_initial_state),
        cmocka_unit_test(test_session_span),
        cmocka_unit_test(test_worked_example),
        cmocka_unit_test(test_reset),
        cmocka_unit_test(test_five_passes_identical),
        cmocka_unit_test(test_five_passes_same_frame_same_attention),
        cmocka_unit_test(test_rerun_idempotent),
        cmocka_unit_test(test_commit_every_pass_equals_4plus1),
        cmocka_unit_test(test_dilated_nonwrite_never_reach_ring),
        cmocka_unit_test(test_sessions_isolated),
        cmocka_unit_test(test_batched_equals_single),
        cmocka_unit_test(test_batched_rows_land_in_their_slots),
        cmocka_unit_test(test_half_storage_round_trip),
        cmocka_unit_test(test_huge_clocks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

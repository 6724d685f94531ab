/* A whole model (SEM 6, 7): presets, sessions claimed by request id,
 * clocks, frames, reset, snapshots. */
#include "testutil.h"

#define MiB ((size_t)1 << 20)

static int is_global(int64_t i)
{
    return i % 4 == 3;
}

static void check_waypoint(const char *name, int full, int64_t T,
                           size_t per_session_mib)
{
    rkv_model_config c;
    memset(&c, 0x5A, sizeof c); /* the preset writes every member */
    TU_OK(rkv_model_preset(name, full, &c));
    assert_string_equal(c.name, name);
    assert_int_equal(c.n_layers, 24);
    assert_int_equal(c.num_sessions, 1);
    assert_int_equal(c.struct_size, sizeof c);
    assert_int_equal(c.n_q_heads, 32);
    assert_int_equal(c.n_kv_heads, 16);
    assert_int_equal(c.d_head, 64);
    assert_int_equal(c.tokens_per_frame, T);
    assert_int_equal(c.dtype, RKV_DTYPE_BF16);
    int64_t globals = 0;
    for (int64_t i = 0; i < 24; i++) {
        const rkv_layer_spec *s = &c.layers[i];
        if (is_global(i)) {
            globals++;
            if (s->ring_frames != (full ? 128 : 16) ||
                s->ring_buckets != 16 || s->pinned_dilation != 8)
                fail_msg("%s layer %lld: RF %lld RB %lld PD %lld, expected "
                         "global %d/16/8", name, (long long)i,
                         (long long)s->ring_frames,
                         (long long)s->ring_buckets,
                         (long long)s->pinned_dilation, full ? 128 : 16);
        } else {
            if (s->ring_frames != 16 || s->ring_buckets != 16 ||
                s->pinned_dilation != 1)
                fail_msg("%s layer %lld: RF %lld RB %lld PD %lld, expected "
                         "local 16/16/1", name, (long long)i,
                         (long long)s->ring_frames,
                         (long long)s->ring_buckets,
                         (long long)s->pinned_dilation);
        }
        rkv_geometry g;
        TU_OK(rkv_model_config_layer_geometry(&c, i, &g));
        assert_int_equal(g.num_sessions, 1);
        assert_int_equal(g.n_kv_heads, 16);
        assert_int_equal(g.d_head, 64);
        assert_int_equal(g.tokens_per_frame, T);
        assert_int_equal(g.dtype, RKV_DTYPE_BF16);
        assert_int_equal(g.ring_frames, s->ring_frames);
        assert_int_equal(g.ring_buckets, s->ring_buckets);
        assert_int_equal(g.pinned_dilation, s->pinned_dilation);
    }
    assert_int_equal(globals, 6);
    size_t ps = 0, tot = 0;
    TU_OK(rkv_model_config_memory(&c, &ps, &tot));
    /* 816 / 204 MiB compact, 2160 / 540 MiB full (SEM 7) */
    assert_int_equal(ps, per_session_mib * MiB);
    assert_int_equal(tot, ps);
    c.num_sessions = 8;
    TU_OK(rkv_model_config_memory(&c, &ps, &tot));
    assert_int_equal(ps, per_session_mib * MiB);
    assert_int_equal(tot, 8 * per_session_mib * MiB);
    rkv_geometry g;
    TU_OK(rkv_model_config_layer_geometry(&c, 3, &g));
    assert_int_equal(g.num_sessions, 8);
}

static void test_preset_waypoint_720p(void **state)
{
    (void)state;
    check_waypoint("waypoint-1.5-720p", 0, 512, 816);
    check_waypoint("waypoint-1.5-720p", 1, 512, 2160);
}

static void test_preset_waypoint_360p(void **state)
{
    (void)state;
    check_waypoint("waypoint-1.5-360p", 0, 128, 204);
    check_waypoint("waypoint-1.5-360p", 1, 128, 540);
}

static void test_preset_demo(void **state)
{
    (void)state;
    for (int full = 0; full < 2; full++) {
        rkv_model_config c = RKV_MODEL_CONFIG_INIT;
        TU_OK(rkv_model_preset("demo", full, &c));
        assert_string_equal(c.name, "demo");
        assert_int_equal(c.n_layers, 2);
        assert_int_equal(c.layers[0].ring_frames, 16);
        assert_int_equal(c.layers[0].ring_buckets, 16);
        assert_int_equal(c.layers[0].pinned_dilation, 1);
        assert_int_equal(c.layers[1].ring_frames, full ? 128 : 16);
        assert_int_equal(c.layers[1].ring_buckets, 16);
        assert_int_equal(c.layers[1].pinned_dilation, 8);
        assert_int_equal(c.num_sessions, 1);
        assert_int_equal(c.n_q_heads, 1);
        assert_int_equal(c.n_kv_heads, 1);
        assert_int_equal(c.d_head, 64);
        assert_int_equal(c.tokens_per_frame, 128);
        assert_int_equal(c.dtype, RKV_DTYPE_F32);
        size_t ps, tot;
        TU_OK(rkv_model_config_memory(&c, &ps, &tot));
        size_t loc = (size_t)2 * 17 * 128 * 64 * 4;
        size_t glb = (size_t)2 * (full ? 129 : 17) * 128 * 64 * 4;
        assert_int_equal(ps, loc + glb);
    }
}

static void test_preset_names(void **state)
{
    (void)state;
    const char *const *names = rkv_model_preset_names();
    assert_non_null(names);
    int seen720 = 0, seen360 = 0, seendemo = 0, n = 0;
    for (; names[n]; n++) {
        rkv_model_config c = RKV_MODEL_CONFIG_INIT;
        TU_OK(rkv_model_preset(names[n], 0, &c));
        assert_string_equal(c.name, names[n]);
        seen720 |= !strcmp(names[n], "waypoint-1.5-720p");
        seen360 |= !strcmp(names[n], "waypoint-1.5-360p");
        seendemo |= !strcmp(names[n], "demo");
        assert_true(n < 100);
    }
    assert_true(seen720 && seen360 && seendemo);
}

/* A model built from a preset has the preset's layers and memory. */
/* Resident K/V bytes of a model: rkv_model_config_memory's total on its config. */
static size_t model_bytes(const rkv_model *m)
{
    size_t per_session = 0, total = 0;
    TU_OK(rkv_model_config_memory(rkv_model_get_config(m), &per_session, &total));
    return total;
}

static void test_model_from_preset(void **state)
{
    (void)state;
    rkv_model_config c = RKV_MODEL_CONFIG_INIT;
    TU_OK(rkv_model_preset("waypoint-1.5-360p", 0, &c));
    rkv_model *m = NULL;
    TU_OK(rkv_model_create(&c, &m));
    assert_int_equal(model_bytes(m), 204 * MiB);
    const rkv_model_config *mc = rkv_model_get_config(m);
    assert_non_null(mc);
    assert_int_equal(mc->n_layers, 24);
    assert_string_equal(mc->name, "waypoint-1.5-360p");
    for (int64_t i = 0; i < 24; i++) {
        rkv_layer *l = rkv_model_layer(m, i);
        assert_non_null(l);
        rkv_geometry g;
        TU_OK(rkv_model_config_layer_geometry(&c, i, &g));
        assert_true(tu_geom_equal(rkv_layer_geometry(l), &g));
        assert_int_equal(rkv_geometry_memory_bytes(rkv_layer_geometry(l)), 17 * MiB / 2);
    }
    rkv_model_destroy(m);

    TU_OK(rkv_model_preset("demo", 1, &c));
    c.num_sessions = 3;
    TU_OK(rkv_model_create(&c, &m));
    size_t ps, tot;
    TU_OK(rkv_model_config_memory(&c, &ps, &tot));
    assert_int_equal(model_bytes(m), tot);
    assert_int_equal(tot, 3 * ps);
    /* the model keeps its own copy of the config */
    c.num_sessions = 99;
    assert_int_equal(rkv_model_get_config(m)->num_sessions, 3);
    rkv_model_destroy(m);
}

/* ---- sessions ------------------------------------------------------------- */

static rkv_model_config small_cfg(int64_t S)
{
    rkv_layer_spec specs[3] = {{4, 4, 1}, {4, 3, 2}, {5, 2, 3}};
    return tu_model_cfg(3, specs, S, 4, 2, 4, 128, RKV_DTYPE_F32);
}
static rkv_model *model_new(int64_t S)
{
    rkv_model_config c = small_cfg(S);
    rkv_model *m = NULL;
    TU_OK(rkv_model_create(&c, &m));
    return m;
}

/* One whole frame for B sessions through every layer (4+1 schedule). */
static void run_frame(rkv_model *m, int64_t B, const int64_t *sess,
                      const int64_t *fp)
{
    const rkv_model_config *c = rkv_model_get_config(m);
    size_t fn = (size_t)(2 * c->n_kv_heads * c->tokens_per_frame *
                         c->d_head);
    float **rows = tu_xmalloc((size_t)B * sizeof(float *));
    float *packed = tu_xmalloc(fn * (size_t)B * 4);
    const rkv_geometry *g0 = rkv_layer_geometry(rkv_model_layer(m, 0));
    TU_OK(rkv_model_begin_frame(m, B, sess, fp));
    for (int pass = 0; pass < 5; pass++)
        for (int64_t li = 0; li < c->n_layers; li++) {
            for (int64_t b = 0; b < B; b++) {
                rows[b] = tu_xmalloc(fn * 4);
                tu_gen_frame(rows[b], g0,
                             tu_key(sess[b] * 1000 + li, fp[b],
                                    (uint64_t)pass));
            }
            tu_pack(packed, (const float *const *)rows, B, g0);
            void *kv = tu_to_dtype(packed, fn * (size_t)B, c->dtype);
            TU_OK(rkv_model_upsert(m, li, NULL, B, sess, kv, c->dtype,
                                   pass == 4));
            free(kv);
            for (int64_t b = 0; b < B; b++)
                free(rows[b]);
        }
    free(rows);
    free(packed);
}

static void expect_session_zero(rkv_model *m, int64_t s)
{
    const rkv_model_config *c = rkv_model_get_config(m);
    for (int64_t li = 0; li < c->n_layers; li++) {
        rkv_layer *l = rkv_model_layer(m, li);
        const rkv_geometry *g = rkv_layer_geometry(l);
        int64_t C = tu_C(g), L = tu_L(g);
        if (!tu_slots_zero(l, s * C, C))
            fail_msg("layer %lld: K/V of session %lld not zeroed",
                     (long long)li, (long long)s);
        const uint8_t *w = rkv_layer_written(l);
        for (int64_t j = 0; j < C; j++)
            if (w[s * C + j] != (j >= L))
                fail_msg("layer %lld session %lld: written[%lld] = %d",
                         (long long)li, (long long)s, (long long)j,
                         w[s * C + j]);
    }
}

static void test_claim_by_request_id(void **state)
{
    (void)state;
    rkv_model *m = model_new(3);
    int64_t a = -1, a2 = -1, b = -1, c = -1, x = -1;
    TU_OK(rkv_model_claim(m, "req-a", &a));
    TU_OK(rkv_model_claim(m, "req-b", &b));
    TU_OK(rkv_model_claim(m, "req-a", &a2)); /* same id: same session */
    assert_int_equal(a, a2);
    assert_true(a >= 0 && a < 3 && b >= 0 && b < 3 && a != b);
    /* a new session starts zeroed with no clock */
    int64_t clk = 99;
    TU_OK(rkv_model_clock(m, a, &clk));
    assert_int_equal(clk, -1);
    expect_session_zero(m, a);
    TU_OK(rkv_model_lookup(m, "req-b", &x));
    assert_int_equal(x, b);
    /* ids are compared whole: a prefix or a longer id is another id */
    TU_ERR(rkv_model_lookup(m, "req-", &x), RKV_ERR_NOT_FOUND, NULL);
    TU_ERR(rkv_model_lookup(m, "req-bb", &x), RKV_ERR_NOT_FOUND, NULL);
    TU_OK(rkv_model_claim(m, "req-c", &c));
    assert_true(c != a && c != b && c >= 0 && c < 3);
    /* all held: refused with a clear message, no eviction */
    tu_model_state before = tu_model_save(m);
    x = -5;
    TU_ERR(rkv_model_claim(m, "req-d", &x), RKV_ERR_FULL, "req-d");
    assert_int_equal(x, -5);
    tu_model_assert_same(&before, m, "claim when full");
    tu_model_state_free(&before);
    TU_ERR(rkv_model_lookup(m, "req-d", &x), RKV_ERR_NOT_FOUND, NULL);
    /* but claiming a held id still answers */
    TU_OK(rkv_model_claim(m, "req-c", &x));
    assert_int_equal(x, c);
    rkv_model_destroy(m);
}

static void test_release(void **state)
{
    (void)state;
    rkv_model *m = model_new(2);
    int64_t a, b;
    TU_OK(rkv_model_claim(m, "a", &a));
    TU_OK(rkv_model_claim(m, "b", &b));
    for (int64_t f = 0; f < 7; f++) {
        int64_t s2[2] = {a, b}, f2[2] = {f, f + 10};
        run_frame(m, 2, s2, f2);
    }
    /* save b */
    tu_model_state sb = tu_model_save(m);
    TU_OK(rkv_model_release(m, a));
    expect_session_zero(m, a);
    int64_t x;
    TU_ERR(rkv_model_lookup(m, "a", &x), RKV_ERR_NOT_FOUND, NULL);
    TU_FAILS(rkv_model_clock(m, a, &x), NULL);
    /* b untouched */
    for (int64_t li = 0; li < 3; li++) {
        rkv_layer *l = rkv_model_layer(m, li);
        int64_t C = rkv_geometry_capacity(rkv_layer_geometry(l));
        const rkv_geometry *g = rkv_layer_geometry(l);
        int64_t N = tu_N(g), D = g->d_head;
        for (int64_t ch = 0; ch < 2 * g->n_kv_heads; ch++)
            assert_memory_equal(
                sb.layers[li].kv + (size_t)((ch * N + b * C) * D) * 4,
                (const char *)rkv_layer_kv(l) +
                    (size_t)((ch * N + b * C) * D) * 4,
                (size_t)(C * D) * 4);
        assert_memory_equal(sb.layers[li].written + b * C,
                            rkv_layer_written(l) + b * C, (size_t)C);
    }
    TU_OK(rkv_model_clock(m, b, &x));
    assert_int_equal(x, 16);
    tu_model_state_free(&sb);
    /* released twice: refused */
    TU_ERR(rkv_model_release(m, a), RKV_ERR_STATE, NULL);
    /* the freed session can be claimed again, by another id, fresh */
    int64_t c;
    TU_OK(rkv_model_claim(m, "c", &c));
    assert_int_equal(c, a);
    TU_OK(rkv_model_clock(m, c, &x));
    assert_int_equal(x, -1);
    int64_t f = 3;
    TU_OK(rkv_model_begin_frame(m, 1, &c, &f)); /* any clock */
    rkv_model_destroy(m);
}

/* ---- clocks and frames ---------------------------------------------------- */

/* Every refusal of a begin_frame row names the session index and the
 * request id (issue 20: the skipped-frame refusal named the index only,
 * which a server holding request ids cannot act on). */
static void expect_begin_refusal(rkv_model *m, int64_t s, int64_t f, rkv_status want,
                                 const char *text)
{
    tu_model_state st = tu_model_save(m);
    TU_ERR(rkv_model_begin_frame(m, 1, &s, &f), want, text);
    tu_model_assert_same(&st, m, text ? text : "a refused clock");
    tu_model_state_free(&st);
}

static void test_clock_refusals_name_session_and_request(void **state)
{
    (void)state;
    rkv_model *m = model_new(3);
    int64_t a, b, c;
    TU_OK(rkv_model_claim(m, "cam-7/left", &a));
    TU_OK(rkv_model_claim(m, "user-b", &b));
    TU_OK(rkv_model_claim(m, "user-c", &c));
    assert_int_equal(b, 1);
    int64_t f = 5;
    run_frame(m, 1, &b, &f);
    expect_begin_refusal(m, b, 7, RKV_ERR_CLOCK,
                         "rkv_model_begin_frame: session 1 (request 'user-b') declared frame 7; "
                         "expected 6 (last committed 5 + 1): a skipped or repeated frame");
    expect_begin_refusal(m, b, 5, RKV_ERR_CLOCK,
                         "session 1 (request 'user-b') declared frame 5; expected 6");
    expect_begin_refusal(m, b, -1, RKV_ERR_CLOCK,
                         "frame_pos[0] = -1 (session 1, request 'user-b'); expected >= 0");
    int64_t top = INT64_MAX;
    run_frame(m, 1, &c, &top);
    expect_begin_refusal(m, c, 0, RKV_ERR_CLOCK,
                         "session 2 (request 'user-c') committed frame 9223372036854775807, the "
                         "largest clock");
    f = 6;
    TU_OK(rkv_model_begin_frame(m, 1, &b, &f));
    expect_begin_refusal(m, b, 6, RKV_ERR_STATE,
                         "session 1 (request 'user-b') is inside frame 6");
    /* the per-pass calls and the between-frames calls name both too */
    size_t fn = (size_t)(2 * 2 * 128 * 4);
    float *kv = tu_xcalloc(fn, 4);
    TU_ERR(rkv_model_upsert(m, 0, NULL, 1, &a, kv, RKV_DTYPE_F32, 0), RKV_ERR_STATE,
           "session 0 (request 'cam-7/left', row 0) has no frame begun: it is not in "
           "the current batch");
    free(kv);
    size_t nb = rkv_model_snapshot_bytes(m);
    void *buf = tu_xmalloc(nb);
    TU_ERR(rkv_model_snapshot(m, b, buf, nb), RKV_ERR_STATE,
           "session 1 (request 'user-b') is inside frame 6 (row 0 of the open batch");
    free(buf);
    rkv_model_destroy(m);
}

static void test_clock_rules(void **state)
{
    (void)state;
    rkv_model *m = model_new(3);
    int64_t a, b, x;
    TU_OK(rkv_model_claim(m, "a", &a));
    TU_OK(rkv_model_claim(m, "b", &b));
    /* first frame: any clock */
    int64_t f = 42;
    run_frame(m, 1, &a, &f);
    TU_OK(rkv_model_clock(m, a, &x));
    assert_int_equal(x, 42);
    /* skipped, repeated, old, negative: refused before anything changes */
    static const int64_t bad[] = {44, 42, 41, 0, -1, 100};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        expect_begin_refusal(m, a, bad[i], RKV_ERR_CLOCK, NULL);
    /* in a batch: a bad row anywhere refuses the whole batch */
    f = 7;
    run_frame(m, 1, &b, &f); /* b at 7 */
    for (int bad_row = 0; bad_row < 2; bad_row++) {
        int64_t s2[2] = {a, b}, f2[2] = {43, 8};
        f2[bad_row] += 1;
        tu_model_state st = tu_model_save(m);
        TU_ERR(rkv_model_begin_frame(m, 2, s2, f2), RKV_ERR_CLOCK, NULL);
        tu_model_assert_same(&st, m, "bad clock in a batch");
        tu_model_state_free(&st);
        /* neither session is inside a frame now */
        size_t fn = (size_t)(2 * 2 * 128 * 4);
        float *kv = tu_xcalloc(fn, 4);
        TU_ERR(rkv_model_upsert(m, 0, NULL, 1, &a, kv, RKV_DTYPE_F32, 0),
               RKV_ERR_STATE, NULL);
        TU_ERR(rkv_model_upsert(m, 0, NULL, 1, &b, kv, RKV_DTYPE_F32, 0),
               RKV_ERR_STATE, NULL);
        free(kv);
    }
    /* the good batch goes through */
    int64_t s2[2] = {b, a}, f2[2] = {8, 43};
    run_frame(m, 2, s2, f2);
    TU_OK(rkv_model_clock(m, a, &x));
    assert_int_equal(x, 43);
    TU_OK(rkv_model_clock(m, b, &x));
    assert_int_equal(x, 8);
    /* a session that is not held cannot begin a frame */
    int64_t freesess = 3 - a - b, f0 = 0;
    TU_FAILS(rkv_model_begin_frame(m, 1, &freesess, &f0), NULL);
    rkv_model_destroy(m);
}

/* The frame ends only when the commit pass has gone through every layer
 * (in any order); begin_frame twice is refused. */
static void test_frame_ends_after_last_layer(void **state)
{
    (void)state;
    rkv_model *m = model_new(2);
    int64_t a, x;
    TU_OK(rkv_model_claim(m, "a", &a));
    int64_t f = 0;
    run_frame(m, 1, &a, &f);
    size_t fn = (size_t)(2 * 2 * 128 * 4);
    float *kv = tu_xmalloc(fn * 4);
    tu_rng r = {3};
    tu_fill_uniform(kv, fn, &r);
    f = 1;
    TU_OK(rkv_model_begin_frame(m, 1, &a, &f));
    /* begin_frame twice: refused (the header says RKV_ERR_CLOCK; the
     * library answers RKV_ERR_STATE; both accepted, see the report) */
    TU_ERR2(rkv_model_begin_frame(m, 1, &a, &f), RKV_ERR_CLOCK,
            RKV_ERR_STATE, NULL);
    int64_t f2 = 2;
    TU_ERR2(rkv_model_begin_frame(m, 1, &a, &f2), RKV_ERR_CLOCK,
            RKV_ERR_STATE, NULL);
    /* 4 denoising passes: nothing ends */
    for (int pass = 0; pass < 4; pass++)
        for (int64_t li = 0; li < 3; li++)
            TU_OK(rkv_model_upsert(m, li, NULL, 1, &a, kv, RKV_DTYPE_F32, 0));
    TU_OK(rkv_model_clock(m, a, &x));
    assert_int_equal(x, 0);
    /* commit on layers 2 and 0 (out of order): still inside the frame */
    TU_OK(rkv_model_upsert(m, 2, NULL, 1, &a, kv, RKV_DTYPE_F32, 1));
    TU_OK(rkv_model_upsert(m, 0, NULL, 1, &a, kv, RKV_DTYPE_F32, 1));
    TU_OK(rkv_model_clock(m, a, &x));
    assert_int_equal(x, 0);
    TU_ERR2(rkv_model_begin_frame(m, 1, &a, &f2), RKV_ERR_CLOCK,
            RKV_ERR_STATE, NULL);
    /* a snapshot is refused inside the frame */
    size_t nb = rkv_model_snapshot_bytes(m);
    void *buf = tu_xmalloc(nb);
    TU_ERR(rkv_model_snapshot(m, a, buf, nb), RKV_ERR_STATE, NULL);
    /* a non-committing upsert of the last layer does not end it */
    TU_OK(rkv_model_upsert(m, 1, NULL, 1, &a, kv, RKV_DTYPE_F32, 0));
    TU_OK(rkv_model_clock(m, a, &x));
    assert_int_equal(x, 0);
    /* the last layer's commit ends it */
    TU_OK(rkv_model_upsert(m, 1, NULL, 1, &a, kv, RKV_DTYPE_F32, 1));
    TU_OK(rkv_model_clock(m, a, &x));
    assert_int_equal(x, 1);
    /* now outside the frame: upserts refused, next frame is 2 */
    TU_ERR(rkv_model_upsert(m, 0, NULL, 1, &a, kv, RKV_DTYPE_F32, 0),
           RKV_ERR_STATE, NULL);
    TU_OK(rkv_model_snapshot(m, a, buf, nb));
    TU_ERR(rkv_model_begin_frame(m, 1, &a, &f), RKV_ERR_CLOCK, NULL);
    TU_OK(rkv_model_begin_frame(m, 1, &a, &f2));
    free(buf);
    free(kv);
    rkv_model_destroy(m);
}

/* The model writes each frame at its declared clock: the same bytes as the
 * layers driven directly with those clocks. */
static void test_model_matches_layers(void **state)
{
    (void)state;
    rkv_model *m = model_new(3);
    rkv_model_config c = small_cfg(3);
    rkv_layer *ref[3];
    for (int64_t li = 0; li < 3; li++) {
        rkv_geometry g;
        TU_OK(rkv_model_config_layer_geometry(&c, li, &g));
        ref[li] = tu_layer_new(&g);
    }
    int64_t a, b;
    TU_OK(rkv_model_claim(m, "a", &a));
    TU_OK(rkv_model_claim(m, "b", &b));
    size_t fn = (size_t)(2 * 2 * 128 * 4);
    float *rows[2], *packed = tu_xmalloc(fn * 2 * 4);
    rows[0] = tu_xmalloc(fn * 4);
    rows[1] = tu_xmalloc(fn * 4);
    const rkv_geometry *g0 = rkv_layer_geometry(rkv_model_layer(m, 0));
    for (int64_t k = 0; k < 20; k++) {
        int64_t sess[2] = {b, a}, fp[2] = {k + 5, k};
        TU_OK(rkv_model_begin_frame(m, 2, sess, fp));
        for (int pass = 0; pass < 5; pass++)
            for (int64_t li = 0; li < 3; li++) {
                for (int i = 0; i < 2; i++)
                    tu_gen_frame(rows[i], g0,
                                 tu_key(sess[i] + 10 * li, fp[i],
                                        (uint64_t)pass));
                tu_pack(packed, (const float *const *)rows, 2, g0);
                TU_OK(rkv_model_upsert(m, li, NULL, 2, sess, packed,
                                       RKV_DTYPE_F32, pass == 4));
                TU_OK(rkv_layer_upsert(ref[li], packed, RKV_DTYPE_F32, 2,
                                       fp, sess, pass == 4, NULL));
                if (!tu_layers_equal(rkv_model_layer(m, li), ref[li]))
                    fail_msg("step %lld pass %d layer %lld: model differs "
                             "from the layer driven directly",
                             (long long)k, pass, (long long)li);
            }
    }
    for (int64_t li = 0; li < 3; li++)
        rkv_layer_destroy(ref[li]);
    free(rows[0]);
    free(rows[1]);
    free(packed);
    rkv_model_destroy(m);
}

/* Model attention = layer attention at the declared clocks, during the
 * frame and right after the frame ended on the last layer. */
static void test_model_attend(void **state)
{
    (void)state;
    rkv_model *m = model_new(2);
    int64_t a, b;
    TU_OK(rkv_model_claim(m, "a", &a));
    TU_OK(rkv_model_claim(m, "b", &b));
    for (int64_t k = 0; k < 6; k++) {
        int64_t s2[2] = {a, b}, f2[2] = {k, k + 3};
        run_frame(m, 2, s2, f2);
    }
    int64_t Hq = 4, T = 128, D = 4;
    size_t n = (size_t)(2 * Hq * T * D), fn = (size_t)(2 * 2 * 128 * 4);
    float *q = tu_xmalloc(n * 4), *o1 = tu_xmalloc(n * 4),
          *o2 = tu_xmalloc(n * 4), *kv = tu_xmalloc(fn * 2 * 4);
    tu_rng r = {8};
    tu_fill_uniform(q, n, &r);
    tu_fill_uniform(kv, fn * 2, &r);
    int64_t sess[2] = {b, a}, fp[2] = {9, 6};
    TU_OK(rkv_model_begin_frame(m, 2, sess, fp));
    rkv_attention_args args = RKV_ATTENTION_ARGS_INIT;
    args.batch = 2;
    args.n_q_heads = Hq;
    args.q = q;
    args.q_dtype = RKV_DTYPE_F32;
    args.out_dtype = RKV_DTYPE_F32;
    for (int pass = 0; pass < 5; pass++)
        for (int64_t li = 0; li < 3; li++) {
            TU_OK(rkv_model_upsert(m, li, NULL, 2, sess, kv, RKV_DTYPE_F32,
                                   pass == 4));
            /* model: session_idx/frame_pos/visible of args are ignored */
            int64_t junk_s[2] = {7, 7}, junk_f[2] = {-3, -3};
            uint8_t junk_v[4] = {0};
            args.session_idx = junk_s;
            args.frame_pos = junk_f;
            args.visible = junk_v;
            args.out = o1;
            for (size_t i = 0; i < n; i++)
                o1[i] = NAN;
            TU_OK(rkv_model_attend(m, li, NULL, 2, sess, &args));
            args.session_idx = sess;
            args.frame_pos = fp;
            args.visible = NULL;
            args.out = o2;
            TU_OK(rkv_layer_attend(rkv_model_layer(m, li), &args));
            if (memcmp(o1, o2, n * 4) != 0)
                fail_msg("pass %d layer %lld: model attention differs from "
                         "the layer's at the declared clocks",
                         pass, (long long)li);
        }
    int64_t x;
    TU_OK(rkv_model_clock(m, a, &x));
    assert_int_equal(x, 6);
    free(q);
    free(o1);
    free(o2);
    free(kv);
    rkv_model_destroy(m);
}

static void test_reset_drops_clock(void **state)
{
    (void)state;
    rkv_model *m = model_new(2);
    int64_t a, b, x;
    TU_OK(rkv_model_claim(m, "a", &a));
    TU_OK(rkv_model_claim(m, "b", &b));
    for (int64_t k = 0; k < 5; k++) {
        int64_t s2[2] = {a, b}, f2[2] = {k, k};
        run_frame(m, 2, s2, f2);
    }
    tu_layer_state keep = tu_layer_save(rkv_model_layer(m, 1));
    TU_OK(rkv_model_reset(m, a));
    TU_OK(rkv_model_clock(m, a, &x));
    assert_int_equal(x, -1);
    expect_session_zero(m, a);
    TU_OK(rkv_model_lookup(m, "a", &x)); /* still claimed */
    assert_int_equal(x, a);
    TU_OK(rkv_model_clock(m, b, &x));
    assert_int_equal(x, 4);
    /* b's span in layer 1 unchanged */
    rkv_layer *l1 = rkv_model_layer(m, 1);
    int64_t C = rkv_geometry_capacity(rkv_layer_geometry(l1));
    assert_memory_equal(keep.written + b * C, rkv_layer_written(l1) + b * C,
                        (size_t)C);
    tu_layer_state_free(&keep);
    /* any clock now */
    int64_t f = 1000;
    run_frame(m, 1, &a, &f);
    TU_OK(rkv_model_clock(m, a, &x));
    assert_int_equal(x, 1000);
    f = 1002;
    TU_ERR(rkv_model_begin_frame(m, 1, &a, &f), RKV_ERR_CLOCK, NULL);
    rkv_model_destroy(m);
}

/* ---- snapshots -------------------------------------------------------------- */

static void span_bytes_equal(rkv_model *m1, int64_t s1, rkv_model *m2,
                             int64_t s2, const char *what)
{
    const rkv_model_config *c = rkv_model_get_config(m1);
    for (int64_t li = 0; li < c->n_layers; li++) {
        rkv_layer *l1 = rkv_model_layer(m1, li), *l2 = rkv_model_layer(m2, li);
        int64_t C = rkv_geometry_capacity(rkv_layer_geometry(l1));
        size_t n1, n2;
        unsigned char *a = tu_copy_span(l1, s1 * C, (s1 + 1) * C, &n1);
        unsigned char *b = tu_copy_span(l2, s2 * C, (s2 + 1) * C, &n2);
        assert_int_equal(n1, n2);
        if (memcmp(a, b, n1) != 0)
            fail_msg("%s: layer %lld K/V differ", what, (long long)li);
        if (memcmp(rkv_layer_written(l1) + s1 * C,
                   rkv_layer_written(l2) + s2 * C, (size_t)C) != 0)
            fail_msg("%s: layer %lld written bits differ", what,
                     (long long)li);
        free(a);
        free(b);
    }
}

static void test_snapshot_restore_roundtrip(void **state)
{
    (void)state;
    rkv_model *m = model_new(3);
    int64_t a, b, x;
    TU_OK(rkv_model_claim(m, "a", &a));
    TU_OK(rkv_model_claim(m, "b", &b));
    for (int64_t k = 0; k < 11; k++) {
        int64_t s2[2] = {a, b}, f2[2] = {k, 50 + k};
        run_frame(m, 2, s2, f2);
    }
    size_t nb = rkv_model_snapshot_bytes(m);
    /* at least the K/V and bits of one session in every layer */
    size_t kvb = 0;
    for (int64_t li = 0; li < 3; li++) {
        rkv_layer *l = rkv_model_layer(m, li);
        kvb += rkv_geometry_memory_bytes(rkv_layer_geometry(l)) / 3 + (size_t)rkv_geometry_capacity(rkv_layer_geometry(l)) / 8;
    }
    assert_true(nb >= kvb);
    unsigned char *buf = tu_xmalloc(nb), *buf2 = tu_xmalloc(nb);
    TU_OK(rkv_model_snapshot(m, a, buf, nb));
    /* snapshots are deterministic */
    TU_OK(rkv_model_snapshot(m, a, buf2, nb));
    assert_memory_equal(buf, buf2, nb);

    /* restore into b (overwriting b's own history): bit-exact with a,
     * clock included */
    TU_OK(rkv_model_restore(m, b, buf, nb));
    span_bytes_equal(m, a, m, b, "restore into b");
    TU_OK(rkv_model_clock(m, b, &x));
    assert_int_equal(x, 10);
    int64_t f = 61;
    TU_ERR(rkv_model_begin_frame(m, 1, &b, &f), RKV_ERR_CLOCK, NULL);
    f = 10;
    TU_ERR(rkv_model_begin_frame(m, 1, &b, &f), RKV_ERR_CLOCK, NULL);
    /* restore into a fresh model of identical geometry, into both a
     * session with a's index (full comparison after continuing: the test's
     * inputs depend on the index) and one with another index */
    rkv_model *m2 = model_new(3);
    int64_t z1, z2;
    TU_OK(rkv_model_claim(m2, "z1", &z1));
    TU_OK(rkv_model_claim(m2, "z2", &z2));
    TU_OK(rkv_model_restore(m2, z1, buf, nb));
    TU_OK(rkv_model_restore(m2, z2, buf, nb));
    span_bytes_equal(m, a, m2, z1, "restore into another model");
    span_bytes_equal(m, a, m2, z2, "restore into another model");
    TU_OK(rkv_model_clock(m2, z1, &x));
    assert_int_equal(x, 10);
    /* all continue from saved + 1 */
    for (int64_t k = 11; k < 16; k++) {
        run_frame(m, 1, &a, &k);
        run_frame(m2, 1, &z1, &k);
        run_frame(m2, 1, &z2, &k);
    }
    TU_OK(rkv_model_clock(m2, z2, &x));
    assert_int_equal(x, 15);
    int64_t same = z1 == a ? z1 : z2 == a ? z2 : -1;
    if (same >= 0)
        span_bytes_equal(m, a, m2, same, "continued after restore");
    for (int64_t li = 0; li < 3; li++) {
        rkv_layer *l1 = rkv_model_layer(m, li), *l2 = rkv_model_layer(m2, li);
        int64_t C = rkv_geometry_capacity(rkv_layer_geometry(l1));
        assert_memory_equal(rkv_layer_written(l1) + a * C,
                            rkv_layer_written(l2) + z1 * C, (size_t)C);
        assert_memory_equal(rkv_layer_written(l1) + a * C,
                            rkv_layer_written(l2) + z2 * C, (size_t)C);
    }
    /* snapshot then restore onto itself changes nothing */
    TU_OK(rkv_model_snapshot(m, a, buf, nb));
    tu_model_state st = tu_model_save(m);
    TU_OK(rkv_model_restore(m, a, buf, nb));
    tu_model_assert_same(&st, m, "self restore");
    tu_model_state_free(&st);
    free(buf);
    free(buf2);
    rkv_model_destroy(m);
    rkv_model_destroy(m2);
}

/* A session without a clock snapshots as such: restored, any clock. */
static void test_snapshot_without_clock(void **state)
{
    (void)state;
    rkv_model *m = model_new(2);
    int64_t a, b, x;
    TU_OK(rkv_model_claim(m, "a", &a));
    TU_OK(rkv_model_claim(m, "b", &b));
    int64_t f = 4;
    run_frame(m, 1, &b, &f);
    size_t nb = rkv_model_snapshot_bytes(m);
    void *buf = tu_xmalloc(nb);
    TU_OK(rkv_model_snapshot(m, a, buf, nb));
    TU_OK(rkv_model_restore(m, b, buf, nb));
    TU_OK(rkv_model_clock(m, b, &x));
    assert_int_equal(x, -1);
    expect_session_zero(m, b);
    f = 77;
    TU_OK(rkv_model_begin_frame(m, 1, &b, &f));
    free(buf);
    rkv_model_destroy(m);
}

/* Restore into a different geometry is refused with nothing changed. */
static void test_restore_other_geometry(void **state)
{
    (void)state;
    rkv_model *m = model_new(2);
    int64_t a;
    TU_OK(rkv_model_claim(m, "a", &a));
    for (int64_t k = 0; k < 3; k++)
        run_frame(m, 1, &a, &k);
    size_t nb = rkv_model_snapshot_bytes(m);
    unsigned char *buf = tu_xmalloc(nb);
    TU_OK(rkv_model_snapshot(m, a, buf, nb));
    for (int v = 0; v < 6; v++) {
        rkv_model_config c = small_cfg(2);
        switch (v) {
        case 0: c.layers[1].pinned_dilation = 3; break; /* same size */
        case 1: c.layers[2].ring_buckets = 3; break;    /* same size */
        case 2: c.layers[0].ring_frames = 5; break;
        case 3: c.tokens_per_frame = 256; break;
        case 4: c.dtype = RKV_DTYPE_BF16; c.d_head = 8; break; /* same size */
        case 5: c.n_kv_heads = 1; c.n_q_heads = 4; c.d_head = 8; break;
        }
        rkv_model *o = NULL;
        TU_OK(rkv_model_create(&c, &o));
        int64_t s;
        TU_OK(rkv_model_claim(o, "o", &s));
        int64_t f = 9;
        run_frame(o, 1, &s, &f);
        tu_model_state st = tu_model_save(o);
        /* cases 0, 1, 4, 5 have the same data size: the image's stored
         * geometry is what refuses them (and the others) */
        TU_ERR(rkv_model_restore(o, s, buf, nb), RKV_ERR_FORMAT,
               "rkv_model_restore: (memory): wrong geometry");
        tu_model_assert_same(&st, o, "restore into another geometry");
        tu_model_state_free(&st);
        rkv_model_destroy(o);
    }
    /* a different number of layers */
    rkv_layer_spec specs[2] = {{4, 4, 1}, {4, 3, 2}};
    rkv_model_config c = tu_model_cfg(2, specs, 2, 4, 2, 4, 128,
                                      RKV_DTYPE_F32);
    rkv_model *o = NULL;
    TU_OK(rkv_model_create(&c, &o));
    int64_t s;
    TU_OK(rkv_model_claim(o, "o", &s));
    tu_model_state st = tu_model_save(o);
    TU_ERR(rkv_model_restore(o, s, buf, nb), RKV_ERR_FORMAT, NULL);
    tu_model_assert_same(&st, o, "restore into fewer layers");
    tu_model_state_free(&st);
    rkv_model_destroy(o);
    free(buf);
    rkv_model_destroy(m);
}

/* Truncated or garbled buffers: refused, nothing changed (more cases in
 * test_errors.c). Every single truncation length is refused. */
static void test_restore_garbled(void **state)
{
    (void)state;
    rkv_model *m = model_new(2);
    int64_t a, b;
    TU_OK(rkv_model_claim(m, "a", &a));
    TU_OK(rkv_model_claim(m, "b", &b));
    for (int64_t k = 0; k < 3; k++)
        run_frame(m, 1, &a, &k);
    int64_t f = 20;
    run_frame(m, 1, &b, &f);
    size_t nb = rkv_model_snapshot_bytes(m);
    unsigned char *buf = tu_xmalloc(nb);
    TU_OK(rkv_model_snapshot(m, a, buf, nb));
    tu_model_state st = tu_model_save(m);
    /* header-sized truncations, then a sweep over the tail */
    for (size_t len = 0; len < nb && len < 512; len++)
        TU_ERR(rkv_model_restore(m, b, buf, len), RKV_ERR_FORMAT, NULL);
    for (size_t len = nb - 1; len + 4096 > nb && len > 512; len -= 97)
        TU_ERR(rkv_model_restore(m, b, buf, len), RKV_ERR_FORMAT, NULL);
    /* each of the first 64 bytes flipped (magic, version, geometry, ...):
     * refused, or (if the byte is not checked, e.g. padding or the clock)
     * accepted; but a refused restore changes nothing */
    int refused = 0;
    for (size_t i = 0; i < 64 && i < nb; i++) {
        buf[i] ^= 0x5A;
        rkv_status s = rkv_model_restore(m, b, buf, nb);
        buf[i] ^= 0x5A;
        if (s == RKV_OK) {
            /* put b back */
            TU_OK(rkv_model_reset(m, b));
            int64_t g = 20;
            run_frame(m, 1, &b, &g);
        } else {
            assert_int_equal(s, RKV_ERR_FORMAT);
            refused++;
        }
        tu_model_assert_same(&st, m, "garbled header");
    }
    assert_true(refused >= 4); /* at least the magic */
    tu_model_state_free(&st);
    free(buf);
    rkv_model_destroy(m);
}

/* Release or reset in the middle of a frame ends it: the session is fresh,
 * the next frame may start anywhere. Attention needs a begun frame. */
static void test_reset_release_inside_frame(void **state)
{
    (void)state;
    rkv_model *m = model_new(2);
    int64_t a, x;
    TU_OK(rkv_model_claim(m, "a", &a));
    /* attention before any frame: refused, output untouched */
    int64_t Hq = 4, T = 128, D = 4;
    size_t n = (size_t)(Hq * T * D), fn = (size_t)(2 * 2 * 128 * 4);
    float *q = tu_xcalloc(n, 4), *out = tu_xmalloc(n * 4);
    for (size_t i = 0; i < n; i++)
        out[i] = 9.0f;
    rkv_attention_args args = RKV_ATTENTION_ARGS_INIT;
    args.batch = 1;
    args.n_q_heads = Hq;
    args.q = q;
    args.out = out;
    TU_FAILS(rkv_model_attend(m, 0, NULL, 1, &a, &args), NULL);
    for (size_t i = 0; i < n; i++)
        assert_true(out[i] == 9.0f);
    float *kv = tu_xcalloc(fn, 4);
    for (int k = 0; k < 2; k++) {
        int64_t f = 0;
        run_frame(m, 1, &a, &f);
        f = 1;
        TU_OK(rkv_model_begin_frame(m, 1, &a, &f));
        TU_OK(rkv_model_upsert(m, 0, NULL, 1, &a, kv, RKV_DTYPE_F32, 1));
        if (k == 0) {
            TU_OK(rkv_model_reset(m, a));
        } else {
            TU_OK(rkv_model_release(m, a));
            TU_OK(rkv_model_claim(m, "a2", &a));
        }
        TU_OK(rkv_model_clock(m, a, &x));
        assert_int_equal(x, -1);
        expect_session_zero(m, a);
        /* not inside a frame any more */
        TU_ERR(rkv_model_upsert(m, 1, NULL, 1, &a, kv, RKV_DTYPE_F32, 1),
               RKV_ERR_STATE, NULL);
        f = 500;
        TU_OK(rkv_model_begin_frame(m, 1, &a, &f));
        for (int64_t li = 0; li < 3; li++)
            TU_OK(rkv_model_upsert(m, li, NULL, 1, &a, kv, RKV_DTYPE_F32, 1));
        TU_OK(rkv_model_clock(m, a, &x));
        assert_int_equal(x, 500);
        TU_OK(rkv_model_reset(m, a));
    }
    free(kv);
    free(q);
    free(out);
    rkv_model_destroy(m);
}

/* A session whose first frame is the largest clock: it commits, and the
 * next begin_frame is refused (there is no next clock) without overflow. */
static void test_clock_at_int64_max(void **state)
{
    (void)state;
    rkv_model *m = model_new(1);
    int64_t a, x;
    TU_OK(rkv_model_claim(m, "a", &a));
    int64_t f = INT64_MAX;
    run_frame(m, 1, &a, &f);
    TU_OK(rkv_model_clock(m, a, &x));
    assert_int_equal(x, INT64_MAX);
    static const int64_t next[] = {0, INT64_MAX, INT64_MAX - 1, -1};
    for (int i = 0; i < 4; i++) {
        int64_t g = next[i];
        TU_ERR(rkv_model_begin_frame(m, 1, &a, &g), RKV_ERR_CLOCK, NULL);
    }
    rkv_model_destroy(m);
}

/* ---- the frame's batch (issue 11) ---------------------------------------- */

/* kv [2][H][B*T][D] f32 for the small config (H 2, D 4, T 128). */
static float *batch_kv(int64_t B, uint64_t seed)
{
    size_t n = (size_t)(2 * 2 * B * 128 * 4);
    float *kv = tu_xmalloc(n * 4);
    tu_rng r = {seed};
    tu_fill_uniform(kv, n, &r);
    return kv;
}

/* One batch at a time: a second begin_frame while one is open is refused
 * (clocks checked first); end_frame and abandon_frame; the wrappers must
 * name the batch as begun. */
static void test_one_batch_at_a_time(void **state)
{
    (void)state;
    rkv_model *m = model_new(3);
    int64_t a, b, c, x;
    TU_OK(rkv_model_claim(m, "a", &a));
    TU_OK(rkv_model_claim(m, "b", &b));
    TU_OK(rkv_model_claim(m, "c", &c));
    float *kv2 = batch_kv(2, 1), *kv1 = batch_kv(1, 2);
    const int64_t ab[2] = {a, b}, ba[2] = {b, a}, f0[2] = {0, 10};
    TU_OK(rkv_model_begin_frame(m, 2, ab, f0));
    /* another batch while this one is open: refused, nothing changes */
    int64_t fc = 4;
    tu_model_state st = tu_model_save(m);
    TU_ERR(rkv_model_begin_frame(m, 1, &c, &fc), RKV_ERR_STATE, "open for another batch");
    tu_model_assert_same(&st, m, "second begin_frame");
    tu_model_state_free(&st);
    /* the wrappers: a row outside the batch, a subset, another order */
    TU_ERR(rkv_model_upsert(m, 0, NULL, 1, &c, kv1, RKV_DTYPE_F32, 0), RKV_ERR_STATE,
           "not in the current batch");
    TU_ERR(rkv_model_upsert(m, 0, NULL, 1, &a, kv1, RKV_DTYPE_F32, 0), RKV_ERR_INVALID_ARG,
           "the current batch has 2");
    TU_ERR(rkv_model_upsert(m, 0, NULL, 2, ba, kv2, RKV_DTYPE_F32, 0), RKV_ERR_INVALID_ARG,
           "begin_frame order");
    TU_OK(rkv_model_upsert(m, 0, NULL, 2, ab, kv2, RKV_DTYPE_F32, 0));
    /* end_frame without the commit pass (as after a graph replay): the
     * clocks become committed; the batch stays current for attention */
    TU_OK(rkv_model_end_frame(m));
    TU_OK(rkv_model_clock(m, a, &x));
    assert_int_equal(x, 0);
    TU_OK(rkv_model_clock(m, b, &x));
    assert_int_equal(x, 10);
    TU_OK(rkv_model_end_frame(m)); /* ended already: nothing changes */
    TU_OK(rkv_model_clock(m, b, &x));
    assert_int_equal(x, 10);
    TU_ERR(rkv_model_frame_upsert(m, 0, kv2, RKV_DTYPE_F32, 0), RKV_ERR_STATE, "committed");
    size_t nq = (size_t)(2 * 4 * 128 * 4);
    float *q = tu_xcalloc(nq, 4), *out = tu_xcalloc(nq, 4);
    rkv_attention_args args = RKV_ATTENTION_ARGS_INIT;
    args.n_q_heads = 4;
    args.q = q;
    args.out = out;
    TU_OK(rkv_model_frame_attend(m, 1, &args));
    TU_OK(rkv_model_attend(m, 1, NULL, 2, ab, &args));
    /* the next batch may be anything */
    TU_OK(rkv_model_begin_frame(m, 1, &c, &fc));
    TU_ERR(rkv_model_attend(m, 1, NULL, 2, ab, &args), RKV_ERR_STATE, "no frame begun");
    /* abandoning: no clock moves, the same frame may begin again */
    TU_OK(rkv_model_frame_upsert(m, 1, kv1, RKV_DTYPE_F32, 1));
    TU_OK(rkv_model_abandon_frame(m));
    TU_OK(rkv_model_abandon_frame(m)); /* nothing to abandon: fine */
    TU_OK(rkv_model_clock(m, c, &x));
    assert_int_equal(x, -1);
    TU_ERR(rkv_model_frame_attend(m, 1, &args), RKV_ERR_STATE, "no frame begun");
    TU_ERR(rkv_model_end_frame(m), RKV_ERR_STATE, "no frame begun");
    TU_OK(rkv_model_begin_frame(m, 1, &c, &fc));
    free(kv1);
    free(kv2);
    free(q);
    free(out);
    rkv_model_destroy(m);
}

/* Release or reset of a row of the open batch abandons the whole batch's
 * frame: the other rows keep their clocks and may begin the same frame
 * again, which then leaves the same rings as if the abandoned passes had
 * never run. */
static void test_release_in_batch_abandons_it(void **state)
{
    (void)state;
    for (int release = 0; release < 2; release++) {
        rkv_model *m = model_new(3), *ref = model_new(3);
        int64_t a, b, x;
        TU_OK(rkv_model_claim(m, "a", &a));
        TU_OK(rkv_model_claim(m, "b", &b));
        TU_OK(rkv_model_claim(ref, "a", &x));
        TU_OK(rkv_model_claim(ref, "b", &x));
        int64_t f = 0;
        for (f = 0; f < 3; f++) {
            run_frame(m, 1, &a, &f);
            run_frame(ref, 1, &a, &f);
        }
        /* frame 3 for a and b, committed on layers 0 and 2 only, then b
         * goes: a's frame 3 is abandoned with it */
        const int64_t ab[2] = {a, b}, fab[2] = {3, 0};
        float *junk = batch_kv(2, 77);
        TU_OK(rkv_model_begin_frame(m, 2, ab, fab));
        TU_OK(rkv_model_frame_upsert(m, 0, junk, RKV_DTYPE_F32, 1));
        TU_OK(rkv_model_frame_upsert(m, 2, junk, RKV_DTYPE_F32, 1));
        TU_OK(rkv_model_frame_upsert(m, 1, junk, RKV_DTYPE_F32, 0));
        if (release)
            TU_OK(rkv_model_release(m, b));
        else
            TU_OK(rkv_model_reset(m, b));
        TU_ERR(rkv_model_frame_upsert(m, 1, junk, RKV_DTYPE_F32, 1), RKV_ERR_STATE,
               "no frame begun");
        TU_OK(rkv_model_clock(m, a, &x));
        assert_int_equal(x, 2);
        /* frame 3 again, whole: the same rings as the reference's frame 3 */
        f = 3;
        run_frame(m, 1, &a, &f);
        run_frame(ref, 1, &a, &f);
        size_t nb = rkv_model_snapshot_bytes(m);
        unsigned char *i1 = tu_xmalloc(nb), *i2 = tu_xmalloc(nb);
        TU_OK(rkv_model_snapshot(m, a, i1, nb));
        TU_OK(rkv_model_snapshot(ref, a, i2, nb));
        assert_memory_equal(i1, i2, nb);
        free(i1);
        free(i2);
        free(junk);
        rkv_model_destroy(m);
        rkv_model_destroy(ref);
    }
}

/* Issue 10: after a commit that ends the frame on pass 0 (a model whose
 * every pass commits), the next upsert says which frame was committed and
 * that the next call is begin_frame with that frame + 1. */
static void test_committed_frame_message(void **state)
{
    (void)state;
    rkv_layer_spec spec = {4, 4, 1};
    rkv_model_config c = tu_model_cfg(1, &spec, 2, 4, 2, 4, 128, RKV_DTYPE_F32);
    rkv_model *m = NULL;
    TU_OK(rkv_model_create(&c, &m));
    int64_t a, b;
    TU_OK(rkv_model_claim(m, "a", &a));
    TU_OK(rkv_model_claim(m, "b", &b));
    float *kv1 = batch_kv(1, 5), *kv2 = batch_kv(2, 6);
    int64_t f = 41;
    TU_OK(rkv_model_begin_frame(m, 1, &a, &f));
    TU_OK(rkv_model_upsert(m, 0, NULL, 1, &a, kv1, RKV_DTYPE_F32, 1)); /* pass 0 commits */
    TU_ERR(rkv_model_upsert(m, 0, NULL, 1, &a, kv1, RKV_DTYPE_F32, 1), RKV_ERR_STATE,
           "frame 41 of session 0 was committed on every layer");
    TU_ERR(rkv_model_upsert(m, 0, NULL, 1, &a, kv1, RKV_DTYPE_F32, 0), RKV_ERR_STATE,
           "call rkv_model_begin_frame with frame 42 next");
    TU_ERR(rkv_model_frame_upsert(m, 0, kv1, RKV_DTYPE_F32, 0), RKV_ERR_STATE,
           "call rkv_model_begin_frame with frame 42 next");
    TU_ERR(rkv_model_frame_step(m, 0, kv1, RKV_DTYPE_F32, 0, NULL), RKV_ERR_STATE,
           "frame 41 of session 0 was committed");
    f = 42;
    TU_OK(rkv_model_begin_frame(m, 1, &a, &f));
    TU_OK(rkv_model_upsert(m, 0, NULL, 1, &a, kv1, RKV_DTYPE_F32, 1));
    /* a batch: row 0 is named, and each row's frame + 1 */
    const int64_t ab[2] = {b, a}, fab[2] = {7, 43};
    TU_OK(rkv_model_begin_frame(m, 2, ab, fab));
    TU_OK(rkv_model_frame_upsert(m, 0, kv2, RKV_DTYPE_F32, 1));
    TU_ERR(rkv_model_frame_upsert(m, 0, kv2, RKV_DTYPE_F32, 1), RKV_ERR_STATE,
           "frame 7 of session 1 (row 0 of the batch) was committed");
    TU_ERR(rkv_model_upsert(m, 0, NULL, 2, ab, kv2, RKV_DTYPE_F32, 1), RKV_ERR_STATE,
           "with frame 8 (each row's frame + 1) next");
    free(kv1);
    free(kv2);
    rkv_model_destroy(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_preset_waypoint_720p),
        cmocka_unit_test(test_preset_waypoint_360p),
        cmocka_unit_test(test_preset_demo),
        cmocka_unit_test(test_preset_names),
        cmocka_unit_test(test_model_from_preset),
        cmocka_unit_test(test_claim_by_request_id),
        cmocka_unit_test(test_release),
        cmocka_unit_test(test_clock_rules),
        cmocka_unit_test(test_clock_refusals_name_session_and_request),
        cmocka_unit_test(test_frame_ends_after_last_layer),
        cmocka_unit_test(test_model_matches_layers),
        cmocka_unit_test(test_model_attend),
        cmocka_unit_test(test_reset_drops_clock),
        cmocka_unit_test(test_snapshot_restore_roundtrip),
        cmocka_unit_test(test_snapshot_without_clock),
        cmocka_unit_test(test_restore_other_geometry),
        cmocka_unit_test(test_restore_garbled),
        cmocka_unit_test(test_reset_release_inside_frame),
        cmocka_unit_test(test_clock_at_int64_max),
        cmocka_unit_test(test_one_batch_at_a_time),
        cmocka_unit_test(test_release_in_batch_abandons_it),
        cmocka_unit_test(test_committed_frame_message),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* Sessions that leave and move (issue 13): offload and page-in (memory and
 * files), the offload table (reserved ids, stale images, full, discard),
 * session regions (layout, digest = the snapshot's data_xxh3), export and
 * import between models (reserve, fill, check, import, cancel). Every
 * stream is compared with the same stream run without interruption: the
 * attention outputs of every frame and the final spans, bit for bit. Bad
 * input to these calls (status, message, nothing changed): test_errors.c. */
#define _POSIX_C_SOURCE 200809L
#include "testutil.h"
#include "snapshot_edit.h" /* tsnap_find */

#include <unistd.h>
#include <xxhash.h>

/* 2 layers (local RF 4 / RB 4 / PD 1; global RF 4 / RB 3 / PD 2), S 3,
 * Hq 4, H 2, D 8, T 128. */
static rkv_model_config cfg_of(rkv_dtype dt, int64_t S, int64_t max_offloaded)
{
    rkv_layer_spec specs[2] = {{4, 4, 1}, {4, 3, 2}};
    rkv_model_config c = tu_model_cfg(2, specs, S, 4, 2, 8, 128, dt);
    c.max_offloaded = max_offloaded;
    return c;
}
static rkv_model *model_of(rkv_dtype dt, int64_t S, int64_t max_offloaded)
{
    rkv_model_config c = cfg_of(dt, S, max_offloaded);
    rkv_model *m = NULL;
    TU_OK(rkv_model_create(&c, &m));
    return m;
}

/* One frame of stream `id` (its tokens depend on id, frame, pass and
 * layer, never on the session index) on session s at clock f, 4+1 passes
 * of upsert + attention over every layer. Returns the XXH3-64 of every
 * attention output of the frame. */
static uint64_t frame(rkv_model *m, int64_t s, int64_t id, int64_t f)
{
    const rkv_model_config *c = rkv_model_get_config(m);
    const rkv_geometry *g = rkv_layer_geometry(rkv_model_layer(m, 0));
    const size_t kvn = (size_t)(2 * c->n_kv_heads * c->tokens_per_frame * c->d_head);
    const size_t qn = (size_t)(c->n_q_heads * c->tokens_per_frame * c->d_head);
    float *kvf = tu_xmalloc(kvn * 4), *qf = tu_xmalloc(qn * 4);
    float *out = tu_xmalloc(qn * 4);
    XXH3_state_t *hs = XXH3_createState();
    XXH3_64bits_reset(hs);
    TU_OK(rkv_model_begin_frame(m, 1, &s, &f));
    for (int pass = 0; pass < 5; pass++)
        for (int64_t li = 0; li < c->n_layers; li++) {
            tu_gen_frame(kvf, g, tu_key(id * 100 + li, f, (uint64_t)pass));
            tu_rng r = {rkvt_mix((uint64_t)(id * 7919 + f * 31 + pass * 3 + li + 1))};
            tu_fill_uniform(qf, qn, &r);
            void *kv = tu_to_dtype(kvf, kvn, c->dtype);
            rkv_attention_args a = {.struct_size = sizeof(rkv_attention_args),
                                    .n_q_heads = c->n_q_heads, .q = qf,
                                    .q_dtype = RKV_DTYPE_F32, .out = out,
                                    .out_dtype = RKV_DTYPE_F32};
            TU_OK(rkv_model_frame_step(m, li, kv, c->dtype, pass == 4, &a));
            XXH3_64bits_update(hs, out, qn * 4);
            free(kv);
        }
    const uint64_t d = XXH3_64bits_digest(hs);
    XXH3_freeState(hs);
    free(kvf), free(qf), free(out);
    return d;
}

/* Session s1 of m1 and s2 of m2 hold the same bytes in every layer. */
static void same_session(rkv_model *m1, int64_t s1, rkv_model *m2, int64_t s2, const char *what)
{
    const rkv_model_config *c = rkv_model_get_config(m1);
    for (int64_t li = 0; li < c->n_layers; li++) {
        rkv_layer *l1 = rkv_model_layer(m1, li), *l2 = rkv_model_layer(m2, li);
        const int64_t C = rkv_geometry_capacity(rkv_layer_geometry(l1));
        size_t n1, n2;
        unsigned char *a = tu_copy_span(l1, s1 * C, (s1 + 1) * C, &n1);
        unsigned char *b = tu_copy_span(l2, s2 * C, (s2 + 1) * C, &n2);
        assert_int_equal(n1, n2);
        if (memcmp(a, b, n1) || memcmp(rkv_layer_written(l1) + s1 * C,
                                       rkv_layer_written(l2) + s2 * C, (size_t)C))
            fail_msg("%s: layer %lld differs", what, (long long)li);
        free(a), free(b);
    }
    int64_t f1, f2;
    TU_OK(rkv_model_clock(m1, s1, &f1));
    TU_OK(rkv_model_clock(m2, s2, &f2));
    assert_int_equal(f1, f2);
}

static void *offload_mem(rkv_model *m, int64_t s, size_t *n)
{
    TU_OK(rkv_model_offload(m, s, NULL, 0, n));
    void *buf = NULL;
    TU_OK(rkv_model_host_alloc(m, *n, &buf));
    size_t got = 0;
    TU_OK(rkv_model_offload(m, s, buf, *n, &got));
    assert_int_equal(got, *n);
    return buf;
}

/* ---- offload and page-in --------------------------------------------------------- */

static void offload_roundtrip(rkv_dtype dt)
{
    rkv_model *ref = model_of(dt, 3, 0), *m = model_of(dt, 3, 0);
    int64_t r, a, b;
    TU_OK(rkv_model_claim(ref, "a", &r));
    TU_OK(rkv_model_claim(m, "a", &a));
    TU_OK(rkv_model_claim(m, "b", &b));
    assert_int_equal(a, 0);
    for (int64_t f = 0; f < 6; f++) {
        assert_true(frame(ref, r, 1, f) == frame(m, a, 1, f));
        frame(m, b, 2, f);
    }
    assert_int_equal(rkv_model_offload_capacity(m), 16); /* RKV_DEFAULT_OFFLOADED(3) */
    size_t n;
    void *img = offload_mem(m, a, &n);
    assert_int_equal(rkv_model_offloaded_count(m), 1);
    int64_t clock = -9;
    TU_OK(rkv_model_offloaded_clock(m, "a", &clock));
    assert_int_equal(clock, 5);
    /* the image is a snapshot image: inspect reads it */
    rkv_snapshot_info info = RKV_SNAPSHOT_INFO_INIT;
    TU_OK(rkv_snapshot_inspect(NULL, img, n, &info));
    assert_string_equal(info.request_id, "a");
    assert_int_equal(info.last_committed, 5);
    /* the id is reserved, the slot free (and zeroed) */
    int64_t got;
    TU_ERR(rkv_model_claim(m, "a", &got), RKV_ERR_STATE, "paged out");
    TU_ERR(rkv_model_lookup(m, "a", &got), RKV_ERR_NOT_FOUND, "paged out");
    int64_t c;
    TU_OK(rkv_model_claim(m, "c", &c));
    assert_int_equal(c, a);
    for (int64_t li = 0; li < 2; li++) {
        const rkv_geometry *g = rkv_layer_geometry(rkv_model_layer(m, li));
        if (!tu_slots_zero(rkv_model_layer(m, li), c * tu_C(g), tu_C(g)))
            fail_msg("the offloaded session's slot was not zeroed (layer %lld)", (long long)li);
    }
    frame(m, c, 3, 0);
    /* page-in lands in the lowest free slot (2), clock continuing */
    int64_t s = -1;
    TU_OK(rkv_model_page_in(m, img, n, &s));
    assert_int_equal(s, 2);
    assert_int_equal(rkv_model_offloaded_count(m), 0);
    TU_OK(rkv_model_lookup(m, "a", &got));
    assert_int_equal(got, 2);
    same_session(ref, r, m, s, "paged in");
    int64_t f6 = 6, f5 = 5;
    TU_ERR(rkv_model_begin_frame(m, 1, &s, &f5), RKV_ERR_CLOCK, "6");
    (void)f6;
    for (int64_t f = 6; f < 12; f++)
        if (frame(ref, r, 1, f) != frame(m, s, 1, f))
            fail_msg("frame %lld after page-in differs from the uninterrupted stream",
                     (long long)f);
    same_session(ref, r, m, s, "after page-in");
    /* the image pages in once: a second page-in finds no reservation */
    TU_ERR(rkv_model_page_in(m, img, n, &got), RKV_ERR_NOT_FOUND, "'a'");
    rkv_model_host_free(m, img);
    rkv_model_destroy(ref);
    rkv_model_destroy(m);
}
static void test_offload_page_in_f32(void **state)
{
    (void)state;
    offload_roundtrip(RKV_DTYPE_F32);
}
static void test_offload_page_in_bf16(void **state)
{
    (void)state;
    offload_roundtrip(RKV_DTYPE_BF16);
}

static void test_offload_file(void **state)
{
    (void)state;
    char dir[] = "/tmp/rkv_offload_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[256];
    snprintf(path, sizeof path, "%s/a.safetensors", dir);
    rkv_model *ref = model_of(RKV_DTYPE_F32, 2, 0), *m = model_of(RKV_DTYPE_F32, 2, 0);
    int64_t r, a;
    TU_OK(rkv_model_claim(ref, "a", &r));
    TU_OK(rkv_model_claim(m, "a", &a));
    for (int64_t f = 0; f < 7; f++)
        assert_true(frame(ref, r, 4, f) == frame(m, a, 4, f));
    TU_OK(rkv_model_offload_file(m, a, path));
    TU_ERR(rkv_model_claim(m, "a", &a), RKV_ERR_STATE, "paged out");
    rkv_snapshot_info info = RKV_SNAPSHOT_INFO_INIT;
    TU_OK(rkv_snapshot_inspect(path, NULL, 0, &info));
    assert_int_equal(info.last_committed, 6);
    int64_t s = -1;
    TU_OK(rkv_model_page_in_file(m, path, &s));
    same_session(ref, r, m, s, "paged in from a file");
    for (int64_t f = 7; f < 10; f++)
        assert_true(frame(ref, r, 4, f) == frame(m, s, 4, f));
    unlink(path);
    rmdir(dir);
    rkv_model_destroy(ref);
    rkv_model_destroy(m);
}

/* Only the image that was offloaded pages in: an older image of the same
 * request is refused, so a stale copy cannot come back. */
static void test_stale_image_refused(void **state)
{
    (void)state;
    rkv_model *m = model_of(RKV_DTYPE_F32, 2, 0);
    int64_t a, s;
    TU_OK(rkv_model_claim(m, "a", &a));
    frame(m, a, 1, 0);
    size_t n1, n2;
    void *old = offload_mem(m, a, &n1);
    TU_OK(rkv_model_page_in(m, old, n1, &s));
    frame(m, s, 1, 1);
    void *cur = offload_mem(m, s, &n2);
    TU_ERR(rkv_model_page_in(m, old, n1, &s), RKV_ERR_STATE, "not the one offloaded");
    assert_int_equal(rkv_model_offloaded_count(m), 1);
    TU_OK(rkv_model_page_in(m, cur, n2, &s));
    int64_t clock;
    TU_OK(rkv_model_clock(m, s, &clock));
    assert_int_equal(clock, 1);
    rkv_model_host_free(m, old);
    rkv_model_host_free(m, cur);
    rkv_model_destroy(m);
}

/* A table of one: the second offload is refused and changes nothing;
 * discarding frees the id for claim, and its image no longer pages in. */
static void test_table_full_and_discard(void **state)
{
    (void)state;
    rkv_model *m = model_of(RKV_DTYPE_F32, 2, 1);
    assert_int_equal(rkv_model_offload_capacity(m), 1);
    int64_t a, b, s;
    TU_OK(rkv_model_claim(m, "a", &a));
    TU_OK(rkv_model_claim(m, "b", &b));
    frame(m, a, 1, 0);
    frame(m, b, 2, 0);
    size_t n;
    void *img = offload_mem(m, a, &n);
    void *buf = tu_xmalloc(n);
    tu_model_state st = tu_model_save(m);
    TU_ERR(rkv_model_offload(m, b, buf, n, &n), RKV_ERR_FULL, "max_offloaded");
    tu_model_assert_same(&st, m, "a refused offload");
    tu_model_state_free(&st);
    TU_OK(rkv_model_lookup(m, "b", &s));
    TU_OK(rkv_model_offload_discard(m, "a"));
    assert_int_equal(rkv_model_offloaded_count(m), 0);
    TU_ERR(rkv_model_page_in(m, img, n, &s), RKV_ERR_NOT_FOUND, "not paged out");
    TU_OK(rkv_model_claim(m, "a", &s));
    free(buf);
    rkv_model_host_free(m, img);
    rkv_model_destroy(m);
}

/* A damaged image is refused after it was copied into the free slot: the
 * slot is zeroed again and stays free, the reservation stays, nothing
 * held changes; no free slot is refused before anything is copied. */
static void test_page_in_refusals(void **state)
{
    (void)state;
    rkv_model *m = model_of(RKV_DTYPE_F32, 2, 0);
    int64_t a, b, s;
    TU_OK(rkv_model_claim(m, "a", &a));
    TU_OK(rkv_model_claim(m, "b", &b));
    frame(m, a, 1, 0);
    frame(m, b, 2, 0);
    size_t n;
    unsigned char *img = offload_mem(m, a, &n);
    unsigned char *bad = tu_xmalloc(n);
    memcpy(bad, img, n);
    bad[n - 200] ^= 0x40; /* inside the data section */
    tu_model_state st = tu_model_save(m);
    TU_ERR(rkv_model_page_in(m, bad, n, &s), RKV_ERR_FORMAT, "corrupted data");
    tu_model_assert_same(&st, m, "a damaged image");
    assert_int_equal(rkv_model_offloaded_count(m), 1);
    TU_ERR(rkv_model_page_in(m, img, n - 1, &s), RKV_ERR_FORMAT, "truncated");
    tu_model_assert_same(&st, m, "a truncated image");
    /* no free slot */
    int64_t c;
    TU_OK(rkv_model_claim(m, "c", &c));
    tu_model_state_free(&st);
    st = tu_model_save(m);
    TU_ERR(rkv_model_page_in(m, img, n, &s), RKV_ERR_FULL, "'a'");
    tu_model_assert_same(&st, m, "page-in without room");
    tu_model_state_free(&st);
    TU_OK(rkv_model_release(m, c));
    TU_OK(rkv_model_page_in(m, img, n, &s));
    assert_int_equal(s, c);
    free(bad);
    rkv_model_host_free(m, img);
    rkv_model_destroy(m);
}

/* A session of 35 MB: offload and page-in copy it with the hash on a
 * second thread (src/copy_hash.c, from 8 MB on). The image must check out
 * (inspect verifies data_xxh3), page in bit-exact, and a damaged one be
 * refused on that path too. */
static void test_offload_large_session(void **state)
{
    (void)state;
    rkv_layer_spec specs[2] = {{16, 16, 1}, {16, 16, 8}};
    rkv_model_config c = tu_model_cfg(2, specs, 2, 4, 4, 64, 512, RKV_DTYPE_F32);
    rkv_model *m = NULL, *ref = NULL;
    TU_OK(rkv_model_create(&c, &m));
    TU_OK(rkv_model_create(&c, &ref));
    int64_t a, r;
    TU_OK(rkv_model_claim(m, "big", &a));
    TU_OK(rkv_model_claim(ref, "big", &r));
    for (int64_t f = 0; f < 3; f++) assert_true(frame(m, a, 8, f) == frame(ref, r, 8, f));
    size_t n;
    unsigned char *img = offload_mem(m, a, &n);
    assert_true(n > ((size_t)32 << 20));
    rkv_snapshot_info info = RKV_SNAPSHOT_INFO_INIT;
    TU_OK(rkv_snapshot_inspect(NULL, img, n, &info));
    unsigned char *bad = tu_xmalloc(n);
    memcpy(bad, img, n);
    const size_t data_at = n - (size_t)info.data_bytes;
    bad[data_at + 1000] ^= 0x10; /* layer 0, K of head 0 */
    int64_t s;
    tu_model_state st = tu_model_save(m);
    TU_ERR(rkv_model_page_in(m, bad, n, &s), RKV_ERR_FORMAT, "checksum");
    tu_model_assert_same(&st, m, "a damaged large image");
    /* layer 0's written bits: the scratch's first bit made 3 */
    memcpy(bad, img, n);
    const size_t kv = (size_t)(4 * 17 * 512 * 64 * 4);
    bad[data_at + 2 * kv + 16 * 512] = 3;
    TU_ERR(rkv_model_page_in(m, bad, n, &s), RKV_ERR_FORMAT, "written bit of slot 8192 is 3");
    tu_model_assert_same(&st, m, "large image with a bad written bit");
    tu_model_state_free(&st);
    TU_OK(rkv_model_page_in(m, img, n, &s));
    same_session(ref, r, m, s, "a large session paged in");
    assert_true(frame(m, s, 8, 3) == frame(ref, r, 8, 3));
    free(bad);
    rkv_model_host_free(m, img);
    rkv_model_destroy(m);
    rkv_model_destroy(ref);
}

/* ---- regions, export and import --------------------------------------------------- */

static void test_regions_layout(void **state)
{
    (void)state;
    rkv_model *m = model_of(RKV_DTYPE_BF16, 3, 0);
    int64_t a, b;
    TU_OK(rkv_model_claim(m, "x", &a));
    TU_OK(rkv_model_claim(m, "y", &b));
    for (int64_t f = 0; f < 5; f++) frame(m, b, 9, f);
    const size_t n = rkv_model_session_region_count(m);
    assert_int_equal(n, 2 * (2 * 2 + 1));
    rkv_session_region *rg = tu_xcalloc(n, sizeof *rg);
    size_t count = 0;
    TU_OK(rkv_model_session_regions(m, b, rg, n, &count));
    assert_int_equal(count, n);
    size_t k = 0, total = 0;
    for (int64_t li = 0; li < 2; li++) {
        rkv_layer *l = rkv_model_layer(m, li);
        const rkv_geometry *g = rkv_layer_geometry(l);
        const int64_t C = tu_C(g), N = tu_N(g);
        for (int part = 0; part < 3; part++)
            for (int64_t h = 0; h < (part == 2 ? 1 : 2); h++, k++) {
                assert_int_equal(rg[k].layer, li);
                assert_int_equal(rg[k].part, part);
                assert_int_equal(rg[k].head, h);
                assert_int_equal(rg[k].device, -1);
                const void *want =
                    part == 2 ? (const void *)(rkv_layer_written(l) + b * C)
                              : (const void *)((const uint8_t *)rkv_layer_kv(l) +
                                               ((size_t)(part * 2 + h) * (size_t)N +
                                                (size_t)(b * C)) * 8 * 2);
                assert_ptr_equal(rg[k].ptr, want);
                assert_int_equal(rg[k].bytes, part == 2 ? (size_t)C : (size_t)C * 8 * 2);
                total += rg[k].bytes;
            }
    }
    /* end to end, they are the snapshot's data section */
    size_t img_n;
    TU_OK(rkv_model_save_session_mem(m, b, NULL, 0, &img_n));
    unsigned char *img = tu_xmalloc(img_n);
    TU_OK(rkv_model_save_session_mem(m, b, img, img_n, &img_n));
    const unsigned char *data = img + img_n - total;
    size_t off = 0;
    for (k = 0; k < n; k++) {
        if (memcmp(data + off, rg[k].ptr, rg[k].bytes))
            fail_msg("region %zu differs from the snapshot's data section", k);
        off += rg[k].bytes;
    }
    rkv_snapshot_info info = RKV_SNAPSHOT_INFO_INIT;
    TU_OK(rkv_snapshot_inspect(NULL, img, img_n, &info));
    uint64_t d = 0;
    TU_OK(rkv_model_session_digest(m, b, &d));
    assert_true(d == info.data_xxh3);
    free(img);
    free(rg);
    rkv_model_destroy(m);
}

/* Export from one model, import into another through the plain copy and
 * through the regions by hand; the streams go on as if never moved. */
static void migrate(int by_hand)
{
    rkv_model *ref = model_of(RKV_DTYPE_F32, 2, 0);
    rkv_model *src = model_of(RKV_DTYPE_F32, 2, 0), *dst = model_of(RKV_DTYPE_F32, 3, 0);
    int64_t r, a, other, s;
    TU_OK(rkv_model_claim(ref, "m", &r));
    TU_OK(rkv_model_claim(src, "m", &a));
    TU_OK(rkv_model_claim(dst, "other", &other));
    for (int64_t f = 0; f < 5; f++) assert_true(frame(ref, r, 5, f) == frame(src, a, 5, f));
    frame(dst, other, 6, 0);
    /* the metadata is the session's snapshot header (the image's bytes before
     * its data) and two keys: 64 bytes more than the image's padded header */
    const size_t mb = rkv_model_session_meta_bytes(src), nr = rkv_model_session_region_count(src);
    rkv_session_region *rs = tu_xcalloc(nr, sizeof *rs);
    size_t data = 0, c0;
    TU_OK(rkv_model_session_regions(src, a, rs, nr, &c0));
    for (size_t k = 0; k < nr; k++) data += rs[k].bytes;
    free(rs);
    assert_int_equal(mb, rkv_model_snapshot_bytes(src) - data + 64);
    unsigned char *meta = tu_xmalloc(mb);
    TU_OK(rkv_model_session_export_meta(src, a, meta, mb));
    assert_int_equal(tsnap_header_len(meta, mb), mb - 8);
    static const char *const keys[] = {"\"request_id\":\"m\"", "\"last_committed\":\"4\"",
                                       "\"session_meta_version\":\"3\"", "\"written_xxh3\":\"",
                                       "\"layer.1.written\":{", "\"data_xxh3\":\"0000000000000000\""};
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++)
        if (!tsnap_find(meta, mb, keys[k], strlen(keys[k]))) fail_msg("no %s in the metadata", keys[k]);
    TU_OK(rkv_model_import_reserve(dst, meta, mb, &s));
    assert_int_equal(s, 1);
    int64_t got;
    TU_ERR(rkv_model_claim(dst, "m", &got), RKV_ERR_STATE, "being imported");
    TU_ERR(rkv_model_clock(dst, s, &got), RKV_ERR_STATE, "reserved for an import");
    if (by_hand) {
        const size_t n = rkv_model_session_region_count(src);
        rkv_session_region *from = tu_xcalloc(n, sizeof *from), *to = tu_xcalloc(n, sizeof *to);
        size_t c1, c2;
        TU_OK(rkv_model_session_regions(src, a, from, n, &c1));
        TU_OK(rkv_model_session_regions(dst, s, to, n, &c2));
        for (size_t k = 0; k < n; k++) {
            assert_int_equal(from[k].bytes, to[k].bytes);
            memcpy(to[k].ptr, from[k].ptr, from[k].bytes);
        }
        free(from), free(to);
    } else {
        TU_OK(rkv_model_transfer_session(src, a, dst, s));
    }
    uint64_t d1, d2;
    TU_OK(rkv_model_session_digest(src, a, &d1));
    TU_OK(rkv_model_session_digest(dst, s, &d2));
    assert_true(d1 == d2);
    TU_OK(rkv_model_import_check(dst, s, meta, mb));
    TU_OK(rkv_model_session_import(dst, s, meta, mb));
    TU_OK(rkv_model_release(src, a));
    TU_OK(rkv_model_lookup(dst, "m", &got));
    assert_int_equal(got, s);
    same_session(ref, r, dst, s, "imported");
    for (int64_t f = 5; f < 10; f++)
        if (frame(ref, r, 5, f) != frame(dst, s, 5, f))
            fail_msg("frame %lld after the import differs", (long long)f);
    free(meta);
    rkv_model_destroy(ref), rkv_model_destroy(src), rkv_model_destroy(dst);
}
static void test_migrate_plain_copy(void **state)
{
    (void)state;
    migrate(0);
}
static void test_migrate_regions_by_hand(void **state)
{
    (void)state;
    migrate(1);
}

/* A destination refuses before anything moves (another geometry, damaged
 * metadata, the id already there, no room); an import of regions whose
 * written bits are broken is refused and changes nothing live; cancel
 * frees the slot and the id. */
static void test_import_refusals(void **state)
{
    (void)state;
    rkv_model *src = model_of(RKV_DTYPE_F32, 2, 0), *dst = model_of(RKV_DTYPE_F32, 2, 0);
    rkv_model *f16 = model_of(RKV_DTYPE_F16, 2, 0);
    int64_t a, s, h;
    TU_OK(rkv_model_claim(src, "m", &a));
    for (int64_t f = 0; f < 3; f++) frame(src, a, 1, f);
    const size_t mb = rkv_model_session_meta_bytes(src);
    unsigned char *meta = tu_xmalloc(mb), *bad = tu_xmalloc(mb);
    TU_OK(rkv_model_session_export_meta(src, a, meta, mb));
    tu_model_state st = tu_model_save(f16);
    TU_ERR(rkv_model_import_reserve(f16, meta, mb, &s), RKV_ERR_FORMAT, "dtype");
    tu_model_assert_same(&st, f16, "reserve, other dtype");
    tu_model_state_free(&st);
    st = tu_model_save(dst);
    memcpy(bad, meta, mb);
    tsnap_find(bad, mb, "\"request_id\":\"m", 15)[14] ^= 1; /* the checksum catches it */
    TU_ERR(rkv_model_import_reserve(dst, bad, mb, &s), RKV_ERR_FORMAT, "header checksum mismatch");
    TU_ERR(rkv_model_import_reserve(dst, meta, mb - 1, &s), RKV_ERR_FORMAT, "bytes");
    /* one parser reads images and metadata: an image is not metadata, nor is
     * a header without the session keys (edited behind a valid checksum) */
    size_t nb = 0, en = 0;
    TU_OK(rkv_model_save_session_mem(src, a, NULL, 0, &nb));
    unsigned char *image = tu_xmalloc(nb), *e;
    TU_OK(rkv_model_save_session_mem(src, a, image, nb, &nb));
    TU_ERR(rkv_model_import_reserve(dst, image, nb, &s), RKV_ERR_FORMAT,
           "not ringkv session metadata");
    TU_ERR(rkv_model_import_reserve(dst, image, tsnap_header_len(image, nb) + 8, &s),
           RKV_ERR_FORMAT, "session_meta_version is missing");
    e = tsnap_edit(meta, mb, "\"written_xxh3\"", "\"other_xxh3\"", 1, &en);
    TU_ERR(rkv_model_import_reserve(dst, e, en, &s), RKV_ERR_FORMAT, "'written_xxh3' is missing");
    free(e);
    e = tsnap_edit(meta, mb, "\"session_meta_version\":\"3\"", "\"session_meta_version\":\"2\"", 0, &en);
    TU_ERR(rkv_model_import_reserve(dst, e, en, &s), RKV_ERR_FORMAT,
           "unsupported session metadata version 2; this ringkv reads version 3");
    free(e), free(image);
    /* the plain copy compares the geometries as an import does */
    rkv_model *f16b = model_of(RKV_DTYPE_F16, 2, 0);
    int64_t q, fs;
    TU_OK(rkv_model_claim(f16b, "q", &q));
    const size_t fb = rkv_model_session_meta_bytes(f16b); /* fewer digits: a smaller header */
    assert_true(fb < mb);
    TU_OK(rkv_model_session_export_meta(f16b, q, bad, fb));
    TU_OK(rkv_model_import_reserve(f16, bad, fb, &fs));
    TU_ERR(rkv_model_transfer_session(src, a, f16, fs), RKV_ERR_FORMAT,
           "rkv_model_transfer_session: wrong geometry: the source model has dtype f32, this "
           "model f16");
    TU_OK(rkv_model_import_cancel(f16, fs));
    rkv_model_destroy(f16b);
    TU_OK(rkv_model_claim(dst, "m", &h)); /* the id is held there already */
    tu_model_state_free(&st);
    st = tu_model_save(dst);
    TU_ERR(rkv_model_import_reserve(dst, meta, mb, &s), RKV_ERR_STATE, "held");
    TU_OK(rkv_model_release(dst, h));
    int64_t x, y;
    TU_OK(rkv_model_claim(dst, "x", &x));
    TU_OK(rkv_model_claim(dst, "y", &y));
    tu_model_state_free(&st);
    st = tu_model_save(dst);
    TU_ERR(rkv_model_import_reserve(dst, meta, mb, &s), RKV_ERR_FULL, "no room");
    tu_model_assert_same(&st, dst, "reserve without room");
    tu_model_state_free(&st);
    TU_OK(rkv_model_release(dst, y));
    TU_OK(rkv_model_import_reserve(dst, meta, mb, &s));
    TU_ERR(rkv_model_import_reserve(dst, meta, mb, &h), RKV_ERR_STATE, "being imported");
    TU_OK(rkv_model_transfer_session(src, a, dst, s));
    /* a written bit broken in the destination's regions */
    const size_t n = rkv_model_session_region_count(dst);
    rkv_session_region *rg = tu_xcalloc(n, sizeof *rg);
    size_t count;
    TU_OK(rkv_model_session_regions(dst, s, rg, n, &count));
    uint8_t *w = rg[4].ptr; /* layer 0's written bits */
    assert_int_equal(rg[4].part, RKV_SPAN_WRITTEN);
    const uint8_t keep = w[3];
    w[3] = 7;
    TU_ERR(rkv_model_import_check(dst, s, meta, mb), RKV_ERR_FORMAT, "slot 3");
    TU_ERR(rkv_model_session_import(dst, s, meta, mb), RKV_ERR_FORMAT, "slot 3");
    TU_ERR(rkv_model_lookup(dst, "m", &h), RKV_ERR_NOT_FOUND, "being imported");
    w[3] = keep;
    /* another session's metadata for this reservation */
    int64_t b;
    TU_OK(rkv_model_claim(src, "other", &b));
    unsigned char *meta_b = tu_xmalloc(mb);
    TU_OK(rkv_model_session_export_meta(src, b, meta_b, mb));
    TU_ERR(rkv_model_session_import(dst, s, meta_b, mb), RKV_ERR_FORMAT, "reserved with");
    /* cancel: free again, the id usable */
    TU_OK(rkv_model_import_cancel(dst, s));
    TU_ERR(rkv_model_import_cancel(dst, s), RKV_ERR_STATE, "not reserved");
    TU_OK(rkv_model_claim(dst, "m", &h));
    assert_int_equal(h, s);
    int64_t clock;
    TU_OK(rkv_model_clock(dst, h, &clock));
    assert_int_equal(clock, -1);
    free(rg), free(meta), free(bad), free(meta_b);
    rkv_model_destroy(src), rkv_model_destroy(dst), rkv_model_destroy(f16);
}

/* Every layer's K/V and written bits, end to end (the model's state bytes). */
static unsigned char *state_bytes(rkv_model *m, size_t *n)
{
    size_t total = 0;
    for (int64_t i = 0; i < rkv_model_get_config(m)->n_layers; i++) {
        const rkv_layer *l = rkv_model_layer(m, i);
        total += rkv_geometry_memory_bytes(rkv_layer_geometry(l)) + (size_t)rkv_layer_geometry(l)->num_sessions *
                                                 (size_t)rkv_geometry_capacity(rkv_layer_geometry(l));
    }
    unsigned char *b = tu_xmalloc(total), *p = b;
    for (int64_t i = 0; i < rkv_model_get_config(m)->n_layers; i++) {
        const rkv_layer *l = rkv_model_layer(m, i);
        const size_t kv = rkv_geometry_memory_bytes(rkv_layer_geometry(l)),
                     w = (size_t)rkv_layer_geometry(l)->num_sessions *
                         (size_t)rkv_geometry_capacity(rkv_layer_geometry(l));
        memcpy(p, rkv_layer_kv(l), kv), p += kv;
        memcpy(p, rkv_layer_written(l), w), p += w;
    }
    *n = total;
    return b;
}

/* A caller's buffer inside the model's own storage is refused by every
 * call that reads or writes one, before anything changes (state bytes,
 * clocks, holds, the offload table), naming the public call. */
static void test_buffers_in_storage_refused(void **state)
{
    (void)state;
    rkv_model *m = model_of(RKV_DTYPE_F32, 3, 0);
    int64_t a, b, got, clock;
    TU_OK(rkv_model_claim(m, "a", &a));
    TU_OK(rkv_model_claim(m, "b", &b));
    for (int64_t f = 0; f < 3; f++) frame(m, a, 1, f), frame(m, b, 2, f);
    size_t nb = rkv_model_snapshot_bytes(m), ns = 0, fb = 0;
    unsigned char *image = tu_xmalloc(nb);
    TU_OK(rkv_model_snapshot(m, a, image, nb));
    rkv_layer *l0 = rkv_model_layer(m, 0), *l1 = rkv_model_layer(m, 1);
    unsigned char *kv0 = (unsigned char *)rkv_layer_kv(l0);
    assert_true(rkv_geometry_memory_bytes(rkv_layer_geometry(l0)) > nb / 2);
    unsigned char *before = state_bytes(m, &ns);
    const size_t mb = rkv_model_session_meta_bytes(m);
    unsigned char *meta = tu_xmalloc(mb);
    TU_OK(rkv_model_session_export_meta(m, a, meta, mb));
    uint8_t *bits1 = (uint8_t *)rkv_layer_written(l1);
#define REFUSED(call, name)                                                                        \
    do {                                                                                           \
        TU_ERR(call, RKV_ERR_INVALID_ARG, name ": ");                                              \
        assert_null(strstr(rkv_last_error(), "rkv_layer"));                                       \
        assert_non_null(strstr(rkv_last_error(), "the model's layer"));                            \
        unsigned char *now = state_bytes(m, &ns);                                                  \
        if (memcmp(now, before, ns)) fail_msg("%s changed the model's state", name);             \
        free(now);                                                                                 \
        TU_OK(rkv_model_clock(m, b, &clock));                                                      \
        assert_int_equal(clock, 2);                                                                \
        TU_OK(rkv_model_lookup(m, "a", &got));                                                     \
        assert_int_equal(rkv_model_offloaded_count(m), 0);                                         \
    } while (0)
    REFUSED(rkv_model_snapshot(m, a, kv0, nb), "rkv_model_snapshot");
    REFUSED(rkv_model_save_session_mem(m, a, kv0 + 64, nb, &fb), "rkv_model_save_session_mem");
    /* a size query writes file_bytes only: into storage, refused too */
    REFUSED(rkv_model_save_session_mem(m, a, NULL, 0, (size_t *)(void *)(kv0 + 8)),
            "rkv_model_save_session_mem");
    REFUSED(rkv_model_offload(m, a, kv0, nb, &fb), "rkv_model_offload");
    REFUSED(rkv_model_offload(m, a, image, nb, (size_t *)(void *)kv0), "rkv_model_offload");
    /* the image put into storage would change it: point at storage as it is */
    REFUSED(rkv_model_restore(m, b, kv0, nb), "rkv_model_restore");
    REFUSED(rkv_model_restore(m, b, kv0 + 8, nb - 8), "rkv_model_restore");
    REFUSED(rkv_model_page_in(m, kv0, nb, &got), "rkv_model_page_in");
    REFUSED(rkv_model_page_in(m, image, nb, (int64_t *)(void *)bits1), "rkv_model_page_in");
    REFUSED(rkv_model_session_export_meta(m, a, bits1, mb), "rkv_model_session_export_meta");
    REFUSED(rkv_model_import_reserve(m, kv0, mb, &got), "rkv_model_import_reserve");
    REFUSED(rkv_model_import_reserve(m, meta, mb, (int64_t *)(void *)kv0),
            "rkv_model_import_reserve");
    REFUSED(rkv_model_session_digest(m, a, (uint64_t *)(void *)kv0), "rkv_model_session_digest");
#undef REFUSED
    /* the same image from the caller's own memory restores */
    TU_OK(rkv_model_restore(m, b, image, nb));
    TU_OK(rkv_model_clock(m, b, &clock));
    assert_int_equal(clock, 2);
    same_session(m, a, m, b, "restored");
    free(before), free(image), free(meta);
    rkv_model_destroy(m);
}

/* A slot reserved for an import but not filled (or filled with the regions
 * of a session whose written bits differ: 1 frame against 3) is refused at
 * import: the written bits must be the exporter's (the metadata carries
 * their XXH3-64; equal bits, e.g. two sessions at one clock, pass: the K/V
 * digest is the check for those); the slot stays reserved and a later
 * right fill imports. */
static void test_import_unfilled_refused(void **state)
{
    (void)state;
    rkv_model *src = model_of(RKV_DTYPE_F32, 2, 0), *dst = model_of(RKV_DTYPE_F32, 2, 0);
    int64_t a, o, s, got;
    TU_OK(rkv_model_claim(src, "m", &a));
    TU_OK(rkv_model_claim(src, "o", &o));
    for (int64_t f = 0; f < 3; f++) frame(src, a, 1, f);
    frame(src, o, 2, 0);
    const size_t mb = rkv_model_session_meta_bytes(src);
    unsigned char *meta = tu_xmalloc(mb);
    TU_OK(rkv_model_session_export_meta(src, a, meta, mb));
    TU_OK(rkv_model_import_reserve(dst, meta, mb, &s));
    TU_ERR(rkv_model_import_check(dst, s, meta, mb), RKV_ERR_FORMAT, "not the exporter's");
    TU_ERR(rkv_model_session_import(dst, s, meta, mb), RKV_ERR_FORMAT,
           "rkv_model_session_import: the written bits");
    TU_ERR(rkv_model_lookup(dst, "m", &got), RKV_ERR_NOT_FOUND, "");
    /* another session's regions (valid bits, other frames, so other bits):
     * refused too */
    const size_t n = rkv_model_session_region_count(src);
    rkv_session_region *from = tu_xcalloc(n, sizeof *from), *to = tu_xcalloc(n, sizeof *to);
    size_t c;
    TU_OK(rkv_model_session_regions(src, o, from, n, &c));
    TU_OK(rkv_model_session_regions(dst, s, to, n, &c));
    for (size_t k = 0; k < n; k++) memcpy(to[k].ptr, from[k].ptr, from[k].bytes);
    TU_ERR(rkv_model_session_import(dst, s, meta, mb), RKV_ERR_FORMAT, "not the exporter's");
    /* a partly written frame is named as such */
    uint8_t *w = to[2 * (size_t)rkv_model_get_config(dst)->n_kv_heads].ptr;
    const uint8_t keep = w[1];
    w[1] = (uint8_t)!w[0];
    TU_ERR(rkv_model_session_import(dst, s, meta, mb), RKV_ERR_FORMAT, "is partly written");
    w[1] = keep;
    TU_OK(rkv_model_transfer_session(src, a, dst, s));
    TU_OK(rkv_model_session_import(dst, s, meta, mb));
    same_session(src, a, dst, s, "imported");
    free(from), free(to), free(meta);
    rkv_model_destroy(src), rkv_model_destroy(dst);
}

/* The default table size and the config's range. */
static void test_offload_config(void **state)
{
    (void)state;
    rkv_model *m = model_of(RKV_DTYPE_F32, 7, 0);
    assert_int_equal(rkv_model_offload_capacity(m), 28);
    assert_int_equal(rkv_model_get_config(m)->max_offloaded, 0);
    rkv_model_destroy(m);
    m = model_of(RKV_DTYPE_F32, 2, 5);
    assert_int_equal(rkv_model_offload_capacity(m), 5);
    rkv_model_destroy(m);
    rkv_model_config c = cfg_of(RKV_DTYPE_F32, 2, -1);
    rkv_model *none = NULL;
    TU_ERR(rkv_model_create(&c, &none), RKV_ERR_INVALID_ARG, "max_offloaded");
    c.max_offloaded = RKV_MAX_OFFLOADED + 1;
    TU_ERR(rkv_model_create(&c, &none), RKV_ERR_INVALID_ARG, "max_offloaded");
    assert_null(none);
    assert_int_equal(rkv_model_offload_capacity(NULL), 0);
    assert_int_equal(rkv_model_offloaded_count(NULL), 0);
    assert_int_equal(rkv_model_session_region_count(NULL), 0);
    assert_int_equal(rkv_model_session_meta_bytes(NULL), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_offload_page_in_f32),
        cmocka_unit_test(test_offload_page_in_bf16),
        cmocka_unit_test(test_offload_file),
        cmocka_unit_test(test_stale_image_refused),
        cmocka_unit_test(test_table_full_and_discard),
        cmocka_unit_test(test_page_in_refusals),
        cmocka_unit_test(test_offload_large_session),
        cmocka_unit_test(test_regions_layout),
        cmocka_unit_test(test_migrate_plain_copy),
        cmocka_unit_test(test_migrate_regions_by_hand),
        cmocka_unit_test(test_import_refusals),
        cmocka_unit_test(test_offload_config),
        cmocka_unit_test(test_buffers_in_storage_refused),
        cmocka_unit_test(test_import_unfilled_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* Sessions that survive (issue 5): snapshot files (round trips for every
 * dtype and the 360P preset, resume equals uninterrupted, every kind of
 * damaged file refused with nothing changed, atomic saves), forks, batched
 * steps, and 10,000 claim/snapshot/release cycles with memory flat. */
#define _POSIX_C_SOURCE 200809L /* mkdtemp, setrlimit, fork-free helpers */
#include "testutil.h"

#include <dirent.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <cJSON.h>
#include <xxhash.h>

#include "snapshot_edit.h"

/* Heap allocations counted (issue 20: the in-memory round trip makes none
 * once warm): malloc and its kin defined here take the calls of the whole
 * program, the library and Jansson included (the executable's definitions
 * come first in symbol lookup), count them and hand them to glibc's own.
 * glibc only, and not under a sanitizer, whose runtime must own the heap
 * (there the count is skipped, said in the test's output). */
#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) ||                    \
    __has_feature(memory_sanitizer)
#define RKVT_NO_ALLOC_COUNT 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__) || !defined(__GLIBC__)
#define RKVT_NO_ALLOC_COUNT 1
#endif
#ifndef RKVT_NO_ALLOC_COUNT
#include <stdatomic.h>
extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);
static atomic_long g_allocs;
void *malloc(size_t n)
{
    atomic_fetch_add_explicit(&g_allocs, 1, memory_order_relaxed);
    return __libc_malloc(n);
}
void *calloc(size_t n, size_t size)
{
    atomic_fetch_add_explicit(&g_allocs, 1, memory_order_relaxed);
    return __libc_calloc(n, size);
}
void *realloc(void *p, size_t n)
{
    atomic_fetch_add_explicit(&g_allocs, 1, memory_order_relaxed);
    return __libc_realloc(p, n);
}
void *aligned_alloc(size_t align, size_t n)
{
    atomic_fetch_add_explicit(&g_allocs, 1, memory_order_relaxed);
    return __libc_memalign(align, n);
}
int posix_memalign(void **p, size_t align, size_t n)
{
    atomic_fetch_add_explicit(&g_allocs, 1, memory_order_relaxed);
    *p = __libc_memalign(align, n);
    return *p ? 0 : 12 /* ENOMEM */;
}
static long allocs_so_far(void) { return atomic_load(&g_allocs); }
#endif

static char g_dir[256];

static const char *tmp_path(const char *name)
{
    static char buf[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", g_dir, name);
    return buf[k];
}

static void remove_dir_contents(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        char p[600];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        unlink(p);
    }
    closedir(d);
}

/* Names in the directory containing `needle`. */
static int count_files(const char *needle)
{
    DIR *d = opendir(g_dir);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (strstr(e->d_name, needle))
            n++;
    if (d)
        closedir(d);
    return n;
}

static int setup_dir(void **state)
{
    (void)state;
    const char *t = getenv("TMPDIR");
    snprintf(g_dir, sizeof g_dir, "%s/rkv-snapfile-XXXXXX", t && *t ? t : "/tmp");
    return mkdtemp(g_dir) ? 0 : -1;
}
static int teardown_dir(void **state)
{
    (void)state;
    remove_dir_contents(g_dir);
    rmdir(g_dir);
    return 0;
}

static unsigned char *read_all(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = tu_xmalloc((size_t)sz);
    assert_int_equal(fread(b, 1, (size_t)sz, f), (size_t)sz);
    fclose(f);
    *n = (size_t)sz;
    return b;
}
static void write_all(const char *path, const void *b, size_t n)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(b, 1, n, f), n);
    fclose(f);
}

/* ------------------------------------------------------------------------ */
/* Models and frames                                                         */
/* ------------------------------------------------------------------------ */

/* Two small layers: a global-like one (RF 4, RB 3, PD 2) and a local one. */
static rkv_model_config small_cfg(rkv_dtype dt, int64_t S)
{
    static const rkv_layer_spec specs[2] = {{4, 3, 2}, {2, 2, 1}};
    return tu_model_cfg(2, specs, S, 2, 1, 8, 128, dt);
}

static rkv_model *new_model(const rkv_model_config *cfg)
{
    rkv_model *m = NULL;
    TU_OK(rkv_model_create(cfg, &m));
    return m;
}

static int64_t claim(rkv_model *m, const char *id)
{
    int64_t s = -1;
    TU_OK(rkv_model_claim(m, id, &s));
    return s;
}

/* The K/V input of (seed, frame, pass): the same for every layer and
 * session, so that the same history can be replayed anywhere. */
static void *frame_kv(const rkv_model_config *cfg, uint64_t seed, int64_t f, int pass)
{
    rkv_geometry g;
    TU_OK(rkv_model_config_layer_geometry(cfg, 0, &g));
    size_t n = (size_t)(2 * g.n_kv_heads * g.tokens_per_frame * g.d_head);
    float *x = tu_xmalloc(n * sizeof(float));
    tu_gen_frame(x, &g, seed * 1000003u + (uint64_t)f * 8u + (uint64_t)pass);
    void *out = tu_to_dtype(x, n, cfg->dtype);
    free(x);
    return out;
}

/* Runs frame f of session s (5 passes x every layer, commit on the last
 * pass). When out != NULL, attention runs after every upsert with queries
 * from (seed, f, pass) and `out` receives the last pass's outputs of every
 * layer, f32 [n_layers][Hq][T][D]. */
static void run_frame(rkv_model *m, int64_t s, int64_t f, uint64_t seed, float *out)
{
    const rkv_model_config *cfg = rkv_model_get_config(m);
    TU_OK(rkv_model_begin_frame(m, 1, &s, &f));
    const size_t qn = (size_t)(cfg->n_q_heads * cfg->tokens_per_frame * cfg->d_head);
    for (int pass = 0; pass < 5; pass++) {
        void *kv = frame_kv(cfg, seed, f, pass);
        float *q = NULL;
        if (out) {
            q = tu_xmalloc(qn * sizeof(float));
            tu_rng r = {rkvt_mix(seed ^ ((uint64_t)f << 20) ^ (uint64_t)pass)};
            tu_fill_uniform(q, qn, &r);
        }
        for (int64_t i = 0; i < cfg->n_layers; i++) {
            TU_OK(rkv_model_upsert(m, i, NULL, 1, &s, kv, cfg->dtype, pass == 4));
            if (out) {
                rkv_attention_args a = RKV_ATTENTION_ARGS_INIT;
                a.n_q_heads = cfg->n_q_heads;
                a.q = q;
                a.q_dtype = RKV_DTYPE_F32;
                a.out = out + (size_t)i * qn;
                a.out_dtype = RKV_DTYPE_F32;
                TU_OK(rkv_model_attend(m, i, NULL, 1, &s, &a));
            }
        }
        free(kv);
        free(q);
    }
}

static void run_frames(rkv_model *m, int64_t s, int64_t from, int64_t to, uint64_t seed)
{
    for (int64_t f = from; f < to; f++)
        run_frame(m, s, f, seed, NULL);
}

static int64_t clock_of(const rkv_model *m, int64_t s)
{
    int64_t c = -99;
    TU_OK(rkv_model_clock(m, s, &c));
    return c;
}

/* Session a of model A and session b of model B hold the same bytes (K/V
 * span and written bits of every layer) and the same clock. */
static int sessions_equal(rkv_model *A, int64_t a, rkv_model *B, int64_t b)
{
    const rkv_model_config *cfg = rkv_model_get_config(A);
    for (int64_t i = 0; i < cfg->n_layers; i++) {
        const rkv_layer *la = rkv_model_layer(A, i), *lb = rkv_model_layer(B, i);
        const rkv_geometry *ga = rkv_layer_geometry(la), *gb = rkv_layer_geometry(lb);
        const int64_t C = tu_C(ga), H = ga->n_kv_heads, D = ga->d_head;
        const size_t es = tu_esize(ga->dtype), span = (size_t)(C * D) * es;
        for (int64_t c = 0; c < 2; c++)
            for (int64_t h = 0; h < H; h++) {
                const unsigned char *pa = (const unsigned char *)rkv_layer_kv(la) +
                                          (size_t)(((c * H + h) * tu_N(ga) + a * C) * D) * es;
                const unsigned char *pb = (const unsigned char *)rkv_layer_kv(lb) +
                                          (size_t)(((c * H + h) * tu_N(gb) + b * C) * D) * es;
                if (memcmp(pa, pb, span))
                    return 0;
            }
        if (memcmp(rkv_layer_written(la) + a * C, rkv_layer_written(lb) + b * C, (size_t)C))
            return 0;
    }
    return clock_of(A, a) == clock_of(B, b);
}

/* ------------------------------------------------------------------------ */
/* Round trips                                                               */
/* ------------------------------------------------------------------------ */

static void roundtrip_dtype(rkv_dtype dt)
{
    rkv_model_config cfg = small_cfg(dt, 2);
    rkv_model *A = new_model(&cfg);
    int64_t a = claim(A, "alpha");
    a = claim(A, "beta"); /* session 1: not the first */
    run_frames(A, a, 0, 11, 7);
    assert_int_equal(clock_of(A, a), 10);

    const char *path = tmp_path("rt.safetensors");
    TU_OK(rkv_model_save_session(A, a, path));
    assert_int_equal(count_files(".tmp-"), 0);

    /* the file and the memory image are the same bytes */
    size_t n = 0, need = 0;
    unsigned char *file = read_all(path, &n);
    TU_OK(rkv_model_save_session_mem(A, a, NULL, 0, &need));
    assert_int_equal(need, n);
    unsigned char *img = tu_xmalloc(need);
    TU_ERR(rkv_model_save_session_mem(A, a, img, need - 1, &need), RKV_ERR_INVALID_ARG, "bytes");
    TU_OK(rkv_model_save_session_mem(A, a, img, need, &need));
    assert_memory_equal(img, file, n);

    rkv_snapshot_info info;
    memset(&info, 0xAB, sizeof info); /* every member must be written */
    info.struct_size = sizeof info;
    TU_OK(rkv_snapshot_inspect(path, NULL, 0, &info));
    assert_int_equal(info.format_version, RKV_SNAPSHOT_VERSION);
    assert_int_equal(info.last_committed, 10);
    assert_string_equal(info.request_id, "beta");
    assert_int_equal(info.source_session, 1);
    assert_string_equal(info.config.name, "test");
    assert_int_equal(info.config.n_layers, 2);
    assert_int_equal(info.config.num_sessions, 1);
    assert_int_equal(info.config.n_q_heads, 2);
    assert_int_equal(info.config.dtype, dt);
    assert_int_equal(info.config.layers[0].ring_buckets, 3);
    assert_int_equal(info.config.layers[0].pinned_dilation, 2);
    assert_int_equal(info.file_bytes, n);
    assert_int_equal(8 + info.header_bytes + info.data_bytes, n);
    assert_int_equal((8 + info.header_bytes) % 8, 0);
    rkv_snapshot_info info2 = RKV_SNAPSHOT_INFO_INIT;
    TU_OK(rkv_snapshot_inspect(NULL, img, n, &info2));
    assert_int_equal(info2.data_xxh3, info.data_xxh3);
    assert_int_equal(info2.data_xxh3, XXH3_64bits(img + 8 + info.header_bytes, info.data_bytes));

    /* load into another model: more sessions, other n_q_heads, session 2 */
    rkv_model_config cfg3 = small_cfg(dt, 3);
    cfg3.n_q_heads = 4;
    rkv_model *B = new_model(&cfg3);
    claim(B, "x");
    claim(B, "y");
    int64_t b = claim(B, "z");
    run_frames(B, b, 0, 3, 99); /* something to overwrite */
    TU_OK(rkv_model_load_session(B, b, path));
    assert_true(sessions_equal(A, a, B, b));
    assert_int_equal(clock_of(B, b), 10);
    /* the clock is restored: the next frame is 11 */
    int64_t bad = 10, good = 11;
    TU_ERR(rkv_model_begin_frame(B, 1, &b, &bad), RKV_ERR_CLOCK, "expected 11");
    TU_OK(rkv_model_begin_frame(B, 1, &b, &good));

    /* and from memory, into a fresh model */
    rkv_model *C = new_model(&cfg);
    int64_t c = claim(C, "c");
    TU_OK(rkv_model_restore(C, c, img, n));
    assert_true(sessions_equal(A, a, C, c));

    free(file);
    free(img);
    rkv_model_destroy(A);
    rkv_model_destroy(B);
    rkv_model_destroy(C);
    unlink(path);
}

static void test_roundtrip_f32(void **state)
{
    (void)state;
    roundtrip_dtype(RKV_DTYPE_F32);
}
static void test_roundtrip_f16(void **state)
{
    (void)state;
    roundtrip_dtype(RKV_DTYPE_F16);
}
static void test_roundtrip_bf16(void **state)
{
    (void)state;
    roundtrip_dtype(RKV_DTYPE_BF16);
}

/* The layout, read without the library: header length, JSON (cJSON), each
 * tensor at its data_offsets holding the session's bytes. */
static void test_layout_is_safetensors(void **state)
{
    (void)state;
    rkv_model_config cfg = small_cfg(RKV_DTYPE_BF16, 2);
    rkv_model *A = new_model(&cfg);
    claim(A, "first");
    int64_t a = claim(A, "second");
    run_frames(A, a, 0, 6, 3);
    const char *path = tmp_path("layout.safetensors");
    TU_OK(rkv_model_save_session(A, a, path));
    size_t n;
    unsigned char *f = read_all(path, &n);
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--)
        hl = hl << 8 | f[i];
    assert_true(8 + hl <= n);
    assert_int_equal(f[8], '{');
    cJSON *root = cJSON_ParseWithLength((const char *)f + 8, (size_t)hl);
    assert_non_null(root);
    const cJSON *meta = cJSON_GetObjectItem(root, "__metadata__");
    assert_non_null(meta);
    for (const cJSON *e = meta->child; e; e = e->next)
        assert_true(cJSON_IsString(e)); /* safetensors: Dict[str, str] */
    assert_string_equal(cJSON_GetObjectItem(meta, "format")->valuestring, "ringkv-snapshot");
    assert_string_equal(cJSON_GetObjectItem(meta, "format_version")->valuestring, "1");
    assert_string_equal(cJSON_GetObjectItem(meta, "last_committed")->valuestring, "5");
    assert_string_equal(cJSON_GetObjectItem(meta, "dtype")->valuestring, "bf16");
    assert_string_equal(cJSON_GetObjectItem(meta, "ring_buckets")->valuestring, "3,2");
    /* data_xxh3 is XXH3-64 of the data section */
    char hex[17];
    snprintf(hex, sizeof hex, "%016llx",
             (unsigned long long)XXH3_64bits(f + 8 + hl, n - 8 - (size_t)hl));
    assert_string_equal(cJSON_GetObjectItem(meta, "data_xxh3")->valuestring, hex);
    /* header_xxh3: the length and header bytes with its digits read as 0 */
    const char *hv = cJSON_GetObjectItem(meta, "header_xxh3")->valuestring;
    unsigned char *copy = tu_xmalloc(8 + (size_t)hl);
    memcpy(copy, f, 8 + (size_t)hl);
    char *at = strstr((char *)copy + 8, "\"header_xxh3\":\"");
    assert_non_null(at);
    memset(at + 15, '0', 16);
    snprintf(hex, sizeof hex, "%016llx", (unsigned long long)XXH3_64bits(copy, 8 + (size_t)hl));
    assert_string_equal(hv, hex);
    free(copy);

    for (int64_t i = 0; i < cfg.n_layers; i++) {
        const rkv_layer *l = rkv_model_layer(A, i);
        const rkv_geometry *g = rkv_layer_geometry(l);
        const int64_t C = tu_C(g), D = g->d_head, H = g->n_kv_heads;
        static const char *const kinds[3] = {"k", "v", "written"};
        for (int k = 0; k < 3; k++) {
            char name[64];
            snprintf(name, sizeof name, "layer.%lld.%s", (long long)i, kinds[k]);
            const cJSON *t = cJSON_GetObjectItem(root, name);
            assert_non_null(t);
            assert_string_equal(cJSON_GetObjectItem(t, "dtype")->valuestring, k == 2 ? "U8" : "BF16");
            const cJSON *shape = cJSON_GetObjectItem(t, "shape");
            const cJSON *offs = cJSON_GetObjectItem(t, "data_offsets");
            size_t b = (size_t)cJSON_GetArrayItem(offs, 0)->valuedouble;
            size_t e = (size_t)cJSON_GetArrayItem(offs, 1)->valuedouble;
            const unsigned char *p = f + 8 + hl + b;
            if (k == 2) {
                assert_int_equal(cJSON_GetArraySize(shape), 1);
                assert_int_equal(cJSON_GetArrayItem(shape, 0)->valueint, C);
                assert_int_equal(e - b, (size_t)C);
                assert_memory_equal(p, rkv_layer_written(l) + a * C, (size_t)C);
                continue;
            }
            assert_int_equal(cJSON_GetArraySize(shape), 3);
            assert_int_equal(cJSON_GetArrayItem(shape, 0)->valueint, H);
            assert_int_equal(cJSON_GetArrayItem(shape, 1)->valueint, C);
            assert_int_equal(cJSON_GetArrayItem(shape, 2)->valueint, D);
            assert_int_equal(e - b, (size_t)(H * C * D * 2));
            for (int64_t h = 0; h < H; h++)
                assert_memory_equal(p + (size_t)(h * C * D * 2),
                                    (const unsigned char *)rkv_layer_kv(l) +
                                        (size_t)(((k * H + h) * tu_N(g) + a * C) * D * 2),
                                    (size_t)(C * D * 2));
        }
    }
    cJSON_Delete(root);
    free(f);
    rkv_model_destroy(A);
    unlink(path);
}

/* 360P preset in bf16: 24 layers, 204 MiB per session. */
static void test_roundtrip_360p_bf16(void **state)
{
    (void)state;
    rkv_model_config cfg = RKV_MODEL_CONFIG_INIT;
    TU_OK(rkv_model_preset("waypoint-1.5-360p", 0, &cfg));
    assert_int_equal(cfg.dtype, RKV_DTYPE_BF16);
    cfg.num_sessions = 2;
    rkv_model *m = new_model(&cfg);
    int64_t a = claim(m, "live"), b = claim(m, "restored");
    run_frames(m, a, 0, 3, 11);
    const char *path = tmp_path("360p.safetensors");
    TU_OK(rkv_model_save_session(m, a, path));
    rkv_snapshot_info info = RKV_SNAPSHOT_INFO_INIT;
    TU_OK(rkv_snapshot_inspect(path, NULL, 0, &info));
    size_t per_session = 0, total = 0;
    TU_OK(rkv_model_config_memory(&cfg, &per_session, &total));
    assert_int_equal(info.config.n_layers, 24);
    assert_int_equal(info.data_bytes, per_session + 24 * (size_t)(17 * 128));
    TU_OK(rkv_model_load_session(m, b, path));
    assert_true(sessions_equal(m, a, m, b));
    assert_int_equal(clock_of(m, b), 2);
    rkv_model_destroy(m);
    unlink(path);
}

/* A rollout of 2N frames and one of N frames saved, loaded elsewhere and run
 * for N more end in the same state with bit-identical attention outputs. */
static void test_resume_equals_uninterrupted(void **state)
{
    (void)state;
    rkv_model_config cfg = small_cfg(RKV_DTYPE_F32, 1);
    const int64_t N = 7;
    const size_t per_layer = (size_t)(cfg.n_q_heads * cfg.tokens_per_frame * cfg.d_head);
    float *o1 = tu_xcalloc(per_layer * 2, sizeof(float));
    float *o2 = tu_xcalloc(per_layer * 2, sizeof(float));
    rkv_model *A = new_model(&cfg);
    int64_t a = claim(A, "run");
    for (int64_t f = 0; f < 2 * N; f++)
        run_frame(A, a, f, 5, o1);

    rkv_model *B = new_model(&cfg);
    int64_t b = claim(B, "first-half");
    for (int64_t f = 0; f < N; f++)
        run_frame(B, b, f, 5, o2);
    const char *path = tmp_path("resume.safetensors");
    TU_OK(rkv_model_save_session(B, b, path));
    rkv_model_destroy(B);

    rkv_model_config cfg2 = cfg;
    cfg2.num_sessions = 2;
    rkv_model *C = new_model(&cfg2);
    claim(C, "other");
    int64_t c = claim(C, "second-half");
    TU_OK(rkv_model_load_session(C, c, path));
    assert_int_equal(clock_of(C, c), N - 1);
    for (int64_t f = N; f < 2 * N; f++)
        run_frame(C, c, f, 5, o2);
    assert_true(sessions_equal(A, a, C, c));
    assert_memory_equal(o1, o2, per_layer * 2 * sizeof(float));
    assert_int_equal(XXH3_64bits(o1, per_layer * 2 * sizeof(float)),
                     XXH3_64bits(o2, per_layer * 2 * sizeof(float)));
    free(o1);
    free(o2);
    rkv_model_destroy(A);
    rkv_model_destroy(C);
    unlink(path);
}

/* A snapshot of a session with no clock restores "no clock". */
static void test_no_clock_roundtrip(void **state)
{
    (void)state;
    rkv_model_config cfg = small_cfg(RKV_DTYPE_F16, 2);
    rkv_model *m = new_model(&cfg);
    int64_t a = claim(m, "fresh"), b = claim(m, "busy");
    run_frames(m, b, 40, 43, 1);
    const char *path = tmp_path("noclock.safetensors");
    TU_OK(rkv_model_save_session(m, a, path));
    TU_OK(rkv_model_load_session(m, b, path));
    assert_int_equal(clock_of(m, b), -1);
    assert_true(sessions_equal(m, a, m, b));
    int64_t f = 1234;
    TU_OK(rkv_model_begin_frame(m, 1, &b, &f)); /* any frame */
    rkv_model_destroy(m);
    unlink(path);
}

/* ------------------------------------------------------------------------ */
/* Refusals                                                                  */
/* ------------------------------------------------------------------------ */

/* A damaged image must be refused by load (memory and, when `file`, file)
 * and inspect with RKV_ERR_FORMAT, a message naming `needle`, and the
 * target model unchanged. */
typedef struct victim {
    rkv_model *m;
    int64_t s;
    tu_model_state before;
} victim;

static victim make_victim(rkv_dtype dt)
{
    victim v;
    rkv_model_config cfg = small_cfg(dt, 2);
    v.m = new_model(&cfg);
    claim(v.m, "bystander");
    v.s = claim(v.m, "victim");
    run_frames(v.m, v.s, 0, 3, 1234);
    run_frames(v.m, 0, 0, 2, 4321);
    v.before = tu_model_save(v.m);
    return v;
}
static void free_victim(victim *v)
{
    tu_model_state_free(&v->before);
    rkv_model_destroy(v->m);
}

/* Every byte of the last message is printable ASCII: a message never
 * echoes raw bytes of a file (they are escaped as \xNN). */
static void assert_message_printable(const char *what)
{
    const unsigned char *m = (const unsigned char *)rkv_last_error();
    for (size_t i = 0; m[i]; i++)
        if (m[i] < 0x20 || m[i] > 0x7e)
            fail_msg("%s: the message holds byte 0x%02x at offset %zu", what, m[i], i);
}

static void expect_refused(victim *v, const unsigned char *img, size_t n, const char *needle,
                           int file, const char *what)
{
    TU_ERR(rkv_model_restore(v->m, v->s, img, n), RKV_ERR_FORMAT, needle);
    assert_message_printable(what);
    tu_model_assert_same(&v->before, v->m, what);
    TU_ERR(rkv_snapshot_inspect(NULL, img, n, NULL), RKV_ERR_FORMAT, needle);
    assert_message_printable(what);
    if (file) {
        const char *p = tmp_path("damaged.safetensors");
        write_all(p, img, n);
        TU_ERR(rkv_model_load_session(v->m, v->s, p), RKV_ERR_FORMAT, needle);
        assert_message_printable(what);
        tu_model_assert_same(&v->before, v->m, what);
        rkv_snapshot_info info;
        memset(&info, 0x5A, sizeof info);
        info.struct_size = sizeof info;
        TU_ERR(rkv_snapshot_inspect(p, NULL, 0, &info), RKV_ERR_FORMAT, needle);
        assert_message_printable(what);
        unlink(p);
    }
}

/* A valid image of a session of the small f16 geometry. */
static unsigned char *good_image(size_t *n, uint64_t *hl)
{
    rkv_model_config cfg = small_cfg(RKV_DTYPE_F16, 1);
    rkv_model *m = new_model(&cfg);
    int64_t s = claim(m, "source");
    run_frames(m, s, 0, 9, 77);
    TU_OK(rkv_model_save_session_mem(m, s, NULL, 0, n));
    unsigned char *img = tu_xmalloc(*n);
    TU_OK(rkv_model_save_session_mem(m, s, img, *n, n));
    rkv_model_destroy(m);
    *hl = 0;
    for (int i = 7; i >= 0; i--)
        *hl = *hl << 8 | img[i];
    return img;
}

/* Both checksums recomputed (tests/snapshot_edit.h): damage behind them. */
static void reseal(unsigned char *img, size_t n)
{
    assert_int_equal(tsnap_reseal(img, n), 0);
}

/* A copy of an image with the first `from` in its header replaced by `to`,
 * padded again and, when `seal`, both checksums recomputed; *m its size. */
static unsigned char *edit_image(const unsigned char *img, size_t n, const char *from,
                                 const char *to, int seal, size_t *m)
{
    *m = 0;
    unsigned char *out = tsnap_edit(img, n, from, to, seal, m);
    if (!out)
        fail_msg("the header has no '%s'", from);
    return out;
}

static void test_truncated_refused(void **state)
{
    (void)state;
    victim v = make_victim(RKV_DTYPE_F16);
    size_t n;
    uint64_t hl;
    unsigned char *img = good_image(&n, &hl);
    const size_t cuts[] = {0, 1, 4, 7, 8, 9, 8 + (size_t)hl / 2, 8 + (size_t)hl - 1,
                           8 + (size_t)hl, 8 + (size_t)hl + 1, 8 + (size_t)hl + (n - 8 - (size_t)hl) / 2,
                           n - 1};
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
        char what[64];
        snprintf(what, sizeof what, "truncated to %zu bytes", cuts[i]);
        expect_refused(&v, img, cuts[i], "truncated", 1, what);
    }
    free(img);
    free_victim(&v);
}

static void test_header_length_damage_refused(void **state)
{
    (void)state;
    victim v = make_victim(RKV_DTYPE_F16);
    size_t n;
    uint64_t hl;
    unsigned char *img = good_image(&n, &hl);
    static const unsigned char flips[] = {0x01, 0x02, 0x08, 0x80, 0xFF};
    for (int byte = 0; byte < 8; byte++)
        for (size_t k = 0; k < sizeof flips; k++) {
            img[byte] ^= flips[k];
            char what[64];
            snprintf(what, sizeof what, "header length byte %d ^ %02x", byte, flips[k]);
            expect_refused(&v, img, n, NULL, byte == 0 && k == 0, what);
            img[byte] ^= flips[k];
        }
    /* a length that points past the end says so */
    img[3] ^= 0x10;
    expect_refused(&v, img, n, "header length", 0, "length past the end");
    img[3] ^= 0x10;
    free(img);
    free_victim(&v);
}

/* Every byte of the header (JSON and padding), flipped in two ways. */
static void test_header_damage_refused(void **state)
{
    (void)state;
    victim v = make_victim(RKV_DTYPE_F16);
    size_t n;
    uint64_t hl;
    unsigned char *img = good_image(&n, &hl);
    static const unsigned char flips[] = {0x01, 0x20};
    for (size_t i = 8; i < 8 + hl; i++)
        for (size_t k = 0; k < sizeof flips; k++) {
            img[i] ^= flips[k];
            char what[64];
            snprintf(what, sizeof what, "header byte %zu ^ %02x", i, flips[k]);
            expect_refused(&v, img, n, NULL, i % 97 == 0 && k == 0, what);
            img[i] ^= flips[k];
        }
    free(img);
    free_victim(&v);
}

/* The 16 digits of each checksum, each changed to another hex digit. */
static void test_checksum_damage_refused(void **state)
{
    (void)state;
    victim v = make_victim(RKV_DTYPE_F16);
    size_t n;
    uint64_t hl;
    unsigned char *img = good_image(&n, &hl);
    static const char *const keys[2] = {"\"data_xxh3\":\"", "\"header_xxh3\":\""};
    for (int k = 0; k < 2; k++) {
        unsigned char *d = (unsigned char *)strstr((char *)img + 8, keys[k]) + strlen(keys[k]);
        for (int i = 0; i < 16; i++) {
            unsigned char old = d[i];
            d[i] = old == 'a' ? '7' : 'a';
            char what[64];
            snprintf(what, sizeof what, "%s digit %d", keys[k], i);
            expect_refused(&v, img, n, "checksum", i == 0 || i == 15, what);
            d[i] = old;
        }
    }
    free(img);
    free_victim(&v);
}

/* Data bytes: the first, middle and last byte of every tensor, and every
 * 61st byte, flipped; refused by the data checksum. */
static void test_data_damage_refused(void **state)
{
    (void)state;
    victim v = make_victim(RKV_DTYPE_F16);
    size_t n;
    uint64_t hl;
    unsigned char *img = good_image(&n, &hl);
    rkv_snapshot_info info = RKV_SNAPSHOT_INFO_INIT;
    TU_OK(rkv_snapshot_inspect(NULL, img, n, &info));
    const size_t d0 = 8 + (size_t)hl;
    size_t bounds[32], nb = 0;
    size_t at = 0;
    for (int64_t i = 0; i < info.config.n_layers; i++) {
        rkv_geometry g;
        TU_OK(rkv_model_config_layer_geometry(&info.config, i, &g));
        size_t kvb = (size_t)(g.n_kv_heads * tu_C(&g) * g.d_head) * 2, w = (size_t)tu_C(&g);
        size_t sizes[3] = {kvb, kvb, w};
        for (int k = 0; k < 3; k++) {
            bounds[nb++] = at;
            bounds[nb++] = at + sizes[k] / 2;
            bounds[nb++] = at + sizes[k] - 1;
            at += sizes[k];
        }
    }
    assert_int_equal(at, info.data_bytes);
    for (size_t i = 0; i < nb; i++) {
        img[d0 + bounds[i]] ^= 0x40;
        char what[64];
        snprintf(what, sizeof what, "data byte %zu", bounds[i]);
        expect_refused(&v, img, n, "data checksum", i % 3 == 0, what);
        img[d0 + bounds[i]] ^= 0x40;
    }
    for (size_t i = 0; i < info.data_bytes; i += 61) {
        img[d0 + i] ^= 0x01;
        expect_refused(&v, img, n, "corrupted data", 0, "data byte");
        img[d0 + i] ^= 0x01;
    }
    /* appended bytes */
    unsigned char *longer = tu_xmalloc(n + 3);
    memcpy(longer, img, n);
    memset(longer + n, 0, 3);
    expect_refused(&v, longer, n + 3, "unexpected bytes", 1, "trailing bytes");
    free(longer);
    free(img);
    free_victim(&v);
}

/* Damage that keeps both checksums valid (a writer bug rather than bit rot)
 * is still refused: bad written bits, wrong version, not ringkv, bad
 * metadata, a tensor table that does not tile the data. */
static void test_semantic_damage_refused(void **state)
{
    (void)state;
    victim v = make_victim(RKV_DTYPE_F16);
    size_t n;
    uint64_t hl;
    unsigned char *good = good_image(&n, &hl);
    unsigned char *img = tu_xmalloc(n);
    rkv_snapshot_info info = RKV_SNAPSHOT_INFO_INIT;
    TU_OK(rkv_snapshot_inspect(NULL, good, n, &info));
    rkv_geometry g0;
    TU_OK(rkv_model_config_layer_geometry(&info.config, 0, &g0));
    const size_t w0 = 8 + (size_t)hl + 2 * (size_t)(tu_C(&g0) * g0.d_head * 2); /* layer.0.written */

    struct {
        const char *from, *to;
        const char *needle;
    } edits[] = {
        {"\"format_version\":\"1\"", "\"format_version\":\"2\"", "unsupported format version"},
        {"\"format\":\"ringkv-snapshot\"", "\"format\":\"ringkv-snapshoX\"", "not a ringkv snapshot"},
        {"\"last_committed\":\"8\"", "\"last_committed\":\"x\"", "not an integer"},
        {"\"last_committed\":\"8\"", "\"last_committed\":\"-2\"", "last_committed"},
        {"\"last_committed\":\"8\"", "\"last_committed\":\"99999999999999999999\"", "integer"},
        {"\"n_layers\":\"2\"", "\"n_layers\":\"3\"", "list"},
        {"\"n_layers\":\"2\"", "\"n_layers\":\"257\"", "n_layers"},
        {"\"d_head\":\"8\"", "\"d_head\":\"16\"", "layer.0.k"},
        {"\"d_head\":\"8\"", "\"d_head\":\"0\"", "invalid geometry"},
        {",\"layer.1.written\":", ",\"layer.1.xwritten\":", "unexpected tensor"},
        {"\"ring_buckets\":\"3,2\"", "\"ring_buckets\":\"5,2\"", "invalid geometry"},
        {"\"ring_buckets\":\"3,2\"", "\"ring_buckets\":\"3;2\"", "list"},
        {"\"dtype\":\"f16\"", "\"dtype\":\"f17\"", "dtype"},
        {"\"dtype\":\"F16\"", "\"dtype\":\"F32\"", "layer.0.k"},
        {"\"layer.1.v\"", "\"layer.1.w\"", "unexpected tensor"},
        {"\"layer.1.v\"", "\"layer.0.v\"", "duplicate key \"layer.0.v\""},
    };
    for (size_t i = 0; i < sizeof edits / sizeof edits[0]; i++) {
        size_t m;
        unsigned char *e = edit_image(good, n, edits[i].from, edits[i].to, i >= 2, &m);
        expect_refused(&v, e, m, edits[i].needle, 1, edits[i].from);
        free(e);
    }
    /* an unknown metadata key is fine (forward compatible within a
     * version), and so is a header rewritten with blanks (Python's json) */
    {
        size_t m, m2;
        unsigned char *e = edit_image(good, n, "\"__metadata__\":{",
                                      "\"__metadata__\":{\"comment\":\"from a tool\",", 1, &m);
        TU_OK(rkv_snapshot_inspect(NULL, e, m, NULL));
        unsigned char *e2 = edit_image(e, m, "\"header_xxh3\":\"", "\"header_xxh3\" :  \"", 1, &m2);
        TU_OK(rkv_snapshot_inspect(NULL, e2, m2, NULL));
        free(e);
        free(e2);
    }
    /* data_offsets shifted: the tensors no longer tile the data section */
    memcpy(img, good, n);
    {
        char *at = strstr((char *)img + 8, "\"data_offsets\":[0,");
        assert_non_null(at);
        at[16] = '1';
        reseal(img, n);
        expect_refused(&v, img, n, "layer.0.k", 0, "offsets");
    }
    /* written bits: a 2, an unarmed scratch slot, a half-written frame */
    const size_t bad_at[3] = {w0 + 5, w0 + (size_t)(tu_C(&g0) - 1), w0 + 130};
    const unsigned char bad_val[3] = {2, 0, 0};
    for (int k = 0; k < 3; k++) {
        memcpy(img, good, n);
        if (k == 2)
            assert_int_equal(img[bad_at[k]], 1); /* frame 1 of the ring is written */
        img[bad_at[k]] = bad_val[k];
        reseal(img, n);
        expect_refused(&v, img, n, "written", 1, "written bits");
    }
    /* sanity: reseal of an unchanged image is the same image */
    memcpy(img, good, n);
    reseal(img, n);
    assert_memory_equal(img, good, n);
    TU_OK(rkv_snapshot_inspect(NULL, img, n, NULL));
    free(img);
    free(good);
    free_victim(&v);
}

/* ------------------------------------------------------------------------ */
/* One reading only (issue 10, section 4)                                    */
/* ------------------------------------------------------------------------ */

/* The good image with `from` replaced by `to` (both checksums right) is
 * refused, the message naming `needle` and, when given, `needle2`. */
static void refused_edit(victim *v, const unsigned char *good, size_t n, const char *from,
                         const char *to, const char *needle, const char *needle2, int file)
{
    size_t m;
    unsigned char *e = edit_image(good, n, from, to, 1, &m);
    expect_refused(v, e, m, needle, file, to);
    if (needle2)
        TU_ERR(rkv_snapshot_inspect(NULL, e, m, NULL), RKV_ERR_FORMAT, needle2);
    free(e);
}

/* The good image with `from` replaced by `to` is valid; *info what it holds. */
static void accepted_edit(const unsigned char *good, size_t n, const char *from, const char *to,
                          rkv_snapshot_info *info)
{
    size_t m;
    unsigned char *e = edit_image(good, n, from, to, 1, &m);
    if (rkv_snapshot_inspect(NULL, e, m, info) != RKV_OK)
        fail_msg("'%s' -> '%s' refused: %s", from, to, rkv_last_error());
    free(e);
}

/* The issue's two files, on the demo preset at clock 23: a header with
 * last_committed "23" then "7" (ringkv read 23 and resumed at 24, Python's
 * json reads 7), and a shape written [1.0, 2176, 64]. Both refused, naming
 * the key; the right values are read as they are. */
static void test_issue_inputs_refused(void **state)
{
    (void)state;
    rkv_model_config cfg = RKV_MODEL_CONFIG_INIT;
    TU_OK(rkv_model_preset("demo", 0, &cfg));
    rkv_model *m = new_model(&cfg);
    int64_t s = claim(m, "demo");
    run_frames(m, s, 0, 24, 9);
    size_t n = 0;
    TU_OK(rkv_model_save_session_mem(m, s, NULL, 0, &n));
    unsigned char *good = tu_xmalloc(n);
    TU_OK(rkv_model_save_session_mem(m, s, good, n, &n));
    victim v = {m, s, tu_model_save(m)};
    rkv_snapshot_info info = RKV_SNAPSHOT_INFO_INIT;
    TU_OK(rkv_snapshot_inspect(NULL, good, n, &info));
    assert_int_equal(info.last_committed, 23);

    refused_edit(&v, good, n, "\"last_committed\":\"23\"",
                 "\"last_committed\":\"23\",\"last_committed\":\"7\"",
                 "duplicate key \"last_committed\"", NULL, 1);
    refused_edit(&v, good, n, "\"layer.0.k\":{\"dtype\":\"F32\",\"shape\":[1,2176,64]",
                 "\"layer.0.k\":{\"dtype\":\"F32\",\"shape\":[1.0, 2176, 64]", "layer.0.k",
                 "shape[0] is the real number 1.0", 1);
    /* the same header with one value each is read as written */
    accepted_edit(good, n, "\"last_committed\":\"23\"", "\"last_committed\":\"7\"", &info);
    assert_int_equal(info.last_committed, 7);
    accepted_edit(good, n, "\"shape\":[1,2176,64]", "\"shape\":[1, 2176, 64]", &info);
    assert_int_equal(info.last_committed, 23);
    tu_model_state_free(&v.before);
    free(good);
    rkv_model_destroy(m);
}

/* A key twice in any object: the top level, __metadata__, a tensor entry,
 * objects nested anywhere; whatever the values. */
static void test_duplicate_keys_refused(void **state)
{
    (void)state;
    victim v = make_victim(RKV_DTYPE_F16);
    size_t n;
    uint64_t hl;
    unsigned char *good = good_image(&n, &hl);
    static const char k0[] = "\"layer.0.k\":{\"dtype\":\"F16\",\"shape\":[1,640,8],"
                             "\"data_offsets\":[0,10240]}";
    const struct {
        const char *from, *to, *key;
    } cases[] = {
        /* __metadata__ */
        {"\"last_committed\":\"8\"", "\"last_committed\":\"7\",\"last_committed\":\"8\"",
         "\"last_committed\""},
        {"\"last_committed\":\"8\"", "\"last_committed\":\"8\",\"last_committed\":\"8\"",
         "\"last_committed\""},
        {"\"format_version\":\"1\"", "\"format_version\":\"1\",\"format_version\":\"1\"",
         "\"format_version\""},
        {"\"request_id\":\"source\"", "\"request_id\":\"source\",\"request_id\":\"other\"",
         "\"request_id\""},
        {"\"d_head\":\"8\"", "\"d_head\":\"8\",\"d_head\":\"16\"", "\"d_head\""},
        {"\"__metadata__\":{", "\"__metadata__\":{\"note\":\"a\",\"note\":\"b\",", "\"note\""},
        /* the top level: a tensor, __metadata__ */
        {",\"layer.1.written\":", ",\"layer.0.k\":{\"dtype\":\"F16\",\"shape\":[1,640,8],"
                                  "\"data_offsets\":[0,10240]},\"layer.1.written\":",
         "\"layer.0.k\""},
        {k0, "\"__metadata__\":{},\"layer.0.k\":{\"dtype\":\"F16\",\"shape\":[1,640,8],"
             "\"data_offsets\":[0,10240]}",
         "\"__metadata__\""},
        /* a tensor entry */
        {"\"layer.0.k\":{\"dtype\":\"F16\"", "\"layer.0.k\":{\"dtype\":\"F16\",\"dtype\":\"F16\"",
         "\"dtype\""},
        {"\"layer.1.v\":{", "\"layer.1.v\":{\"data_offsets\":[0,0],", "\"data_offsets\""},
        {"\"layer.1.written\":{", "\"layer.1.written\":{\"shape\":[1],", "\"shape\""},
        /* nested objects, in an object and in an array */
        {"\"layer.0.k\":{", "\"layer.0.k\":{\"x\":{\"a\":1,\"a\":2},", "\"a\""},
        {"\"layer.0.v\":{", "\"layer.0.v\":{\"x\":[{\"b\":1},{\"c\":{\"b\":1,\"b\":1}}],", "\"b\""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char needle[80];
        snprintf(needle, sizeof needle, "duplicate key %s", cases[i].key);
        refused_edit(&v, good, n, cases[i].from, cases[i].to, needle, NULL, i == 0);
    }
    /* the same nested objects without a repeated key are fine (a tensor
     * entry's other keys are ignored, as safetensors does) */
    rkv_snapshot_info info = RKV_SNAPSHOT_INFO_INIT;
    accepted_edit(good, n, "\"layer.0.v\":{", "\"layer.0.v\":{\"x\":[{\"b\":1},{\"c\":{\"b\":1}}],",
                  &info);
    assert_int_equal(info.last_committed, 8);
    free(good);
    free_victim(&v);
}

/* Integers where integers belong, in one canonical decimal form: the
 * metadata strings (sizes, clock, session, per-layer lists, the version)
 * and the JSON numbers of shapes and data_offsets. The right values are
 * still read. */
static void test_non_integers_refused(void **state)
{
    (void)state;
    victim v = make_victim(RKV_DTYPE_F16);
    size_t n;
    uint64_t hl;
    unsigned char *good = good_image(&n, &hl);
    static const char *const bad_clock[] = {
        "1e3", "8.0", " 8", "8 ", "+8", "08", "-0", "", "0x8", "8\\u00a0", "\\u0668",
        "9223372036854775808", "-9223372036854775809", "99999999999999999999", "8,", "eight"};
    for (size_t i = 0; i < sizeof bad_clock / sizeof bad_clock[0]; i++) {
        char to[80];
        snprintf(to, sizeof to, "\"last_committed\":\"%s\"", bad_clock[i]);
        refused_edit(&v, good, n, "\"last_committed\":\"8\"", to, "'last_committed'",
                     "canonical decimal", i == 0);
    }
    const struct {
        const char *from, *to, *needle;
    } cases[] = {
        {"\"n_layers\":\"2\"", "\"n_layers\":\"02\"", "'n_layers'"},
        {"\"n_kv_heads\":\"1\"", "\"n_kv_heads\":\" 1\"", "'n_kv_heads'"},
        {"\"n_q_heads\":\"2\"", "\"n_q_heads\":\"2e0\"", "'n_q_heads'"},
        {"\"d_head\":\"8\"", "\"d_head\":\"8.0\"", "'d_head'"},
        {"\"tokens_per_frame\":\"128\"", "\"tokens_per_frame\":\"+128\"", "'tokens_per_frame'"},
        {"\"session\":\"0\"", "\"session\":\"00\"", "'session'"},
        {"\"session\":\"0\"", "\"session\":\"+0\"", "'session'"},
        {"\"session\":\"0\"", "\"session\":\"-1\"", "session = -1"},
        {"\"ring_frames\":\"4,2\"", "\"ring_frames\":\"4,02\"", "'ring_frames'"},
        {"\"ring_frames\":\"4,2\"", "\"ring_frames\":\"4, 2\"", "'ring_frames'"},
        {"\"ring_frames\":\"4,2\"", "\"ring_frames\":\"+4,2\"", "'ring_frames'"},
        {"\"ring_frames\":\"4,2\"", "\"ring_frames\":\"4,2,\"", "'ring_frames'"},
        {"\"ring_frames\":\"4,2\"", "\"ring_frames\":\",4,2\"", "'ring_frames'"},
        {"\"ring_frames\":\"4,2\"", "\"ring_frames\":\"4.0,2\"", "'ring_frames'"},
        {"\"ring_buckets\":\"3,2\"", "\"ring_buckets\":\"3,2e0\"", "'ring_buckets'"},
        {"\"pinned_dilation\":\"2,1\"", "\"pinned_dilation\":\"2,01\"", "'pinned_dilation'"},
        {"\"format_version\":\"1\"", "\"format_version\":\"01\"", "unsupported format version '01'"},
        {"\"format_version\":\"1\"", "\"format_version\":\"+1\"", "unsupported format version"},
        {"\"format_version\":\"1\"", "\"format_version\":\"1.0\"", "unsupported format version"},
        {"\"format_version\":\"1\"", "\"format_version\":\" 1\"", "unsupported format version"},
        {"\"dtype\":\"f16\"", "\"dtype\":\"float16\"", "'dtype'"},
        /* JSON numbers: reals, strings, negatives, other types */
        {"\"shape\":[1,640,8]", "\"shape\":[1.0,640,8]", "shape[0] is the real number 1.0"},
        {"\"shape\":[1,640,8]", "\"shape\":[1,640,8e0]", "shape[2] is the real number 8.0"},
        {"\"shape\":[1,640,8]", "\"shape\":[1,6.4e2,8]", "shape[1] is the real number 640.0"},
        {"\"shape\":[1,640,8]", "\"shape\":[\"1\",640,8]", "shape[0] is a string"},
        {"\"shape\":[1,640,8]", "\"shape\":[1,640,-8]", "shape[2] is -8, negative"},
        {"\"shape\":[1,640,8]", "\"shape\":[1,640,true]", "shape[2] is not a number"},
        {"\"shape\":[1,640,8]", "\"shape\":[1,640]", "'shape' is of another length"},
        {"\"data_offsets\":[0,10240]", "\"data_offsets\":[0,10240.0]", "data_offsets[1] is the real"},
        {"\"data_offsets\":[0,10240]", "\"data_offsets\":[0,1.024e4]", "data_offsets[1] is the real"},
        {"\"data_offsets\":[0,10240]", "\"data_offsets\":[-0.0,10240]", "data_offsets[0] is the real"},
        {"\"data_offsets\":[0,10240]", "\"data_offsets\":{\"0\":0}", "'data_offsets' is not an array"},
        /* numbers JSON does not allow at all: named by the excerpt */
        {"\"shape\":[1,640,8]", "\"shape\":[01,640,8]", "\"shape\":[0"},
        {"\"shape\":[1,640,8]", "\"shape\":[+1,640,8]", "\"shape\":[+"},
        {"\"shape\":[1,640,8]", "\"shape\":[1,640,8.]", "\"shape\":[1,640,8."},
        {"\"shape\":[1,640,8]", "\"shape\":[1,640,99999999999999999999]", "too big integer"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        refused_edit(&v, good, n, cases[i].from, cases[i].to, cases[i].needle, NULL, i == 0);

    /* the right values */
    rkv_snapshot_info info = RKV_SNAPSHOT_INFO_INIT;
    static const struct {
        const char *value;
        int64_t clock;
    } clocks[] = {{"-1", -1}, {"0", 0}, {"7", 7}, {"\\u0037", 7}, {"9223372036854775807", INT64_MAX}};
    for (size_t i = 0; i < sizeof clocks / sizeof clocks[0]; i++) {
        char to[80];
        snprintf(to, sizeof to, "\"last_committed\":\"%s\"", clocks[i].value);
        accepted_edit(good, n, "\"last_committed\":\"8\"", to, &info);
        assert_int_equal(info.last_committed, clocks[i].clock);
    }
    accepted_edit(good, n, "\"shape\":[1,640,8]", "\"shape\":[ 1 , 640 , 8 ]", &info);
    accepted_edit(good, n, "\"session\":\"0\",", "", &info);
    assert_int_equal(info.source_session, -1);
    accepted_edit(good, n, "\"session\":\"0\"", "\"session\":\"12\"", &info);
    assert_int_equal(info.source_session, 12);
    /* and a load installs the clock read */
    size_t m;
    unsigned char *e = edit_image(good, n, "\"last_committed\":\"8\"", "\"last_committed\":\"5\"", 1, &m);
    TU_OK(rkv_model_restore(v.m, v.s, e, m));
    assert_int_equal(clock_of(v.m, v.s), 5);
    free(e);
    free(good);
    free_victim(&v);
}

/* ESC[2J (clear screen) in every text the loader reads, and raw bytes
 * that are not printable: refused (or, for the hex-coded texts, read as
 * bytes) and never echoed raw: every message is printable ASCII
 * (expect_refused checks it) and shows the bytes as \xNN. */
static void test_messages_escape_file_bytes(void **state)
{
    (void)state;
    victim v = make_victim(RKV_DTYPE_F16);
    size_t n;
    uint64_t hl;
    unsigned char *good = good_image(&n, &hl);
#define CLS "\\u001b[2J" /* ESC [ 2 J as a JSON escape */
    const struct {
        const char *from, *to, *needle;
    } cases[] = {
        {"\"format\":\"ringkv-snapshot\"", "\"format\":\"" CLS "\"", "format is '\\x1b[2J'"},
        {"\"ringkv_version\":\"" RKV_VERSION_STRING "\"", "\"ringkv_version\":\"0.1" CLS "\"",
         "'0.1\\x1b[2J'"},
        {"\"model\":\"test\"", "\"model\":\"" CLS "test\"", "'model' = '\\x1b[2Jtest'"},
        {"\"request_id\":\"source\"", "\"request_id\":\"so" CLS "\"", "'so\\x1b[2J'"},
        {"\"request_id\":\"source\"", "\"request_id\":\"caf\\u00e9\"", "'caf\\xc3\\xa9'"},
        {"\"request_id\":\"source\"", "\"request_id\":\"del\\u007f\"", "'del\\x7f'"},
        {"\"session\":\"0\"", "\"session\":\"" CLS "\"", "'\\x1b[2J'"},
        {"\"dtype\":\"f16\"", "\"dtype\":\"f16" CLS "\"", "'f16\\x1b[2J'"},
        {"\"last_committed\":\"8\"", "\"last_committed\":\"8" CLS "\"", "'8\\x1b[2J'"},
        {"\"n_layers\":\"2\"", "\"n_layers\":\"" CLS "\"", "'\\x1b[2J'"},
        {"\"ring_frames\":\"4,2\"", "\"ring_frames\":\"4," CLS "\"", "'4,\\x1b[2J'"},
        {"\"data_xxh3\":\"", "\"data_xxh3\":\"" CLS "\",\"x\":\"", "data_xxh3"},
        {"\"request_id\":\"source\"", "\"request_id_hex\":\"" CLS "\"", "'\\x1b[2J'"},
        {"\"layer.1.v\"", "\"layer.1.v" CLS "\"", "'layer.1.v\\x1b[2J'"},
        {"\"layer.0.k\":{\"dtype\":\"F16\"", "\"layer.0.k\":{\"dtype\":\"" CLS "\"", "layer.0.k"},
        {"\"__metadata__\":{", "\"__metadata__\":{\"" CLS "\":1,", "'\\x1b[2J' is not a string"},
        {"\"__metadata__\":{", "\"__metadata__\":{\"" CLS "\":\"a\",\"" CLS "\":\"b\",",
         "duplicate key \"\\\\u001b[2J\""},
        /* raw bytes, which JSON refuses in strings (ESC) or as UTF-8 (0xff):
           shown in the excerpt */
        {"\"request_id\":\"source\"", "\"request_id\":\"\x1b[2J\"", "\\x1b[2J"},
        {"\"request_id\":\"source\"", "\"request_id\":\"\xff\"", "\\xff"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        refused_edit(&v, good, n, cases[i].from, cases[i].to, cases[i].needle, NULL, i < 2);
    /* the version is read before the header checksum, so that another
     * version is reported as such: escaped there too */
    size_t m;
    unsigned char *e = edit_image(good, n, "\"format_version\":\"1\"",
                                  "\"format_version\":\"" CLS "1\"", 0, &m);
    expect_refused(&v, e, m, "unsupported format version '\\x1b[2J1'", 1, "version, unsealed");
    free(e);
    /* a geometry mismatch names both models, escaped */
    e = edit_image(good, n, "\"model\":\"test\"", "\"model_hex\":\"1b5b324a\"", 1, &m);
    rkv_model_config other = small_cfg(RKV_DTYPE_F16, 1);
    other.d_head = 16;
    snprintf(other.name, sizeof other.name, "mine\x1b[2J");
    rkv_model *om = new_model(&other);
    int64_t os = claim(om, "x");
    TU_ERR(rkv_model_restore(om, os, e, m), RKV_ERR_FORMAT,
           "model '\\x1b[2J', this model is 'mine\\x1b[2J'");
    assert_message_printable("wrong geometry");
    rkv_model_destroy(om);
    free(e);
#undef CLS
    free(good);
    free_victim(&v);
}

/* The texts of rkv_snapshot_info: printable ASCII as written, or hex-coded
 * bytes decoded (any bytes but NUL, as claimed: a printer escapes them);
 * one form per field, sizes that fit. */
static void test_text_fields(void **state)
{
    (void)state;
    victim v = make_victim(RKV_DTYPE_F16);
    size_t n;
    uint64_t hl;
    unsigned char *good = good_image(&n, &hl);
    rkv_snapshot_info info = RKV_SNAPSHOT_INFO_INIT;
    accepted_edit(good, n, "\"request_id\":\"source\"", "\"request_id_hex\":\"1b5b324a\"", &info);
    assert_string_equal(info.request_id, "\x1b[2J");
    accepted_edit(good, n, "\"model\":\"test\"", "\"model_hex\":\"74c3ab7374\"", &info);
    assert_string_equal(info.config.name, "t\xc3\xabst");
    accepted_edit(good, n, "\"model\":\"test\",", "", &info);
    assert_string_equal(info.config.name, "");
    assert_string_equal(info.request_id, "source");
    assert_string_equal(info.ringkv_version, RKV_VERSION_STRING);

    char big[600], to[700];
    memset(big, 'a', 256);
    big[256] = '\0';
    snprintf(to, sizeof to, "\"request_id\":\"%s\"", big);
    refused_edit(&v, good, n, "\"request_id\":\"source\"", to, "'request_id' has 256 bytes", NULL, 0);
    big[255] = '\0';
    snprintf(to, sizeof to, "\"request_id\":\"%s\"", big);
    accepted_edit(good, n, "\"request_id\":\"source\"", to, &info);
    assert_int_equal(strlen(info.request_id), 255);
    memset(big, '6', 512);
    big[512] = '\0';
    snprintf(to, sizeof to, "\"request_id_hex\":\"%s\"", big);
    refused_edit(&v, good, n, "\"request_id\":\"source\"", to, "'request_id_hex'", NULL, 0);
    big[64] = '\0';
    snprintf(to, sizeof to, "\"model\":\"%s\"", big);
    refused_edit(&v, good, n, "\"model\":\"test\"", to, "'model' has 64 bytes", NULL, 0);
    refused_edit(&v, good, n, "\"ringkv_version\":\"" RKV_VERSION_STRING "\"",
                 "\"ringkv_version\":\"0.1.0-a-long-build\"", "'ringkv_version' has 18", NULL, 0);
    const char *const bad_hex[] = {"1B5B", "1b5", "1b00", "zz", "1b 5b"};
    for (size_t i = 0; i < sizeof bad_hex / sizeof bad_hex[0]; i++) {
        snprintf(to, sizeof to, "\"request_id_hex\":\"%s\"", bad_hex[i]);
        refused_edit(&v, good, n, "\"request_id\":\"source\"", to, "'request_id_hex'",
                     "lowercase hex", 0);
    }
    refused_edit(&v, good, n, "\"request_id\":\"source\"",
                 "\"request_id\":\"source\",\"request_id_hex\":\"61\"",
                 "both metadata 'request_id' and 'request_id_hex'", NULL, 0);
    free(good);
    free_victim(&v);
}

/* Files written by ringkv 0.1.0 before the header codec was split out
 * (tests/data/snapshot_v1_*.safetensors; small 2-layer models, 9 resp. 6
 * frames): they load, and the session they hold saves to the same bytes
 * (with the writer's version updated if it changed), so the format has not
 * moved. One has non-printable names (model_hex, request_id_hex), the
 * other printable names with JSON escapes. */
static void check_v1_file(const char *file, const char *model, const char *request_id,
                          int64_t clock, rkv_dtype dt)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", RKV_TEST_DATA_DIR, file);
    size_t n;
    unsigned char *img = read_all(path, &n);
    rkv_snapshot_info info = RKV_SNAPSHOT_INFO_INIT;
    TU_OK(rkv_snapshot_inspect(path, NULL, 0, &info));
    assert_string_equal(info.config.name, model);
    assert_string_equal(info.request_id, request_id);
    assert_int_equal(info.last_committed, clock);
    assert_int_equal(info.source_session, 1);
    assert_int_equal(info.config.dtype, dt);
    assert_int_equal(info.file_bytes, n);

    rkv_model_config cfg = info.config;
    cfg.num_sessions = 2;
    rkv_model *m = new_model(&cfg);
    claim(m, "other");
    int64_t s = claim(m, request_id);
    assert_int_equal(s, 1);
    TU_OK(rkv_model_load_session(m, s, path));
    assert_int_equal(clock_of(m, s), clock);
    size_t n2 = 0;
    TU_OK(rkv_model_save_session_mem(m, s, NULL, 0, &n2));
    unsigned char *again = tu_xmalloc(n2);
    TU_OK(rkv_model_save_session_mem(m, s, again, n2, &n2));
    unsigned char *want = img;
    size_t wn = n;
    if (strcmp(info.ringkv_version, rkv_version())) {
        char from[64], to[64];
        snprintf(from, sizeof from, "\"ringkv_version\":\"%s\"", info.ringkv_version);
        snprintf(to, sizeof to, "\"ringkv_version\":\"%s\"", rkv_version());
        want = edit_image(img, n, from, to, 1, &wn);
    }
    assert_int_equal(n2, wn);
    assert_memory_equal(again, want, wn);
    if (want != img)
        free(want);
    free(again);
    free(img);
    rkv_model_destroy(m);
}

static void test_v1_files_load_and_resave_identical(void **state)
{
    (void)state;
    check_v1_file("snapshot_v1_f16_hex.safetensors", "t\xc3\xabst v1", "caf\xc3\xa9\tv1", 8,
                  RKV_DTYPE_F16);
    check_v1_file("snapshot_v1_bf16_plain.safetensors", "test / v1", "user-42 \"q\" \\ /", 5,
                  RKV_DTYPE_BF16);
}

static void test_wrong_geometry_refused(void **state)
{
    (void)state;
    victim v = make_victim(RKV_DTYPE_F16);
    rkv_model_config variants[5];
    for (int i = 0; i < 5; i++)
        variants[i] = small_cfg(RKV_DTYPE_F16, 1);
    variants[0].dtype = RKV_DTYPE_BF16;
    variants[1].d_head = 16;
    variants[2].layers[0].ring_buckets = 2;
    variants[3].n_layers = 1;
    variants[4].layers[1].pinned_dilation = 2;
    const char *needles[5] = {"dtype", "d_head", "layer 0", "n_layers", "layer 1"};
    for (int i = 0; i < 5; i++) {
        rkv_model *m = new_model(&variants[i]);
        int64_t s = claim(m, "other");
        run_frames(m, s, 0, 2, 5);
        const char *p = tmp_path("geom.safetensors");
        TU_OK(rkv_model_save_session(m, s, p));
        TU_OK(rkv_snapshot_inspect(p, NULL, 0, NULL)); /* a valid file ... */
        TU_ERR(rkv_model_load_session(v.m, v.s, p), RKV_ERR_FORMAT, "wrong geometry");
        TU_ERR(rkv_model_load_session(v.m, v.s, p), RKV_ERR_FORMAT, needles[i]);
        tu_model_assert_same(&v.before, v.m, needles[i]);
        rkv_model_destroy(m);
        unlink(p);
    }
    free_victim(&v);
}

static void test_argument_errors(void **state)
{
    (void)state;
    victim v = make_victim(RKV_DTYPE_F16);
    const char *p = tmp_path("args.safetensors");
    TU_OK(rkv_model_save_session(v.m, v.s, p));
    size_t n = 0;
    TU_ERR(rkv_model_save_session(NULL, 0, p), RKV_ERR_NULL, NULL);
    TU_ERR(rkv_model_save_session(v.m, 0, NULL), RKV_ERR_NULL, "path");
    TU_ERR(rkv_model_save_session(v.m, 0, ""), RKV_ERR_INVALID_ARG, "empty");
    TU_ERR(rkv_model_save_session(v.m, 5, p), RKV_ERR_RANGE, "session 5");
    TU_ERR(rkv_model_save_session_mem(v.m, 0, NULL, 0, NULL), RKV_ERR_NULL, "file_bytes");
    TU_ERR(rkv_model_load_session(v.m, v.s, tmp_path("missing.safetensors")), RKV_ERR_IO,
           "missing.safetensors");
    TU_ERR(rkv_model_load_session(v.m, v.s, g_dir), RKV_ERR_IO, "regular file");
    TU_ERR(rkv_model_load_session(v.m, v.s, NULL), RKV_ERR_NULL, "path");
    TU_ERR(rkv_model_restore(v.m, v.s, NULL, 10), RKV_ERR_NULL, "buf");
    TU_ERR(rkv_model_restore(v.m, v.s, NULL, 0), RKV_ERR_FORMAT, "truncated");
    TU_ERR(rkv_snapshot_inspect(NULL, NULL, 0, NULL), RKV_ERR_NULL, "path");
    TU_ERR(rkv_model_save_session(v.m, 0, tmp_path("no/such/dir.safetensors")), RKV_ERR_IO,
           "does not exist");
    tu_model_assert_same(&v.before, v.m, "argument errors");

    /* unclaimed session; session inside a frame */
    TU_OK(rkv_model_release(v.m, 0));
    TU_ERR(rkv_model_save_session(v.m, 0, p), RKV_ERR_STATE, "not claimed");
    TU_ERR(rkv_model_load_session(v.m, 0, p), RKV_ERR_STATE, "not claimed");
    int64_t f = 3;
    TU_OK(rkv_model_begin_frame(v.m, 1, &v.s, &f));
    tu_model_state mid = tu_model_save(v.m);
    TU_ERR(rkv_model_save_session(v.m, v.s, tmp_path("inframe.safetensors")), RKV_ERR_STATE,
           "inside frame");
    TU_ERR(rkv_model_save_session_mem(v.m, v.s, NULL, 0, &n), RKV_ERR_STATE, "inside frame");
    TU_ERR(rkv_model_load_session(v.m, v.s, p), RKV_ERR_STATE, "inside frame");
    tu_model_assert_same(&mid, v.m, "in-frame refusals");
    assert_int_equal(count_files("inframe"), 0);
    tu_model_state_free(&mid);
    unlink(p);
    free_victim(&v);
}

/* A model of two sessions, "a" at clock 3 and "b" at clock 5 (the saves'
 * tests). */
static rkv_model *two_sessions(int64_t *a, int64_t *b)
{
    rkv_model_config cfg = small_cfg(RKV_DTYPE_F32, 2);
    rkv_model *m = new_model(&cfg);
    *a = claim(m, "a");
    *b = claim(m, "b");
    run_frames(m, *a, 0, 4, 1);
    run_frames(m, *b, 0, 6, 2);
    return m;
}

/* A save that fails half way (the file size limit makes write() fail with
 * EFBIG) leaves the existing snapshot intact and no temporary file. */
static void test_atomic_save(void **state)
{
    (void)state;
    int64_t a, b;
    rkv_model *m = two_sessions(&a, &b);
    const char *p = tmp_path("atomic.safetensors");
    TU_OK(rkv_model_save_session(m, a, p));
    chmod(p, 0600);
    size_t n0;
    unsigned char *before = read_all(p, &n0);

    struct rlimit old, lim;
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
    void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
    lim = old;
    lim.rlim_cur = 4096;
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
    rkv_status st = rkv_model_save_session(m, b, p);
    char msg[512];
    snprintf(msg, sizeof msg, "%s", rkv_last_error());
    setrlimit(RLIMIT_FSIZE, &old);
    signal(SIGXFSZ, prev);
    assert_int_equal(st, RKV_ERR_IO);
    assert_non_null(strstr(msg, "writing"));

    size_t n1;
    unsigned char *after = read_all(p, &n1);
    assert_int_equal(n0, n1);
    assert_memory_equal(before, after, n0);
    assert_int_equal(count_files(".tmp-"), 0);
    TU_OK(rkv_snapshot_inspect(p, NULL, 0, NULL));

    /* a successful overwrite replaces it and keeps its permission bits */
    TU_OK(rkv_model_save_session(m, b, p));
    struct stat sb;
    assert_int_equal(stat(p, &sb), 0);
    assert_int_equal(sb.st_mode & 0777, 0600);
    rkv_snapshot_info info = RKV_SNAPSHOT_INFO_INIT;
    TU_OK(rkv_snapshot_inspect(p, NULL, 0, &info));
    assert_int_equal(info.last_committed, 5);
    assert_string_equal(info.request_id, "b");
    free(before);
    free(after);
    rkv_model_destroy(m);
    unlink(p);
}

/* File names up to the folder's limit (255 bytes) save and load: a name
 * too long to take ".tmp-XXXXXX" gets a short temporary name in the same
 * folder (a 250-byte name failed with "File name too long" before); the
 * longest (255) too; no temporary file is left. */
static void test_save_long_file_names(void **state)
{
    (void)state;
    rkv_model_config cfg = small_cfg(RKV_DTYPE_F32, 2);
    rkv_model *A = new_model(&cfg);
    int64_t a = claim(A, "long");
    run_frames(A, a, 0, 3, 5);
    static const int lens[] = {244, 245, 250, 255};
    for (int k = 0; k < 4; k++) {
        char name[256];
        memset(name, 'n', (size_t)lens[k]);
        name[lens[k]] = 0;
        const char *path = tmp_path(name);
        TU_OK(rkv_model_save_session(A, a, path));
        assert_int_equal(count_files(".tmp-"), 0);
        rkv_model *B = new_model(&cfg);
        int64_t b = claim(B, "other");
        TU_OK(rkv_model_load_session(B, b, path));
        assert_true(sessions_equal(A, a, B, b));
        rkv_model_destroy(B);
        /* saving again replaces it */
        TU_OK(rkv_model_save_session(A, a, path));
        assert_int_equal(count_files(".tmp-"), 0);
        assert_int_equal(unlink(path), 0);
    }
    rkv_model_destroy(A);
}

/* What a save replaces (docs/snapshot-format.md "Atomic save"): a target
 * that is not a regular file (here a named pipe, directly and through a
 * link) is refused before anything is written, the node left as it was
 * and no temporary file left; a symbolic link is followed (relative, in a
 * chain, dangling), the link kept and its final target written; a loop of
 * links is refused. rkv_model_offload_file refuses the same and keeps the
 * session; loads and inspect refuse the pipe at once instead of waiting
 * for a writer (alarm: a regression fails instead of hanging). */
static void test_save_target_kinds(void **state)
{
    (void)state;
    int64_t a, b;
    rkv_model *m = two_sessions(&a, &b);
    struct stat sb;

    /* a named pipe, and a link to it: refused, naming the path and the kind */
    char fifo[512], link_fifo[512];
    snprintf(fifo, sizeof fifo, "%s", tmp_path("pipe"));
    snprintf(link_fifo, sizeof link_fifo, "%s", tmp_path("to-pipe"));
    assert_int_equal(mkfifo(fifo, 0600), 0);
    assert_int_equal(symlink("pipe", link_fifo), 0);
    alarm(60);
    TU_ERR(rkv_model_save_session(m, a, fifo), RKV_ERR_IO, "is a named pipe (FIFO), not a regular file");
    assert_non_null(strstr(rkv_last_error(), fifo));
    TU_ERR(rkv_model_save_session(m, a, link_fifo), RKV_ERR_IO, "a symbolic link to");
    assert_non_null(strstr(rkv_last_error(), "named pipe"));
    assert_non_null(strstr(rkv_last_error(), link_fifo));
    TU_ERR(rkv_model_offload_file(m, a, fifo), RKV_ERR_IO, "named pipe");
    int64_t again = -1;
    TU_OK(rkv_model_lookup(m, "a", &again)); /* not paged out */
    assert_int_equal(again, a);
    TU_ERR(rkv_model_load_session(m, b, fifo), RKV_ERR_IO, "named pipe");
    TU_ERR(rkv_snapshot_inspect(link_fifo, NULL, 0, NULL), RKV_ERR_IO, "named pipe");
    int64_t s_in = -1;
    TU_ERR(rkv_model_page_in_file(m, fifo, &s_in), RKV_ERR_IO, "named pipe");
    alarm(0);
    assert_int_equal(lstat(fifo, &sb), 0);
    assert_true(S_ISFIFO(sb.st_mode));
    assert_int_equal(lstat(link_fifo, &sb), 0);
    assert_true(S_ISLNK(sb.st_mode));
    assert_int_equal(count_files(".tmp-"), 0);

    /* a link to a regular file: the link stays, the target gets the image
     * (and keeps its permission bits); through a chain of two links too */
    const char *target = tmp_path("target.safetensors");
    char link1[512], link2[512], got[512];
    snprintf(link1, sizeof link1, "%s", tmp_path("link1"));
    snprintf(link2, sizeof link2, "%s", tmp_path("link2"));
    TU_OK(rkv_model_save_session(m, a, target));
    chmod(target, 0640);
    assert_int_equal(symlink("target.safetensors", link1), 0);
    assert_int_equal(symlink(link1, link2), 0); /* absolute */
    rkv_snapshot_info info = RKV_SNAPSHOT_INFO_INIT;
    TU_OK(rkv_model_save_session(m, b, link2));
    assert_int_equal(lstat(link1, &sb), 0);
    assert_true(S_ISLNK(sb.st_mode));
    assert_int_equal(lstat(link2, &sb), 0);
    assert_true(S_ISLNK(sb.st_mode));
    ssize_t n = readlink(link1, got, sizeof got - 1);
    assert_true(n > 0);
    got[n] = '\0';
    assert_string_equal(got, "target.safetensors");
    assert_int_equal(stat(target, &sb), 0);
    assert_true(S_ISREG(sb.st_mode));
    assert_int_equal(sb.st_mode & 0777, 0640);
    TU_OK(rkv_snapshot_inspect(target, NULL, 0, &info));
    assert_string_equal(info.request_id, "b");
    assert_int_equal(info.last_committed, 5);
    assert_int_equal(count_files(".tmp-"), 0);

    /* a dangling link: its target is created, the link stays */
    char dangling[512];
    snprintf(dangling, sizeof dangling, "%s", tmp_path("dangling"));
    assert_int_equal(symlink("new.safetensors", dangling), 0);
    TU_OK(rkv_model_save_session(m, a, dangling));
    assert_int_equal(lstat(dangling, &sb), 0);
    assert_true(S_ISLNK(sb.st_mode));
    TU_OK(rkv_snapshot_inspect(tmp_path("new.safetensors"), NULL, 0, &info));
    assert_string_equal(info.request_id, "a");

    /* a loop of links: refused, nothing written */
    char loop1[512], loop2[512];
    snprintf(loop1, sizeof loop1, "%s", tmp_path("loop1"));
    snprintf(loop2, sizeof loop2, "%s", tmp_path("loop2"));
    assert_int_equal(symlink("loop2", loop1), 0);
    assert_int_equal(symlink("loop1", loop2), 0);
    TU_ERR(rkv_model_save_session(m, a, loop1), RKV_ERR_IO, "too many levels of symbolic links");
    assert_int_equal(count_files(".tmp-"), 0);

    rkv_model_destroy(m);
    const char *names[] = {"pipe", "to-pipe", "target.safetensors", "link1", "link2",
                           "dangling", "new.safetensors", "loop1", "loop2"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        unlink(tmp_path(names[i]));
}

/* The in-memory restore refuses a half-written frame too (frames are
 * written whole; visibility reads a frame's first bit), even in an image
 * whose checksums were recomputed over the damage: the written bits are
 * checked on their own. */
static void test_memory_restore_checks_frames(void **state)
{
    (void)state;
    rkv_model_config cfg = small_cfg(RKV_DTYPE_F32, 2);
    rkv_model *m = new_model(&cfg);
    int64_t a = claim(m, "a"), b = claim(m, "b");
    run_frames(m, a, 0, 3, 1);
    const size_t n = rkv_model_snapshot_bytes(m);
    unsigned char *buf = tu_xmalloc(n);
    TU_OK(rkv_model_snapshot(m, a, buf, n));
    /* the written bits of layer 1 are the last C bytes */
    rkv_geometry g1;
    TU_OK(rkv_model_config_layer_geometry(&cfg, 1, &g1));
    const size_t w1 = n - (size_t)tu_C(&g1);
    assert_int_equal(buf[w1 + 1], 1); /* ring frame 0 is written */
    buf[w1 + 1] = 0;
    tu_model_state pre = tu_model_save(m);
    TU_ERR(rkv_model_restore(m, b, buf, n), RKV_ERR_FORMAT, "data checksum mismatch");
    assert_int_equal(tsnap_reseal(buf, n), 0);
    TU_ERR(rkv_model_restore(m, b, buf, n), RKV_ERR_FORMAT, "is partly written");
    tu_model_assert_same(&pre, m, "refused restore");
    buf[w1 + 1] = 1;
    assert_int_equal(tsnap_reseal(buf, n), 0);
    TU_OK(rkv_model_restore(m, b, buf, n));
    assert_true(sessions_equal(m, a, m, b));
    tu_model_state_free(&pre);
    free(buf);
    rkv_model_destroy(m);
}

/* The in-memory image (rkv_model_snapshot) is the snapshot file's image,
 * its header padded to the longest any session of the model can have: one
 * size per model (a 255-byte id outside printable ASCII fits), read by
 * every loader; a file's image restores; restores are bit-exact and bad
 * images are refused with the loader's messages, nothing changed. */
static void test_memory_image_is_the_file_image(void **state)
{
    (void)state;
    rkv_model_config cfg = small_cfg(RKV_DTYPE_F16, 3);
    rkv_model *m = new_model(&cfg);
    char long_id[RKV_MAX_REQUEST_ID];
    for (int i = 0; i < RKV_MAX_REQUEST_ID - 1; i++) long_id[i] = (char)(1 + i % 255);
    long_id[RKV_MAX_REQUEST_ID - 1] = '\0';
    int64_t a = claim(m, "a"), b = claim(m, "b"), z = claim(m, long_id);
    assert_int_equal(z, 2); /* the largest session index, the longest id */
    run_frames(m, a, 0, 5, 11);
    run_frames(m, z, 0, 3, 12);
    const size_t n = rkv_model_snapshot_bytes(m);
    unsigned char *img = tu_xmalloc(n), *imz = tu_xmalloc(n);
    TU_ERR(rkv_model_snapshot(m, a, img, n - 1), RKV_ERR_INVALID_ARG, "need");
    TU_OK(rkv_model_snapshot(m, a, img, n));
    TU_OK(rkv_model_snapshot(m, z, imz, n));

    /* a snapshot file's image: inspected, its header the padded one */
    rkv_snapshot_info info = RKV_SNAPSHOT_INFO_INIT;
    TU_OK(rkv_snapshot_inspect(NULL, img, n, &info));
    assert_string_equal(info.request_id, "a");
    assert_int_equal(info.last_committed, 4);
    assert_int_equal(info.file_bytes, n);
    TU_OK(rkv_snapshot_inspect(NULL, imz, n, &info));
    assert_memory_equal(info.request_id, long_id, sizeof long_id);
    /* the same data section as the unpadded file image */
    size_t fn = 0;
    TU_OK(rkv_model_save_session_mem(m, a, NULL, 0, &fn));
    assert_true(fn < n);
    unsigned char *file = tu_xmalloc(fn);
    TU_OK(rkv_model_save_session_mem(m, a, file, fn, &fn));
    const size_t data = (size_t)info.data_bytes;
    assert_memory_equal(img + n - data, file + fn - data, data);

    /* bit-exact restores, from either image, and loads of the padded one */
    TU_OK(rkv_model_restore(m, b, img, n));
    assert_true(sessions_equal(m, a, m, b));
    int64_t clock = -7;
    TU_OK(rkv_model_clock(m, b, &clock));
    assert_int_equal(clock, 4);
    TU_OK(rkv_model_reset(m, b));
    TU_OK(rkv_model_restore(m, b, file, fn));
    assert_true(sessions_equal(m, a, m, b));
    TU_OK(rkv_model_reset(m, b));
    const char *p = tmp_path("memory_image.safetensors");
    write_all(p, img, n);
    TU_OK(rkv_model_load_session(m, b, p));
    assert_true(sessions_equal(m, a, m, b));
    TU_OK(rkv_model_restore(m, b, imz, n));
    assert_true(sessions_equal(m, z, m, b));

    /* bad images: the loader's classes, named; nothing changed */
    tu_model_state pre = tu_model_save(m);
    TU_ERR(rkv_model_restore(m, b, img, n - 1), RKV_ERR_FORMAT, "rkv_model_restore: (memory):");
    TU_ERR(rkv_model_restore(m, b, img, 7), RKV_ERR_FORMAT, "truncated");
    img[n - 1] ^= 1;
    TU_ERR(rkv_model_restore(m, b, img, n), RKV_ERR_FORMAT, "corrupted data: data checksum");
    img[n - 1] ^= 1;
    img[8] ^= 0x20; /* the header's opening brace */
    TU_ERR(rkv_model_restore(m, b, img, n), RKV_ERR_FORMAT, "corrupted header");
    img[8] ^= 0x20;
    rkv_model_config other = small_cfg(RKV_DTYPE_F16, 3);
    other.layers[1].pinned_dilation = 2;
    rkv_model *o = new_model(&other);
    const int64_t os = claim(o, "o");
    tu_model_state opre = tu_model_save(o);
    TU_ERR(rkv_model_restore(o, os, img, n), RKV_ERR_FORMAT, "wrong geometry");
    tu_model_assert_same(&opre, o, "restore into another geometry");
    tu_model_assert_same(&pre, m, "refused restores");
    tu_model_state_free(&opre);
    tu_model_state_free(&pre);
    rkv_model_destroy(o);
    unlink(p);
    free(file);
    free(imz);
    free(img);
    rkv_model_destroy(m);
}

/* Request ids and names outside printable ASCII are stored as hex. */
static void test_odd_request_id(void **state)
{
    (void)state;
    rkv_model_config cfg = small_cfg(RKV_DTYPE_F32, 1);
    rkv_model *m = new_model(&cfg);
    const char id[] = "caf\xc3\xa9 \"quoted\"\n";
    int64_t s = claim(m, id);
    run_frames(m, s, 0, 1, 1);
    const char *p = tmp_path("odd.safetensors");
    TU_OK(rkv_model_save_session(m, s, p));
    rkv_snapshot_info info = RKV_SNAPSHOT_INFO_INIT;
    TU_OK(rkv_snapshot_inspect(p, NULL, 0, &info));
    assert_string_equal(info.request_id, id);
    rkv_model_destroy(m);
    unlink(p);
}

/* ------------------------------------------------------------------------ */
/* Forks                                                                     */
/* ------------------------------------------------------------------------ */

static void test_fork_then_diverge(void **state)
{
    (void)state;
    rkv_model_config cfg = small_cfg(RKV_DTYPE_BF16, 3);
    const size_t per_layer = (size_t)(cfg.n_q_heads * cfg.tokens_per_frame * cfg.d_head);
    rkv_model *m = new_model(&cfg);
    int64_t src = claim(m, "world"), dst = claim(m, "branch"), other = claim(m, "other");
    run_frames(m, src, 0, 7, 21);
    run_frames(m, dst, 0, 2, 99); /* replaced by the fork */
    run_frames(m, other, 0, 5, 3);
    tu_model_state pre = tu_model_save(m);

    /* refusals change nothing */
    TU_ERR(rkv_model_fork(NULL, src, dst), RKV_ERR_NULL, NULL);
    TU_ERR(rkv_model_fork(m, src, src), RKV_ERR_INVALID_ARG, "different");
    TU_ERR(rkv_model_fork(m, src, 3), RKV_ERR_RANGE, "session 3");
    TU_ERR(rkv_model_fork(m, -1, dst), RKV_ERR_RANGE, "session -1");
    tu_model_assert_same(&pre, m, "refused forks");
    int64_t f5 = 5;
    TU_OK(rkv_model_begin_frame(m, 1, &other, &f5));
    TU_ERR(rkv_model_fork(m, other, dst), RKV_ERR_STATE, "inside frame");
    TU_ERR(rkv_model_fork(m, src, other), RKV_ERR_STATE, "inside frame");
    tu_model_assert_same(&pre, m, "refused forks in a frame");
    TU_OK(rkv_model_release(m, other));
    tu_model_state_free(&pre);
    pre = tu_model_save(m);
    TU_ERR(rkv_model_fork(m, other, dst), RKV_ERR_STATE, "not claimed");
    TU_ERR(rkv_model_fork(m, src, other), RKV_ERR_STATE, "not claimed");
    tu_model_assert_same(&pre, m, "refused forks of free sessions");
    assert_true(clock_of(m, src) == 6 && clock_of(m, dst) == 1);

    TU_OK(rkv_model_fork(m, src, dst));
    assert_true(sessions_equal(m, src, m, dst));
    assert_int_equal(clock_of(m, dst), 6);
    int64_t bad = 2;
    TU_ERR(rkv_model_begin_frame(m, 1, &dst, &bad), RKV_ERR_CLOCK, "expected 7");

    /* diverge: the same frame 7 with different inputs */
    float *o_src = tu_xcalloc(per_layer * 2, sizeof(float));
    float *o_dst = tu_xcalloc(per_layer * 2, sizeof(float));
    run_frame(m, src, 7, 21, o_src);
    run_frame(m, dst, 7, 1000, o_dst);
    assert_false(sessions_equal(m, src, m, dst));
    assert_int_equal(clock_of(m, src), 7);
    assert_int_equal(clock_of(m, dst), 7);

    /* each branch equals an uninterrupted run of its own history */
    rkv_model *ref = new_model(&cfg);
    int64_t r1 = claim(ref, "r1"), r2 = claim(ref, "r2");
    float *o_r1 = tu_xcalloc(per_layer * 2, sizeof(float));
    float *o_r2 = tu_xcalloc(per_layer * 2, sizeof(float));
    run_frames(ref, r1, 0, 7, 21);
    run_frames(ref, r2, 0, 7, 21);
    run_frame(ref, r1, 7, 21, o_r1);
    run_frame(ref, r2, 7, 1000, o_r2);
    assert_true(sessions_equal(m, src, ref, r1));
    assert_true(sessions_equal(m, dst, ref, r2));
    assert_memory_equal(o_src, o_r1, per_layer * 2 * sizeof(float));
    assert_memory_equal(o_dst, o_r2, per_layer * 2 * sizeof(float));
    assert_memory_not_equal(o_src, o_dst, per_layer * 2 * sizeof(float));

    /* a fork of a session with no clock gives no clock */
    int64_t fresh = claim(m, "fresh");
    TU_OK(rkv_model_fork(m, fresh, dst));
    assert_int_equal(clock_of(m, dst), -1);
    assert_true(sessions_equal(m, fresh, m, dst));

    free(o_src);
    free(o_dst);
    free(o_r1);
    free(o_r2);
    tu_model_state_free(&pre);
    rkv_model_destroy(ref);
    rkv_model_destroy(m);
}

/* ------------------------------------------------------------------------ */
/* Batched steps                                                             */
/* ------------------------------------------------------------------------ */

/* Packs B per-row frames (each [2][H][T][D] in the storage dtype) into the
 * upsert layout [2][H][B*T][D]. */
static void *pack_rows(const rkv_model_config *cfg, void *const *rows, int64_t B)
{
    const int64_t H = cfg->n_kv_heads, T = cfg->tokens_per_frame, D = cfg->d_head;
    const size_t es = tu_esize(cfg->dtype), run = (size_t)(T * D) * es;
    unsigned char *out = tu_xmalloc(2 * (size_t)(H * B) * run);
    for (int64_t c = 0; c < 2; c++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t b = 0; b < B; b++)
                memcpy(out + (size_t)((c * H + h) * B + b) * run,
                       (const unsigned char *)rows[b] + (size_t)(c * H + h) * run, run);
    return out;
}

static void test_batched_step(void **state)
{
    (void)state;
    rkv_model_config cfg = small_cfg(RKV_DTYPE_F32, 4);
    const int64_t Hq = cfg.n_q_heads, T = cfg.tokens_per_frame, D = cfg.d_head;
    const size_t qn = (size_t)(Hq * T * D);
    rkv_model *m = new_model(&cfg);
    rkv_model *ref = new_model(&cfg);
    int64_t ids[4];
    const char *names[4] = {"s0", "s1", "s2", "s3"};
    for (int i = 0; i < 4; i++) {
        ids[i] = claim(m, names[i]);
        claim(ref, names[i]);
    }
    /* different histories and clocks: s0 at 5, s1 fresh, s2 at 2, s3 at 0 */
    run_frames(m, 0, 0, 6, 10);
    run_frames(ref, 0, 0, 6, 10);
    run_frames(m, 2, 0, 3, 20);
    run_frames(ref, 2, 0, 3, 20);
    run_frames(m, 3, 0, 1, 30);
    run_frames(ref, 3, 0, 1, 30);

    const int64_t rows[3] = {2, 0, 1};
    int64_t clocks[3] = {3, 6, 50};
    /* one wrong clock refuses the whole batch, nothing begins */
    int64_t wrong[3] = {3, 7, 50};
    tu_model_state pre = tu_model_save(m);
    TU_ERR(rkv_model_begin_frame(m, 3, rows, wrong), RKV_ERR_CLOCK, "session 0");
    void *dummy = frame_kv(&cfg, 1, 0, 0);
    TU_ERR(rkv_model_upsert(m, 0, NULL, 1, &rows[0], dummy, cfg.dtype, 0), RKV_ERR_STATE, "no frame");
    tu_model_assert_same(&pre, m, "refused begin_frame");
    TU_OK(rkv_model_begin_frame(m, 3, rows, clocks));

    float *q = tu_xmalloc(3 * qn * sizeof(float));
    float *out = tu_xmalloc(3 * qn * sizeof(float));
    float *out_ref = tu_xmalloc(qn * sizeof(float));
    /* step argument refusals change nothing, out included */
    {
        void *rowkv[3] = {dummy, dummy, dummy};
        void *kv = pack_rows(&cfg, rowkv, 3);
        rkv_attention_args a = RKV_ATTENTION_ARGS_INIT;
        a.n_q_heads = Hq;
        a.q = q;
        a.q_dtype = RKV_DTYPE_F32;
        a.out = out;
        a.out_dtype = RKV_DTYPE_F32;
        memset(out, 0x7F, 3 * qn * sizeof(float));
        tu_fill_uniform(q, 3 * qn, &(tu_rng){5});
        tu_model_state mid = tu_model_save(m);
        const int64_t dup[3] = {2, 0, 2}, with_idle[3] = {2, 0, 3};
        TU_ERR(rkv_model_step(m, 0, 3, dup, kv, cfg.dtype, 0, &a), RKV_ERR_INVALID_ARG, "twice");
        TU_ERR(rkv_model_step(m, 0, 3, with_idle, kv, cfg.dtype, 0, &a), RKV_ERR_STATE, "no frame");
        TU_ERR(rkv_model_step(m, 2, 3, rows, kv, cfg.dtype, 0, &a), RKV_ERR_RANGE, "layer 2");
        TU_ERR(rkv_model_step(m, 0, 3, rows, kv, RKV_DTYPE_F16, 0, &a), RKV_ERR_DTYPE, "dtype");
        TU_ERR(rkv_model_step(m, 0, 3, rows, NULL, cfg.dtype, 0, &a), RKV_ERR_NULL, "kv");
        TU_ERR(rkv_model_step(m, 0, 3, rows, kv, cfg.dtype, 0, NULL), RKV_ERR_NULL, "args");
        a.n_q_heads = 0;
        TU_ERR(rkv_model_step(m, 0, 3, rows, kv, cfg.dtype, 0, &a), RKV_ERR_INVALID_ARG, "n_q_heads");
        a.n_q_heads = Hq;
        a.scale = NAN;
        TU_ERR(rkv_model_step(m, 0, 3, rows, kv, cfg.dtype, 0, &a), RKV_ERR_INVALID_ARG, "scale");
        a.scale = 0;
        a.q = NULL;
        TU_ERR(rkv_model_step(m, 0, 3, rows, kv, cfg.dtype, 0, &a), RKV_ERR_NULL, "q");
        tu_model_assert_same(&mid, m, "refused steps");
        for (size_t i = 0; i < 3 * qn; i++) {
            uint32_t u;
            memcpy(&u, &out[i], 4);
            assert_int_equal(u, 0x7F7F7F7Fu);
        }
        tu_model_state_free(&mid);
        free(kv);
    }
    free(dummy);

    /* the batched frame: 5 passes x 2 layers, one call per (pass, layer);
     * each row's inputs are what the row would get alone */
    const uint64_t seeds[3] = {20, 10, 40};
    const int64_t nl = cfg.n_layers;
    float *outs = tu_xmalloc((size_t)(5 * nl) * 3 * qn * sizeof(float));
    for (int pass = 0; pass < 5; pass++) {
        void *rowkv[3];
        for (int b = 0; b < 3; b++) {
            rowkv[b] = frame_kv(&cfg, seeds[b], clocks[b], pass);
            tu_rng r = {rkvt_mix(seeds[b] ^ ((uint64_t)clocks[b] << 20) ^ (uint64_t)pass)};
            tu_fill_uniform(q + (size_t)b * qn, qn, &r);
        }
        void *kv = pack_rows(&cfg, rowkv, 3);
        for (int64_t i = 0; i < nl; i++) {
            rkv_attention_args a = RKV_ATTENTION_ARGS_INIT;
            a.n_q_heads = Hq;
            a.q = q;
            a.q_dtype = RKV_DTYPE_F32;
            a.out = outs + (size_t)(pass * nl + i) * 3 * qn;
            a.out_dtype = RKV_DTYPE_F32;
            a.batch = 99;              /* ignored */
            a.session_idx = ids + 3;   /* ignored */
            TU_OK(rkv_model_step(m, i, 3, rows, kv, cfg.dtype, pass == 4, &a));
        }
        for (int b = 0; b < 3; b++)
            free(rowkv[b]);
        free(kv);
    }
    /* the same frame row by row on the reference model (one batch of one
     * session at a time) */
    for (int b = 0; b < 3; b++) {
        TU_OK(rkv_model_begin_frame(ref, 1, &rows[b], &clocks[b]));
        for (int pass = 0; pass < 5; pass++) {
            void *rowkv = frame_kv(&cfg, seeds[b], clocks[b], pass);
            tu_rng r = {rkvt_mix(seeds[b] ^ ((uint64_t)clocks[b] << 20) ^ (uint64_t)pass)};
            tu_fill_uniform(q, qn, &r);
            for (int64_t i = 0; i < nl; i++) {
                TU_OK(rkv_model_upsert(ref, i, NULL, 1, &rows[b], rowkv, cfg.dtype, pass == 4));
                rkv_attention_args ra = RKV_ATTENTION_ARGS_INIT;
                ra.n_q_heads = Hq;
                ra.q = q;
                ra.q_dtype = RKV_DTYPE_F32;
                ra.out = out_ref;
                ra.out_dtype = RKV_DTYPE_F32;
                TU_OK(rkv_model_attend(ref, i, NULL, 1, &rows[b], &ra));
                assert_memory_equal(outs + ((size_t)(pass * nl + i) * 3 + (size_t)b) * qn,
                                    out_ref, qn * sizeof(float));
            }
            free(rowkv);
        }
    }
    free(outs);
    for (int b = 0; b < 4; b++)
        assert_true(sessions_equal(m, b, ref, b));
    assert_int_equal(clock_of(m, 2), 3);
    assert_int_equal(clock_of(m, 0), 6);
    assert_int_equal(clock_of(m, 1), 50);
    assert_int_equal(clock_of(m, 3), 0);
    free(q);
    free(out);
    free(out_ref);
    tu_model_state_free(&pre);
    rkv_model_destroy(m);
    rkv_model_destroy(ref);
}

/* ------------------------------------------------------------------------ */
/* 10,000 claim / snapshot / release cycles                                  */
/* ------------------------------------------------------------------------ */

static long rss_kib(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    long pages = 0, resident = 0;
    if (!f)
        return -1;
    if (fscanf(f, "%ld %ld", &pages, &resident) != 2)
        resident = -1;
    fclose(f);
    return resident < 0 ? -1 : resident * (sysconf(_SC_PAGESIZE) / 1024);
}
static int open_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    int n = 0;
    while (d && readdir(d))
        n++;
    if (d)
        closedir(d);
    return n;
}

static void test_10000_cycles_memory_flat(void **state)
{
    (void)state;
    static const rkv_layer_spec specs[1] = {{2, 2, 1}};
    rkv_model_config cfg = tu_model_cfg(1, specs, 2, 1, 1, 4, 128, RKV_DTYPE_F32);
    rkv_model *m = new_model(&cfg);
    void *kv = frame_kv(&cfg, 1, 0, 0);
    const size_t mem_bytes = rkv_model_snapshot_bytes(m);
    void *mem = tu_xmalloc(mem_bytes);
    /* The cycles are about this process's memory and descriptors, not the
     * disk: on a tmpfs (/dev/shm, when it is one) their 20,000 fsyncs cost
     * nothing, where a disk shared with other jobs took 20-60 s. */
    char test_dir[sizeof g_dir], shm_dir[] = "/dev/shm/rkv-cycles-XXXXXX";
    struct statfs fs;
    memcpy(test_dir, g_dir, sizeof g_dir);
    if (statfs("/dev/shm", &fs) == 0 && fs.f_type == 0x01021994 /* TMPFS_MAGIC */ &&
        mkdtemp(shm_dir))
        snprintf(g_dir, sizeof g_dir, "%s", shm_dir);
    const char *p = tmp_path("cycle.safetensors");
    long rss0 = 0;
    int fds0 = 0;
    /* 1,000 under a sanitizer: the RSS bound is not checked there (below);
     * the descriptors and temporary files are, and the leak checker */
    const int cycles = RKVT_SIZE(10000, 1000), warm = 200;
    for (int i = 0; i < cycles; i++) {
        if (i == warm) {
            rss0 = rss_kib();
            fds0 = open_fds();
        }
        char id[32];
        snprintf(id, sizeof id, "request-%d", i);
        int64_t s = claim(m, id), f = i;
        TU_OK(rkv_model_begin_frame(m, 1, &s, &f));
        TU_OK(rkv_model_upsert(m, 0, NULL, 1, &s, kv, cfg.dtype, 1));
        TU_OK(rkv_model_save_session(m, s, p));
        int64_t t = claim(m, "restore-target");
        TU_OK(rkv_model_load_session(m, t, p));
        assert_int_equal(clock_of(m, t), i);
        TU_OK(rkv_model_snapshot(m, t, mem, mem_bytes));
        TU_OK(rkv_model_restore(m, s, mem, mem_bytes));
        if (i % 100 == 0) {
            rkv_snapshot_info info = RKV_SNAPSHOT_INFO_INIT;
            TU_OK(rkv_snapshot_inspect(p, NULL, 0, &info));
            assert_int_equal(info.last_committed, i);
            TU_OK(rkv_model_fork(m, s, t));
        }
        TU_OK(rkv_model_release(m, t));
        TU_OK(rkv_model_release(m, s));
    }
    long rss1 = rss_kib();
    int fds1 = open_fds();
    print_message("  %d cycles: RSS %ld -> %ld KiB, fds %d -> %d\n", cycles, rss0, rss1, fds0,
                  fds1);
    assert_int_equal(fds0, fds1);
    assert_int_equal(count_files(".tmp-"), 0);
    /* Under AddressSanitizer freed memory sits in a quarantine (RSS grows by
     * design); there the leak checker at exit is the check. */
    if (!rkvt_sanitized() && rss0 > 0)
        assert_true(rss1 - rss0 < 1024);
    free(mem);
    free(kv);
    rkv_model_destroy(m);
    unlink(p);
    if (strcmp(g_dir, test_dir) != 0) {
        assert_int_equal(rmdir(g_dir), 0); /* nothing else left in it */
        memcpy(g_dir, test_dir, sizeof g_dir);
    }
}

/* ---- the in-memory round trip, warm -------------------------------------- */

#ifndef RKVT_NO_ALLOC_COUNT
/* Heap allocations of one rkv_model_snapshot of session s into img and one
 * rkv_model_restore of it into session `into`. */
static long round_trip_allocs(rkv_model *m, int64_t s, int64_t into, void *img, size_t n)
{
    const long before = allocs_so_far();
    TU_OK(rkv_model_snapshot(m, s, img, n));
    TU_OK(rkv_model_restore(m, into, img, n));
    return allocs_so_far() - before;
}
#endif

/* Snapshot and restore, the undo of an interactive world model (every
 * frame, the same session): after the first round trip of a session and
 * request (which builds its header: allocations, and shows the count sees
 * them), none, as the clock's digits grow (9 -> 10, 99 -> 100, 999 ->
 * 1000) and on an undo several frames back; each restore bit-exact (the
 * session snapshots to the same bytes again); the image's header is the
 * writer's own (equal, padding and header checksum aside, to the one
 * rkv_model_save_session_mem builds with Jansson). Demo preset, and the
 * 360P preset (a 204 MiB session: the copy hashes on a second thread). */
static void warm_round_trip(const char *preset, const int64_t *checks, int nchecks)
{
    rkv_model_config cfg = RKV_MODEL_CONFIG_INIT;
    TU_OK(rkv_model_preset(preset, 0, &cfg));
    cfg.num_sessions = 2;
    rkv_model *m = new_model(&cfg);
    claim(m, "bystander");
    const int64_t s = claim(m, "player-1");
    const size_t n = rkv_model_snapshot_bytes(m);
    unsigned char *img = tu_xmalloc(n), *again = tu_xmalloc(n), *undo = tu_xmalloc(n);
    run_frames(m, s, 0, 3, 5);
    int64_t f = 3;
#ifndef RKVT_NO_ALLOC_COUNT
    const long first = round_trip_allocs(m, s, s, img, n);
    print_message("  %s: first round trip %ld allocations\n", preset, first);
    assert_true(first > 0); /* the counter sees the library's allocations */
#else
    print_message("  %s: allocations not counted under a sanitizer (its runtime owns the heap)\n",
                  preset);
#endif
    for (int c = 0; c < nchecks; c++) {
        for (; f <= checks[c]; f++) run_frame(m, s, f, 5, NULL); /* clock checks[c] */
#ifndef RKVT_NO_ALLOC_COUNT
        const long k = round_trip_allocs(m, s, s, img, n);
        if (k != 0)
            fail_msg("%s: clock %lld: %ld allocations in a warm round trip", preset,
                     (long long)checks[c], k);
#else
        TU_OK(rkv_model_snapshot(m, s, img, n));
        TU_OK(rkv_model_restore(m, s, img, n));
#endif
        assert_int_equal(clock_of(m, s), checks[c]);
        TU_OK(rkv_model_snapshot(m, s, again, n));
        assert_memory_equal(img, again, n);
        if (c == 0) memcpy(undo, img, n);
    }
    /* undo: back to the first checkpoint, a few frames ago */
    const int64_t back = checks[0];
    TU_OK(rkv_model_restore(m, s, undo, n));
    assert_int_equal(clock_of(m, s), back);
    TU_OK(rkv_model_snapshot(m, s, again, n));
    assert_memory_equal(undo, again, n);
    /* the writer's header: the same JSON as rkv_model_save_session_mem's */
    size_t fn = 0;
    TU_OK(rkv_model_save_session_mem(m, s, NULL, 0, &fn));
    unsigned char *file = tu_xmalloc(fn);
    TU_OK(rkv_model_save_session_mem(m, s, file, fn, &fn));
    size_t la = (size_t)tsnap_header_len(again, n), lf = (size_t)tsnap_header_len(file, fn);
    memset(tsnap_digits(again, n, "header_xxh3"), '0', 16);
    memset(tsnap_digits(file, fn, "header_xxh3"), '0', 16);
    while (la && again[8 + la - 1] == ' ') la--;
    while (lf && file[8 + lf - 1] == ' ') lf--;
    assert_int_equal(la, lf);
    assert_memory_equal(again + 8, file + 8, la);
    free(file), free(img), free(again), free(undo);
    rkv_model_destroy(m);
}

static void test_warm_round_trip_demo(void **state)
{
    (void)state;
    static const int64_t checks[] = {9, 10, 99, 100, 101};
    warm_round_trip("demo", checks, 5);
}

static void test_warm_round_trip_360p(void **state)
{
    (void)state;
    static const int64_t checks[] = {4, 9, 10};
    warm_round_trip("waypoint-1.5-360p", checks, 3);
}

/* With the session's header warm, damaged images of it are refused as
 * before, each with its message, the model unchanged: the template only
 * ever accepts its own bytes. */
static void test_warm_round_trip_keeps_checks(void **state)
{
    (void)state;
    rkv_model_config cfg = small_cfg(RKV_DTYPE_F16, 2);
    rkv_model *m = new_model(&cfg);
    const int64_t s = claim(m, "player-1");
    run_frames(m, s, 0, 11, 3);
    const size_t n = rkv_model_snapshot_bytes(m);
    unsigned char *img = tu_xmalloc(n);
    TU_OK(rkv_model_snapshot(m, s, img, n));
    TU_OK(rkv_model_restore(m, s, img, n)); /* warm */
    tu_model_state before = tu_model_save(m);
    static const struct {
        const char *from, *to, *needle;
    } edits[] = {
        {"\"last_committed\":\"10\"", "\"last_committed\":\"010\"", "canonical"},
        {"\"last_committed\":\"10\"", "\"last_committed\":\"+10\"", "canonical"},
        {"\"last_committed\":\"10\"", "\"last_committed\":\"-2\"", "expected >= -1"},
        {"\"last_committed\":\"10\"", "\"last_committed\":\"10\",\"last_committed\":\"10\"",
         "duplicate key"},
        {"\"data_offsets\":[0,", "\"data_offsets\":[0.0,", "real number"},
        {"\"session\":\"0\"", "\"session\":\"1\"", NULL}, /* another session's: accepted */
    };
    for (size_t i = 0; i < sizeof edits / sizeof edits[0]; i++) {
        size_t en = 0;
        unsigned char *e = edit_image(img, n, edits[i].from, edits[i].to, 1, &en);
        if (edits[i].needle) {
            TU_ERR(rkv_model_restore(m, s, e, en), RKV_ERR_FORMAT, edits[i].needle);
            tu_model_assert_same(&before, m, edits[i].to);
        } else {
            TU_OK(rkv_model_restore(m, s, e, en));
        }
        free(e);
    }
    /* a checksum digit or a data byte changed, not resealed */
    unsigned char *e = tu_xmalloc(n);
    memcpy(e, img, n);
    unsigned char *d = tsnap_digits(e, n, "header_xxh3");
    d[3] = d[3] == '0' ? '1' : '0';
    TU_ERR(rkv_model_restore(m, s, e, n), RKV_ERR_FORMAT, "header checksum mismatch");
    memcpy(e, img, n);
    e[n - 1] ^= 1;
    TU_ERR(rkv_model_restore(m, s, e, n), RKV_ERR_FORMAT, "data checksum mismatch");
    /* the good image still restores, warm */
    TU_OK(rkv_model_restore(m, s, img, n));
    assert_int_equal(clock_of(m, s), 10);
    tu_model_state_free(&before);
    free(e), free(img);
    rkv_model_destroy(m);
}

int main(void)
{
    const char *filter = getenv("RKV_TEST_FILTER");
    if (filter && *filter)
        cmocka_set_test_filter(filter);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip_f32),
        cmocka_unit_test(test_roundtrip_f16),
        cmocka_unit_test(test_roundtrip_bf16),
        cmocka_unit_test(test_layout_is_safetensors),
        cmocka_unit_test(test_roundtrip_360p_bf16),
        cmocka_unit_test(test_resume_equals_uninterrupted),
        cmocka_unit_test(test_no_clock_roundtrip),
        cmocka_unit_test(test_truncated_refused),
        cmocka_unit_test(test_header_length_damage_refused),
        cmocka_unit_test(test_header_damage_refused),
        cmocka_unit_test(test_checksum_damage_refused),
        cmocka_unit_test(test_data_damage_refused),
        cmocka_unit_test(test_semantic_damage_refused),
        cmocka_unit_test(test_issue_inputs_refused),
        cmocka_unit_test(test_duplicate_keys_refused),
        cmocka_unit_test(test_non_integers_refused),
        cmocka_unit_test(test_messages_escape_file_bytes),
        cmocka_unit_test(test_text_fields),
        cmocka_unit_test(test_v1_files_load_and_resave_identical),
        cmocka_unit_test(test_wrong_geometry_refused),
        cmocka_unit_test(test_argument_errors),
        cmocka_unit_test(test_atomic_save),
        cmocka_unit_test(test_save_long_file_names),
        cmocka_unit_test(test_save_target_kinds),
        cmocka_unit_test(test_odd_request_id),
        cmocka_unit_test(test_memory_restore_checks_frames),
        cmocka_unit_test(test_memory_image_is_the_file_image),
        cmocka_unit_test(test_fork_then_diverge),
        cmocka_unit_test(test_batched_step),
        cmocka_unit_test(test_10000_cycles_memory_flat),
        cmocka_unit_test(test_warm_round_trip_demo),
        cmocka_unit_test(test_warm_round_trip_360p),
        cmocka_unit_test(test_warm_round_trip_keeps_checks),
    };
    return cmocka_run_group_tests(tests, setup_dir, teardown_dir);
}

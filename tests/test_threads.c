/* The thread-safety contract of docs/thread-safety.md, exercised with real
 * threads; scripts/tsan.sh runs this program under ThreadSanitizer (a data
 * race there fails the run), the ordinary builds run it as a plain test.
 *
 *  - rkv_last_error() is thread-local;
 *  - different models are independent: whole streams (frames, attention,
 *    snapshot files, forks, loads) run in parallel and give exactly the
 *    results of a serial run;
 *  - different layers are independent: upserts and attention on distinct
 *    layers in parallel;
 *  - readers of one layer / model (attention, visibility, saves, inspect)
 *    run in parallel with each other;
 *  - the process-wide thread pool is created once, whoever calls first, and
 *    concurrent attention calls sharing a pool are serialized correctly. */
#define _POSIX_C_SOURCE 200809L
#include "testutil.h"

#include <pthread.h>
#include <xxhash.h>
#include <unistd.h>

#define NT 4 /* threads */

static char g_dir[256];

static int setup_dir(void **state)
{
    (void)state;
    const char *t = getenv("TMPDIR");
    snprintf(g_dir, sizeof g_dir, "%s/rkv-threads-XXXXXX", t && *t ? t : "/tmp");
    return mkdtemp(g_dir) ? 0 : -1;
}
static int teardown_dir(void **state)
{
    (void)state;
    rmdir(g_dir);
    return 0;
}

static rkv_model_config small_cfg(int64_t S)
{
    static const rkv_layer_spec specs[3] = {{4, 3, 2}, {2, 2, 1}, {3, 3, 1}};
    return tu_model_cfg(3, specs, S, 2, 1, 16, 128, RKV_DTYPE_F32);
}

/* ------------------------------------------------------------------------ */
/* rkv_last_error is per thread                                              */
/* ------------------------------------------------------------------------ */

static pthread_barrier_t g_barrier;

static void *last_error_worker(void *arg)
{
    const int id = (int)(intptr_t)arg;
    char name[32], want[40];
    snprintf(name, sizeof name, "not-a-dtype-%d", id);
    snprintf(want, sizeof want, "not-a-dtype-%d", id);
    intptr_t bad = 0;
    for (int round = 0; round < 200; round++) {
        rkv_dtype d;
        if (rkv_dtype_parse(name, &d) != RKV_ERR_DTYPE)
            bad++;
        pthread_barrier_wait(&g_barrier); /* every thread has failed now */
        if (!strstr(rkv_last_error(), want))
            bad++;
        pthread_barrier_wait(&g_barrier);
    }
    return (void *)bad;
}

static void test_last_error_is_thread_local(void **state)
{
    (void)state;
    pthread_t t[NT];
    pthread_barrier_init(&g_barrier, NULL, NT);
    for (intptr_t i = 0; i < NT; i++)
        assert_int_equal(pthread_create(&t[i], NULL, last_error_worker, (void *)i), 0);
    for (int i = 0; i < NT; i++) {
        void *bad;
        pthread_join(t[i], &bad);
        assert_int_equal((intptr_t)bad, 0);
    }
    pthread_barrier_destroy(&g_barrier);
}

/* ------------------------------------------------------------------------ */
/* A whole stream per model, in parallel                                     */
/* ------------------------------------------------------------------------ */

typedef struct stream {
    int id;
    uint64_t digest; /* chained XXH3-64 over outputs and state */
    rkv_status st;
    char err[256];
} stream;

/* Folds n bytes into the digest h (xxHash's XXH3-64, seeded with h). */
static uint64_t digest_add(uint64_t h, const void *p, size_t n)
{
    return XXH3_64bits_withSeed(p, n, h);
}

#define STREAM_OK(expr)                                                        \
    do {                                                                       \
        rkv_status st_ = (expr);                                               \
        if (st_ != RKV_OK) {                                                   \
            s->st = st_;                                                       \
            snprintf(s->err, sizeof s->err, "%s: %s", #expr, rkv_last_error()); \
            goto out;                                                          \
        }                                                                      \
    } while (0)

/* Claims two sessions, runs frames with attention on session a, saves it to
 * a file, forks it, loads the file into b, runs both further; the digest
 * covers every attention output and the final K/V. Deterministic in id. */
static void *stream_worker(void *arg)
{
    stream *s = arg;
    rkv_model_config cfg = small_cfg(3);
    rkv_model *m = NULL;
    float *kv = NULL, *q = NULL, *out = NULL;
    const int64_t H = cfg.n_kv_heads, T = cfg.tokens_per_frame, D = cfg.d_head;
    const size_t kvn = (size_t)(2 * H * T * D), qn = (size_t)(cfg.n_q_heads * T * D);
    kv = malloc(kvn * sizeof(float));
    q = malloc(qn * sizeof(float));
    out = malloc(qn * sizeof(float));
    char path[512];
    snprintf(path, sizeof path, "%s/stream-%d.safetensors", g_dir, s->id);
    s->digest = 0xcbf29ce484222325ull;
    STREAM_OK(rkv_model_create(&cfg, &m));
    int64_t a, b, c;
    STREAM_OK(rkv_model_claim(m, "a", &a));
    STREAM_OK(rkv_model_claim(m, "b", &b));
    STREAM_OK(rkv_model_claim(m, "c", &c));
    for (int64_t f = 0; f < 30; f++) {
        const int64_t sess = f < 20 ? a : (f % 2 ? b : c);
        const int64_t frame = f < 20 ? f : 20 + (f - 20) / 2;
        if (f == 20) {
            STREAM_OK(rkv_model_save_session(m, a, path));
            STREAM_OK(rkv_model_fork(m, a, c));
            STREAM_OK(rkv_model_load_session(m, b, path));
        }
        STREAM_OK(rkv_model_begin_frame(m, 1, &sess, &frame));
        for (int pass = 0; pass < 5; pass++) {
            tu_rng r = {rkvt_mix((uint64_t)s->id * 1000 + (uint64_t)f * 10 + (uint64_t)pass)};
            tu_fill_uniform(kv, kvn, &r);
            tu_fill_uniform(q, qn, &r);
            for (int64_t l = 0; l < cfg.n_layers; l++) {
                rkv_attention_args at = RKV_ATTENTION_ARGS_INIT;
                at.n_q_heads = cfg.n_q_heads;
                at.q = q;
                at.q_dtype = RKV_DTYPE_F32;
                at.out = out;
                at.out_dtype = RKV_DTYPE_F32;
                STREAM_OK(rkv_model_step(m, l, 1, &sess, kv, RKV_DTYPE_F32, pass == 4, &at));
                s->digest = digest_add(s->digest, out, qn * sizeof(float));
            }
        }
    }
    for (int64_t l = 0; l < cfg.n_layers; l++) {
        const rkv_layer *ly = rkv_model_layer(m, l);
        s->digest = digest_add(s->digest, rkv_layer_kv(ly), rkv_geometry_memory_bytes(rkv_layer_geometry(ly)));
        s->digest = digest_add(s->digest, rkv_layer_written(ly), (size_t)rkv_geometry_total_slots(rkv_layer_geometry(ly)));
    }
    s->st = RKV_OK;
out:
    unlink(path);
    rkv_model_destroy(m);
    free(kv);
    free(q);
    free(out);
    return NULL;
}

static void test_models_in_parallel(void **state)
{
    (void)state;
    stream serial[NT], par[NT];
    pthread_t t[NT];
    for (int i = 0; i < NT; i++) {
        par[i].id = i;
        assert_int_equal(pthread_create(&t[i], NULL, stream_worker, &par[i]), 0);
    }
    for (int i = 0; i < NT; i++)
        pthread_join(t[i], NULL);
    for (int i = 0; i < NT; i++) {
        serial[i].id = i;
        stream_worker(&serial[i]);
    }
    for (int i = 0; i < NT; i++) {
        if (par[i].st != RKV_OK)
            fail_msg("stream %d (parallel): %s", i, par[i].err);
        if (serial[i].st != RKV_OK)
            fail_msg("stream %d (serial): %s", i, serial[i].err);
        assert_int_equal(par[i].digest, serial[i].digest);
        if (i)
            assert_int_not_equal(serial[i].digest, serial[0].digest);
    }
}

/* ------------------------------------------------------------------------ */
/* Distinct layers in parallel; readers of one layer in parallel             */
/* ------------------------------------------------------------------------ */

typedef struct layer_job {
    rkv_layer *layer;
    rkv_threadpool *pool; /* NULL: the shared default pool */
    int id;
    uint64_t digest;
    int failures;
} layer_job;

static void *layer_writer(void *arg)
{
    layer_job *j = arg;
    const rkv_geometry *g = rkv_layer_geometry(j->layer);
    const size_t kvn = (size_t)(2 * g->n_kv_heads * g->tokens_per_frame * g->d_head);
    const size_t qn = (size_t)(2 * g->n_kv_heads * g->tokens_per_frame * g->d_head);
    float *kv = malloc(kvn * sizeof(float)), *q = malloc(qn * sizeof(float)),
          *out = malloc(qn * sizeof(float));
    j->digest = 0xcbf29ce484222325ull;
    for (int64_t f = 0; f < 24; f++) {
        const int64_t s = f % g->num_sessions;
        tu_rng r = {rkvt_mix((uint64_t)j->id * 7919 + (uint64_t)f)};
        tu_fill_uniform(kv, kvn, &r);
        tu_fill_uniform(q, qn, &r);
        j->failures += rkv_layer_upsert(j->layer, kv, RKV_DTYPE_F32, 1, &f, &s, 1, NULL) != RKV_OK;
        rkv_attention_args a = RKV_ATTENTION_ARGS_INIT;
        a.batch = 1;
        a.n_q_heads = 2 * g->n_kv_heads;
        a.q = q;
        a.q_dtype = RKV_DTYPE_F32;
        a.out = out;
        a.out_dtype = RKV_DTYPE_F32;
        a.session_idx = &s;
        a.frame_pos = &f;
        a.pool = j->pool;
        j->failures += rkv_layer_attend(j->layer, &a) != RKV_OK;
        j->digest = digest_add(j->digest, out, qn * sizeof(float));
    }
    free(kv);
    free(q);
    free(out);
    return NULL;
}

static void run_layer_jobs(int own_pools, uint64_t *digests)
{
    rkv_geometry g = tu_geom(2, 2, 4, 4, 32, 128, 1, RKV_DTYPE_F32);
    layer_job jobs[NT];
    pthread_t t[NT];
    for (int i = 0; i < NT; i++) {
        jobs[i] = (layer_job){tu_layer_new(&g), NULL, i, 0, 0};
        if (own_pools)
            TU_OK(rkv_threadpool_create(2, &jobs[i].pool));
        assert_int_equal(pthread_create(&t[i], NULL, layer_writer, &jobs[i]), 0);
    }
    for (int i = 0; i < NT; i++) {
        pthread_join(t[i], NULL);
        assert_int_equal(jobs[i].failures, 0);
        digests[i] = jobs[i].digest;
        rkv_layer_destroy(jobs[i].layer);
        rkv_threadpool_destroy(jobs[i].pool);
    }
}

static void test_layers_in_parallel(void **state)
{
    (void)state;
    uint64_t shared_pool[NT], own_pools[NT], serial[NT];
    run_layer_jobs(0, shared_pool);
    run_layer_jobs(1, own_pools);
    rkv_geometry g = tu_geom(2, 2, 4, 4, 32, 128, 1, RKV_DTYPE_F32);
    for (int i = 0; i < NT; i++) {
        layer_job j = {tu_layer_new(&g), NULL, i, 0, 0};
        layer_writer(&j);
        serial[i] = j.digest;
        rkv_layer_destroy(j.layer);
    }
    for (int i = 0; i < NT; i++) {
        assert_int_equal(shared_pool[i], serial[i]);
        assert_int_equal(own_pools[i], serial[i]);
    }
}

/* Readers of one model in parallel: attention on the same layer, the
 * visibility queries, saves of sessions to memory, inspect of the images. */
typedef struct reader_job {
    rkv_model *m;
    int id;
    int failures;
    uint64_t digest;
} reader_job;

static void *model_reader(void *arg)
{
    reader_job *j = arg;
    const rkv_model_config *cfg = rkv_model_get_config(j->m);
    const int64_t s = j->id % cfg->num_sessions, f = 10;
    const size_t qn = (size_t)(cfg->n_q_heads * cfg->tokens_per_frame * cfg->d_head);
    float *q = malloc(qn * sizeof(float)), *out = malloc(qn * sizeof(float));
    tu_rng r = {rkvt_mix((uint64_t)j->id)};
    tu_fill_uniform(q, qn, &r);
    j->digest = 0xcbf29ce484222325ull;
    for (int round = 0; round < 10; round++) {
        for (int64_t l = 0; l < cfg->n_layers; l++) {
            const rkv_layer *ly = rkv_model_layer(j->m, l);
            rkv_attention_args a = RKV_ATTENTION_ARGS_INIT;
            a.batch = 1;
            a.n_q_heads = cfg->n_q_heads;
            a.q = q;
            a.q_dtype = RKV_DTYPE_F32;
            a.out = out;
            a.out_dtype = RKV_DTYPE_F32;
            a.session_idx = &s;
            a.frame_pos = &f;
            j->failures += rkv_layer_attend(ly, &a) != RKV_OK;
            j->digest = digest_add(j->digest, out, qn * sizeof(float));
            int64_t frames[64], n = 0;
            j->failures += rkv_layer_visible_frames(ly, s, f, frames, &n) != RKV_OK;
            j->digest = digest_add(j->digest, frames, (size_t)n * sizeof frames[0]);
        }
        size_t bytes = 0;
        j->failures += rkv_model_save_session_mem(j->m, s, NULL, 0, &bytes) != RKV_OK;
        void *img = malloc(bytes);
        j->failures += rkv_model_save_session_mem(j->m, s, img, bytes, &bytes) != RKV_OK;
        rkv_snapshot_info info = RKV_SNAPSHOT_INFO_INIT;
        j->failures += rkv_snapshot_inspect(NULL, img, bytes, &info) != RKV_OK;
        j->digest = digest_add(j->digest, &info.data_xxh3, sizeof info.data_xxh3);
        int64_t clock = -5;
        j->failures += rkv_model_clock(j->m, s, &clock) != RKV_OK || clock != 9;
        free(img);
    }
    free(q);
    free(out);
    return NULL;
}

static void test_readers_in_parallel(void **state)
{
    (void)state;
    rkv_model_config cfg = small_cfg(2);
    rkv_model *m = NULL;
    TU_OK(rkv_model_create(&cfg, &m));
    const size_t kvn = (size_t)(2 * cfg.n_kv_heads * cfg.tokens_per_frame * cfg.d_head);
    float *kv = tu_xmalloc(kvn * sizeof(float));
    for (int64_t s = 0; s < 2; s++) {
        char id[8];
        snprintf(id, sizeof id, "r%lld", (long long)s);
        int64_t got;
        TU_OK(rkv_model_claim(m, id, &got));
        for (int64_t f = 0; f < 10; f++) {
            tu_gen_frame(kv, &(rkv_geometry){.n_kv_heads = cfg.n_kv_heads,
                                             .tokens_per_frame = cfg.tokens_per_frame,
                                             .d_head = cfg.d_head},
                         (uint64_t)(s * 100 + f));
            TU_OK(rkv_model_begin_frame(m, 1, &got, &f));
            for (int64_t l = 0; l < cfg.n_layers; l++)
                TU_OK(rkv_model_upsert(m, l, NULL, 1, &got, kv, RKV_DTYPE_F32, 1));
        }
    }
    free(kv);
    reader_job jobs[NT], serial[NT];
    pthread_t t[NT];
    for (int i = 0; i < NT; i++) {
        jobs[i] = (reader_job){m, i, 0, 0};
        assert_int_equal(pthread_create(&t[i], NULL, model_reader, &jobs[i]), 0);
    }
    for (int i = 0; i < NT; i++)
        pthread_join(t[i], NULL);
    for (int i = 0; i < NT; i++) {
        serial[i] = (reader_job){m, i, 0, 0};
        model_reader(&serial[i]);
        assert_int_equal(jobs[i].failures, 0);
        assert_int_equal(jobs[i].digest, serial[i].digest);
    }
    rkv_model_destroy(m);
}

/* Loads and inspects of snapshot images into different models, in
 * parallel, including refused (damaged) ones: the loader's JSON parser has
 * process-wide state (serialized inside ringkv). */
typedef struct load_job {
    const unsigned char *img;
    size_t n;
    int id;
    int failures;
} load_job;

static void *loader(void *arg)
{
    load_job *j = arg;
    rkv_model_config cfg = small_cfg(1);
    rkv_model *m = NULL;
    if (rkv_model_create(&cfg, &m) != RKV_OK) {
        j->failures++;
        return NULL;
    }
    int64_t s;
    j->failures += rkv_model_claim(m, "t", &s) != RKV_OK;
    unsigned char *bad = malloc(j->n);
    memcpy(bad, j->img, j->n);
    bad[20 + j->id] ^= 0x01; /* inside the JSON header */
    for (int round = 0; round < 30; round++) {
        j->failures += rkv_model_restore(m, s, j->img, j->n) != RKV_OK;
        j->failures += rkv_model_restore(m, s, bad, j->n) != RKV_ERR_FORMAT;
        j->failures += rkv_snapshot_inspect(NULL, bad, j->n, NULL) != RKV_ERR_FORMAT;
        j->failures += strstr(rkv_last_error(), "rkv_snapshot_inspect") == NULL;
    }
    int64_t clock = -5;
    j->failures += rkv_model_clock(m, s, &clock) != RKV_OK || clock != 3;
    free(bad);
    rkv_model_destroy(m);
    return NULL;
}

static void test_loads_in_parallel(void **state)
{
    (void)state;
    rkv_model_config cfg = small_cfg(1);
    rkv_model *m = NULL;
    TU_OK(rkv_model_create(&cfg, &m));
    int64_t s;
    TU_OK(rkv_model_claim(m, "src", &s));
    const size_t kvn = (size_t)(2 * cfg.n_kv_heads * cfg.tokens_per_frame * cfg.d_head);
    float *kv = tu_xcalloc(kvn, sizeof(float));
    for (int64_t f = 0; f < 4; f++) {
        kv[0] = (float)f;
        TU_OK(rkv_model_begin_frame(m, 1, &s, &f));
        for (int64_t l = 0; l < cfg.n_layers; l++)
            TU_OK(rkv_model_upsert(m, l, NULL, 1, &s, kv, RKV_DTYPE_F32, 1));
    }
    free(kv);
    size_t n = 0;
    TU_OK(rkv_model_save_session_mem(m, s, NULL, 0, &n));
    unsigned char *img = tu_xmalloc(n);
    TU_OK(rkv_model_save_session_mem(m, s, img, n, &n));
    rkv_model_destroy(m);
    load_job jobs[NT];
    pthread_t t[NT];
    for (int i = 0; i < NT; i++) {
        jobs[i] = (load_job){img, n, i, 0};
        assert_int_equal(pthread_create(&t[i], NULL, loader, &jobs[i]), 0);
    }
    for (int i = 0; i < NT; i++) {
        pthread_join(t[i], NULL);
        assert_int_equal(jobs[i].failures, 0);
    }
    free(img);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        /* first: the default pool is created by whichever thread gets there */
        cmocka_unit_test(test_models_in_parallel),
        cmocka_unit_test(test_last_error_is_thread_local),
        cmocka_unit_test(test_layers_in_parallel),
        cmocka_unit_test(test_readers_in_parallel),
        cmocka_unit_test(test_loads_in_parallel),
    };
    return cmocka_run_group_tests(tests, setup_dir, teardown_dir);
}

/* The thread pool (ringkv_cpu.h): a call's tasks are taken by the workers
 * and the calling thread from a shared counter, each run by one thread. */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#include "cpu_internal.h"

/* One thread of a pool (index 0: the caller) and its scratch buffer, grown
 * on demand. */
typedef struct pool_thread {
    rkv_threadpool *pool;
    int index;
    pthread_t handle; /* the workers' (index >= 1) */
    void *scratch;
    size_t scratch_bytes;
} pool_thread;

struct rkv_threadpool {
    int n_threads; /* workers + the calling thread */
    pool_thread *threads; /* [n_threads] */
    pthread_mutex_t call_lock; /* one parallel_for at a time per pool */
    pthread_mutex_t lock;
    pthread_cond_t wake, done;
    uint64_t generation; /* bumped per job, under lock */
    bool stopping;
    /* the current job */
    rkv__task_fn fn;
    void *ctx;
    int64_t n_tasks;
    atomic_int_fast64_t next;
    int busy; /* workers still in the current job, under lock */
};

/* Runs tasks of the current job until none is left. */
static void drain(rkv_threadpool *p, int thread) {
    for (;;) {
        int64_t t = atomic_fetch_add(&p->next, 1);
        if (t >= p->n_tasks) return;
        p->fn(p->ctx, t, thread);
    }
}

static void *worker_main(void *arg) {
    const pool_thread *me = arg;
    rkv_threadpool *p = me->pool;
    const int thread = me->index;
    uint64_t seen = 0;
    pthread_mutex_lock(&p->lock);
    for (;;) {
        while (!p->stopping && p->generation == seen) pthread_cond_wait(&p->wake, &p->lock);
        if (p->stopping) break;
        seen = p->generation;
        pthread_mutex_unlock(&p->lock);
        drain(p, thread);
        pthread_mutex_lock(&p->lock);
        if (--p->busy == 0) pthread_cond_signal(&p->done);
    }
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

static int machine_cores(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > 1024 ? 1024 : (int)n;
}

rkv_status rkv_threadpool_create(int n_threads, rkv_threadpool **out) {
    if (!out) return rkv__fail(RKV_ERR_NULL, "rkv_threadpool_create: out is NULL");
    if (n_threads < 0 || n_threads > 1024)
        return rkv__fail(RKV_ERR_INVALID_ARG,
                         "rkv_threadpool_create: n_threads = %d; expected 0 (the machine's "
                         "cores) .. 1024",
                         n_threads);
    rkv_threadpool *p = calloc(1, sizeof *p);
    if (p) {
        p->n_threads = n_threads ? n_threads : machine_cores();
        p->threads = calloc((size_t)p->n_threads, sizeof *p->threads);
    }
    if (!p || !p->threads) {
        free(p);
        return rkv__fail(RKV_ERR_NO_MEMORY, "rkv_threadpool_create: out of memory");
    }
    pthread_mutex_init(&p->call_lock, NULL);
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->done, NULL);
    int started = 1; /* thread 0 is the caller */
    for (; started < p->n_threads; started++) {
        pool_thread *t = &p->threads[started];
        *t = (pool_thread){.pool = p, .index = started};
        if (pthread_create(&t->handle, NULL, worker_main, t)) break;
    }
    if (started < p->n_threads) {
        p->n_threads = started; /* destroy joins only those started */
        rkv_threadpool_destroy(p);
        return rkv__fail(RKV_ERR_NO_MEMORY, "rkv_threadpool_create: cannot start %d threads",
                         n_threads);
    }
    *out = p;
    return RKV_OK;
}

void rkv_threadpool_destroy(rkv_threadpool *pool) {
    if (!pool) return;
    pthread_mutex_lock(&pool->lock);
    pool->stopping = true;
    pthread_cond_broadcast(&pool->wake);
    pthread_mutex_unlock(&pool->lock);
    for (int i = 1; i < pool->n_threads; i++) pthread_join(pool->threads[i].handle, NULL);
    for (int i = 0; i < pool->n_threads; i++) free(pool->threads[i].scratch);
    pthread_mutex_destroy(&pool->call_lock);
    pthread_mutex_destroy(&pool->lock);
    pthread_cond_destroy(&pool->wake);
    pthread_cond_destroy(&pool->done);
    free(pool->threads), free(pool);
}

int rkv_threadpool_size(const rkv_threadpool *pool) { return pool ? pool->n_threads : 0; }

static rkv_threadpool *default_pool; /* stays NULL when its creation fails */
static pthread_once_t default_once = PTHREAD_ONCE_INIT;

static void make_default(void) { (void)rkv_threadpool_create(0, &default_pool); }

rkv_threadpool *rkv__default_pool(void) {
    pthread_once(&default_once, make_default);
    return default_pool;
}

/* Grows every thread's scratch buffer to at least `bytes`. */
static bool reserve(rkv_threadpool *p, size_t bytes) {
    const size_t rounded = RKV__ALIGN64(bytes);
    for (int i = 0; i < p->n_threads; i++) {
        pool_thread *t = &p->threads[i];
        if (t->scratch_bytes >= rounded) continue;
        void *mem = aligned_alloc(64, rounded);
        if (!mem) return false;
        free(t->scratch);
        t->scratch = mem;
        t->scratch_bytes = rounded;
    }
    return true;
}

rkv_status rkv__parallel_for(rkv_threadpool *p, int64_t n_tasks, size_t scratch_bytes,
                             rkv__task_fn fn, void *ctx) {
    pthread_mutex_lock(&p->call_lock);
    if (scratch_bytes && !reserve(p, scratch_bytes)) {
        pthread_mutex_unlock(&p->call_lock);
        return rkv__fail(RKV_ERR_NO_MEMORY, "cannot allocate %zu bytes of per-thread scratch",
                         scratch_bytes);
    }
    if (p->n_threads == 1 || n_tasks <= 1) {
        for (int64_t t = 0; t < n_tasks; t++) fn(ctx, t, 0);
    } else {
        pthread_mutex_lock(&p->lock);
        p->fn = fn;
        p->ctx = ctx;
        p->n_tasks = n_tasks;
        atomic_store(&p->next, 0);
        p->busy = p->n_threads - 1;
        p->generation++;
        pthread_cond_broadcast(&p->wake);
        pthread_mutex_unlock(&p->lock);
        drain(p, 0);
        pthread_mutex_lock(&p->lock);
        while (p->busy > 0) pthread_cond_wait(&p->done, &p->lock);
        pthread_mutex_unlock(&p->lock);
    }
    pthread_mutex_unlock(&p->call_lock);
    return RKV_OK;
}

void *rkv__thread_scratch(rkv_threadpool *p, int thread) { return p->threads[thread].scratch; }

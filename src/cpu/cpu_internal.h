/* Private declarations shared by the CPU backend's files only (src/cpu/:
 * the attention engines, the thread pool, the backend table). The core
 * (the files directly in src/) never includes this header: it reaches the
 * CPU backend through its table (rkv_backend_cpu) and the calls of
 * ringkv_cpu.h. */
#ifndef RKV_CPU_INTERNAL_H
#define RKV_CPU_INTERNAL_H

#include "internal.h"
#include "isa.h" /* the CPU's facts and the engine choice */
#include "ringkv_cpu.h" /* the CPU backend's public calls, defined here */

/* ---- attention (cpu/attention*.c) ---- */
/* The attend operations of the CPU table (the fast engines,
 * cpu/attention_flash.c) and of the reference table (the test oracle,
 * cpu/attention_reference.c), on arguments already checked. */
rkv_status rkv__attend_run(void *ctx, const void *layer, const rkv_attention_args *a,
                           void *workspace, size_t workspace_bytes);
rkv_status rkv__attend_reference_run(void *ctx, const void *layer, const rkv_attention_args *a,
                                     void *workspace, size_t workspace_bytes);
/* Visible slots of row b, ascending (explicit row, or the bits-and-clock
 * rule: ring frames ascending, scratch last) into slots[N]; returns count
 * (cpu/attention_reference.c). */
int64_t rkv__gather_visible_slots(const struct rkv__cpu_layer *l, const rkv_attention_args *a,
                                  int64_t b, int64_t *slots);

/* The engines' unit of work: one (session row, query head, tile of MQ
 * queries); a task takes up to UMAX units of one KV head and reads the
 * keys and values in chunks of KB. */
#define MQ 64
#define KB 128
#define UMAX 8

/* One rkv_layer_attend call, shared by its task functions. */
typedef struct rkv__attend_ctx {
    const struct rkv__cpu_layer *layer;
    const rkv_attention_args *args;
    rkv_threadpool *pool;
    int64_t tq;    /* queries per row                       */
    float scale;   /* softmax scale                          */
    int64_t units; /* units per task (rkv__attend_tasks)     */
} rkv__attend_ctx;

/* The task split of both CPU attention engines: a task takes up to `umax`
 * consecutive units of one (session row, KV head), numbered query head
 * first, then tile; units per task as many as keep >= 4 tasks a thread
 * (halving from umax). Sets c->units; returns the task count. Each unit's
 * arithmetic is the same whatever the grouping, so outputs depend neither
 * on it nor on the thread count. */
static inline int64_t rkv__attend_tasks(rkv__attend_ctx *c, int64_t umax) {
    const int64_t H = c->layer->g.n_kv_heads, G = c->args->n_q_heads / H;
    const int64_t per = G * ((c->tq + MQ - 1) / MQ), rows = c->args->batch * H;
    const int64_t want = 4 * (int64_t)rkv_threadpool_size(c->pool);
    int64_t u = umax;
    while (u > 1 && rows * ((per + u - 1) / u) < want) u /= 2;
    c->units = u;
    return rows * ((per + u - 1) / u);
}

/* Task `task`'s units (rkv__attend_tasks' numbering): session row *b, KV
 * head *kvh, and per unit g < the count returned its query rows (<= MQ)
 * and the offset of its first query in q / out. */
static inline int64_t rkv__task_units(const rkv__attend_ctx *c, int64_t task, int64_t *b,
                                      int64_t *kvh, int64_t rows[UMAX], size_t qbase[UMAX]) {
    const int64_t D = c->layer->g.d_head, Hq = c->args->n_q_heads, Tq = c->tq;
    const int64_t tiles = (Tq + MQ - 1) / MQ;
    const int64_t H = c->layer->g.n_kv_heads, G = Hq / H, U = c->units;
    const int64_t per = G * tiles, npk = (per + U - 1) / U;
    *b = task / (H * npk), *kvh = task / npk % H;
    const int64_t u0 = task % npk * U, gn = per - u0 < U ? per - u0 : U;
    for (int64_t g = 0; g < gn; g++) {
        const int64_t h = *kvh * G + (u0 + g) / tiles, i0 = (u0 + g) % tiles * MQ;
        rows[g] = Tq - i0 < MQ ? Tq - i0 : MQ;
        qbase[g] = (size_t)((*b * Hq + h) * Tq + i0) * (size_t)D;
    }
    return gn;
}

/* n bytes rounded up to 64: scratch pieces and 64-byte aligned allocations. */
#define RKV__ALIGN64(n) (((n) + 63) & ~(size_t)63)
/* The next piece of `bytes` of a scratch layout, at *at from base. */
static inline void *rkv__carve(void *base, size_t *at, size_t bytes) {
    void *p = (void *)((uintptr_t)base + *at);
    *at += RKV__ALIGN64(bytes);
    return p;
}

/* The bf16 pair-product attention (cpu/attention_amx.c; whether the CPU
 * has its engines: rkv__cpu_read, isa.h): whether a layer suits the path
 * (bf16 storage, d_head a multiple of 32, <= 512); the per-thread scratch
 * of tasks of up to UMAX units (rkv__attend_tasks); the task on the
 * AMX engine and on the AVX512-BF16 engine (ctx: a rkv__attend_ctx; built
 * where RKV_HAVE_AMX is). */
bool rkv__amx_fits(const struct rkv__cpu_layer *l);
size_t rkv__amx_scratch_bytes(int64_t D, int64_t N);
void rkv__amx_task(void *ctx, int64_t task, int thread);
void rkv__bf16dot_task(void *ctx, int64_t task, int thread);

/* ---- thread pool (cpu/threadpool.c) ---- */
/* One task of a parallel job: `thread` is in [0, pool size), 0 = caller. */
typedef void (*rkv__task_fn)(void *ctx, int64_t task, int thread);
/* Runs fn(ctx, t, thread) for t in [0, n_tasks) on the pool's threads and
 * the caller, returning when all are done. Before any task runs, every
 * thread's scratch buffer is grown to scratch_bytes (RKV_ERR_NO_MEMORY, with
 * no task run, when that fails). Concurrent calls on one pool are serialized. */
rkv_status rkv__parallel_for(rkv_threadpool *pool, int64_t n_tasks, size_t scratch_bytes,
                             rkv__task_fn fn, void *ctx);
/* The process-wide pool sized to the machine's cores, created on first use;
 * NULL when it could not be created. */
rkv_threadpool *rkv__default_pool(void);
/* The 64-byte aligned scratch buffer of `thread` (valid inside a task). */
void *rkv__thread_scratch(rkv_threadpool *pool, int thread);

#endif

/* Fast attention over the ring on the CPU (SEMANTICS 5): a tiled online
 * softmax ("flash attention", Dao et al. 2022) over the visible keys only,
 * spread over a thread pool by (session row, query head, query tile). The
 * kernel (attention_flash_kernel.inc) is compiled for AVX-512, AVX2+FMA and
 * plain C; the best the CPU has is chosen once at run time. Each output
 * element is computed by one thread in a fixed order, so results are
 * bit-identical whatever the thread count (on one instruction-set path). */
#define _POSIX_C_SOURCE 200809L
#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../attention_check.h"
#include "cpu_internal.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

/* Each instruction-set copy of the kernel has vectors of one register of
 * its ISA: VL = 16 floats on AVX-512, 8 on AVX2, 4 elsewhere (GCC keeps a
 * vector wider than the target's registers in memory: 64-byte vectors made
 * the AVX2 copy 12-20x slower, below the reference, on an AVX2-only CPU).
 * A unit's tile of MQ = 64 queries is MQV vectors. */
#define MQV (MQ / VL)

/* FN(a, b): a_b, after expanding b (the copy's names: FN(flash_task,
 * FLASH_NAME) is flash_task_avx2 in the AVX2 copy). vf, vi, vh: the copy's
 * vectors of VL floats, int32 and uint16 (vf_16 ... vh_4 below). */
#define FN2(a, b) a##_##b
#define FN(a, b) FN2(a, b)
#define vf FN(vf, VL)
#define vi FN(vi, VL)
#define vh FN(vh, VL)
typedef float vf_16 __attribute__((vector_size(64)));
typedef int32_t vi_16 __attribute__((vector_size(64)));
typedef uint16_t vh_16 __attribute__((vector_size(32)));
typedef float vf_8 __attribute__((vector_size(32)));
typedef int32_t vi_8 __attribute__((vector_size(32)));
typedef uint16_t vh_8 __attribute__((vector_size(16)));
typedef float vf_4 __attribute__((vector_size(16)));
typedef int32_t vi_4 __attribute__((vector_size(16)));
typedef uint16_t vh_4 __attribute__((vector_size(8)));

/* Vector helpers are macros, not functions: a function taking or returning
 * a 64-byte vector in the AVX2 and plain copies has no agreed ABI (clang
 * refuses it), while a macro is simply inlined code in each copy. */
#define vsplat(x) ((vf){0} + (float)(x))
/* Lane-wise max (a blend on the compare mask: b where either is NaN). */
#define vmax(a, b) vblend((a) > (b), (a), (b))
#define vblend(m, a, b) ((vf)(((m) & (vi)(a)) | (~(m) & (vi)(b))))

/* A task takes up to UMAX (query head, query tile) units of one KV head
 * (GQA: the query heads of a KV head read the same keys and values) and
 * prepares each chunk of keys and values once for all of them: read from
 * memory once per task instead of once per unit, widened once (16-bit
 * storage). The units' QT and OT stay in L2 with the chunk: at most
 * FLASH_UNIT_BYTES of them (half of a 512 KiB L2: 8 units at d_head 64,
 * 4 at 128, 2 at 256, ...; at least 1: flash_umax). */
#define FLASH_UNIT_BYTES (256 * 1024)

static int64_t flash_umax(int64_t D) {
    int64_t u = UMAX;
    while (u > 1 && u * 2 * D * MQ * (int64_t)sizeof(float) > FLASH_UNIT_BYTES) u /= 2;
    return u;
}

/* A thread's scratch, carved from one buffer (flash_carve). */
typedef struct {
    int64_t *slots;       /* [N] visible slots of the row            */
    float *qt, *ot;       /* [units][D][MQ] per unit                 */
    float *st;            /* [KB][MQ] scores / probabilities          */
    float *kbuf, *vbuf;   /* [KB][D] widened keys / values (bf16/f16) */
    const float **krow, **vrow; /* [KB] row pointers of the chunk     */
    float *zero_row;      /* [D] zeros for padding keys               */
} flash_scratch;

/* Carves the scratch from mem (NULL: only sizes it, the pointers unused);
 * returns the bytes it takes. */
static size_t flash_carve(void *mem, int64_t D, int64_t N, int64_t units, flash_scratch *s) {
    const size_t f = sizeof(float), d = (size_t)D, u = (size_t)units;
    size_t at = 0;
    s->slots = rkv__carve(mem, &at, (size_t)N * sizeof(int64_t));
    s->qt = rkv__carve(mem, &at, u * d * MQ * f);
    s->ot = rkv__carve(mem, &at, u * d * MQ * f);
    s->st = rkv__carve(mem, &at, KB * MQ * f);
    s->kbuf = rkv__carve(mem, &at, KB * d * f);
    s->vbuf = rkv__carve(mem, &at, KB * d * f);
    s->krow = rkv__carve(mem, &at, KB * sizeof(float *));
    s->vrow = rkv__carve(mem, &at, KB * sizeof(float *));
    s->zero_row = rkv__carve(mem, &at, d * f);
    if (mem) memset(s->zero_row, 0, d * f);
    return at;
}

/* The copies; the kernel file undefines VL, FLASH_TARGET and FLASH_NAME. */
#if defined(__x86_64__) && defined(__GNUC__)
#define VL 16
#define FLASH_TARGET __attribute__((target("avx512f,avx512vl,avx512bw,avx512dq,fma,avx2")))
#define FLASH_NAME avx512
#include "attention_flash_kernel.inc"
/* AVX2 and SSE: vmax as the MAXPS instruction, which is the blend above
 * lane for lane (b where either is NaN), in one µop */
#undef vmax
#define VL 8
#define vmax(a, b) ((vf)_mm256_max_ps((a), (b)))
#define FLASH_TARGET __attribute__((target("avx2,fma")))
#define FLASH_NAME avx2
#include "attention_flash_kernel.inc"
#undef vmax
#define vmax(a, b) ((vf)_mm_max_ps((a), (b)))
#endif
#define VL 4
#define FLASH_TARGET
#define FLASH_NAME generic
#include "attention_flash_kernel.inc"

/* An engine's tasks: bf16 storage with a suitable d_head runs on `bf16`
 * (the pair path, attention_amx.c; NULL: off), everything else on `flash`
 * (AVX-512 whenever the pair path is on). */
typedef struct engine {
    rkv__task_fn flash, bf16;
} engine;

static engine engine_of(rkv__isa isa) {
    switch (isa) {
#ifdef RKV_HAVE_AMX /* else never picked (isa.h) */
    case RKV__ISA_AMX: return (engine){flash_task_avx512, rkv__amx_task};
    case RKV__ISA_AVX512BF16: return (engine){flash_task_avx512, rkv__bf16dot_task};
#endif
#if defined(__x86_64__) && defined(__GNUC__)
    case RKV__ISA_AVX512: return (engine){flash_task_avx512, NULL};
    case RKV__ISA_AVX2: return (engine){flash_task_avx2, NULL};
#endif
    default: return (engine){flash_task_generic, NULL};
    }
}

/* RKV_ISA as an engine (any case), or RKV__ISA_COUNT: unset, empty, or not
 * a name -- the latter said once on stderr, since a typo would otherwise
 * silently cost 100x (the plain C kernel). */
static rkv__isa isa_cap(void) {
    const char *env = getenv("RKV_ISA");
    if (!env || !*env) return RKV__ISA_COUNT;
    const rkv__isa cap = rkv__isa_parse(env);
    if (cap == RKV__ISA_COUNT)
        fprintf(stderr,
                "ringkv: RKV_ISA=%s is not one of generic, avx2, avx512, avx512bf16, amx; "
                "ignored (the best kernel for this CPU is used)\n",
                env);
    return cap;
}

static engine picked;
static const char *kernel_name;
static pthread_once_t kernel_once = PTHREAD_ONCE_INIT;
/* Picks the kernel once (rkv__isa_pick over this CPU's facts, under the
 * RKV_ISA cap); a kernel named by RKV_ISA that this CPU (or its OS: AMX
 * needs Linux's permission) does not offer is said once on stderr, with the
 * one that runs instead, as an unknown name is (isa_cap). */
static void init_kernel(void) {
    const rkv__cpu cpu = rkv__cpu_read();
    const rkv__isa cap = isa_cap();
    const rkv__isa isa = rkv__isa_pick(&cpu, cap); /* generic where only it is built */
    picked = engine_of(isa);
    kernel_name = rkv__isa_name(isa);
    const char *asked = rkv__isa_name(cap);
    if (asked && strcmp(asked, kernel_name))
        fprintf(stderr,
                "ringkv: RKV_ISA=%s asks for the %s kernel, which this CPU does not offer; "
                "the %s kernel is used%s\n", getenv("RKV_ISA"), asked, kernel_name,
                picked.bf16 ? " for bf16 layers whose d_head is a multiple of 32 up to 512 "
                              "(avx512 for the others)" : "");
}

const char *rkv_attention_isa(const rkv_layer *pub) {
    const struct rkv__cpu_layer *layer = NULL;
    if (pub && !(layer = rkv__cpu_layer_of(pub, "rkv_attention_isa"))) return NULL;
    /* a layer on the reference table: rkv_layer_attend runs the oracle */
    if (pub && pub->ops.attend == rkv_backend_cpu_reference()->attend) return "reference";
    pthread_once(&kernel_once, init_kernel);
    return layer && picked.bf16 && !rkv__amx_fits(layer) ? "avx512" : kernel_name;
}

/* One attention call on engine e (args checked by the caller). */
static rkv_status attend_on(const struct rkv__cpu_layer *layer, const rkv_attention_args *args,
                            engine e, const char *what) {
    rkv_threadpool *pool = args->pool ? args->pool : rkv__default_pool();
    if (!pool) return rkv__fail(RKV_ERR_NO_MEMORY, "%s: no thread pool", what);
    const int64_t D = layer->g.d_head;
    rkv__attend_ctx c = {
        .layer = layer,
        .args = args,
        .pool = pool,
        .tq = args->n_queries ? args->n_queries : layer->g.tokens_per_frame,
        .scale = args->scale != 0.0f ? args->scale : 1.0f / sqrtf((float)D),
    };
    if (e.bf16 && rkv__amx_fits(layer))
        return rkv__parallel_for(pool, rkv__attend_tasks(&c, UMAX),
                                 rkv__amx_scratch_bytes(D, layer->total_slots), e.bf16, &c);
    const int64_t tasks = rkv__attend_tasks(&c, flash_umax(D));
    flash_scratch unused;
    return rkv__parallel_for(pool, tasks, flash_carve(NULL, D, layer->total_slots, c.units, &unused),
                             e.flash, &c);
}

rkv_status rkv__attend_run(void *ctx, const void *layer, const rkv_attention_args *a,
                           void *workspace, size_t workspace_bytes) {
    (void)ctx, (void)workspace, (void)workspace_bytes;
    pthread_once(&kernel_once, init_kernel);
    return attend_on(layer, a, picked, "rkv_layer_attend");
}

rkv_status rkv__attend_engine(const rkv_layer *pub, const rkv_attention_args *caller,
                              rkv__isa isa) {
    static const char what[] = "rkv__attend_engine";
    const struct rkv__cpu_layer *layer = rkv__cpu_layer_of(pub, what);
    if (!layer) return pub ? RKV_ERR_INVALID_ARG : RKV_ERR_NULL;
    const rkv__cpu cpu = rkv__cpu_read();
    if ((unsigned)isa >= RKV__ISA_COUNT || rkv__isa_pick(&cpu, isa) != isa)
        return rkv__fail(RKV_ERR_INVALID_ARG, "%s: this CPU has no %s engine", what,
                         rkv__isa_name(isa) ? rkv__isa_name(isa) : "such");
    if (!caller) return rkv__fail(RKV_ERR_NULL, "%s: args is NULL", what);
    rkv_attention_args a;
    const rkv_backend_storage storage = {layer->kv, layer->written, NULL};
    rkv_status st = rkv__attention_args_load(what, caller, &a);
    if (st == RKV_OK) st = rkv__attend_args_check(&layer->g, NULL, &storage, &a, true, what);
    return st == RKV_OK ? attend_on(layer, &a, engine_of(isa), what) : st;
}

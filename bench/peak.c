/* The physical arithmetic peak of this CPU (peak.h): loops of independent
 * multiply-add chains held in registers, nothing read from memory, run on
 * every pool thread at once. Each chain is acc = acc * b + c with b just
 * below 1, so values stay normal (no microcode assists) whatever the count;
 * enough chains per thread (more than latency x issue width) keep every
 * FMA port busy. The matrix unit's loop (AMX) keeps four accumulator tiles
 * busy from two A and two B tiles, the densest TDPBF16PS pattern. */
#define _GNU_SOURCE
#include "peak.h"

#include "bench.h"

#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define PEAK_X86 1
#endif
/* AMX and AVX512-BF16 intrinsics: GCC >= 11, Clang >= 12 (as src/attention_amx.c) */
#if defined(PEAK_X86) && defined(__linux__) &&                                      \
    ((defined(__clang__) && __clang_major__ >= 12) ||                               \
     (!defined(__clang__) && __GNUC__ >= 11))
#define PEAK_AMX 1
#endif

static volatile float sink; /* results land here, so no loop is dead code */

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* ---- the loops: each returns its FLOPs ----------------------------------- */

#define CHAINS8(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7)
#define CHAINS12(X) CHAINS8(X) X(8) X(9) X(10) X(11)
#define CHAINS24(X) CHAINS12(X) X(12) X(13) X(14) X(15) X(16) X(17) X(18) X(19) X(20) X(21) X(22) X(23)

typedef float v4f __attribute__((vector_size(16)));

static double loop_generic(long iters) {
    const v4f b = {0.999999f, 0.999999f, 0.999999f, 0.999999f}, c = {1e-6f, 1e-6f, 1e-6f, 1e-6f};
#define DECL(i) v4f a##i = b * (float)(i + 1);
#define STEP(i) a##i = a##i * b + c;
#define SUM(i) s += a##i;
    CHAINS8(DECL)
    for (long it = 0; it < iters; it++) {
        CHAINS8(STEP)
        __asm__ volatile("" ::: "memory"); /* keeps the loop a loop of chains */
    }
    v4f s = {0};
    CHAINS8(SUM)
    sink = s[0] + s[1] + s[2] + s[3];
#undef DECL
#undef STEP
#undef SUM
    return 2.0 * 4 * 8 * (double)iters;
}

#ifdef PEAK_X86
__attribute__((target("avx2,fma"))) static double loop_avx2(long iters) {
    const __m256 b = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-6f);
#define DECL(i) __m256 a##i = _mm256_set1_ps(1.0f + (float)(i));
#define STEP(i) a##i = _mm256_fmadd_ps(a##i, b, c);
#define SUM(i) s = _mm256_add_ps(s, a##i);
    CHAINS12(DECL)
    for (long it = 0; it < iters; it++) {
        CHAINS12(STEP)
    }
    __m256 s = _mm256_setzero_ps();
    CHAINS12(SUM)
    float out[8];
    _mm256_storeu_ps(out, s);
    sink = out[0];
#undef DECL
#undef STEP
#undef SUM
    return 2.0 * 8 * 12 * (double)iters;
}

__attribute__((target("avx512f"))) static double loop_avx512(long iters) {
    const __m512 b = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-6f);
#define DECL(i) __m512 a##i = _mm512_set1_ps(1.0f + (float)(i));
#define STEP(i) a##i = _mm512_fmadd_ps(a##i, b, c);
#define SUM(i) s = _mm512_add_ps(s, a##i);
    CHAINS24(DECL)
    for (long it = 0; it < iters; it++) {
        CHAINS24(STEP)
    }
    __m512 s = _mm512_setzero_ps();
    CHAINS24(SUM)
    sink = _mm512_reduce_add_ps(s);
#undef DECL
#undef STEP
#undef SUM
    return 2.0 * 16 * 24 * (double)iters;
}
#endif

#ifdef PEAK_AMX
/* VDPBF16PS: each of 16 f32 lanes += two bf16 products (4 FLOPs). */
__attribute__((target("avx512f,avx512bf16"))) static double loop_bf16dot(long iters) {
    const __m512bh x = (__m512bh)_mm512_set1_epi16(0x3f7f), /* bf16 0.996 */
        y = (__m512bh)_mm512_set1_epi16(0x3380);            /* bf16 6e-8  */
#define DECL(i) __m512 a##i = _mm512_set1_ps((float)(i));
#define STEP(i) a##i = _mm512_dpbf16_ps(a##i, x, y);
#define SUM(i) s = _mm512_add_ps(s, a##i);
    CHAINS24(DECL)
    for (long it = 0; it < iters; it++) {
        CHAINS24(STEP)
    }
    __m512 s = _mm512_setzero_ps();
    CHAINS24(SUM)
    sink = _mm512_reduce_add_ps(s);
#undef DECL
#undef STEP
#undef SUM
    return 4.0 * 16 * 24 * (double)iters;
}

/* Palette 1 (as src/attention_amx.c): tiles 0-3 are C (16 rows x 16 f32),
 * 4-5 A and 6-7 B (16 rows x 32 bf16). One TDPBF16PS: 16x16x32 MACs. */
typedef struct {
    uint8_t palette_id, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} amx_config;

/* A static object, as in src/attention_amx.c: built on the stack, GCC 12
 * dropped the stores as dead (it does not see LDTILECFG read them). */
static const amx_config amx_cfg = {
    .palette_id = 1,
    .colsb = {64, 64, 64, 64, 64, 64, 64, 64},
    .rows = {16, 16, 16, 16, 16, 16, 16, 16},
};

__attribute__((target("amx-tile,amx-bf16"))) static double loop_amx(long iters) {
    _tile_loadconfig(&amx_cfg);
    uint16_t ab[16 * 32];
    for (int i = 0; i < 16 * 32; i++) ab[i] = 0x3b80; /* bf16 2^-8: sums stay small */
    float c[16 * 16];
    _tile_loadd(4, ab, 64);
    _tile_loadd(5, ab, 64);
    _tile_loadd(6, ab, 64);
    _tile_loadd(7, ab, 64);
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    for (long it = 0; it < iters; it++) {
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
    }
    _tile_stored(0, c, 64);
    _tile_release();
    sink = c[0];
    return 2.0 * 16 * 16 * 32 * 4 * (double)iters;
}
#endif

bool peak_built(peak_kind kind) {
    switch (kind) {
    case PEAK_FMA_GENERIC: return true;
#ifdef PEAK_X86
    case PEAK_FMA_AVX2:
    case PEAK_FMA_AVX512: return true;
#endif
#ifdef PEAK_AMX
    case PEAK_BF16_DOT:
    case PEAK_AMX_BF16: return true;
#endif
    default: return false;
    }
}

const char *peak_isa(peak_kind kind) {
    static const char *const names[] = {"generic", "avx2", "avx512", "avx512bf16", "amx"};
    return names[kind];
}

static double run_loop(peak_kind kind, long iters) {
    switch (kind) {
    case PEAK_FMA_GENERIC: return loop_generic(iters);
#ifdef PEAK_X86
    case PEAK_FMA_AVX2: return loop_avx2(iters);
    case PEAK_FMA_AVX512: return loop_avx512(iters);
#endif
#ifdef PEAK_AMX
    case PEAK_BF16_DOT: return loop_bf16dot(iters);
    case PEAK_AMX_BF16: return loop_amx(iters);
#endif
    default: return 0;
    }
}

/* ---- all threads at once -------------------------------------------------- */

/* Why not a fixed amount of work per thread, timed from the first start to
 * the last finish: on a loaded machine one descheduled thread keeps the
 * clock running while the others idle, the peak comes out low, and a
 * subject measured in a quieter moment shows a ratio above 1. Here every
 * thread runs the loop in chunks until a common deadline (so all of them
 * run for the whole window, side by side, as the subject's threads do), and
 * each measures its own rate over the CPU time it was given
 * (CLOCK_THREAD_CPUTIME_ID): time spent descheduled counts for nobody. The
 * peak is the sum of the threads' rates: what the cores do while they run.
 * Without load this is the wall-clock rate; with load it stays a ceiling
 * instead of dropping below the subject. */

/* Threads wait at a gate that opens once all are created, so they start
 * together. */
typedef struct {
    pthread_mutex_t lock;
    pthread_cond_t open_cv;
    bool open;
} gate;

typedef struct {
    peak_kind kind;
    long chunk;      /* iterations per chunk (0: do nothing)   */
    double deadline; /* CLOCK_MONOTONIC seconds; set at the gate */
    gate *g;
    double rate;     /* FLOPs per second of CPU time           */
} peak_job;

double bench_thread_cpu_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void *peak_thread(void *arg) {
    peak_job *j = arg;
    pthread_mutex_lock(&j->g->lock);
    while (!j->g->open) pthread_cond_wait(&j->g->open_cv, &j->g->lock);
    pthread_mutex_unlock(&j->g->lock);
    if (!j->chunk) return NULL;
    double flops = 0;
    const double c0 = bench_thread_cpu_s();
    do flops += run_loop(j->kind, j->chunk);
    while (now_s() < j->deadline);
    const double cpu = bench_thread_cpu_s() - c0;
    j->rate = cpu > 0 ? flops / cpu : 0;
    return NULL;
}

double peak_run(peak_kind kind, int threads, long chunk_iters, double seconds) {
    if (!peak_built(kind) || threads < 1 || threads > PEAK_MAX_THREADS || chunk_iters < 1 ||
        !(seconds > 0))
        return 0;
    static pthread_t tid[PEAK_MAX_THREADS];
    static peak_job jobs[PEAK_MAX_THREADS];
    gate g = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, false};
    for (int t = 0; t < threads; t++) jobs[t] = (peak_job){kind, chunk_iters, 0, &g, 0};
    int started = 1; /* job 0 runs on this thread */
    for (; started < threads; started++)
        if (pthread_create(&tid[started], NULL, peak_thread, &jobs[started])) break;
    if (started < threads) /* cannot run them all: the started ones do nothing */
        for (int t = 0; t < threads; t++) jobs[t].chunk = 0;
    pthread_mutex_lock(&g.lock);
    const double deadline = now_s() + seconds;
    for (int t = 0; t < threads; t++) jobs[t].deadline = deadline;
    g.open = true;
    pthread_cond_broadcast(&g.open_cv);
    pthread_mutex_unlock(&g.lock);
    peak_thread(&jobs[0]);
    for (int t = 1; t < started; t++) pthread_join(tid[t], NULL);
    if (started < threads) return 0;
    double rate = 0;
    for (int i = 0; i < threads; i++) rate += jobs[i].rate;
    return rate;
}

long peak_calibrate(peak_kind kind, double seconds) {
    if (!peak_built(kind) || !(seconds > 0)) return 0;
    long iters = 1 << 10;
    for (;;) {
        const double t0 = now_s();
        run_loop(kind, iters);
        const double t = now_s() - t0;
        if (t >= seconds / 4 || iters > (1L << 40)) {
            const double want = (double)iters * seconds / (t > 1e-9 ? t : 1e-9);
            return want < 1 ? 1 : (long)want;
        }
        iters *= 4;
    }
}

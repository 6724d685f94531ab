/* Attention over the ring with bf16 pair products (SEMANTICS 5), for bf16
 * storage and d_head a multiple of 32 (<= 512). The same tiled online
 * softmax as attention_flash.c over units of (session row, query head, tile
 * of MQ = 64 queries) -- a task takes several units of one KV head, so each
 * chunk of keys is packed once for them -- with both products on bf16
 * dot-product hardware, one of two engines over the same packed operands:
 *  - "amx": Intel AMX tiles (TDPBF16PS, 16x16 f32 blocks);
 *  - "avx512bf16": AVX512-BF16's VDPBF16PS (16 f32 lanes, each summing two
 *    bf16 products), for CPUs without AMX (AMD Zen 4 and later, Intel
 *    Cooper Lake): 8 rows x 32 columns of f32 accumulators per step.
 *
 *   S  [64 q][128 k] f32  = Q [64][D] bf16  . K^T          (pair products)
 *   P  [64 q][128 k] bf16 = round(exp(scale*S - m))         (AVX-512, f32)
 *   O  [64 q][D] f32     += P . V                           (pair products)
 *
 * Operand layouts (TDPBF16PS C[M][N] += sum_k A[M][2k..2k+1] . B[k][N][0..1],
 * B holding bf16 pairs along the reduction dimension, "VNNI" order):
 *   Q   A operand as stored: rows = queries, 32 bf16 of d per tile row.
 *   K^T B operand: KT[p][j] = the u32 pair (K[j][2p], K[j][2p+1]), i.e. the
 *       keys' rows viewed as u32 [128][D/2], transposed to [D/2][128].
 *   P   A operand as computed: rows = queries, 32 bf16 keys per tile row.
 *   V   B operand: VP[p][d] = the u32 pair (V[2p][d], V[2p+1][d]), two key
 *       rows interleaved element by element: [64][D] u32.
 *
 * Accuracy: queries are rounded to bf16 (exact when they are bf16), and
 * the probabilities P are rounded to bf16 before P . V (their sum l uses the
 * same rounded values); products and sums are f32. The error is bf16-level,
 * ~1e-3 norm-wise relative, against 1e-2 allowed for bf16 inputs by
 * SEMANTICS 5. The tile unit treats bf16 subnormal inputs as zero. Each
 * output is computed by one thread in a fixed order: results do not depend
 * on the thread count. A NaN in Q, K or V reaches the outputs it touches.
 *
 * Both engines compute each f32 accumulator from the same bf16 pairs in the
 * same order of pairs; they may still differ in the last bits (the tile
 * unit's internal summation order is its own), not in accuracy.
 *
 * Compiled only where the compiler knows AMX (GCC >= 11, Clang >= 12 on
 * x86-64); elsewhere this file is a stub that reports "not available". At
 * run time "amx" is used only when CPUID reports AMX-TILE, AMX-BF16 and
 * AVX512-BF16 and Linux grants the tile-data permission (arch_prctl);
 * "avx512bf16" when CPUID reports AVX512-F/BW/DQ/VL and AVX512-BF16. */
#define _GNU_SOURCE
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "cpu_internal.h"

#define MQ 64  /* queries per task tile (as attention_flash.c)  */
#define KB 128 /* keys per chunk                               */
#define UMAX 8 /* (query head, query tile) units per task, most  */

static size_t align64(size_t n) { return (n + 63) & ~(size_t)63; }

size_t rkv__amx_scratch_bytes(int64_t D, int64_t N) {
    const size_t d = (size_t)D;
    return align64((size_t)N * sizeof(int64_t)) + align64(UMAX * MQ * d * 2) /* q  */ +
           align64(MQ * KB * 4) /* s */ + align64(MQ * KB * 2) /* p */ +
           align64(UMAX * MQ * d * 4) /* o */ + align64(d / 2 * KB * 4) /* kt */ +
           align64(KB / 2 * d * 4) /* vp */;
}

/* The work of one (row b, KV head) is G x tiles units (query head of the
 * KV head's group, tile of MQ queries), in that order; a task takes up to
 * UMAX consecutive units and packs each chunk of keys and values once for
 * all of them (the split: rkv__attend_tasks). */
int64_t rkv__amx_tasks(rkv__attend_ctx *c) { return rkv__attend_tasks(c, MQ, UMAX); }

bool rkv__amx_fits(const struct rkv_layer *l) {
    return l->g.dtype == RKV_DTYPE_BF16 && l->g.d_head % 32 == 0 && l->g.d_head <= 512;
}

#if defined(__x86_64__) && defined(__linux__) &&                                    \
    ((defined(__clang__) && __clang_major__ >= 12) ||                               \
     (!defined(__clang__) && defined(__GNUC__) && __GNUC__ >= 11))
#define RKV_HAVE_AMX 1
#endif

#ifdef RKV_HAVE_AMX
#include <cpuid.h>
#include <immintrin.h>
#include <math.h>
#include <sys/syscall.h>
#include <unistd.h>

#define AMX_TARGET                                                                    \
    __attribute__((target("amx-tile,amx-bf16,avx512f,avx512vl,avx512bw,avx512dq,"     \
                          "avx512bf16,fma,avx2")))
/* Everything but the tile unit: the softmax, the packing, the AVX512-BF16
 * engine and the task body (which calls the AMX engine's functions, never
 * inlined into it, only when the CPU has AMX). */
#define DOT_TARGET                                                                    \
    __attribute__((target("avx512f,avx512vl,avx512bw,avx512dq,avx512bf16,fma,avx2")))

#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

bool rkv__bf16dot_available(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
    const bool avx512f = b >> 16 & 1, avx512bw = b >> 30 & 1, avx512dq = b >> 17 & 1,
               avx512vl = b >> 31 & 1;
    if (!(avx512f && avx512bw && avx512dq && avx512vl)) return false;
    return __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a >> 5 & 1); /* avx512bf16 */
}

bool rkv__amx_available(void) {
    unsigned a, b, c, d;
    if (!rkv__bf16dot_available() || !__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
    const bool tile = d >> 24 & 1, bf16 = d >> 22 & 1;
    if (!(tile && bf16)) return false;
    /* Linux >= 5.16: tile data must be requested (per process) */
    return syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
}

/* Palette 1: all eight tiles 16 rows x 64 bytes. */
typedef struct {
    uint8_t palette_id, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tile_config;

#define LOG2E 1.44269504088896341f

/* 2^t in f32 for t <= 0 (degree-4 Taylor polynomial on [-1/2, 1/2], |rel
 * err| < 5e-5: far below the bf16 rounding, 2^-9, that follows). t is clamped at -100: what is smaller
 * (exp(x) < 1e-30 against the row's largest term, 1) comes out 2^-100, not
 * 0 -- no subnormal arithmetic, and no f32 sum can notice it; -inf (masked
 * keys) included. NaN gives NaN (max_ps returns its second operand then). */
DOT_TARGET static inline __m512 vexp2(__m512 t) {
    t = _mm512_max_ps(_mm512_set1_ps(-100.0f), t);
    const __m512 k = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m512 f = _mm512_sub_ps(t, k); /* [-0.5, 0.5] */
    __m512 p = _mm512_set1_ps(9.6181291e-3f);
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.5504109e-2f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.4022651e-1f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.9314718e-1f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, k);
}

/* KT[p][j] = row_j[p] (u32) for p < D/2, j < KB: 16x16 u32 transposes. */
DOT_TARGET static void pack_kt(uint32_t *kt, const uint32_t *const *rows, int64_t D) {
    const int64_t P = D / 2;
    for (int64_t j0 = 0; j0 < KB; j0 += 16)
        for (int64_t p0 = 0; p0 < P; p0 += 16) {
            __m512i r[16], t[16];
            for (int i = 0; i < 16; i++) r[i] = _mm512_loadu_si512(rows[j0 + i] + p0);
            /* r[i][c] -> out[c][i] */
            for (int i = 0; i < 16; i += 2) {
                t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
                t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
            }
            for (int i = 0; i < 16; i += 4) {
                r[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
                r[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
                r[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
                r[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
            }
            /* r[4g + s] now holds, per 128-bit lane L, rows 4g..4g+3 of
             * column 4L + s' where s' = (0,1,2,3) for s = (0,1,2,3) */
            for (int i = 0; i < 4; i++) {
                t[i] = _mm512_shuffle_i32x4(r[i], r[i + 4], 0x88);      /* lanes 0,2 | 0,2 */
                t[i + 4] = _mm512_shuffle_i32x4(r[i], r[i + 4], 0xdd);  /* lanes 1,3 | 1,3 */
                t[i + 8] = _mm512_shuffle_i32x4(r[i + 8], r[i + 12], 0x88);
                t[i + 12] = _mm512_shuffle_i32x4(r[i + 8], r[i + 12], 0xdd);
            }
            for (int i = 0; i < 4; i++) {
                /* column 4L + s for L = 0,1,2,3 */
                __m512i c0 = _mm512_shuffle_i32x4(t[i], t[i + 8], 0x88);       /* L = 0 */
                __m512i c2 = _mm512_shuffle_i32x4(t[i], t[i + 8], 0xdd);       /* L = 2 */
                __m512i c1 = _mm512_shuffle_i32x4(t[i + 4], t[i + 12], 0x88);  /* L = 1 */
                __m512i c3 = _mm512_shuffle_i32x4(t[i + 4], t[i + 12], 0xdd);  /* L = 3 */
                _mm512_storeu_si512(kt + (p0 + i) * KB + j0, c0);
                _mm512_storeu_si512(kt + (p0 + 4 + i) * KB + j0, c1);
                _mm512_storeu_si512(kt + (p0 + 8 + i) * KB + j0, c2);
                _mm512_storeu_si512(kt + (p0 + 12 + i) * KB + j0, c3);
            }
        }
}

/* VP[p][d] = (V[2p][d], V[2p+1][d]) for p < KB/2, d < D. */
DOT_TARGET static void pack_vp(uint32_t *vp, const uint16_t *const *rows, int64_t D) {
    const __m512i lo = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9,
                                        40, 8, 39, 7, 38, 6, 37, 5, 36, 4, 35, 3, 34, 2, 33,
                                        1, 32, 0);
    const __m512i hi = _mm512_add_epi16(lo, _mm512_set1_epi16(16));
    for (int64_t p = 0; p < KB / 2; p++)
        for (int64_t d0 = 0; d0 < D; d0 += 32) {
            const __m512i a = _mm512_loadu_si512(rows[2 * p] + d0);
            const __m512i b = _mm512_loadu_si512(rows[2 * p + 1] + d0);
            _mm512_storeu_si512(vp + p * D + d0, _mm512_permutex2var_epi16(a, lo, b));
            _mm512_storeu_si512(vp + p * D + d0 + 16, _mm512_permutex2var_epi16(a, hi, b));
        }
}

/* ---- the two engines: C[M][N] (+)= A[M][2P] . B[P][N] in bf16 pairs -------
 * A: bf16 rows (stride lda elements), pairs along the reduction; B: u32
 * bf16 pairs (stride ldb), C: f32 (stride ldc). The products of attention:
 *   S[MQ][KB]  = Q[MQ][D]  . KT[D/2][KB]   (overwrite)
 *   O[MQ][D]  += P[MQ][KB] . VP[KB/2][D]   (accumulate)                 */

/* AMX: 2x2 blocks of 16x16 tiles (tiles 0-3 accumulate, 4-5 A, 6-7 B). */
/* Palette 1, tiles 0-7 of 16 rows x 64 bytes. A static object: built on the
 * stack, GCC 12 at -O3 dropped the colsb/rows stores as dead (it does not
 * see LDTILECFG read them), and the instruction faulted on the zeros. */
static const tile_config amx_config = {
    .palette_id = 1,
    .colsb = {64, 64, 64, 64, 64, 64, 64, 64},
    .rows = {16, 16, 16, 16, 16, 16, 16, 16},
};

AMX_TARGET static void amx_begin(void) { _tile_loadconfig(&amx_config); }
AMX_TARGET static void amx_end(void) { _tile_release(); }

AMX_TARGET static void amx_pairs(float *c, size_t ldc, bool accumulate, const uint16_t *a,
                                 size_t lda, const uint32_t *b, size_t ldb, int64_t M, int64_t N,
                                 int64_t P) {
    const size_t cs = ldc * 4, as = lda * 2, bs = ldb * 4;
    for (int64_t m2 = 0; m2 < M; m2 += 32)
        for (int64_t n2 = 0; n2 < N; n2 += 32) {
            float *cb = c + (size_t)m2 * ldc + (size_t)n2;
            if (accumulate) {
                _tile_loadd(0, cb, cs);
                _tile_loadd(1, cb + 16, cs);
                _tile_loadd(2, cb + 16 * ldc, cs);
                _tile_loadd(3, cb + 16 * ldc + 16, cs);
            } else {
                _tile_zero(0);
                _tile_zero(1);
                _tile_zero(2);
                _tile_zero(3);
            }
            for (int64_t p = 0; p < P; p += 16) { /* 32 bf16 of A per tile row */
                _tile_loadd(4, a + (size_t)m2 * lda + 2 * (size_t)p, as);
                _tile_loadd(5, a + (size_t)(m2 + 16) * lda + 2 * (size_t)p, as);
                _tile_loadd(6, b + (size_t)p * ldb + (size_t)n2, bs);
                _tile_loadd(7, b + (size_t)p * ldb + (size_t)n2 + 16, bs);
                _tile_dpbf16ps(0, 4, 6);
                _tile_dpbf16ps(1, 4, 7);
                _tile_dpbf16ps(2, 5, 6);
                _tile_dpbf16ps(3, 5, 7);
            }
            _tile_stored(0, cb, cs);
            _tile_stored(1, cb + 16, cs);
            _tile_stored(2, cb + 16 * ldc, cs);
            _tile_stored(3, cb + 16 * ldc + 16, cs);
        }
}

/* AVX512-BF16: 8 rows x 32 columns of accumulators (16 zmm); per pair step
 * two B vectors, eight A pairs broadcast, sixteen VDPBF16PS. M % 8 == 0,
 * N % 32 == 0. */
DOT_TARGET static void dot_pairs(float *c, size_t ldc, bool accumulate, const uint16_t *a,
                                 size_t lda, const uint32_t *b, size_t ldb, int64_t M, int64_t N,
                                 int64_t P) {
    for (int64_t m0 = 0; m0 < M; m0 += 8)
        for (int64_t n0 = 0; n0 < N; n0 += 32) {
            __m512 acc[8][2];
            for (int r = 0; r < 8; r++) {
                float *cr = c + (size_t)(m0 + r) * ldc + (size_t)n0;
                acc[r][0] = accumulate ? _mm512_loadu_ps(cr) : _mm512_setzero_ps();
                acc[r][1] = accumulate ? _mm512_loadu_ps(cr + 16) : _mm512_setzero_ps();
            }
            const uint32_t *ar = (const uint32_t *)(a + (size_t)m0 * lda);
            const size_t ap = lda / 2; /* A row stride in pairs */
            for (int64_t p = 0; p < P; p++) {
                const __m512bh b0 = (__m512bh)_mm512_loadu_si512(b + (size_t)p * ldb + (size_t)n0);
                const __m512bh b1 =
                    (__m512bh)_mm512_loadu_si512(b + (size_t)p * ldb + (size_t)n0 + 16);
#pragma GCC unroll 8
                for (int r = 0; r < 8; r++) {
                    const __m512bh x = (__m512bh)_mm512_set1_epi32((int)ar[(size_t)r * ap + (size_t)p]);
                    acc[r][0] = _mm512_dpbf16_ps(acc[r][0], x, b0);
                    acc[r][1] = _mm512_dpbf16_ps(acc[r][1], x, b1);
                }
            }
            for (int r = 0; r < 8; r++) {
                float *cr = c + (size_t)(m0 + r) * ldc + (size_t)n0;
                _mm512_storeu_ps(cr, acc[r][0]);
                _mm512_storeu_ps(cr + 16, acc[r][1]);
            }
        }
}

DOT_TARGET static void body(const rkv__attend_ctx *c, int64_t task, int thread, bool amx) {
    const struct rkv_layer *l = c->layer;
    const rkv_attention_args *a = c->args;
    const int64_t D = l->g.d_head, Hq = a->n_q_heads, Tq = c->tq;
    const int64_t tiles = (Tq + MQ - 1) / MQ;
    const int64_t H = l->g.n_kv_heads, G = Hq / H, U = c->units;
    const int64_t per = G * tiles, npk = (per + U - 1) / U;
    const int64_t b = task / (H * npk), kvh = task / npk % H, u0 = task % npk * U;
    const int64_t gn = per - u0 < U ? per - u0 : U; /* units of this task */
    int64_t rowsall[UMAX];
    size_t qbaseall[UMAX];
    for (int64_t g = 0; g < gn; g++) {
        const int64_t h = kvh * G + (u0 + g) / tiles, i0 = (u0 + g) % tiles * MQ;
        rowsall[g] = Tq - i0 < MQ ? Tq - i0 : MQ;
        qbaseall[g] = (size_t)((b * Hq + h) * Tq + i0) * (size_t)D;
    }
    const size_t d = (size_t)D;

    uint8_t *mem = rkv__thread_scratch(c->pool, thread);
    int64_t *slots = (int64_t *)mem;
    mem += align64((size_t)l->total_slots * sizeof(int64_t));
    uint16_t *qball = (uint16_t *)mem;
    mem += align64(UMAX * MQ * d * 2);
    float *st = (float *)mem;
    mem += align64(MQ * KB * 4);
    uint16_t *pb = (uint16_t *)mem;
    mem += align64(MQ * KB * 2);
    float *otall = (float *)mem;
    mem += align64(UMAX * MQ * d * 4);
    uint32_t *kt = (uint32_t *)mem;
    mem += align64(d / 2 * KB * 4);
    uint32_t *vp = (uint32_t *)mem;

    const int64_t n = rkv__gather_visible_slots(l, a, b, slots);

    /* Q of each head as bf16 [MQ][D], zero-padded; the scale is applied
     * to S in f32 */
    for (int64_t g = 0; g < gn; g++) {
        uint16_t *qb = qball + (size_t)g * MQ * d;
        const size_t qbase = qbaseall[g];
        const int64_t rows = rowsall[g];
        if (a->q_dtype == RKV_DTYPE_BF16)
            memcpy(qb, (const uint16_t *)a->q + qbase, (size_t)rows * d * 2);
        else if (a->q_dtype == RKV_DTYPE_F32) /* round to nearest even */
            for (size_t i = 0; i < (size_t)rows * d; i += 16)
                _mm256_storeu_si256((__m256i *)(qb + i),
                                    (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps((const float *)a->q + qbase + i)));
        else
            for (size_t i = 0; i < (size_t)rows * d; i++)
                rkv__store(qb, RKV_DTYPE_BF16, i, rkv__load(a->q, a->q_dtype, qbase + i));
        memset(qb + (size_t)rows * d, 0, (size_t)(MQ - rows) * d * 2);
    }
    memset(otall, 0, (size_t)gn * MQ * d * 4);
    float mall[UMAX][MQ], lall[UMAX][MQ];
    for (int g = 0; g < UMAX; g++)
        for (int i = 0; i < MQ; i++) mall[g][i] = -INFINITY, lall[g][i] = 0.0f;

    void (*pairs)(float *, size_t, bool, const uint16_t *, size_t, const uint32_t *, size_t,
                  int64_t, int64_t, int64_t) = amx ? amx_pairs : dot_pairs;
    if (amx) amx_begin();

    /* scores times scale*log2(e): for scale > 0 (the usual) the raw scores'
     * max gives the scaled max, one multiply less per score */
    const bool pos = c->scale > 0.0f;
    const __m512 scale = _mm512_set1_ps(c->scale), log2e = _mm512_set1_ps(LOG2E);
    const __m512 c1 = pos ? _mm512_set1_ps(c->scale * LOG2E) : log2e;
    const uint32_t *krow[KB];
    const uint16_t *vrow[KB];
    static const uint16_t zero_row[512]; /* padding keys (rkv__amx_fits: D <= 512) */

    for (int64_t j0 = 0; j0 < n; j0 += KB) {
        const int64_t nk = n - j0 < KB ? n - j0 : KB;
        for (int64_t j = 0; j < KB; j++) {
            krow[j] = j < nk ? (const uint32_t *)rkv__slot_ptr(l, 0, kvh, slots[j0 + j])
                             : (const uint32_t *)zero_row;
            vrow[j] = j < nk ? (const uint16_t *)rkv__slot_ptr(l, 1, kvh, slots[j0 + j])
                             : zero_row;
        }
        pack_kt(kt, krow, D);
        pack_vp(vp, vrow, D);

        for (int64_t g = 0; g < gn; g++) {
            const uint16_t *qb = qball + (size_t)g * MQ * d;
            float *ot = otall + (size_t)g * MQ * d, *m = mall[g], *lsum = lall[g];
            const int64_t rows = rowsall[g];
            if (rows < MQ) /* P rows past `rows`: 0 */
                memset(pb + (size_t)rows * KB, 0, (size_t)(MQ - rows) * KB * 2);

            /* S = Q . K^T */
            pairs(st, KB, false, qb, d, kt, KB, MQ, KB, D / 2);

            /* online softmax per query row, 16 rows at a time; P rounded to
             * bf16 */
            const bool full = nk == KB;
            for (int i0r = 0; i0r < rows; i0r += 16) {
                float mnew[16], rsum[16];
                const int ir = rows - i0r < 16 ? (int)(rows - i0r) : 16;
                for (int ii = 0; ii < ir; ii++) {
                    const int i = i0r + ii;
                    __m512 sv[KB / 16];
                    __m512 vmax = _mm512_set1_ps(-INFINITY);
                    for (int v = 0; v < KB / 16; v++) {
                        sv[v] = _mm512_loadu_ps(st + i * KB + v * 16);
                    if (!pos) sv[v] = _mm512_mul_ps(sv[v], scale);
                        if (!full) {
                            const int64_t left = nk - v * 16;
                            const __mmask16 live = left >= 16 ? 0xffff
                                                   : left <= 0 ? 0
                                                               : (__mmask16)((1u << left) - 1);
                            sv[v] = _mm512_mask_mov_ps(_mm512_set1_ps(-INFINITY), live, sv[v]);
                        }
                        vmax = _mm512_max_ps(sv[v], vmax); /* a NaN score is skipped here */
                    }
                    const float cmax = _mm512_reduce_max_ps(vmax) * (pos ? c->scale : 1.0f);
                    const float mn = m[i] > cmax ? m[i] : cmax;
                    mnew[ii] = mn;
                    __m512 sum = _mm512_setzero_ps();
                    if (mn == -INFINITY) {
                        /* every score of the row so far is -inf (or NaN):
                         * weights exactly 0 -- not vexp2's 2^-100, and not
                         * exp(-inf - -inf) = NaN -- so that a row whose
                         * every key scores -inf comes out 0; NaN stays NaN.
                         * A branch per row and chunk, taken only there. */
                        for (int v = 0; v < KB / 16; v++) {
                            const __m512 p = _mm512_maskz_mov_ps(
                                _mm512_cmp_ps_mask(sv[v], sv[v], _CMP_UNORD_Q), sv[v]);
                            _mm256_storeu_si256((__m256i *)(pb + i * KB + v * 16),
                                                (__m256i)_mm512_cvtneps_pbh(p));
                            sum = _mm512_add_ps(sum, p);
                        }
                        rsum[ii] = _mm512_reduce_add_ps(sum);
                        continue;
                    }
                    const __m512 ml = _mm512_set1_ps(mn * LOG2E);
                    for (int v = 0; v < KB / 16; v++) {
                        const __m512 p = vexp2(_mm512_fmsub_ps(sv[v], c1, ml));
                        _mm256_storeu_si256((__m256i *)(pb + i * KB + v * 16),
                                            (__m256i)_mm512_cvtneps_pbh(p));
                        sum = _mm512_add_ps(sum, p);
                    }
                    rsum[ii] = _mm512_reduce_add_ps(sum);
                }
                /* the rows' corrections exp(m_old - m_new), 16 at once;
                 * m_new -inf (m_old too) counts as 0: a correction 2^-100
                 * of a sum and accumulator that are 0, not NaN */
                const __mmask16 rm = (__mmask16)((1u << ir) - 1);
                const __m512 mo = _mm512_maskz_loadu_ps(rm, m + i0r);
                const __m512 mv = _mm512_maskz_loadu_ps(rm, mnew);
                const __m512 mr = _mm512_mask_mov_ps(
                    mv, _mm512_cmp_ps_mask(mv, _mm512_set1_ps(-INFINITY), _CMP_EQ_OQ),
                    _mm512_setzero_ps());
                const __m512 corr = vexp2(_mm512_mul_ps(_mm512_sub_ps(mo, mr), log2e));
                const __m512 lo = _mm512_maskz_loadu_ps(rm, lsum + i0r);
                _mm512_mask_storeu_ps(lsum + i0r, rm, _mm512_add_ps(_mm512_mul_ps(lo, corr),
                                                                     _mm512_maskz_loadu_ps(rm, rsum)));
                _mm512_mask_storeu_ps(m + i0r, rm, mv);
                float cf[16];
                _mm512_storeu_ps(cf, corr);
                for (int ii = 0; ii < ir && j0; ii++) {
                    if (cf[ii] == 1.0f) continue;
                    const __m512 cv = _mm512_set1_ps(cf[ii]);
                    float *orow = ot + (i0r + ii) * d;
                    for (int64_t dd = 0; dd < D; dd += 16)
                        _mm512_storeu_ps(orow + dd, _mm512_mul_ps(_mm512_loadu_ps(orow + dd), cv));
                }
            }

            /* O += P . V */
            pairs(ot, d, true, pb, KB, vp, d, MQ, D, KB / 2);
        } /* heads */
    }
    if (amx) amx_end();

    /* out[i][d] = O[i][d] / l[i]; 0 where l[i] is 0: a row with no
     * visible key, or whose every score is -inf (O is 0 there) */
    for (int64_t g = 0; g < gn; g++) {
        const size_t qbase = qbaseall[g];
        const float *ot = otall + (size_t)g * MQ * d;
        for (int64_t i = 0; i < rowsall[g]; i++) {
            const float inv = lall[g][i] != 0.0f ? 1.0f / lall[g][i] : 0.0f;
            const size_t o0 = qbase + (size_t)(i * D);
            if (a->out_dtype == RKV_DTYPE_F32)
                for (int64_t dd = 0; dd < D; dd += 16)
                    _mm512_storeu_ps((float *)a->out + o0 + dd,
                                     _mm512_mul_ps(_mm512_loadu_ps(ot + i * D + dd), _mm512_set1_ps(inv)));
            else
                for (int64_t dd = 0; dd < D; dd++)
                    rkv__store(a->out, a->out_dtype, o0 + (size_t)dd, ot[i * D + dd] * inv);
        }
    }
}

void rkv__amx_task(void *ctx, int64_t task, int thread) { body(ctx, task, thread, true); }
void rkv__bf16dot_task(void *ctx, int64_t task, int thread) { body(ctx, task, thread, false); }

#else /* no AMX support in this compiler / architecture */

bool rkv__amx_available(void) { return false; }
bool rkv__bf16dot_available(void) { return false; }
void rkv__amx_task(void *ctx, int64_t task, int thread) {
    (void)ctx, (void)task, (void)thread;
}
void rkv__bf16dot_task(void *ctx, int64_t task, int thread) {
    (void)ctx, (void)task, (void)thread;
}

#endif

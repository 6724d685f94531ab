/* Attention over the ring with bf16 pair products (SEMANTICS 5), for bf16
 * storage and d_head a multiple of 32 (<= 512). The same tiled online
 * softmax and task split as attention_flash.c (cpu_internal.h), each chunk
 * of keys packed once per task, with both products on bf16 dot-product
 * hardware, one of two engines:
 *  - "amx": Intel AMX tiles (TDPBF16PS, 16x16 f32 blocks);
 *  - "avx512bf16": AVX512-BF16's VDPBF16PS (16 f32 lanes, each summing two
 *    bf16 products), for CPUs without AMX (AMD Zen 4 and later, Intel
 *    Cooper Lake): 6 rows x 64 columns of f32 accumulators per step.
 *
 * AMX, scores by query:
 *   S  [64 q][128 k] f32  = Q [64][D] bf16  . K^T          (pair products)
 *   P  [64 q][128 k] bf16 = round(exp(scale*S - m))         (AVX-512, f32)
 *   O  [64 q][D] f32     += P . V                           (pair products)
 * Operand layouts (TDPBF16PS C[M][N] += sum_k A[M][2k..2k+1] . B[k][N][0..1],
 * B holding bf16 pairs along the reduction dimension, "VNNI" order):
 *   Q   A operand as stored: rows = queries, 32 bf16 of d per tile row.
 *   K^T B operand: KT[p][j] = the u32 pair (K[j][2p], K[j][2p+1]), i.e. the
 *       keys' rows viewed as u32 [128][D/2], transposed to [D/2][128].
 *   P   A operand as computed: rows = queries, 32 bf16 keys per tile row.
 *   V   B operand: VP[p][d] = the u32 pair (V[2p][d], V[2p+1][d]), two key
 *       rows interleaved element by element: [64][D] u32.
 *
 * AVX512-BF16, scores by key (dot_body): S^T [128 k][64 q] =
 * K . Q^T with the keys' rows as the broadcast operand as stored and Q^T
 * pairs (QT[p][q] = (Q[q][2p], Q[q][2p+1]), once per task), in log2 units; the
 * softmax runs down the keys with 16 queries a vector (no horizontal
 * reduction); the weights as pairs PP[p][q] = (P[q][2p], P[q][2p+1]) are
 * the broadcast operand of O += P . V, against VP in in-lane order
 * (pack_vp_lanes). A full chunk after the first is done in registers
 * (dot_fused: weights against the running max, kept while no score passes
 * it by 2^8), else with the scores stored and the max raised.
 *
 * Accuracy: queries are rounded to bf16 (exact when they are bf16), and
 * the probabilities P are rounded to bf16 before P . V (their sum l is of
 * the unrounded values); products and sums are f32. The error is bf16-level,
 * ~1e-3 norm-wise relative, against 1e-2 allowed for bf16 inputs by
 * SEMANTICS 5. The tile unit treats bf16 subnormal inputs as zero. A NaN
 * in Q, K or V reaches the outputs it touches.
 *
 * Both engines compute each score and output accumulator from the same
 * bf16 pairs in the same order of pairs; they may still differ in the last
 * bits (the tile unit's internal summation order is its own, and the two
 * sum l in different orders), not in accuracy.
 *
 * The tasks are compiled where the compiler knows AMX (RKV_HAVE_AMX, isa.h);
 * elsewhere the engine choice (rkv__isa_pick) never picks them. */
#define _GNU_SOURCE
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "cpu_internal.h"

bool rkv__amx_fits(const struct rkv__cpu_layer *l) {
    return l->g.dtype == RKV_DTYPE_BF16 && l->g.d_head % 32 == 0 && l->g.d_head <= 512;
}

/* A task's setup, shared by both engines: its units (rkv__task_units) and
 * their softmax's running max and sum (-inf, 0), the row's n visible slots
 * and its scratch (pair_carve), each area as the AMX engine uses it; the
 * AVX512-BF16 engine keeps Q^T in q, the pairs PP in p and stages Q in k. */
typedef struct pair_task {
    int64_t gn, b, kvh, n;
    int64_t rows[UMAX];
    size_t qbase[UMAX];
    float mall[UMAX][MQ], lall[UMAX][MQ];
    int64_t *slots;
    void *q;   /* [UMAX][MQ][D] bf16 */
    float *s;  /* [MQ][KB] */
    void *p;   /* [MQ][KB] bf16 */
    float *o;  /* [UMAX][MQ][D] */
    void *k;   /* [D/2][KB] u32 */
    uint32_t *vp; /* [KB/2][D] */
} pair_task;

/* Carves t's scratch areas from mem (NULL: only sizes them, the pointers
 * unused); returns the bytes they take. */
static size_t pair_carve(void *mem, int64_t D, int64_t N, pair_task *t) {
    const size_t d = (size_t)D;
    size_t at = 0;
    t->slots = rkv__carve(mem, &at, (size_t)N * sizeof(int64_t));
    t->q = rkv__carve(mem, &at, UMAX * MQ * d * 2);
    t->s = rkv__carve(mem, &at, MQ * KB * 4);
    t->p = rkv__carve(mem, &at, MQ * KB * 2);
    t->o = rkv__carve(mem, &at, UMAX * MQ * d * 4);
    t->k = rkv__carve(mem, &at, d / 2 * KB * 4);
    t->vp = rkv__carve(mem, &at, KB / 2 * d * 4);
    return at;
}

size_t rkv__amx_scratch_bytes(int64_t D, int64_t N) {
    pair_task t;
    return pair_carve(NULL, D, N, &t);
}

#ifdef RKV_HAVE_AMX
#include <immintrin.h>
#include <math.h>

#define AMX_TARGET                                                                    \
    __attribute__((target("amx-tile,amx-bf16,avx512f,avx512vl,avx512bw,avx512dq,"     \
                          "avx512bf16,fma,avx2")))
/* Everything but the AMX engine: the softmax, the packing, the AVX512-BF16
 * engine. */
#define DOT_TARGET                                                                    \
    __attribute__((target("avx512f,avx512vl,avx512bw,avx512dq,avx512bf16,fma,avx2")))

/* LDTILECFG's operand (amx_config). */
typedef struct {
    uint8_t palette_id, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tile_config;

#define LOG2E 1.44269504088896341f

/* 2^t in f32 for t <= 0: 2^floor(t) (VSCALEFPS) times 2^f for f = t -
 * floor(t) in [0, 1) (VREDUCEPS), a degree-4 polynomial fitted to relative
 * error on [0, 1) (|rel err| < 1e-5: far below the bf16 rounding, 2^-9,
 * that follows). t is clamped at -100: what is smaller (exp(x) < 1e-30
 * against the row's largest term, 1) comes out 2^-100, not 0 -- no
 * subnormal arithmetic, and no f32 sum can notice it; -inf (masked keys)
 * included. NaN gives NaN (max_ps returns its second operand then). */
DOT_TARGET static inline __m512 vexp2(__m512 t) {
    t = _mm512_max_ps(_mm512_set1_ps(-100.0f), t);
    const __m512 f = _mm512_reduce_ps(t, 0x09); /* t - floor(t): round down, inexact quiet */
    __m512 p = _mm512_set1_ps(1.3619090e-2f);
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.1701304e-2f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.4174772e-1f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.9290769e-1f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0000097f));
    return _mm512_scalef_ps(p, t);
}

/* out[p][j] = rows[j][p] (u32) for p < P, j < nrows (both multiples of
 * 16; out's row stride ldo): 16x16 u32 transposes. The keys' rows as K^T
 * pairs (AMX), the queries' rows as Q^T pairs (AVX512-BF16). */
DOT_TARGET static void transpose_pairs(uint32_t *out, size_t ldo, const uint32_t *const *rows,
                                       int64_t nrows, int64_t P) {
    for (int64_t j0 = 0; j0 < nrows; j0 += 16)
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
                _mm512_storeu_si512(out + (size_t)(p0 + i) * ldo + j0, c0);
                _mm512_storeu_si512(out + (size_t)(p0 + 4 + i) * ldo + j0, c1);
                _mm512_storeu_si512(out + (size_t)(p0 + 8 + i) * ldo + j0, c2);
                _mm512_storeu_si512(out + (size_t)(p0 + 12 + i) * ldo + j0, c3);
            }
        }
}

/* VP[p][d] = (V[2p][d], V[2p+1][d]) for p < pairs, d < D. */
DOT_TARGET static void pack_vp(uint32_t *vp, const uint16_t *const *rows, int64_t pairs,
                               int64_t D) {
    const __m512i lo = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9,
                                        40, 8, 39, 7, 38, 6, 37, 5, 36, 4, 35, 3, 34, 2, 33,
                                        1, 32, 0);
    const __m512i hi = _mm512_add_epi16(lo, _mm512_set1_epi16(16));
    for (int64_t p = 0; p < pairs; p++)
        for (int64_t d0 = 0; d0 < D; d0 += 32) {
            const __m512i a = _mm512_loadu_si512(rows[2 * p] + d0);
            const __m512i b = _mm512_loadu_si512(rows[2 * p + 1] + d0);
            _mm512_storeu_si512(vp + p * D + d0, _mm512_permutex2var_epi16(a, lo, b));
            _mm512_storeu_si512(vp + p * D + d0 + 16, _mm512_permutex2var_epi16(a, hi, b));
        }
}

/* VP as pack_vp, for the AVX512-BF16 engine, by in-lane unpacks (no
 * cross-lane word permutes): within each block of 32 columns, column c
 * holds d = 8 * (c % 16 / 4) + c % 4 + (c < 16 ? 0 : 4). O's columns come
 * out in that order; store_out's `lanes` puts them back. */
DOT_TARGET static void pack_vp_lanes(uint32_t *vp, const uint16_t *const *rows, int64_t pairs,
                                     int64_t D) {
    for (int64_t p = 0; p < pairs; p++)
        for (int64_t d0 = 0; d0 < D; d0 += 32) {
            const __m512i a = _mm512_loadu_si512(rows[2 * p] + d0);
            const __m512i b = _mm512_loadu_si512(rows[2 * p + 1] + d0);
            _mm512_storeu_si512(vp + p * D + d0, _mm512_unpacklo_epi16(a, b));
            _mm512_storeu_si512(vp + p * D + d0 + 16, _mm512_unpackhi_epi16(a, b));
        }
}

/* ---- the two engines: C[M][N] (+)= A[M][2P] . B[P][N] in bf16 pairs -------
 * B: u32 bf16 pairs (stride ldb), C: f32 (stride ldc). */

/* AMX: 2x2 blocks of 16x16 tiles (tiles 0-3 accumulate, 4-5 A, 6-7 B); A:
 * bf16 rows (stride lda elements), pairs along the reduction (the products
 * and their operands: the header). */
/* Palette 1, tiles 0-7 of 16 rows x 64 bytes. A static object: built on the
 * stack, GCC 12 at -O3 dropped the colsb/rows stores as dead (it does not
 * see LDTILECFG read them), and the instruction faulted on the zeros. */
static const tile_config amx_config = {
    .palette_id = 1,
    .colsb = {64, 64, 64, 64, 64, 64, 64, 64},
    .rows = {16, 16, 16, 16, 16, 16, 16, 16},
};

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

/* AVX512-BF16: blocks of R rows x NV vectors of 16 columns of f32
 * accumulators, 6 x 4 (24 zmm) where the shape allows: per pair step NV B
 * vectors, R A pairs broadcast, R x NV VDPBF16PS (10 loads per 24 products;
 * 8 x 2 took 10 per 16 and ran below the unit's rate on Zen 5). A's pair p
 * of row m is the u32 arow[m][p] (rows given) or a[m * ars + p * aps].
 * accumulate: C's rows are first scaled by cscale[m] (NULL: kept), then
 * added to; else overwritten. oscale (not NULL): every result times
 * *oscale as it is stored. N % 32 == 0, any M. The products (the
 * AVX512-BF16 engine's scores are transposed):
 *   S^T[KB][MQ]  = K[KB][D]  . QT[D/2][MQ]  (A: the keys' rows as stored)
 *   O[MQ][D]   += P[MQ][KB] . VP[KB/2][D]   (A: PP[KB/2][MQ]: ars 1, aps MQ) */
#define DOT_INLINE DOT_TARGET static inline __attribute__((always_inline))
DOT_INLINE void dot_block(const int R, const int NV, float *c, size_t ldc, bool accumulate,
                          const float *cscale, const float *oscale, const uint32_t *const *arow,
                          const uint32_t *a, size_t ars, size_t aps, const uint32_t *b,
                          size_t ldb, int64_t P) {
    __m512 acc[6][4];
#pragma GCC unroll 6
    for (int r = 0; r < R; r++) {
        const float *cr = c + (size_t)r * ldc;
        const __m512 sc = _mm512_set1_ps(accumulate && cscale ? cscale[r] : 1.0f);
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++)
            acc[r][v] = !accumulate ? _mm512_setzero_ps()
                        : cscale    ? _mm512_mul_ps(_mm512_loadu_ps(cr + 16 * v), sc)
                                    : _mm512_loadu_ps(cr + 16 * v);
    }
    for (int64_t p = 0; p < P; p++) {
        __m512bh bv[4];
        const uint32_t *bp = b + (size_t)p * ldb;
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) bv[v] = (__m512bh)_mm512_loadu_si512(bp + 16 * v);
#pragma GCC unroll 6
        for (int r = 0; r < R; r++) {
            const uint32_t x = arow ? arow[r][p] : a[(size_t)r * ars + (size_t)p * aps];
            const __m512bh xv = (__m512bh)_mm512_set1_epi32((int)x);
#pragma GCC unroll 4
            for (int v = 0; v < NV; v++) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], xv, bv[v]);
        }
    }
    const __m512 os = _mm512_set1_ps(oscale ? *oscale : 1.0f);
#pragma GCC unroll 6
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++)
            _mm512_storeu_ps(c + (size_t)r * ldc + 16 * v,
                             oscale ? _mm512_mul_ps(acc[r][v], os) : acc[r][v]);
}

/* One band of R rows (R <= 6) over all N columns. */
DOT_INLINE void dot_band(const int R, float *c, size_t ldc, bool accumulate, const float *cscale,
                         const float *oscale, const uint32_t *const *arow, const uint32_t *a,
                         size_t ars, size_t aps, const uint32_t *b, size_t ldb, int64_t N,
                         int64_t P) {
    int64_t n0 = 0;
    for (; n0 + 64 <= N; n0 += 64)
        dot_block(R, 4, c + n0, ldc, accumulate, cscale, oscale, arow, a, ars, aps, b + n0, ldb,
                  P);
    if (n0 < N)
        dot_block(R, 2, c + n0, ldc, accumulate, cscale, oscale, arow, a, ars, aps, b + n0, ldb,
                  P);
}

DOT_INLINE void dot_pairs_t(const bool rows, float *c, size_t ldc, bool accumulate,
                            const float *cscale, const float *oscale,
                            const uint32_t *const *arow, const uint32_t *a, size_t ars,
                            size_t aps, const uint32_t *b, size_t ldb, int64_t M, int64_t N,
                            int64_t P) {
#define BAND(R)                                                                          \
    dot_band(R, c + (size_t)m0 * ldc, ldc, accumulate, cscale ? cscale + m0 : NULL, oscale, \
             rows ? arow + m0 : NULL, rows ? NULL : a + (size_t)m0 * ars, ars, aps, b, ldb, N, P)
    int64_t m0 = 0;
    for (; m0 + 6 <= M; m0 += 6) BAND(6);
    switch (M - m0) {
    case 5: BAND(5); break;
    case 4: BAND(4); break;
    case 3: BAND(3); break;
    case 2: BAND(2); break;
    case 1: BAND(1); break;
    default: break;
    }
#undef BAND
}

/* C = oscale * (A . B) with A's rows given (arow[m][p]); C (+)= A . B with
 * A strided (a[m * ars + p * aps]). */
DOT_TARGET static void dot_rows(float *c, size_t ldc, float oscale, const uint32_t *const *arow,
                                const uint32_t *b, size_t ldb, int64_t M, int64_t N, int64_t P) {
    dot_pairs_t(true, c, ldc, false, NULL, &oscale, arow, NULL, 0, 0, b, ldb, M, N, P);
}
DOT_TARGET static void dot_strided(float *c, size_t ldc, bool accumulate, const float *cscale,
                                   const uint32_t *a, size_t ars, size_t aps, const uint32_t *b,
                                   size_t ldb, int64_t M, int64_t N, int64_t P) {
    dot_pairs_t(false, c, ldc, accumulate, cscale, NULL, NULL, a, ars, aps, b, ldb, M, N, P);
}

/* ---- what both engines' tasks share ------------------------------------- */

static pair_task task_begin(const rkv__attend_ctx *c, int64_t task, int thread) {
    const struct rkv__cpu_layer *l = c->layer;
    pair_task t;
    pair_carve(rkv__thread_scratch(c->pool, thread), l->g.d_head, l->total_slots, &t);
    t.gn = rkv__task_units(c, task, &t.b, &t.kvh, t.rows, t.qbase);
    t.n = rkv__gather_visible_slots(l, c->args, t.b, t.slots);
    for (int g = 0; g < UMAX; g++)
        for (int i = 0; i < MQ; i++) t.mall[g][i] = -INFINITY, t.lall[g][i] = 0.0f;
    return t;
}

/* A unit's queries as bf16 [MQ][D] rows, zero past `rows`; f32 rounded to
 * nearest even. The scale is applied to the scores in f32. */
DOT_TARGET static void load_q(uint16_t *qb, const rkv_attention_args *a, size_t qbase,
                              int64_t rows, size_t d) {
    if (a->q_dtype == RKV_DTYPE_BF16)
        memcpy(qb, (const uint16_t *)a->q + qbase, (size_t)rows * d * 2);
    else if (a->q_dtype == RKV_DTYPE_F32)
        for (size_t i = 0; i < (size_t)rows * d; i += 16)
            _mm256_storeu_si256((__m256i *)(qb + i),
                                (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps((const float *)a->q + qbase + i)));
    else
        for (size_t i = 0; i < (size_t)rows * d; i++)
            rkv__store(qb, RKV_DTYPE_BF16, i, rkv__load(a->q, a->q_dtype, qbase + i));
    memset(qb + (size_t)rows * d, 0, (size_t)(MQ - rows) * d * 2);
}

/* out[i][.] = O[i][.] / l[i] for the unit's rows (0 where l[i] is 0: a row
 * with no visible key, or whose every score is -inf; O is 0 there). lanes:
 * O's columns are in pack_vp_lanes' order, put back in d order here (rows
 * of O are reordered in place). bf16 out rounds to nearest even, NaN kept
 * quiet: as rkv__store, 16 at a time. */
DOT_TARGET static void store_out(const rkv_attention_args *a, size_t qbase, float *ot,
                                 const float *l, int64_t rows, int64_t D, bool lanes) {
    /* d 0-15 of a 32-column block: 128-bit groups lo0 hi0 lo1 hi1; d 16-31:
     * lo2 hi2 lo3 hi3 (lo: columns 0-15, hi: 16-31) */
    const __m512i i0 = _mm512_set_epi32(23, 22, 21, 20, 7, 6, 5, 4, 19, 18, 17, 16, 3, 2, 1, 0);
    const __m512i i1 = _mm512_add_epi32(i0, _mm512_set1_epi32(8));
    for (int64_t i = 0; i < rows; i++) {
        const __m512 inv = _mm512_set1_ps(l[i] != 0.0f ? 1.0f / l[i] : 0.0f);
        const size_t o0 = qbase + (size_t)(i * D);
        float *orow = ot + i * D;
        for (int64_t dd = 0; lanes && dd < D; dd += 32) {
            const __m512 lo = _mm512_loadu_ps(orow + dd), hi = _mm512_loadu_ps(orow + dd + 16);
            _mm512_storeu_ps(orow + dd, _mm512_permutex2var_ps(lo, i0, hi));
            _mm512_storeu_ps(orow + dd + 16, _mm512_permutex2var_ps(lo, i1, hi));
        }
        if (a->out_dtype == RKV_DTYPE_F32)
            for (int64_t dd = 0; dd < D; dd += 16)
                _mm512_storeu_ps((float *)a->out + o0 + dd,
                                 _mm512_mul_ps(_mm512_loadu_ps(orow + dd), inv));
        else if (a->out_dtype == RKV_DTYPE_BF16)
            for (int64_t dd = 0; dd < D; dd += 16) {
                const __m512 v = _mm512_mul_ps(_mm512_loadu_ps(orow + dd), inv);
                const __m512i u = _mm512_castps_si512(v);
                const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
                __m512i r = _mm512_srli_epi32(
                    _mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))), 16);
                r = _mm512_mask_or_epi32(r, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q),
                                         _mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
                _mm256_storeu_si256((__m256i *)((uint16_t *)a->out + o0 + dd),
                                    _mm512_cvtepi32_epi16(r));
            }
        else
            for (int64_t dd = 0; dd < D; dd++)
                rkv__store(a->out, a->out_dtype, o0 + (size_t)dd, _mm512_cvtss_f32(inv) * orow[dd]);
    }
}

/* The chunk's key and value rows: the visible slots j0.. (nk of them), the
 * zero row past them up to KB. */
static void chunk_rows(const struct rkv__cpu_layer *l, int64_t kvh, const int64_t *slots, int64_t nk,
                       const uint32_t *krow[KB], const uint16_t *vrow[KB]) {
    static const uint16_t zero_row[512]; /* padding keys (rkv__amx_fits: D <= 512) */
    for (int64_t j = 0; j < KB; j++) {
        krow[j] = j < nk ? (const uint32_t *)rkv__slot_ptr(l, 0, kvh, slots[j])
                         : (const uint32_t *)zero_row;
        vrow[j] = j < nk ? (const uint16_t *)rkv__slot_ptr(l, 1, kvh, slots[j]) : zero_row;
    }
}

/* The rows' corrections exp(m_old - m_new) (16 rows): m_new -inf (m_old
 * too) counts as 0: a correction 2^-100 of a sum and accumulator that are
 * 0, not NaN. */
DOT_TARGET static inline __m512 correction(__m512 mo, __m512 mv) {
    const __m512 mr = _mm512_mask_mov_ps(
        mv, _mm512_cmp_ps_mask(mv, _mm512_set1_ps(-INFINITY), _CMP_EQ_OQ), _mm512_setzero_ps());
    return vexp2(_mm512_mul_ps(_mm512_sub_ps(mo, mr), _mm512_set1_ps(LOG2E)));
}

/* Weights where every score of the row so far is -inf (or NaN): exactly 0
 * -- not vexp2's 2^-100, and not exp(-inf - -inf) = NaN -- so that a row
 * whose every key scores -inf comes out 0; NaN stays NaN. */
DOT_TARGET static inline __m512 dead_weights(__m512 s) {
    return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(s, s, _CMP_UNORD_Q), s);
}

/* ---- the AMX engine's task ---------------------------------------------- */

AMX_TARGET static void amx_body(const rkv__attend_ctx *c, pair_task *t) {
    const struct rkv__cpu_layer *l = c->layer;
    const rkv_attention_args *a = c->args;
    const int64_t D = l->g.d_head, n = t->n;
    const size_t d = (size_t)D;
    uint16_t *qball = t->q, *pb = t->p;
    float *st = t->s, *otall = t->o;
    uint32_t *kt = t->k, *vp = t->vp;

    for (int64_t g = 0; g < t->gn; g++)
        load_q(qball + (size_t)g * MQ * d, a, t->qbase[g], t->rows[g], d);
    memset(otall, 0, (size_t)t->gn * MQ * d * 4);

    _tile_loadconfig(&amx_config);

    /* scores times scale*log2(e): for scale > 0 (the usual) the raw scores'
     * max gives the scaled max, one multiply less per score */
    const bool pos = c->scale > 0.0f;
    const __m512 scale = _mm512_set1_ps(c->scale), log2e = _mm512_set1_ps(LOG2E);
    const uint32_t *krow[KB];
    const uint16_t *vrow[KB];

    for (int64_t j0 = 0; j0 < n; j0 += KB) {
        const int64_t nk = n - j0 < KB ? n - j0 : KB;
        chunk_rows(l, t->kvh, t->slots + j0, nk, krow, vrow);
        transpose_pairs(kt, KB, krow, KB, D / 2);
        pack_vp(vp, vrow, KB / 2, D);

        for (int64_t g = 0; g < t->gn; g++) {
            const uint16_t *qb = qball + (size_t)g * MQ * d;
            float *ot = otall + (size_t)g * MQ * d, *m = t->mall[g], *lsum = t->lall[g];
            const int64_t rows = t->rows[g];
            if (rows < MQ) /* P rows past `rows`: 0 */
                memset(pb + (size_t)rows * KB, 0, (size_t)(MQ - rows) * KB * 2);

            /* S = Q . K^T */
            amx_pairs(st, KB, false, qb, d, kt, KB, MQ, KB, D / 2);

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
                    /* a branch per row and chunk, taken only there */
                    const bool dead = mn == -INFINITY;
                    const __m512 mnv = _mm512_set1_ps(mn);
                    /* (scale s - m) log2(e), scale s rounded as the max
                     * was: <= 0 exactly, no weight above 1 whatever the
                     * scores' size (an FMA of s by scale log2(e) could
                     * round above m log2(e): 2^+128 at scores of 1e11) */
                    for (int v = 0; v < KB / 16; v++) {
                        const __m512 ss = pos ? _mm512_mul_ps(sv[v], scale) : sv[v];
                        const __m512 p =
                            dead ? dead_weights(sv[v])
                                 : vexp2(_mm512_mul_ps(_mm512_sub_ps(ss, mnv), log2e));
                        _mm256_storeu_si256((__m256i *)(pb + i * KB + v * 16),
                                            (__m256i)_mm512_cvtneps_pbh(p));
                        sum = _mm512_add_ps(sum, p);
                    }
                    rsum[ii] = _mm512_reduce_add_ps(sum);
                }
                const __mmask16 rm = (__mmask16)((1u << ir) - 1);
                const __m512 mo = _mm512_maskz_loadu_ps(rm, m + i0r);
                const __m512 mv = _mm512_maskz_loadu_ps(rm, mnew);
                const __m512 corr = correction(mo, mv);
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
            amx_pairs(ot, d, true, pb, KB, vp, d, MQ, D, KB / 2);
        } /* heads */
    }
    _tile_release();

    for (int64_t g = 0; g < t->gn; g++)
        store_out(a, t->qbase[g], otall + (size_t)g * MQ * d, t->lall[g], t->rows[g], D, false);
}

/* ---- the AVX512-BF16 engine's task (scores by key: the header) -------------
 * O's correction is applied as its rows are loaded for O += P . V. */

#define QV (MQ / 16) /* query vectors of a tile */
/* The words of cvtne2ps_pbh(b, a) (a low, b high), interleaved: word pair
 * i = (a[i], b[i]), the bf16 pairs of two f32 vectors. */
#define ILV_PAIRS                                                                           \
    _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, \
                     6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0)

/* One unit's chunk: the softmax over S^T [KB][MQ] (nk keys) of scores in
 * log2 units (scale * log2(e) * q.k, as dot_rows stores them), updating m
 * (the running max, log2 units), l (per query) and corr, and the weights
 * PP[(nk + 1) / 2][MQ] (a padding key past an odd nk weighs 0). Each weight
 * is 2^(s - m) with s - m <= 0 exactly (both rounded once, the same way):
 * no weight above 1 whatever the scores' size. Returns whether any
 * correction differs from 1. */
DOT_TARGET static bool dot_softmax(const float *st, uint32_t *pp, int64_t nk, float *m,
                                   float *lsum, float *corr) {
    const __m512i ilv = ILV_PAIRS;
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    bool scaled = false;
    for (int v = 0; v < QV; v++) {
        const float *sv = st + v * 16;
        __m512 mx[4] = {ninf, ninf, ninf, ninf};
        int64_t j = 0;
        for (; j + 4 <= nk; j += 4)
            for (int u = 0; u < 4; u++) /* a NaN score is skipped here */
                mx[u] = _mm512_max_ps(_mm512_loadu_ps(sv + (j + u) * MQ), mx[u]);
        for (; j < nk; j++) mx[0] = _mm512_max_ps(_mm512_loadu_ps(sv + j * MQ), mx[0]);
        const __m512 mo = _mm512_loadu_ps(m + v * 16);
        const __m512 mv = _mm512_max_ps(
            _mm512_max_ps(_mm512_max_ps(mx[0], mx[1]), _mm512_max_ps(mx[2], mx[3])), mo);
        const __mmask16 dead = _mm512_cmp_ps_mask(mv, ninf, _CMP_EQ_OQ);
        __m512 sum0 = _mm512_setzero_ps(), sum1 = _mm512_setzero_ps();
        uint32_t *pv = pp + v * 16;
        int64_t p = 0;
        if (!dead) /* the usual: no row is dead */
            for (; 2 * p + 1 < nk; p++) {
                const __m512 p0 = vexp2(_mm512_sub_ps(_mm512_loadu_ps(sv + 2 * p * MQ), mv));
                const __m512 p1 = vexp2(_mm512_sub_ps(_mm512_loadu_ps(sv + (2 * p + 1) * MQ), mv));
                sum0 = _mm512_add_ps(sum0, p0);
                sum1 = _mm512_add_ps(sum1, p1);
                const __m512i w = (__m512i)_mm512_cvtne2ps_pbh(p1, p0); /* p0 low, p1 high */
                _mm512_storeu_si512(pv + p * MQ, _mm512_permutexvar_epi16(ilv, w));
            }
        for (; 2 * p < nk; p++) { /* dead rows (a branch per query vector and chunk), odd tail */
            const bool two = 2 * p + 1 < nk;
            const __m512 s0 = _mm512_loadu_ps(sv + 2 * p * MQ);
            const __m512 s1 = two ? _mm512_loadu_ps(sv + (2 * p + 1) * MQ) : _mm512_setzero_ps();
            __m512 p0 = vexp2(_mm512_sub_ps(s0, mv));
            __m512 p1 = two ? vexp2(_mm512_sub_ps(s1, mv)) : _mm512_setzero_ps();
            p0 = _mm512_mask_mov_ps(p0, dead, dead_weights(s0));
            p1 = _mm512_mask_mov_ps(p1, dead, dead_weights(s1)); /* the padding key: 0 */
            sum0 = _mm512_add_ps(sum0, p0);
            sum1 = _mm512_add_ps(sum1, p1);
            const __m512i w = (__m512i)_mm512_cvtne2ps_pbh(p1, p0);
            _mm512_storeu_si512(pv + p * MQ, _mm512_permutexvar_epi16(ilv, w));
        }
        /* exp(m_old - m_new) in log2 units; m_new -inf (m_old too): 0, as
         * correction() */
        const __m512 cr = vexp2(_mm512_sub_ps(mo, _mm512_mask_mov_ps(mv, dead, _mm512_setzero_ps())));
        _mm512_storeu_ps(corr + v * 16, cr);
        _mm512_storeu_ps(lsum + v * 16, _mm512_add_ps(_mm512_mul_ps(_mm512_loadu_ps(lsum + v * 16), cr),
                                                      _mm512_add_ps(sum0, sum1)));
        _mm512_storeu_ps(m + v * 16, mv);
        scaled |= _mm512_cmp_ps_mask(cr, _mm512_set1_ps(1.0f), _CMP_NEQ_UQ) != 0;
    }
    return scaled;
}

/* The usual chunk (full, after the first, no query's max unknown), the
 * scores never stored: S^T band by band (6 keys x 64 queries of
 * accumulators), each weight 2^(s - m) against the running max m as it
 * stands (not raised: conditional rescaling, as FlashAttention 4 does),
 * rounded into the pairs PP and summed into sum[4] straight from the
 * registers. Kept only while every s - m <= RESCALE_AT (weights <= 2^8:
 * f32 sums and bf16 weights hold them exactly as well); returns false
 * when some score passes it (a max grown by more than that, +inf): the
 * caller then redoes the chunk with the max raised (dot_rows,
 * dot_softmax). NaN scores give NaN weights either way. */
#define RESCALE_AT 8.0f
DOT_INLINE void fused_band(const int R, const uint32_t *const *krow, const uint32_t *qt,
                           int64_t P, const float *c1f, const float *m, float *sums,
                           __mmask16 *over, uint32_t *pp) {
    const __m512i ilv = ILV_PAIRS;
    __m512 acc[6][QV];
#pragma GCC unroll 6
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int v = 0; v < QV; v++) acc[r][v] = _mm512_setzero_ps();
    for (int64_t p = 0; p < P; p++) {
        __m512bh bv[QV];
        const uint32_t *bp = qt + (size_t)p * MQ;
#pragma GCC unroll 4
        for (int v = 0; v < QV; v++) bv[v] = (__m512bh)_mm512_loadu_si512(bp + 16 * v);
#pragma GCC unroll 6
        for (int r = 0; r < R; r++) {
            const __m512bh xv = (__m512bh)_mm512_set1_epi32((int)krow[r][p]);
#pragma GCC unroll 4
            for (int v = 0; v < QV; v++) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], xv, bv[v]);
        }
    }
    /* m, the sums and the constants from memory here, after the products:
     * kept in registers through them, they pushed accumulators to the
     * stack (24 accumulators, 4 B vectors and a broadcast fill 29 of 32) */
    const __m512 lim = _mm512_set1_ps(RESCALE_AT), c1 = _mm512_set1_ps(*c1f);
#pragma GCC unroll 4
    for (int v = 0; v < QV; v++) {
        const __m512 mv = _mm512_loadu_ps(m + 16 * v);
        __m512 sum = _mm512_loadu_ps(sums + 16 * v);
#pragma GCC unroll 3
        for (int r = 0; r < R; r += 2) {
            /* scores rounded as dot_rows stores them, then against m */
            const __m512 t0 = _mm512_sub_ps(_mm512_mul_ps(acc[r][v], c1), mv);
            const __m512 t1 = _mm512_sub_ps(_mm512_mul_ps(acc[r + 1][v], c1), mv);
            *over |= _mm512_cmp_ps_mask(t0, lim, _CMP_GT_OQ) | _mm512_cmp_ps_mask(t1, lim, _CMP_GT_OQ);
            const __m512 p0 = vexp2(t0), p1 = vexp2(t1);
            sum = _mm512_add_ps(sum, _mm512_add_ps(p0, p1));
            const __m512i w = (__m512i)_mm512_cvtne2ps_pbh(p1, p0);
            _mm512_storeu_si512(pp + (size_t)(r / 2) * MQ + 16 * v, _mm512_permutexvar_epi16(ilv, w));
        }
        _mm512_storeu_ps(sums + 16 * v, sum);
    }
}
/* Out of line (bands of 6 or 2 keys): m and the sums stay in memory
 * through the products. */
DOT_TARGET __attribute__((noinline)) static void fused_rows(int R, const uint32_t *const *krow,
                                                            const uint32_t *qt, int64_t P,
                                                            const float *c1f, const float *m,
                                                            float *sums, __mmask16 *over,
                                                            uint32_t *pp) {
    if (R == 6) fused_band(6, krow, qt, P, c1f, m, sums, over, pp);
    else fused_band(2, krow, qt, P, c1f, m, sums, over, pp);
}

/* fused_band over a full chunk (KB keys: 21 bands of 6, one of 2); on
 * success l += the weights' sums (m unchanged: no correction). */
DOT_TARGET static bool dot_fused(const uint32_t *const *krow, const uint32_t *qt, int64_t P,
                                 float c1f, const float *m, float *lsum, uint32_t *pp) {
    float sums[MQ] = {0};
    __mmask16 over = 0;
    int64_t j = 0;
    for (; j + 6 <= KB; j += 6) fused_rows(6, krow + j, qt, P, &c1f, m, sums, &over, pp + j / 2 * MQ);
    fused_rows(2, krow + j, qt, P, &c1f, m, sums, &over, pp + j / 2 * MQ); /* KB % 6 == 2 */
    if (over) return false;
    for (int i = 0; i < MQ; i++) lsum[i] += sums[i];
    return true;
}

DOT_TARGET static void dot_body(const rkv__attend_ctx *c, pair_task *t) {
    const struct rkv__cpu_layer *l = c->layer;
    const int64_t D = l->g.d_head, n = t->n;
    const size_t d = (size_t)D;
    uint32_t *qtall = t->q, *pp = t->p, *vp = t->vp;
    uint16_t *qstage = t->k;
    float *st = t->s, *otall = t->o;

    const uint32_t *qrow[MQ];
    for (int i = 0; i < MQ; i++) qrow[i] = (const uint32_t *)(qstage + (size_t)i * d);
    for (int64_t g = 0; g < t->gn; g++) {
        load_q(qstage, c->args, t->qbase[g], t->rows[g], d);
        transpose_pairs(qtall + (size_t)g * MQ * d / 2, MQ, qrow, MQ, D / 2);
    }
    float corr[MQ];

    const uint32_t *krow[KB];
    const uint16_t *vrow[KB];
    for (int64_t j0 = 0; j0 < n; j0 += KB) {
        const int64_t nk = n - j0 < KB ? n - j0 : KB, pairs = (nk + 1) / 2;
        chunk_rows(l, t->kvh, t->slots + j0, nk, krow, vrow);
        pack_vp_lanes(vp, vrow, pairs, D);
        for (int64_t g = 0; g < t->gn; g++) {
            float *ot = otall + (size_t)g * MQ * d;
            const uint32_t *qt = qtall + (size_t)g * MQ * d / 2;
            /* the usual chunk: scores and weights in registers (dot_fused);
             * the first, a partial one, or one whose max grew: S^T = scale
             * log2(e) K . Q^T over the chunk's nk keys stored, then the
             * softmax over them, the max raised */
            bool known = j0 > 0 && nk == KB;
            for (int i = 0; known && i < MQ; i++) known = t->mall[g][i] > -INFINITY;
            bool scaled = false;
            if (!known ||
                !dot_fused(krow, qt, D / 2, c->scale * LOG2E, t->mall[g], t->lall[g], pp)) {
                dot_rows(st, MQ, c->scale * LOG2E, krow, qt, MQ, nk, MQ, D / 2);
                scaled = dot_softmax(st, pp, nk, t->mall[g], t->lall[g], corr);
            }
            /* O = corr * O + P . V (the first chunk: O = P . V) */
            dot_strided(ot, d, j0 > 0, scaled ? corr : NULL, pp, 1, MQ, vp, d, MQ, D, pairs);
        }
    }
    for (int64_t g = 0; g < t->gn; g++) {
        if (n == 0) memset(otall + (size_t)g * MQ * d, 0, (size_t)t->rows[g] * d * 4);
        store_out(c->args, t->qbase[g], otall + (size_t)g * MQ * d, t->lall[g], t->rows[g], D,
                  true);
    }
}

/* The two engines' tasks (their bodies out of line, as the kernels' code). */
void rkv__amx_task(void *ctx, int64_t task, int thread) {
    pair_task t = task_begin(ctx, task, thread);
    amx_body(ctx, &t);
}
void rkv__bf16dot_task(void *ctx, int64_t task, int thread) {
    pair_task t = task_begin(ctx, task, thread);
    dot_body(ctx, &t);
}
#endif /* RKV_HAVE_AMX */

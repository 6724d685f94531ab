/*
 * Helpers of the cmocka test programs (static inline only: every
 * tests/test_*.c is its own program and includes this header), on top of
 * the test library every test program links (tests/common/rkvt.h: the
 * PRNG, decoding f16/bf16 storage, error norms and the comparison report,
 * the float64 attention of a row).
 *
 * Everything here is written from SEMANTICS.md and the reference, without
 * the library's help, so that the tests have independent oracles:
 *  - frame generators (the PRNG sequence of the CPU tests),
 *  - the visibility rules of SEM 3/4 (bits-and-clock, clock alone),
 *  - a float64 attention over the ring (SEM 5, rows by rkvt_attend_row),
 *  - byte snapshots of a layer / a model, to prove a failed call changed
 *    nothing,
 *  - status / message assertions.
 */
#ifndef RKV_TESTUTIL_H
#define RKV_TESTUTIL_H

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ringkv.h"
#include "ring_oracle.h"
#include "rkvt.h"

/* ------------------------------------------------------------------------ */
/* Allocation                                                                */
/* ------------------------------------------------------------------------ */

static inline void *tu_xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) {
        fail_msg("test: out of memory (%zu bytes)", n);
    }
    return p;
}

static inline void *tu_xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p) {
        fail_msg("test: out of memory (%zu x %zu bytes)", n, size);
    }
    return p;
}

/* ------------------------------------------------------------------------ */
/* Status assertions                                                         */
/* ------------------------------------------------------------------------ */

static inline int tu_contains(const char *hay, const char *needle)
{
    if (!needle) {
        return 1;
    }
    return hay && strstr(hay, needle) != NULL;
}

/* Leaves a recognisable message in rkv_last_error(), so that a failing call
 * that forgets to set its own message is caught (the message would still be
 * this one). */
#define TU_MARKER "zzqx_marker_dtype"
static inline void tu_set_marker(void)
{
    rkv_dtype d = RKV_DTYPE_F32;
    (void)rkv_dtype_parse(TU_MARKER, &d);
}

#define TU_OK(expr)                                                            \
    do {                                                                       \
        rkv_status tu_st_ = (expr);                                            \
        if (tu_st_ != RKV_OK) {                                                \
            fail_msg("%s:%d: %s -> %s (%d): %s", __FILE__, __LINE__, #expr,    \
                     rkv_status_str(tu_st_), (int)tu_st_, rkv_last_error());   \
        }                                                                      \
    } while (0)

/* expr must return `expected`, with a non-empty message that is not stale
 * and (when needle != NULL) contains needle. */
#define TU_ERR(expr, expected, needle)                                         \
    do {                                                                       \
        tu_set_marker();                                                       \
        rkv_status tu_st_ = (expr);                                            \
        const char *tu_m_ = rkv_last_error();                                  \
        if (tu_st_ != (expected)) {                                            \
            fail_msg("%s:%d: %s -> %s (%d), expected %s: '%s'", __FILE__,      \
                     __LINE__, #expr, rkv_status_str(tu_st_), (int)tu_st_,     \
                     rkv_status_str(expected), tu_m_ ? tu_m_ : "(null)");      \
        }                                                                      \
        tu_check_message_(#expr, __FILE__, __LINE__, tu_m_, (needle));         \
    } while (0)

/* Like TU_ERR but any of two statuses is accepted (for the few cases where
 * the header leaves the exact code open). */
#define TU_ERR2(expr, exp1, exp2, needle)                                      \
    do {                                                                       \
        tu_set_marker();                                                       \
        rkv_status tu_st_ = (expr);                                            \
        const char *tu_m_ = rkv_last_error();                                  \
        if (tu_st_ != (exp1) && tu_st_ != (exp2)) {                            \
            fail_msg("%s:%d: %s -> %s (%d), expected %s or %s: '%s'",          \
                     __FILE__, __LINE__, #expr, rkv_status_str(tu_st_),        \
                     (int)tu_st_, rkv_status_str(exp1), rkv_status_str(exp2),  \
                     tu_m_ ? tu_m_ : "(null)");                                \
        }                                                                      \
        tu_check_message_(#expr, __FILE__, __LINE__, tu_m_, (needle));         \
    } while (0)

/* Any failure status (the header does not name one). */
#define TU_FAILS(expr, needle)                                                 \
    do {                                                                       \
        tu_set_marker();                                                       \
        rkv_status tu_st_ = (expr);                                            \
        const char *tu_m_ = rkv_last_error();                                  \
        if (tu_st_ == RKV_OK) {                                                \
            fail_msg("%s:%d: %s succeeded; expected a failure", __FILE__,      \
                     __LINE__, #expr);                                         \
        }                                                                      \
        tu_check_message_(#expr, __FILE__, __LINE__, tu_m_, (needle));         \
    } while (0)

static inline void tu_check_message_(const char *expr, const char *file,
                                     int line, const char *m,
                                     const char *needle)
{
    if (!m) {
        fail_msg("%s:%d: %s: rkv_last_error() returned NULL", file, line,
                 expr);
    }
    if (m[0] == '\0') {
        fail_msg("%s:%d: %s: empty rkv_last_error()", file, line, expr);
    }
    if (strstr(m, TU_MARKER)) {
        fail_msg("%s:%d: %s: rkv_last_error() not set by the failing call "
                 "(still '%s')", file, line, expr, m);
    }
    if (!tu_contains(m, needle)) {
        fail_msg("%s:%d: %s: message '%s' does not name '%s'", file, line,
                 expr, m, needle);
    }
}

/* ------------------------------------------------------------------------ */
/* Geometry                                                                  */
/* ------------------------------------------------------------------------ */

static inline rkv_geometry tu_geom(int64_t S, int64_t H, int64_t RF,
                                   int64_t RB, int64_t D, int64_t T,
                                   int64_t PD, rkv_dtype dt)
{
    rkv_geometry g;
    memset(&g, 0, sizeof g);
    g.num_sessions = S;
    g.n_kv_heads = H;
    g.ring_frames = RF;
    g.ring_buckets = RB;
    g.d_head = D;
    g.tokens_per_frame = T;
    g.pinned_dilation = PD;
    g.dtype = dt;
    return g;
}

/* Field-wise (struct padding may differ). */
static inline int tu_geom_equal(const rkv_geometry *a, const rkv_geometry *b)
{
    return a->num_sessions == b->num_sessions &&
           a->n_kv_heads == b->n_kv_heads &&
           a->ring_frames == b->ring_frames &&
           a->ring_buckets == b->ring_buckets && a->d_head == b->d_head &&
           a->tokens_per_frame == b->tokens_per_frame &&
           a->pinned_dilation == b->pinned_dilation && a->dtype == b->dtype;
}

static inline int64_t tu_C(const rkv_geometry *g)
{
    return (g->ring_frames + 1) * g->tokens_per_frame;
}
static inline int64_t tu_N(const rkv_geometry *g)
{
    return g->num_sessions * tu_C(g);
}
static inline int64_t tu_L(const rkv_geometry *g)
{
    return g->ring_frames * g->tokens_per_frame;
}
static inline size_t tu_esize(rkv_dtype dt)
{
    return rkv_dtype_size(dt);
}
/* Bytes of one span piece of layer l: C*D elements for K or V, C written bits. */
static inline size_t tu_span_bytes(const rkv_layer *l, rkv_span_part part)
{
    const rkv_geometry *g = rkv_layer_geometry(l);
    return (size_t)tu_C(g) * (part == RKV_SPAN_WRITTEN ? 1 : (size_t)g->d_head * tu_esize(g->dtype));
}
/* SEM 3 step 1: the test oracle's (ring_oracle.h) for geometry g. */
static inline int64_t tu_slot(const rkv_geometry *g, int64_t f)
{
    return rkvt_rule_slot(f, g->pinned_dilation, g->ring_buckets);
}
static inline int tu_write_step(const rkv_geometry *g, int64_t f)
{
    return rkvt_rule_write_step(f, g->pinned_dilation);
}

static inline rkv_layer *tu_layer_new(const rkv_geometry *g)
{
    rkv_layer *l = NULL;
    TU_OK(rkv_layer_create(g, &l));
    assert_non_null(l);
    return l;
}

/* ------------------------------------------------------------------------ */
/* PRNG and frames                                                           */
/* ------------------------------------------------------------------------ */

/* The CPU tests' sequence: rkvt_mix of the state after each step (one
 * golden gamma further along than rkvt_next's; kept so that their inputs
 * stay what they were). */
typedef rkvt_rng tu_rng;

static inline uint64_t tu_next(tu_rng *r)
{
    r->s += 0x9E3779B97F4A7C15ull;
    return rkvt_mix(r->s);
}
/* Uniform in [-1, 1) on a 2^-20 grid, never exactly 0. */
static inline float tu_uniform(tu_rng *r)
{
    return rkvt_unit(tu_next(r));
}
static inline int64_t tu_randint(tu_rng *r, int64_t n)
{
    return (int64_t)(tu_next(r) % (uint64_t)n);
}
static inline void tu_fill_uniform(float *x, size_t n, tu_rng *r)
{
    for (size_t i = 0; i < n; i++) {
        x[i] = tu_uniform(r);
    }
}

/* One frame [2][H][T][D] f32 of values that depend on `key` (e.g. session,
 * frame, pass); distinct keys give different frames. */
static inline void tu_gen_frame(float *out, const rkv_geometry *g,
                                uint64_t key)
{
    size_t n = (size_t)(2 * g->n_kv_heads * g->tokens_per_frame * g->d_head);
    tu_rng r = {rkvt_mix(key * 0x2545F4914F6CDD1Dull + 17)};
    tu_fill_uniform(out, n, &r);
}
static inline uint64_t tu_key(int64_t session, int64_t frame, int64_t pass)
{
    return ((uint64_t)session << 48) ^ ((uint64_t)frame << 8) ^
           (uint64_t)pass ^ 0x5151ull;
}

/* Packs B frames (each [2][H][T][D] f32) into the upsert layout
 * [2][H][B*T][D] f32. */
static inline void tu_pack(float *dst, const float *const *rows, int64_t B,
                           const rkv_geometry *g)
{
    int64_t H = g->n_kv_heads, T = g->tokens_per_frame, D = g->d_head;
    for (int64_t c = 0; c < 2; c++) {
        for (int64_t h = 0; h < H; h++) {
            for (int64_t b = 0; b < B; b++) {
                memcpy(dst + ((c * H + h) * B * T + b * T) * D,
                       rows[b] + (c * H + h) * T * D,
                       (size_t)(T * D) * sizeof(float));
            }
        }
    }
}

/* Converts f32 to the storage dtype with the library (the tests of
 * rkv_convert are in test_dtype.c). Returns a malloc'd buffer. */
static inline void *tu_to_dtype(const float *x, size_t n, rkv_dtype dt)
{
    void *out = tu_xmalloc(n * tu_esize(dt));
    TU_OK(rkv_convert(x, RKV_DTYPE_F32, out, dt, n));
    return out;
}

/* ------------------------------------------------------------------------ */
/* Reading storage (decoding: rkvt_get)                                      */
/* ------------------------------------------------------------------------ */

/* Element (c, h, slot, d) of a layer's storage, as a double. */
static inline double tu_kv_at(const rkv_layer *l, int64_t c, int64_t h,
                              int64_t slot, int64_t d)
{
    const rkv_geometry *g = rkv_layer_geometry(l);
    int64_t N = tu_N(g), H = g->n_kv_heads, D = g->d_head;
    size_t i = (size_t)(((c * H + h) * N + slot) * D + d);
    return rkvt_get(rkv_layer_kv(l), g->dtype, i);
}

/* Compares the T slots starting at `slot0` (all c, h, d) with a frame
 * [2][H][T][D] given in f32 (exactly, after decoding). Returns 1 on match. */
static inline int tu_slots_hold(const rkv_layer *l, int64_t slot0,
                                const float *frame)
{
    const rkv_geometry *g = rkv_layer_geometry(l);
    int64_t H = g->n_kv_heads, T = g->tokens_per_frame, D = g->d_head;
    for (int64_t c = 0; c < 2; c++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t t = 0; t < T; t++)
                for (int64_t d = 0; d < D; d++) {
                    double want = frame[((c * H + h) * T + t) * D + d];
                    if (tu_kv_at(l, c, h, slot0 + t, d) != want) {
                        return 0;
                    }
                }
    return 1;
}
/* 1 when every element of the T slots starting at slot0 is +0 bytes. */
static inline int tu_slots_zero(const rkv_layer *l, int64_t slot0,
                                int64_t nslots)
{
    const rkv_geometry *g = rkv_layer_geometry(l);
    int64_t H = g->n_kv_heads, N = tu_N(g), D = g->d_head;
    size_t es = tu_esize(g->dtype);
    const unsigned char *kv = (const unsigned char *)rkv_layer_kv(l);
    for (int64_t c = 0; c < 2; c++)
        for (int64_t h = 0; h < H; h++) {
            const unsigned char *p =
                kv + (size_t)(((c * H + h) * N + slot0) * D) * es;
            for (size_t i = 0; i < (size_t)(nslots * D) * es; i++) {
                if (p[i]) {
                    return 0;
                }
            }
        }
    return 1;
}

/* Byte copy of the K/V of slots [lo, hi) (all c, h), for comparisons. */
static inline unsigned char *tu_copy_span(const rkv_layer *l, int64_t lo,
                                          int64_t hi, size_t *nbytes)
{
    const rkv_geometry *g = rkv_layer_geometry(l);
    int64_t H = g->n_kv_heads, N = tu_N(g), D = g->d_head;
    size_t es = tu_esize(g->dtype);
    size_t row = (size_t)((hi - lo) * D) * es;
    unsigned char *out = (unsigned char *)tu_xmalloc(2 * (size_t)H * row);
    const unsigned char *kv = (const unsigned char *)rkv_layer_kv(l);
    for (int64_t c = 0; c < 2; c++)
        for (int64_t h = 0; h < H; h++)
            memcpy(out + (size_t)(c * H + h) * row,
                   kv + (size_t)(((c * H + h) * N + lo) * D) * es, row);
    *nbytes = 2 * (size_t)H * row;
    return out;
}

/* Gathers the K/V of the slots with row[j] != 0, in ascending slot order
 * (c, h outermost), as bytes. */
static inline unsigned char *tu_gather_visible(const rkv_layer *l,
                                               const uint8_t *row,
                                               size_t *nbytes)
{
    const rkv_geometry *g = rkv_layer_geometry(l);
    int64_t H = g->n_kv_heads, N = tu_N(g), D = g->d_head;
    size_t es = tu_esize(g->dtype), n = 0;
    int64_t nvis = 0;
    for (int64_t j = 0; j < N; j++)
        nvis += row[j] != 0;
    unsigned char *out =
        (unsigned char *)tu_xmalloc(2 * (size_t)(H * nvis * D) * es);
    const unsigned char *kv = (const unsigned char *)rkv_layer_kv(l);
    for (int64_t c = 0; c < 2; c++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t j = 0; j < N; j++)
                if (row[j]) {
                    memcpy(out + n,
                           kv + (size_t)(((c * H + h) * N + j) * D) * es,
                           (size_t)D * es);
                    n += (size_t)D * es;
                }
    *nbytes = n;
    return out;
}

/* ------------------------------------------------------------------------ */
/* Whole-layer byte snapshots                                                */
/* ------------------------------------------------------------------------ */

typedef struct tu_layer_state {
    size_t kv_bytes;
    int64_t n;
    unsigned char *kv;
    uint8_t *written;
} tu_layer_state;

static inline tu_layer_state tu_layer_save(const rkv_layer *l)
{
    tu_layer_state s;
    s.kv_bytes = rkv_geometry_memory_bytes(rkv_layer_geometry(l));
    s.n = rkv_geometry_total_slots(rkv_layer_geometry(l));
    s.kv = (unsigned char *)tu_xmalloc(s.kv_bytes);
    s.written = (uint8_t *)tu_xmalloc((size_t)s.n);
    memcpy(s.kv, rkv_layer_kv(l), s.kv_bytes);
    memcpy(s.written, rkv_layer_written(l), (size_t)s.n);
    return s;
}
static inline int tu_layer_same(const tu_layer_state *s, const rkv_layer *l)
{
    return rkv_geometry_memory_bytes(rkv_layer_geometry(l)) == s->kv_bytes &&
           rkv_geometry_total_slots(rkv_layer_geometry(l)) == s->n &&
           memcmp(s->kv, rkv_layer_kv(l), s->kv_bytes) == 0 &&
           memcmp(s->written, rkv_layer_written(l), (size_t)s->n) == 0;
}
static inline void tu_layer_state_free(tu_layer_state *s)
{
    free(s->kv);
    free(s->written);
    s->kv = NULL;
    s->written = NULL;
}
/* Two layers of the same geometry hold identical bytes. */
static inline int tu_layers_equal(const rkv_layer *a, const rkv_layer *b)
{
    size_t n = rkv_geometry_memory_bytes(rkv_layer_geometry(a));
    return n == rkv_geometry_memory_bytes(rkv_layer_geometry(b)) &&
           rkv_geometry_total_slots(rkv_layer_geometry(a)) == rkv_geometry_total_slots(rkv_layer_geometry(b)) &&
           memcmp(rkv_layer_kv(a), rkv_layer_kv(b), n) == 0 &&
           memcmp(rkv_layer_written(a), rkv_layer_written(b),
                  (size_t)rkv_geometry_total_slots(rkv_layer_geometry(a))) == 0;
}

/* ------------------------------------------------------------------------ */
/* Visibility oracles (SEM 3, 4)                                             */
/* ------------------------------------------------------------------------ */

/* The bits-and-clock rule: written AND slot of session s, minus the T slots
 * of ring frame ceil(f/PD) mod RB on write steps. Fills all N bytes. */
static inline void tu_bits_rule_row(const rkv_geometry *g,
                                    const uint8_t *written, int64_t s,
                                    int64_t f, uint8_t *row)
{
    int64_t C = tu_C(g), N = tu_N(g), T = g->tokens_per_frame;
    memset(row, 0, (size_t)N);
    for (int64_t j = s * C; j < (s + 1) * C; j++)
        row[j] = written[j] ? 1 : 0;
    if (tu_write_step(g, f)) {
        memset(row + s * C + tu_slot(g, f) * T, 0, (size_t)T);
    }
}

/* The clock-alone rule for a session that committed 0..f-1 in order. */
static inline void tu_clock_rule_row(const rkv_geometry *g, int64_t s,
                                     int64_t f, uint8_t *row)
{
    int64_t C = tu_C(g), T = g->tokens_per_frame;
    int64_t *frames = (int64_t *)tu_xmalloc((size_t)(g->ring_frames + 1) * 8);
    int64_t n = rkvt_rule_clock_frames(g->ring_frames, g->ring_buckets,
                                       g->pinned_dilation, f, frames);
    memset(row, 0, (size_t)tu_N(g));
    for (int64_t i = 0; i < n; i++)
        memset(row + s * C + frames[i] * T, 1, (size_t)T);
    free(frames);
}

/* Row -> frame list (ascending ring frames, scratch = RF last). */
static inline int64_t tu_row_to_frames(const rkv_geometry *g, int64_t s,
                                       const uint8_t *row, int64_t *frames)
{
    int64_t C = tu_C(g), T = g->tokens_per_frame, n = 0;
    for (int64_t r = 0; r <= g->ring_frames; r++)
        if (row[s * C + r * T])
            frames[n++] = r;
    return n;
}

static inline void tu_print_row(const char *what, const rkv_geometry *g,
                                int64_t s, const uint8_t *row)
{
    int64_t frames[4096];
    int64_t n = tu_row_to_frames(g, s, row, frames);
    print_message("  %s:", what);
    for (int64_t i = 0; i < n; i++)
        print_message(" %lld", (long long)frames[i]);
    print_message("\n");
}

/* ------------------------------------------------------------------------ */
/* Attention oracle (SEM 5), float64                                         */
/* ------------------------------------------------------------------------ */

/* out[h][i][d] (Hq x Tq x D doubles) for one row: q is [Hq][Tq][D]
 * doubles, K/V are read from the layer's storage at the slots with
 * row[j] != 0. A row with no visible slot, or whose every score is -inf,
 * gives 0 (the header's definition); +inf or NaN scores give NaN. */
static inline void tu_naive_attend(const rkv_layer *l, int64_t Hq,
                                   int64_t Tq, const double *q,
                                   const uint8_t *row, double scale,
                                   double *out)
{
    const rkv_geometry *g = rkv_layer_geometry(l);
    int64_t H = g->n_kv_heads, N = tu_N(g), D = g->d_head;
    int64_t nvis = 0;
    for (int64_t j = 0; j < N; j++)
        nvis += row[j] != 0;
    int64_t *idx = (int64_t *)tu_xmalloc((size_t)(nvis ? nvis : 1) * 8);
    double *w = (double *)tu_xmalloc((size_t)(nvis ? nvis : 1) * 8);
    nvis = 0;
    for (int64_t j = 0; j < N; j++)
        if (row[j])
            idx[nvis++] = j;
    int64_t group = Hq / H;
    for (int64_t h = 0; h < Hq; h++)
        for (int64_t i = 0; i < Tq; i++)
            rkvt_attend_row(g, rkv_layer_kv(l), h / group, idx, nvis,
                            q + (h * Tq + i) * D, scale, w,
                            out + (h * Tq + i) * D);
    free(idx);
    free(w);
}

static inline int tu_all_finite(const void *x, rkv_dtype dt, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!isfinite(rkvt_get(x, dt, i)))
            return 0;
    return 1;
}

/* ------------------------------------------------------------------------ */
/* Whole-model byte snapshots                                                */
/* ------------------------------------------------------------------------ */

typedef struct tu_model_state {
    int64_t n_layers;
    int64_t n_sessions;
    tu_layer_state *layers;
    rkv_status *clock_st;
    int64_t *clock;
    int64_t offloaded; /* rkv_model_offloaded_count */
} tu_model_state;

static inline tu_model_state tu_model_save(rkv_model *m)
{
    tu_model_state s;
    const rkv_model_config *cfg = rkv_model_get_config(m);
    s.n_layers = cfg->n_layers;
    s.n_sessions = cfg->num_sessions;
    s.layers = (tu_layer_state *)tu_xcalloc((size_t)s.n_layers,
                                            sizeof(tu_layer_state));
    for (int64_t i = 0; i < s.n_layers; i++)
        s.layers[i] = tu_layer_save(rkv_model_layer(m, i));
    s.clock_st = (rkv_status *)tu_xcalloc((size_t)s.n_sessions,
                                          sizeof(rkv_status));
    s.clock = (int64_t *)tu_xcalloc((size_t)s.n_sessions, sizeof(int64_t));
    for (int64_t i = 0; i < s.n_sessions; i++) {
        s.clock[i] = -12345;
        s.clock_st[i] = rkv_model_clock(m, i, &s.clock[i]);
    }
    s.offloaded = rkv_model_offloaded_count(m);
    return s;
}
static inline void tu_model_assert_same(const tu_model_state *s, rkv_model *m,
                                        const char *what)
{
    for (int64_t i = 0; i < s->n_layers; i++)
        if (!tu_layer_same(&s->layers[i], rkv_model_layer(m, i)))
            fail_msg("%s: layer %lld changed by a failed call", what,
                     (long long)i);
    for (int64_t i = 0; i < s->n_sessions; i++) {
        int64_t c = -12345;
        rkv_status st = rkv_model_clock(m, i, &c);
        if (st != s->clock_st[i] || c != s->clock[i])
            fail_msg("%s: clock of session %lld changed (%d,%lld -> %d,%lld)",
                     what, (long long)i, (int)s->clock_st[i],
                     (long long)s->clock[i], (int)st, (long long)c);
    }
    if (rkv_model_offloaded_count(m) != s->offloaded)
        fail_msg("%s: paged-out sessions changed (%lld -> %lld)", what,
                 (long long)s->offloaded, (long long)rkv_model_offloaded_count(m));
}
static inline void tu_model_state_free(tu_model_state *s)
{
    for (int64_t i = 0; i < s->n_layers; i++)
        tu_layer_state_free(&s->layers[i]);
    free(s->layers);
    free(s->clock_st);
    free(s->clock);
}

/* A small model config: n_layers layers with the given RF/RB/PD triples. */
static inline rkv_model_config tu_model_cfg(int64_t n_layers,
                                            const rkv_layer_spec *specs,
                                            int64_t S, int64_t Hq, int64_t H,
                                            int64_t D, int64_t T,
                                            rkv_dtype dt)
{
    rkv_model_config c = RKV_MODEL_CONFIG_INIT;
    snprintf(c.name, sizeof c.name, "test");
    c.n_layers = n_layers;
    for (int64_t i = 0; i < n_layers; i++)
        c.layers[i] = specs[i];
    c.num_sessions = S;
    c.n_q_heads = Hq;
    c.n_kv_heads = H;
    c.d_head = D;
    c.tokens_per_frame = T;
    c.dtype = dt;
    return c;
}

#endif /* RKV_TESTUTIL_H */

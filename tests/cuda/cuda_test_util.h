/*
 * Helpers shared by the GPU programs (tests/cuda/test_cuda_*.c): CUDA and
 * status checks that abort with a message,
 * a PRNG, random buffers in a dtype, decoding, error norms, and a float64
 * attention oracle for single rows written from SEMANTICS 4/5 (independent of
 * both backends). static inline only; plain C11 plus the CUDA runtime API.
 */
#ifndef RKV_CUDA_TEST_UTIL_H
#define RKV_CUDA_TEST_UTIL_H

#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L /* clock_gettime, setenv (include this header first) */
#endif

#include <cuda_runtime_api.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ringkv.h"
#include "ringkv_cuda.h"

#define CT_SKIP 77

#define CK(call)                                                                         \
    do {                                                                                 \
        cudaError_t ck_e_ = (call);                                                      \
        if (ck_e_ != cudaSuccess) {                                                      \
            fprintf(stderr, "%s:%d: %s -> %s (%s)\n", __FILE__, __LINE__, #call,         \
                    cudaGetErrorName(ck_e_), cudaGetErrorString(ck_e_));                 \
            exit(2);                                                                     \
        }                                                                                \
    } while (0)

#define OKR(call)                                                                        \
    do {                                                                                 \
        rkv_status ok_s_ = (call);                                                       \
        if (ok_s_ != RKV_OK) {                                                           \
            fprintf(stderr, "%s:%d: %s -> %s: %s\n", __FILE__, __LINE__, #call,          \
                    rkv_status_str(ok_s_), rkv_last_error());                            \
            exit(2);                                                                     \
        }                                                                                \
    } while (0)

static inline double ct_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static inline void *ct_malloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "out of host memory (%zu bytes)\n", n);
        exit(2);
    }
    return p;
}

static inline void *ct_dmalloc(size_t n) {
    void *p = NULL;
    CK(cudaMalloc(&p, n ? n : 16));
    return p;
}

/* splitmix64 */
typedef struct ct_rng {
    uint64_t s;
} ct_rng;
static inline uint64_t ct_next(ct_rng *r) {
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static inline int64_t ct_randint(ct_rng *r, int64_t n) { return (int64_t)(ct_next(r) % (uint64_t)n); }
/* uniform in [-1, 1), never 0 */
static inline float ct_uniform(ct_rng *r) {
    int64_t k = (int64_t)(ct_next(r) >> 43) - (1 << 20);
    return (float)(k ? k : 1) / (float)(1 << 20);
}

/* n random values (times amp) in dtype into a host buffer. */
static inline void ct_fill(void *dst, rkv_dtype dt, size_t n, float amp, ct_rng *r) {
    float *tmp = (float *)ct_malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) tmp[i] = amp * ct_uniform(r);
    OKR(rkv_convert(tmp, RKV_DTYPE_F32, dst, dt, n));
    free(tmp);
}

/* Element i of a host buffer in dtype, as double. */
static inline double ct_get(const void *base, rkv_dtype dt, size_t i) {
    float f;
    OKR(rkv_convert((const char *)base + i * rkv_dtype_size(dt), dt, &f, RKV_DTYPE_F32, 1));
    return f;
}

/* Decodes n elements of a host buffer into f32. */
static inline float *ct_to_f32(const void *src, rkv_dtype dt, size_t n) {
    float *out = (float *)ct_malloc(n * sizeof(float));
    OKR(rkv_convert(src, dt, out, RKV_DTYPE_F32, n));
    return out;
}

/* ||got - ref|| / ||ref||, both f32; INFINITY when got has a non-finite
 * value (so NaN never passes). */
static inline double ct_rel_err(const float *got, const float *ref, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(got[i])) return INFINITY;
        double d = (double)got[i] - (double)ref[i];
        num += d * d;
        den += (double)ref[i] * ref[i];
    }
    if (den == 0) return num == 0 ? 0 : INFINITY;
    return sqrt(num / den);
}

/* Visible ring frames of session s at clock f from the bits (SEM 4), the
 * scratch (RF) last; returns the count. written: host copy [N]. */
static inline int64_t ct_visible_frames(const rkv_geometry *g, const uint8_t *written, int64_t s,
                                        int64_t f, int64_t *frames) {
    const int64_t T = g->tokens_per_frame, C = (g->ring_frames + 1) * T;
    const int64_t PD = g->pinned_dilation, RB = g->ring_buckets;
    const int64_t hidden = f % PD == 0 ? (f / PD) % RB : -1;
    int64_t n = 0;
    for (int64_t r = 0; r < g->ring_frames; r++)
        if (r != hidden && written[s * C + r * T]) frames[n++] = r;
    frames[n++] = g->ring_frames;
    return n;
}

/* float64 attention for one output row (b, h, i) from host copies of the
 * storage kv [2][H][N][D] (storage dtype) and q [B][Hq][Tq][D] (q dtype),
 * with the bits-and-clock rule of session s at clock f. out: D doubles. */
static inline void ct_oracle_row(const rkv_geometry *g, const void *kv, const uint8_t *written,
                                 const void *q, rkv_dtype q_dtype, int64_t Hq, int64_t Tq,
                                 int64_t b, int64_t h, int64_t i, int64_t s, int64_t f,
                                 double scale, double *out) {
    const int64_t H = g->n_kv_heads, D = g->d_head, T = g->tokens_per_frame;
    const int64_t C = (g->ring_frames + 1) * T, N = g->num_sessions * C, kvh = h / (Hq / H);
    int64_t *frames = (int64_t *)ct_malloc((size_t)(g->ring_frames + 1) * sizeof(int64_t));
    const int64_t nf = ct_visible_frames(g, written, s, f, frames);
    double *qv = (double *)ct_malloc((size_t)D * sizeof(double));
    double *w = (double *)ct_malloc((size_t)(nf * T) * sizeof(double));
    for (int64_t d = 0; d < D; d++) qv[d] = ct_get(q, q_dtype, (size_t)(((b * Hq + h) * Tq + i) * D + d));
    double mx = -INFINITY;
    for (int64_t k = 0; k < nf * T; k++) {
        const int64_t slot = s * C + frames[k / T] * T + k % T;
        double dot = 0;
        for (int64_t d = 0; d < D; d++)
            dot += qv[d] * ct_get(kv, g->dtype, (size_t)((kvh * N + slot) * D + d));
        w[k] = dot * scale;
        if (w[k] > mx) mx = w[k];
    }
    if (mx == -INFINITY) mx = 0; /* every score -inf: the row is 0 (ringkv.h) */
    double sum = 0;
    for (int64_t k = 0; k < nf * T; k++) sum += (w[k] = exp(w[k] - mx));
    for (int64_t d = 0; d < D; d++) out[d] = 0;
    for (int64_t k = 0; k < nf * T; k++) {
        const int64_t slot = s * C + frames[k / T] * T + k % T;
        for (int64_t d = 0; d < D; d++)
            out[d] += (sum != 0 ? w[k] / sum : 0) * ct_get(kv, g->dtype, (size_t)(((H + kvh) * N + slot) * D + d));
    }
    free(frames);
    free(qv);
    free(w);
}

/* 1 when a CUDA device is usable; prints why not otherwise. */
static inline int ct_have_gpu(const char *prog) {
    int n = rkv_cuda_device_count();
    if (n < 1) {
        printf("%s: SKIP (no CUDA device or driver)\n", prog);
        return 0;
    }
    struct cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("%s: device 0: %s, %d SMs, cc %d.%d, %.1f GiB\n", prog, prop.name,
           prop.multiProcessorCount, prop.major, prop.minor,
           (double)prop.totalGlobalMem / (1 << 30));
    return 1;
}

#endif

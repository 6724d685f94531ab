/*
 * Helpers of the GPU programs (tests/cuda/test_cuda_*.c): CUDA and status
 * checks that abort with a message, host and device allocation, random
 * buffers in a dtype, and a float64 attention oracle for single rows. The
 * PRNG, decoding, error norms and the oracles themselves are the test
 * library's (tests/common/rkvt.h, shared with the CPU tests). static inline
 * only; plain C11 plus the CUDA runtime API.
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
#include "ringkv_backend.h"
#include "ringkv_cuda.h"
#include "rkvt.h"

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

/* A layer on GPU 0 whose calls run on `stream`, on a context of its own
 * (rkv_cuda_backend + rkv_layer_create_on); ct_layer_destroy frees both.
 * *out untouched on failure (the context freed). */
static inline rkv_status ct_layer_create(const rkv_geometry *g, cudaStream_t stream,
                                         rkv_layer **out) {
    const rkv_backend_ops *ops = NULL;
    void *ctx = NULL;
    rkv_status st = rkv_cuda_backend(0, (void *)stream, &ops, &ctx);
    if (st != RKV_OK) return st;
    if ((st = rkv_layer_create_on(ops, ctx, g, out)) != RKV_OK) ops->ctx_destroy(ctx);
    return st;
}
static inline void ct_layer_destroy(rkv_layer *l) {
    const rkv_backend_ops *ops = NULL;
    void *ctx = NULL;
    if (!rkv_layer_backend_handle(l, &ops, &ctx)) return;
    rkv_layer_destroy(l);
    ops->ctx_destroy(ctx);
}
/* Whole-layer copies of a GPU layer's storage (kv or written may be NULL),
 * after the whole device's work. */
static inline void ct_layer_download(const rkv_layer *l, void *kv, uint8_t *written) {
    CK(cudaDeviceSynchronize());
    if (kv) CK(cudaMemcpy(kv, rkv_layer_kv(l), rkv_geometry_memory_bytes(rkv_layer_geometry(l)), cudaMemcpyDeviceToHost));
    if (written)
        CK(cudaMemcpy(written, rkv_layer_written(l), (size_t)rkv_geometry_total_slots(rkv_layer_geometry(l)),
                      cudaMemcpyDeviceToHost));
}
static inline void ct_layer_upload(rkv_layer *l, const void *kv, const uint8_t *written) {
    CK(cudaDeviceSynchronize());
    if (kv)
        CK(cudaMemcpy((void *)rkv_layer_kv(l), kv, rkv_geometry_memory_bytes(rkv_layer_geometry(l)),
                      cudaMemcpyHostToDevice));
    if (written)
        CK(cudaMemcpy((void *)rkv_layer_written(l), written, (size_t)rkv_geometry_total_slots(rkv_layer_geometry(l)),
                      cudaMemcpyHostToDevice));
    CK(cudaDeviceSynchronize());
}

static inline void *ct_dmalloc(size_t n) {
    void *p = NULL;
    CK(cudaMalloc(&p, n ? n : 16));
    return p;
}

/* n random values (times amp) in dtype into a host buffer (rkvt_fill). */
static inline void ct_fill(void *dst, rkv_dtype dt, size_t n, float amp, rkvt_rng *r) {
    OKR(rkvt_fill(dst, dt, n, amp, r));
}

/* Decodes n elements of a host buffer into f32. */
static inline float *ct_to_f32(const void *src, rkv_dtype dt, size_t n) {
    float *out = (float *)ct_malloc(n * sizeof(float));
    OKR(rkv_convert(src, dt, out, RKV_DTYPE_F32, n));
    return out;
}

/* float64 attention for one output row (b, h, i) from host copies of the
 * storage kv [2][H][N][D] (storage dtype) and q [B][Hq][Tq][D] (q dtype),
 * with the bits-and-clock rule of session s at clock f. out: D doubles. */
static inline void ct_oracle_row(const rkv_geometry *g, const void *kv, const uint8_t *written,
                                 const void *q, rkv_dtype q_dtype, int64_t Hq, int64_t Tq,
                                 int64_t b, int64_t h, int64_t i, int64_t s, int64_t f,
                                 double scale, double *out) {
    const int64_t H = g->n_kv_heads, D = g->d_head, T = g->tokens_per_frame;
    const int64_t C = (g->ring_frames + 1) * T, kvh = h / (Hq / H);
    int64_t *frames = (int64_t *)ct_malloc((size_t)(g->ring_frames + 1) * sizeof(int64_t));
    const int64_t nf = rkvt_visible_frames(g, written, s, f, frames);
    int64_t *slots = (int64_t *)ct_malloc((size_t)(nf * T) * sizeof(int64_t));
    for (int64_t k = 0; k < nf * T; k++) slots[k] = s * C + frames[k / T] * T + k % T;
    double *qv = (double *)ct_malloc((size_t)D * sizeof(double));
    double *w = (double *)ct_malloc((size_t)(nf * T) * sizeof(double));
    for (int64_t d = 0; d < D; d++)
        qv[d] = rkvt_get(q, q_dtype, (size_t)(((b * Hq + h) * Tq + i) * D + d));
    rkvt_attend_row(g, kv, kvh, slots, nf * T, qv, scale, w, out);
    free(frames);
    free(slots);
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

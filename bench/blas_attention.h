/* OpenBLAS-based ring attention, a peer measured by `ringkv bench` (built
 * with RKV_HAVE_OPENBLAS: the top-level build always; the GPU check's build
 * of the command goes without). */
#ifndef RKV_BENCH_BLAS_ATTENTION_H
#define RKV_BENCH_BLAS_ATTENTION_H

#include <stdint.h>

#include "ringkv.h"

/* Attention of one session row at clock frame_pos over a f32 layer, with the
 * bits-and-clock visibility rule and scale 1/sqrt(D): q and out are
 * [Hq][T][D] f32 host buffers. Runs on `threads` threads (1..64) created
 * for the call. 0 on success, -1 on bad arguments or allocation failure. */
int blas_attention(const rkv_layer *layer, int64_t session, int64_t frame_pos, int64_t n_q_heads,
                   const float *q, float *out, int threads);

#endif

/* The CUDA path of `ringkv rollout --backend cuda` (docs/rollout.md).
 *
 * The rollout stays host-driven: every layer of the model is an
 * rkv_cuda_layer on GPU 0 (include/ringkv_cuda.h), the tool keeps the frame
 * clocks on the host (the rule of rkv_model_begin_frame: the next frame is
 * the last committed + 1) and copies them to the device once per frame; the
 * keys/values of a pass and the queries of a frame are built on the host and
 * uploaded (one copy per pass: every layer reads the same tokens). Each layer
 * then runs rkv_cuda_layer_upsert and rkv_cuda_layer_attend on one stream and
 * writes its own device output buffer, so a pass is timed from the first
 * enqueue to the stream's completion and the outputs the rollout reads (the
 * recall layers on the first pass, every layer on the last frame) are copied
 * back afterwards.
 *
 * Queries go to the device in the storage dtype when that is bf16 or f16
 * (the tensor-core kernel's input), in f32 otherwise (the generic kernel);
 * outputs are f32. The outputs are therefore close to, not bit-identical
 * with, the CPU backend's: a digest of one backend is compared only with
 * digests of the same backend.
 *
 * Built only with CUDA (RKV_HAVE_CUDA, defined by linking ringkv_cuda);
 * otherwise rollout_gpu_built() is 0 and rollout_gpu_create fails. Not yet
 * run on a GPU (this tool's CUDA path was written on a machine without one). */
#ifndef RKV_TOOLS_ROLLOUT_GPU_H
#define RKV_TOOLS_ROLLOUT_GPU_H

#include <stddef.h>
#include <stdint.h>

#include "ringkv.h"

typedef struct rollout_gpu rollout_gpu;

/* 1 when this build has the CUDA backend, else 0. */
int rollout_gpu_built(void);

/* Creates cfg's layers with `sessions` sessions on GPU 0 (sessions 0..B-1
 * stream side by side), and the device buffers. NULL with a message in err
 * (no CUDA in this build; no GPU: the library's message; out of memory). */
rollout_gpu *rollout_gpu_create(const rkv_model_config *cfg, int64_t sessions, char *err,
                                size_t err_len);
void rollout_gpu_destroy(rollout_gpu *g);

/* Resident K/V bytes of every layer on the GPU. */
size_t rollout_gpu_memory_bytes(const rollout_gpu *g);
/* The attention plan of layer `layer` (rkv_cuda_attention_describe). */
void rollout_gpu_describe(const rollout_gpu *g, int64_t layer, char *buf, size_t len);

/* Begins frame f for every session: checks the clock rule on the host
 * (f = last committed + 1, any f before the first frame) and uploads the
 * clocks. 0, or -1 with a message. */
int rollout_gpu_begin_frame(rollout_gpu *g, int64_t f, char *err, size_t err_len);
/* Uploads the frame's queries, f32 [B][Hq][T][D] (converted to the query
 * dtype first). 0 or -1. */
int rollout_gpu_set_queries(rollout_gpu *g, const float *q, char *err, size_t err_len);
/* Uploads the pass's keys and values, [2][H][B*T][D] in the storage dtype. */
int rollout_gpu_set_kv(rollout_gpu *g, const void *kv, char *err, size_t err_len);
/* Enqueues the upsert and the attention of layer `layer` (all sessions). */
int rollout_gpu_layer(rollout_gpu *g, int64_t layer, int commit, char *err, size_t err_len);
/* Waits for everything enqueued; when the pass committed, the frame ends and
 * the clock advances (commit = 1). */
int rollout_gpu_finish_pass(rollout_gpu *g, int commit, char *err, size_t err_len);
/* Copies layer `layer`'s last attention output, f32 [B][Hq][T][D], to out. */
int rollout_gpu_output(rollout_gpu *g, int64_t layer, float *out, char *err, size_t err_len);
/* rkv_cuda_layer_check on every layer: device-side row errors. 0 or -1. */
int rollout_gpu_check(rollout_gpu *g, char *err, size_t err_len);

#endif

/*
 * ringkv CUDA backend: what is CUDA's own. A layer on the GPU is an
 * rkv_layer (ringkv.h) made on the CUDA backend's table and a context
 * (rkv_cuda_backend, then rkv_layer_create_on or rkv_layer_wrap in
 * ringkv_backend.h); upsert, attend, reset, spans, views and the error
 * check are the one set of rkv_layer_* calls of ringkv.h, and a whole model
 * is rkv_model_create_cuda. Here: the device count, the table and its
 * context (device, stream), the attention plan's description, the
 * device-side clock advance. Built only when CMake finds nvcc (library
 * ringkv_cuda); the core header ringkv.h stays free of CUDA types.
 * Status: compiled and tested on the host and on the CPU executor
 * (docs/cuda.md); the CUDA backend has not yet run on a GPU (no GPU run is
 * recorded: bench/gpu/h200.jsonl, docs/cuda.md).
 *
 * Conventions (in addition to those at the top of ringkv.h):
 *  - This header includes no CUDA header. `void *stream` is a cudaStream_t
 *    (NULL = the legacy default stream); pass `(void *)my_stream`.
 *  - BACKEND memory of a CUDA layer is device memory of its context's GPU
 *    (plain cudaMalloc, never managed memory).
 *  - A context lives on one GPU. Every call on its layers must be made
 *    while that GPU is the calling thread's current device (cudaSetDevice);
 *    the calls check it (RKV_ERR_STATE otherwise) and never change it.
 *  - "Capture-safe" calls (ringkv_backend.h's term: rkv_layer_upsert,
 *    _attend, _visible_row and _reset on a CUDA layer, the clock advance)
 *    read session ids and clocks from DEVICE memory, so a whole schedule (24
 *    layers x 5 passes) can be captured into one CUDA graph and replayed
 *    with only the device-side clocks changing. The core checks shapes,
 *    dtypes and pointers on the host, once; the VALUES behind device
 *    pointers are checked by every block of the kernel before it writes
 *    anything: an invalid row (session out of [0, S), two rows with one
 *    session, clock < 0) makes the whole call write nothing and records a
 *    device error that rkv_layer_check() reports (and clears) later.
 *  - CUDA failures (a launch that fails, an allocation that fails, a copy
 *    that fails) are RKV_ERR_NO_MEMORY for out-of-memory and RKV_ERR_STATE
 *    otherwise, with the CUDA error's name in rkv_last_error().
 */
#ifndef RINGKV_CUDA_H
#define RINGKV_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "ringkv.h"
#include "ringkv_backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Number of CUDA devices the runtime sees; 0 when there is none, no driver,
 * or the runtime fails to initialize (never an error). Not capture-safe. */
RKV_API int rkv_cuda_device_count(void);

/* Largest batch one upsert or attention call accepts (each block of the
 * kernels checks every row's session and clock before it writes). */
#define RKV_CUDA_MAX_BATCH 1024

/* The CUDA backend's table (static) and a context on GPU `device` whose
 * operations run on `stream` (a cudaStream_t of that device, NULL = the
 * legacy default stream; it must outlive the context): into *ops and *ctx.
 * Reads the GPU's properties and raises the attention kernels' shared
 * memory limits (once per process and device; RKV_CUDA_ATTN_KERNEL and
 * RKV_CUDA_ATTN_STAGES are read per context), allocates the context's pinned
 * staging ring and its layers' error words. Makes `device` current. The
 * caller owns the context: (*ops)->ctx_destroy(*ctx) after the last layer
 * on it is destroyed (rkv_model_create_with_backend takes it over). Layers
 * on it: rkv_layer_create_on (K/V zeroed, written bits armed: SEM 2) and
 * rkv_layer_wrap (device storage the caller owns, e.g. torch CUDA tensors:
 * kv and written 16-byte aligned, an error word 4-byte aligned, zeroed).
 * A layer's calls run on the context's stream: for another stream, wrap
 * the same storage (and error word) on a context of that stream.
 * Errors: RKV_ERR_NULL, RKV_ERR_RANGE (no such device: with no GPU or no
 * driver the runtime sees 0), CUDA failures (conventions above: pinned or
 * device memory too). Not capture-safe. */
RKV_API rkv_status rkv_cuda_backend(int device, void *stream, const rkv_backend_ops **ops,
                                    void **ctx);

/* Writes a one-line description of the plan rkv_layer_attend would use on
 * this CUDA layer for these arguments ("mma bf16 d64 bm128 bn64 stages2
 * grid 8x16x1 splits 2 smem 49216 ...") into buf (NUL-terminated,
 * truncated to buf_size). Kernels (docs/cuda.md): bf16 or f16 storage with
 * q in it, D 64 or 128, visible NULL and out in q's dtype or f32 run the
 * tensor-core kernel (mma.sync, f32 accumulators, invisible frames skipped
 * whole, the GQA group's query heads sharing each K/V tile); everything
 * else (f32 storage, other D up to 256, explicit visibility rows, mixed
 * dtypes) a generic f32 kernel. With RKV_CUDA_ATTN_KERNEL=wgmma set when
 * the context is made, D 64 on a compute capability 9.x GPU runs the
 * Hopper kernel instead (wgmma, sm_90a; opt-in, docs/cuda.md says how far
 * it is verified; the description starts "wgmma" then);
 * RKV_CUDA_ATTN_STAGES=3 deepens the mma kernel's pipeline (D 64). For
 * logs and benchmarks; host only, no CUDA call. Errors: RKV_ERR_NULL,
 * RKV_ERR_INVALID_ARG (not a CUDA layer; rkv_layer_attend's checks),
 * RKV_ERR_DTYPE, RKV_ERR_OVERFLOW. */
RKV_API rkv_status rkv_cuda_attention_describe(const rkv_layer *layer,
                                               const rkv_attention_args *args, char *buf,
                                               size_t buf_size);

/* ------------------------------------------------------------------------ */
/* Device-side clocks                                                        */
/* ------------------------------------------------------------------------ */

/* frame_pos[b] += delta for b in [0, batch) on `stream` (DEVICE int64
 * array): lets a captured frame end by advancing its own clocks, so a graph
 * is replayed frame after frame with no host copy. The host-side clock rule
 * (SEM 6: the next frame is last committed + 1) stays the caller's: track
 * it on the host and check it before each replay. Capture-safe. Errors:
 * RKV_ERR_NULL, RKV_ERR_INVALID_ARG (batch < 1), RKV_ERR_STATE. */
RKV_API rkv_status rkv_cuda_clock_advance(int64_t *frame_pos, int64_t batch, int64_t delta, void *stream);

/* ------------------------------------------------------------------------ */
/* A whole model on the GPU                                                 */
/* ------------------------------------------------------------------------ */

/* Creates an rkv_model (ringkv.h) on the CUDA backend: GPU `device`, every
 * operation enqueued on `stream` (rkv_cuda_backend's context, owned by the
 * model).
 * Every rkv_model_* call of ringkv.h works on it, with these differences:
 *  - BACKEND memory (kv, q and out of the per-pass calls, 16-byte aligned)
 *    is on `device`, current for every call (conventions above; this call
 *    makes it current). Host arrays stay host arrays (begin_frame's
 *    session_idx / frame_pos, snapshot buffers, paths).
 *  - The per-pass calls only enqueue kernels: read `out` after
 *    cudaStreamSynchronize(stream) or rkv_model_synchronize, which also
 *    reports a failure recorded on the device. Snapshots, forks, loads,
 *    saves and the session calls order themselves after the work already
 *    enqueued on `stream` (spans are copied through host buffers, read and
 *    written synchronously).
 *  - B of one frame is at most RKV_CUDA_MAX_BATCH (begin_frame refuses
 *    more with RKV_ERR_INVALID_ARG).
 * The model owns, in device memory: the layers, the batch buffers (2 * S
 * int64: session ids, then clocks, written by begin_frame) and the
 * attention workspace (sized here for B = 1..min(S, RKV_CUDA_MAX_BATCH)
 * rows of n_q_heads heads and tokens_per_frame queries), and in pinned host
 * memory a small ring of staging slots for begin_frame's copies.
 *
 * The capture contract is ringkv.h's ("Capture contract"), on `stream`:
 *
 *   rkv_model_begin_frame(m, B, sessions, clocks);        // frame f0, host
 *   cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal);
 *   for each pass, for each layer:
 *       rkv_model_frame_step(m, layer, kv[layer], dtype, pass == last, &args);
 *   cudaStreamEndCapture(stream, &graph);  // the host saw the commit pass:
 *   cudaGraphInstantiate(&exec, graph, 0); // frame f0 ended on the host
 *   cudaGraphLaunch(exec, stream);         // runs frame f0
 *   for each next frame f:                 // clocks[b] = previous + 1
 *       rkv_model_begin_frame(m, B, sessions, clocks);  // host checks + copy
 *       cudaGraphLaunch(exec, stream);
 *       rkv_model_end_frame(m);            // host: the clocks are committed
 *
 * Launch the graph on `stream` (or order it after the copy). begin_frame
 * refuses to run while `stream` is being captured (its copy must not be
 * recorded: a replay would copy a stale staging slot).
 *
 * Errors (nothing allocated, *out untouched): an invalid config (as
 * rkv_model_create), then rkv_cuda_backend's. Not capture-safe. */
RKV_API rkv_status rkv_model_create_cuda(const rkv_model_config *cfg, int device, void *stream,
                                         rkv_model **out);

/* Writes a one-line description of the plan rkv_model_frame_attend (and
 * rkv_model_attend, _step) of a CUDA model would use on layer `layer` for a
 * batch of B rows and these arguments -- the kernel, its tiles, grid, key
 * splits (with the model's own workspace) -- into buf (NUL-terminated,
 * truncated to buf_size), as rkv_cuda_attention_describe does for a layer
 * call. args: n_q_heads (the model's), n_queries, q_dtype, out_dtype, scale,
 * and q / out as the call would get them (DEVICE pointers, checked for NULL
 * and 16-byte alignment only); batch, session_idx, frame_pos, visible and
 * pool are ignored. B: 1..min(S, RKV_CUDA_MAX_BATCH) (no batch need be
 * current). For logs and benchmarks. Host only: no CUDA call.
 * Errors: RKV_ERR_NULL (model, args, buf), RKV_ERR_RANGE (layer),
 * RKV_ERR_INVALID_ARG (not a CUDA model; B; n_q_heads not the model's; and
 * rkv_cuda_attention_describe's checks), RKV_ERR_DTYPE. */
RKV_API rkv_status rkv_model_cuda_attention_describe(const rkv_model *model, int64_t layer, int64_t batch,
                                                     const rkv_attention_args *args, char *buf,
                                                     size_t buf_size);

#ifdef __cplusplus
}
#endif

#endif /* RINGKV_CUDA_H */

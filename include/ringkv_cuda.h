/*
 * ringkv CUDA backend: one layer's ring in device memory, a fused upsert and
 * a fused ring attention. Built only when CMake finds nvcc
 * (library ringkv_cuda); the core header ringkv.h stays free of CUDA types.
 * Status: compiled and tested on the host (the planning, the host-side
 * checks); the CUDA backend has not yet run on a GPU (no GPU run is
 * recorded: bench/gpu/h200.jsonl, docs/cuda.md).
 *
 * Conventions (in addition to those at the top of ringkv.h):
 *  - This header includes no CUDA header. `void *stream` is a cudaStream_t
 *    (NULL = the legacy default stream); pass `(void *)my_stream`.
 *  - Pointers marked DEVICE are device memory of the layer's GPU (plain
 *    cudaMalloc, never managed memory). Pointers marked HOST are host memory.
 *  - The layer lives on one GPU, chosen at creation. Every call must be made
 *    while that GPU is the calling thread's current device (cudaSetDevice);
 *    the per-pass calls check it (RKV_ERR_STATE otherwise) and never change
 *    it.
 *  - "Capture-safe" calls (the per-pass calls: upsert, attend, reset, clock
 *    advance) only enqueue kernels on `stream`: they never allocate, never
 *    synchronize, never copy from the host, and read session ids and clocks
 *    from DEVICE memory, so a whole schedule (24 layers x 5 passes) can be
 *    captured into one CUDA graph and replayed frame after frame with only
 *    the device-side clocks changing. Their host-side checks cover the
 *    shapes, dtypes and pointers they are given; the VALUES behind device
 *    pointers (session ids, clocks) are checked on the device, by every
 *    block of the kernel before it writes anything: if any row is invalid
 *    (session out of [0, S), two rows with one session, clock < 0) the whole
 *    call writes nothing and records a device error that
 *    rkv_cuda_layer_check() reports (and clears) later. A failed host check
 *    enqueues nothing.
 *  - CUDA failures (a launch that fails, an allocation that fails, a copy
 *    that fails) are RKV_ERR_NO_MEMORY for out-of-memory and RKV_ERR_STATE
 *    otherwise, with the CUDA error's name in rkv_last_error().
 *  - Calls that are NOT capture-safe say so: create/destroy (allocate and
 *    free), upload/download (synchronous copies), check (synchronizes).
 */
#ifndef RINGKV_CUDA_H
#define RINGKV_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "ringkv.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Number of CUDA devices the runtime sees; 0 when there is none, no driver,
 * or the runtime fails to initialize (never an error). Not capture-safe. */
RKV_API int rkv_cuda_device_count(void);

/* Largest batch one upsert or attention call accepts (each block of the
 * kernels checks every row's session and clock before it writes). */
#define RKV_CUDA_MAX_BATCH 1024

/* ------------------------------------------------------------------------ */
/* One layer's ring on the GPU (SEM 2)                                       */
/* ------------------------------------------------------------------------ */

typedef struct rkv_cuda_layer rkv_cuda_layer;

/* Allocates a layer on GPU `device`: K/V storage [2][H][N][D] in g->dtype
 * (zeroed), the written bitmap [N] (ring slots 0, scratch slots 1) and a
 * device error word; the same layout as the CPU backend (SEM 2). Makes
 * `device` current on the calling thread. *out receives the handle (owned
 * by the caller; free with rkv_cuda_layer_destroy). Errors: invalid geometry
 * (rkv_geometry_check), RKV_ERR_NULL, RKV_ERR_RANGE (no such device),
 * RKV_ERR_NO_MEMORY, RKV_ERR_STATE (other CUDA failure); *out untouched on
 * failure. Not capture-safe (allocates, synchronizes). */
RKV_API rkv_status rkv_cuda_layer_create(const rkv_geometry *g, int device, rkv_cuda_layer **out);
/* Frees everything (synchronizes the device first). NULL is a no-op. */
RKV_API void rkv_cuda_layer_destroy(rkv_cuda_layer *layer);

/* The layer's geometry (HOST pointer valid for the layer's lifetime). */
RKV_API const rkv_geometry *rkv_cuda_layer_geometry(const rkv_cuda_layer *layer);
RKV_API int rkv_cuda_layer_device(const rkv_cuda_layer *layer);
RKV_API int64_t rkv_cuda_layer_total_slots(const rkv_cuda_layer *layer);
/* 2*H*N*D*sizeof(dtype): resident K/V bytes on the GPU (SEM 2). */
RKV_API size_t rkv_cuda_layer_memory_bytes(const rkv_cuda_layer *layer);

/* DEVICE pointers owned by the layer, valid until destroy, read without
 * copying: [2][H][N][D] storage (K = first half, V = second half), and the
 * written bitmap [N] (1 = written). */
RKV_API void *rkv_cuda_layer_kv(const rkv_cuda_layer *layer);
RKV_API uint8_t *rkv_cuda_layer_written(const rkv_cuda_layer *layer);

/* Synchronous whole-layer copies, for tests, snapshots and the bench
 * (not capture-safe; they synchronize the whole device before and after). kv: HOST [2][H][N][D] in the storage dtype
 * (memory_bytes bytes); written: HOST [N] bytes (nonzero = written; stored
 * as 0/1). Either pointer may be NULL to skip that part, not both. */
RKV_API rkv_status rkv_cuda_layer_upload(rkv_cuda_layer *layer, const void *kv, const uint8_t *written);
RKV_API rkv_status rkv_cuda_layer_download(const rkv_cuda_layer *layer, void *kv, uint8_t *written);

/* Drops one session's state on `stream` (SEM 6): its K/V span zeroed, its
 * ring slots unwritten, its scratch re-armed. `session` is a host value
 * (session lifecycle is host business, like the reference's reset).
 * Capture-safe. Errors: RKV_ERR_NULL, RKV_ERR_RANGE. */
RKV_API rkv_status rkv_cuda_layer_reset(rkv_cuda_layer *layer, int64_t session, void *stream);

/* Reads and clears the layer's device error word (synchronizes `stream`).
 * RKV_OK when no capture-safe call since the last check found an invalid
 * row; else the first one recorded: RKV_ERR_RANGE (session out of range),
 * RKV_ERR_INVALID_ARG (duplicate session within a call, or clock < 0), with
 * the operation and row in rkv_last_error(). Not capture-safe. */
RKV_API rkv_status rkv_cuda_layer_check(rkv_cuda_layer *layer, void *stream);

/* One session's span, piece by piece (rkv_layer_read_span and friends in
 * ringkv.h: the same pieces, sizes and checks; forks and snapshots of a
 * CUDA model go through these). dst / src are HOST buffers of
 * rkv_cuda_layer_span_bytes bytes (pageable or pinned). read and write copy
 * on `stream` after the work already enqueued there and synchronize it
 * before returning (not capture-safe); copy (device to device, every piece)
 * is only enqueued on `stream` and is capture-safe. Errors: RKV_ERR_NULL,
 * RKV_ERR_RANGE (session, head), RKV_ERR_INVALID_ARG (part; head != 0 for
 * the written bits; written bits that break the invariant, naming the
 * slot, checked on the host before anything is copied), RKV_ERR_STATE
 * (wrong current device, CUDA failure). */
RKV_API size_t rkv_cuda_layer_span_bytes(const rkv_cuda_layer *layer, rkv_span_part part);
RKV_API rkv_status rkv_cuda_layer_read_span(const rkv_cuda_layer *layer, int64_t session,
                                            rkv_span_part part, int64_t head, void *dst, void *stream);
RKV_API rkv_status rkv_cuda_layer_write_span(rkv_cuda_layer *layer, int64_t session, rkv_span_part part,
                                             int64_t head, const void *src, void *stream);
RKV_API rkv_status rkv_cuda_layer_copy_span(rkv_cuda_layer *layer, int64_t src_session,
                                            int64_t dst_session, void *stream);

/* ------------------------------------------------------------------------ */
/* Fused upsert (SEM 3)                                                      */
/* ------------------------------------------------------------------------ */

/* One upsert of SEM 3 for B session rows in ONE kernel launch: scratch
 * write, visibility row (optional), commit and written bits for every row.
 *  kv:          DEVICE [2][H][B*T][D] in kv_dtype (== storage dtype), tokens
 *               ordered (row b, token t); 16-byte aligned.
 *  frame_pos:   DEVICE [B] int64 clocks (each >= 0; checked on the device).
 *  session_idx: DEVICE [B] int64 sessions (in [0, S), distinct; checked on
 *               the device).
 *  commit:      host flag, as in rkv_layer_upsert: on write steps
 *               (f mod PD == 0) the frame goes to ring slot ceil(f/PD) mod RB
 *               and its written bits are set; otherwise the scratch already
 *               holds it (the reference rewrites the same bytes; this kernel
 *               writes them once).
 *  visible:     NULL, or (B == 1 only) DEVICE [N] bytes, 16-byte aligned,
 *               that receive the reference's visibility row (written AND
 *               slot of the row's session, minus the T slots of the ring
 *               frame on write steps; computed as before the commit). Owned
 *               by the caller; the layer never touches it again.
 * Capture-safe. Host errors (nothing enqueued): RKV_ERR_NULL,
 * RKV_ERR_INVALID_ARG (B outside 1..min(S, RKV_CUDA_MAX_BATCH), visible with
 * B > 1, misaligned pointer), RKV_ERR_DTYPE, RKV_ERR_STATE (wrong current
 * device, launch failure). */
RKV_API rkv_status rkv_cuda_layer_upsert(rkv_cuda_layer *layer, const void *kv, rkv_dtype kv_dtype,
                                         int64_t batch, const int64_t *frame_pos,
                                         const int64_t *session_idx, int commit, uint8_t *visible,
                                         void *stream);

/* ------------------------------------------------------------------------ */
/* Fused ring attention (SEM 4, 5)                                           */
/* ------------------------------------------------------------------------ */

/* Grows: struct_size first (ringkv.h, "Structs that grow"). Start from
 * RKV_CUDA_ATTENTION_ARGS_INIT; members left 0 take their defaults. */
typedef struct rkv_cuda_attention_args {
    size_t struct_size; /* sizeof(rkv_cuda_attention_args)                */
    int64_t batch;     /* B session rows, 1..min(S, RKV_CUDA_MAX_BATCH)     */
    int64_t n_q_heads; /* Hq: a positive multiple of H; head h reads KV head
                          h / (Hq/H) (GQA)                                   */
    int64_t n_queries; /* Tq queries per row; 0 means tokens_per_frame      */
    const void *q;     /* DEVICE [B][Hq][Tq][D] in q_dtype, 16-byte aligned  */
    rkv_dtype q_dtype;
    void *out;         /* DEVICE [B][Hq][Tq][D] in out_dtype, 16-byte
                          aligned, written whole; must not overlap q        */
    rkv_dtype out_dtype;
    const int64_t *session_idx; /* DEVICE [B] sessions (checked on device)  */
    const int64_t *frame_pos;   /* DEVICE [B] row clocks (checked on device);
                                   ignored (may be NULL) when visible != NULL */
    const uint8_t *visible;     /* NULL: the bits-and-clock rule of SEM 4,
                                   computed inside the kernel from the
                                   written bits and the row's clock (the
                                   engine path). Else DEVICE [B][N] per-slot
                                   rows (the reference's fallback consumer;
                                   slow generic kernel).                    */
    float scale;       /* softmax scale; 0 means 1/sqrt(D)                   */
    void *workspace;   /* DEVICE scratch for splitting the keys of a row
                          over several blocks when the grid would otherwise
                          leave the GPU idle (B = 1 at 720P), or NULL. See
                          rkv_cuda_attention_workspace_bytes; a smaller (or
                          NULL) workspace only means fewer splits. Must not
                          be used by another call in flight at the same time. */
    size_t workspace_bytes;
} rkv_cuda_attention_args;
#define RKV_CUDA_ATTENTION_ARGS_INIT RKV__SIZED_INIT(rkv_cuda_attention_args)

/* out[b,h,i,:] = sum_j softmax_j(scale * q[b,h,i,:] . K[kvh,j,:]) V[kvh,j,:]
 * over the visible slots j of row b (no causal mask, f32 accumulation), as
 * rkv_layer_attend computes it on the CPU, with the same definitions for
 * scores that are not plain numbers (ringkv.h): a -inf score weighs 0, a row
 * whose every visible key scores -inf gives 0 (in every kernel, key splits
 * included), a +inf or NaN score makes the row NaN.
 * Kernels: storage bf16 or f16 with q_dtype == storage dtype, D 64 or 128,
 * visible == NULL and out_dtype in {q_dtype, f32} run the tensor-core kernel
 * (mma.sync m16n8k16, f32 accumulators, online softmax, cp.async double
 * buffering, invisible frames skipped whole, the GQA group's query heads
 * sharing each K/V tile); everything else (f32 storage, other D up to 256,
 * explicit visibility rows, mixed dtypes) runs a generic f32 kernel.
 * With the environment variable RKV_CUDA_ATTN_KERNEL=wgmma set when the
 * layer is created, D 64 on a compute capability 9.x GPU runs the Hopper
 * kernel instead (wgmma.mma_async from 128-byte-swizzled shared memory,
 * sm_90a code). It is opt-in (docs/cuda.md says how far it is verified); the
 * plan string of rkv_cuda_attention_describe starts "wgmma" when it runs.
 * RKV_CUDA_ATTN_STAGES=3 deepens the mma kernel's pipeline (D 64).
 * Capture-safe. Host errors (nothing enqueued): RKV_ERR_NULL,
 * RKV_ERR_INVALID_ARG (B, Hq, Tq, scale, alignment, D > 256 on the generic
 * kernel), RKV_ERR_DTYPE, RKV_ERR_OVERFLOW, RKV_ERR_STATE. */
RKV_API rkv_status rkv_cuda_layer_attend(const rkv_cuda_layer *layer, const rkv_cuda_attention_args *args,
                                         void *stream);

/* Workspace bytes that let rkv_cuda_layer_attend use its preferred key
 * split for these arguments on this layer's GPU (0 when it does not split).
 * Depends only on the geometry, B, Hq, Tq, D and the GPU. 0 for invalid
 * arguments. Host only, no CUDA call. */
RKV_API size_t rkv_cuda_attention_workspace_bytes(const rkv_cuda_layer *layer,
                                                  const rkv_cuda_attention_args *args);

/* Writes a one-line description of the plan rkv_cuda_layer_attend would
 * use for these arguments ("mma bf16 d64 bm128 bn64 stages2 grid 8x16x1
 * splits 2 smem 49216 ...") into buf (NUL-terminated, truncated to
 * buf_size). For logs and benchmarks. Errors as rkv_cuda_layer_attend's
 * host checks. */
RKV_API rkv_status rkv_cuda_attention_describe(const rkv_cuda_layer *layer,
                                               const rkv_cuda_attention_args *args, char *buf,
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
/* Rings over caller-owned device storage: views (SEM 2-5)                   */
/* ------------------------------------------------------------------------ */

/* The CUDA counterpart of rkv_ring_view (ringkv.h): a ring whose DEVICE
 * storage the caller owns (e.g. torch CUDA tensors handed to a custom op,
 * or functionalized copies of them), with the layout of an rkv_cuda_layer's.
 * Every view call reads and writes exactly the buffers named here.
 *  g:       the geometry (checked by every call, as rkv_geometry_check).
 *  device:  the GPU holding the buffers; it must be the calling thread's
 *           current device, and rkv_cuda_ring_prepare(device) must have
 *           been called once in this process (RKV_ERR_STATE otherwise).
 *  kv:      DEVICE [2][H][N][D] in g.dtype, 16-byte aligned.
 *  written: DEVICE [N] bytes (0/1, scratch slots 1, as rkv_cuda_layer_create
 *           arms them; not checked), 16-byte aligned.
 *  error:   DEVICE int, 4-byte aligned: the device error word the kernels
 *           set when a row's session or clock (device values) is invalid
 *           (zero it before first use; rkv_cuda_ring_check reads and
 *           clears it).
 * All caller-owned; ringkv never frees, keeps or reallocates them. A view
 * holds no state (build one per call). The per-pass calls below are
 * capture-safe as their layer counterparts: they enqueue on `stream` only,
 * never allocate, synchronize or copy from the host. Their host checks and
 * messages are those of the layer call named (messages carry that name),
 * plus the view's own (NULL pointers, geometry, device, alignment). */
/* Frozen (a later change is rkv_cuda_ring_view_v2). */
typedef struct rkv_cuda_ring_view {
    rkv_geometry g;
    int device;
    void *kv;
    uint8_t *written;
    int *error;
} rkv_cuda_ring_view;

/* Once per process and GPU, before the first view call on it, outside any
 * capture: reads the GPU's properties and raises the attention kernels'
 * shared memory limits (what rkv_cuda_layer_create does for its layer);
 * RKV_CUDA_ATTN_KERNEL / RKV_CUDA_ATTN_STAGES are read here for views.
 * Later calls for the same device return RKV_OK at once. Thread-safe. Does
 * not change the current device. Errors: RKV_ERR_RANGE (no such device),
 * RKV_ERR_STATE (a CUDA failure, named). Not capture-safe. */
RKV_API rkv_status rkv_cuda_ring_prepare(int device);

/* Fills *out with the view of a layer's own storage (rkv_cuda_layer_kv,
 * rkv_cuda_layer_written, its error word, its device): the view calls on it
 * act as the layer calls. Prepares the device (the layer's creation did).
 * Errors: RKV_ERR_NULL. Host only. */
RKV_API rkv_status rkv_cuda_layer_view(const rkv_cuda_layer *layer, rkv_cuda_ring_view *out);

/* rkv_cuda_layer_upsert on a view (same arguments, kernel, checks). */
RKV_API rkv_status rkv_cuda_ring_upsert(const rkv_cuda_ring_view *ring, const void *kv,
                                        rkv_dtype kv_dtype, int64_t batch, const int64_t *frame_pos,
                                        const int64_t *session_idx, int commit, uint8_t *visible,
                                        void *stream);

/* The reference's visibility row of ONE row (B = 1) as rkv_ring_visible_row
 * computes it on the CPU, read from ring->written on the device (ring->kv
 * may be NULL):
 *  session_idx, frame_pos: DEVICE [1] int64 (checked on the device: an
 *      invalid value writes nothing and sets ring->error).
 *  row: DEVICE [N] bytes, 16-byte aligned, written whole (0/1).
 * Capture-safe. Host errors (nothing enqueued): RKV_ERR_NULL,
 * RKV_ERR_INVALID_ARG (alignment), RKV_ERR_STATE (device, launch). */
RKV_API rkv_status rkv_cuda_ring_visible_row(const rkv_cuda_ring_view *ring, const int64_t *session_idx,
                                             const int64_t *frame_pos, uint8_t *row, void *stream);

/* rkv_cuda_layer_attend / rkv_cuda_attention_workspace_bytes on a view. */
RKV_API rkv_status rkv_cuda_ring_attend(const rkv_cuda_ring_view *ring,
                                        const rkv_cuda_attention_args *args, void *stream);
RKV_API size_t rkv_cuda_ring_attention_workspace_bytes(const rkv_cuda_ring_view *ring,
                                                       const rkv_cuda_attention_args *args);

/* rkv_cuda_layer_check on a view's error word: reads and clears it
 * (synchronizes `stream`); RKV_OK or the first device error recorded, with
 * the call and row in rkv_last_error(). Not capture-safe. */
RKV_API rkv_status rkv_cuda_ring_check(const rkv_cuda_ring_view *ring, void *stream);

/* ------------------------------------------------------------------------ */
/* A whole model on the GPU                                                 */
/* ------------------------------------------------------------------------ */

/* Creates an rkv_model (ringkv.h) whose layers are rkv_cuda_layer on GPU
 * `device`, every operation enqueued on `stream` (a cudaStream_t of that
 * device, NULL = the legacy default stream; it must outlive the model).
 * Every rkv_model_* call of ringkv.h works on it, with these differences:
 *  - BACKEND memory is device memory of `device`: kv, q and out of the
 *    per-pass calls (16-byte aligned). Host arrays stay host arrays
 *    (begin_frame's session_idx / frame_pos, snapshot buffers, paths).
 *  - Every call must be made while `device` is the calling thread's current
 *    device (this call makes it current); RKV_ERR_STATE otherwise.
 *  - The per-pass calls only enqueue kernels: read `out` after
 *    cudaStreamSynchronize(stream) or rkv_model_synchronize, which also
 *    reports a failure recorded on the device. Snapshots, forks, loads,
 *    saves and the session calls order themselves after the work already
 *    enqueued on `stream` (spans are copied through host buffers, read and
 *    written synchronously).
 *  - B of one frame is at most RKV_CUDA_MAX_BATCH (begin_frame refuses
 *    more with RKV_ERR_INVALID_ARG).
 *  - rkv_model_layer returns NULL; rkv_model_cuda_layer gives the layers.
 * The model owns, in device memory: the layers, the batch buffers (2 * S
 * int64: session ids, then clocks, written by begin_frame) and the
 * attention workspace (sized here for B = 1..min(S, RKV_CUDA_MAX_BATCH)
 * rows of n_q_heads heads and tokens_per_frame queries), and in pinned host
 * memory a small ring of staging slots for begin_frame's copies.
 *
 * The capture contract (ringkv.h, "Frames"): the per-pass calls
 * (rkv_model_frame_upsert, _frame_attend, _frame_step, and the wrappers
 * rkv_model_upsert, _attend, _step) are capture-safe on `stream`: kernels
 * only, reading the session ids and clocks from the model's device buffers
 * and splitting keys in the model's workspace. So one frame (every layer,
 * every pass, B sessions) can be captured into a CUDA graph once:
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
 * Between replays only the clock VALUES change (begin_frame writes them
 * into the same device buffers, on `stream`, ordered after the previous
 * replay and before the next); B, the sessions and their rows, and every
 * pointer and argument given to the captured calls stay the same. Launch
 * the graph on `stream` (or order it after the copy). begin_frame refuses
 * to run while `stream` is being captured (its copy must not be recorded:
 * a replay would copy a stale staging slot). Not capture-safe: create and
 * destroy, claim/lookup/release/reset, begin_frame, snapshots, forks,
 * loads, saves, rkv_model_synchronize; end_frame and abandon_frame are host
 * bookkeeping that enqueue nothing.
 *
 * Errors (nothing allocated, *out untouched): RKV_ERR_NULL, an invalid
 * config (as rkv_model_create), RKV_ERR_RANGE (no such device: with no GPU
 * or no driver the runtime sees 0), RKV_ERR_NO_MEMORY (device or pinned
 * memory), RKV_ERR_STATE (other CUDA failures). Not capture-safe. */
RKV_API rkv_status rkv_model_create_cuda(const rkv_model_config *cfg, int device, void *stream,
                                         rkv_model **out);

/* Layer i of a CUDA model (owned by the model; device pointers and the
 * layer-level calls of this header work on it). NULL when i is out of
 * range or the model is not a CUDA model. Mutating it directly bypasses the
 * model's clock checks. */
RKV_API rkv_cuda_layer *rkv_model_cuda_layer(const rkv_model *model, int64_t layer);

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

/*
 * ringkv CPU backend: attention over a layer or a view in host memory, the
 * thread pool it runs on, the instruction-set choice, and the model calls
 * over caller-owned storage (CPU models only).
 *
 * Everything else -- status, dtypes, geometry, visibility, layer storage,
 * the model, snapshots, and the attention arguments and their definition
 * (rkv_attention_args) -- is ringkv.h, which this header includes (and
 * which includes this one at its end, for programs written before these
 * calls had their own header). Conventions are ringkv.h's; every pointer
 * here is HOST memory. How fast the engines run on which CPU is measured
 * in bench/RESULTS.md; docs/cpu.md describes the engines.
 */
#ifndef RINGKV_CPU_H
#define RINGKV_CPU_H

#include "ringkv.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* The thread pool                                                           */
/* ------------------------------------------------------------------------ */

/* rkv_threadpool (declared in ringkv.h): a fixed pool of CPU worker threads
 * that rkv_layer_attend, rkv_ring_attend and a CPU model's attention run
 * on. Threads are created once, at rkv_threadpool_create, and reused by
 * every call; work is split over (session row, query head, query tile),
 * each piece computed by one thread in a fixed order, so outputs are
 * bit-identical whatever the thread count. One pool serves one call at a
 * time (concurrent calls on the same pool are serialized). */

/* n_threads: total threads including the caller's; 0 means the machine's
 * online cores. *out owned by the caller (rkv_threadpool_destroy; NULL is a
 * no-op). Errors: RKV_ERR_NULL, RKV_ERR_INVALID_ARG (n_threads < 0 or
 * > 1024), RKV_ERR_NO_MEMORY (allocation or thread creation failed). */
RKV_API rkv_status rkv_threadpool_create(int n_threads, rkv_threadpool **out);
RKV_API void rkv_threadpool_destroy(rkv_threadpool *pool);
/* Threads of the pool (caller included); 0 for NULL. */
RKV_API int rkv_threadpool_size(const rkv_threadpool *pool);

/* ------------------------------------------------------------------------ */
/* Attention over a layer (SEM 5)                                            */
/* ------------------------------------------------------------------------ */

/* The attention of ringkv.h (rkv_attention_args: the arguments, the output
 * and what scores that are not plain numbers give) on a layer.
 * rkv_layer_attend is the fast path: tiled online softmax ("flash", Dao et
 * al. 2022) over the visible keys only, vectorized (AMX bf16 tiles for bf16
 * storage / AVX-512 / AVX2+FMA chosen on first use, plain C elsewhere; see
 * rkv_attention_isa) and spread over args->pool.
 * rkv_layer_attend_reference is the simple, exact implementation kept as the
 * test oracle (single thread, two-pass softmax; args->pool is ignored).
 * out must not overlap q, the layer's storage, session_idx, frame_pos or
 * visible (checked: RKV_ERR_INVALID_ARG "out (...) overlaps ...").
 * Errors (out untouched): RKV_ERR_NULL, RKV_ERR_INVALID_ARG, RKV_ERR_RANGE,
 * RKV_ERR_DTYPE, RKV_ERR_OVERFLOW, RKV_ERR_NO_MEMORY. */
RKV_API rkv_status rkv_layer_attend(const rkv_layer *layer,
                                    const rkv_attention_args *args);
RKV_API rkv_status rkv_layer_attend_reference(const rkv_layer *layer,
                                              const rkv_attention_args *args);

/* Instruction set rkv_layer_attend uses on this CPU: "amx", "avx512",
 * "avx2" or "generic" (static string), best first, or "avx512bf16" when
 * asked for. "amx" and "avx512bf16": bf16 storage with d_head a multiple of
 * 32 (<= 512) runs on bf16 pair products -- the AMX tile unit, or
 * AVX512-BF16's VDPBF16PS -- with queries and softmax weights rounded to
 * bf16 and f32 accumulation (bf16-level error, ~2e-3 relative); everything
 * else runs on AVX-512. The environment variable RKV_ISA (same names, any
 * case), read once, caps the choice (RKV_ISA=avx512: no bf16 pairs); empty
 * counts as unset, an unknown name is ignored with one line on stderr, and
 * a name this CPU (or its OS) does not offer runs the best kernel below it,
 * said in one line on stderr naming both; "avx512bf16" is chosen only when RKV_ISA names it (docs/cpu.md says why). */
RKV_API const char *rkv_attention_isa(void);
/* The instruction set rkv_layer_attend uses for this layer: as
 * rkv_attention_isa, but "avx512" where the CPU's choice is "amx" or
 * "avx512bf16" and the layer's dtype or d_head does not suit the bf16 pair
 * path. NULL for NULL. */
RKV_API const char *rkv_layer_attention_isa(const rkv_layer *layer);

/* ------------------------------------------------------------------------ */
/* Attention over a view; a CPU model over caller-owned storage              */
/* ------------------------------------------------------------------------ */

/* rkv_layer_attend on a view (rkv_ring_view, ringkv.h): the same arguments,
 * checks, kernels and results (bit-identical for the same storage
 * contents), reading ring->kv and ring->written; messages name
 * "rkv_ring_attend". Errors (out untouched): those of rkv_layer_attend,
 * plus RKV_ERR_NULL (ring, its pointers), invalid geometry and
 * RKV_ERR_INVALID_ARG (misaligned ring->kv). */
RKV_API rkv_status rkv_ring_attend(const rkv_ring_view *ring, const rkv_attention_args *args);

/* rkv_model_upsert and rkv_model_attend (the per-pass calls with the batch
 * spelled out) on storage the caller gives (a view, see rkv_ring_view), for
 * a model on the CPU backend: the same checks (layer, the rows of the
 * current batch, an open frame for the upsert, the batch's clocks), the same
 * bookkeeping (a commit marks the layer committed; the frame ends once every
 * layer has committed) and the same messages ("rkv_model_upsert: ...",
 * "rkv_model_attend: ..."), but the K/V and written bits read and written
 * are ring->kv and ring->written instead of the layer's own. On the view of
 * the layer itself (rkv_layer_view of rkv_model_layer) they are exactly
 * rkv_model_upsert and rkv_model_attend. This is how a framework that may
 * run the call on a copy of the layer's storage (PyTorch's functionalization
 * under torch.compile, which writes a clone and copies it back) keeps the
 * model's clocks and still writes only the buffers it passed.
 *  ring: the storage of layer `layer`: ring->g must equal that layer's
 *        geometry field for field; HOST buffers as rkv_ring_view says.
 * Other arguments as rkv_model_upsert / rkv_model_attend. Errors (nothing
 * written, no state changed): theirs, plus RKV_ERR_NULL (ring, its
 * pointers), RKV_ERR_INVALID_ARG (a geometry other than the layer's, naming
 * the first field that differs; misaligned ring->kv), RKV_ERR_STATE (a model
 * on another backend than the CPU's: its layers' storage is not host
 * memory). Both are writers of the model (docs/thread-safety.md): during the
 * call the layer's own storage is neither read nor written. */
RKV_API rkv_status rkv_model_upsert_ring(rkv_model *model, int64_t layer,
                                         const rkv_ring_view *ring, int64_t batch,
                                         const int64_t *session_idx, const void *kv,
                                         rkv_dtype kv_dtype, int commit);
RKV_API rkv_status rkv_model_attend_ring(rkv_model *model, int64_t layer,
                                         const rkv_ring_view *ring, int64_t batch,
                                         const int64_t *session_idx,
                                         const rkv_attention_args *args);

#ifdef __cplusplus
}
#endif

#endif /* RINGKV_CPU_H */

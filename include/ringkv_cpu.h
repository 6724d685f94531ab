/*
 * ringkv CPU backend: the reference attention (the test oracle), the
 * thread pool the CPU attention runs on, and the instruction-set choice.
 *
 * Everything else, the attention arguments and their definition
 * (rkv_attention_args) included, is ringkv.h, which this header includes
 * (and which includes this one at its end, for programs written before
 * these calls had their own header). Conventions are ringkv.h's; every
 * pointer here is HOST memory. How fast the engines run on which CPU is
 * measured in bench/RESULTS.md; docs/cpu.md describes the engines.
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
 * that rkv_layer_attend on a CPU layer and a CPU model's attention run
 * on. Threads are created once, at rkv_threadpool_create, and reused by
 * every call; work is split over (session row, query head, query tile),
 * each piece computed by one thread in a fixed order, so outputs are
 * bit-identical whatever the thread count. One pool serves one call at a
 * time (concurrent calls on the same pool are serialized). */

/* n_threads: total threads including the caller's; 0 means the machine's
 * online cores. Errors: RKV_ERR_INVALID_ARG (n_threads < 0 or > 1024),
 * RKV_ERR_NO_MEMORY (allocation or thread creation failed). */
RKV_API rkv_status rkv_threadpool_create(int n_threads, rkv_threadpool **out);
RKV_API void rkv_threadpool_destroy(rkv_threadpool *pool);
/* Threads of the pool (caller included); 0 for NULL. */
RKV_API int rkv_threadpool_size(const rkv_threadpool *pool);

/* ------------------------------------------------------------------------ */
/* Attention over a layer (SEM 5)                                            */
/* ------------------------------------------------------------------------ */

/* On the CPU backend, rkv_layer_attend (ringkv.h) is the fast path: tiled
 * online softmax ("flash", Dao et al. 2022) over the visible keys only,
 * vectorized (AMX bf16 tiles for bf16 storage / AVX-512 / AVX2+FMA chosen
 * on first use, plain C elsewhere; see rkv_attention_isa) and spread over
 * args->pool.
 *
 * rkv_backend_cpu_reference: the CPU backend's reference table (static):
 * the CPU table -- the same layers, storage, upsert and spans -- whose
 * attention is the simple, exact implementation kept as the test oracle
 * (single thread, two-pass softmax; args->pool is ignored). The oracle on a
 * layer's bytes: wrap its storage on this table (rkv_layer_wrap(
 * rkv_backend_cpu_reference(), NULL, geometry, &{kv, written, NULL}, &ref),
 * ringkv_backend.h) and call rkv_layer_attend(ref, args): the same
 * arguments, checks and errors. */
RKV_API const struct rkv_backend_ops *rkv_backend_cpu_reference(void);

/* Instruction set rkv_layer_attend uses on this CPU (static string), best
 * first: "amx", "avx512bf16" (by default on AMD CPUs only; docs/cpu.md
 * says why), "avx512", "avx2" or "generic". "amx" and "avx512bf16": bf16
 * storage with d_head a multiple of 32 (<= 512) runs on bf16 pair products
 * -- the AMX tile unit, or AVX512-BF16's VDPBF16PS -- with queries and
 * softmax weights rounded to bf16 and f32 accumulation (bf16-level error,
 * ~2e-3 relative); everything else runs on AVX-512. The environment
 * variable RKV_ISA (same names, any case), read once, caps the choice
 * (RKV_ISA=avx512: no bf16 pairs); empty counts as unset, an unknown name
 * is ignored with one line on stderr, and a name this CPU (or its OS) does
 * not offer runs the best kernel below it, said in one line on stderr
 * naming both.
 * layer NULL: the CPU's choice. A layer: the set rkv_layer_attend uses for
 * it ("avx512" for a layer off the bf16 pair path above, where the
 * CPU's choice is amx or avx512bf16); "reference"
 * for a layer on rkv_backend_cpu_reference() (its attention is the oracle,
 * not a kernel of this list); NULL for a layer of another backend. */
RKV_API const char *rkv_attention_isa(const rkv_layer *layer);

#ifdef __cplusplus
}
#endif

#endif /* RINGKV_CPU_H */

// The CPU executor's stand-in for cuda_runtime.h (test-only, tests/cuda_exec):
// the runtime API (cuda_runtime_api.h) and, in C++, the CUDA C++ words the
// backend's .cu files use, for a host compiler: the function qualifiers (no
// meaning on the host), __launch_bounds__ (none either: the bound the
// executor enforces is nvcc's, the .maxntid of the kernel's PTX entry, from
// the launch-bounds table; exec.cpp), the vector types and index
// variables (rkvx.h), __syncthreads, the cache-hinted load __ldcs (a plain
// load: the hint has no semantics), __popc and __cvta_generic_to_shared.
// Shuffles, votes, atomics and every PTX instruction go through
// src/cuda/ptx.cuh's wrappers, which hold their semantics.
#ifndef RKVX_CUDA_RUNTIME_H
#define RKVX_CUDA_RUNTIME_H

#include "cuda_runtime_api.h"

#ifdef __cplusplus
#include "rkvx.h"

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))

#define threadIdx (::rkvx::g_thread->thread_idx)
#define blockIdx (::rkvx::g_block->block_idx)
#define blockDim (::rkvx::g_block->block_dim)
#define gridDim (::rkvx::g_block->grid_dim)
#define __syncthreads() ::rkvx::syncthreads(RKVX_HERE)

__forceinline__ int __popc(unsigned x) { return __builtin_popcount(x); }
template <class T>
__forceinline__ T __ldcs(const T *p) {
    return *p;
}
__forceinline__ size_t __cvta_generic_to_shared(const void *p) {
    return ::rkvx::shared_address(p, "cvta.to.shared", RKVX_HERE);
}

// The C++ overloads of the runtime API that take a kernel itself.
template <class T>
cudaError_t cudaFuncGetAttributes(struct cudaFuncAttributes *attr, T *entry) {
    return cudaFuncGetAttributes(attr, reinterpret_cast<const void *>(entry));
}
template <class T>
cudaError_t cudaFuncSetAttribute(T *entry, enum cudaFuncAttribute attr, int value) {
    return cudaFuncSetAttribute(reinterpret_cast<const void *>(entry), attr, value);
}
#endif

#endif

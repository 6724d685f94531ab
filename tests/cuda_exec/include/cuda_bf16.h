// The CPU executor's stand-in for cuda_bf16.h (test-only, tests/cuda_exec):
// the bfloat16 type and the conversions the CUDA backend's kernels use, on
// the host. f32 -> bf16 rounds to nearest even (cvt.rn.bf16.f32); a NaN
// stays a (quiet) NaN.
#ifndef RKVX_CUDA_BF16_H
#define RKVX_CUDA_BF16_H

#include <stdint.h>
#include <string.h>

#include "cuda_runtime.h"

struct __nv_bfloat16 {
    unsigned short __x;
};
struct __nv_bfloat162 {
    __nv_bfloat16 x, y;
};

__device__ __forceinline__ __nv_bfloat16 __float2bfloat16_rn(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    __nv_bfloat16 r;
    if ((u & 0x7fffffffu) > 0x7f800000u)
        r.__x = (unsigned short)((u >> 16) | 0x40u);  // NaN: keep the sign, make it quiet
    else
        r.__x = (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    return r;
}
__device__ __forceinline__ float __bfloat162float(__nv_bfloat16 b) {
    const uint32_t u = (uint32_t)b.__x << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
__device__ __forceinline__ __nv_bfloat162 __floats2bfloat162_rn(float lo, float hi) {
    return __nv_bfloat162{__float2bfloat16_rn(lo), __float2bfloat16_rn(hi)};
}

#endif

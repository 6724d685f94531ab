// The CPU executor's stand-in for cuda_fp16.h (test-only, tests/cuda_exec):
// the half type and the conversions the CUDA backend's kernels use, on the
// host. Conversions round to nearest even (the _rn functions), as the
// device's cvt.rn.f16.f32 does; NaN stays NaN, overflow gives infinity.
#ifndef RKVX_CUDA_FP16_H
#define RKVX_CUDA_FP16_H

#include <string.h>

#include "cuda_runtime.h"

struct __half {
    unsigned short __x;
};
struct __half2 {
    __half x, y;
};

__device__ __forceinline__ __half __float2half_rn(float f) {
    const _Float16 h = (_Float16)f;  // IEEE binary16, round to nearest even
    __half r;
    memcpy(&r.__x, &h, 2);
    return r;
}
__device__ __forceinline__ float __half2float(__half h) {
    _Float16 v;
    memcpy(&v, &h.__x, 2);
    return (float)v;
}
__device__ __forceinline__ __half2 __floats2half2_rn(float lo, float hi) {
    return __half2{__float2half_rn(lo), __float2half_rn(hi)};
}

#endif

// Private declarations of the CUDA backend, shared by the .cu files.
#ifndef RKV_CUDA_INTERNAL_CUH
#define RKV_CUDA_INTERNAL_CUH

#include <cuda_runtime.h>
#include <stdint.h>

#include "plan.h"
#include "ptx.cuh"  // the PTX wrappers and hardware intrinsics
#include "ring_rule.h"  // the ring rule (slot, write step, visibility), host and device
#include "ringkv.h"
#include "ringkv_backend.h"  // rkv_error_set: the core's public error setter
#include "ringkv_cuda.h"

// What a context knows of its GPU (read once per process and device:
// backend_cuda.cu's prepare).
struct rkv__cuda_device {
    int device;
    rkv__cuda_device_info dev;
    int attn_stages;  // cp.async depth of the mma kernel (RKV_CUDA_ATTN_STAGES)
    int attn_kernel;  // RKV__KERNEL_MMA or _WGMMA (RKV_CUDA_ATTN_KERNEL)
    cudaStream_t stream;  // the context's (its layers' calls run there)
};

// One layer on the GPU: the CUDA table's layer behind an rkv_layer.
struct rkv_cuda_layer {
    rkv_geometry g;
    rkv__cuda_device d;   // its context's GPU, kernel choice and stream
    void *kv;             // DEVICE [2][H][N][D]
    uint8_t *written;     // DEVICE [N] (allocation rounded up to 16 bytes)
    int *err;             // DEVICE error word (see plan.h)
    bool own_err;         // err is the layer's allocation (else a context's pool slot)
    bool own_storage;     // kv and written are the layer's (else the caller's: wrapped)
};

// A CUDA error as an rkv status with a message naming the call.
static inline rkv_status rkv__cuda_fail(cudaError_t e, const char *what) {
    return rkv_error_set(e == cudaErrorMemoryAllocation ? RKV_ERR_NO_MEMORY : RKV_ERR_STATE,
                     "%s: CUDA error %s (%s)", what, cudaGetErrorName(e), cudaGetErrorString(e));
}

// `device` must be the calling thread's current device (`owner` names what
// lives there: "layer", "model"); no cudaSetDevice in a captured region.
static inline rkv_status rkv__cuda_check_current(int device, const char *owner,
                                                 const char *what) {
    int cur = -1;
    cudaError_t e = cudaGetDevice(&cur);
    if (e != cudaSuccess) return rkv__cuda_fail(e, what);
    if (cur != device)
        return rkv_error_set(RKV_ERR_STATE,
                             "%s: the current device is %d but the %s lives on device %d "
                             "(cudaSetDevice(%d) first)",
                             what, cur, owner, device, device);
    return RKV_OK;
}

// After a launch: the launch's own error (capture-safe, no synchronization).
static inline rkv_status rkv__cuda_after_launch(const char *what) {
    cudaError_t e = cudaGetLastError();
    return e == cudaSuccess ? RKV_OK : rkv__cuda_fail(e, what);
}

// ---- device helpers ---------------------------------------------------------

// Loads the B rows' (session, clock) into shared memory and checks them as
// the CPU backend does (session in [0, S), distinct, clock >= 0; clocks are
// not checked when fp is NULL). Every block runs it before it writes
// anything, so an invalid row makes the whole launch a no-op. Returns true
// when all rows are valid (block-uniform). Block (0,0,0) records the first
// invalid row (lowest index) in *err when *err is 0.
__device__ __forceinline__ bool rkv__d_validate_rows(const int64_t *__restrict__ sess,
                                                     const int64_t *__restrict__ fp, int B,
                                                     int64_t S, int64_t *s_sess, int64_t *s_fp,
                                                     int *err, int op) {
    RKV_SHARED(int, s_bad);
    if (threadIdx.x == 0) s_bad = 0x7fffffff;
    for (int i = threadIdx.x; i < B; i += blockDim.x) {
        s_sess[i] = sess[i];
        s_fp[i] = fp ? fp[i] : 0;
    }
    __syncthreads();
    for (int i = threadIdx.x; i < B; i += blockDim.x) {
        const int64_t s = s_sess[i];
        int kind = 0;
        if (s < 0 || s >= S)
            kind = RKV__DEVERR_SESSION_RANGE;
        else if (s_fp[i] < 0)
            kind = RKV__DEVERR_CLOCK;
        else
            for (int j = 0; j < i; j++)
                if (s_sess[j] == s) {
                    kind = RKV__DEVERR_SESSION_DUP;
                    break;
                }
        if (kind) rkv_ptx::atomic_min(&s_bad, (i << 8) | kind);
    }
    __syncthreads();
    const int bad = s_bad;
    if (bad == 0x7fffffff) return true;
    if (threadIdx.x == 0 && blockIdx.x == 0 && blockIdx.y == 0 && blockIdx.z == 0)
        rkv_ptx::atomic_cas(err, 0, (op << 24) | ((bad & 0xff) << 16) | (bad >> 8));
    return false;
}

// Raises the tensor-core kernels' dynamic shared memory limits (attention.cu;
// once per device: backend_cuda.cu's prepare); *wgmma: whether the wgmma
// kernel can run on the device (9.x, its sm_90a code loaded).
cudaError_t rkv__cuda_attention_prepare(const rkv__cuda_device_info *dev, bool *wgmma);
// rkv__cuda_attention_plan_make on l's device and kernel choice (plan.h);
// RKV_ERR_OVERFLOW named after `what` when its grid is too large.
rkv_status rkv__cuda_attention_plan_checked(const rkv_cuda_layer *l,
                                            const rkv_cuda_attention_args *a, int preferred,
                                            const char *what, rkv__cuda_attn_plan *plan);

// The table's operations (layer.cu, attention.cu; the core checked the
// arguments): each needs the layer's device current (RKV_ERR_STATE
// otherwise) and enqueues on its context's stream.
// A layer of its own storage (storage->kv NULL) or over the caller's;
// *storage receives its pointers. Not capture-safe.
rkv_status rkv__cuda_layer_create(const rkv_geometry *g, const rkv__cuda_device *d,
                                  rkv_backend_storage *storage, rkv_cuda_layer **out);
void rkv__cuda_layer_destroy(rkv_cuda_layer *l);
// The table's reset, span_read, span_write, span_copy and span_region
// (where a piece lives in device memory: host arithmetic, no CUDA call).
rkv_status rkv__cuda_reset(void *ctx, void *layer, int64_t session);
rkv_status rkv__cuda_span_read(void *ctx, const void *layer, int64_t session, rkv_span_part part,
                               int64_t head, void *dst);
rkv_status rkv__cuda_span_write(void *ctx, void *layer, int64_t session, rkv_span_part part,
                                int64_t head, const void *src);
rkv_status rkv__cuda_span_copy(void *ctx, void *layer, int64_t src_session, int64_t dst_session);
rkv_status rkv__cuda_span_region(void *ctx, const void *layer, int64_t session, rkv_span_part part,
                                 int64_t head, void **ptr, int *device);
// The table's upsert; kv NULL (batch 1, commit 0): the visibility row alone.
rkv_status rkv__cuda_upsert(void *ctx, void *layer, const void *kv, int64_t batch,
                            const int64_t *frame_pos, const int64_t *session_idx, int commit,
                            uint8_t *visible);
rkv_status rkv__cuda_attend_launch(const rkv_cuda_layer *l, const rkv_cuda_attention_args *a,
                                   const char *what);

#endif

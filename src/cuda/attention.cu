// Ring attention on the GPU (SEMANTICS 4, 5): the host dispatcher and the
// generic f32 kernel, for calls the tensor-core kernels do not take.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>

#include "attention_common.cuh"  // the split-combine of the tensor-core kernels

namespace {

__device__ __forceinline__ float to_f(float x) { return x; }
__device__ __forceinline__ float to_f(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_f(__nv_bfloat16 x) { return __bfloat162float(x); }

__device__ __forceinline__ float ld_any(const void *base, int dt, int64_t i) {
    switch (dt) {
    case RKV_DTYPE_F16: return __half2float(static_cast<const __half *>(base)[i]);
    case RKV_DTYPE_BF16: return __bfloat162float(static_cast<const __nv_bfloat16 *>(base)[i]);
    default: return static_cast<const float *>(base)[i];
    }
}

__device__ __forceinline__ void st_any(void *base, int dt, int64_t i, float v) {
    switch (dt) {
    case RKV_DTYPE_F16: static_cast<__half *>(base)[i] = __float2half_rn(v); break;
    case RKV_DTYPE_BF16: static_cast<__nv_bfloat16 *>(base)[i] = __float2bfloat16_rn(v); break;
    default: static_cast<float *>(base)[i] = v; break;
    }
}

struct SimtParams {
    const void *kv;
    const uint8_t *written;
    const uint8_t *visible;  // [B][N] or nullptr
    const int64_t *sess, *fp;
    const void *q;
    void *out;
    int *err;
    int batch, q_dtype, out_dtype;
    int64_t S, H, Hq, group, Tq, N, C, T, RF, RB, PD, D, total_rows;
    float scale;
};

constexpr int kSimtDk = RKV__SIMT_MAX_D / 32;  // dims per lane

// One warp per query row; lanes own dims lane, lane+32, ...; keys visited
// in ascending slot order (ring frames ascending, scratch last) with an
// online softmax in f32 (expf), the same order as the CPU oracle.
template <typename KT>
__global__ void __launch_bounds__(32 * RKV__SIMT_WARPS) ring_attention_simt(const SimtParams p) {
    RKV_EXTERN_SHARED(int64_t, smem_rows);
    int64_t *s_sess = smem_rows, *s_fp = smem_rows + p.batch;
    if (!rkv__d_validate_rows(p.sess, p.visible ? nullptr : p.fp, p.batch, p.S, s_sess, s_fp,
                              p.err, RKV__OP_ATTEND))
        return;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t row = (int64_t)blockIdx.x * RKV__SIMT_WARPS + warp;
    if (row >= p.total_rows) return;
    const int64_t b = row / (p.Hq * p.Tq), h = (row / p.Tq) % p.Hq, kvh = h / p.group;
    const KT *K = static_cast<const KT *>(p.kv) + kvh * p.N * p.D;
    const KT *V = static_cast<const KT *>(p.kv) + (p.H + kvh) * p.N * p.D;

    float qv[kSimtDk], acc[kSimtDk];
#pragma unroll
    for (int k = 0; k < kSimtDk; k++) {
        const int64_t d = lane + 32 * k;
        qv[k] = d < p.D ? ld_any(p.q, p.q_dtype, row * p.D + d) : 0.f;
        acc[k] = 0.f;
    }
    float m = RKV__SOFTMAX_M0, l = 0.f;
    auto visit = [&](int64_t j) {
        const KT *kr = K + j * p.D, *vr = V + j * p.D;
        float part = 0.f;
#pragma unroll
        for (int k = 0; k < kSimtDk; k++) {
            const int64_t d = lane + 32 * k;
            if (d < p.D) part = fmaf(qv[k], to_f(kr[d]), part);
        }
#pragma unroll
        for (int off = 16; off > 0; off >>= 1)
            part += rkv_ptx::shfl_xor_sync(0xffffffffu, part, off);
        const float sc = rkv_ptx::shfl_idx_sync(0xffffffffu, part, 0) * p.scale;
        const float mn = fmaxf(m, sc);  // finite unless a score is +inf (RKV__SOFTMAX_M0)
        const float corr = expf(m - mn), pe = expf(sc - mn);
        l = l * corr + pe;
#pragma unroll
        for (int k = 0; k < kSimtDk; k++) {
            const int64_t d = lane + 32 * k;
            if (d < p.D) acc[k] = fmaf(pe, to_f(vr[d]), acc[k] * corr);
        }
        m = mn;
    };
    if (p.visible) {
        const uint8_t *vrow = p.visible + b * p.N;
        for (int64_t j = 0; j < p.N; j++)
            if (vrow[j]) visit(j);
    } else {
        const int64_t s = s_sess[b], f = s_fp[b];
        const int64_t hidden = rkv__rule_hidden_frame(f, p.PD, p.RB);
        const uint8_t *w = p.written + s * p.C;
        for (int64_t r = 0; r <= p.RF; r++) {
            if (r < p.RF && !rkv__rule_frame_visible(w, p.T, hidden, r)) continue;
            for (int64_t t = 0; t < p.T; t++) visit(s * p.C + r * p.T + t);
        }
    }
    const float inv = l > 0.f ? 1.f / l : 0.f;
#pragma unroll
    for (int k = 0; k < kSimtDk; k++) {
        const int64_t d = lane + 32 * k;
        if (d < p.D) st_any(p.out, p.out_dtype, row * p.D + d, acc[k] * inv);
    }
}

// Launches combine_splits (attention_common.cuh) for a plan with key splits:
// the workspace p.ws_o / p.ws_ml into `out` of type OT. The caller checks
// the launch.
template <typename OT>
void launch_combine(const rkv__cuda_attn_plan *plan, const RkvMmaParams &p, void *out,
                    cudaStream_t s) {
    const int64_t n = plan->total_rows * (plan->d_head / 4);
    RKV_LAUNCH((unsigned)((n + 255) / 256), 256, (size_t)p.batch * 2 * sizeof(int64_t), s,
               rkv_attn::combine_splits<OT>)(p.ws_o, p.ws_ml, static_cast<OT *>(out), plan->splits,
                                             plan->total_rows, plan->d_head, p.sess, p.fp, p.batch,
                                             p.S, p.err);
}

}  // namespace

rkv_status rkv__cuda_attention_plan_checked(const rkv_cuda_layer *l,
                                            const rkv_cuda_attention_args *a, int preferred,
                                            const char *what, rkv__cuda_attn_plan *plan) {
    rkv__cuda_attention_plan_make(&l->g, a, &l->d.dev, l->d.attn_stages, l->d.attn_kernel,
                                  preferred, plan);
    if (plan->grid_x > 0x7fffffff)
        return rkv_error_set(RKV_ERR_OVERFLOW, "%s: %lld blocks exceed the grid", what,
                             (long long)plan->grid_x);
    return RKV_OK;
}

cudaError_t rkv__cuda_attention_prepare(const rkv__cuda_device_info *dev, bool *wgmma) {
    /* The wgmma kernel only where the driver runs its sm_90a code (else the
     * mma kernel; the plan string says which). */
    *wgmma = dev->cc_major == 9 && rkv_wgmma::loaded_is_sm90a<__nv_bfloat16>() &&
             rkv_wgmma::loaded_is_sm90a<__half>();
    cudaError_t e;
    if ((e = rkv_mma::prepare<__nv_bfloat16>(dev->smem_optin)) != cudaSuccess ||
        (e = rkv_mma::prepare<__half>(dev->smem_optin)) != cudaSuccess || !*wgmma)
        return e;
    if ((e = rkv_wgmma::prepare<__nv_bfloat16>(dev->smem_optin)) != cudaSuccess) return e;
    return rkv_wgmma::prepare<__half>(dev->smem_optin);
}

namespace {

// The parameter fields both kernel families share (SimtParams and
// RkvMmaParams have them under the same names): the layer's storage and
// geometry, the call's rows, queries and output, and the plan's row counts.
template <typename P>
void fill_common_params(P &p, const rkv_cuda_layer *l, const rkv_cuda_attention_args *a,
                        const rkv__cuda_attn_plan &plan) {
    const rkv_geometry *g = &l->g;
    p.kv = l->kv;
    p.written = l->written;
    p.sess = a->session_idx;
    p.fp = a->frame_pos;
    p.q = a->q;
    p.out = a->out;
    p.err = l->err;
    p.batch = (int)a->batch;
    p.S = g->num_sessions;
    p.H = g->n_kv_heads;
    p.Hq = a->n_q_heads;
    p.group = plan.group;
    p.Tq = plan.tq;
    p.N = rkv_geometry_total_slots(g);
    p.C = rkv_geometry_capacity(g);
    p.T = g->tokens_per_frame;
    p.RF = g->ring_frames;
    p.RB = g->ring_buckets;
    p.PD = g->pinned_dilation;
    p.total_rows = plan.total_rows;
}

// A tensor-core plan (RKV__ATTN_MMA or RKV__ATTN_WGMMA) on storage of type T
// (bf16 or f16): the kernel, then with key splits the combine into a->out
// (the workspace is the caller's a->workspace: [splits][rows][D] partial
// outputs, then [splits][rows][2] maxima and sums).
template <typename T>
rkv_status launch_tensor_core(const rkv_cuda_layer *l, const rkv_cuda_attention_args *a,
                              const rkv__cuda_attn_plan &plan, cudaStream_t s, const char *what) {
    const rkv_geometry *g = &l->g;
    RkvMmaParams p;
    fill_common_params(p, l, a, plan);
    p.ws_o = plan.splits > 1 ? static_cast<float *>(a->workspace) : nullptr;
    p.ws_ml = plan.splits > 1 ? p.ws_o + (size_t)plan.splits * plan.total_rows * g->d_head
                              : nullptr;
    p.splits = plan.splits;
    p.M = plan.rows_per_kvh;
    p.m_tiles = plan.m_tiles;
    p.scale_log2 = plan.scale * 1.4426950408889634f;
    plan.kind == RKV__ATTN_WGMMA ? rkv_wgmma::launch<T>(&plan, p, s)
                                 : rkv_mma::launch<T>(&plan, p, s);
    rkv_status st = rkv__cuda_after_launch(what);
    if (st != RKV_OK || plan.splits <= 1) return st;
    plan.out_f32 ? launch_combine<float>(&plan, p, a->out, s)
                 : launch_combine<T>(&plan, p, a->out, s);
    return rkv__cuda_after_launch(what);
}

// The generic kernel (plan kind RKV__ATTN_SIMT), in the storage dtype.
rkv_status launch_simt(const rkv_cuda_layer *l, const rkv_cuda_attention_args *a,
                       const rkv__cuda_attn_plan &plan, cudaStream_t s, const char *what) {
    SimtParams p;
    fill_common_params(p, l, a, plan);
    p.visible = a->visible;
    p.q_dtype = (int)a->q_dtype;
    p.out_dtype = (int)a->out_dtype;
    p.D = l->g.d_head;
    p.scale = plan.scale;
    const dim3 grid((unsigned)plan.grid_x);
    if (l->g.dtype == RKV_DTYPE_BF16)
        RKV_LAUNCH(grid, plan.threads, plan.smem_bytes, s, ring_attention_simt<__nv_bfloat16>)(p);
    else if (l->g.dtype == RKV_DTYPE_F16)
        RKV_LAUNCH(grid, plan.threads, plan.smem_bytes, s, ring_attention_simt<__half>)(p);
    else
        RKV_LAUNCH(grid, plan.threads, plan.smem_bytes, s, ring_attention_simt<float>)(p);
    return rkv__cuda_after_launch(what);
}

}  // namespace

rkv_status rkv__cuda_attend_launch(const rkv_cuda_layer *l, const rkv_cuda_attention_args *a,
                                   const char *what) {
    rkv__cuda_attn_plan plan;
    rkv_status st = rkv__cuda_attention_plan_checked(l, a, 0, what, &plan);
    if (st == RKV_OK) st = rkv__cuda_check_current(l->d.device, "layer", what);
    if (st != RKV_OK) return st;
    if (plan.kind == RKV__ATTN_SIMT) return launch_simt(l, a, plan, l->d.stream, what);
    return l->g.dtype == RKV_DTYPE_BF16
               ? launch_tensor_core<__nv_bfloat16>(l, a, plan, l->d.stream, what)
               : launch_tensor_core<__half>(l, a, plan, l->d.stream, what);
}

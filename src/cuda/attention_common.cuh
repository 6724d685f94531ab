// What both tensor-core ring attention kernels share: the mma.sync kernel
// (attention_mma.cuh) and the Hopper wgmma kernel (attention_wgmma.cuh)
// differ only in how they compute the two matrix products; what they read,
// which keys they walk and what they write is here, once. Every PTX
// instruction they use is a wrapper of ptx.cuh; tests/cuda/fragment_model.py
// models these pieces lane by lane.
#ifndef RKV_CUDA_ATTENTION_COMMON_CUH
#define RKV_CUDA_ATTENTION_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "attention.cuh"
#include "ptx.cuh"

namespace rkv_attn {

using rkv_ptx::ex2_approx_ftz;
using rkv_ptx::smem_addr;

// ---- conversion -----------------------------------------------------------------

// Two f32 values as a packed pair of the 16-bit type T (round to nearest):
// the P fragments of the P V product, and the 16-bit output stores.
template <typename T>
struct Cvt;

template <>
struct Cvt<__nv_bfloat16> {
    static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
        __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
        return *reinterpret_cast<uint32_t *>(&v);
    }
};

template <>
struct Cvt<__half> {
    static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
        __half2 v = __floats2half2_rn(lo, hi);
        return *reinterpret_cast<uint32_t *>(&v);
    }
};

// ---- tiles, frame list, the block, softmax, store ---------------------------

// Element offset of 16-byte chunk `chunk` of row `row` in a swizzled tile
// with D elements per row (D/8 >= 8 chunks): chunk ^ (row mod 8).
template <int D>
__device__ __forceinline__ int swz(int row, int chunk) {
    return row * D + ((chunk ^ (row & 7)) << 3);
}

// ROWS rows of D elements from src (row stride D) into a swizzled tile,
// 16-byte cp.async chunks spread over THREADS threads; rows at or past
// `valid` are zero-filled (the source is not read).
template <typename T, int D, int ROWS, int THREADS>
__device__ __forceinline__ void load_tile_async(T *dst, const T *src, int64_t valid, int tid) {
    constexpr int CPR = D / 8;
    static_assert((ROWS * CPR) % THREADS == 0, "tile loads");
#pragma unroll
    for (int k = 0; k < ROWS * CPR / THREADS; k++) {
        const int c = tid + k * THREADS, r = c / CPR, ch = c % CPR;
        const bool in = r < valid;
        rkv_ptx::cp_async_cg16(dst + swz<D>(r, ch), src + (in ? r * D + ch * 8 : 0),
                               in ? 16 : 0);
    }
}

// Warp 0 of a block: the visible frames of session `sess` at clock f by the
// bits-and-clock rule (SEMANTICS 4, ring_rule.h's rkv__rule_visible_frames
// computed 32 frames at a time): ring frames ascending (the slot ceil(f/PD)
// mod RB hidden on write steps, unwritten slots skipped), the scratch (RF)
// last; their count in *n_frames.
__device__ __forceinline__ void build_frame_list(const RkvMmaParams &p, int64_t sess, int64_t f,
                                                 int lane, int *list, int *n_frames) {
    const int64_t hidden = rkv__rule_hidden_frame(f, p.PD, p.RB);
    const uint8_t *w = p.written + sess * p.C;
    int n = 0;
    for (int64_t r0 = 0; r0 < p.RF; r0 += 32) {
        const int64_t r = r0 + lane;
        const bool vis = r < p.RF && rkv__rule_frame_visible(w, p.T, hidden, r);
        const unsigned m = rkv_ptx::ballot_sync(0xffffffffu, vis);
        if (vis) list[n + __popc(m & ((1u << lane) - 1u))] = (int)r;
        n += __popc(m);
    }
    if (lane == 0) {
        list[n] = (int)p.RF;
        *n_frames = n + 1;
    }
}

// One block of either kernel (grid (m_tiles * splits, H, B), THREADS
// threads, BM query rows of one (row b, KV head): q[b][kvh*group ..][Tq][D]
// is contiguous, [group*Tq][D], so the GQA group's query heads share every
// K/V tile the block loads), from its shared memory `base` (the Q tile, the
// K and V stages, the frame list) to its main loop. start(): every row
// checked on the device (the staging aliases the K stages; false: an
// invalid row, the block writes nothing), the Q tile (rows past M
// zero-filled) in flight while warp 0 builds the row's visible frames, the
// frames cut into tiles of BN keys that never straddle a frame and split
// `p.splits` ways, then the first STAGES-1 key tiles. next(i): key tile i
// (and Q) landed and visible to every thread (FENCE: and to the async proxy,
// which wgmma reads shared memory through), tile i + STAGES-1 issued into
// the stage tile i-1 freed; kt(i) / vt(i) are its K and V tiles.
template <typename T, int D, int BM, int BN, int STAGES, int THREADS, bool FENCE>
struct RingBlock {
    const RkvMmaParams &p;
    T *sQ, *sK, *sV;
    int *list;
    const int tid;
    int split, nt;  // this block's key split and its key tiles
    int64_t row0, qrow0, tpf, t0;
    const T *kbase, *vbase;

    __device__ __forceinline__ RingBlock(const RkvMmaParams &params, unsigned char *base)
        : p(params), sQ(reinterpret_cast<T *>(base)), sK(sQ + BM * D),
          sV(sK + STAGES * BN * D), list(reinterpret_cast<int *>(sV + STAGES * BN * D)),
          tid((int)threadIdx.x) {}

    __device__ __forceinline__ bool start() {
        RKV_SHARED(int, sNf);
        int64_t *sSess = reinterpret_cast<int64_t *>(sK), *sFp = sSess + p.batch;
        if (!rkv__d_validate_rows(p.sess, p.fp, p.batch, p.S, sSess, sFp, p.err, RKV__OP_ATTEND))
            return false;
        const int64_t b = blockIdx.z, kvh = blockIdx.y;
        split = (int)(blockIdx.x / p.m_tiles);
        const int64_t sess = sSess[b], f = sFp[b];
        qrow0 = (b * p.Hq + kvh * p.group) * p.Tq;     // global row
        row0 = (int64_t)(blockIdx.x % p.m_tiles) * BM;  // within M
        load_tile_async<T, D, BM, THREADS>(sQ, static_cast<const T *>(p.q) + (qrow0 + row0) * D,
                                           p.M - row0, tid);
        rkv_ptx::cp_async_commit_group();
        if (tid < 32) build_frame_list(p, sess, f, tid, list, &sNf);
        __syncthreads();  // list ready; the staging in sK is dead from here on
        tpf = p.T / BN;
        const int64_t nt_all = (int64_t)sNf * tpf;
        t0 = nt_all * split / p.splits;
        nt = (int)(nt_all * (split + 1) / p.splits - t0);
        const T *kvb = static_cast<const T *>(p.kv);
        kbase = kvb + (kvh * p.N + sess * p.C) * (int64_t)D;
        vbase = kvb + ((p.H + kvh) * p.N + sess * p.C) * (int64_t)D;
#pragma unroll
        for (int i = 0; i < STAGES - 1; i++) {
            if (i < nt) load(i);
            rkv_ptx::cp_async_commit_group();
        }
        return true;
    }

    __device__ __forceinline__ T *kt(int i) const { return sK + (i % STAGES) * BN * D; }
    __device__ __forceinline__ T *vt(int i) const { return sV + (i % STAGES) * BN * D; }

    // Key tile i into its stage by cp.async.
    __device__ __forceinline__ void load(int i) const {
        const int64_t ti = t0 + i;
        const int64_t slot = list[ti / tpf] * p.T + (ti % tpf) * BN;  // in the span
        load_tile_async<T, D, BN, THREADS>(kt(i), kbase + slot * D, BN, tid);
        load_tile_async<T, D, BN, THREADS>(vt(i), vbase + slot * D, BN, tid);
    }

    __device__ __forceinline__ void next(int i) const {
        rkv_ptx::cp_async_wait_group<STAGES - 2>();
        if (FENCE) rkv_ptx::fence_proxy_async_shared_cta();
        __syncthreads();
        if (i + STAGES - 1 < nt) load(i + STAGES - 1);
        rkv_ptx::cp_async_commit_group();
    }
};

// One tile's online softmax for one m16 tile of rows (base 2, the scale
// folded into scale_log2): s holds the thread's NT x 4 scores in the
// mma.m16n8 C layout (rows g: elements 0,1; g+8: elements 2,3; a row's 4
// threads are a quad), m0/m1 and l0/l1 the running maxima and sums of its two
// rows, o the DT x 4 output accumulators (rescaled here). Writes P as the
// A fragments of the P V product: pa[k16 step][4], regs 0,1 from the even n8
// tile, regs 2,3 from the odd one.
template <typename T, int NT, int DT>
__device__ __forceinline__ void online_softmax(float *s, float scale_log2, float &m0, float &m1,
                                               float &l0, float &l1, float *o,
                                               uint32_t (*pa)[4]) {
    float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
    for (int n8 = 0; n8 < NT; n8++) {
#pragma unroll
        for (int e = 0; e < 4; e++) s[n8 * 4 + e] *= scale_log2;
        mx0 = fmaxf(mx0, fmaxf(s[n8 * 4 + 0], s[n8 * 4 + 1]));
        mx1 = fmaxf(mx1, fmaxf(s[n8 * 4 + 2], s[n8 * 4 + 3]));
    }
    mx0 = fmaxf(mx0, rkv_ptx::shfl_xor_sync(0xffffffffu, mx0, 1));
    mx0 = fmaxf(mx0, rkv_ptx::shfl_xor_sync(0xffffffffu, mx0, 2));
    mx1 = fmaxf(mx1, rkv_ptx::shfl_xor_sync(0xffffffffu, mx1, 1));
    mx1 = fmaxf(mx1, rkv_ptx::shfl_xor_sync(0xffffffffu, mx1, 2));
    // finite (m0/m1 start at RKV__SOFTMAX_M0, attention.cuh): never -inf - -inf
    const float mn0 = fmaxf(m0, mx0), mn1 = fmaxf(m1, mx1);
    const float c0 = ex2_approx_ftz(m0 - mn0), c1 = ex2_approx_ftz(m1 - mn1);
    m0 = mn0;
    m1 = mn1;
    float ls0 = 0.f, ls1 = 0.f;
#pragma unroll
    for (int n8 = 0; n8 < NT; n8++) {
        const float p0 = ex2_approx_ftz(s[n8 * 4 + 0] - mn0);
        const float p1 = ex2_approx_ftz(s[n8 * 4 + 1] - mn0);
        const float p2 = ex2_approx_ftz(s[n8 * 4 + 2] - mn1);
        const float p3 = ex2_approx_ftz(s[n8 * 4 + 3] - mn1);
        ls0 += p0 + p1;
        ls1 += p2 + p3;
        pa[n8 / 2][(n8 & 1) * 2 + 0] = Cvt<T>::pack(p0, p1);
        pa[n8 / 2][(n8 & 1) * 2 + 1] = Cvt<T>::pack(p2, p3);
    }
    l0 = l0 * c0 + ls0;
    l1 = l1 * c1 + ls1;
#pragma unroll
    for (int dn = 0; dn < DT; dn++) {
        o[dn * 4 + 0] *= c0;
        o[dn * 4 + 1] *= c0;
        o[dn * 4 + 2] *= c1;
        o[dn * 4 + 3] *= c1;
    }
}

// Two values at out[i], out[i + 1] (f32, or a packed pair of T).
template <typename T, bool F32>
__device__ __forceinline__ void st2(void *out, int64_t i, float a, float b) {
    if (F32)
        *reinterpret_cast<float2 *>(static_cast<float *>(out) + i) = make_float2(a, b);
    else
        *reinterpret_cast<uint32_t *>(static_cast<T *>(out) + i) = Cvt<T>::pack(a, b);
}

// Epilogue of one m16 tile of rows: o holds the thread's DT x 4 accumulators
// (mma.m16n8 C layout: rows g and g+8, columns 8*dn + 2*t4 + {0,1}); m0/m1
// the running maxima (log2 units), l0/l1 the thread's partial sums of rows
// ra and ra+8 (within the M rows of the block's (b, kv head); global row
// qrow0 + ra). Writes O / l in the output dtype, or, with key splits, the
// unnormalized O and (max, sum) to the workspace of `split`.
template <typename T, int D, bool OUT_F32>
__device__ __forceinline__ void store_m16(const RkvMmaParams &p, const float *o, float m0,
                                          float m1, float l0, float l1, int64_t ra,
                                          int64_t qrow0, int split, int lane) {
    constexpr int DT = D / 8;
    const int t4 = lane & 3;
    l0 += rkv_ptx::shfl_xor_sync(0xffffffffu, l0, 1);
    l0 += rkv_ptx::shfl_xor_sync(0xffffffffu, l0, 2);
    l1 += rkv_ptx::shfl_xor_sync(0xffffffffu, l1, 1);
    l1 += rkv_ptx::shfl_xor_sync(0xffffffffu, l1, 2);
    const int64_t rb = ra + 8;
    const bool ina = ra < p.M, inb = rb < p.M;
    const int64_t ga = qrow0 + ra, gb = qrow0 + rb;  // global rows
    if (p.splits == 1) {
        const float i0 = l0 > 0.f ? 1.f / l0 : 0.f, i1 = l1 > 0.f ? 1.f / l1 : 0.f;
#pragma unroll
        for (int dn = 0; dn < DT; dn++) {
            const int col = dn * 8 + 2 * t4;
            const float *od = o + dn * 4;
            if (ina) st2<T, OUT_F32>(p.out, ga * D + col, od[0] * i0, od[1] * i0);
            if (inb) st2<T, OUT_F32>(p.out, gb * D + col, od[2] * i1, od[3] * i1);
        }
    } else {
        float *wo = p.ws_o + (int64_t)split * p.total_rows * D;
        float *wml = p.ws_ml + (int64_t)split * p.total_rows * 2;
#pragma unroll
        for (int dn = 0; dn < DT; dn++) {
            const int col = dn * 8 + 2 * t4;
            const float *od = o + dn * 4;
            if (ina) st2<T, true>(wo, ga * D + col, od[0], od[1]);
            if (inb) st2<T, true>(wo, gb * D + col, od[2], od[3]);
        }
        if (t4 == 0) {
            if (ina) st2<T, true>(wml, ga * 2, m0, l0);
            if (inb) st2<T, true>(wml, gb * 2, m1, l1);
        }
    }
}

// ---- split-combine --------------------------------------------------------------

// Internal linkage: only attention.cu launches it; its host stubs stay out
// of the library's symbols.
namespace {

// Four values at out[i..i+3] (f32, or two packed pairs of OT).
template <typename OT>
__device__ __forceinline__ void st4(OT *out, int64_t i, float4 v) {
    uint2 u;
    u.x = Cvt<OT>::pack(v.x, v.y);
    u.y = Cvt<OT>::pack(v.z, v.w);
    *reinterpret_cast<uint2 *>(out + i) = u;
}
template <>
__device__ __forceinline__ void st4<float>(float *out, int64_t i, float4 v) {
    *reinterpret_cast<float4 *>(out + i) = v;
}

// Merges the key splits of each output row: O = sum_s w_s O_s / sum_s w_s l_s
// with w_s = 2^(m_s - max_s m_s). A split with no key, or whose every score
// is -inf, has O_s = 0, l_s = 0 and m_s = RKV__SOFTMAX_M0 (attention.cuh):
// it adds nothing, and a row whose splits all are so gets 0 (den 0). A NaN
// in O_s or l_s still reaches the row (0 * NaN). One thread per 4 output
// elements. Checks the call's rows first, as the split kernel did: an
// invalid call leaves `out` untouched. Dynamic shared memory: 16 * batch.
template <typename OT>
__global__ void __launch_bounds__(256) combine_splits(const float *__restrict__ ws_o,
                                                      const float *__restrict__ ws_ml, OT *out,
                                                      int splits, int64_t rows, int D,
                                                      const int64_t *sess, const int64_t *fp,
                                                      int batch, int64_t S, int *err) {
    RKV_EXTERN_SHARED(int64_t, smem_rows);
    if (!rkv__d_validate_rows(sess, fp, batch, S, smem_rows, smem_rows + batch, err,
                              RKV__OP_ATTEND))
        return;
    const int64_t q4 = D / 4;
    const int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= rows * q4) return;
    const int64_t row = idx / q4, c = (idx - row * q4) * 4;
    float mx = -INFINITY;
    for (int s = 0; s < splits; s++) mx = fmaxf(mx, ws_ml[(s * rows + row) * 2]);
    float den = 0.f;
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int s = 0; s < splits; s++) {
        const float2 ml = *reinterpret_cast<const float2 *>(ws_ml + (s * rows + row) * 2);
        const float w = ml.x == -INFINITY ? 0.f : exp2f(ml.x - mx);
        den += w * ml.y;
        const float4 o = *reinterpret_cast<const float4 *>(ws_o + (s * rows + row) * D + c);
        acc.x += w * o.x;
        acc.y += w * o.y;
        acc.z += w * o.z;
        acc.w += w * o.w;
    }
    const float inv = den > 0.f ? 1.f / den : 0.f;
    st4<OT>(out, row * D + c, make_float4(acc.x * inv, acc.y * inv, acc.z * inv, acc.w * inv));
}

}  // namespace

// ---- host ---------------------------------------------------------------------

// Lets a kernel use all the dynamic shared memory a block may have: the
// opt-in limit minus the kernel's static shared memory (the runtime rejects
// a larger value; plan.c keeps RKV__STATIC_SMEM_MAX bytes aside for it).
template <typename K>
inline cudaError_t allow_dynamic_smem(K *kernel, size_t smem_optin) {
    cudaFuncAttributes fa;
    cudaError_t e = cudaFuncGetAttributes(&fa, kernel);
    if (e != cudaSuccess) return e;
    if (fa.sharedSizeBytes > RKV__STATIC_SMEM_MAX || fa.sharedSizeBytes > smem_optin)
        return cudaErrorInvalidValue; /* plan.c's reserve is too small */
    return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                (int)(smem_optin - fa.sharedSizeBytes));
}

}  // namespace rkv_attn

#endif

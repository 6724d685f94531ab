// The tensor-core ring attention (FlashAttention-2 style, mma.sync):
//
//   grid (m_tiles * splits, H, B); block WARPS warps; each warp owns MT
//   m16 tiles of query rows: BM = 16*MT*WARPS rows of one (row b, KV head).
//
//   Prologue (RingBlock, attention_common.cuh): every block checks all B
//   rows (session, clock) on the device, then warp 0 builds the row's list
//   of visible frames in shared memory from the written bits and the clock
//   (SEMANTICS 4). Invisible frames are never loaded.
//
//   Main loop over the row's key tiles (BN keys, never straddling a frame):
//   cp.async STAGES-deep pipeline of K and V tiles (XOR-swizzled 16-byte
//   chunks, conflict-free for ldmatrix), S = Q K^T with mma.m16n8k16 (Q
//   fragments held in registers for the whole loop), online softmax in f32
//   (base-2, scale folded in), P converted to 16-bit in registers as the A
//   operand of O += P V (V through ldmatrix.trans).
//
//   Epilogue: O / l written in the output dtype, or, when the keys are split
//   over several blocks, the unnormalized O with (max, sum) to the workspace
//   for the combine kernel.
//
// The pieces it shares with the Hopper kernel (attention_wgmma.cuh) are in
// attention_common.cuh; here: the kernel and its launches.
//
// TODO(wgmma), in attention_wgmma.cuh: K/V by TMA (cp.async.bulk.tensor on
// mbarriers), a producer warp and consumer warpgroups (setmaxnreg), and the
// softmax of one tile overlapped with the next tile's Q K^T (FlashAttention-3
// ping-pong), once the plain version has passed the GPU check.
#ifndef RKV_CUDA_ATTENTION_MMA_CUH
#define RKV_CUDA_ATTENTION_MMA_CUH

#include "attention_common.cuh"

namespace rkv_mma {

using namespace rkv_attn;  // the shared pieces (attention_common.cuh)

template <typename T, int D, int MT, int WARPS, int BN, int STAGES, bool OUT_F32>
__global__ void __launch_bounds__(WARPS * 32, 2) ring_attention_mma(const RkvMmaParams p) {
    constexpr int BM = 16 * MT * WARPS;
    constexpr int THREADS = 32 * WARPS;
    constexpr int CPR = D / 8;   // 16-byte chunks per row
    constexpr int KS = D / 16;   // k16 steps of Q K^T
    constexpr int NT = BN / 8;   // n8 tiles of S
    constexpr int DT = D / 8;    // n8 tiles of O
    static_assert(CPR >= 8, "the swizzle needs D >= 64");
    static_assert(BN % 16 == 0 && 128 % BN == 0, "BN must divide the 128-token block");

    RKV_EXTERN_SHARED_ALIGNED(128, unsigned char, smem_raw);
    RingBlock<T, D, BM, BN, STAGES, THREADS, false> blk(p, smem_raw);
    if (!blk.start()) return;  // steps 1-4 (attention_common.cuh)
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    rkv_ptx::cp_async_wait_group<STAGES - 1>();  // Q landed (tiles may still be in flight)
    __syncthreads();

    uint32_t qf[MT][KS][4];
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int kk = 0; kk < KS; kk++) {
            const int r = (warp * MT + mt) * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
            rkv_ptx::ldmatrix_x4(qf[mt][kk], blk.sQ + swz<D>(r, kk * 2 + (lane >> 4)));
        }

    float o[MT][DT][4];
    float mrow[MT][2], lrow[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
#pragma unroll
        for (int dn = 0; dn < DT; dn++) o[mt][dn][0] = o[mt][dn][1] = o[mt][dn][2] = o[mt][dn][3] = 0.f;
        mrow[mt][0] = mrow[mt][1] = RKV__SOFTMAX_M0;
        lrow[mt][0] = lrow[mt][1] = 0.f;
    }

    // 5. Main loop.
    for (int i = 0; i < blk.nt; i++) {
        blk.next(i);  // tile i visible to all; tile i-1's stage is free
        const T *ks = blk.kt(i), *vs = blk.vt(i);

        float s[MT][NT][4];
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int nt8 = 0; nt8 < NT; nt8++) s[mt][nt8][0] = s[mt][nt8][1] = s[mt][nt8][2] = s[mt][nt8][3] = 0.f;

#pragma unroll
        for (int kk = 0; kk < KS; kk++)
#pragma unroll
            for (int np = 0; np < NT / 2; np++) {
                uint32_t kb[4];
                const int key = np * 16 + (lane & 7) + ((lane >> 4) << 3);
                rkv_ptx::ldmatrix_x4(kb, ks + swz<D>(key, kk * 2 + ((lane >> 3) & 1)));
#pragma unroll
                for (int mt = 0; mt < MT; mt++) {
                    rkv_ptx::mma_m16n8k16<T>(s[mt][2 * np], qf[mt][kk], kb[0], kb[1]);
                    rkv_ptx::mma_m16n8k16<T>(s[mt][2 * np + 1], qf[mt][kk], kb[2], kb[3]);
                }
            }

        // Online softmax (base 2). Thread holds rows g (elements 0,1) and
        // g+8 (elements 2,3) of each m16 tile; a row's 4 threads are a quad.
        uint32_t pa[MT][NT / 2][4];
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
            online_softmax<T, NT, DT>(&s[mt][0][0], p.scale_log2, mrow[mt][0], mrow[mt][1],
                                      lrow[mt][0], lrow[mt][1], &o[mt][0][0], pa[mt]);

        // O += P V
#pragma unroll
        for (int kk = 0; kk < NT / 2; kk++)
#pragma unroll
            for (int dp = 0; dp < DT / 2; dp++) {
                uint32_t vb[4];
                const int key = kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
                rkv_ptx::ldmatrix_x4_trans(vb, vs + swz<D>(key, dp * 2 + (lane >> 4)));
#pragma unroll
                for (int mt = 0; mt < MT; mt++) {
                    rkv_ptx::mma_m16n8k16<T>(o[mt][2 * dp], pa[mt][kk], vb[0], vb[1]);
                    rkv_ptx::mma_m16n8k16<T>(o[mt][2 * dp + 1], pa[mt][kk], vb[2], vb[3]);
                }
            }
    }
    rkv_ptx::cp_async_wait_group<0>();  // nothing may be left in flight at exit

    // 6. Epilogue.
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
        store_m16<T, D, OUT_F32>(p, &o[mt][0][0], mrow[mt][0], mrow[mt][1], lrow[mt][0],
                                 lrow[mt][1], blk.row0 + (warp * MT + mt) * 16 + (lane >> 2),
                                 blk.qrow0, blk.split, lane);
}

// Host side: the instantiations a dtype file provides.
template <typename T, int D, int MT, int STAGES, bool OUT_F32>
inline void launch_one(const rkv__cuda_attn_plan *plan, const RkvMmaParams &p, cudaStream_t st) {
    const dim3 grid((unsigned)plan->grid_x, (unsigned)plan->grid_y, (unsigned)plan->grid_z);
    RKV_LAUNCH(grid, RKV__MMA_WARPS * 32, plan->smem_bytes, st,
               ring_attention_mma<T, D, MT, RKV__MMA_WARPS, RKV__MMA_BN, STAGES, OUT_F32>)(p);
}

template <typename T, int D, int MT, int STAGES>
inline void launch_out(const rkv__cuda_attn_plan *plan, const RkvMmaParams &p, cudaStream_t st) {
    plan->out_f32 ? launch_one<T, D, MT, STAGES, true>(plan, p, st)
                  : launch_one<T, D, MT, STAGES, false>(plan, p, st);
}

template <typename T>
void launch(const rkv__cuda_attn_plan *plan, const RkvMmaParams &p, cudaStream_t st) {
    if (plan->d_head != 64)
        launch_out<T, 128, RKV__MMA_D128_MT, 2>(plan, p, st);
    else if (plan->stages == 3)
        launch_out<T, 64, RKV__MMA_D64_MT, 3>(plan, p, st);
    else
        launch_out<T, 64, RKV__MMA_D64_MT, 2>(plan, p, st);
}

template <typename T, int D, int MT, int STAGES, bool OUT_F32>
inline cudaError_t prepare_one(size_t smem_optin) {
    return allow_dynamic_smem(
        ring_attention_mma<T, D, MT, RKV__MMA_WARPS, RKV__MMA_BN, STAGES, OUT_F32>, smem_optin);
}

template <typename T>
cudaError_t prepare(size_t smem_optin) {
    cudaError_t e;
    if ((e = prepare_one<T, 64, RKV__MMA_D64_MT, 2, false>(smem_optin)) != cudaSuccess ||
        (e = prepare_one<T, 64, RKV__MMA_D64_MT, 2, true>(smem_optin)) != cudaSuccess ||
        (e = prepare_one<T, 64, RKV__MMA_D64_MT, 3, false>(smem_optin)) != cudaSuccess ||
        (e = prepare_one<T, 64, RKV__MMA_D64_MT, 3, true>(smem_optin)) != cudaSuccess ||
        (e = prepare_one<T, 128, RKV__MMA_D128_MT, 2, false>(smem_optin)) != cudaSuccess)
        return e;
    return prepare_one<T, 128, RKV__MMA_D128_MT, 2, true>(smem_optin);
}

}  // namespace rkv_mma

#endif

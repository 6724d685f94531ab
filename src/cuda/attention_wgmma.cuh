// The Hopper ring attention (sm_90a, wgmma): the same function as the
// mma.sync kernel of attention_mma.cuh, built from the same pieces
// (attention_common.cuh: tile loads, frame list, the block's pipeline,
// online softmax, store, combine), with the two matrix products on the
// warpgroup tensor-core instructions:
//
//   grid (m_tiles * splits, H, B); block NWG warpgroups of 4 warps; each
//   warpgroup owns 64 consecutive query rows (BM = 64 * NWG per block).
//   D = 64 only (one 128-byte row per token: the 128-byte swizzle atom).
//
//   Shared memory, all tiles [rows][64] of 16-bit elements with the 16-byte
//   chunk c of row r stored at chunk c ^ (r mod 8), on 1024-byte aligned
//   bases: exactly the layout the 128-byte swizzle mode of a wgmma matrix
//   descriptor describes (PTX ISA, "Matrix Descriptor Format" and the
//   canonical layouts of "Shared Memory Matrix Layout"; CUTLASS calls it
//   Swizzle<3,4,3>, the address bits [4,7) XORed with bits [7,10)).
//     S = Q K^T: wgmma m64n64k16, A = Q (K-major, from shared memory), B =
//       the K tile (K-major: keys are B's N rows, D contiguous); 4 steps of
//       k16, the descriptors' start address advanced by 32 bytes per step;
//       stride byte offset (between 8-row groups) 1024.
//     O += P V: wgmma m64n64k16, A = P from registers (the S accumulators'
//       layout per warp is mma.m16n8's C layout, so P packs into A
//       fragments exactly as in the mma.sync kernel), B = the V tile
//       (MN-major: D contiguous, keys are B's K rows; transpose flag set);
//       4 steps of k16 keys, start address advanced by 16 rows = 2048 bytes.
//   K/V tiles of BN = 64 keys are brought by cp.async, STAGES deep, by all
//   threads; each writing thread fences the async proxy
//   (fence.proxy.async.shared::cta) before the barrier that publishes a
//   tile to the tensor cores (HOPPER.md, "Ordering"). Each product is
//   committed and waited for before its accumulators are read (no
//   intra-warpgroup overlap yet: two blocks of two warpgroups per SM overlap
//   one warpgroup's softmax with another's products).
//
// Not yet run on a GPU: chosen only when RKV_CUDA_ATTN_KERNEL=wgmma until
// scripts/gpu_check.sh has passed with it (the differential test runs both
// kernels). Built for sm_90a only; in the sm_90 / PTX builds the kernel body
// records RKV__DEVERR_ARCH instead (the host plans it only on a 9.x device).
#ifndef RKV_CUDA_ATTENTION_WGMMA_CUH
#define RKV_CUDA_ATTENTION_WGMMA_CUH

#include "attention_common.cuh"

namespace rkv_wgmma {

using namespace rkv_attn;  // the shared pieces (attention_common.cuh)

constexpr int D = 64;   // d_head (one 128-byte swizzle atom row per token)
constexpr int BN = 64;  // keys per tile (divides the 128-token frame block)

// ---- descriptors and register fences ---------------------------------------------

// A shared-memory matrix descriptor, 128-byte swizzle: start address,
// leading and stride byte offsets (all >> 4), base offset 0 (tiles are
// 1024-byte aligned), layout type 1 (SWIZZLE_128B) in bits 62-63.
__device__ __forceinline__ uint64_t desc_sw128(uint32_t saddr, uint32_t lbo, uint32_t sbo) {
    uint64_t d = (uint64_t)((saddr & 0x3FFFFu) >> 4);
    d |= (uint64_t)((lbo >> 4) & 0x3FFFu) << 16;
    d |= (uint64_t)((sbo >> 4) & 0x3FFFu) << 32;
    d |= (uint64_t)1 << 62;
    return d;
}

// The register operand fences (ptx.cuh's fence_operand) of a whole array
// (R: float or uint32_t).
template <typename R, int N>
__device__ __forceinline__ void fence_regs(R (&r)[N]) {
#pragma unroll
    for (int i = 0; i < N; i++) rkv_ptx::fence_operand(r[i]);
}

template <typename T, int NWG, int STAGES, bool OUT_F32>
__global__ void __launch_bounds__(NWG * 128, 2) ring_attention_wgmma(const RkvMmaParams p) {
#if RKV_PTX_HAS_WGMMA  // the body exists where wgmma does (ptx.cuh: sm_90a code)
    constexpr int BM = 64 * NWG;
    constexpr int THREADS = 128 * NWG;
    constexpr int NT = BN / 8;  // n8 tiles of S
    constexpr int DT = D / 8;   // n8 tiles of O

    RKV_EXTERN_SHARED_ALIGNED(1024, unsigned char, smem_raw);
    // Steps 1-4 (attention_common.cuh; the rows' staging aliases the K
    // stages: 16 * B <= 16 * 1024 bytes <= STAGES * BN * D * 2).
    RingBlock<T, D, BM, BN, STAGES, THREADS, true> blk(
        p, smem_raw + ((1024u - (smem_addr(smem_raw) & 1023u)) & 1023u));
    if (!blk.start()) return;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int wg = warp >> 2, wl = warp & 3;  // warpgroup, warp within it

    float o[DT * 4];
#pragma unroll
    for (int j = 0; j < DT * 4; j++) o[j] = 0.f;
    float m0 = RKV__SOFTMAX_M0, m1 = RKV__SOFTMAX_M0, l0 = 0.f, l1 = 0.f;
    const uint32_t q_addr = smem_addr(blk.sQ + wg * 64 * D);

    // 5. Main loop.
    for (int i = 0; i < blk.nt; i++) {
        // tile i (and Q) landed for this thread, is ordered before the tensor
        // cores' reads, and by every thread; tile i-1's stage is free
        blk.next(i);
        const uint32_t k_addr = smem_addr(blk.kt(i)), v_addr = smem_addr(blk.vt(i));

        // S = Q K^T (64 x BN per warpgroup)
        float s[NT * 4];
#pragma unroll
        for (int j = 0; j < NT * 4; j++) s[j] = 0.f;
        fence_regs(s);
        rkv_ptx::wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < D / 16; kk++)
            rkv_ptx::wgmma_m64n64k16_ss<T>(s, desc_sw128(q_addr + kk * 32, 16, 1024),
                                           desc_sw128(k_addr + kk * 32, 16, 1024), kk);
        rkv_ptx::wgmma_commit_group();
        rkv_ptx::wgmma_wait_group<0>();
        fence_regs(s);

        // Online softmax of the tile (attention_common.cuh; one m16 tile per warp).
        uint32_t pa[BN / 16][4];
        online_softmax<T, NT, DT>(s, p.scale_log2, m0, m1, l0, l1, o, pa);

        // O += P V
#pragma unroll
        for (int kk = 0; kk < BN / 16; kk++) fence_regs(pa[kk]);
        fence_regs(o);
        rkv_ptx::wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < BN / 16; kk++)
            rkv_ptx::wgmma_m64n64k16_rs<T>(o, pa[kk],
                                           desc_sw128(v_addr + kk * 16 * D * 2, 64 * D * 2, 1024));
        rkv_ptx::wgmma_commit_group();
        rkv_ptx::wgmma_wait_group<0>();
        fence_regs(o);
#pragma unroll
        for (int kk = 0; kk < BN / 16; kk++) fence_regs(pa[kk]);
    }
    rkv_ptx::cp_async_wait_group<0>();  // nothing may be left in flight at exit

    // 6. Epilogue: one m16 tile per warp, rows 16 * wl of its warpgroup's 64.
    store_m16<T, D, OUT_F32>(p, o, m0, m1, l0, l1, blk.row0 + wg * 64 + wl * 16 + (lane >> 2),
                             blk.qrow0, blk.split, lane);
#else
    // Built without sm_90a: this code must never be planned; say so.
    if (threadIdx.x == 0 && blockIdx.x == 0 && blockIdx.y == 0 && blockIdx.z == 0)
        rkv_ptx::atomic_cas(p.err, 0, (RKV__OP_ATTEND << 24) | (RKV__DEVERR_ARCH << 16));
#endif
}

// ---- host side ----------------------------------------------------------------

template <typename T, bool OUT_F32>
inline void launch_one(const rkv__cuda_attn_plan *plan, const RkvMmaParams &p, cudaStream_t st) {
    const dim3 grid((unsigned)plan->grid_x, (unsigned)plan->grid_y, (unsigned)plan->grid_z);
    RKV_LAUNCH(grid, RKV__WGMMA_WARPGROUPS * 128, plan->smem_bytes, st,
               ring_attention_wgmma<T, RKV__WGMMA_WARPGROUPS, RKV__WGMMA_STAGES, OUT_F32>)(p);
}

template <typename T>
void launch(const rkv__cuda_attn_plan *plan, const RkvMmaParams &p, cudaStream_t st) {
    plan->out_f32 ? launch_one<T, true>(plan, p, st) : launch_one<T, false>(plan, p, st);
}

// Whether the copy of the kernel the driver loaded for this GPU is the
// sm_90a one (the library holds sm_90a and sm_90 machine code and compute_90
// PTX; only sm_90a has the body, the others a stub that records
// RKV__DEVERR_ARCH). The stub uses a handful of registers and no shared
// memory; the real kernel over a hundred and 1,024 static bytes.
template <typename T>
bool loaded_is_sm90a() {
    cudaFuncAttributes fa;
    if (cudaFuncGetAttributes(&fa, ring_attention_wgmma<T, RKV__WGMMA_WARPGROUPS,
                                                        RKV__WGMMA_STAGES, false>) != cudaSuccess) {
        cudaGetLastError();
        return false;
    }
    return fa.numRegs >= 32 && fa.sharedSizeBytes >= 1024;
}

template <typename T>
cudaError_t prepare(size_t smem_optin) {
    cudaError_t e = allow_dynamic_smem(
        ring_attention_wgmma<T, RKV__WGMMA_WARPGROUPS, RKV__WGMMA_STAGES, true>, smem_optin);
    if (e != cudaSuccess) return e;
    return allow_dynamic_smem(
        ring_attention_wgmma<T, RKV__WGMMA_WARPGROUPS, RKV__WGMMA_STAGES, false>, smem_optin);
}

}  // namespace rkv_wgmma

#endif

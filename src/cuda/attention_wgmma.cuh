// The Hopper ring attention (sm_90a, wgmma): the same function as the
// mma.sync kernel of attention_mma.cuh (SEMANTICS 4, 5: visible frames
// from the written bits and the row's clock, skipped whole when invisible;
// online softmax in f32; GQA heads sharing each K/V tile; key splits with a
// combine kernel), built from the same pieces (attention_common.cuh: tile
// loads, frame list, key-tile walk, online softmax, store, split-combine),
// with the two matrix products on the warpgroup tensor-core instructions:
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

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define RKV_WGMMA_ENABLED 1
#else
#define RKV_WGMMA_ENABLED 0
#endif

namespace rkv_wgmma {

using namespace rkv_attn;  // the shared pieces (attention_common.cuh)

constexpr int D = 64;   // d_head (one 128-byte swizzle atom row per token)
constexpr int BN = 64;  // keys per tile (divides the 128-token frame block)

// ---- PTX wrappers (sm_90a) ------------------------------------------------------

__device__ __forceinline__ void wg_fence() {
#if RKV_WGMMA_ENABLED
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void wg_commit() {
#if RKV_WGMMA_ENABLED
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void wg_wait_all() {
#if RKV_WGMMA_ENABLED
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
#endif
}
// Orders this thread's generic-proxy shared-memory writes (cp.async, plain
// stores) before later async-proxy reads (wgmma operands).
__device__ __forceinline__ void fence_proxy_async() {
#if RKV_WGMMA_ENABLED
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}

// Register operand fences (CUTLASS's warpgroup_fence_operand): an empty asm
// that reads and writes each register, so the compiler cannot move ordinary
// accesses of accumulators or A fragments across wgmma.fence / wait_group
// (PTX ISA: touching them between an in-flight wgmma and its wait is
// undefined; ptxas would serialize the wgmmas where it notices).
template <int N>
__device__ __forceinline__ void fence_regs(float (&r)[N]) {
#pragma unroll
    for (int i = 0; i < N; i++) asm volatile("" : "+f"(r[i])::"memory");
}
template <int N>
__device__ __forceinline__ void fence_regs(uint32_t (&r)[N]) {
#pragma unroll
    for (int i = 0; i < N; i++) asm volatile("" : "+r"(r[i])::"memory");
}

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

#define RKV_WG_D32                                                                          \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, " \
    "%19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define RKV_WG_OUT32(d)                                                                       \
    "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),       \
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]),            \
        "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]),         \
        "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),         \
        "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]),         \
        "+f"(d[31])

// d (+)= A B for m64n64k16, f32 accumulators. ss: A and B from shared memory
// (both K-major); accumulate != 0 adds to d, 0 overwrites it. rs: A from
// registers (4 x 32-bit per thread, the m16n8k16 A fragment of the thread's
// warp's 16 rows), B from shared memory MN-major (transpose flag 1),
// always accumulating.
#if RKV_WGMMA_ENABLED
#define RKV_WG_SS(TY)                                                                         \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"                                 \
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32." TY "." TY " " RKV_WG_D32       \
                 ", %32, %33, p, 1, 1, 0, 0;\n}\n"                                            \
                 : RKV_WG_OUT32(d)                                                            \
                 : "l"(da), "l"(db), "r"(accumulate))
#define RKV_WG_RS(TY)                                                                         \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"                                 \
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32." TY "." TY " " RKV_WG_D32       \
                 ", {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"                              \
                 : RKV_WG_OUT32(d)                                                            \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1))
#else
#define RKV_WG_SS(TY) ((void)d, (void)da, (void)db, (void)accumulate)
#define RKV_WG_RS(TY) ((void)d, (void)a, (void)db)
#endif

template <typename T>
struct Wg;

template <>
struct Wg<__nv_bfloat16> {
    static __device__ __forceinline__ void ss(float (&d)[32], uint64_t da, uint64_t db,
                                              int accumulate) {
        RKV_WG_SS("bf16");
    }
    static __device__ __forceinline__ void rs(float (&d)[32], const uint32_t (&a)[4],
                                              uint64_t db) {
        RKV_WG_RS("bf16");
    }
};

template <>
struct Wg<__half> {
    static __device__ __forceinline__ void ss(float (&d)[32], uint64_t da, uint64_t db,
                                              int accumulate) {
        RKV_WG_SS("f16");
    }
    static __device__ __forceinline__ void rs(float (&d)[32], const uint32_t (&a)[4],
                                              uint64_t db) {
        RKV_WG_RS("f16");
    }
};

template <typename T, int NWG, int STAGES, bool OUT_F32>
__global__ void __launch_bounds__(NWG * 128, 2) ring_attention_wgmma(const RkvMmaParams p) {
#if RKV_WGMMA_ENABLED
    constexpr int BM = 64 * NWG;
    constexpr int THREADS = 128 * NWG;
    constexpr int NT = BN / 8;  // n8 tiles of S
    constexpr int DT = D / 8;   // n8 tiles of O

    extern __shared__ __align__(1024) unsigned char smem_raw[];
    unsigned char *base = smem_raw + ((1024u - (smem_addr(smem_raw) & 1023u)) & 1023u);
    T *sQ = reinterpret_cast<T *>(base);
    T *sK = sQ + BM * D;
    T *sV = sK + STAGES * BN * D;
    int *sList = reinterpret_cast<int *>(sV + STAGES * BN * D);
    __shared__ int sNf;

    // 1. Device checks of every row (the staging aliases the K stages:
    // 16 * B <= 16 * 1024 bytes <= STAGES * BN * D * 2).
    int64_t *sSess = reinterpret_cast<int64_t *>(sK), *sFp = sSess + p.batch;
    if (!rkv__d_validate_rows(p.sess, p.fp, p.batch, p.S, sSess, sFp, p.err, RKV__OP_ATTEND))
        return;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wg = warp >> 2, wl = warp & 3;  // warpgroup, warp within it
    const int b = blockIdx.z, kvh = blockIdx.y;
    const int mtile = (int)(blockIdx.x % p.m_tiles), split = (int)(blockIdx.x / p.m_tiles);
    const int64_t sess = sSess[b], f = sFp[b];

    // 2. Q tile (rows past M zero-filled) in flight while the list is built.
    const int64_t qrow0 = ((int64_t)b * p.Hq + (int64_t)kvh * p.group) * p.Tq;
    const int64_t row0 = (int64_t)mtile * BM;
    load_tile_async<T, D, BM, THREADS>(sQ, static_cast<const T *>(p.q) + (qrow0 + row0) * D,
                                       p.M - row0, tid);
    cp_async_commit();

    // 3. The row's visible frames (bits-and-clock rule), ascending, scratch last.
    if (warp == 0) build_frame_list(p, sess, f, lane, sList, &sNf);
    __syncthreads();  // list ready; the staging in sK is dead from here on

    const KeyTiles<T, D, BN, THREADS> tiles(p, sess, kvh, split, sList, sNf);
    const int nt = tiles.nt;
    auto load_tile = [&](int i, int stage) {
        tiles.load(i, sK + stage * BN * D, sV + stage * BN * D, tid);
    };

    // 4. The first STAGES-1 key tiles.
#pragma unroll
    for (int i = 0; i < STAGES - 1; i++) {
        if (i < nt) load_tile(i, i);
        cp_async_commit();
    }

    float o[DT * 4];
#pragma unroll
    for (int j = 0; j < DT * 4; j++) o[j] = 0.f;
    float m0 = RKV__SOFTMAX_M0, m1 = RKV__SOFTMAX_M0, l0 = 0.f, l1 = 0.f;
    const uint32_t q_addr = smem_addr(sQ + wg * 64 * D);

    // 5. Main loop.
    for (int i = 0; i < nt; i++) {
        cp_async_wait<STAGES - 2>();  // tile i (and Q) landed for this thread
        fence_proxy_async();          // ... and is ordered before the tensor cores' reads
        __syncthreads();              // by every thread; tile i-1's stage is free
        if (i + STAGES - 1 < nt) load_tile(i + STAGES - 1, (i + STAGES - 1) % STAGES);
        cp_async_commit();

        const uint32_t k_addr = smem_addr(sK + (i % STAGES) * BN * D);
        const uint32_t v_addr = smem_addr(sV + (i % STAGES) * BN * D);

        // S = Q K^T (64 x BN per warpgroup)
        float s[NT * 4];
#pragma unroll
        for (int j = 0; j < NT * 4; j++) s[j] = 0.f;
        fence_regs(s);
        wg_fence();
#pragma unroll
        for (int kk = 0; kk < D / 16; kk++)
            Wg<T>::ss(s, desc_sw128(q_addr + kk * 32, 16, 1024),
                      desc_sw128(k_addr + kk * 32, 16, 1024), kk);
        wg_commit();
        wg_wait_all();
        fence_regs(s);

        // Online softmax of the tile (attention_common.cuh; one m16 tile per warp).
        uint32_t pa[BN / 16][4];
        online_softmax<T, NT, DT>(s, p.scale_log2, m0, m1, l0, l1, o, pa);

        // O += P V
#pragma unroll
        for (int kk = 0; kk < BN / 16; kk++) fence_regs(pa[kk]);
        fence_regs(o);
        wg_fence();
#pragma unroll
        for (int kk = 0; kk < BN / 16; kk++)
            Wg<T>::rs(o, pa[kk], desc_sw128(v_addr + kk * 16 * D * 2, 64 * D * 2, 1024));
        wg_commit();
        wg_wait_all();
        fence_regs(o);
#pragma unroll
        for (int kk = 0; kk < BN / 16; kk++) fence_regs(pa[kk]);
    }
    cp_async_wait<0>();  // nothing may be left in flight at exit

    // 6. Epilogue: one m16 tile per warp, rows 16 * wl of its warpgroup's 64.
    store_m16<T, D, OUT_F32>(p, o, m0, m1, l0, l1, row0 + wg * 64 + wl * 16 + (lane >> 2), qrow0,
                             split, lane);
#else
    // Built without sm_90a: this code must never be planned; say so.
    if (threadIdx.x == 0 && blockIdx.x == 0 && blockIdx.y == 0 && blockIdx.z == 0)
        atomicCAS(p.err, 0, (RKV__OP_ATTEND << 24) | (RKV__DEVERR_ARCH << 16));
#endif
}

// ---- host side ----------------------------------------------------------------

template <typename T, bool OUT_F32>
inline void launch_one(const rkv__cuda_attn_plan *plan, const RkvMmaParams &p, cudaStream_t st) {
    const dim3 grid((unsigned)plan->grid_x, (unsigned)plan->grid_y, (unsigned)plan->grid_z);
    ring_attention_wgmma<T, RKV__WGMMA_WARPGROUPS, RKV__WGMMA_STAGES, OUT_F32>
        <<<grid, RKV__WGMMA_WARPGROUPS * 128, plan->smem_bytes, st>>>(p);
}

template <typename T>
inline void launch(const rkv__cuda_attn_plan *plan, const RkvMmaParams &p, cudaStream_t st) {
    if (plan->out_f32)
        launch_one<T, true>(plan, p, st);
    else
        launch_one<T, false>(plan, p, st);
}

// Whether the copy of the kernel the driver loaded for this GPU is the
// sm_90a one (the library holds sm_90a and sm_90 machine code and compute_90
// PTX; only sm_90a has the body, the others a stub that records
// RKV__DEVERR_ARCH). The stub uses a handful of registers and no shared
// memory; the real kernel over a hundred and 1,024 static bytes.
template <typename T>
inline bool loaded_is_sm90a() {
    cudaFuncAttributes fa;
    if (cudaFuncGetAttributes(&fa, ring_attention_wgmma<T, RKV__WGMMA_WARPGROUPS,
                                                        RKV__WGMMA_STAGES, false>) != cudaSuccess) {
        cudaGetLastError();
        return false;
    }
    return fa.numRegs >= 32 && fa.sharedSizeBytes >= 1024;
}

template <typename T>
inline cudaError_t prepare(size_t smem_optin) {
    cudaError_t e = allow_dynamic_smem(
        ring_attention_wgmma<T, RKV__WGMMA_WARPGROUPS, RKV__WGMMA_STAGES, true>, smem_optin);
    if (e != cudaSuccess) return e;
    return allow_dynamic_smem(
        ring_attention_wgmma<T, RKV__WGMMA_WARPGROUPS, RKV__WGMMA_STAGES, false>, smem_optin);
}

}  // namespace rkv_wgmma

#endif

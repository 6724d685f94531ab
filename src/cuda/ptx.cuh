// The CUDA backend's PTX wrappers: every inline PTX instruction the kernels
// use, and every intrinsic with hardware semantics (shuffles, ballots,
// atomics), behind one device function each. No kernel has an asm
// statement of its own; the wrappers are the only place where the kernels
// meet the hardware.
//
// Each wrapper cites the section of the PTX ISA (version 8.x/9.0, "Parallel
// Thread Execution ISA", docs.nvidia.com/cuda/parallel-thread-execution)
// that defines its instruction. On the device the wrapper is the
// instruction, nothing else.
#ifndef RKV_CUDA_PTX_CUH
#define RKV_CUDA_PTX_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

// wgmma and its fences exist in sm_90a code only (PTX ISA 9.7.15, "Target
// ISA Notes: requires sm_90a"). In the sm_90 machine code and the compute_90
// PTX the library also carries, the wrappers below are empty and the wgmma
// kernel's body is a stub (attention_wgmma.cuh).
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define RKV_PTX_HAS_WGMMA 1
#else
#define RKV_PTX_HAS_WGMMA 0
#endif

namespace rkv_ptx {

// ---- addresses ------------------------------------------------------------------

// The shared-window address of a generic pointer into this block's shared
// memory (cvta.to.shared, PTX ISA 9.7.9.20 "cvta"): the operand of the
// .shared instructions below and the start address of a wgmma descriptor.
__device__ __forceinline__ uint32_t smem_addr(const void *p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// ---- non-bulk asynchronous copy (PTX ISA 9.7.9.25.3) ---------------------------

// cp.async.cg.shared.global [dst], [src], 16, src_bytes (9.7.9.25.3.1): 16
// bytes global -> shared, cached in L2 only; the first src_bytes (0..16)
// come from src, the rest of the 16 are zeros (src_bytes 0: src is not
// read). Both addresses 16-byte aligned ("Addresses as Operands"). The
// destination may be read only after the cp.async.wait_group that covers
// the group this copy was committed in.
__device__ __forceinline__ void cp_async_cg16(void *dst, const void *src, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)),
                 "l"(src), "r"(src_bytes)
                 : "memory");
}
// cp.async.commit_group (9.7.9.25.3.2): this thread's uncommitted copies
// become one cp.async-group (an empty group when there are none).
__device__ __forceinline__ void cp_async_commit_group() {
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}
// cp.async.wait_group N (9.7.9.25.3.3): waits until at most the N most recent
// of this thread's groups are pending; the copies of the others are then
// visible to this thread (to other threads only after a barrier).
template <int N>
__device__ __forceinline__ void cp_async_wait_group() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// ---- floating point ---------------------------------------------------------------

// ex2.approx.ftz.f32 (9.7.3.21): 2^x within 2 ulp; -inf -> +0, +inf -> +inf,
// NaN -> NaN; subnormal inputs and results flushed to sign-preserving zero.
__device__ __forceinline__ float ex2_approx_ftz(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

// ---- warp-level matrix instructions (9.7.14) -----------------------------------------

// ldmatrix.sync.aligned.m8n8.x4.shared.b16 (9.7.14.5.15): four 8x8 matrices of
// 16-bit elements; lane 8i+j gives the address of row j of matrix i (16
// bytes, 16-byte aligned); lane l receives in r[i] the elements (l/4, 2(l%4))
// and (l/4, 2(l%4)+1) of matrix i, the lower column in the low half.
// .trans: the matrices are read column-major, lane l receiving (2(l%4), l/4)
// and (2(l%4)+1, l/4). Every lane of the warp executes the same one.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}

// mma.sync.aligned.m16n8k16.row.col.f32.T.T.f32 (9.7.14.5.14, fragments
// 9.7.14.5.8), T = bf16 or f16: c += A B for the warp's 16x16 A (row-major)
// and 16x8 B (column-major), f32 accumulators. With g = lane/4, t = lane%4:
// a[i] holds A(g + 8(i%2), 2t + 8(i/2)) and the next column, b0 holds
// B(2t, g), B(2t+1, g), b1 the same 8 rows down; c[i] is C(g + 8(i/2),
// 2t + i%2).
template <typename T>
struct Mma16816;

// One specialization per element type (CT: the C++ type, TY: its PTX name).
#define RKV_PTX_MMA16816(CT, TY)                                                           \
    template <>                                                                            \
    struct Mma16816<CT> {                                                                  \
        static __device__ __forceinline__ void run(float (&c)[4], const uint32_t (&a)[4], \
                                                   uint32_t b0, uint32_t b1) {             \
            asm volatile("mma.sync.aligned.m16n8k16.row.col.f32." TY "." TY ".f32 "        \
                         "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"          \
                         : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])                  \
                         : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));  \
        }                                                                                  \
    }
RKV_PTX_MMA16816(__nv_bfloat16, "bf16");
RKV_PTX_MMA16816(__half, "f16");
#undef RKV_PTX_MMA16816

template <typename T>
__device__ __forceinline__ void mma_m16n8k16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                             uint32_t b1) {
    Mma16816<T>::run(c, a, b0, b1);
}

// ---- warpgroup-level matrix instructions (9.7.15, sm_90a) ------------------------------

// wgmma.fence.sync.aligned (9.7.15.7.1): orders this warpgroup's earlier
// accesses of accumulator and A-fragment registers before the next
// wgmma.mma_async that uses them; needed before the first mma_async and
// after any other access of those registers.
__device__ __forceinline__ void wgmma_fence() {
#if RKV_PTX_HAS_WGMMA
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}
// wgmma.commit_group.sync.aligned (9.7.15.7.2): the warp's uncommitted
// mma_async operations become one wgmma-group.
__device__ __forceinline__ void wgmma_commit_group() {
#if RKV_PTX_HAS_WGMMA
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}
// wgmma.wait_group.sync.aligned N (9.7.15.7.3): waits until at most N of the
// most recent wgmma-groups are pending. Reading or writing the accumulators
// (or the A registers) of an mma_async before the wait that covers it is
// undefined.
template <int N>
__device__ __forceinline__ void wgmma_wait_group() {
#if RKV_PTX_HAS_WGMMA
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
#endif
}
// fence.proxy.async.shared::cta (9.7.13.4, "membar/fence"; 9.7.15.4 "Async
// Proxy"): orders this thread's generic-proxy writes to shared memory
// (plain stores, cp.async) before later async-proxy reads (wgmma operands);
// other threads' writes need their own fence and then a barrier.
__device__ __forceinline__ void fence_proxy_async_shared_cta() {
#if RKV_PTX_HAS_WGMMA
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}

// Register operand fences (CUTLASS's warpgroup_fence_operand; not a PTX
// instruction): an empty asm that reads and writes the register, so the
// compiler cannot move ordinary accesses of accumulators or A fragments
// across wgmma.fence / wait_group.
__device__ __forceinline__ void fence_operand(float &r) { asm volatile("" : "+f"(r)::"memory"); }
__device__ __forceinline__ void fence_operand(uint32_t &r) {
    asm volatile("" : "+r"(r)::"memory");
}

#define RKV_PTX_WG_D32                                                                      \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, " \
    "%19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define RKV_PTX_WG_OUT32(d)                                                                   \
    "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),       \
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]),            \
        "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]),         \
        "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),         \
        "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]),         \
        "+f"(d[31])

// wgmma.mma_async.sync.aligned.m64n64k16.f32.T.T (9.7.15.5.2), T = bf16 or
// f16, issued by the 128 threads of a warpgroup; asynchronous until the
// wgmma.wait_group that covers its commit group.
//   ss: d (+)= A B with A (64x16) and B (16x64) both in shared memory, both
//       K-major (imm-trans-a = imm-trans-b = 0), described by the matrix
//       descriptors da and db (9.7.15.5.1.2.2); scale_d != 0 adds to d, 0
//       overwrites it (the scale-d predicate).
//   rs: d += A B with A from registers (4 x 32 bits per thread, the
//       m16n8k16 A layout of the warp's 16 rows, 9.7.15.5.1.1.1) and B in
//       shared memory MN-major (imm-trans-b = 1).
// The accumulator layout (9.7.15.5.1.1.1): warp w, lane l (g = l/4, t =
// l%4): d[i] is D(16w + g + 8((i/2)%2), 8(i/4) + 2t + i%2).
template <typename T>
struct Wgmma64;

#if RKV_PTX_HAS_WGMMA
#define RKV_PTX_WG_SS(TY)                                                                     \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"                                 \
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32." TY "." TY " " RKV_PTX_WG_D32   \
                 ", %32, %33, p, 1, 1, 0, 0;\n}\n"                                            \
                 : RKV_PTX_WG_OUT32(d)                                                        \
                 : "l"(da), "l"(db), "r"(scale_d))
#define RKV_PTX_WG_RS(TY)                                                                     \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"                                 \
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32." TY "." TY " " RKV_PTX_WG_D32   \
                 ", {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"                              \
                 : RKV_PTX_WG_OUT32(d)                                                        \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1))
#else
#define RKV_PTX_WG_SS(TY) ((void)d, (void)da, (void)db, (void)scale_d)
#define RKV_PTX_WG_RS(TY) ((void)d, (void)a, (void)db)
#endif

#define RKV_PTX_WGMMA64(CT, TY)                                                            \
    template <>                                                                            \
    struct Wgmma64<CT> {                                                                   \
        static __device__ __forceinline__ void ss(float (&d)[32], uint64_t da, uint64_t db, \
                                                  int scale_d) {                           \
            RKV_PTX_WG_SS(TY);                                                             \
        }                                                                                  \
        static __device__ __forceinline__ void rs(float (&d)[32], const uint32_t (&a)[4],  \
                                                  uint64_t db) {                           \
            RKV_PTX_WG_RS(TY);                                                             \
        }                                                                                  \
    }
RKV_PTX_WGMMA64(__nv_bfloat16, "bf16");
RKV_PTX_WGMMA64(__half, "f16");
#undef RKV_PTX_WGMMA64

template <typename T>
__device__ __forceinline__ void wgmma_m64n64k16_ss(float (&d)[32], uint64_t da, uint64_t db,
                                                   int scale_d) {
    Wgmma64<T>::ss(d, da, db, scale_d);
}
template <typename T>
__device__ __forceinline__ void wgmma_m64n64k16_rs(float (&d)[32], const uint32_t (&a)[4],
                                                   uint64_t db) {
    Wgmma64<T>::rs(d, a, db);
}

// ---- warp-wide data exchange and votes -----------------------------------------------

// shfl.sync.bfly (9.7.9.6 "shfl.sync"): lane l receives v of lane l ^ lane_mask;
// every lane of `mask` executes the same one.
__device__ __forceinline__ float shfl_xor_sync(unsigned mask, float v, int lane_mask) {
    return __shfl_xor_sync(mask, v, lane_mask);
}
// shfl.sync.idx: every lane receives v of lane `src`.
__device__ __forceinline__ float shfl_idx_sync(unsigned mask, float v, int src) {
    return __shfl_sync(mask, v, src);
}
// vote.sync.ballot.b32 (9.7.13.9 "vote.sync"): bit l of the result is lane
// l's predicate, for the lanes of `mask` (which all execute it).
__device__ __forceinline__ unsigned ballot_sync(unsigned mask, bool pred) {
    return __ballot_sync(mask, pred);
}

// ---- atomics (9.7.13.5 "atom") ---------------------------------------------------------

// atom.min.s32 on shared or global memory; returns the old value.
__device__ __forceinline__ int atomic_min(int *p, int v) { return atomicMin(p, v); }
// atom.cas.b32: *p = (*p == cmp) ? v : *p, atomically; returns the old value.
__device__ __forceinline__ int atomic_cas(int *p, int cmp, int v) { return atomicCAS(p, cmp, v); }

}  // namespace rkv_ptx

#endif

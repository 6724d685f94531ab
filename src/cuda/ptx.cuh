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
//
// In the host build for the CPU executor (RKV_CUDA_EXEC defined; test-only,
// tests/cuda_exec, docs/cuda.md) each wrapper is instead its instruction's
// semantics as that section states them, written here beside the asm: which
// lane supplies and receives which element, the arithmetic, the layouts a
// wgmma descriptor encodes. The executor (tests/cuda_exec/rkvx.h) gives them
// the machinery (collectives, shared memory, async completion) and enforces
// the rules; tests/cuda/fragment_model.py is a second, independent reading
// of the same sections that tests/cuda_exec checks these against. Every
// wrapper then takes a defaulted last argument, the call's source site
// (RKV_PTX_AT), which the executor's convergence checks and messages use.
#ifndef RKV_CUDA_PTX_CUH
#define RKV_CUDA_PTX_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#if defined(RKV_CUDA_EXEC)
#include <math.h>
#include <string.h>

#include "rkvx.h"
// (two parameters: __builtin_FILE/LINE name the caller only when each is a
// default argument by itself)
#define RKV_PTX_AT , const char *rkv_file_ = __builtin_FILE(), int rkv_line_ = __builtin_LINE()
#define RKV_PTX_AT_ONLY const char *rkv_file_ = __builtin_FILE(), int rkv_line_ = __builtin_LINE()
#define RKV_PTX_SITE (::rkvx::Site{rkv_file_, rkv_line_})
#else
#define RKV_PTX_AT
#define RKV_PTX_AT_ONLY
#endif

// wgmma and its fences exist in sm_90a code only (PTX ISA 9.7.15, "Target
// ISA Notes: requires sm_90a"). In the sm_90 machine code and the compute_90
// PTX the library also carries, the wrappers below are empty and the wgmma
// kernel's body is a stub (attention_wgmma.cuh). The executor is sm_90a.
#if defined(RKV_CUDA_EXEC) || (defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL))
#define RKV_PTX_HAS_WGMMA 1
#else
#define RKV_PTX_HAS_WGMMA 0
#endif

// ---- the source constructs a host compiler has no words for --------------------------
// The one place the backend's source spells them: a static __shared__
// variable (type may be an array type: RKV_SHARED(int64_t[2], rows)), the
// block's dynamic shared array (with or without an alignment), and a kernel
// launch (RKV_LAUNCH(grid, block, smem, stream, kernel)(args...)).
template <class T>
using rkv_type_t = T;
#if defined(RKV_CUDA_EXEC)
#define RKV_SHARED(type, name) RKVX_SHARED(type, name)
#define RKV_EXTERN_SHARED(type, name) RKVX_EXTERN_SHARED(alignof(type), type, name)
#define RKV_EXTERN_SHARED_ALIGNED(align, type, name) RKVX_EXTERN_SHARED(align, type, name)
#define RKV_LAUNCH(grid, block, smem, stream, ...) \
    RKVX_LAUNCH(grid, block, smem, stream, __VA_ARGS__)
#else
#define RKV_SHARED(type, name) __shared__ ::rkv_type_t<type> name
#define RKV_EXTERN_SHARED(type, name) extern __shared__ type name[]
#define RKV_EXTERN_SHARED_ALIGNED(align, type, name) \
    extern __shared__ __align__(align) type name[]
#define RKV_LAUNCH(grid, block, smem, stream, ...) __VA_ARGS__<<<grid, block, smem, stream>>>
#endif

namespace rkv_ptx {

#if defined(RKV_CUDA_EXEC)
// ---- the executor's semantics: shared pieces ------------------------------------------
// A collective's computation (run once per warp or warpgroup, by the
// executor): not instrumented by the sanitizer build, which checks the
// kernels; this is arithmetic on the participants' copied operands.
#define RKV_PTX_EXEC_FN __attribute__((no_sanitize("address", "undefined")))
namespace exec {
// 16-bit elements as floats.
inline float bf16_bits(uint16_t b) {
    const uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
inline float f16_bits(uint16_t b) {
    _Float16 h;
    memcpy(&h, &b, 2);
    return (float)h;
}
template <typename T>
inline float elem(uint16_t b);
template <>
inline float elem<__nv_bfloat16>(uint16_t b) {
    return bf16_bits(b);
}
template <>
inline float elem<__half>(uint16_t b) {
    return f16_bits(b);
}
inline uint16_t lo16(uint32_t r) { return (uint16_t)(r & 0xffffu); }
inline uint16_t hi16(uint32_t r) { return (uint16_t)(r >> 16); }
}  // namespace exec
#endif

// ---- addresses ------------------------------------------------------------------

// The shared-window address of a generic pointer into this block's shared
// memory (cvta.to.shared, PTX ISA 9.7.9.20 "cvta"): the operand of the
// .shared instructions below and the start address of a wgmma descriptor.
__device__ __forceinline__ uint32_t smem_addr(const void *p RKV_PTX_AT) {
#if defined(RKV_CUDA_EXEC)
    // executor: the offset in the block's shared window (window base 0)
    return ::rkvx::shared_address(p, "cvta.to.shared.u32", RKV_PTX_SITE);
#else
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
#endif
}

// ---- non-bulk asynchronous copy (PTX ISA 9.7.9.25.3) ---------------------------

// cp.async.cg.shared.global [dst], [src], 16, src_bytes (9.7.9.25.3.1): 16
// bytes global -> shared, cached in L2 only; the first src_bytes (0..16)
// come from src, the rest of the 16 are zeros (src_bytes 0: src is not
// read). Both addresses 16-byte aligned ("Addresses as Operands"). The
// destination may be read only after the cp.async.wait_group that covers
// the group this copy was committed in.
__device__ __forceinline__ void cp_async_cg16(void *dst, const void *src, int src_bytes RKV_PTX_AT) {
#if defined(RKV_CUDA_EXEC)
    static const char instr[] = "cp.async.cg.shared.global [dst], [src], 16, src-size";
    const uint32_t d = ::rkvx::shared_address(dst, instr, RKV_PTX_SITE);
    if (src_bytes < 0 || src_bytes > 16)  // "src-size larger than cp-size: undefined"
        ::rkvx::violation("not-modeled", instr, RKV_PTX_SITE, "src-size %d outside 0..16", src_bytes);
    unsigned char data[16] = {0};  // bytes past src-size are zeros
    if (src_bytes > 0) ::rkvx::global_read(src, data, (size_t)src_bytes, instr, RKV_PTX_SITE);
    ::rkvx::cp_async_issue(d, src, data, 16, src_bytes, instr, RKV_PTX_SITE);
#else
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)),
                 "l"(src), "r"(src_bytes)
                 : "memory");
#endif
}
// cp.async.commit_group (9.7.9.25.3.2): this thread's uncommitted copies
// become one cp.async-group (an empty group when there are none).
__device__ __forceinline__ void cp_async_commit_group(RKV_PTX_AT_ONLY) {
#if defined(RKV_CUDA_EXEC)
    ::rkvx::cp_async_commit(RKV_PTX_SITE);
#else
    asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}
// cp.async.wait_group N (9.7.9.25.3.3): waits until at most the N most recent
// of this thread's groups are pending; the copies of the others are then
// visible to this thread (to other threads only after a barrier).
template <int N>
__device__ __forceinline__ void cp_async_wait_group(RKV_PTX_AT_ONLY) {
#if defined(RKV_CUDA_EXEC)
    ::rkvx::cp_async_wait(N, RKV_PTX_SITE);
#else
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
#endif
}

// ---- floating point ---------------------------------------------------------------

// ex2.approx.ftz.f32 (9.7.3.21): 2^x within 2 ulp; -inf -> +0, +inf -> +inf,
// NaN -> NaN; subnormal inputs and results flushed to sign-preserving zero.
__device__ __forceinline__ float ex2_approx_ftz(float x) {
#if defined(RKV_CUDA_EXEC)
    // executor: exp2f (within 1 ulp), then the flushes of .ftz
    if (fpclassify(x) == FP_SUBNORMAL) x = copysignf(0.0f, x);
    float y = exp2f(x);
    if (fpclassify(y) == FP_SUBNORMAL) y = copysignf(0.0f, y);
    return y;
#else
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
#endif
}

// ---- warp-level matrix instructions (9.7.14) -----------------------------------------

#if defined(RKV_CUDA_EXEC)
namespace exec {
// ldmatrix.sync.aligned.m8n8.x4{.trans}.shared.b16 (9.7.14.5.15): the 8
// addresses of matrix i come from lanes 8i..8i+7, each the start of one row
// of 8 16-bit elements (16 bytes, "naturally aligned"); without .trans lane l
// receives row l/4, elements 2(l%4) and 2(l%4)+1 of every matrix (Figure 104),
// with .trans the matrix is read column-major: column l/4, rows 2(l%4) and
// 2(l%4)+1. Register i holds matrix i's pair, the lower element in the low
// half.
template <bool TRANS>
struct Ldmatrix {
    struct In {
        uint32_t addr;
    };
    struct Out {
        uint32_t r[4];
    };
    RKV_PTX_EXEC_FN static void run(void *const *in, void *const *out, const ::rkvx::Group &g) {
        static const char *const instr = TRANS ? "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16"
                                          : "ldmatrix.sync.aligned.m8n8.x4.shared.b16";
        uint16_t m[4][8][8];  // [matrix][row][column]
        for (int i = 0; i < 4; i++)
            for (int j = 0; j < 8; j++) {
                const int lane = 8 * i + j;
                const uint32_t a = static_cast<const In *>(in[lane])->addr;
                if (a % 16)
                    ::rkvx::violation_by(g.first_tid + lane, "ldmatrix-alignment", instr, g.site,
                                         "lane %d's row address 0x%x (row %d of matrix %d) is "
                                         "not 16-byte aligned",
                                         lane, a, j, i);
                ::rkvx::shared_read(a, m[i][j], 16, g.first_tid + lane, instr, g.site);
            }
        for (int l = 0; l < 32; l++) {
            Out *o = static_cast<Out *>(out[l]);
            const int gr = l / 4, t2 = 2 * (l % 4);
            for (int i = 0; i < 4; i++) {
                const uint16_t lo = TRANS ? m[i][t2][gr] : m[i][gr][t2];
                const uint16_t hi = TRANS ? m[i][t2 + 1][gr] : m[i][gr][t2 + 1];
                o->r[i] = (uint32_t)lo | ((uint32_t)hi << 16);
            }
        }
    }
};
}  // namespace exec
#endif

// ldmatrix.sync.aligned.m8n8.x4.shared.b16 (9.7.14.5.15): four 8x8 matrices of
// 16-bit elements; lane 8i+j gives the address of row j of matrix i (16
// bytes, 16-byte aligned); lane l receives in r[i] the elements (l/4, 2(l%4))
// and (l/4, 2(l%4)+1) of matrix i, the lower column in the low half.
// .trans: the matrices are read column-major, lane l receiving (2(l%4), l/4)
// and (2(l%4)+1, l/4). Every lane of the warp executes the same one.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void *p RKV_PTX_AT) {
#if defined(RKV_CUDA_EXEC)
    exec::Ldmatrix<false>::In in{::rkvx::shared_address(p, "ldmatrix.x4", RKV_PTX_SITE)};
    exec::Ldmatrix<false>::Out out;
    ::rkvx::collective(::rkvx::Scope::Warp, 0xffffffffu, "ldmatrix.sync.aligned.m8n8.x4.shared.b16",
                       RKV_PTX_SITE, &in, &out, exec::Ldmatrix<false>::run);
    for (int i = 0; i < 4; i++) r[i] = out.r[i];
#else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
#endif
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void *p RKV_PTX_AT) {
#if defined(RKV_CUDA_EXEC)
    exec::Ldmatrix<true>::In in{::rkvx::shared_address(p, "ldmatrix.x4.trans", RKV_PTX_SITE)};
    exec::Ldmatrix<true>::Out out;
    ::rkvx::collective(::rkvx::Scope::Warp, 0xffffffffu,
                       "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16", RKV_PTX_SITE, &in, &out,
                       exec::Ldmatrix<true>::run);
    for (int i = 0; i < 4; i++) r[i] = out.r[i];
#else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
#endif
}

// mma.sync.aligned.m16n8k16.row.col.f32.T.T.f32 (9.7.14.5.14, fragments
// 9.7.14.5.8), T = bf16 or f16: c += A B for the warp's 16x16 A (row-major)
// and 16x8 B (column-major), f32 accumulators. With g = lane/4, t = lane%4:
// a[i] holds A(g + 8(i%2), 2t + 8(i/2)) and the next column, b0 holds
// B(2t, g), B(2t+1, g), b1 the same 8 rows down; c[i] is C(g + 8(i/2),
// 2t + i%2).
template <typename T>
struct Mma16816;

#if defined(RKV_CUDA_EXEC)
namespace exec {
// 9.7.14.5.8, "Matrix Fragments for mma.m16n8k16 with floating point type",
// element by element: with groupID = lane >> 2 and threadID_in_group =
// lane % 4, A's element a_i (i = 0..7, register i/2, low half for even i) is
// at row groupID (i < 2 or 4 <= i < 6) or groupID + 8, column
// threadID_in_group * 2 + (i & 1) (+ 8 for i >= 4); B's b_i (register i/2)
// at row threadID_in_group * 2 + (i & 1) (+ 8 for i >= 2), column groupID;
// C's c_i at row groupID (+ 8 for i >= 2), column threadID_in_group * 2 +
// (i & 1). Products are exact in double, accumulated in double and rounded
// once to f32 ("at least single precision"; order unspecified).
template <typename T>
struct Mma {
    struct In {
        float c[4];
        uint32_t a[4], b[2];
    };
    struct Out {
        float d[4];
    };
    RKV_PTX_EXEC_FN static void run(void *const *in, void *const *out, const ::rkvx::Group &) {
        double A[16][16], B[16][8], C[16][8];
        for (int l = 0; l < 32; l++) {
            const In *x = static_cast<const In *>(in[l]);
            const int gid = l >> 2, tig = l % 4;
            for (int i = 0; i < 8; i++) {
                const uint32_t reg = x->a[i / 2];
                const int row = (i < 2 || (i >= 4 && i < 6)) ? gid : gid + 8;
                const int col = tig * 2 + (i & 1) + (i >= 4 ? 8 : 0);
                A[row][col] = elem<T>(i & 1 ? hi16(reg) : lo16(reg));
            }
            for (int i = 0; i < 4; i++) {
                const uint32_t reg = x->b[i / 2];
                const int row = tig * 2 + (i & 1) + (i >= 2 ? 8 : 0);
                B[row][gid] = elem<T>(i & 1 ? hi16(reg) : lo16(reg));
            }
            for (int i = 0; i < 4; i++) C[i < 2 ? gid : gid + 8][tig * 2 + (i & 1)] = x->c[i];
        }
        for (int l = 0; l < 32; l++) {
            Out *o = static_cast<Out *>(out[l]);
            const int gid = l >> 2, tig = l % 4;
            for (int i = 0; i < 4; i++) {
                const int row = i < 2 ? gid : gid + 8, col = tig * 2 + (i & 1);
                double acc = C[row][col];
                for (int k = 0; k < 16; k++) acc += A[row][k] * B[k][col];
                o->d[i] = (float)acc;
            }
        }
    }
};
}  // namespace exec

template <typename T>
struct Mma16816 {
    static void run(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1,
                    ::rkvx::Site site) {
        typename exec::Mma<T>::In in;
        typename exec::Mma<T>::Out out;
        for (int i = 0; i < 4; i++) in.c[i] = c[i], in.a[i] = a[i];
        in.b[0] = b0;
        in.b[1] = b1;
        ::rkvx::collective(::rkvx::Scope::Warp, 0xffffffffu,
                           "mma.sync.aligned.m16n8k16.row.col.f32.T.T.f32", site, &in, &out,
                           exec::Mma<T>::run);
        for (int i = 0; i < 4; i++) c[i] = out.d[i];
    }
};
#else
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
#endif

template <typename T>
__device__ __forceinline__ void mma_m16n8k16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                             uint32_t b1 RKV_PTX_AT) {
#if defined(RKV_CUDA_EXEC)
    Mma16816<T>::run(c, a, b0, b1, RKV_PTX_SITE);
#else
    Mma16816<T>::run(c, a, b0, b1);
#endif
}

// ---- warpgroup-level matrix instructions (9.7.15, sm_90a) ------------------------------

// wgmma.fence.sync.aligned (9.7.15.7.1): orders this warpgroup's earlier
// accesses of accumulator and A-fragment registers before the next
// wgmma.mma_async that uses them; needed before the first mma_async and
// after any other access of those registers.
__device__ __forceinline__ void wgmma_fence(RKV_PTX_AT_ONLY) {
#if defined(RKV_CUDA_EXEC)
    ::rkvx::wgmma_fence(RKV_PTX_SITE);
#elif RKV_PTX_HAS_WGMMA
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}
// wgmma.commit_group.sync.aligned (9.7.15.7.2): the warp's uncommitted
// mma_async operations become one wgmma-group.
__device__ __forceinline__ void wgmma_commit_group(RKV_PTX_AT_ONLY) {
#if defined(RKV_CUDA_EXEC)
    ::rkvx::wgmma_commit(RKV_PTX_SITE);
#elif RKV_PTX_HAS_WGMMA
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}
// wgmma.wait_group.sync.aligned N (9.7.15.7.3): waits until at most N of the
// most recent wgmma-groups are pending. Reading or writing the accumulators
// (or the A registers) of an mma_async before the wait that covers it is
// undefined.
template <int N>
__device__ __forceinline__ void wgmma_wait_group(RKV_PTX_AT_ONLY) {
#if defined(RKV_CUDA_EXEC)
    ::rkvx::wgmma_wait(N, RKV_PTX_SITE);
#elif RKV_PTX_HAS_WGMMA
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
#endif
}
// fence.proxy.async.shared::cta (9.7.13.4, "membar/fence"; 9.7.15.4 "Async
// Proxy"): orders this thread's generic-proxy writes to shared memory
// (plain stores, cp.async) before later async-proxy reads (wgmma operands);
// other threads' writes need their own fence and then a barrier.
__device__ __forceinline__ void fence_proxy_async_shared_cta(RKV_PTX_AT_ONLY) {
#if defined(RKV_CUDA_EXEC)
    ::rkvx::fence_proxy_async(RKV_PTX_SITE);
#elif RKV_PTX_HAS_WGMMA
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}

// Register operand fences (CUTLASS's warpgroup_fence_operand; not a PTX
// instruction): an empty asm that reads and writes the register, so the
// compiler cannot move ordinary accesses of accumulators or A fragments
// across wgmma.fence / wait_group. The executor has no registers to order:
// nothing (in particular no access of the value).
#if defined(RKV_CUDA_EXEC)
__device__ __forceinline__ void fence_operand(float &) {}
__device__ __forceinline__ void fence_operand(uint32_t &) {}
#else
__device__ __forceinline__ void fence_operand(float &r) { asm volatile("" : "+f"(r)::"memory"); }
__device__ __forceinline__ void fence_operand(uint32_t &r) {
    asm volatile("" : "+r"(r)::"memory");
}
#endif

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

#if defined(RKV_CUDA_EXEC)
namespace exec {
// A wgmma matrix descriptor (9.7.15.5.1.2.2, "Matrix Descriptor Format"):
// bits 13-0 start address >> 4, 29-16 leading dimension byte offset >> 4,
// 45-32 stride dimension byte offset >> 4, 51-49 base offset, 63-62 the
// swizzle mode (1: 128-byte). The encoding keeps address bits 17-4
// (matrix-descriptor-encode(x) = (x & 0x3FFFF) >> 4): the window is the
// first 256 KB of shared memory.
struct Desc {
    uint32_t start, lbo, sbo, base_offset, mode;
};
inline Desc decode(uint64_t d) {
    return Desc{(uint32_t)(d & 0x3fffu) << 4, (uint32_t)((d >> 16) & 0x3fffu) << 4,
                (uint32_t)((d >> 32) & 0x3fffu) << 4, (uint32_t)((d >> 49) & 7u),
                (uint32_t)(d >> 62)};
}
// The 128-byte swizzle (9.7.15.5.1.2, Table 38 and the canonical layouts'
// Swizzle<3, 4, 3>): the 16-byte chunk index, address bits 6-4, XORed with
// the 128-byte row index within the 1,024-byte pattern, bits 9-7, of the
// shared address itself. With base offset 0 the pattern starts on 1,024-byte
// boundaries.
inline uint32_t sw128(uint32_t a) { return a ^ (((a >> 7) & 7u) << 4); }
// Checks a descriptor's fields for the layouts the executor models (128-byte
// swizzle, base offset 0): the start address is where a pattern starts
// (address bits 9-7 zero: "the base offset must be nonzero" otherwise) and
// SBO (and LBO, where the layout uses it) is a whole number of 1,024-byte
// patterns.
inline void check_desc(const Desc &d, bool uses_lbo, const char *which, const char *instr,
                       ::rkvx::Site site) {
    if (d.mode != 1)
        ::rkvx::violation("not-modeled", instr, site,
                          "%s descriptor: swizzle mode %u (the executor models the 128-byte "
                          "swizzle, mode 1)",
                          which, d.mode);
    if (d.base_offset != 0)
        ::rkvx::violation("not-modeled", instr, site,
                          "%s descriptor: base offset %u (the executor models base offset 0)", which,
                          d.base_offset);
    if ((d.start >> 7) & 7u)
        ::rkvx::violation("wgmma-descriptor", instr, site,
                          "%s descriptor: start address 0x%x is %u bytes into a 1,024-byte "
                          "128-byte-swizzle pattern with base offset 0 (the swizzle atom must be "
                          "1,024-byte aligned)",
                          which, d.start, d.start & 1023u);
    if (d.sbo == 0 || d.sbo % 1024u)
        ::rkvx::violation("wgmma-descriptor", instr, site,
                          "%s descriptor: stride byte offset %u is not a positive multiple of the "
                          "1,024-byte pattern",
                          which, d.sbo);
    if (uses_lbo && (d.lbo == 0 || d.lbo % 1024u))
        ::rkvx::violation("wgmma-descriptor", instr, site,
                          "%s descriptor: leading byte offset %u is not a positive multiple of "
                          "the 1,024-byte pattern",
                          which, d.lbo);
}
// The byte address of element (mn, k) of a 16-bit operand in the 128-byte
// swizzle layouts (9.7.15.5.1.2.1.3, "Canonical Layouts", T = 8 elements per
// 16 bytes):
//   K-major  ((8,m),(T,2k)):((8T,SBO),(1,T)): row mn at (mn%8)*128 +
//            (mn/8)*SBO, element k at 2k bytes along the row;
//   MN-major ((T,8,m),(8,k)):((1,T,LBO),(8T,SBO)): 64 MN-elements (128 bytes)
//            along a row, MN groups of 64 LBO apart, K rows 128 bytes apart
//            within groups of 8, groups SBO apart;
// then swizzled.
inline uint32_t kmajor_addr(const Desc &d, int mn, int k) {
    return sw128(d.start + (uint32_t)(mn % 8) * 128u + (uint32_t)(mn / 8) * d.sbo +
                 (uint32_t)k * 2u);
}
inline uint32_t mnmajor_addr(const Desc &d, int mn, int k) {
    return sw128(d.start + (uint32_t)(mn % 64) * 2u + (uint32_t)(mn / 64) * d.lbo +
                 (uint32_t)(k % 8) * 128u + (uint32_t)(k / 8) * d.sbo);
}
// Reads a 16-bit operand element through the descriptor (for the executor's
// bounds, in-flight, uninitialized and async-proxy checks of each byte),
// widening [lo, hi) to cover it.
template <typename T>
inline float operand(uint32_t addr, uint32_t &lo, uint32_t &hi, const char *instr,
                     ::rkvx::Site site) {
    uint16_t v;
    ::rkvx::wgmma_operand_read(addr, &v, 2, instr, site);
    if (addr < lo) lo = addr;
    if (addr + 2 > hi) hi = addr + 2;
    return elem<T>(v);
}
// The 64x16 A and 16x64 B of one m64n64k16 and the product into the
// warpgroup's accumulators (layout 9.7.15.5.1.1.1, Figure 149: warp w, lane
// l, register i: row 16w + l/4 + 8((i/2)%2), column 8(i/4) + 2(l%4) + i%2).
// A from registers (rs): the m16n8k16 A fragment layout per warp, rows
// offset by 16w (Figure 148). Exact products in double, one rounding.
template <typename T, bool RS>
struct Wgmma {
    struct In {
        uint64_t da, db;
        int scale_d;
        const float *dcur;     // the accumulators' current value (d, or the in-flight result)
        const uint32_t *a;     // rs: the A registers
    };
    struct Out {
        float d[32];
    };
    RKV_PTX_EXEC_FN static void run(void *const *in, void *const *out, const ::rkvx::Group &g) {
        static const char *const instr = RS ? "wgmma.mma_async.sync.aligned.m64n64k16.f32.T.T (A in registers)"
                                       : "wgmma.mma_async.sync.aligned.m64n64k16.f32.T.T";
        const ::rkvx::Site site = g.site;
        const In *x0 = static_cast<const In *>(in[0]);
        for (int t = 1; t < 128; t++) {
            const In *x = static_cast<const In *>(in[t]);
            if (x->db != x0->db || (!RS && x->da != x0->da) || x->scale_d != x0->scale_d)
                ::rkvx::violation("wgmma-descriptor-uniform", instr, site,
                                  "thread %d of the warpgroup passes descriptors 0x%016llx / "
                                  "0x%016llx (scale-d %d), thread 0 0x%016llx / 0x%016llx (%d): "
                                  "they must be the same across the warpgroup",
                                  t, (unsigned long long)x->da, (unsigned long long)x->db,
                                  x->scale_d, (unsigned long long)x0->da,
                                  (unsigned long long)x0->db, x0->scale_d);
        }
        static double A[64][16], B[16][64];
        if (RS) {
            for (int t = 0; t < 128; t++) {
                const In *x = static_cast<const In *>(in[t]);
                const int w = t / 32, l = t % 32, gid = l >> 2, tig = l % 4;
                for (int i = 0; i < 8; i++) {
                    const uint32_t reg = x->a[i / 2];
                    const int row = 16 * w + ((i < 2 || (i >= 4 && i < 6)) ? gid : gid + 8);
                    const int col = tig * 2 + (i & 1) + (i >= 4 ? 8 : 0);
                    A[row][col] = elem<T>(i & 1 ? hi16(reg) : lo16(reg));
                }
            }
        } else {
            const Desc da = decode(x0->da);
            check_desc(da, false, "A", instr, site);
            uint32_t lo = ~0u, hi = 0;
            for (int m = 0; m < 64; m++)
                for (int k = 0; k < 16; k++)
                    A[m][k] = operand<T>(kmajor_addr(da, m, k), lo, hi, instr, site);
            ::rkvx::wgmma_operand_range(lo, hi);
        }
        const Desc db = decode(x0->db);
        check_desc(db, false, "B", instr, site);  // N = 64: one MN atom, LBO unused
        uint32_t lo = ~0u, hi = 0;
        for (int k = 0; k < 16; k++)
            for (int n = 0; n < 64; n++)
                B[k][n] = operand<T>(RS ? mnmajor_addr(db, n, k) : kmajor_addr(db, n, k), lo, hi,
                                     instr, site);
        ::rkvx::wgmma_operand_range(lo, hi);
        for (int t = 0; t < 128; t++) {
            const In *x = static_cast<const In *>(in[t]);
            Out *o = static_cast<Out *>(out[t]);
            const int w = t / 32, l = t % 32;
            for (int i = 0; i < 32; i++) {
                const int row = 16 * w + l / 4 + 8 * ((i / 2) % 2);
                const int col = 8 * (i / 4) + 2 * (l % 4) + i % 2;
                double acc = x->scale_d ? (double)x->dcur[i] : 0.0;
                for (int k = 0; k < 16; k++) acc += A[row][k] * B[k][col];
                o->d[i] = (float)acc;
            }
        }
    }
};
}  // namespace exec

template <typename T>
struct Wgmma64 {
    static void ss(float (&d)[32], uint64_t da, uint64_t db, int scale_d, ::rkvx::Site site) {
        typename exec::Wgmma<T, false>::In in{da, db, scale_d,
                                              ::rkvx::wgmma_accumulator_input(d, 32), nullptr};
        typename exec::Wgmma<T, false>::Out out;
        ::rkvx::collective(::rkvx::Scope::Warpgroup, ~0u, "wgmma.mma_async.sync.aligned.m64n64k16",
                           site, &in, &out, exec::Wgmma<T, false>::run);
        ::rkvx::wgmma_issue(d, 32, nullptr, 0, out.d, "wgmma.mma_async.m64n64k16", site);
    }
    static void rs(float (&d)[32], const uint32_t (&a)[4], uint64_t db, ::rkvx::Site site) {
        typename exec::Wgmma<T, true>::In in{0, db, 1, ::rkvx::wgmma_accumulator_input(d, 32), a};
        typename exec::Wgmma<T, true>::Out out;
        ::rkvx::collective(::rkvx::Scope::Warpgroup, ~0u,
                           "wgmma.mma_async.sync.aligned.m64n64k16 (A in registers)", site, &in,
                           &out, exec::Wgmma<T, true>::run);
        ::rkvx::wgmma_issue(d, 32, a, 4, out.d, "wgmma.mma_async.m64n64k16 (A in registers)", site);
    }
};
#else
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
#endif

template <typename T>
__device__ __forceinline__ void wgmma_m64n64k16_ss(float (&d)[32], uint64_t da, uint64_t db,
                                                   int scale_d RKV_PTX_AT) {
#if defined(RKV_CUDA_EXEC)
    Wgmma64<T>::ss(d, da, db, scale_d, RKV_PTX_SITE);
#else
    Wgmma64<T>::ss(d, da, db, scale_d);
#endif
}
template <typename T>
__device__ __forceinline__ void wgmma_m64n64k16_rs(float (&d)[32], const uint32_t (&a)[4],
                                                   uint64_t db RKV_PTX_AT) {
#if defined(RKV_CUDA_EXEC)
    Wgmma64<T>::rs(d, a, db, RKV_PTX_SITE);
#else
    Wgmma64<T>::rs(d, a, db);
#endif
}

// ---- warp-wide data exchange and votes -----------------------------------------------

#if defined(RKV_CUDA_EXEC)
namespace exec {
// shfl.sync (9.7.9.6) with c = 0x1f (no sub-segments, the clamp 31; CUDA's
// width 32): bfly j = lane ^ b, idx j = b & 31; the value of lane j, which
// must be in the mask ("results are undefined if a thread sources a register
// ... not in membermask").
template <bool IDX>
struct Shfl {
    struct In {
        float v;
        int b;
    };
    struct Out {
        float v;
    };
    RKV_PTX_EXEC_FN static void run(void *const *in, void *const *out, const ::rkvx::Group &g) {
        for (int l = 0; l < 32; l++) {
            if (!(g.mask >> l & 1)) continue;
            const In *x = static_cast<const In *>(in[l]);
            int j = IDX ? (x->b & 31) : (l ^ (x->b & 31));
            if (j > 31) j = l;
            if (!(g.mask >> j & 1))
                ::rkvx::violation_by(g.first_tid + l, "convergence",
                                     IDX ? "shfl.sync.idx.b32" : "shfl.sync.bfly.b32", g.site,
                                     "lane %d sources lane %d, which is not in the mask 0x%08x",
                                     l, j, g.mask);
            static_cast<Out *>(out[l])->v = static_cast<const In *>(in[j])->v;
        }
    }
    static float run_one(unsigned mask, float v, int b, ::rkvx::Site site) {
        In in{v, b};
        Out out{0};
        ::rkvx::collective(::rkvx::Scope::Warp, mask, IDX ? "shfl.sync.idx.b32" : "shfl.sync.bfly.b32",
                           site, &in, &out, run);
        return out.v;
    }
};
// vote.sync.ballot.b32 (9.7.13.9): bit l is lane l's predicate, for the lanes
// of the mask (the others' bits are 0).
struct Ballot {
    struct In {
        int p;
    };
    struct Out {
        unsigned r;
    };
    RKV_PTX_EXEC_FN static void run(void *const *in, void *const *out, const ::rkvx::Group &g) {
        unsigned r = 0;
        for (int l = 0; l < 32; l++)
            if ((g.mask >> l & 1) && static_cast<const In *>(in[l])->p) r |= 1u << l;
        for (int l = 0; l < 32; l++)
            if (g.mask >> l & 1) static_cast<Out *>(out[l])->r = r;
    }
};
}  // namespace exec
#endif

// shfl.sync.bfly (9.7.9.6 "shfl.sync"): lane l receives v of lane l ^ lane_mask;
// every lane of `mask` executes the same one.
__device__ __forceinline__ float shfl_xor_sync(unsigned mask, float v, int lane_mask RKV_PTX_AT) {
#if defined(RKV_CUDA_EXEC)
    return exec::Shfl<false>::run_one(mask, v, lane_mask, RKV_PTX_SITE);
#else
    return __shfl_xor_sync(mask, v, lane_mask);
#endif
}
// shfl.sync.idx: every lane receives v of lane `src`.
__device__ __forceinline__ float shfl_idx_sync(unsigned mask, float v, int src RKV_PTX_AT) {
#if defined(RKV_CUDA_EXEC)
    return exec::Shfl<true>::run_one(mask, v, src, RKV_PTX_SITE);
#else
    return __shfl_sync(mask, v, src);
#endif
}
// vote.sync.ballot.b32 (9.7.13.9 "vote.sync"): bit l of the result is lane
// l's predicate, for the lanes of `mask` (which all execute it).
__device__ __forceinline__ unsigned ballot_sync(unsigned mask, bool pred RKV_PTX_AT) {
#if defined(RKV_CUDA_EXEC)
    exec::Ballot::In in{pred ? 1 : 0};
    exec::Ballot::Out out{0};
    ::rkvx::collective(::rkvx::Scope::Warp, mask, "vote.sync.ballot.b32", RKV_PTX_SITE, &in, &out,
                       exec::Ballot::run);
    return out.r;
#else
    return __ballot_sync(mask, pred);
#endif
}

// ---- atomics (9.7.13.5 "atom") ---------------------------------------------------------

// atom.min.s32 on shared or global memory; returns the old value.
__device__ __forceinline__ int atomic_min(int *p, int v RKV_PTX_AT) {
#if defined(RKV_CUDA_EXEC)
    // executor: one thread runs at a time, so a read-modify-write is atomic;
    // the access is logged as atomic (no race with other atomics)
    ::rkvx::atomic_access(p, sizeof *p, "atom.min.s32", RKV_PTX_SITE);
    const int old = *p;
    if (v < old) *p = v;
    return old;
#else
    return atomicMin(p, v);
#endif
}
// atom.cas.b32: *p = (*p == cmp) ? v : *p, atomically; returns the old value.
__device__ __forceinline__ int atomic_cas(int *p, int cmp, int v RKV_PTX_AT) {
#if defined(RKV_CUDA_EXEC)
    ::rkvx::atomic_access(p, sizeof *p, "atom.cas.b32", RKV_PTX_SITE);
    const int old = *p;
    if (old == cmp) *p = v;
    return old;
#else
    return atomicCAS(p, cmp, v);
#endif
}

}  // namespace rkv_ptx

#endif

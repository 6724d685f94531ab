// The CPU executor's device-side interface (test-only, tests/cuda_exec; C++).
//
// The CUDA backend's kernels (src/cuda/*.cu), compiled by a host C++
// compiler with RKV_CUDA_EXEC defined, run on this executor: a launch runs
// the grid's blocks one after another, each block's threads as fibers of one
// OS thread that switch only where a thread must wait for others (a barrier,
// a warp or warpgroup collective). What is instruction semantics (which lane
// gets which element, the matrix arithmetic, the descriptor layouts) is in
// src/cuda/ptx.cuh beside each wrapper's asm; what is here is the machinery
// the semantics run on, and the rules it enforces:
//
//   collectives   all threads of a warp (the lanes of the mask) or a
//                 warpgroup reach the same instruction at the same source
//                 site (.sync.aligned, PTX ISA 9.7.14, 9.7.15); the last to
//                 arrive computes the result for all
//   shared memory one arena per block: a 1,024-byte static region (what
//                 cudaFuncGetAttributes reports as sharedSizeBytes), then the
//                 launch's dynamic bytes at offset 1,024; every byte has a
//                 shadow (last writer, readers, barrier epoch, the async
//                 copy that will fill it, the proxy fence that published it)
//   async copies  cp.async destinations are poisoned and marked until the
//                 cp.async.wait_group that covers them, which writes them
//   wgmma         accumulators poisoned and marked in flight until the
//                 wgmma.wait_group that covers the mma_async; operands read
//                 through the descriptor's layout, with the async-proxy rule
//   plain loads   and stores of the kernels' own code reach the executor
//                 through the compiler's ThreadSanitizer instrumentation
//                 (-fsanitize=thread, whose __tsan_* calls the executor
//                 defines itself; no TSan runtime): shared-memory races and
//                 bounds, reads of in-flight async copies and accumulators,
//                 device allocations' guard zones. The ASan build of the
//                 kernels has no such instrumentation: there ASan checks
//                 the bounds, and the executor poisons (ASan-poisons) what
//                 must not be read.
// A breach stops the block and fails the launch with a message naming the
// kernel, block, thread, instruction, source site and rule (rule names:
// rkvx_api.h).
#ifndef RKVX_H
#define RKVX_H

#include <stddef.h>
#include <stdint.h>

#include <tuple>
#include <type_traits>
#include <utility>

#include "cuda_runtime_api.h"

// ---- CUDA's built-in vector types and index variables --------------------------------
struct uint3 {
    unsigned x, y, z;
};
struct dim3 {
    unsigned x, y, z;
    constexpr dim3(unsigned vx = 1, unsigned vy = 1, unsigned vz = 1) : x(vx), y(vy), z(vz) {}
};
struct alignas(8) uint2 {
    unsigned x, y;
};
struct alignas(16) uint4 {
    unsigned x, y, z, w;
};
struct alignas(8) int2 {
    int x, y;
};
struct alignas(8) float2 {
    float x, y;
};
struct alignas(16) float4 {
    float x, y, z, w;
};
inline uint2 make_uint2(unsigned x, unsigned y) { return uint2{x, y}; }
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) {
    return uint4{x, y, z, w};
}
inline float2 make_float2(float x, float y) { return float2{x, y}; }
inline float4 make_float4(float x, float y, float z, float w) { return float4{x, y, z, w}; }

namespace rkvx {

// A source location: where a kernel executes an instruction (the wrappers
// take it as two defaulted arguments, __builtin_FILE() and
// __builtin_LINE(), so it names the wrapper's caller).
struct Site {
    const char *file;
    int line;
};
#define RKVX_HERE ::rkvx::Site{__builtin_FILE(), __builtin_LINE()}

// What a kernel reads of its thread and block (threadIdx & co.).
struct ThreadIds {
    uint3 thread_idx;
};
struct BlockIds {
    uint3 block_idx;
    dim3 block_dim;
    dim3 grid_dim;
};
extern ThreadIds *g_thread;  // the simulated thread running now
extern BlockIds *g_block;    // its block

// ---- rules --------------------------------------------------------------------------
// Stops the block: the launch fails with a message naming the kernel, block,
// thread, `instr` at `site`, the rule and the details (printf format).
[[noreturn]] void violation(const char *rule, const char *instr, Site site, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
// The same, blaming thread `tid` of the block (a collective's lane at fault).
[[noreturn]] void violation_by(int tid, const char *rule, const char *instr, Site site,
                               const char *fmt, ...) __attribute__((format(printf, 5, 6)));

// ---- collectives ------------------------------------------------------------------------
// Every thread of the group calls collective() with its own `in` and `out`
// (pointers into its own frame); when the last one arrives, `fn` runs once
// with the group's pointers (index: lane in the warp, or thread in the
// warpgroup; NULL for lanes outside `mask`), then every thread continues
// with its `out` filled. The threads must reach the same `instr` at the same
// `site`, the same number of times (else: rule "convergence").
enum class Scope { Warp, Warpgroup };
struct Group {
    Scope scope;
    int index;      // warp (or warpgroup) index in the block
    unsigned mask;  // lanes taking part (warp scope)
    int first_tid;  // linear thread index of lane / thread 0
    Site site;      // where the group executes the instruction
};
using CollectiveFn = void (*)(void *const *in, void *const *out, const Group &g);
void collective(Scope scope, unsigned mask, const char *instr, Site site, void *in, void *out,
                CollectiveFn fn);

// __syncthreads (bar.sync 0, PTX ISA 9.7.13.1): all non-exited threads of the
// block at the same site.
void syncthreads(Site site);
// Linear index of the calling thread in its block, and its lane.
int thread_linear();

// ---- shared memory ---------------------------------------------------------------------
// Storage for a static __shared__ variable (RKV_SHARED; `key` identifies the
// declaration, `name` names it in messages) and the dynamic array
// (RKV_EXTERN_SHARED), in this block's arena.
void *shared_static(const void *key, size_t bytes, size_t align, const char *name);
void *shared_dynamic(size_t align, const char *name);
// cvta.to.shared: the shared-window address of a generic pointer (rule
// "cvta-shared" when it does not point into this block's shared memory).
uint32_t shared_address(const void *p, const char *instr, Site site);
// An instruction's read of shared bytes [addr, addr + n) by thread `tid`
// (ldmatrix rows): bounds, in-flight async copies, races; copies them.
void shared_read(uint32_t addr, void *dst, size_t n, int tid, const char *instr, Site site);
// The bytes [p, p + n) of global memory an instruction reads (cp.async's
// source): inside one device allocation (rule "out-of-bounds-global").
void global_read(const void *p, void *dst, size_t n, const char *instr, Site site);
// An atomic access of [p, p + n) (shared or global) by the calling thread.
void atomic_access(void *p, size_t n, const char *instr, Site site);

// ---- non-bulk async copies ------------------------------------------------------------
// cp.async of `size` bytes (`data`, already zero-filled past src_bytes) to
// shared address `dst` from `src`: checks alignment (rule
// "cp.async-alignment"), poisons and marks the destination until the wait
// that covers it.
void cp_async_issue(uint32_t dst, const void *src, const void *data, int size, int src_bytes,
                    const char *instr, Site site);
void cp_async_commit(Site site);
void cp_async_wait(int n, Site site);

// ---- wgmma -----------------------------------------------------------------------------
// The current value of accumulator registers d[0..n) of the calling thread:
// the latest in-flight mma_async's result for them, or d itself.
const float *wgmma_accumulator_input(const float *d, int n);
// Reads a wgmma operand's bytes [addr, addr + n) of shared memory for the
// calling warpgroup (within the block's shared memory; no async copy in
// flight; written through the generic proxy only if fenced: rule
// "async-proxy-fence").
void wgmma_operand_read(uint32_t addr, void *dst, size_t n, const char *instr, Site site);
// The shared bytes [lo, hi) an mma_async of the calling warpgroup reads:
// writing them before the wait_group that covers it breaks rule
// "wgmma-operand-overwritten".
void wgmma_operand_range(uint32_t lo, uint32_t hi);
// After an mma_async collective: the calling thread's accumulators d[0..n)
// (and A registers a[0..na), may be NULL) are in flight until the
// wgmma.wait_group that covers it, then receive `result`; d is poisoned
// meanwhile, and shared bytes the operation read are marked until then.
void wgmma_issue(float *d, int n, const uint32_t *a, int na, const float *result,
                 const char *instr, Site site);
void wgmma_fence(Site site);
void wgmma_commit(Site site);
void wgmma_wait(int n, Site site);
// fence.proxy.async.shared::cta by the calling thread.
void fence_proxy_async(Site site);

// ---- launches ------------------------------------------------------------------------------
struct Launch {
    const void *func;
    const char *name;    // the kernel's name (KernelName: the instantiation, qualified)
    bool bounds_strict;  // a kernel of the backend (src/cuda): it must be in the
                         // launch-bounds table when the build has one
    dim3 grid, block;
    size_t smem;
    virtual void run_thread() = 0;  // the kernel body, for the current thread
    virtual Launch *clone() const = 0;
    virtual ~Launch() {}
};
template <class F, class... A>
struct LaunchOf final : Launch {
    F f;
    std::tuple<A...> args;
    template <class... B>
    LaunchOf(F fn, B &&...b) : f(fn), args(std::forward<B>(b)...) {}
    void run_thread() override { std::apply(f, args); }
    Launch *clone() const override { return new LaunchOf(*this); }
};
// Takes ownership of `l`; the launch's configuration errors come back from
// cudaGetLastError, as on the device.
void enqueue_launch(Launch *l, cudaStream_t stream);

// The name of kernel F as the compiler spells the instantiation, qualified
// ("rkv_mma::ring_attention_mma<__nv_bfloat16, 64, 2, 4, 64, 2, false>",
// "{anonymous}::upsert_kernel"): what messages name, and the key of the
// launch-bounds table (exec.cpp matches it against nvcc's PTX entries,
// demangled). register_kernel takes __PRETTY_FUNCTION__ of kernel_pretty<F>,
// keeps the name for `func` (so that cudaFuncGetAttributes and
// cudaFuncSetAttribute, which get a pointer, know it) and returns it.
const char *register_kernel(const void *func, const char *pretty);
template <auto F>
const char *kernel_pretty() {
    return __PRETTY_FUNCTION__;
}
// Every kernel a translation unit launches is registered when the program
// starts (the dynamic initialization of this member, instantiated by the
// launch), before any cudaFuncGetAttributes of it.
template <auto F>
struct KernelName {
    static const char *const name;
};
template <auto F>
const char *const KernelName<F>::name =
    register_kernel(reinterpret_cast<const void *>(F), kernel_pretty<F>());

template <auto F>
struct Launcher {
    dim3 grid, block;
    size_t smem;
    cudaStream_t stream;
    bool strict;
    template <class... A>
    void operator()(A &&...a) const {
        auto *l = new LaunchOf<decltype(F), std::decay_t<A>...>(F, std::forward<A>(a)...);
        l->func = reinterpret_cast<const void *>(F);
        l->name = KernelName<F>::name;
        l->bounds_strict = strict;
        l->grid = grid;
        l->block = block;
        l->smem = smem;
        enqueue_launch(l, stream);
    }
};
template <auto F>
Launcher<F> make_launch(dim3 grid, dim3 block, size_t smem, cudaStream_t stream, bool strict) {
    return Launcher<F>{grid, block, smem, stream, strict};
}

}  // namespace rkvx

// The host build's spellings of the CUDA source constructs that C++ has no
// words for (used through ptx.cuh's RKV_SHARED, RKV_EXTERN_SHARED and
// RKV_LAUNCH, the one place the backend's source names them; rkv_type_t is
// ptx.cuh's).
#define RKVX_SHARED(type, name)                                                           \
    static const char rkvx_key_##name = 0;                                                \
    ::rkv_type_t<type> &name = *static_cast<::rkv_type_t<type> *>(::rkvx::shared_static(   \
        &rkvx_key_##name, sizeof(::rkv_type_t<type>), alignof(::rkv_type_t<type>), #name))
#define RKVX_EXTERN_SHARED(align, type, name) \
    type *const name = static_cast<type *>(::rkvx::shared_dynamic(align, #name))
// The kernel is a template argument (its name: KernelName). The backend's
// own translation units (tests/cuda_exec/CMakeLists.txt: RKVX_BACKEND_KERNELS)
// launch strictly: a kernel missing from the launch-bounds table is refused.
#if defined(RKVX_BACKEND_KERNELS)
#define RKVX_LAUNCH_STRICT true
#else
#define RKVX_LAUNCH_STRICT false
#endif
#define RKVX_LAUNCH(grid, block, smem, stream, ...) \
    ::rkvx::make_launch<__VA_ARGS__>((grid), (block), (smem), (stream), RKVX_LAUNCH_STRICT)

#endif

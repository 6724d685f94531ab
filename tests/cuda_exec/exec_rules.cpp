// Proof that the executor's checks can fail (issue 21): for every rule it
// enforces, a small kernel that breaks it, refused with the rule's name
// (rkvx_last_violation names "RULE <rule>:"), and the same kernel without
// the breach, which must run clean (so that no check fires regardless).
// Built as a kernel translation unit (RKV_CUDA_EXEC). The cases that need
// the kernels' plain loads and stores observed (the Release build's
// instrumentation) are skipped, with a line saying so, in the sanitizer
// build, where ASan itself checks those accesses' bounds; the launch-bounds
// case, whose bounds are nvcc's, in a build without a CUDA compiler.
//
// Usage: exec_rules [NAME...] [--not NAME...]
//            the cases whose names contain a NAME or whose rule (--list's
//            second column) contains it (all without), less those after
//            --not; exit 0: every case as expected, 77: every case asked
//            for was skipped (this build cannot check it), 2: a NAME that
//            matches no case (the list is printed), a bad option
//        exec_rules --list                 the cases: name, rule
//        exec_rules --breach NAME          runs one breach, unchecked
//        exec_rules --help                 this usage
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <string>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "attention_common.cuh"  // combine_splits: a kernel of the backend, launched as is
#include "cuda_test_util.h"       // CK
#include "ptx.cuh"
#include "rkvx_api.h"

namespace {

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kPlainObserved = false;
#else
constexpr bool kPlainObserved = true;
#endif


// One device buffer the kernels read and write (16-byte aligned, 64 KB).
constexpr size_t kBuf = 1 << 16;
unsigned char *g_buf = nullptr;

// A tile of `bytes` at a 1,024-byte aligned place of the dynamic shared
// memory (as the Hopper kernel aligns its own).
__device__ __forceinline__ unsigned char *aligned_tile(unsigned char *raw) {
    return raw + ((1024u - (rkv_ptx::smem_addr(raw) & 1023u)) & 1023u);
}
__device__ __forceinline__ uint64_t desc128(uint32_t addr, uint32_t lbo, uint32_t sbo) {
    return (uint64_t)((addr & 0x3FFFFu) >> 4) | (uint64_t)((lbo >> 4) & 0x3FFFu) << 16 |
           (uint64_t)((sbo >> 4) & 0x3FFFu) << 32 | (uint64_t)1 << 62;
}

// ---- shared memory limits ----------------------------------------------------------------
__global__ void k_plain(unsigned char *out) {
    if (threadIdx.x == 0) out[0] = 1;
}
__global__ void k_static(int bytes, unsigned char *out) {
    if (bytes > 1000) {
        RKV_SHARED(unsigned char[1500], big);  // over the 1,024-byte static region
        big[threadIdx.x] = 1;
        __syncthreads();
        out[threadIdx.x] = big[threadIdx.x];
    } else {
        RKV_SHARED(unsigned char[512], small);
        small[threadIdx.x] = 1;
        __syncthreads();
        out[threadIdx.x] = small[threadIdx.x];
    }
}

// ---- cp.async, ldmatrix ----------------------------------------------------------------------
struct CpArgs {
    const unsigned char *src;
    unsigned char *out;
    int bad;  // which breach (0: none)
};
// 32 threads copy 512 bytes global -> shared by cp.async, wait, then read.
__global__ void k_cp_async(const CpArgs a) {
    RKV_EXTERN_SHARED_ALIGNED(16, unsigned char, tile);
    const int t = threadIdx.x;
    const unsigned char *src = a.src + t * 16 + (a.bad == 1 ? 4 : 0);    // 1: source misaligned
    unsigned char *dst = tile + t * 16 + (a.bad == 2 ? 8 : 0);           // 2: destination
    rkv_ptx::cp_async_cg16(dst, src, 16);
    rkv_ptx::cp_async_commit_group();
    if (a.bad == 3) a.out[t] = tile[t * 16];  // 3: read (plain) before the wait
    rkv_ptx::cp_async_wait_group<0>();
    a.out[t] = tile[t * 16];
}
// 4: the copy's source changed (a plain store to global) before the wait
// that completes it; 8: cvta.to.shared of a global pointer.
__global__ void k_cp_source(const CpArgs a) {
    RKV_EXTERN_SHARED_ALIGNED(16, unsigned char, tile);
    const int t = threadIdx.x;
    rkv_ptx::cp_async_cg16(tile + t * 16, a.out + t * 16, 16);
    rkv_ptx::cp_async_commit_group();
    if (a.bad == 4) a.out[t * 16] ^= 1;
    rkv_ptx::cp_async_wait_group<0>();
    __syncthreads();
    a.out[4096 + t] = tile[t * 16] + (unsigned char)(a.bad == 8 ? rkv_ptx::smem_addr(a.out) : 0);
}
// ldmatrix of rows written by cp.async: 5: before the wait; 6: a misaligned
// row address (lane 5); 7: another warp overwrites the rows between the
// same barriers (a race of cp.async with the ldmatrix reads).
__global__ void k_ldmatrix(const CpArgs a) {
    RKV_EXTERN_SHARED_ALIGNED(16, unsigned char, tile);
    const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
    if (warp == 0) {
        rkv_ptx::cp_async_cg16(tile + lane * 16, a.src + lane * 16, 16);
        rkv_ptx::cp_async_commit_group();
        if (a.bad != 5) rkv_ptx::cp_async_wait_group<0>();
    }
    if (a.bad != 5) __syncthreads();
    if (warp == 0) {
        uint32_t r[4];
        rkv_ptx::ldmatrix_x4(r, tile + lane * 16 + (a.bad == 6 && lane == 5 ? 8 : 0));
        for (int i = 0; i < 4; i++) a.out[lane * 4 + i] = (unsigned char)r[i];
    }
    if (warp == 1 && a.bad == 7) {
        rkv_ptx::cp_async_cg16(tile + lane * 16, a.src + 512 + lane * 16, 16);
        rkv_ptx::cp_async_commit_group();
        rkv_ptx::cp_async_wait_group<0>();
    }
    if (a.bad == 5) rkv_ptx::cp_async_wait_group<0>();
}

// ---- wgmma ------------------------------------------------------------------------------
// One warpgroup: A and B tiles of 8 KB each by cp.async (or plain stores),
// S = A B^T by wgmma ss, written out. Breaches: 10 start address off the
// 1,024-byte pattern; 11 SBO 512; 12 no fence.proxy.async after the copies;
// 13 the tiles by plain stores and no fence; 14 an accumulator read before
// the wait; 15 no wgmma.fence; 16 a cp.async into B before the wait;
// 17 the descriptors differ across the warpgroup.
__global__ void k_wgmma(const CpArgs a) {
    RKV_EXTERN_SHARED_ALIGNED(1024, unsigned char, raw);
    unsigned char *tile = aligned_tile(raw);
    const int t = threadIdx.x;
    if (a.bad == 13) {
        for (int i = t; i < 16384; i += 128) tile[i] = a.src[i];
    } else {
        for (int c = t; c < 1024; c += 128) rkv_ptx::cp_async_cg16(tile + c * 16, a.src + c * 16, 16);
        rkv_ptx::cp_async_commit_group();
        rkv_ptx::cp_async_wait_group<0>();
        if (a.bad != 12) rkv_ptx::fence_proxy_async_shared_cta();
    }
    __syncthreads();
    float d[32];
    for (int i = 0; i < 32; i++) d[i] = 0.f;
    const uint32_t base = rkv_ptx::smem_addr(tile);
    const uint32_t astart = base + (a.bad == 10 ? 128 : 0) + (a.bad == 17 && t == 77 ? 32 : 0);
    const uint32_t sbo = a.bad == 11 ? 512 : 1024;
    if (a.bad != 15) rkv_ptx::wgmma_fence();
    rkv_ptx::wgmma_m64n64k16_ss<__nv_bfloat16>(d, desc128(astart, 16, sbo),
                                               desc128(base + 8192, 16, sbo), 0);
    rkv_ptx::wgmma_commit_group();
    if (a.bad == 14) a.out[t] = d[0] > 0.f;
    if (a.bad == 16 && t < 32)
        rkv_ptx::cp_async_cg16(tile + 8192 + t * 16, a.src + t * 16, 16);
    rkv_ptx::wgmma_wait_group<0>();
    if (a.bad == 16) {
        rkv_ptx::cp_async_commit_group();
        rkv_ptx::cp_async_wait_group<0>();
    }
    for (int i = 0; i < 32; i++) reinterpret_cast<float *>(a.out)[t * 32 + i] = d[i];
}

// ---- plain accesses: bounds, races, reads of nothing --------------------------------------
struct PlainArgs {
    unsigned char *buf;
    size_t n;  // the buffer's bytes
    int bad;
};
__global__ void k_plain_access(const PlainArgs a) {
    RKV_EXTERN_SHARED_ALIGNED(16, int, s);  // 256 ints of dynamic shared memory
    RKV_SHARED(int, flag);
    const int t = threadIdx.x;
    s[t] = t;
    if (t == 0) flag = 1;
    if (a.bad == 20 && t == 0) a.buf[a.n] = 1;     // 20: a byte past the allocation
    if (a.bad == 21 && t == 0) s[256] = 1;         // 21: past the dynamic shared memory
    if (a.bad == 22 && t == 32) s[0] = 7;          // 22: thread 32 writes thread 0's word
    if (a.bad == 23) {                             // 23: read another's word, no barrier
        if (t == 1) a.buf[0] = (unsigned char)s[0];
        return;
    }
    __syncthreads();
    a.buf[t] = (unsigned char)(s[(t + 1) % 64] + flag);
    if (a.bad == 24) {                             // 24: a static never written
        RKV_SHARED(int, never);
        a.buf[t] = (unsigned char)never;
    }
}

// ---- convergence, barriers -------------------------------------------------------------------
__global__ void k_converge(const PlainArgs a) {
    const int t = threadIdx.x, lane = t & 31;
    float v = (float)t;
    if (a.bad == 30 && lane >= 16)
        v = rkv_ptx::shfl_xor_sync(0xffffffffu, v, 1);  // 30: half the warp at another shfl
    else
        v = rkv_ptx::shfl_xor_sync(0xffffffffu, v, 1);
    if (a.bad == 31 && t >= 32) {                       // 31: a second barrier site
        __syncthreads();
    } else {
        __syncthreads();
    }
    if (a.bad == 32 && lane == 3) return;               // 32: a lane exits before a ballot
    const unsigned m = rkv_ptx::ballot_sync(0xffffffffu, v > 10.f);
    a.buf[t] = (unsigned char)(m & 0xff);
}

// ---- the cases ----------------------------------------------------------------------------------
// What a case needs of the build: nothing, the instrumentation of plain
// accesses (the Release build's), or the launch-bounds table (a build with
// a CUDA compiler: the bounds are nvcc's).
enum Needs { kAny, kPlain, kTable };
struct Case {
    const char *name;
    const char *rule;  // the RULE the breach must be refused with
    Needs needs;
    void (*run)(int bad);
    int bad;
};
int g_check_fails = 0;  // checks of a clean variant beyond "no violation"

void launch_cp(int bad) {
    CpArgs a{g_buf, g_buf + 32768, bad};
    RKV_LAUNCH(1, 32, 512, nullptr, k_cp_async)(a);
}
void launch_ld(int bad) {
    CpArgs a{g_buf, g_buf + 32768, bad};
    RKV_LAUNCH(1, 64, 512, nullptr, k_ldmatrix)(a);
}
void launch_wg(int bad) {
    CpArgs a{g_buf, g_buf + 32768, bad};
    RKV_LAUNCH(1, 128, 17408, nullptr, k_wgmma)(a);
}
void launch_plain(int bad) {
    PlainArgs a{g_buf, kBuf, bad};
    RKV_LAUNCH(1, 64, 256 * 4, nullptr, k_plain_access)(a);
}
void launch_converge(int bad) {
    PlainArgs a{g_buf, kBuf, bad};
    RKV_LAUNCH(1, 64, 0, nullptr, k_converge)(a);
}
void launch_cp_source(int bad) {
    CpArgs a{g_buf, g_buf + 32768, bad};
    RKV_LAUNCH(1, 32, 512, nullptr, k_cp_source)(a);
}
void launch_grid(int bad) { RKV_LAUNCH(dim3(1, bad ? 65536 : 65535, 1), 1, 0, nullptr, k_plain)(g_buf); }
void launch_static(int bad) { RKV_LAUNCH(1, 64, 0, nullptr, k_static)(bad ? 1500 : 512, g_buf); }
void launch_block(int bad) { RKV_LAUNCH(1, bad ? 2048 : 1024, 0, nullptr, k_plain)(g_buf); }
void launch_dyn(int bad) {
    // 64 KB of dynamic shared memory, with (good) or without the attribute
    if (!bad) CK(cudaFuncSetAttribute(k_plain, cudaFuncAttributeMaxDynamicSharedMemorySize, 65536));
    RKV_LAUNCH(1, 32, 65536, nullptr, k_plain)(g_buf);
    CK(cudaFuncSetAttribute(k_plain, cudaFuncAttributeMaxDynamicSharedMemorySize, 49152));
}
// The backend's split combine, rkv_attn::combine_splits<float>
// (attention_common.cuh: __launch_bounds__(256)), as attention.cu launches
// it: one session, one split of 64 rows of D 16 (256 threads, one block), on
// zeroed buffers. With 512 threads it is over its own bound: refused, as the
// GPU refuses it; the bound the executor holds is nvcc's (.maxntid 256 of
// the kernel's PTX entry), and cudaFuncGetAttributes reports it.
unsigned char *g_zero = nullptr;  // 16 KB of zeros
void launch_combine(int bad) {
    const float *ws_o = reinterpret_cast<const float *>(g_zero);           // 64 x 16 floats
    const float *ws_ml = reinterpret_cast<const float *>(g_zero + 4096);   // 64 x (m, l)
    float *out = reinterpret_cast<float *>(g_zero + 8192);                  // 64 x 16 floats
    const int64_t *sess = reinterpret_cast<const int64_t *>(g_zero + 12288);  // session 0
    int *err = reinterpret_cast<int *>(g_zero + 12544);
    const int64_t *no_clock = nullptr;
    RKV_LAUNCH(1, bad ? 512 : 256, 2 * sizeof(int64_t), nullptr, rkv_attn::combine_splits<float>)(
        ws_o, ws_ml, out, 1, (int64_t)64, 16, sess, no_clock, 1, (int64_t)1, err);
    if (!bad) {
        cudaFuncAttributes fa;
        CK(cudaFuncGetAttributes(&fa, rkv_attn::combine_splits<float>));
        if (fa.maxThreadsPerBlock != 256) {
            printf("     cudaFuncGetAttributes(combine_splits<float>).maxThreadsPerBlock = %d, "
                   "not its __launch_bounds__' 256\n",
                   fa.maxThreadsPerBlock);
            g_check_fails++;
        }
    }
}
void set_limit(int bad) {
    // static (the executor's 1,024) + dynamic over 232,448: refused
    const cudaError_t e = cudaFuncSetAttribute(k_plain, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               bad ? 232448 : 232448 - 1024);
    if (e != cudaSuccess) (void)cudaGetLastError();
    CK(cudaFuncSetAttribute(k_plain, cudaFuncAttributeMaxDynamicSharedMemorySize, 49152));
}

const Case kCases[] = {
    {"shared memory over the device's limit", RKVX_RULE_SMEM_LIMIT, kAny, set_limit, 1},
    {"static __shared__ over the static region", RKVX_RULE_STATIC_SMEM, kAny, launch_static, 1},
    {"64 KB dynamic without the attribute", RKVX_RULE_SMEM_ATTRIBUTE, kAny, launch_dyn, 1},
    {"2048 threads per block", RKVX_RULE_BLOCK_SIZE, kAny, launch_block, 1},
    {"a src/cuda kernel over its __launch_bounds__", RKVX_RULE_LAUNCH_BOUNDS, kTable, launch_combine, 1},
    {"a grid 65536 blocks high", RKVX_RULE_GRID_SIZE, kAny, launch_grid, 1},
    {"cp.async source not 16-byte aligned", RKVX_RULE_CP_ASYNC_ALIGN, kAny, launch_cp, 1},
    {"cp.async destination not 16-byte aligned", RKVX_RULE_CP_ASYNC_ALIGN, kAny, launch_cp, 2},
    {"cp.async destination read (plain) before its wait", RKVX_RULE_CP_ASYNC_WAIT, kPlain, launch_cp, 3},
    {"cp.async source stored to before the wait", RKVX_RULE_CP_ASYNC_SOURCE, kAny, launch_cp_source, 4},
    {"cvta.to.shared of a global pointer", RKVX_RULE_CVTA, kAny, launch_cp_source, 8},
    {"ldmatrix of cp.async rows before the wait", RKVX_RULE_CP_ASYNC_WAIT, kAny, launch_ld, 5},
    {"ldmatrix row address not 16-byte aligned", RKVX_RULE_LDMATRIX_ALIGN, kAny, launch_ld, 6},
    {"cp.async over rows another warp reads, no barrier", RKVX_RULE_RACE, kAny, launch_ld, 7},
    {"wgmma descriptor off the 1,024-byte swizzle pattern", RKVX_RULE_WGMMA_DESC, kAny, launch_wg, 10},
    {"wgmma descriptor stride byte offset 512", RKVX_RULE_WGMMA_DESC, kAny, launch_wg, 11},
    {"wgmma reads cp.async data without fence.proxy.async", RKVX_RULE_PROXY_FENCE, kAny, launch_wg, 12},
    {"wgmma reads plain stores without fence.proxy.async", RKVX_RULE_PROXY_FENCE, kPlain, launch_wg, 13},
    {"wgmma accumulator read before the wait", RKVX_RULE_WGMMA_WAIT, kPlain, launch_wg, 14},
    {"mma_async without wgmma.fence", RKVX_RULE_WGMMA_FENCE, kAny, launch_wg, 15},
    {"cp.async into a wgmma operand before the wait", RKVX_RULE_WGMMA_SMEM, kAny, launch_wg, 16},
    {"wgmma descriptors differ across the warpgroup", RKVX_RULE_WGMMA_UNIFORM, kAny, launch_wg, 17},
    {"a store past a device allocation", RKVX_RULE_OOB_GLOBAL, kPlain, launch_plain, 20},
    {"a store past the dynamic shared memory", RKVX_RULE_OOB_SHARED, kPlain, launch_plain, 21},
    {"two threads write one shared word, no barrier", RKVX_RULE_RACE, kPlain, launch_plain, 22},
    {"a read of another thread's store, no barrier", RKVX_RULE_RACE, kPlain, launch_plain, 23},
    {"a read of shared memory nothing wrote", RKVX_RULE_UNINIT_SHARED, kPlain, launch_plain, 24},
    {"half a warp at another shfl.sync", RKVX_RULE_CONVERGENCE, kAny, launch_converge, 30},
    {"two __syncthreads sites", RKVX_RULE_BARRIER, kAny, launch_converge, 31},
    {"a lane exits before the warp's ballot", RKVX_RULE_EXITED, kAny, launch_converge, 32},
};

// Runs one variant; returns the violation count and fills `msg`.
int run_variant(const Case &c, int bad, std::string &msg) {
    rkvx_reset();
    (void)cudaGetLastError();
    c.run(bad);
    (void)cudaDeviceSynchronize();
    (void)cudaGetLastError();
    msg = rkvx_last_violation();
    const int n = rkvx_violations();
    rkvx_reset();
    return n;
}

}  // namespace

namespace {
const char kUsage[] =
    "usage: exec_rules [NAME...] [--not NAME...]\n"
    "         runs the cases whose name or rule contains a NAME (all without), less\n"
    "         those after --not; exit 0: every case as expected, 1: a failure,\n"
    "         77: every case asked for was skipped, 2: a NAME matching no case\n"
    "       exec_rules --list           the cases (name, rule)\n"
    "       exec_rules --breach NAME    runs one case's breach, unchecked\n"
    "       exec_rules --help           this text\n";

void list_cases(FILE *f) {
    for (const Case &c : kCases) fprintf(f, "%-52s %s\n", c.name, c.rule);
}

// A filter NAME takes a case whose name or rule contains it.
bool filter_takes(const Case &c, const char *name) {
    return strstr(c.name, name) != nullptr || strstr(c.rule, name) != nullptr;
}

// Every NAME (and --not NAME) matches a case, and --not has its NAME: else
// 2 with a message and the list (a typo in a ctest entry must not pass
// running nothing). -1 to go on.
int check_filters(int argc, char **argv) {
    for (int k = 1; k < argc; k++) {
        const bool exclude = !strcmp(argv[k], "--not");
        if (exclude && ++k == argc) {
            fprintf(stderr, "exec_rules: --not needs a NAME\n%s", kUsage);
            return 2;
        }
        if (!exclude && !strncmp(argv[k], "--", 2)) {
            fprintf(stderr, "exec_rules: unknown option '%s'\n%s", argv[k], kUsage);
            return 2;
        }
        bool any = false;
        for (const Case &c : kCases) any |= filter_takes(c, argv[k]);
        if (!any) {
            fprintf(stderr,
                    "exec_rules: '%s' matches no case name nor rule; the cases (name, rule):\n",
                    argv[k]);
            list_cases(stderr);
            return 2;
        }
    }
    return -1;
}
}  // namespace

int main(int argc, char **argv) {
    const size_t ncases = sizeof kCases / sizeof kCases[0];
    if (argc == 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        fputs(kUsage, stdout);
        return 0;
    }
    if (argc == 2 && !strcmp(argv[1], "--list")) {
        list_cases(stdout);
        return 0;
    }
    if (argc != 3 || strcmp(argv[1], "--breach")) {
        const int rc = check_filters(argc, argv);
        if (rc >= 0) return rc;
    }
    CK(cudaMalloc((void **)&g_buf, kBuf));
    CK(cudaMemset(g_buf, 0x3c, kBuf));  // bf16 1.0-ish: finite products
    CK(cudaMalloc((void **)&g_zero, 16384));
    CK(cudaMemset(g_zero, 0, 16384));
    if (argc == 3 && !strcmp(argv[1], "--breach")) {
        // the breach alone, unchecked here: in the sanitizer build ASan
        // reports the plain-access cases (and stops the program)
        for (const Case &c : kCases)
            if (!strcmp(c.name, argv[2])) {
                std::string msg;
                printf("breach: %s: %d violation(s) %s\n", c.name, run_variant(c, c.bad, msg),
                       msg.c_str());
                return 0;
            }
        fprintf(stderr, "no case '%s' (--list)\n", argv[2]);
        return 2;
    }
    int fails = 0, ran = 0, skipped = 0;
    for (size_t i = 0; i < ncases; i++) {
        const Case &c = kCases[i];
        bool named = false, match = false, excluded = false;
        for (int k = 1; k < argc; k++) {
            if (!strcmp(argv[k], "--not") && k + 1 < argc) {
                excluded |= filter_takes(c, argv[++k]);
            } else {
                named = true;
                match |= filter_takes(c, argv[k]);
            }
        }
        if (excluded || (named && !match)) continue;
        if (c.needs == kPlain && !kPlainObserved) {
            printf("SKIP %-52s (plain accesses: the Release build's instrumentation)\n", c.name);
            skipped++;
            continue;
        }
        const char *origin = "";
        if (c.needs == kTable && rkvx_launch_bounds_entries(&origin) < 0) {
            printf("SKIP %-52s (%s)\n", c.name, origin);
            skipped++;
            continue;
        }
        ran++;
        std::string broken, clean;
        const int checks = g_check_fails;
        const int nb = run_variant(c, c.bad, broken);
        const int nc = run_variant(c, 0, clean);
        char want[96];
        snprintf(want, sizeof want, "RULE %s: kernel ", c.rule);  // every refusal names the kernel
        const bool ok = nb > 0 && broken.find(want) != std::string::npos && nc == 0 &&
                        g_check_fails == checks;
        printf("%s %-52s %s\n", ok ? "PASS" : "FAIL", c.name, ok ? c.rule : "");
        if (!ok) {
            fails++;
            printf("     want %s; the breach gave %d violation(s): %s\n", want, nb, broken.c_str());
            printf("     the clean variant gave %d: %s\n", nc, clean.c_str());
        }
    }
    CK(cudaFree(g_zero));
    CK(cudaFree(g_buf));
    printf("RESULT test=cuda_exec_rules status=%s cases=%d fails=%d skipped=%d\n",
           fails ? "FAIL" : (ran ? "PASS" : "SKIP"), ran, fails, skipped);
    // 77 (ctest's SKIP_RETURN_CODE): every case asked for was skipped
    return fails ? 1 : ran == 0 && skipped > 0 ? 77 : 0;
}

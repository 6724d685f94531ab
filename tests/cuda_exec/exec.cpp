// The CPU executor (test-only; tests/cuda_exec, docs/cuda.md "The CPU
// executor"): the CUDA runtime API of cuda_runtime_api.h over host memory,
// and the device machinery of rkvx.h that src/cuda/ptx.cuh's wrappers and the
// kernels' instrumented loads and stores run on. Built without any
// sanitizer instrumentation of its own in the Release build (its __tsan_*
// functions receive the kernels' accesses), with ASan in the sanitizer
// build (whose reports it annotates with the kernel, block and thread).
#include <cxxabi.h>
#include <dlfcn.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include <algorithm>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "bounds_table.h"
#include "cuda_runtime_api.h"
#include "rkvx.h"
#include "rkvx_api.h"

// RKVX_ASAN: the program runs under AddressSanitizer (the sanitizer build,
// whose kernels are ASan-instrumented; this file itself is not, for speed:
// it tells ASan about its fiber switches and poisons what must not be read).
#if defined(__SANITIZE_ADDRESS__) || defined(RKVX_ASAN)
#undef RKVX_ASAN
#define RKVX_ASAN 1
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
// (the functions: asan_interface.h's macros are no-ops in a file built
// without -fsanitize=address, as this one is)
#define RKVX_POISON(p, n) __asan_poison_memory_region((p), (n))
#define RKVX_UNPOISON(p, n) __asan_unpoison_memory_region((p), (n))
#else
#define RKVX_ASAN 0
#define RKVX_POISON(p, n) ((void)(p), (void)(n))
#define RKVX_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

namespace rkvx {
ThreadIds *g_thread = nullptr;
BlockIds *g_block = nullptr;
}  // namespace rkvx

namespace {

using rkvx::Site;

// ---- the device, as an H200 answers ---------------------------------------------------
constexpr size_t kStatic = 1024;     // the executor's static shared region (sharedSizeBytes)
constexpr size_t kOptin = 232448;    // sharedMemPerBlockOptin (227 KB)
constexpr size_t kDefaultDyn = 49152;  // dynamic shared memory without the attribute
constexpr size_t kArena = kStatic + kOptin;
constexpr size_t kArenaGuard = 4096;
constexpr int kMaxThreads = 1024;
constexpr size_t kGuard = 256;       // guard zones around each allocation
constexpr size_t kStack = RKVX_ASAN ? (1u << 20) : (256u << 10);
constexpr int kNumRegs = 64;         // reported by cudaFuncGetAttributes (no register allocation)
constexpr size_t kMemoryLimit = (size_t)4 << 30;  // device memory the executor lends

std::recursive_mutex g_mu;
#define LOCK std::lock_guard<std::recursive_mutex> lock_(g_mu)

double now_s() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// ---- errors ----------------------------------------------------------------------------
cudaError_t g_sticky = cudaSuccess;  // a kernel failed: the "device" is dead until rkvx_reset
thread_local cudaError_t t_last = cudaSuccess;
std::string g_last_violation;
int g_violations = 0;
rkvx_stats g_stats;

cudaError_t fail(cudaError_t e) {
    if (e != cudaSuccess) t_last = e;
    return e;
}
void note_violation(const std::string &msg) {
    g_violations++;
    g_last_violation = msg;
    fprintf(stderr, "%s\n", msg.c_str());
    fflush(stderr);
}

// ---- allocations -----------------------------------------------------------------------
enum AllocKind { kDevice, kPinned };
struct Alloc {
    char *raw, *p;
    size_t n, raw_n;
    AllocKind kind;
};
std::map<uintptr_t, Alloc> g_allocs;  // by p
size_t g_device_bytes = 0;
// Outer ranges [raw, raw + raw_n) for the instrumentation's lookups.
struct Span {
    uintptr_t lo, in_lo, in_hi, hi;
};
std::vector<Span> g_spans;
uintptr_t g_spans_lo = 0, g_spans_hi = 0;
// The inside of the allocation the instrumentation's last device access hit.
uintptr_t g_hit_lo = 1, g_hit_len = 0;

void rebuild_spans() {
    g_spans.clear();
    g_hit_lo = 1;
    g_hit_len = 0;
    for (auto &kv : g_allocs) {
        const Alloc &a = kv.second;
        g_spans.push_back({(uintptr_t)a.raw, (uintptr_t)a.p, (uintptr_t)a.p + a.n,
                           (uintptr_t)a.raw + a.raw_n});
    }
    std::sort(g_spans.begin(), g_spans.end(),
              [](const Span &x, const Span &y) { return x.lo < y.lo; });
    g_spans_lo = g_spans.empty() ? 0 : g_spans.front().lo;
    g_spans_hi = g_spans.empty() ? 0 : g_spans.back().hi;
}
const Span *span_of(uintptr_t a) {
    auto it = std::upper_bound(g_spans.begin(), g_spans.end(), a,
                               [](uintptr_t v, const Span &s) { return v < s.lo; });
    if (it == g_spans.begin()) return nullptr;
    --it;
    return a < it->hi ? &*it : nullptr;
}
// The allocation whose bytes hold all of [p, p + n), or NULL.
const Alloc *alloc_holding(const void *p, size_t n) {
    const uintptr_t a = (uintptr_t)p;
    auto it = g_allocs.upper_bound(a);
    if (it == g_allocs.begin()) return nullptr;
    --it;
    const Alloc &al = it->second;
    return a >= (uintptr_t)al.p && a + n <= (uintptr_t)al.p + al.n && a + n >= a ? &al : nullptr;
}
bool is_device(const void *p, size_t n) {
    const Alloc *a = alloc_holding(p, n ? n : 1);
    return a && a->kind == kDevice;
}
bool is_pinned(const void *p, size_t n) {
    const Alloc *a = alloc_holding(p, n ? n : 1);
    return a && a->kind == kPinned;
}
cudaError_t alloc_make(void **out, size_t n, AllocKind kind) {
    if (!out) return cudaErrorInvalidValue;
    const size_t body = (n + kGuard - 1) / kGuard * kGuard;
    if (n > ((size_t)1 << 40) || (kind == kDevice && g_device_bytes + body > kMemoryLimit))
        return cudaErrorMemoryAllocation;
    const size_t raw_n = kGuard + (body ? body : kGuard) + kGuard;
    char *raw = static_cast<char *>(aligned_alloc(kGuard, raw_n));
    if (!raw) return cudaErrorMemoryAllocation;
    memset(raw, 0xdb, raw_n);  // cudaMalloc gives no zeros: neither does the executor
    Alloc a{raw, raw + kGuard, n, raw_n, kind};
    RKVX_POISON(raw, kGuard);
    RKVX_POISON(a.p + n, raw_n - kGuard - n);
    g_allocs[(uintptr_t)a.p] = a;
    if (kind == kDevice) g_device_bytes += body;
    rebuild_spans();
    *out = a.p;
    return cudaSuccess;
}
cudaError_t alloc_free(void *p, AllocKind kind) {
    if (!p) return cudaSuccess;
    auto it = g_allocs.find((uintptr_t)p);
    if (it == g_allocs.end() || it->second.kind != kind) return cudaErrorInvalidValue;
    Alloc a = it->second;
    g_allocs.erase(it);
    if (kind == kDevice) g_device_bytes -= (a.n + kGuard - 1) / kGuard * kGuard;
    RKVX_UNPOISON(a.raw, a.raw_n);
    free(a.raw);
    rebuild_spans();
    return cudaSuccess;
}

// ---- fibers -------------------------------------------------------------------------------
struct Fiber {
    void *sp = nullptr;
    char *stack = nullptr;
    size_t size = 0;
    void *fake = nullptr;  // ASan's fake stack while switched away
    const void *bottom = nullptr;
    size_t bsize = 0;
};

}  // namespace

extern "C" void rkvx_switch(void **save_sp, void *load_sp);
extern "C" void rkvx_fiber_entry();

#if defined(__x86_64__)
// Saves the callee-saved registers of the running context on its stack,
// stores its stack pointer in *save_sp and continues the context whose stack
// pointer is load_sp (System V x86-64). The x87 control word and MXCSR are
// not switched: every fiber runs with the floating-point environment of the
// thread that runs the launch, and nothing in a kernel changes it.
asm(R"(
    .text
    .globl rkvx_switch
    .type rkvx_switch, @function
rkvx_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size rkvx_switch, .-rkvx_switch

    .globl rkvx_fiber_entry
    .type rkvx_fiber_entry, @function
rkvx_fiber_entry:
    movq %r12, %rdi
    callq *%r13
    ud2
    .size rkvx_fiber_entry, .-rkvx_fiber_entry
)");
#else
#error "the CPU executor's fibers are written for x86-64"
#endif

namespace {

Fiber g_main;
Fiber *g_fiber = &g_main;  // the context running now
Fiber *g_prev = nullptr;   // the one that switched to it

void fiber_init(Fiber &f, void (*fn)(void *), void *arg, int color) {
    // the frame rkvx_switch pops: r15, r14, r13, r12, rbx, rbp, then the
    // return address; rkvx_fiber_entry then runs with rsp 16-byte aligned.
    // Each stack starts at another cache-line offset: stacks are mapped at
    // multiples of their size, and tops at one offset would all fall in the
    // same cache sets.
    uintptr_t top = ((uintptr_t)(f.stack + f.size) - (uintptr_t)(color % 97) * 64) & ~(uintptr_t)15;
    uint64_t *sp = reinterpret_cast<uint64_t *>(top - 16 - 56);
    sp[0] = 0;                                       // r15
    sp[1] = 0;                                       // r14
    sp[2] = (uint64_t)(uintptr_t)fn;                 // r13
    sp[3] = (uint64_t)(uintptr_t)arg;                // r12
    sp[4] = 0;                                       // rbx
    sp[5] = 0;                                       // rbp
    sp[6] = (uint64_t)(uintptr_t)&rkvx_fiber_entry;  // return address
    f.sp = sp;
}

void fiber_switch(Fiber *to, bool dying) {
    Fiber *from = g_fiber;
    g_prev = from;
    g_fiber = to;
    g_stats.switches++;
#if RKVX_ASAN
    __sanitizer_start_switch_fiber(dying ? nullptr : &from->fake,
                                   to == &g_main ? g_main.bottom : to->stack,
                                   to == &g_main ? g_main.bsize : to->size);
#else
    (void)dying;
#endif
    rkvx_switch(&from->sp, to->sp);
#if RKVX_ASAN
    const void *b = nullptr;
    size_t bs = 0;
    __sanitizer_finish_switch_fiber(from->fake, &b, &bs);
    if (g_prev == &g_main) g_main.bottom = b, g_main.bsize = bs;
#endif
}

// The first code of a new fiber (ASan: finish the switch that started it).
void fiber_started() {
#if RKVX_ASAN
    const void *b = nullptr;
    size_t bs = 0;
    __sanitizer_finish_switch_fiber(nullptr, &b, &bs);
    if (g_prev == &g_main) g_main.bottom = b, g_main.bsize = bs;
#endif
}

// ---- simulated threads and blocks -------------------------------------------------------
enum TState : uint8_t { kRunnable, kWaitColl, kWaitBar, kDone };

struct CpOp {
    uint32_t dst;
    int size;
    const void *src;
    int src_bytes;
    unsigned char data[16];
    Site site;
};
struct WgOp {
    float *d;
    int n;
    const uint32_t *a;
    int na;
    uint64_t op;
    int wg;
    std::vector<float> res;
    Site site;
};

struct Thr : rkvx::ThreadIds {
    int tid = 0, lane = 0, warp = 0;
    Fiber fiber;
    long warp_seq = 0, wg_seq = 0, bar_seq = 0;
    std::vector<CpOp> cp_open;
    std::deque<std::vector<CpOp>> cp_groups;
    std::vector<WgOp> wg_open;
    std::deque<std::vector<WgOp>> wg_groups;
    bool wg_fenced = false;
    uint32_t fence_seq = 0, fence_pub = 0;
    std::vector<std::pair<uintptr_t, uintptr_t>> live;  // in-flight wgmma registers
    Site wait_site{nullptr, 0};
    const char *wait_instr = nullptr;
};

struct Coll {
    int arrived = 0, expected = 0;
    unsigned mask = 0;
    const char *instr = nullptr;
    Site site{nullptr, 0};
    long seq = 0;
    rkvx::CollectiveFn fn = nullptr;
    void *in[128];
    void *out[128];
};
struct StaticVar {
    const void *key;
    uint32_t off, bytes;
    const char *name;
};
struct WgRange {
    uint32_t lo, hi;
    uint64_t op;
    int wg, left;
};

struct Blk : rkvx::BlockIds {
    int n = 0, nwarps = 0, done = 0;
    int bar_arrived = 0;
    Site bar_site{nullptr, 0};
    long bar_seq = 0;
    uint32_t epoch = 0, start_epoch = 0;
    std::vector<StaticVar> statics;
    uint32_t static_used = 0;
    size_t dyn = 0;
    Coll warp[32];
    Coll wg[8];
    unsigned exited[32];
    std::vector<WgRange> wg_reads;
    uint64_t wg_next_op[8];
    int wg_issued[8];
};

// The shadow of one byte of shared memory.
struct Sh {
    uint32_t w_ep, r_ep;   // barrier epochs of the last write / reads (0: none)
    uint32_t gw_fence;     // the writer's fence.proxy.async count at the write
    uint32_t pend;         // 1 + the thread whose cp.async will fill it; 0: none
    uint16_t w_tid, r_tid; // last writer; a reader (kSeveral: more than one)
    uint16_t w_site;       // where it was written (g_sites index)
    uint8_t w_atomic, r_atomic;
};
constexpr uint16_t kSeveral = 0xffff;

std::vector<Thr> g_thr;
TState g_st[kMaxThreads];  // each thread's state, apart from the rest (scanned often)
Blk g_blk;
Thr *g_cur = nullptr;
rkvx::Launch *g_launch = nullptr;
unsigned char *g_arena = nullptr;
Sh *g_sh = nullptr;
uint32_t g_epoch = 0;
bool g_in_kernel = false;
// Whether the kernels' plain stores reach the executor (the Release build's
// instrumentation; not the sanitizer build's): without them an instruction
// cannot tell a plainly written byte from an unwritten one, and the
// uninitialized-read and async-proxy rules look only at bytes whose last
// write the executor saw (cp.async).
#if RKVX_ASAN
constexpr bool kPlainObserved = false;
#else
constexpr bool kPlainObserved = true;
#endif
bool g_abort = false;
std::string g_abort_msg;
// for the instrumentation's fast paths
uintptr_t g_arena_lo = 0, g_stk_lo = 0, g_stk_span = 0;
bool g_cur_live = false;
std::vector<Site> g_sites;

uint16_t site_id(Site s) {
    for (size_t i = 0; i < g_sites.size(); i++)
        if (g_sites[i].line == s.line && g_sites[i].file == s.file) return (uint16_t)i;
    if (g_sites.size() >= 0xfff0) return 0;
    g_sites.push_back(s);
    return (uint16_t)(g_sites.size() - 1);
}
const char *base_name(const char *f) {
    if (!f) return "?";
    const char *s = strrchr(f, '/');
    return s ? s + 1 : f;
}
// The words of a message, in a ring of static buffers: a rule's message is
// made on a fiber that never returns, so nothing here may own heap memory.
char *msg_buf() {
    static char bufs[16][512];
    static int next = 0;
    return bufs[next++ % 16];
}
const char *site_str(Site s) {
    char *buf = msg_buf();
    if (s.line > 0)
        snprintf(buf, 512, "%s:%d", base_name(s.file), s.line);
    else
        snprintf(buf, 512, "%s", s.file ? s.file : "?");
    return buf;
}
const char *thread_str(int tid) {
    const Thr &t = g_thr[tid];
    char *buf = msg_buf();
    snprintf(buf, 512, "thread (%u,%u,%u) warp %d lane %d", t.thread_idx.x, t.thread_idx.y,
             t.thread_idx.z, t.warp, t.lane);
    return buf;
}
const char *smem_str(uint32_t off) {
    char *buf = msg_buf();
    const size_t bufsz = 512;
    for (const StaticVar &v : g_blk.statics)
        if (off >= v.off && off < v.off + v.bytes) {
            snprintf(buf, bufsz, "shared 0x%x (static '%s' + %u)", off, v.name, off - v.off);
            return buf;
        }
    if (off >= kStatic)
        snprintf(buf, bufsz, "shared 0x%x (dynamic + %u)", off, (unsigned)(off - kStatic));
    else
        snprintf(buf, bufsz, "shared 0x%x (static region, no variable)", off);
    return buf;
}

void ensure_runtime() {
    if (!g_thr.empty()) return;
    g_thr.resize(kMaxThreads);
    void *a = mmap(nullptr, kArena + kArenaGuard, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (a == MAP_FAILED) {
        fprintf(stderr, "rkvx: cannot map the shared-memory arena\n");
        abort();
    }
    g_arena = static_cast<unsigned char *>(a);
    g_arena_lo = (uintptr_t)g_arena;
    g_sh = static_cast<Sh *>(calloc(kArena, sizeof(Sh)));
    if (!g_sh) abort();
}

void ensure_stack(Thr &t) {
    if (t.fiber.stack) return;
    void *s = mmap(nullptr, kStack, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    if (s == MAP_FAILED) {
        fprintf(stderr, "rkvx: cannot map a fiber stack\n");
        abort();
    }
    mprotect(s, 4096, PROT_NONE);  // overflow guard
    t.fiber.stack = static_cast<char *>(s);
    t.fiber.size = kStack;
}

[[noreturn]] void stop_block();

// A rule broken: the message names the kernel, block, blamed thread, the
// instruction and its site; the block stops.
[[noreturn]] void violation_v(int tid, const char *rule, const char *instr, Site site,
                              const char *fmt, va_list ap) {
    char details[1024];
    vsnprintf(details, sizeof details, fmt, ap);
    char head[1024];
    if (g_in_kernel && g_launch) {
        snprintf(head, sizeof head, "rkvx: RULE %s: kernel %s block (%u,%u,%u) %s: %s at %s: ", rule,
                 g_launch->name, g_blk.block_idx.x, g_blk.block_idx.y, g_blk.block_idx.z,
                 tid >= 0 ? thread_str(tid) : "(no thread)", instr,
                 site_str(site));
    } else {
        snprintf(head, sizeof head, "rkvx: RULE %s: %s at %s: ", rule, instr, site_str(site));
    }
    g_abort_msg = std::string(head) + details;
    if (!g_in_kernel) {
        note_violation(g_abort_msg);
        fprintf(stderr, "rkvx: a rule broken outside a kernel: stopping\n");
        abort();
    }
    stop_block();
}
[[noreturn]] __attribute__((format(printf, 5, 6))) void violation_at(int tid, const char *rule,
                                                                     const char *instr, Site site,
                                                                     const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    violation_v(tid, rule, instr, site, fmt, ap);
}

// ---- scheduling ----------------------------------------------------------------------------
void set_current(Thr *t) {
    g_cur = t;
    rkvx::g_thread = t;
    g_stk_lo = (uintptr_t)t->fiber.stack;
    g_stk_span = t->fiber.size;
    g_cur_live = !t->live.empty();
}

Thr *pick_next(int from) {
    const int n = g_blk.n;
    for (int i = from + 1; i < n; i++)
        if (g_st[i] == kRunnable) return &g_thr[i];
    for (int i = 0; i <= from && i < n; i++)
        if (g_st[i] == kRunnable) return &g_thr[i];
    return nullptr;
}

[[noreturn]] void deadlock(Thr *self) {
    static char what[2048];
    int at_bar = 0;
    for (int i = 0; i < g_blk.n; i++)
        if (g_st[i] == kWaitBar) at_bar++;
    size_t len = (size_t)snprintf(what, sizeof what,
                                  "%d of %d threads wait at __syncthreads (%s), %d have exited",
                                  at_bar, g_blk.n, at_bar ? site_str(g_blk.bar_site) : "-",
                                  g_blk.done);
    for (int w = 0; w < g_blk.nwarps && len < sizeof what; w++)
        if (g_blk.warp[w].arrived)
            len += (size_t)snprintf(what + len, sizeof what - len,
                                    "; warp %d: %d of %d lanes wait at %s (%s)", w,
                                    g_blk.warp[w].arrived, g_blk.warp[w].expected,
                                    g_blk.warp[w].instr, site_str(g_blk.warp[w].site));
    for (int w = 0; w < 8 && len < sizeof what; w++)
        if (g_blk.wg[w].arrived)
            len += (size_t)snprintf(what + len, sizeof what - len,
                                    "; warpgroup %d: %d of 128 threads wait at %s (%s)", w,
                                    g_blk.wg[w].arrived, g_blk.wg[w].instr,
                                    site_str(g_blk.wg[w].site));
    violation_at(self ? self->tid : -1, RKVX_RULE_DEADLOCK,
                 self && self->wait_instr ? self->wait_instr : "(waiting)",
                 self ? self->wait_site : Site{nullptr, 0}, "no thread can continue: %s", what);
}

// The running thread waits (its state already set): run another.
void block_current() {
    Thr *self = g_cur;
    Thr *nx = pick_next(self->tid);
    if (!nx) deadlock(self);
    set_current(nx);
    fiber_switch(&nx->fiber, false);
    // resumed by whoever made us runnable and switched here; they set g_cur
}

void stop_block() {
    g_abort = true;
    fiber_switch(&g_main, true);
    __builtin_unreachable();
}

void release_barrier() {
    Blk &B = g_blk;
    B.bar_arrived = 0;
    B.epoch = ++g_epoch;
    for (int i = 0; i < B.n; i++) {
        Thr &t = g_thr[i];
        if (g_st[i] == kWaitBar) g_st[i] = kRunnable;
        t.fence_pub = t.fence_seq;
    }
}

void complete_cp(Thr &t, CpOp &op, bool log);
void complete_wg(Thr &t, WgOp &op);

void thread_exit() {
    Thr *t = g_cur;
    Blk &B = g_blk;
    // what it left in flight still lands (unchecked: the kernel is over for it)
    for (CpOp &op : t->cp_open) complete_cp(*t, op, false);
    for (auto &g : t->cp_groups)
        for (CpOp &op : g) complete_cp(*t, op, false);
    t->cp_open.clear();
    t->cp_groups.clear();
    for (WgOp &op : t->wg_open) complete_wg(*t, op);
    for (auto &g : t->wg_groups)
        for (WgOp &op : g) complete_wg(*t, op);
    t->wg_open.clear();
    t->wg_groups.clear();
    g_st[t->tid] = kDone;
    B.done++;
    B.exited[t->warp] |= 1u << t->lane;
    const Coll &wc = B.warp[t->warp];
    if (wc.arrived && (wc.mask >> t->lane & 1))
        violation_at(t->tid, RKVX_RULE_EXITED, "exit", Site{"(kernel end)", 0},
                     "the lane exits while %d lanes of its warp wait for it at %s (%s)", wc.arrived,
                     wc.instr, site_str(wc.site));
    const Coll &gc = B.wg[t->warp / 4];
    if (gc.arrived)
        violation_at(t->tid, RKVX_RULE_EXITED, "exit", Site{"(kernel end)", 0},
                     "the thread exits while %d threads of its warpgroup wait for it at %s (%s)",
                     gc.arrived, gc.instr, site_str(gc.site));
    if (B.bar_arrived && B.bar_arrived == B.n - B.done) release_barrier();
    Thr *nx = pick_next(t->tid);
    if (!nx) {
        for (int i = 0; i < B.n; i++)
            if (g_st[i] != kDone) deadlock(&g_thr[i]);
        fiber_switch(&g_main, true);  // the block is done
    } else {
        set_current(nx);
        fiber_switch(&nx->fiber, true);
    }
    __builtin_unreachable();
}

void fiber_main(void *arg) {
    (void)arg;
    fiber_started();
    g_launch->run_thread();
    thread_exit();
}

// One block of the current launch: true when it ran to the end.
bool run_block(uint3 bidx) {
    Blk &B = g_blk;
    rkvx::Launch *l = g_launch;
    B.block_idx = bidx;
    B.n = (int)(l->block.x * l->block.y * l->block.z);
    B.nwarps = (B.n + 31) / 32;
    B.done = 0;
    B.bar_arrived = 0;
    B.epoch = B.start_epoch = ++g_epoch;
    B.statics.clear();
    B.static_used = 0;
    B.dyn = l->smem;
    for (auto &c : B.warp) c.arrived = 0;
    for (auto &c : B.wg) c.arrived = 0;
    memset(B.exited, 0, sizeof B.exited);
    B.wg_reads.clear();
    memset(B.wg_next_op, 0, sizeof B.wg_next_op);
    memset(B.wg_issued, 0, sizeof B.wg_issued);
    RKVX_UNPOISON(g_arena, kArena + kArenaGuard);
    memset(g_arena + kStatic, 0xa5, B.dyn);  // shared memory starts as garbage
    RKVX_POISON(g_arena, kStatic);
    RKVX_POISON(g_arena + kStatic + B.dyn, kArena + kArenaGuard - kStatic - B.dyn);
    for (int i = 0; i < B.n; i++) {
        Thr &t = g_thr[i];
        t.tid = i;
        t.thread_idx.x = (unsigned)(i % (int)l->block.x);
        t.thread_idx.y = (unsigned)(i / (int)l->block.x % (int)l->block.y);
        t.thread_idx.z = (unsigned)(i / (int)(l->block.x * l->block.y));
        t.lane = i % 32;
        t.warp = i / 32;
        g_st[i] = kRunnable;
        t.warp_seq = t.wg_seq = t.bar_seq = 0;
        t.cp_open.clear();
        t.cp_groups.clear();
        t.wg_open.clear();
        t.wg_groups.clear();
        t.wg_fenced = false;
        t.fence_seq = t.fence_pub = 0;
        t.live.clear();
        ensure_stack(t);
        RKVX_UNPOISON(t.fiber.stack + 4096, t.fiber.size - 4096);
        fiber_init(t.fiber, fiber_main, &t, i);
    }
    g_stats.blocks++;
    g_stats.threads += B.n;
    g_abort = false;
    g_in_kernel = true;
    set_current(&g_thr[0]);
    fiber_switch(&g_thr[0].fiber, false);
    g_in_kernel = false;
    g_cur = nullptr;
    rkvx::g_thread = nullptr;
    g_cur_live = false;
    // what an aborted block left in flight: no async copy is pending now
    if (g_abort)
        for (size_t b = 0; b < kStatic + B.dyn; b++) g_sh[b].pend = 0;
    for (int i = 0; i < B.n; i++) {
        Thr &t = g_thr[i];
        for (auto &r : t.live) RKVX_UNPOISON((void *)r.first, r.second - r.first);
        t.live.clear();
    }
    RKVX_UNPOISON(g_arena, kArena + kArenaGuard);
    return !g_abort;
}

void run_launch(rkvx::Launch *l) {
    if (g_sticky) return;
    ensure_runtime();
    g_stats.launches++;
    // RKVX_TRACE=1: one stderr line per launch run (which kernels a test ran)
    static const bool trace = getenv("RKVX_TRACE") && *getenv("RKVX_TRACE") == '1';
    if (trace)
        fprintf(stderr, "rkvx: launch %s grid (%u,%u,%u) block (%u,%u,%u) smem %zu\n", l->name,
                l->grid.x, l->grid.y, l->grid.z, l->block.x, l->block.y, l->block.z, l->smem);
    g_launch = l;
    g_blk.grid_dim = l->grid;
    g_blk.block_dim = l->block;
    rkvx::g_block = &g_blk;
    bool ok = true;
    for (unsigned z = 0; ok && z < l->grid.z; z++)
        for (unsigned y = 0; ok && y < l->grid.y; y++)
            for (unsigned x = 0; ok && x < l->grid.x; x++) ok = run_block(uint3{x, y, z});
    g_launch = nullptr;
    if (!ok) {
        note_violation(g_abort_msg);
        g_sticky = cudaErrorLaunchFailure;
    }
}

// ---- shared memory -------------------------------------------------------------------------
bool smem_valid(uint32_t off, size_t n) {
    const Blk &B = g_blk;
    return (off + n <= B.static_used) || (off >= kStatic && off + n <= kStatic + B.dyn);
}

[[noreturn]] void race(int tid, int other, bool other_writes, bool this_writes, uint32_t off,
                       const char *instr, Site site, Site other_site) {
    violation_at(tid, RKVX_RULE_RACE, instr, site,
                 "%s of %s conflicts with a %s by %s%s%s between the same two barriers (no "
                 "__syncthreads orders them)",
                 this_writes ? "write" : "read", smem_str(off),
                 other_writes ? "write" : "read",
                 other == kSeveral ? "several threads" : thread_str(other),
                 other_site.file ? " at " : "", other_site.file ? site_str(other_site) : "");
}

void check_wg_reads(int tid, uint32_t off, size_t n, const char *instr, Site site) {
    for (const WgRange &r : g_blk.wg_reads)
        if (off < r.hi && off + n > r.lo)
            violation_at(tid, RKVX_RULE_WGMMA_SMEM, instr, site,
                         "it writes %s, an operand of an mma_async of warpgroup %d that no "
                         "wgmma.wait_group has covered yet",
                         smem_str(std::max(off, r.lo)), r.wg);
}

// A load or store of shared bytes [off, off + n) by thread tid.
void smem_access(uint32_t off, size_t n, int tid, bool write, bool atomic, const char *instr,
                 Site site) {
    Blk &B = g_blk;
    if (!smem_valid(off, n))
        violation_at(tid, RKVX_RULE_OOB_SHARED, instr, site,
                     "%zu bytes at %s are outside the block's shared memory (static 0x0..0x%x, "
                     "dynamic 0x%zx..0x%zx)",
                     n, smem_str(off), B.static_used, kStatic, kStatic + B.dyn);
    const uint32_t E = B.epoch;
    const uint16_t sid = write ? site_id(site) : 0;
    for (size_t i = 0; i < n; i++) {
        Sh &s = g_sh[off + i];
        if (s.pend) {
            const int src = (int)s.pend - 1;
            violation_at(tid, RKVX_RULE_CP_ASYNC_WAIT, instr, site,
                         "it %s %s, the destination of a cp.async of %s that no "
                         "cp.async.wait_group has covered yet",
                         write ? "writes" : "reads", smem_str(off + (uint32_t)i),
                         thread_str(src));
        }
        if (write) {
            if (s.w_ep == E && s.w_tid != tid && !(atomic && s.w_atomic))
                race(tid, s.w_tid, true, true, off + (uint32_t)i, instr, site, g_sites[s.w_site]);
            if (s.r_ep == E && s.r_tid != tid && !(atomic && s.r_atomic))
                race(tid, s.r_tid, false, true, off + (uint32_t)i, instr, site, Site{nullptr, 0});
            s.w_ep = E;
            s.w_tid = (uint16_t)tid;
            s.w_atomic = atomic;
            s.w_site = sid;
            s.gw_fence = g_thr[tid].fence_seq;
        } else {
            if (kPlainObserved && s.w_ep < B.start_epoch)
                violation_at(tid, RKVX_RULE_UNINIT_SHARED, instr, site,
                             "it reads %s, which nothing in this block has written",
                             smem_str(off + (uint32_t)i));
            if (s.w_ep == E && s.w_tid != tid && !(atomic && s.w_atomic))
                race(tid, s.w_tid, true, false, off + (uint32_t)i, instr, site, g_sites[s.w_site]);
            if (s.r_ep != E) {
                s.r_ep = E;
                s.r_tid = (uint16_t)tid;
                s.r_atomic = atomic;
            } else {
                if (s.r_tid != tid) s.r_tid = kSeveral;
                s.r_atomic &= atomic;
            }
        }
    }
    if (write && !B.wg_reads.empty()) check_wg_reads(tid, off, n, instr, site);
}

// ---- async copies ------------------------------------------------------------------------
void complete_cp(Thr &t, CpOp &op, bool log) {
    if (log && op.src_bytes > 0 && memcmp(op.src, op.data, (size_t)op.src_bytes) != 0)
        violation_at(t.tid, RKVX_RULE_CP_ASYNC_SOURCE, "cp.async", op.site,
                     "the %d source bytes at %p changed between the cp.async and the "
                     "cp.async.wait_group that completes it",
                     op.src_bytes, op.src);
    RKVX_UNPOISON(g_arena + op.dst, op.size);
    memcpy(g_arena + op.dst, op.data, (size_t)op.size);
    const uint32_t E = g_blk.epoch;
    const uint16_t sid = site_id(op.site);
    for (int i = 0; i < op.size; i++) {
        Sh &s = g_sh[op.dst + i];
        s.pend = 0;
        if (!log) continue;
        if (s.w_ep == E && s.w_tid != t.tid)
            race(t.tid, s.w_tid, true, true, op.dst + i, "cp.async (completion)", op.site,
                 g_sites[s.w_site]);
        if (s.r_ep == E && s.r_tid != t.tid)
            race(t.tid, s.r_tid, false, true, op.dst + i, "cp.async (completion)", op.site,
                 Site{nullptr, 0});
        s.w_ep = E;
        s.w_tid = (uint16_t)t.tid;
        s.w_atomic = 0;
        s.w_site = sid;
        s.gw_fence = t.fence_seq;
    }
}

void complete_wg(Thr &t, WgOp &op) {
    for (auto it = t.live.begin(); it != t.live.end();) {
        if (it->first == (uintptr_t)op.d || (op.a && it->first == (uintptr_t)op.a)) {
            RKVX_UNPOISON((void *)it->first, it->second - it->first);
            it = t.live.erase(it);
        } else {
            ++it;
        }
    }
    memcpy(op.d, op.res.data(), sizeof(float) * (size_t)op.n);
    for (auto it = g_blk.wg_reads.begin(); it != g_blk.wg_reads.end();) {
        if (it->op == op.op && it->wg == op.wg && --it->left == 0)
            it = g_blk.wg_reads.erase(it);
        else
            ++it;
    }
}

// ---- streams, events, graphs -----------------------------------------------------------------
struct Op {
    enum Kind { kKernel, kCopy, kSet, kRecord } kind = kKernel;
    uint64_t seq = 0;
    rkvx::Launch *launch = nullptr;
    void *dst = nullptr;
    const void *src = nullptr;
    size_t n = 0;
    std::vector<unsigned char> snap;  // the bytes of a pageable source
    bool use_snap = false;
    int value = 0;
    CUevent_st *event = nullptr;
};

}  // namespace

struct CUevent_st {
    unsigned flags = 0;
    bool recorded = false, done = false;
    double t = 0;
    uint64_t seq = 0;
    CUstream_st *stream = nullptr;
};
struct CUgraph_st {
    std::vector<Op> ops;
};
struct CUgraphExec_st {
    std::vector<Op> ops;
};
struct CUstream_st {
    unsigned flags = 0;
    bool legacy = false;
    std::deque<Op> q;
    bool capturing = false, invalidated = false;
    cudaStreamCaptureMode mode = cudaStreamCaptureModeGlobal;
    std::thread::id capture_thread;
    CUgraph_st *graph = nullptr;
};

namespace {

CUstream_st g_legacy_stream;
std::vector<CUstream_st *> g_streams;  // created streams (not the legacy one)
uint64_t g_seq = 0;
int g_device = 0;

struct KernelAttr {
    int max_dyn = (int)kDefaultDyn;
};
std::map<const void *, KernelAttr> g_attrs;

// ---- the kernels' names and launch bounds ------------------------------------------------
// A host compiler keeps no __launch_bounds__ on a function; nvcc does, as the
// .maxntid / .minnctapersm of the kernel's PTX .entry. The CUDA build keeps
// its PTX and the build copies those into the launch-bounds table
// (bounds_table.h); here its mangled names are demangled and spelled as
// rkvx::KernelName spells a launch's kernel, so that a launch finds its own
// kernel's bound: the one source is the kernel's __launch_bounds__ as the
// real compiler evaluated it (templates instantiated).

// One spelling of a qualified kernel name for both sides: "{anonymous}" for
// an unnamed namespace (GCC's __PRETTY_FUNCTION__; the demangler and Clang
// write "(anonymous namespace)"), no leading '&' (Clang's function pointer
// template arguments).
std::string canonical_name(std::string s) {
    static const std::string anon = "(anonymous namespace)";
    for (size_t at; (at = s.find(anon)) != std::string::npos;) s.replace(at, anon.size(), "{anonymous}");
    if (!s.empty() && s[0] == '&') s.erase(0, 1);
    return s;
}

// A demangled PTX entry ("void ns::k<float, 4>(ns::P)") as a kernel name
// ("ns::k<float, 4>"): no parameter list, no return type (a kernel's is void,
// written for template instantiations only).
std::string entry_kernel_name(const char *mangled) {
    int status = 0;
    char *d = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
    std::string s = canonical_name(status == 0 && d ? d : mangled);
    free(d);
    if (!s.empty() && s.back() == ')') {
        int depth = 0;
        for (size_t i = s.size(); i-- > 0;) {
            if (s[i] == ')') depth++;
            if (s[i] == '(' && --depth == 0) {
                s.erase(i);
                break;
            }
        }
    }
    if (s.compare(0, 5, "void ") == 0) s.erase(0, 5);
    return s;
}

struct Bound {
    unsigned threads;      // .maxntid's product (the device's 1,024 when the entry has none)
    unsigned dims[3];      // .maxntid itself (0, 0, 0: none)
    unsigned min_blocks;   // .minnctapersm (0: none)
};
// The table by kernel name (built on first use; empty without a table). Two
// entries of one name with different bounds cannot be told apart by the
// name a launch has: a loud stop.
const std::map<std::string, Bound> &bounds_table() {
    static const std::map<std::string, Bound> table = [] {
        std::map<std::string, Bound> t;
        for (int i = 0; i < rkvx_entry_bounds_n; i++) {
            const rkvx_entry_bound &e = rkvx_entry_bounds[i];
            Bound b{(unsigned)kMaxThreads, {e.maxntid[0], e.maxntid[1], e.maxntid[2]},
                    e.minnctapersm};
            if (e.maxntid[0]) b.threads = e.maxntid[0] * e.maxntid[1] * e.maxntid[2];
            const std::string name = entry_kernel_name(e.mangled);
            auto it = t.find(name);
            if (it != t.end() && (it->second.threads != b.threads ||
                                  it->second.min_blocks != b.min_blocks)) {
                fprintf(stderr,
                        "rkvx: the launch-bounds table has two entries named %s with different "
                        "bounds (%u and %u threads): a launch cannot tell them apart\n",
                        name.c_str(), it->second.threads, b.threads);
                abort();
            }
            t[name] = b;
        }
        return t;
    }();
    return table;
}
const Bound *bound_of(const char *name) {
    if (!name) return nullptr;
    const auto &t = bounds_table();
    auto it = t.find(name);
    return it == t.end() ? nullptr : &it->second;
}

// The names of the kernels the program launches (rkvx::register_kernel, at
// start-up), by function.
std::map<const void *, std::string> &kernel_names() {
    static std::map<const void *, std::string> names;
    return names;
}
const char *kernel_name_of(const void *func) {
    auto &n = kernel_names();
    auto it = n.find(func);
    return it == n.end() ? nullptr : it->second.c_str();
}

Op clone_op(const Op &o) {
    Op c;
    c.kind = o.kind;
    c.launch = o.launch ? o.launch->clone() : nullptr;
    c.dst = o.dst;
    c.src = o.src;
    c.n = o.n;
    c.snap = o.snap;
    c.use_snap = o.use_snap;
    c.value = o.value;
    c.event = o.event;
    return c;
}
void drop_op(Op &o) {
    delete o.launch;
    o.launch = nullptr;
}

CUstream_st *stream_of(cudaStream_t s) { return s ? s : &g_legacy_stream; }
bool stream_known(cudaStream_t s) {
    return !s || std::find(g_streams.begin(), g_streams.end(), s) != g_streams.end();
}

void exec_op(Op &o) {
    if (g_sticky) {  // a failed kernel: nothing more runs
        if (o.kind == Op::kRecord && o.event) o.event->done = true, o.event->t = now_s();
        drop_op(o);
        return;
    }
    switch (o.kind) {
    case Op::kKernel: run_launch(o.launch); break;
    case Op::kCopy: memmove(o.dst, o.use_snap ? o.snap.data() : o.src, o.n); break;
    case Op::kSet: memset(o.dst, o.value, o.n); break;
    case Op::kRecord:
        o.event->done = true;
        o.event->t = now_s();
        break;
    }
    drop_op(o);
}

// Runs stream s's work up to sequence number `limit`, each op after the work
// it is ordered after: the legacy stream after every blocking stream's earlier
// work, a blocking stream after the legacy stream's earlier work.
void run_until(CUstream_st *s, uint64_t limit) {
    while (!s->q.empty() && s->q.front().seq <= limit) {
        Op o = std::move(s->q.front());
        s->q.pop_front();
        if (s->legacy) {
            for (CUstream_st *b : g_streams)
                if (!(b->flags & cudaStreamNonBlocking)) run_until(b, o.seq - 1);
        } else if (!(s->flags & cudaStreamNonBlocking)) {
            run_until(&g_legacy_stream, o.seq - 1);
        }
        exec_op(o);
    }
}
void run_all() {
    for (;;) {
        CUstream_st *best = nullptr;
        if (!g_legacy_stream.q.empty()) best = &g_legacy_stream;
        for (CUstream_st *s : g_streams)
            if (!s->q.empty() && (!best || s->q.front().seq < best->q.front().seq)) best = s;
        if (!best) return;
        run_until(best, best->q.front().seq);
    }
}

// Whether a capture forbids this call from this thread (a capture in global
// mode, or this thread's own thread-local one); if so, the capture is
// invalidated and the message printed.
bool capture_forbids(const char *what) {
    bool hit = false;
    for (CUstream_st *s : g_streams)
        if (s->capturing && (s->mode == cudaStreamCaptureModeGlobal ||
                             (s->mode == cudaStreamCaptureModeThreadLocal &&
                              s->capture_thread == std::this_thread::get_id()))) {
            if (!s->invalidated)
                fprintf(stderr, "rkvx: capture rule: %s while stream %p is being captured "
                                "(the capture is invalidated)\n", what, (void *)s);
            s->invalidated = true;
            hit = true;
        }
    return hit;
}

cudaError_t enqueue(CUstream_st *s, Op &&o) {
    if (s->capturing) {
        if (s->invalidated) {
            drop_op(o);
            return cudaErrorStreamCaptureInvalidated;
        }
        s->graph->ops.push_back(std::move(o));
        return cudaSuccess;
    }
    o.seq = ++g_seq;
    if (o.kind == Op::kRecord) {
        o.event->recorded = true;
        o.event->done = false;
        o.event->seq = o.seq;
        o.event->stream = s;
    }
    s->q.push_back(std::move(o));
    return cudaSuccess;
}

// A graph or its instance, with the launches it owns.
template <class G>
cudaError_t destroy_graph(G *g) {
    LOCK;
    if (!g) return fail(cudaErrorInvalidValue);
    for (Op &o : g->ops) drop_op(o);
    delete g;
    return cudaSuccess;
}

const char *error_name(cudaError_t e) {
    switch (e) {
#define E(x) \
    case x: return #x;
        E(cudaSuccess)
        E(cudaErrorInvalidValue)
        E(cudaErrorMemoryAllocation)
        E(cudaErrorInitializationError)
        E(cudaErrorInvalidConfiguration)
        E(cudaErrorInvalidDeviceFunction)
        E(cudaErrorNoDevice)
        E(cudaErrorInvalidDevice)
        E(cudaErrorInvalidResourceHandle)
        E(cudaErrorIllegalState)
        E(cudaErrorNotReady)
        E(cudaErrorIllegalAddress)
        E(cudaErrorLaunchOutOfResources)
        E(cudaErrorMisalignedAddress)
        E(cudaErrorLaunchFailure)
        E(cudaErrorStreamCaptureUnsupported)
        E(cudaErrorStreamCaptureInvalidated)
        E(cudaErrorStreamCaptureImplicit)
#undef E
    }
    return "cudaErrorUnknown";
}

// The copy's direction against the pointers: each device side inside one
// device allocation, each host side outside them.
cudaError_t copy_check(void *dst, const void *src, size_t n, cudaMemcpyKind &kind) {
    const bool dd = is_device(dst, n), sd = is_device(src, n);
    if (kind == cudaMemcpyDefault)
        kind = dd ? (sd ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice)
                  : (sd ? cudaMemcpyDeviceToHost : cudaMemcpyHostToHost);
    const bool want_dd = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
    const bool want_sd = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
    if (want_dd != dd || want_sd != sd) {
        fprintf(stderr,
                "rkvx: cudaMemcpy of %zu bytes (kind %d): dst %p is %s, src %p is %s; the kind "
                "wants dst %s and src %s\n",
                n, (int)kind, dst, dd ? "device memory" : "not inside one device allocation", src,
                sd ? "device memory" : "not inside one device allocation",
                want_dd ? "device" : "host", want_sd ? "device" : "host");
        return cudaErrorInvalidValue;
    }
    return cudaSuccess;
}

}  // namespace

// =============================================================================================
// rkvx: the device machinery
// =============================================================================================
namespace rkvx {

void violation(const char *rule, const char *instr, Site site, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    violation_v(g_cur ? g_cur->tid : -1, rule, instr, site, fmt, ap);
}

void violation_by(int tid, const char *rule, const char *instr, Site site, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    violation_v(tid, rule, instr, site, fmt, ap);
}

int thread_linear() { return g_cur ? g_cur->tid : -1; }

void collective_first(Scope sc, unsigned mask, const char *instr, Site site, Coll *c, int first,
                      int slots, long seq, CollectiveFn fn);

void collective(Scope sc, unsigned mask, const char *instr, Site site, void *in, void *out,
                CollectiveFn fn) {
    Thr *t = g_cur;
    Blk &B = g_blk;
    Coll *c;
    int slot, first, slots;
    long *seq;
    if (sc == Scope::Warp) {
        c = &B.warp[t->warp];
        slot = t->lane;
        first = t->warp * 32;
        slots = 32;
        seq = &t->warp_seq;
    } else {
        const int wg = t->warp / 4;
        c = &B.wg[wg];
        first = wg * 128;
        slot = t->tid - first;
        slots = 128;
        seq = &t->wg_seq;
    }
    if (c->arrived > 0) {
        // a later arrival: the same instruction (pointer equality first: one
        // call site passes the same literals), the same collective count
        if ((c->instr != instr && strcmp(c->instr, instr) != 0) || c->site.line != site.line ||
            (c->site.file != site.file && strcmp(c->site.file, site.file) != 0) ||
            c->mask != mask || c->seq != *seq)
            violation_at(t->tid, RKVX_RULE_CONVERGENCE, instr, site,
                         "this thread's %ld-th collective; %d threads of its %s wait at %s (%s), "
                         "their %ld-th, mask 0x%08x (.sync.aligned: every thread reaches the same "
                         "one)",
                         *seq + 1, c->arrived, sc == Scope::Warp ? "warp" : "warpgroup", c->instr,
                         site_str(c->site), c->seq + 1, c->mask);
        if (sc == Scope::Warp && !(mask >> t->lane & 1))
            violation_at(t->tid, RKVX_RULE_CONVERGENCE, instr, site,
                         "the lane is not in the instruction's mask 0x%08x", mask);
    } else {
        collective_first(sc, mask, instr, site, c, first, slots, *seq, fn);
    }
    c->in[slot] = in;
    c->out[slot] = out;
    ++*seq;
    if (++c->arrived == c->expected) {
        Group g{sc, sc == Scope::Warp ? t->warp : t->warp / 4, mask, first, c->site};
        c->fn(c->in, c->out, g);
        c->arrived = 0;
        for (int i = 0; i < slots; i++)
            if (first + i < B.n && g_st[first + i] == kWaitColl) g_st[first + i] = kRunnable;
        return;
    }
    g_st[t->tid] = kWaitColl;
    t->wait_instr = instr;
    t->wait_site = site;
    block_current();
}

// The first thread of a group to reach a collective: the group's checks,
// the slot set up.
void collective_first(Scope sc, unsigned mask, const char *instr, Site site, Coll *c, int first,
                      int slots, long seq, CollectiveFn fn) {
    Thr *t = g_cur;
    Blk &B = g_blk;
    int expected;
    if (sc == Scope::Warp) {
        const int have = std::min(32, B.n - first);
        const unsigned exist = have >= 32 ? 0xffffffffu : ((1u << have) - 1u);
        if (!(mask >> t->lane & 1))
            violation_at(t->tid, RKVX_RULE_CONVERGENCE, instr, site,
                         "the lane is not in the instruction's mask 0x%08x", mask);
        if (mask & ~exist)
            violation_at(t->tid, RKVX_RULE_CONVERGENCE, instr, site,
                         "the mask 0x%08x names lanes a %d-thread block does not have", mask, B.n);
        if (mask & B.exited[t->warp])
            violation_at(t->tid, RKVX_RULE_EXITED, instr, site,
                         "lanes 0x%08x of the mask have exited", mask & B.exited[t->warp]);
        expected = __builtin_popcount(mask);
    } else {
        const int wg = t->warp / 4;
        if (first + 128 > B.n)
            violation_at(t->tid, RKVX_RULE_CONVERGENCE, instr, site,
                         "warpgroup %d of a %d-thread block is incomplete (a warpgroup is 4 "
                         "whole warps)",
                         wg, B.n);
        for (int w = wg * 4; w < wg * 4 + 4; w++)
            if (B.exited[w])
                violation_at(t->tid, RKVX_RULE_EXITED, instr, site,
                             "lanes 0x%08x of warp %d of the warpgroup have exited", B.exited[w], w);
        expected = 128;
    }
    if (B.bar_arrived)
        for (int i = 0; i < slots; i++) {
            const Thr &o = g_thr[first + i];
            if (first + i < B.n && g_st[first + i] == kWaitBar)
                violation_at(t->tid, RKVX_RULE_CONVERGENCE, instr, site,
                             "%s of its %s waits at __syncthreads (%s)", thread_str(o.tid),
                             sc == Scope::Warp ? "warp" : "warpgroup",
                             site_str(B.bar_site));
        }
    c->instr = instr;
    c->site = site;
    c->mask = mask;
    c->seq = seq;
    c->fn = fn;
    c->expected = expected;
    for (int i = 0; i < slots; i++) c->in[i] = c->out[i] = nullptr;
}

void syncthreads(Site site) {
    Thr *t = g_cur;
    Blk &B = g_blk;
    const Coll &wc = B.warp[t->warp];
    if (wc.arrived)
        violation_at(t->tid, RKVX_RULE_CONVERGENCE, "__syncthreads", site,
                     "%d lanes of its warp wait at %s (%s)", wc.arrived, wc.instr,
                     site_str(wc.site));
    if (t->warp / 4 < 8) {
        const Coll &gc = B.wg[t->warp / 4];
        if (gc.arrived)
            violation_at(t->tid, RKVX_RULE_CONVERGENCE, "__syncthreads", site,
                         "%d threads of its warpgroup wait at %s (%s)", gc.arrived, gc.instr,
                         site_str(gc.site));
    }
    if (B.bar_arrived == 0) {
        B.bar_site = site;
        B.bar_seq = t->bar_seq;
    } else if (B.bar_site.line != site.line || strcmp(B.bar_site.file, site.file) != 0 ||
               B.bar_seq != t->bar_seq) {
        violation_at(t->tid, RKVX_RULE_BARRIER, "__syncthreads", site,
                     "its %ld-th barrier; %d threads wait at %s, their %ld-th (every non-exited "
                     "thread of the block must reach the same one)",
                     t->bar_seq + 1, B.bar_arrived, site_str(B.bar_site), B.bar_seq + 1);
    }
    t->bar_seq++;
    if (++B.bar_arrived == B.n - B.done) {
        release_barrier();
        return;
    }
    g_st[t->tid] = kWaitBar;
    t->wait_instr = "__syncthreads";
    t->wait_site = site;
    block_current();
}

void *shared_static(const void *key, size_t bytes, size_t align, const char *name) {
    Blk &B = g_blk;
    for (const StaticVar &v : B.statics)
        if (v.key == key) return g_arena + v.off;
    const uint32_t off = (uint32_t)((B.static_used + align - 1) / align * align);
    if (off + bytes > kStatic)
        violation(RKVX_RULE_STATIC_SMEM, "__shared__", Site{name, 0},
                  "static shared variable '%s' (%zu bytes) does not fit the executor's %zu-byte "
                  "static region (%u bytes used)",
                  name, bytes, kStatic, B.static_used);
    B.statics.push_back({key, off, (uint32_t)bytes, name});
    B.static_used = off + (uint32_t)bytes;
    RKVX_UNPOISON(g_arena + off, bytes);
    return g_arena + off;
}

void *shared_dynamic(size_t align, const char *name) {
    if (align > kStatic)
        violation(RKVX_RULE_NOT_MODELED, "extern __shared__", Site{name, 0},
                  "an alignment of %zu bytes (the executor aligns the dynamic array to %zu)", align,
                  kStatic);
    return g_arena + kStatic;
}

uint32_t shared_address(const void *p, const char *instr, Site site) {
    const uintptr_t a = (uintptr_t)p - g_arena_lo;
    if (!g_in_kernel || a > kStatic + g_blk.dyn)
        violation(RKVX_RULE_CVTA, instr, site,
                  "%p is not in the block's shared memory (cvta.to.shared of a generic address "
                  "outside the shared window is undefined)",
                  p);
    return (uint32_t)a;
}

void shared_read(uint32_t addr, void *dst, size_t n, int tid, const char *instr, Site site) {
    smem_access(addr, n, tid, false, false, instr, site);
    memcpy(dst, g_arena + addr, n);
}

void global_read(const void *p, void *dst, size_t n, const char *instr, Site site) {
    const Alloc *a = alloc_holding(p, n);
    if (!a || a->kind != kDevice)
        violation(RKVX_RULE_OOB_GLOBAL, instr, site,
                  "the %zu bytes at %p are not inside one device allocation", n, p);
    memcpy(dst, p, n);
}

void atomic_access(void *p, size_t n, const char *instr, Site site) {
    const uintptr_t a = (uintptr_t)p - g_arena_lo;
    if (a < kArena + kArenaGuard) {
        smem_access((uint32_t)a, n, g_cur->tid, true, true, instr, site);
        return;
    }
    const Alloc *al = alloc_holding(p, n);
    if (!al || al->kind != kDevice)
        violation(RKVX_RULE_OOB_GLOBAL, instr, site,
                  "the %zu bytes at %p are neither shared memory nor inside one device allocation",
                  n, p);
}

void cp_async_issue(uint32_t dst, const void *src, const void *data, int size, int src_bytes,
                    const char *instr, Site site) {
    Thr *t = g_cur;
    if (dst % (uint32_t)size)
        violation(RKVX_RULE_CP_ASYNC_ALIGN, instr, site,
                  "the destination %s is not %d-byte aligned", smem_str(dst), size);
    if ((uintptr_t)src % (uintptr_t)size)
        violation(RKVX_RULE_CP_ASYNC_ALIGN, instr, site, "the source %p is not %d-byte aligned",
                  src, size);
    if (!smem_valid(dst, (size_t)size))
        violation(RKVX_RULE_OOB_SHARED, instr, site,
                  "the %d destination bytes at %s are outside the block's shared memory", size,
                  smem_str(dst));
    const uint32_t E = g_blk.epoch;
    if (!g_blk.wg_reads.empty()) check_wg_reads(t->tid, dst, (size_t)size, instr, site);
    for (int i = 0; i < size; i++) {
        const Sh &s = g_sh[dst + i];
        if (s.pend)
            violation(RKVX_RULE_RACE, instr, site,
                      "%s is already the destination of an in-flight cp.async of %s",
                      smem_str(dst + i), thread_str((int)s.pend - 1));
        if (s.w_ep == E && s.w_tid != t->tid)
            race(t->tid, s.w_tid, true, true, dst + i, instr, site, g_sites[s.w_site]);
        if (s.r_ep == E && s.r_tid != t->tid)
            race(t->tid, s.r_tid, false, true, dst + i, instr, site, Site{nullptr, 0});
    }
    for (int i = 0; i < size; i++) g_sh[dst + i].pend = (uint32_t)t->tid + 1;
    CpOp op;
    op.dst = dst;
    op.size = size;
    op.src = src;
    op.src_bytes = src_bytes;
    memcpy(op.data, data, (size_t)size);
    op.site = site;
    t->cp_open.push_back(op);
    memset(g_arena + dst, 0xff, (size_t)size);  // poison: NaN in f32, f16 and bf16
    RKVX_POISON(g_arena + dst, size);
}

void cp_async_commit(Site) {
    Thr *t = g_cur;
    t->cp_groups.push_back(std::move(t->cp_open));
    t->cp_open.clear();
}

void cp_async_wait(int n, Site) {
    Thr *t = g_cur;
    while ((int)t->cp_groups.size() > n) {
        for (CpOp &op : t->cp_groups.front()) complete_cp(*t, op, true);
        t->cp_groups.pop_front();
    }
}

void fence_proxy_async(Site) { g_cur->fence_seq++; }

// wgmma pieces: step 4 (see ptx.cuh)
const float *wgmma_accumulator_input(const float *d, int n) {
    Thr *t = g_cur;
    for (auto it = t->wg_open.rbegin(); it != t->wg_open.rend(); ++it)
        if (it->d == d && it->n == n) return it->res.data();
    for (auto g = t->wg_groups.rbegin(); g != t->wg_groups.rend(); ++g)
        for (auto it = g->rbegin(); it != g->rend(); ++it)
            if (it->d == d && it->n == n) return it->res.data();
    return d;
}

void wgmma_operand_read(uint32_t addr, void *dst, size_t n, const char *instr, Site site) {
    Blk &B = g_blk;
    Thr *t = g_cur;
    const int wg = t->warp / 4;
    (void)wg;
    if (!smem_valid(addr, n))
        violation(RKVX_RULE_WGMMA_DESC, instr, site,
                  "the operand's bytes %s..+%zu are outside the block's shared memory",
                  smem_str(addr), n);
    for (size_t i = 0; i < n; i++) {
        const Sh &s = g_sh[addr + i];
        if (s.pend)
            violation(RKVX_RULE_CP_ASYNC_WAIT, instr, site,
                      "the operand byte %s is the destination of a cp.async of %s that no "
                      "cp.async.wait_group has covered yet",
                      smem_str(addr + (uint32_t)i), thread_str((int)s.pend - 1));
        if (s.w_ep < B.start_epoch) {
            if (kPlainObserved)
                violation(RKVX_RULE_UNINIT_SHARED, instr, site,
                          "the operand byte %s was never written in this block",
                          smem_str(addr + (uint32_t)i));
            continue;  // written by a plain store the executor did not see
        }
        const Thr &w = g_thr[s.w_tid];
        const bool same_wg = w.warp / 4 == wg;
        const uint32_t fenced = same_wg ? w.fence_seq : w.fence_pub;
        if (fenced <= s.gw_fence)
            violation(RKVX_RULE_PROXY_FENCE, instr, site,
                      "the operand byte %s was written by %s at %s through the generic proxy, "
                      "and %s (fence.proxy.async.shared::cta by the writer, then a barrier, "
                      "before the async proxy reads it)",
                      smem_str(addr + (uint32_t)i), thread_str(s.w_tid),
                      site_str(g_sites[s.w_site]),
                      w.fence_seq > s.gw_fence ? "no barrier followed the writer's fence"
                                               : "the writer issued no fence.proxy.async since");
    }
    memcpy(dst, g_arena + addr, n);
}

void wgmma_operand_range(uint32_t lo, uint32_t hi) {
    Blk &B = g_blk;
    const int wg = g_cur->warp / 4;
    B.wg_reads.push_back({lo, hi, B.wg_next_op[wg], wg, 128});
}

void wgmma_issue(float *d, int n, const uint32_t *a, int na, const float *result,
                 const char *instr, Site site) {
    Thr *t = g_cur;
    Blk &B = g_blk;
    const int wg = t->warp / 4;
    if (!t->wg_fenced)
        violation(RKVX_RULE_WGMMA_FENCE, instr, site,
                  "no wgmma.fence before this thread's first wgmma.mma_async (PTX ISA 9.7.15.7.1)");
    WgOp op;
    op.d = d;
    op.n = n;
    op.a = a;
    op.na = na;
    op.op = B.wg_next_op[wg];
    op.wg = wg;
    op.res.assign(result, result + n);
    op.site = site;
    t->wg_open.push_back(std::move(op));
    bool have_d = false, have_a = false;
    for (auto &r : t->live) {
        if (r.first == (uintptr_t)d) have_d = true;
        if (a && r.first == (uintptr_t)a) have_a = true;
    }
    if (!have_d) t->live.push_back({(uintptr_t)d, (uintptr_t)(d + n)});
    if (a && !have_a) t->live.push_back({(uintptr_t)a, (uintptr_t)(a + na)});
    for (int i = 0; i < n; i++) d[i] = __builtin_nanf("");  // poisoned until the wait
    RKVX_POISON(d, sizeof(float) * (size_t)n);
    if (a) RKVX_POISON(a, sizeof(uint32_t) * (size_t)na);
    g_cur_live = true;
    if (++B.wg_issued[wg] == 128) {
        B.wg_issued[wg] = 0;
        B.wg_next_op[wg]++;
    }
}

void wgmma_fence(Site site) {
    struct Nil {
        int x;
    } in{0}, out{0};
    collective(
        Scope::Warpgroup, ~0u, "wgmma.fence.sync.aligned", site, &in, &out,
        [](void *const *, void *const *, const Group &g) {
            for (int i = 0; i < 128; i++) g_thr[g.first_tid + i].wg_fenced = true;
        });
}

void wgmma_commit(Site site) {
    struct Nil {
        int x;
    } in{0}, out{0};
    collective(Scope::Warpgroup, ~0u, "wgmma.commit_group.sync.aligned", site, &in, &out,
               [](void *const *, void *const *, const Group &) {});
    Thr *t = g_cur;
    t->wg_groups.push_back(std::move(t->wg_open));
    t->wg_open.clear();
}

void wgmma_wait(int n, Site site) {
    struct Nil {
        int x;
    } in{0}, out{0};
    collective(Scope::Warpgroup, ~0u, "wgmma.wait_group.sync.aligned", site, &in, &out,
               [](void *const *, void *const *, const Group &) {});
    Thr *t = g_cur;
    while ((int)t->wg_groups.size() > n) {
        for (WgOp &op : t->wg_groups.front()) complete_wg(*t, op);
        t->wg_groups.pop_front();
    }
    g_cur_live = !t->live.empty();
}

// At start-up (KernelName's initialization; one thread, no lock): the name
// after "F = " in kernel_pretty<F>'s "... [with auto F = ns::k<float>]".
const char *register_kernel(const void *func, const char *pretty) {
    std::string s = pretty;
    const size_t at = s.find("F = ");
    if (at != std::string::npos) s = s.substr(at + 4);
    if (!s.empty() && s.back() == ']') s.pop_back();
    auto &names = kernel_names();
    auto it = names.find(func);
    if (it == names.end()) it = names.emplace(func, canonical_name(s)).first;
    return it->second.c_str();
}

void enqueue_launch(Launch *l, cudaStream_t stream) {
    LOCK;
    std::unique_ptr<Launch> own(l);
    if (g_sticky) {
        fail(g_sticky);
        return;
    }
    char msg[1024];
    const unsigned long long threads =
        (unsigned long long)l->block.x * l->block.y * l->block.z;
    if (!l->block.x || !l->block.y || !l->block.z || l->block.x > 1024 || l->block.y > 1024 ||
        l->block.z > 64 || threads > (unsigned long long)kMaxThreads) {
        snprintf(msg, sizeof msg,
                 "rkvx: RULE %s: kernel %s: launch of blocks (%u,%u,%u): %llu threads; the "
                 "device takes at most 1024 threads per block, (1024,1024,64) per dimension",
                 RKVX_RULE_BLOCK_SIZE, l->name, l->block.x, l->block.y, l->block.z, threads);
        note_violation(msg);
        fail(cudaErrorInvalidConfiguration);
        return;
    }
    if (!l->grid.x || !l->grid.y || !l->grid.z || l->grid.x > 0x7fffffffu || l->grid.y > 65535 ||
        l->grid.z > 65535) {
        snprintf(msg, sizeof msg,
                 "rkvx: RULE %s: kernel %s: launch of a (%u,%u,%u) grid; the device takes 1.."
                 "2^31-1 blocks in x, 1..65535 in y and z",
                 RKVX_RULE_GRID_SIZE, l->name, l->grid.x, l->grid.y, l->grid.z);
        note_violation(msg);
        fail(cudaErrorInvalidConfiguration);
        return;
    }
    // The kernel's own __launch_bounds__ (nvcc's .maxntid): a larger block
    // than the function's maxThreadsPerBlock is "too many resources requested
    // for launch" on a GPU, by the CUDA documentation (not yet seen on one).
    if (rkvx_entry_bounds_n >= 0) {
        const Bound *b = bound_of(l->name);
        if (!b && l->bounds_strict) {
            snprintf(msg, sizeof msg,
                     "rkvx: RULE %s: kernel %s: no entry of that name in the launch-bounds table "
                     "(%d PTX entries; %s): a kernel the CUDA build did not compile, or a name "
                     "spelled differently from its demangled PTX entry",
                     RKVX_RULE_LAUNCH_BOUNDS, l->name, rkvx_entry_bounds_n,
                     rkvx_entry_bounds_origin);
            note_violation(msg);
            fail(cudaErrorInvalidDeviceFunction);
            return;
        }
        if (b && threads > b->threads) {
            snprintf(msg, sizeof msg,
                     "rkvx: RULE %s: kernel %s: launch of blocks (%u,%u,%u): %llu threads; its "
                     "__launch_bounds__ allow %u (.maxntid %u, %u, %u of its PTX entry)",
                     RKVX_RULE_LAUNCH_BOUNDS, l->name, l->block.x, l->block.y, l->block.z,
                     threads, b->threads, b->dims[0], b->dims[1], b->dims[2]);
            note_violation(msg);
            fail(cudaErrorLaunchOutOfResources);
            return;
        }
    }
    const KernelAttr &ka = g_attrs[l->func];
    if (l->smem > (size_t)ka.max_dyn) {
        snprintf(msg, sizeof msg,
                 "rkvx: RULE %s: kernel %s: launch with %zu bytes of dynamic shared memory; its "
                 "limit is %d (%s)",
                 RKVX_RULE_SMEM_ATTRIBUTE, l->name, l->smem, ka.max_dyn,
                 ka.max_dyn == (int)kDefaultDyn
                     ? "48 KB unless cudaFuncSetAttribute(cudaFuncAttributeMaxDynamicSharedMemorySize) "
                       "raises it"
                     : "as cudaFuncSetAttribute set it");
        note_violation(msg);
        fail(cudaErrorInvalidValue);
        return;
    }
    if (!stream_known(stream)) {
        fail(cudaErrorInvalidResourceHandle);
        return;
    }
    Op o;
    o.kind = Op::kKernel;
    o.launch = own.release();
    const cudaError_t e = enqueue(stream_of(stream), std::move(o));
    if (e != cudaSuccess) fail(e);
}

}  // namespace rkvx

// =============================================================================================
// The compiler's ThreadSanitizer instrumentation of the kernels' code (GCC's
// -fsanitize=thread ABI, without the TSan runtime): every load and store.
// =============================================================================================
namespace {

// A plain access's place, as a Site's text: one string per code address,
// kept for the program's life, because the shadow of shared memory records
// the writer's Site (site_id compares the pointer) and a later message
// prints it. (From msg_buf's ring, every address shared 16 buffers: a race
// or proxy message named whatever code last reused the buffer, or nothing.)
const char *pc_str(void *pc) {
    static std::map<void *, std::string> known;
    auto it = known.find(pc);
    if (it != known.end()) return it->second.c_str();
    Dl_info info;
    char buf[512];
    if (pc && dladdr(pc, &info) && info.dli_fname)
        snprintf(buf, sizeof buf, "code at %s+0x%lx (addr2line -f -C -e %s 0x%lx)",
                 base_name(info.dli_fname), (unsigned long)((char *)pc - (char *)info.dli_fbase),
                 info.dli_fname, (unsigned long)((char *)pc - (char *)info.dli_fbase));
    else
        snprintf(buf, sizeof buf, "code at %p", pc);
    return known.emplace(pc, buf).first->second.c_str();
}

// `pc`: the hook's return address, the access's place when the hooks are
// called; when they are inlined into the kernels (the Release build's LTO,
// RKVX_HOOKS_INLINED), this function's own return address is.
__attribute__((noinline)) void plain_slow(uintptr_t a, size_t n, bool write, void *pc) {
#if defined(RKVX_HOOKS_INLINED)
    pc = __builtin_return_address(0);
#endif
    g_stats.plain_accesses++;
    const char *instr = write ? "st (a plain store)" : "ld (a plain load)";
    if (a - g_arena_lo < kArena + kArenaGuard) {
        const char *where = pc_str(pc);
        smem_access((uint32_t)(a - g_arena_lo), n, g_cur->tid, write, false, instr,
                    Site{where, 0});
        return;
    }
    if (a - g_stk_lo < g_stk_span) {
        for (const auto &r : g_cur->live)
            if (a < r.second && a + n > r.first) {
                const char *where = pc_str(pc);
                rkvx::violation(RKVX_RULE_WGMMA_WAIT, instr, Site{where, 0},
                                "it %s register %zu of an operand of an in-flight "
                                "wgmma.mma_async; no wgmma.wait_group has covered it yet",
                                write ? "writes" : "reads", (size_t)(a - r.first) / 4);
            }
        return;
    }
    if (a - g_spans_lo < g_spans_hi - g_spans_lo) {
        const Span *s = span_of(a);
        if (s && a >= s->in_lo && a + n <= s->in_hi) {
            g_hit_lo = s->in_lo;
            g_hit_len = s->in_hi - s->in_lo;
        } else if (s) {
            const char *where = pc_str(pc);
            const long long off = a >= s->in_hi ? (long long)(a - s->in_hi) : (long long)(s->in_lo - a);
            rkvx::violation(RKVX_RULE_OOB_GLOBAL, instr, Site{where, 0},
                            "%zu bytes at %p: %lld bytes %s the allocation [%p, +%zu)", n,
                            (void *)a, off, a >= s->in_hi ? "past the end of" : "before",
                            (void *)s->in_lo, (size_t)(s->in_hi - s->in_lo));
        }
    }
}

inline void plain(void *p, size_t n, bool write, void *pc) {
    if (!g_in_kernel) return;
    const uintptr_t a = (uintptr_t)p;
    if (a - g_stk_lo < g_stk_span) {  // the thread's own frame: only in-flight registers matter
        if (g_cur_live) plain_slow(a, n, write, pc);
        return;
    }
    if (a - g_hit_lo < g_hit_len && a + n - g_hit_lo <= g_hit_len) return;  // the same allocation
    if (a - g_arena_lo < kArena + kArenaGuard || a - g_spans_lo < g_spans_hi - g_spans_lo)
        plain_slow(a, n, write, pc);
}

}  // namespace

// (The sanitizer build compiles no kernel with this instrumentation, and its
// compiler declares these names itself: not defined there.)
#if !RKVX_ASAN
extern "C" {
void __tsan_init(void) {}
void __tsan_func_entry(void *) {}
void __tsan_func_exit(void *) {}
void __tsan_vptr_update(void **, void *) {}
void __tsan_vptr_read(void **) {}
#define RKVX_RW(n)                                                                            \
    void __tsan_read##n(void *p) { plain(p, n, false, __builtin_return_address(0)); }         \
    void __tsan_write##n(void *p) { plain(p, n, true, __builtin_return_address(0)); }         \
    void __tsan_unaligned_read##n(void *p) { plain(p, n, false, __builtin_return_address(0)); } \
    void __tsan_unaligned_write##n(void *p) { plain(p, n, true, __builtin_return_address(0)); } \
    void __tsan_volatile_read##n(void *p) { plain(p, n, false, __builtin_return_address(0)); } \
    void __tsan_volatile_write##n(void *p) { plain(p, n, true, __builtin_return_address(0)); }
RKVX_RW(1)
RKVX_RW(2)
RKVX_RW(4)
RKVX_RW(8)
RKVX_RW(16)
#undef RKVX_RW
void __tsan_read_range(void *p, unsigned long n) { plain(p, n, false, __builtin_return_address(0)); }
void __tsan_write_range(void *p, unsigned long n) { plain(p, n, true, __builtin_return_address(0)); }

// Atomic operations of instrumented code (host code of the .cu files, e.g.
// std::mutex's): performed sequentially consistent.
#define RKVX_ATOMIC(n, T)                                                                       \
    T __tsan_atomic##n##_load(const volatile T *a, int) { return __atomic_load_n(a, __ATOMIC_SEQ_CST); } \
    void __tsan_atomic##n##_store(volatile T *a, T v, int) { __atomic_store_n(a, v, __ATOMIC_SEQ_CST); } \
    T __tsan_atomic##n##_exchange(volatile T *a, T v, int) { return __atomic_exchange_n(a, v, __ATOMIC_SEQ_CST); } \
    T __tsan_atomic##n##_fetch_add(volatile T *a, T v, int) { return __atomic_fetch_add(a, v, __ATOMIC_SEQ_CST); } \
    T __tsan_atomic##n##_fetch_sub(volatile T *a, T v, int) { return __atomic_fetch_sub(a, v, __ATOMIC_SEQ_CST); } \
    T __tsan_atomic##n##_fetch_and(volatile T *a, T v, int) { return __atomic_fetch_and(a, v, __ATOMIC_SEQ_CST); } \
    T __tsan_atomic##n##_fetch_or(volatile T *a, T v, int) { return __atomic_fetch_or(a, v, __ATOMIC_SEQ_CST); } \
    T __tsan_atomic##n##_fetch_xor(volatile T *a, T v, int) { return __atomic_fetch_xor(a, v, __ATOMIC_SEQ_CST); } \
    T __tsan_atomic##n##_fetch_nand(volatile T *a, T v, int) { return __atomic_fetch_nand(a, v, __ATOMIC_SEQ_CST); } \
    int __tsan_atomic##n##_compare_exchange_strong(volatile T *a, T *c, T v, int, int) {        \
        return __atomic_compare_exchange_n(a, c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST); \
    }                                                                                           \
    int __tsan_atomic##n##_compare_exchange_weak(volatile T *a, T *c, T v, int, int) {          \
        return __atomic_compare_exchange_n(a, c, v, true, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);  \
    }                                                                                           \
    T __tsan_atomic##n##_compare_exchange_val(volatile T *a, T c, T v, int, int) {              \
        __atomic_compare_exchange_n(a, &c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);       \
        return c;                                                                               \
    }
RKVX_ATOMIC(8, uint8_t)
RKVX_ATOMIC(16, uint16_t)
RKVX_ATOMIC(32, uint32_t)
RKVX_ATOMIC(64, uint64_t)
#undef RKVX_ATOMIC
void __tsan_atomic_thread_fence(int) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
void __tsan_atomic_signal_fence(int) { __atomic_signal_fence(__ATOMIC_SEQ_CST); }
}
#endif

// =============================================================================================
// The runtime API
// =============================================================================================
extern "C" {

cudaError_t cudaGetDeviceCount(int *count) {
    if (!count) return fail(cudaErrorInvalidValue);
    *count = 1;
    return cudaSuccess;
}
cudaError_t cudaSetDevice(int device) {
    if (device != 0) return fail(cudaErrorInvalidDevice);
    g_device = device;
    return cudaSuccess;
}
cudaError_t cudaGetDevice(int *device) {
    if (!device) return fail(cudaErrorInvalidValue);
    *device = g_device;
    return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *p, int device) {
    if (!p) return fail(cudaErrorInvalidValue);
    if (device != 0) return fail(cudaErrorInvalidDevice);
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "NVIDIA H200 (ringkv CPU executor, not a GPU)");
    p->totalGlobalMem = (size_t)143771 << 20;
    p->sharedMemPerBlock = kDefaultDyn;
    p->regsPerBlock = 65536;
    p->warpSize = 32;
    p->maxThreadsPerBlock = kMaxThreads;
    p->maxThreadsDim[0] = 1024;
    p->maxThreadsDim[1] = 1024;
    p->maxThreadsDim[2] = 64;
    p->maxGridSize[0] = 0x7fffffff;
    p->maxGridSize[1] = 65535;
    p->maxGridSize[2] = 65535;
    p->clockRate = 1980000;
    p->major = 9;
    p->minor = 0;
    p->multiProcessorCount = 132;
    p->l2CacheSize = 60 << 20;
    p->maxThreadsPerMultiProcessor = 2048;
    p->sharedMemPerMultiprocessor = 233472;
    p->sharedMemPerBlockOptin = kOptin;
    return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize(void) {
    LOCK;
    if (capture_forbids("cudaDeviceSynchronize")) return fail(cudaErrorStreamCaptureUnsupported);
    g_stats.host_syncs++;
    run_all();
    return fail(g_sticky);
}
cudaError_t cudaGetLastError(void) {
    if (g_sticky) return g_sticky;
    const cudaError_t e = t_last;
    t_last = cudaSuccess;
    return e;
}
cudaError_t cudaPeekAtLastError(void) { return g_sticky ? g_sticky : t_last; }
const char *cudaGetErrorName(cudaError_t e) { return error_name(e); }
const char *cudaGetErrorString(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorLaunchFailure:
        return "unspecified launch failure (the CPU executor stopped a kernel that broke a rule; "
               "its message is on stderr)";
    case cudaErrorStreamCaptureUnsupported: return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated:
        return "operation failed due to a previous error during capture";
    case cudaErrorStreamCaptureImplicit:
        return "operation would make the legacy stream depend on a capturing blocking stream";
    default: return error_name(e);
    }
}

}  // extern "C"

namespace {
cudaError_t alloc_api(void **ptr, size_t size, AllocKind kind, const char *what) {
    LOCK;
    if (g_sticky) return fail(g_sticky);
    if (capture_forbids(what)) return fail(cudaErrorStreamCaptureUnsupported);
    return fail(alloc_make(ptr, size, kind));
}
cudaError_t free_api(void *ptr, AllocKind kind, const char *what) {
    LOCK;
    if (capture_forbids(what)) return fail(cudaErrorStreamCaptureUnsupported);
    run_all();  // freeing waits for the device
    return fail(alloc_free(ptr, kind));
}
}  // namespace

extern "C" {

cudaError_t cudaMalloc(void **ptr, size_t size) { return alloc_api(ptr, size, kDevice, "cudaMalloc"); }
cudaError_t cudaFree(void *ptr) { return free_api(ptr, kDevice, "cudaFree"); }
cudaError_t cudaMallocHost(void **ptr, size_t size) {
    return alloc_api(ptr, size, kPinned, "cudaMallocHost");
}
cudaError_t cudaFreeHost(void *ptr) { return free_api(ptr, kPinned, "cudaFreeHost"); }

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind,
                            cudaStream_t stream) {
    LOCK;
    if (g_sticky) return fail(g_sticky);
    if (!stream_known(stream)) return fail(cudaErrorInvalidResourceHandle);
    if (!n) return cudaSuccess;
    if (!dst || !src) return fail(cudaErrorInvalidValue);
    cudaError_t e = copy_check(dst, src, n, kind);
    if (e != cudaSuccess) return fail(e);
    CUstream_st *s = stream_of(stream);
    const bool pageable_src = (kind == cudaMemcpyHostToDevice || kind == cudaMemcpyHostToHost) &&
                              !is_pinned(src, n);
    const bool pageable_dst = (kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyHostToHost) &&
                              !is_pinned(dst, n);
    if (s->capturing && (pageable_src || pageable_dst)) {
        if (!s->invalidated)
            fprintf(stderr, "rkvx: capture rule: cudaMemcpyAsync of %zu bytes %s pageable host "
                            "memory into a graph (the capture is invalidated)\n",
                    n, pageable_src ? "from" : "to");
        s->invalidated = true;
        return fail(cudaErrorStreamCaptureUnsupported);
    }
    Op o;
    o.kind = Op::kCopy;
    o.dst = dst;
    o.src = src;
    o.n = n;
    if (pageable_src) {  // the runtime takes pageable bytes before it returns
        run_until(s, g_seq);
        o.snap.assign((const unsigned char *)src, (const unsigned char *)src + n);
        o.use_snap = true;
    }
    if ((e = enqueue(s, std::move(o))) != cudaSuccess) return fail(e);
    if (pageable_dst) {  // ... and returns after a copy to pageable memory
        run_until(s, g_seq);
        g_stats.host_syncs++;
    }
    return fail(g_sticky);
}
cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind) {
    LOCK;
    if (capture_forbids("cudaMemcpy (a synchronous copy on the legacy stream)"))
        return fail(cudaErrorStreamCaptureImplicit);
    const long long syncs = g_stats.host_syncs;
    cudaError_t e = cudaMemcpyAsync(dst, src, n, kind, nullptr);
    if (e != cudaSuccess) return e;
    run_until(&g_legacy_stream, g_seq);
    g_stats.host_syncs = syncs + 1;  // one wait, whatever the async half counted
    return fail(g_sticky);
}
cudaError_t cudaMemsetAsync(void *ptr, int value, size_t n, cudaStream_t stream) {
    LOCK;
    if (g_sticky) return fail(g_sticky);
    if (!stream_known(stream)) return fail(cudaErrorInvalidResourceHandle);
    if (!n) return cudaSuccess;
    if (!is_device(ptr, n)) {
        fprintf(stderr, "rkvx: cudaMemset of %zu bytes at %p: not inside one device allocation\n",
                n, ptr);
        return fail(cudaErrorInvalidValue);
    }
    Op o;
    o.kind = Op::kSet;
    o.dst = ptr;
    o.n = n;
    o.value = value;
    return fail(enqueue(stream_of(stream), std::move(o)));
}
cudaError_t cudaMemset(void *ptr, int value, size_t n) {
    LOCK;
    if (capture_forbids("cudaMemset (on the legacy stream)"))
        return fail(cudaErrorStreamCaptureImplicit);
    return cudaMemsetAsync(ptr, value, n, nullptr);
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *stream, unsigned int flags) {
    LOCK;
    if (!stream) return fail(cudaErrorInvalidValue);
    CUstream_st *s = new CUstream_st;
    s->flags = flags;
    g_streams.push_back(s);
    *stream = s;
    return cudaSuccess;
}
cudaError_t cudaStreamCreate(cudaStream_t *stream) {
    return cudaStreamCreateWithFlags(stream, cudaStreamDefault);
}
cudaError_t cudaStreamDestroy(cudaStream_t stream) {
    LOCK;
    if (!stream || !stream_known(stream)) return fail(cudaErrorInvalidResourceHandle);
    run_until(stream, g_seq);  // its work completes first
    g_streams.erase(std::find(g_streams.begin(), g_streams.end(), stream));
    if (stream->graph) {
        for (Op &o : stream->graph->ops) drop_op(o);
        delete stream->graph;
    }
    delete stream;
    return cudaSuccess;
}
static cudaError_t stream_wait(cudaStream_t stream);
cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
    LOCK;
    g_stats.host_syncs++;
    return stream_wait(stream);
}
cudaError_t cudaStreamQuery(cudaStream_t stream) {
    LOCK;
    return stream_wait(stream);
}
static cudaError_t stream_wait(cudaStream_t stream) {
    if (!stream_known(stream)) return fail(cudaErrorInvalidResourceHandle);
    CUstream_st *s = stream_of(stream);
    if (s->capturing) {
        if (!s->invalidated)
            fprintf(stderr, "rkvx: capture rule: cudaStreamSynchronize of the stream being "
                            "captured (the capture is invalidated)\n");
        s->invalidated = true;
        return fail(cudaErrorStreamCaptureUnsupported);
    }
    if (s->legacy && capture_forbids("cudaStreamSynchronize of the legacy stream"))
        return fail(cudaErrorStreamCaptureImplicit);
    run_until(s, g_seq);
    return fail(g_sticky);
}
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int) {
    LOCK;
    if (!stream_known(stream) || !event) return fail(cudaErrorInvalidResourceHandle);
    // later work of `stream` after the event's: run up to the event now
    if (event->recorded && !event->done && event->stream) run_until(event->stream, event->seq);
    return fail(g_sticky);
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags) {
    if (!event) return fail(cudaErrorInvalidValue);
    CUevent_st *e = new CUevent_st;
    e->flags = flags;
    *event = e;
    return cudaSuccess;
}
cudaError_t cudaEventCreate(cudaEvent_t *event) {
    return cudaEventCreateWithFlags(event, cudaEventDefault);
}
cudaError_t cudaEventDestroy(cudaEvent_t event) {
    LOCK;
    if (!event) return fail(cudaErrorInvalidResourceHandle);
    if (event->recorded && !event->done && event->stream) run_until(event->stream, event->seq);
    delete event;
    return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
    LOCK;
    if (!event || !stream_known(stream)) return fail(cudaErrorInvalidResourceHandle);
    Op o;
    o.kind = Op::kRecord;
    o.event = event;
    return fail(enqueue(stream_of(stream), std::move(o)));
}
static cudaError_t event_wait(cudaEvent_t event);
cudaError_t cudaEventSynchronize(cudaEvent_t event) {
    LOCK;
    g_stats.host_syncs++;
    return event_wait(event);
}
cudaError_t cudaEventQuery(cudaEvent_t event) {
    LOCK;
    return event_wait(event);
}
static cudaError_t event_wait(cudaEvent_t event) {
    if (!event) return fail(cudaErrorInvalidResourceHandle);
    if (event->recorded && !event->done) {
        if (event->stream && event->stream->capturing) return fail(cudaErrorStreamCaptureUnsupported);
        run_until(event->stream, event->seq);
    }
    return fail(g_sticky);
}
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end) {
    LOCK;
    if (!ms || !start || !end) return fail(cudaErrorInvalidValue);
    if ((start->flags | end->flags) & cudaEventDisableTiming)
        return fail(cudaErrorInvalidResourceHandle);
    if (!start->done || !end->done) return fail(cudaErrorNotReady);
    *ms = (float)((end->t - start->t) * 1e3);
    return cudaSuccess;
}

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, enum cudaStreamCaptureMode mode) {
    LOCK;
    if (!stream) return fail(cudaErrorStreamCaptureUnsupported);  // not the legacy stream
    if (!stream_known(stream)) return fail(cudaErrorInvalidResourceHandle);
    if (stream->capturing) return fail(cudaErrorIllegalState);
    stream->capturing = true;
    stream->invalidated = false;
    stream->mode = mode;
    stream->capture_thread = std::this_thread::get_id();
    stream->graph = new CUgraph_st;
    return cudaSuccess;
}
cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t *graph) {
    LOCK;
    if (!graph) return fail(cudaErrorInvalidValue);
    if (!stream || !stream_known(stream) || !stream->capturing) return fail(cudaErrorIllegalState);
    stream->capturing = false;
    CUgraph_st *g = stream->graph;
    stream->graph = nullptr;
    if (stream->invalidated) {
        for (Op &o : g->ops) drop_op(o);
        delete g;
        *graph = nullptr;
        return fail(cudaErrorStreamCaptureInvalidated);
    }
    *graph = g;
    return cudaSuccess;
}
cudaError_t cudaStreamIsCapturing(cudaStream_t stream, enum cudaStreamCaptureStatus *status) {
    LOCK;
    if (!status) return fail(cudaErrorInvalidValue);
    if (!stream_known(stream)) return fail(cudaErrorInvalidResourceHandle);
    const CUstream_st *s = stream_of(stream);
    *status = !s->capturing     ? cudaStreamCaptureStatusNone
              : s->invalidated ? cudaStreamCaptureStatusInvalidated
                               : cudaStreamCaptureStatusActive;
    return cudaSuccess;
}
cudaError_t cudaGraphInstantiate(cudaGraphExec_t *exec, cudaGraph_t graph, unsigned long long) {
    LOCK;
    if (!exec || !graph) return fail(cudaErrorInvalidValue);
    CUgraphExec_st *x = new CUgraphExec_st;
    for (const Op &o : graph->ops) x->ops.push_back(clone_op(o));
    *exec = x;
    return cudaSuccess;
}
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
    LOCK;
    if (!exec || !stream_known(stream)) return fail(cudaErrorInvalidResourceHandle);
    if (g_sticky) return fail(g_sticky);
    CUstream_st *s = stream_of(stream);
    for (const Op &o : exec->ops) {
        const cudaError_t e = enqueue(s, clone_op(o));
        if (e != cudaSuccess) return fail(e);
    }
    return cudaSuccess;
}
cudaError_t cudaGraphGetNodes(cudaGraph_t graph, cudaGraphNode_t *nodes, size_t *num_nodes) {
    LOCK;
    if (!graph || !num_nodes) return fail(cudaErrorInvalidValue);
    if (nodes)
        for (size_t i = 0; i < *num_nodes && i < graph->ops.size(); i++)
            nodes[i] = reinterpret_cast<cudaGraphNode_t>(i + 1);
    else
        *num_nodes = graph->ops.size();
    return cudaSuccess;
}
cudaError_t cudaGraphDestroy(cudaGraph_t graph) { return destroy_graph(graph); }
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) { return destroy_graph(exec); }

cudaError_t cudaFuncGetAttributes(struct cudaFuncAttributes *attr, const void *func) {
    LOCK;
    if (!attr || !func) return fail(cudaErrorInvalidDeviceFunction);
    memset(attr, 0, sizeof *attr);
    attr->sharedSizeBytes = kStatic;
    // the kernel's __launch_bounds__ where the table has it, as the device
    // answers (64 registers x 1,024 threads fit the register file)
    const Bound *b = bound_of(kernel_name_of(func));
    attr->maxThreadsPerBlock = b ? (int)b->threads : kMaxThreads;
    attr->numRegs = kNumRegs;
    attr->ptxVersion = 90;
    attr->binaryVersion = 90;
    attr->maxDynamicSharedSizeBytes = g_attrs[func].max_dyn;
    return cudaSuccess;
}
cudaError_t cudaFuncSetAttribute(const void *func, enum cudaFuncAttribute attr, int value) {
    LOCK;
    if (!func) return fail(cudaErrorInvalidDeviceFunction);
    if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize) return cudaSuccess;
    if (value < 0 || (size_t)value + kStatic > kOptin) {
        char msg[1024];
        const char *name = kernel_name_of(func);
        snprintf(msg, sizeof msg,
                 "rkvx: RULE %s: kernel %s: cudaFuncSetAttribute(MaxDynamicSharedMemorySize, "
                 "%d): static (%zu) + dynamic shared memory over the device's %zu bytes per "
                 "block",
                 RKVX_RULE_SMEM_LIMIT, name ? name : "(a function no launch names)", value,
                 kStatic, kOptin);
        note_violation(msg);
        return fail(cudaErrorInvalidValue);
    }
    g_attrs[func].max_dyn = value;
    return cudaSuccess;
}

// ---- the test interface ------------------------------------------------------------------------
int rkvx_launch_bounds_entries(const char **origin) {
    if (origin) *origin = rkvx_entry_bounds_origin;
    return rkvx_entry_bounds_n;
}
int rkvx_violations(void) { return g_violations; }
const char *rkvx_last_violation(void) { return g_last_violation.c_str(); }
void rkvx_reset(void) {
    LOCK;
    g_sticky = cudaSuccess;
    t_last = cudaSuccess;
    g_violations = 0;
    g_last_violation.clear();
}
void rkvx_get_stats(rkvx_stats *out) {
    if (out) *out = g_stats;
}

}  // extern "C"

namespace {
#if RKVX_ASAN
// An ASan report from a kernel names the simulated thread it ran as.
void asan_report(const char *) {
    if (g_in_kernel && g_launch && g_cur)
        fprintf(stderr, "rkvx: the AddressSanitizer report is of kernel %s block (%u,%u,%u) %s\n",
                g_launch->name, g_blk.block_idx.x, g_blk.block_idx.y, g_blk.block_idx.z,
                thread_str(g_cur->tid));
}
#endif
struct LegacyInit {
    LegacyInit() {
        g_legacy_stream.legacy = true;
#if RKVX_ASAN
        __asan_set_error_report_callback(asan_report);
#endif
    }
} g_legacy_init;
}  // namespace

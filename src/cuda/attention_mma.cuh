// The tensor-core ring attention (FlashAttention-2 style, mma.sync):
//
//   grid (m_tiles * splits, H, B); block WARPS warps; each warp owns MT
//   m16 tiles of query rows. A block takes BM = 16*MT*WARPS consecutive rows
//   of the query matrix of one (row b, KV head): q[b][kvh*group ..][Tq][D]
//   is contiguous, [group*Tq][D], so the GQA group's query heads share every
//   K/V tile the block loads.
//
//   Prologue: every block checks all B rows (session, clock) on the device,
//   then warp 0 builds the row's list of visible frames in shared memory
//   from the written bits and the clock (SEMANTICS 4: ring frames ascending,
//   the ring slot ceil(f/PD) mod RB hidden on write steps, the scratch last).
//   Invisible frames are never loaded.
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
// The Hopper path (sm_90a, D 64) is attention_wgmma.cuh: the same frame list,
// visibility rule, tiles, softmax and split/combine, with the products on
// wgmma.mma_async. TODO(wgmma) there: K/V by TMA (cp.async.bulk.tensor on
// mbarriers), a producer warp and consumer warpgroups (setmaxnreg), and the
// softmax of one tile overlapped with the next tile's Q K^T (FlashAttention-3
// ping-pong), once the plain version has passed the GPU check.
#ifndef RKV_CUDA_ATTENTION_MMA_CUH
#define RKV_CUDA_ATTENTION_MMA_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "attention.cuh"

namespace rkv_mma {

// ---- PTX wrappers -------------------------------------------------------------

__device__ __forceinline__ uint32_t smem_addr(const void *p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes global -> shared, bypassing L1; src_bytes 0 fills zeros.
__device__ __forceinline__ void cp_async16(void *dst, const void *src, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)),
                 "l"(src), "r"(src_bytes)
                 : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t r[4], const void *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t r[4], const void *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}

__device__ __forceinline__ float ex2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

template <typename T>
struct Ops;

template <>
struct Ops<__nv_bfloat16> {
    static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
        __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
        return *reinterpret_cast<uint32_t *>(&v);
    }
    // c += a * b (16x16 row-major A, 16x8 col-major B, f32 accumulators)
    static __device__ __forceinline__ void mma(float c[4], const uint32_t a[4], uint32_t b0,
                                               uint32_t b1) {
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
            "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
};

template <>
struct Ops<__half> {
    static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
        __half2 v = __floats2half2_rn(lo, hi);
        return *reinterpret_cast<uint32_t *>(&v);
    }
    static __device__ __forceinline__ void mma(float c[4], const uint32_t a[4], uint32_t b0,
                                               uint32_t b1) {
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
            "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
};

// Element offset of 16-byte chunk `chunk` of row `row` in a swizzled tile
// with D elements per row (D/8 >= 8 chunks): chunk ^ (row mod 8).
template <int D>
__device__ __forceinline__ int swz(int row, int chunk) {
    return row * D + ((chunk ^ (row & 7)) << 3);
}

// ---- pieces shared with the Hopper kernel (attention_wgmma.cuh) -------------------

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
        cp_async16(dst + swz<D>(r, ch), src + (in ? r * D + ch * 8 : 0), in ? 16 : 0);
    }
}

// The key tiles one block walks: the visible frames of its row (the list
// built by build_frame_list, `nframes` long) cut into tiles of BN keys that
// never straddle a frame, split `p.splits` ways (this block: split `split`);
// load(i, ...) brings the block's i-th tile of K and V (session `sess`, KV
// head `kvh`) into swizzled shared-memory tiles by cp.async.
template <typename T, int D, int BN, int THREADS>
struct KeyTiles {
    const int *list;
    int64_t tpf, t0, frame_tokens;
    int nt;  // tiles of this block
    const T *kbase, *vbase;

    __device__ __forceinline__ KeyTiles(const RkvMmaParams &p, int64_t sess, int64_t kvh,
                                        int split, const int *frame_list, int nframes)
        : list(frame_list), tpf(p.T / BN), frame_tokens(p.T) {
        const int64_t nt_all = (int64_t)nframes * tpf;
        t0 = nt_all * split / p.splits;
        nt = (int)(nt_all * (split + 1) / p.splits - t0);
        const T *kvb = static_cast<const T *>(p.kv);
        kbase = kvb + (kvh * p.N + sess * p.C) * (int64_t)D;
        vbase = kvb + ((p.H + kvh) * p.N + sess * p.C) * (int64_t)D;
    }

    __device__ __forceinline__ void load(int i, T *ks, T *vs, int tid) const {
        const int64_t ti = t0 + i;
        const int64_t slot = list[ti / tpf] * frame_tokens + (ti % tpf) * BN;  // in the span
        load_tile_async<T, D, BN, THREADS>(ks, kbase + slot * D, BN, tid);
        load_tile_async<T, D, BN, THREADS>(vs, vbase + slot * D, BN, tid);
    }
};

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
        const unsigned m = __ballot_sync(0xffffffffu, vis);
        if (vis) list[n + __popc(m & ((1u << lane) - 1u))] = (int)r;
        n += __popc(m);
    }
    if (lane == 0) {
        list[n] = (int)p.RF;
        *n_frames = n + 1;
    }
}

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
    mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
    mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
    mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
    mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
    // m0/m1 start at RKV__SOFTMAX_M0 (-FLT_MAX), so mn0/mn1 are finite even
    // where every score so far is -inf: no -inf - -inf = NaN here (see
    // attention.cuh).
    const float mn0 = fmaxf(m0, mx0), mn1 = fmaxf(m1, mx1);
    const float c0 = ex2(m0 - mn0), c1 = ex2(m1 - mn1);
    m0 = mn0;
    m1 = mn1;
    float ls0 = 0.f, ls1 = 0.f;
#pragma unroll
    for (int n8 = 0; n8 < NT; n8++) {
        const float p0 = ex2(s[n8 * 4 + 0] - mn0), p1 = ex2(s[n8 * 4 + 1] - mn0);
        const float p2 = ex2(s[n8 * 4 + 2] - mn1), p3 = ex2(s[n8 * 4 + 3] - mn1);
        ls0 += p0 + p1;
        ls1 += p2 + p3;
        pa[n8 / 2][(n8 & 1) * 2 + 0] = Ops<T>::pack(p0, p1);
        pa[n8 / 2][(n8 & 1) * 2 + 1] = Ops<T>::pack(p2, p3);
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
    l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
    l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
    const int64_t rb = ra + 8;
    const bool ina = ra < p.M, inb = rb < p.M;
    const int64_t ga = qrow0 + ra, gb = qrow0 + rb;  // global rows
    if (p.splits == 1) {
        const float i0 = l0 > 0.f ? 1.f / l0 : 0.f, i1 = l1 > 0.f ? 1.f / l1 : 0.f;
#pragma unroll
        for (int dn = 0; dn < DT; dn++) {
            const int col = dn * 8 + 2 * t4;
            const float *od = o + dn * 4;
            if (OUT_F32) {
                float *out = static_cast<float *>(p.out);
                if (ina)
                    *reinterpret_cast<float2 *>(out + ga * D + col) =
                        make_float2(od[0] * i0, od[1] * i0);
                if (inb)
                    *reinterpret_cast<float2 *>(out + gb * D + col) =
                        make_float2(od[2] * i1, od[3] * i1);
            } else {
                T *out = static_cast<T *>(p.out);
                if (ina)
                    *reinterpret_cast<uint32_t *>(out + ga * D + col) =
                        Ops<T>::pack(od[0] * i0, od[1] * i0);
                if (inb)
                    *reinterpret_cast<uint32_t *>(out + gb * D + col) =
                        Ops<T>::pack(od[2] * i1, od[3] * i1);
            }
        }
    } else {
        float *wo = p.ws_o + (int64_t)split * p.total_rows * D;
        float *wml = p.ws_ml + (int64_t)split * p.total_rows * 2;
#pragma unroll
        for (int dn = 0; dn < DT; dn++) {
            const int col = dn * 8 + 2 * t4;
            const float *od = o + dn * 4;
            if (ina) *reinterpret_cast<float2 *>(wo + ga * D + col) = make_float2(od[0], od[1]);
            if (inb) *reinterpret_cast<float2 *>(wo + gb * D + col) = make_float2(od[2], od[3]);
        }
        if (t4 == 0) {
            if (ina) *reinterpret_cast<float2 *>(wml + ga * 2) = make_float2(m0, l0);
            if (inb) *reinterpret_cast<float2 *>(wml + gb * 2) = make_float2(m1, l1);
        }
    }
}

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
    static_assert((BN * CPR) % THREADS == 0 && (BM * CPR) % THREADS == 0, "tile loads");

    extern __shared__ __align__(128) unsigned char smem_raw[];
    T *sQ = reinterpret_cast<T *>(smem_raw);
    T *sK = sQ + BM * D;
    T *sV = sK + STAGES * BN * D;
    int *sList = reinterpret_cast<int *>(sV + STAGES * BN * D);
    __shared__ int sNf;

    // 1. Device checks of every row (the staging aliases the K stages).
    int64_t *sSess = reinterpret_cast<int64_t *>(sK), *sFp = sSess + p.batch;
    if (!rkv__d_validate_rows(p.sess, p.fp, p.batch, p.S, sSess, sFp, p.err, RKV__OP_ATTEND))
        return;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int b = blockIdx.z, kvh = blockIdx.y;
    const int mtile = (int)(blockIdx.x % p.m_tiles), split = (int)(blockIdx.x / p.m_tiles);
    const int64_t sess = sSess[b], f = sFp[b];

    // 2. Q tile (rows past M zero-filled) in flight while the frame list is
    // built (sQ does not alias the row staging).
    const int64_t qrow0 = ((int64_t)b * p.Hq + (int64_t)kvh * p.group) * p.Tq;  // global row
    const int64_t row0 = (int64_t)mtile * BM;                                    // within M
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

    // 4. The first STAGES-1 key tiles (the Q tile's group is already in flight).
#pragma unroll
    for (int i = 0; i < STAGES - 1; i++) {
        if (i < nt) load_tile(i, i);
        cp_async_commit();
    }
    cp_async_wait<STAGES - 1>();  // Q landed (tiles may still be in flight)
    __syncthreads();

    uint32_t qf[MT][KS][4];
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int kk = 0; kk < KS; kk++) {
            const int r = (warp * MT + mt) * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
            ldmatrix_x4(qf[mt][kk], sQ + swz<D>(r, kk * 2 + (lane >> 4)));
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
    for (int i = 0; i < nt; i++) {
        cp_async_wait<STAGES - 2>();
        __syncthreads();  // tile i visible to all; tile i-1's stage is free
        if (i + STAGES - 1 < nt) load_tile(i + STAGES - 1, (i + STAGES - 1) % STAGES);
        cp_async_commit();

        const T *ks = sK + (i % STAGES) * BN * D;
        const T *vs = sV + (i % STAGES) * BN * D;

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
                ldmatrix_x4(kb, ks + swz<D>(key, kk * 2 + ((lane >> 3) & 1)));
#pragma unroll
                for (int mt = 0; mt < MT; mt++) {
                    Ops<T>::mma(s[mt][2 * np], qf[mt][kk], kb[0], kb[1]);
                    Ops<T>::mma(s[mt][2 * np + 1], qf[mt][kk], kb[2], kb[3]);
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
                ldmatrix_x4_trans(vb, vs + swz<D>(key, dp * 2 + (lane >> 4)));
#pragma unroll
                for (int mt = 0; mt < MT; mt++) {
                    Ops<T>::mma(o[mt][2 * dp], pa[mt][kk], vb[0], vb[1]);
                    Ops<T>::mma(o[mt][2 * dp + 1], pa[mt][kk], vb[2], vb[3]);
                }
            }
    }
    cp_async_wait<0>();  // nothing may be left in flight at exit

    // 6. Epilogue.
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
        store_m16<T, D, OUT_F32>(p, &o[mt][0][0], mrow[mt][0], mrow[mt][1], lrow[mt][0],
                                 lrow[mt][1], row0 + (warp * MT + mt) * 16 + (lane >> 2), qrow0,
                                 split, lane);
}

// Host side: the instantiations a dtype file provides.
template <typename T, int D, int MT, int STAGES, bool OUT_F32>
inline void launch_one(const rkv__cuda_attn_plan *plan, const RkvMmaParams &p, cudaStream_t st) {
    const dim3 grid((unsigned)plan->grid_x, (unsigned)plan->grid_y, (unsigned)plan->grid_z);
    ring_attention_mma<T, D, MT, RKV__MMA_WARPS, RKV__MMA_BN, STAGES, OUT_F32>
        <<<grid, RKV__MMA_WARPS * 32, plan->smem_bytes, st>>>(p);
}

template <typename T, int D, int MT, int STAGES>
inline void launch_out(const rkv__cuda_attn_plan *plan, const RkvMmaParams &p, cudaStream_t st) {
    if (plan->out_f32)
        launch_one<T, D, MT, STAGES, true>(plan, p, st);
    else
        launch_one<T, D, MT, STAGES, false>(plan, p, st);
}

template <typename T>
inline void launch(const rkv__cuda_attn_plan *plan, const RkvMmaParams &p, cudaStream_t st) {
    if (plan->d_head == 64) {
        if (plan->stages == 3)
            launch_out<T, 64, RKV__MMA_D64_MT, 3>(plan, p, st);
        else
            launch_out<T, 64, RKV__MMA_D64_MT, 2>(plan, p, st);
    } else {
        launch_out<T, 128, RKV__MMA_D128_MT, 2>(plan, p, st);
    }
}

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

template <typename T, int D, int MT, int STAGES, bool OUT_F32>
inline cudaError_t prepare_one(size_t smem_optin) {
    return allow_dynamic_smem(
        ring_attention_mma<T, D, MT, RKV__MMA_WARPS, RKV__MMA_BN, STAGES, OUT_F32>, smem_optin);
}

template <typename T>
inline cudaError_t prepare(size_t smem_optin) {
    cudaError_t e;
    if ((e = prepare_one<T, 64, RKV__MMA_D64_MT, 2, false>(smem_optin)) != cudaSuccess ||
        (e = prepare_one<T, 64, RKV__MMA_D64_MT, 2, true>(smem_optin)) != cudaSuccess ||
        (e = prepare_one<T, 64, RKV__MMA_D64_MT, 3, false>(smem_optin)) != cudaSuccess ||
        (e = prepare_one<T, 64, RKV__MMA_D64_MT, 3, true>(smem_optin)) != cudaSuccess ||
        (e = prepare_one<T, 128, RKV__MMA_D128_MT, 2, false>(smem_optin)) != cudaSuccess ||
        (e = prepare_one<T, 128, RKV__MMA_D128_MT, 2, true>(smem_optin)) != cudaSuccess)
        return e;
    return cudaSuccess;
}

}  // namespace rkv_mma

#endif

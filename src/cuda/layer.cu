// One layer's ring in device memory: creation, copies, reset, the fused
// upsert (SEMANTICS 2, 3) and the device-side clock advance.
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.cuh"
extern "C" {
#include "../internal.h"  // rkv__span_piece: the core's span check
}

namespace {

constexpr int kThreads = RKV__UPSERT_THREADS;
constexpr int kVpt = RKV__UPSERT_VECS_PER_THREAD;
constexpr int kVpb = RKV__UPSERT_VECS_PER_BLOCK;

__device__ __forceinline__ uint4 ones16() {
    return make_uint4(0x01010101u, 0x01010101u, 0x01010101u, 0x01010101u);
}

struct UpsertParams {
    const uint4 *src;        // input [2H*B][row_vecs] vectors
    uint4 *dst;              // storage as 16-byte vectors
    uint8_t *written;        // [N]
    uint8_t *visible;        // [N] or nullptr (B == 1)
    const int64_t *sess;     // [B]
    const int64_t *fp;       // [B]
    int *err;
    int op;                  // RKV__OP_UPSERT, or RKV__OP_ROW: the row alone
    int batch;
    int commit;
    int64_t S, T, C, L, N, RB, PD;
    int64_t slot_bytes;      // D * esz
    rkv__cuda_upsert_plan g; // the grid (plan.h)
};

// One launch: data blocks copy 16-byte vectors of one input row (c, h, b)
// to the session's scratch and, on a committing write step, to its ring
// slot; the bit blocks then set the written bits of committed frames and
// write the visibility row (B == 1: the session's written bits minus the
// ring frame of a write step, SEM 3 step 2), each byte by one thread,
// reading the bits before writing them. With no data blocks and no commit:
// the row alone (rkv_layer_visible_row).
__global__ void __launch_bounds__(kThreads) upsert_kernel(const UpsertParams p) {
    RKV_EXTERN_SHARED(int64_t, smem_rows);
    int64_t *s_sess = smem_rows, *s_fp = smem_rows + p.batch;
    if (!rkv__d_validate_rows(p.sess, p.fp, p.batch, p.S, s_sess, s_fp, p.err, p.op)) return;

    const int64_t blk = blockIdx.x;
    if (blk < p.g.data_blocks) {
        const int64_t row = blk / p.g.blocks_per_row, chunk = blk - row * p.g.blocks_per_row;
        const int64_t ch = row / p.batch;  // c*H + h
        const int b = (int)(row - ch * p.batch);
        const int64_t s = s_sess[b], f = s_fp[b];
        const int64_t base = ch * p.N + s * p.C;  // slot index of the span in the plane
        const bool to_ring = p.commit && rkv__rule_write_step(f, p.PD);
        const int64_t slot = rkv__rule_slot(f, p.PD, p.RB);
        uint4 *scratch = p.dst + ((base + p.L) * p.slot_bytes) / 16;
        uint4 *ring = p.dst + ((base + slot * p.T) * p.slot_bytes) / 16;
        const uint4 *src = p.src + row * p.g.row_vecs;
        const int64_t v0 = chunk * kVpb + threadIdx.x;
        uint4 buf[kVpt];
#pragma unroll
        for (int k = 0; k < kVpt; k++) {
            const int64_t v = v0 + (int64_t)k * kThreads;
            if (v < p.g.row_vecs) buf[k] = __ldcs(src + v);  // streaming: read once
        }
#pragma unroll
        for (int k = 0; k < kVpt; k++) {
            const int64_t v = v0 + (int64_t)k * kThreads;
            if (v < p.g.row_vecs) {
                scratch[v] = buf[k];
                if (to_ring) ring[v] = buf[k];
            }
        }
        return;
    }

    // Bit blocks.
    const int64_t first = (blk - p.g.data_blocks) * kThreads + threadIdx.x;
    const int64_t stride = p.g.bits_blocks * kThreads;
    uint4 *w = reinterpret_cast<uint4 *>(p.written);
    if (p.visible) {  // B == 1: walk all N slots
        const int64_t s = s_sess[0], f = s_fp[0];
        const int64_t lo = s * p.C, hi = lo + p.C;
        const bool ws = rkv__rule_write_step(f, p.PD);
        const int64_t ring_lo = lo + rkv__rule_slot(f, p.PD, p.RB) * p.T;
        const int64_t hid_lo = ws ? ring_lo : -1, hid_hi = ws ? ring_lo + p.T : -1;
        const int64_t dst_lo = p.commit ? (ws ? ring_lo : lo + p.L) : -1;
        const int64_t dst_hi = p.commit ? dst_lo + p.T : -1;
        uint4 *vis = reinterpret_cast<uint4 *>(p.visible);
        for (int64_t v = first; v < p.N / 16; v += stride) {
            const int64_t j = v * 16;
            uint4 x = make_uint4(0, 0, 0, 0);
            if (j >= lo && j < hi && !(j >= hid_lo && j < hid_hi)) x = w[v];
            vis[v] = x;
            if (j >= dst_lo && j < dst_hi) w[v] = ones16();
        }
    } else {  // committed frames only
        const int64_t per_row = p.T / 16;
        for (int64_t v = first; v < p.batch * per_row; v += stride) {
            const int b = (int)(v / per_row);
            const int64_t off = (v - (int64_t)b * per_row) * 16;
            const int64_t s = s_sess[b], f = s_fp[b];
            const int64_t dst =
                s * p.C + (rkv__rule_write_step(f, p.PD) ? rkv__rule_slot(f, p.PD, p.RB) * p.T
                                                         : p.L);
            w[(dst + off) / 16] = ones16();
        }
    }
}

struct ResetParams {
    uint4 *dst;
    uint8_t *written;
    int64_t N, C, L, session;
    int64_t slot_bytes;
    rkv__cuda_reset_plan g;  // the grid (plan.h)
};

__global__ void __launch_bounds__(kThreads) reset_kernel(const ResetParams p) {
    const int64_t blk = blockIdx.x;
    if (blk < p.g.data_blocks) {
        const int64_t row = blk / p.g.blocks_per_row, chunk = blk - row * p.g.blocks_per_row;
        uint4 *span = p.dst + ((row * p.N + p.session * p.C) * p.slot_bytes) / 16;
        const int64_t v0 = chunk * kVpb + threadIdx.x;
#pragma unroll
        for (int k = 0; k < kVpt; k++) {
            const int64_t v = v0 + (int64_t)k * kThreads;
            if (v < p.g.row_vecs) span[v] = make_uint4(0, 0, 0, 0);
        }
        return;
    }
    uint4 *w = reinterpret_cast<uint4 *>(p.written + p.session * p.C);
    const int64_t stride = p.g.bits_blocks * kThreads;
    for (int64_t v = (blk - p.g.data_blocks) * kThreads + threadIdx.x; v < p.C / 16; v += stride)
        w[v] = v * 16 >= p.L ? ones16() : make_uint4(0, 0, 0, 0);
}

__global__ void clock_advance_kernel(int64_t *fp, int64_t batch, int64_t delta) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < batch) fp[i] += delta;
}

// Host copy of the initial written bits: ring 0, scratch 1 (SEM 2).
void arm_bits(const rkv_geometry *g, uint8_t *bits) {
    const int64_t L = g->ring_frames * g->tokens_per_frame;
    for (int64_t s = 0; s < g->num_sessions; s++) {
        memset(bits + s * (L + g->tokens_per_frame), 0, (size_t)L);
        memset(bits + s * (L + g->tokens_per_frame) + L, 1, (size_t)g->tokens_per_frame);
    }
}

}  // namespace

extern "C" int rkv_cuda_device_count(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError();  // clear the sticky "no driver" error
        return 0;
    }
    return n;
}

rkv_status rkv__cuda_layer_create(const rkv_geometry *g, const rkv__cuda_device *d,
                                  rkv_backend_storage *storage, rkv_cuda_layer **out) {
    static const char what[] = "rkv_layer_create";
    rkv_status st = rkv__cuda_check_current(d->device, "context", what);
    if (st != RKV_OK) return st;
    rkv_cuda_layer *l = static_cast<rkv_cuda_layer *>(calloc(1, sizeof *l));
    if (!l) return rkv_error_set(RKV_ERR_NO_MEMORY, "%s: out of host memory", what);
    l->g = *g;
    l->d = *d;
    const size_t kv_bytes = rkv_geometry_memory_bytes(g);
    cudaError_t e = cudaSuccess;
    // The error word given (a wrap's, or the context's pooled one), else the layer's own.
    l->err = reinterpret_cast<int *>(storage->error);
    l->own_err = !l->err;
    if (l->own_err && (e = cudaMalloc(reinterpret_cast<void **>(&l->err), 16)) == cudaSuccess)
        e = cudaMemset(l->err, 0, 16);
    if (storage->kv) {  // the caller's storage, as it is (rkv_layer_wrap)
        l->kv = storage->kv;
        l->written = storage->written;
    } else if (e == cudaSuccess) {
        const size_t nbits = ((size_t)rkv_geometry_total_slots(g) + 15) & ~(size_t)15;
        uint8_t *bits = static_cast<uint8_t *>(calloc(nbits, 1));
        if (!bits) {
            rkv__cuda_layer_destroy(l);
            return rkv_error_set(RKV_ERR_NO_MEMORY, "%s: out of host memory", what);
        }
        arm_bits(g, bits);
        l->own_storage = true;
        if ((e = cudaMalloc(&l->kv, kv_bytes)) == cudaSuccess &&
            (e = cudaMalloc(reinterpret_cast<void **>(&l->written), nbits)) == cudaSuccess &&
            (e = cudaMemset(l->kv, 0, kv_bytes)) == cudaSuccess &&
            (e = cudaMemcpy(l->written, bits, nbits, cudaMemcpyHostToDevice)) == cudaSuccess)
            e = cudaDeviceSynchronize();
        free(bits);
    }
    if (e != cudaSuccess) {
        rkv__cuda_layer_destroy(l);
        if (e == cudaErrorMemoryAllocation)
            return rkv_error_set(RKV_ERR_NO_MEMORY,
                                 "%s: cannot allocate %zu bytes of K/V on device %d (%s)", what,
                                 kv_bytes, d->device, cudaGetErrorString(e));
        return rkv__cuda_fail(e, what);
    }
    storage->kv = l->kv;
    storage->written = l->written;
    storage->error = reinterpret_cast<int32_t *>(l->err);
    *out = l;
    return RKV_OK;
}

void rkv__cuda_layer_destroy(rkv_cuda_layer *l) {
    if (!l) return;
    int prev = -1;
    const bool switched = cudaGetDevice(&prev) == cudaSuccess && prev != l->d.device &&
                          cudaSetDevice(l->d.device) == cudaSuccess;
    if (l->own_storage || l->own_err) cudaDeviceSynchronize();
    if (l->own_storage) {
        cudaFree(l->kv);
        cudaFree(l->written);
    }
    if (l->own_err) cudaFree(l->err);
    (void)cudaGetLastError();
    if (switched) cudaSetDevice(prev);
    free(l);
}

rkv_status rkv__cuda_reset(void *, void *layer, int64_t session) {
    static const char what[] = "rkv_layer_reset";
    const rkv_cuda_layer *l = static_cast<const rkv_cuda_layer *>(layer);
    rkv_status st = rkv__cuda_check_current(l->d.device, "layer", what);
    if (st != RKV_OK) return st;
    ResetParams p;
    rkv__cuda_reset_plan_make(&l->g, &p.g);
    p.dst = static_cast<uint4 *>(l->kv);
    p.written = l->written;
    p.N = rkv_geometry_total_slots(&l->g);
    p.C = rkv_geometry_capacity(&l->g);
    p.L = p.C - l->g.tokens_per_frame;
    p.session = session;
    p.slot_bytes = l->g.d_head * (int64_t)rkv_dtype_size(l->g.dtype);
    RKV_LAUNCH((unsigned)p.g.total_blocks, kThreads, 0, l->d.stream, reset_kernel)(p);
    return rkv__cuda_after_launch(what);
}

rkv_status rkv__cuda_upsert(void *, void *layer, const void *kv, int64_t batch,
                            const int64_t *frame_pos, const int64_t *session_idx, int commit,
                            uint8_t *visible) {
    const char *what = kv ? "rkv_layer_upsert" : "rkv_layer_visible_row";
    const rkv_cuda_layer *l = static_cast<const rkv_cuda_layer *>(layer);
    rkv_status st = rkv__cuda_check_current(l->d.device, "layer", what);
    if (st != RKV_OK) return st;
    UpsertParams p;
    rkv__cuda_upsert_plan_make(&l->g, batch, commit != 0, visible != nullptr, &p.g);
    if (!kv) p.g.total_blocks -= p.g.data_blocks, p.g.data_blocks = 0;  // the row alone
    p.src = static_cast<const uint4 *>(kv);
    p.dst = static_cast<uint4 *>(l->kv);
    p.written = l->written;
    p.visible = visible;
    p.sess = session_idx;
    p.fp = frame_pos;
    p.err = l->err;
    p.op = kv ? RKV__OP_UPSERT : RKV__OP_ROW;
    p.batch = (int)batch;
    p.commit = commit != 0;
    p.S = l->g.num_sessions;
    p.T = l->g.tokens_per_frame;
    p.C = rkv_geometry_capacity(&l->g);
    p.L = p.C - p.T;
    p.N = rkv_geometry_total_slots(&l->g);
    p.RB = l->g.ring_buckets;
    p.PD = l->g.pinned_dilation;
    p.slot_bytes = l->g.d_head * (int64_t)rkv_dtype_size(l->g.dtype);
    if (p.g.total_blocks > 0x7fffffff)
        return rkv_error_set(RKV_ERR_OVERFLOW, "%s: %lld blocks exceed the CUDA grid", what,
                         (long long)p.g.total_blocks);
    RKV_LAUNCH((unsigned)p.g.total_blocks, kThreads, p.g.smem_bytes, l->d.stream,
               upsert_kernel)(p);
    return rkv__cuda_after_launch(what);
}

extern "C" rkv_status rkv_cuda_clock_advance(int64_t *frame_pos, int64_t batch, int64_t delta,
                                             void *stream) {
    static const char what[] = "rkv_cuda_clock_advance";
    if (!frame_pos) return rkv_error_set(RKV_ERR_NULL, "%s: frame_pos is NULL", what);
    if (batch < 1 || batch > RKV_CUDA_MAX_BATCH)
        return rkv_error_set(RKV_ERR_INVALID_ARG, "%s: batch = %lld; expected 1..%d", what,
                         (long long)batch, RKV_CUDA_MAX_BATCH);
    const unsigned blocks = (unsigned)((batch + 255) / 256);
    RKV_LAUNCH(blocks, 256, 0, static_cast<cudaStream_t>(stream), clock_advance_kernel)(
        frame_pos, batch, delta);
    return rkv__cuda_after_launch(what);
}

// ---- one session's span, piece by piece (arguments checked by the core) ------

namespace {
// The device address of a piece and its bytes (*st: the piece's check, for
// the caller whose arguments the core did not check).
uint8_t *span_at(const rkv_cuda_layer *l, int64_t session, rkv_span_part part, int64_t head,
                 size_t *bytes, rkv_status *st = nullptr) {
    size_t offset = 0;
    bool in_written = false;
    const rkv_status s = rkv__span_piece(&l->g, "cuda backend: span_region", session, part, head,
                                         &offset, bytes, &in_written);
    if (st) *st = s;
    return (in_written ? l->written : static_cast<uint8_t *>(l->kv)) + offset;
}

// One copy between a piece and the host buffer `host` (to it unless
// `to_device`), finished before returning (the buffer is the caller's again).
rkv_status span_copy_host(const void *layer, int64_t session, rkv_span_part part, int64_t head,
                          void *host, bool to_device, const char *what) {
    const rkv_cuda_layer *l = static_cast<const rkv_cuda_layer *>(layer);
    rkv_status st = rkv__cuda_check_current(l->d.device, "layer", what);
    if (st != RKV_OK) return st;
    size_t bytes = 0;
    uint8_t *at = span_at(l, session, part, head, &bytes);
    cudaError_t e =
        to_device ? cudaMemcpyAsync(at, host, bytes, cudaMemcpyHostToDevice, l->d.stream)
                  : cudaMemcpyAsync(host, at, bytes, cudaMemcpyDeviceToHost, l->d.stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(l->d.stream);
    return e == cudaSuccess ? RKV_OK : rkv__cuda_fail(e, what);
}
}  // namespace

rkv_status rkv__cuda_span_region(void *, const void *layer, int64_t session, rkv_span_part part,
                                 int64_t head, void **ptr, int *device) {
    const rkv_cuda_layer *l = static_cast<const rkv_cuda_layer *>(layer);
    size_t bytes = 0;
    rkv_status st = RKV_OK;
    uint8_t *at = span_at(l, session, part, head, &bytes, &st);
    if (st != RKV_OK) return st;
    *ptr = at;
    *device = l->d.device;
    return RKV_OK;
}

rkv_status rkv__cuda_span_read(void *, const void *layer, int64_t session, rkv_span_part part,
                               int64_t head, void *dst) {
    return span_copy_host(layer, session, part, head, dst, false, "rkv_layer_read_span");
}

rkv_status rkv__cuda_span_write(void *, void *layer, int64_t session, rkv_span_part part,
                                int64_t head, const void *src) {
    return span_copy_host(layer, session, part, head, const_cast<void *>(src), true,
                          "rkv_layer_write_span");
}

rkv_status rkv__cuda_span_copy(void *, void *layer, int64_t src_session, int64_t dst_session) {
    static const char what[] = "rkv_layer_copy_span";
    const rkv_cuda_layer *l = static_cast<const rkv_cuda_layer *>(layer);
    rkv_status st = rkv__cuda_check_current(l->d.device, "layer", what);
    if (st != RKV_OK) return st;
    cudaError_t e = cudaSuccess;
    // K and V of every head, then the written bits: 2H + 1 pieces.
    for (int64_t piece = 0; piece <= 2 * l->g.n_kv_heads && e == cudaSuccess; piece++) {
        const bool bits = piece == 2 * l->g.n_kv_heads;
        const rkv_span_part part =
            bits ? RKV_SPAN_WRITTEN : piece < l->g.n_kv_heads ? RKV_SPAN_K : RKV_SPAN_V;
        const int64_t head = bits ? 0 : piece % l->g.n_kv_heads;
        size_t bytes = 0;
        const uint8_t *from = span_at(l, src_session, part, head, &bytes);
        uint8_t *to = span_at(l, dst_session, part, head, &bytes);
        e = cudaMemcpyAsync(to, from, bytes, cudaMemcpyDeviceToDevice, l->d.stream);
    }
    return e == cudaSuccess ? RKV_OK : rkv__cuda_fail(e, what);
}

// One layer's ring in device memory: creation, copies, reset, the fused
// upsert (SEMANTICS 2, 3) and the device-side clock advance.
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.cuh"

namespace {

constexpr int kThreads = RKV__UPSERT_THREADS;
constexpr int kVpt = RKV__UPSERT_VECS_PER_THREAD;
constexpr int kVpb = RKV__UPSERT_VECS_PER_BLOCK;

__device__ __forceinline__ uint4 ones16() {
    return make_uint4(0x01010101u, 0x01010101u, 0x01010101u, 0x01010101u);
}

// Streaming 16-byte load: the upsert input is read once.
__device__ __forceinline__ uint4 ld_stream(const uint4 *p) { return __ldcs(p); }

struct UpsertParams {
    const uint4 *src;        // input [2H*B][row_vecs] vectors
    uint4 *dst;              // storage as 16-byte vectors
    uint8_t *written;        // [N]
    uint8_t *visible;        // [N] or nullptr (B == 1)
    const int64_t *sess;     // [B]
    const int64_t *fp;       // [B]
    int *err;
    int batch;
    int commit;
    int64_t S, T, C, L, N, RB, PD;
    int64_t slot_bytes;      // D * esz
    int64_t row_vecs, blocks_per_row, data_blocks, bits_blocks;
};

// One launch: data blocks copy 16-byte vectors of one input row (c, h, b)
// to the session's scratch and, on a committing write step, to its ring
// slot; the bit blocks then set the written bits of committed frames and
// write the visibility row (B == 1), each byte by one thread, reading the
// bits before writing them.
__global__ void __launch_bounds__(kThreads) upsert_kernel(const UpsertParams p) {
    RKV_EXTERN_SHARED(int64_t, smem_rows);
    int64_t *s_sess = smem_rows, *s_fp = smem_rows + p.batch;
    if (!rkv__d_validate_rows(p.sess, p.fp, p.batch, p.S, s_sess, s_fp, p.err, RKV__OP_UPSERT))
        return;

    const int64_t blk = blockIdx.x;
    if (blk < p.data_blocks) {
        const int64_t row = blk / p.blocks_per_row, chunk = blk - row * p.blocks_per_row;
        const int64_t ch = row / p.batch;  // c*H + h
        const int b = (int)(row - ch * p.batch);
        const int64_t s = s_sess[b], f = s_fp[b];
        const int64_t base = ch * p.N + s * p.C;  // slot index of the span in the plane
        const bool to_ring = p.commit && rkv__rule_write_step(f, p.PD);
        const int64_t slot = rkv__rule_slot(f, p.PD, p.RB);
        uint4 *scratch = p.dst + ((base + p.L) * p.slot_bytes) / 16;
        uint4 *ring = p.dst + ((base + slot * p.T) * p.slot_bytes) / 16;
        const uint4 *src = p.src + row * p.row_vecs;
        const int64_t v0 = chunk * kVpb + threadIdx.x;
        uint4 buf[kVpt];
#pragma unroll
        for (int k = 0; k < kVpt; k++) {
            const int64_t v = v0 + (int64_t)k * kThreads;
            if (v < p.row_vecs) buf[k] = ld_stream(src + v);
        }
#pragma unroll
        for (int k = 0; k < kVpt; k++) {
            const int64_t v = v0 + (int64_t)k * kThreads;
            if (v < p.row_vecs) {
                scratch[v] = buf[k];
                if (to_ring) ring[v] = buf[k];
            }
        }
        return;
    }

    // Bit blocks.
    const int64_t first = (blk - p.data_blocks) * kThreads + threadIdx.x;
    const int64_t stride = p.bits_blocks * kThreads;
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
    int64_t slot_bytes, row_vecs, blocks_per_row, data_blocks, bits_blocks;
};

__global__ void __launch_bounds__(kThreads) reset_kernel(const ResetParams p) {
    const int64_t blk = blockIdx.x;
    if (blk < p.data_blocks) {
        const int64_t row = blk / p.blocks_per_row, chunk = blk - row * p.blocks_per_row;
        uint4 *span = p.dst + ((row * p.N + p.session * p.C) * p.slot_bytes) / 16;
        const int64_t v0 = chunk * kVpb + threadIdx.x;
#pragma unroll
        for (int k = 0; k < kVpt; k++) {
            const int64_t v = v0 + (int64_t)k * kThreads;
            if (v < p.row_vecs) span[v] = make_uint4(0, 0, 0, 0);
        }
        return;
    }
    uint4 *w = reinterpret_cast<uint4 *>(p.written + p.session * p.C);
    const int64_t stride = p.bits_blocks * kThreads;
    for (int64_t v = (blk - p.data_blocks) * kThreads + threadIdx.x; v < p.C / 16; v += stride)
        w[v] = v * 16 >= p.L ? ones16() : make_uint4(0, 0, 0, 0);
}

__global__ void clock_advance_kernel(int64_t *fp, int64_t batch, int64_t delta) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < batch) fp[i] += delta;
}

// Host copy of the initial written bits: ring 0, scratch 1 (SEM 2).
void arm_bits(const rkv_cuda_layer *l, uint8_t *bits) {
    for (int64_t s = 0; s < l->g.num_sessions; s++) {
        uint8_t *w = bits + s * l->capacity;
        memset(w, 0, (size_t)l->ring_len);
        memset(w + l->ring_len, 1, (size_t)l->g.tokens_per_frame);
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

extern "C" rkv_status rkv_cuda_layer_create(const rkv_geometry *g, int device,
                                            rkv_cuda_layer **out) {
    static const char what[] = "rkv_cuda_layer_create";
    if (!out) return rkv_error_set(RKV_ERR_NULL, "%s: out is NULL", what);
    rkv_status st = rkv_geometry_check(g);
    if (st != RKV_OK) return st;
    const int ndev = rkv_cuda_device_count();
    if (device < 0 || device >= ndev)
        return rkv_error_set(RKV_ERR_RANGE, "%s: device %d; the CUDA runtime sees %d device(s)", what,
                         device, ndev);
    cudaError_t e = cudaSetDevice(device);
    if (e != cudaSuccess) return rkv__cuda_fail(e, what);
    cudaDeviceProp prop;
    e = cudaGetDeviceProperties(&prop, device);
    if (e != cudaSuccess) return rkv__cuda_fail(e, what);

    rkv_cuda_layer *l = static_cast<rkv_cuda_layer *>(calloc(1, sizeof *l));
    if (!l) return rkv_error_set(RKV_ERR_NO_MEMORY, "%s: out of host memory", what);
    l->g = *g;
    l->device = device;
    l->own_err = true;
    l->dev.sm_count = prop.multiProcessorCount;
    l->dev.smem_optin = prop.sharedMemPerBlockOptin;
    l->dev.cc_major = prop.major;
    const char *env = getenv("RKV_CUDA_ATTN_STAGES");
    l->attn_stages = env && atoi(env) == 3 ? 3 : 2;
    /* The wgmma kernel is opt-in until it has passed the GPU check. */
    env = getenv("RKV_CUDA_ATTN_KERNEL");
    l->attn_kernel = env && strcmp(env, "wgmma") == 0 ? RKV__KERNEL_WGMMA : RKV__KERNEL_MMA;
    l->ring_len = rkv_geometry_ring_len(g);
    l->capacity = rkv_geometry_capacity(g);
    l->total_slots = rkv_geometry_total_slots(g);
    l->memory_bytes = rkv_geometry_memory_bytes(g);

    const size_t nbits = ((size_t)l->total_slots + 15) & ~(size_t)15;
    uint8_t *bits = static_cast<uint8_t *>(malloc(nbits));
    if (!bits) {
        free(l);
        return rkv_error_set(RKV_ERR_NO_MEMORY, "%s: out of host memory", what);
    }
    memset(bits, 0, nbits);
    arm_bits(l, bits);
    if ((e = cudaMalloc(&l->kv, l->memory_bytes)) != cudaSuccess ||
        (e = cudaMalloc(reinterpret_cast<void **>(&l->written), nbits)) != cudaSuccess ||
        (e = cudaMalloc(reinterpret_cast<void **>(&l->err), 16)) != cudaSuccess ||
        (e = cudaMemset(l->kv, 0, l->memory_bytes)) != cudaSuccess ||
        (e = cudaMemcpy(l->written, bits, nbits, cudaMemcpyHostToDevice)) != cudaSuccess ||
        (e = cudaMemset(l->err, 0, 16)) != cudaSuccess ||
        (e = cudaDeviceSynchronize()) != cudaSuccess) {
        free(bits);
        rkv_cuda_layer_destroy(l);
        if (e == cudaErrorMemoryAllocation)
            return rkv_error_set(RKV_ERR_NO_MEMORY,
                             "%s: cannot allocate %zu bytes of K/V on device %d (%s)", what,
                             rkv_geometry_memory_bytes(g), device, cudaGetErrorString(e));
        return rkv__cuda_fail(e, what);
    }
    free(bits);
    if ((e = rkv__cuda_attention_prepare(l)) != cudaSuccess) {
        cudaGetLastError(); /* clear it: the failure is reported here */
        rkv_cuda_layer_destroy(l);
        return rkv_error_set(RKV_ERR_STATE,
                         "%s: cannot raise the attention kernels' shared memory limit to %zu "
                         "bytes minus their static shared memory: CUDA error %s (%s)",
                         what, l->dev.smem_optin, cudaGetErrorName(e), cudaGetErrorString(e));
    }
    *out = l;
    return RKV_OK;
}

extern "C" void rkv_cuda_layer_destroy(rkv_cuda_layer *l) {
    if (!l) return;
    int prev = -1;
    const bool switched = cudaGetDevice(&prev) == cudaSuccess && prev != l->device &&
                          cudaSetDevice(l->device) == cudaSuccess;
    cudaDeviceSynchronize();
    cudaFree(l->kv);
    cudaFree(l->written);
    if (l->own_err) cudaFree(l->err);
    (void)cudaGetLastError();
    if (switched) cudaSetDevice(prev);
    free(l);
}

extern "C" const rkv_geometry *rkv_cuda_layer_geometry(const rkv_cuda_layer *l) {
    return l ? &l->g : nullptr;
}
extern "C" int rkv_cuda_layer_device(const rkv_cuda_layer *l) { return l ? l->device : -1; }
extern "C" int64_t rkv_cuda_layer_total_slots(const rkv_cuda_layer *l) {
    return l ? l->total_slots : 0;
}
extern "C" size_t rkv_cuda_layer_memory_bytes(const rkv_cuda_layer *l) {
    return l ? l->memory_bytes : 0;
}
extern "C" void *rkv_cuda_layer_kv(const rkv_cuda_layer *l) { return l ? l->kv : nullptr; }
extern "C" uint8_t *rkv_cuda_layer_written(const rkv_cuda_layer *l) {
    return l ? l->written : nullptr;
}

extern "C" rkv_status rkv_cuda_layer_upload(rkv_cuda_layer *l, const void *kv,
                                            const uint8_t *written) {
    static const char what[] = "rkv_cuda_layer_upload";
    if (!l) return rkv_error_set(RKV_ERR_NULL, "%s: layer is NULL", what);
    if (!kv && !written) return rkv_error_set(RKV_ERR_NULL, "%s: kv and written are both NULL", what);
    rkv_status st = rkv__cuda_check_device(l, what);
    if (st != RKV_OK) return st;
    // Whole-device synchronization before and after: the copies run on the
    // legacy stream, which does not order itself with non-blocking streams,
    // and a pageable host-to-device copy may return before its DMA is done.
    cudaError_t e = cudaDeviceSynchronize();
    if (e == cudaSuccess && kv) e = cudaMemcpy(l->kv, kv, l->memory_bytes, cudaMemcpyHostToDevice);
    if (e == cudaSuccess && written) {
        /* stored as 0/1, as the header promises (the bits feed bool rows) */
        uint8_t *bits = static_cast<uint8_t *>(malloc((size_t)l->total_slots));
        if (!bits) return rkv_error_set(RKV_ERR_NO_MEMORY, "%s: out of host memory", what);
        for (int64_t i = 0; i < l->total_slots; i++) bits[i] = written[i] != 0;
        e = cudaMemcpy(l->written, bits, (size_t)l->total_slots, cudaMemcpyHostToDevice);
        free(bits);
    }
    if (e == cudaSuccess) e = cudaDeviceSynchronize();
    return e == cudaSuccess ? RKV_OK : rkv__cuda_fail(e, what);
}

extern "C" rkv_status rkv_cuda_layer_download(const rkv_cuda_layer *l, void *kv,
                                              uint8_t *written) {
    static const char what[] = "rkv_cuda_layer_download";
    if (!l) return rkv_error_set(RKV_ERR_NULL, "%s: layer is NULL", what);
    if (!kv && !written) return rkv_error_set(RKV_ERR_NULL, "%s: kv and written are both NULL", what);
    rkv_status st = rkv__cuda_check_device(l, what);
    if (st != RKV_OK) return st;
    // Synchronize the whole device first: work queued on non-blocking
    // streams is not ordered before a legacy-stream copy.
    cudaError_t e = cudaDeviceSynchronize();
    if (e == cudaSuccess && kv) e = cudaMemcpy(kv, l->kv, l->memory_bytes, cudaMemcpyDeviceToHost);
    if (e == cudaSuccess && written)
        e = cudaMemcpy(written, l->written, (size_t)l->total_slots, cudaMemcpyDeviceToHost);
    return e == cudaSuccess ? RKV_OK : rkv__cuda_fail(e, what);
}

extern "C" rkv_status rkv_cuda_layer_reset(rkv_cuda_layer *l, int64_t session, void *stream) {
    static const char what[] = "rkv_cuda_layer_reset";
    if (!l) return rkv_error_set(RKV_ERR_NULL, "%s: layer is NULL", what);
    if (session < 0 || session >= l->g.num_sessions)
        return rkv_error_set(RKV_ERR_RANGE, "%s: session %lld out of range for %lld sessions", what,
                         (long long)session, (long long)l->g.num_sessions);
    rkv_status st = rkv__cuda_check_device(l, what);
    if (st != RKV_OK) return st;
    rkv__cuda_reset_plan plan;
    rkv__cuda_reset_plan_make(&l->g, &plan);
    ResetParams p;
    p.dst = static_cast<uint4 *>(l->kv);
    p.written = l->written;
    p.N = l->total_slots;
    p.C = l->capacity;
    p.L = l->ring_len;
    p.session = session;
    p.slot_bytes = l->g.d_head * (int64_t)rkv_dtype_size(l->g.dtype);
    p.row_vecs = plan.row_vecs;
    p.blocks_per_row = plan.blocks_per_row;
    p.data_blocks = plan.data_blocks;
    p.bits_blocks = plan.bits_blocks;
    RKV_LAUNCH((unsigned)plan.total_blocks, kThreads, 0, static_cast<cudaStream_t>(stream),
               reset_kernel)(p);
    return rkv__cuda_after_launch(what);
}

extern "C" rkv_status rkv_cuda_layer_check(rkv_cuda_layer *l, void *stream) {
    static const char what[] = "rkv_cuda_layer_check";
    if (!l) return rkv_error_set(RKV_ERR_NULL, "%s: layer is NULL", what);
    rkv_status st = rkv__cuda_check_device(l, what);
    if (st != RKV_OK) return st;
    cudaStream_t s = static_cast<cudaStream_t>(stream);
    int word = 0;
    cudaError_t e = cudaMemcpyAsync(&word, l->err, sizeof word, cudaMemcpyDeviceToHost, s);
    if (e == cudaSuccess) e = cudaStreamSynchronize(s);
    if (e == cudaSuccess && word) e = cudaMemsetAsync(l->err, 0, sizeof word, s);
    if (e != cudaSuccess) return rkv__cuda_fail(e, what);
    return word ? rkv__cuda_device_error_status(word, l->g.num_sessions) : RKV_OK;
}

extern "C" rkv_status rkv_cuda_layer_upsert(rkv_cuda_layer *l, const void *kv, rkv_dtype kv_dtype,
                                            int64_t batch, const int64_t *frame_pos,
                                            const int64_t *session_idx, int commit,
                                            uint8_t *visible, void *stream) {
    static const char what[] = "rkv_cuda_layer_upsert";
    rkv_status st = rkv__cuda_upsert_check(l ? &l->g : nullptr, kv, kv_dtype, batch, frame_pos,
                                           session_idx, visible);
    if (st != RKV_OK) return st;
    return rkv__cuda_upsert_launch(l, kv, batch, frame_pos, session_idx, commit, visible,
                                   static_cast<cudaStream_t>(stream), what);
}

rkv_status rkv__cuda_upsert_launch(const rkv_cuda_layer *l, const void *kv, int64_t batch,
                                   const int64_t *frame_pos, const int64_t *session_idx,
                                   int commit, uint8_t *visible, cudaStream_t stream,
                                   const char *what) {
    rkv_status st = rkv__cuda_check_device(l, what);
    if (st != RKV_OK) return st;
    rkv__cuda_upsert_plan plan;
    rkv__cuda_upsert_plan_make(&l->g, batch, commit != 0, visible != nullptr, &plan);
    UpsertParams p;
    p.src = static_cast<const uint4 *>(kv);
    p.dst = static_cast<uint4 *>(l->kv);
    p.written = l->written;
    p.visible = visible;
    p.sess = session_idx;
    p.fp = frame_pos;
    p.err = l->err;
    p.batch = (int)batch;
    p.commit = commit != 0;
    p.S = l->g.num_sessions;
    p.T = l->g.tokens_per_frame;
    p.C = l->capacity;
    p.L = l->ring_len;
    p.N = l->total_slots;
    p.RB = l->g.ring_buckets;
    p.PD = l->g.pinned_dilation;
    p.slot_bytes = l->g.d_head * (int64_t)rkv_dtype_size(l->g.dtype);
    p.row_vecs = plan.row_vecs;
    p.blocks_per_row = plan.blocks_per_row;
    p.data_blocks = plan.data_blocks;
    p.bits_blocks = plan.bits_blocks;
    if (plan.total_blocks > 0x7fffffff)
        return rkv_error_set(RKV_ERR_OVERFLOW, "%s: %lld blocks exceed the CUDA grid", what,
                         (long long)plan.total_blocks);
    RKV_LAUNCH((unsigned)plan.total_blocks, kThreads, plan.smem_bytes, stream, upsert_kernel)(p);
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

// ---- one session's span, piece by piece --------------------------------------

extern "C" size_t rkv_cuda_layer_span_bytes(const rkv_cuda_layer *l, rkv_span_part part) {
    if (!l) return 0;
    size_t offset = 0, bytes = 0;
    int in_written = 0;
    // A valid piece of session 0 (head 0) has the size of every piece of
    // that part; any failure here is an unknown part.
    const rkv_status st = rkv__cuda_span_check(&l->g, "rkv_cuda_layer_span_bytes", 0, part, 0,
                                               &offset, &bytes, &in_written);
    return st == RKV_OK ? bytes : 0;
}

namespace {
// The device address and bytes of a piece, after the host checks; `src`
// (a write's host data) non-NULL for a write, whose written bits are checked.
rkv_status span_place(const rkv_cuda_layer *l, const char *what, int64_t session,
                      rkv_span_part part, int64_t head, const void *host, bool write,
                      uint8_t **at, size_t *bytes) {
    if (!l) return rkv_error_set(RKV_ERR_NULL, "%s: layer is NULL", what);
    size_t offset = 0;
    int in_written = 0;
    rkv_status st = rkv__cuda_span_check(&l->g, what, session, part, head, &offset, bytes,
                                         &in_written);
    if (st != RKV_OK) return st;
    if (!host) return rkv_error_set(RKV_ERR_NULL, "%s: %s is NULL", what, write ? "src" : "dst");
    if (write && in_written &&
        (st = rkv__cuda_written_check(&l->g, what, static_cast<const uint8_t *>(host))) != RKV_OK)
        return st;
    if ((st = rkv__cuda_check_device(l, what)) != RKV_OK) return st;
    *at = (in_written ? l->written : static_cast<uint8_t *>(l->kv)) + offset;
    return RKV_OK;
}

// One copy between a piece and a host buffer, finished before returning
// (the host buffer is the caller's again).
rkv_status span_copy_host(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind,
                          void *stream, const char *what) {
    cudaStream_t s = static_cast<cudaStream_t>(stream);
    cudaError_t e = cudaMemcpyAsync(dst, src, bytes, kind, s);
    if (e == cudaSuccess) e = cudaStreamSynchronize(s);
    return e == cudaSuccess ? RKV_OK : rkv__cuda_fail(e, what);
}
}  // namespace

extern "C" rkv_status rkv_cuda_layer_read_span(const rkv_cuda_layer *l, int64_t session,
                                               rkv_span_part part, int64_t head, void *dst,
                                               void *stream) {
    static const char what[] = "rkv_cuda_layer_read_span";
    uint8_t *at = nullptr;
    size_t bytes = 0;
    rkv_status st = span_place(l, what, session, part, head, dst, false, &at, &bytes);
    return st == RKV_OK ? span_copy_host(dst, at, bytes, cudaMemcpyDeviceToHost, stream, what)
                        : st;
}

extern "C" rkv_status rkv_cuda_layer_write_span(rkv_cuda_layer *l, int64_t session,
                                                rkv_span_part part, int64_t head,
                                                const void *src, void *stream) {
    static const char what[] = "rkv_cuda_layer_write_span";
    uint8_t *at = nullptr;
    size_t bytes = 0;
    rkv_status st = span_place(l, what, session, part, head, src, true, &at, &bytes);
    return st == RKV_OK ? span_copy_host(at, src, bytes, cudaMemcpyHostToDevice, stream, what)
                        : st;
}

extern "C" rkv_status rkv_cuda_layer_copy_span(rkv_cuda_layer *l, int64_t src_session,
                                               int64_t dst_session, void *stream) {
    static const char what[] = "rkv_cuda_layer_copy_span";
    if (!l) return rkv_error_set(RKV_ERR_NULL, "%s: layer is NULL", what);
    const int64_t S = l->g.num_sessions;
    if (src_session < 0 || src_session >= S || dst_session < 0 || dst_session >= S)
        return rkv_error_set(RKV_ERR_RANGE, "%s: session %lld out of range; expected 0..%lld",
                             what,
                             (long long)(src_session < 0 || src_session >= S ? src_session
                                                                             : dst_session),
                             (long long)(S - 1));
    rkv_status st = rkv__cuda_check_device(l, what);
    if (st != RKV_OK || src_session == dst_session) return st;
    cudaStream_t s = static_cast<cudaStream_t>(stream);
    size_t so = 0, doff = 0, bytes = 0;
    int in_written = 0;
    cudaError_t e = cudaSuccess;
    // K and V of every head, then the written bits: 2H + 1 pieces.
    for (int64_t piece = 0; piece <= 2 * l->g.n_kv_heads && e == cudaSuccess; piece++) {
        const bool bits = piece == 2 * l->g.n_kv_heads;
        const rkv_span_part part =
            bits ? RKV_SPAN_WRITTEN : piece < l->g.n_kv_heads ? RKV_SPAN_K : RKV_SPAN_V;
        const int64_t head = bits ? 0 : piece % l->g.n_kv_heads;
        rkv__cuda_span_check(&l->g, what, src_session, part, head, &so, &bytes, &in_written);
        rkv__cuda_span_check(&l->g, what, dst_session, part, head, &doff, &bytes, &in_written);
        uint8_t *base = bits ? l->written : static_cast<uint8_t *>(l->kv);
        e = cudaMemcpyAsync(base + doff, base + so, bytes, cudaMemcpyDeviceToDevice, s);
    }
    return e == cudaSuccess ? RKV_OK : rkv__cuda_fail(e, what);
}

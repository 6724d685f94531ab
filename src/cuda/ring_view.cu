// Rings over caller-owned device storage (rkv_cuda_ring_view): the layer
// calls run on a layer struct built over the view's buffers, with the
// device's properties read once per process (rkv_cuda_ring_prepare); plus
// the visibility row of one row on its own (the upsert computes it fused).
#include <atomic>
#include <mutex>
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.cuh"

namespace {

constexpr int kMaxDevices = 64;

// What rkv_cuda_layer_create reads per layer, read once per device here.
struct DeviceState {
    std::atomic<bool> ready{false};
    rkv__cuda_device_info dev{};
    int attn_stages = 2;
    int attn_kernel = RKV__KERNEL_MMA;
};
DeviceState g_devices[kMaxDevices];
std::mutex g_prepare_lock;

constexpr int kRowThreads = 256;
constexpr int kRowMaxBlocks = 64;

// The reference's row of the (single) row: the session's written bits,
// minus the ring frame of a write step (SEM 3 step 2).
__global__ void __launch_bounds__(kRowThreads)
    visible_row_kernel(const uint4 *written, uint4 *row, const int64_t *sess, const int64_t *fp,
                       int *err, int64_t S, int64_t T, int64_t C, int64_t N, int64_t RB,
                       int64_t PD) {
    RKV_SHARED(int64_t[2], s_rows);
    if (!rkv__d_validate_rows(sess, fp, 1, S, s_rows, s_rows + 1, err, RKV__OP_ROW)) return;
    const int64_t s = s_rows[0], f = s_rows[1];
    const int64_t lo = s * C, hi = lo + C;
    const int64_t hidden = rkv__rule_hidden_frame(f, PD, RB);  // SEM 4 (ring_rule.h)
    const int64_t hid_lo = hidden >= 0 ? lo + hidden * T : -1;
    const int64_t hid_hi = hidden >= 0 ? hid_lo + T : -1;
    for (int64_t v = (int64_t)blockIdx.x * kRowThreads + threadIdx.x; v < N / 16;
         v += (int64_t)gridDim.x * kRowThreads) {
        const int64_t j = v * 16;  // T and C are multiples of 128: no vector straddles a bound
        row[v] = j >= lo && j < hi && !(j >= hid_lo && j < hid_hi) ? written[v]
                                                                   : make_uint4(0, 0, 0, 0);
    }
}

bool aligned(const void *p, size_t to) { return reinterpret_cast<uintptr_t>(p) % to == 0; }

// A layer struct over the view's buffers, after the view's own checks.
// ring->kv may be NULL when !need_kv (the visibility row reads the bits only).
rkv_status view_layer(const rkv_cuda_ring_view *v, const char *what, bool need_kv,
                      rkv_cuda_layer *out) {
    if (!v) return rkv_error_set(RKV_ERR_NULL, "%s: ring is NULL", what);
    if ((!v->kv && need_kv) || !v->written || !v->error)
        return rkv_error_set(RKV_ERR_NULL, "%s: ring->%s is NULL", what,
                         !v->kv ? "kv" : !v->written ? "written" : "error");
    rkv_status st = rkv_geometry_check(&v->g);
    if (st != RKV_OK) return st;
    if (v->device < 0 || v->device >= kMaxDevices || !g_devices[v->device].ready.load())
        return rkv_error_set(RKV_ERR_STATE,
                         "%s: device %d is not prepared for ring views; call "
                         "rkv_cuda_ring_prepare(%d) once first (outside any capture)",
                         what, v->device, v->device);
    if (!aligned(v->kv, 16) || !aligned(v->written, 16) || !aligned(v->error, 4))
        return rkv_error_set(RKV_ERR_INVALID_ARG,
                         "%s: ring->kv and ring->written must be 16-byte aligned and ring->error "
                         "4-byte aligned; got %p, %p, %p",
                         what, v->kv, static_cast<void *>(v->written),
                         static_cast<void *>(v->error));
    const DeviceState &d = g_devices[v->device];
    memset(out, 0, sizeof *out);
    out->g = v->g;
    out->device = v->device;
    out->dev = d.dev;
    out->attn_stages = d.attn_stages;
    out->attn_kernel = d.attn_kernel;
    out->ring_len = rkv_geometry_ring_len(&v->g);
    out->capacity = rkv_geometry_capacity(&v->g);
    out->total_slots = rkv_geometry_total_slots(&v->g);
    out->memory_bytes = rkv_geometry_memory_bytes(&v->g);
    out->kv = v->kv;
    out->written = v->written;
    out->err = v->error;
    return RKV_OK;
}

}  // namespace

extern "C" rkv_status rkv_cuda_ring_prepare(int device) {
    static const char what[] = "rkv_cuda_ring_prepare";
    const int ndev = rkv_cuda_device_count();
    if (device < 0 || device >= ndev || device >= kMaxDevices)
        return rkv_error_set(RKV_ERR_RANGE, "%s: device %d; the CUDA runtime sees %d device(s)", what,
                         device, ndev);
    DeviceState &d = g_devices[device];
    if (d.ready.load()) return RKV_OK;
    std::lock_guard<std::mutex> guard(g_prepare_lock);
    if (d.ready.load()) return RKV_OK;
    int prev = -1;
    cudaError_t e = cudaGetDevice(&prev);
    if (e == cudaSuccess && prev != device) e = cudaSetDevice(device);
    cudaDeviceProp prop;
    if (e == cudaSuccess) e = cudaGetDeviceProperties(&prop, device);
    rkv_cuda_layer probe;  // the attention's preparation reads these fields only
    memset(&probe, 0, sizeof probe);
    if (e == cudaSuccess) {
        probe.device = device;
        probe.dev.sm_count = prop.multiProcessorCount;
        probe.dev.smem_optin = prop.sharedMemPerBlockOptin;
        probe.dev.cc_major = prop.major;
        const char *env = getenv("RKV_CUDA_ATTN_STAGES");
        probe.attn_stages = env && atoi(env) == 3 ? 3 : 2;
        env = getenv("RKV_CUDA_ATTN_KERNEL");
        probe.attn_kernel = env && strcmp(env, "wgmma") == 0 ? RKV__KERNEL_WGMMA : RKV__KERNEL_MMA;
        e = rkv__cuda_attention_prepare(&probe);
    }
    if (prev >= 0 && prev != device) cudaSetDevice(prev);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return rkv__cuda_fail(e, what);
    }
    d.dev = probe.dev;
    d.attn_stages = probe.attn_stages;
    d.attn_kernel = probe.attn_kernel;
    d.ready.store(true);
    return RKV_OK;
}

extern "C" rkv_status rkv_cuda_layer_view(const rkv_cuda_layer *l, rkv_cuda_ring_view *out) {
    static const char what[] = "rkv_cuda_layer_view";
    if (!l) return rkv_error_set(RKV_ERR_NULL, "%s: layer is NULL", what);
    if (!out) return rkv_error_set(RKV_ERR_NULL, "%s: out is NULL", what);
    rkv_status st = rkv_cuda_ring_prepare(l->device);
    if (st != RKV_OK) return st;
    out->g = l->g;
    out->device = l->device;
    out->kv = l->kv;
    out->written = l->written;
    out->error = l->err;
    return RKV_OK;
}

extern "C" rkv_status rkv_cuda_ring_upsert(const rkv_cuda_ring_view *ring, const void *kv,
                                           rkv_dtype kv_dtype, int64_t batch,
                                           const int64_t *frame_pos, const int64_t *session_idx,
                                           int commit, uint8_t *visible, void *stream) {
    rkv_cuda_layer l;
    rkv_status st = view_layer(ring, "rkv_cuda_ring_upsert", true, &l);
    if (st != RKV_OK) return st;
    return rkv_cuda_layer_upsert(&l, kv, kv_dtype, batch, frame_pos, session_idx, commit, visible,
                                 stream);
}

extern "C" rkv_status rkv_cuda_ring_visible_row(const rkv_cuda_ring_view *ring,
                                                const int64_t *session_idx,
                                                const int64_t *frame_pos, uint8_t *row,
                                                void *stream) {
    static const char what[] = "rkv_cuda_ring_visible_row";
    rkv_cuda_layer l;
    rkv_status st = view_layer(ring, what, false, &l);
    if (st != RKV_OK) return st;
    if (!session_idx || !frame_pos || !row)
        return rkv_error_set(RKV_ERR_NULL, "%s: %s is NULL", what,
                         !session_idx ? "session_idx" : !frame_pos ? "frame_pos" : "row");
    if (!aligned(row, 16) || !aligned(session_idx, 8) || !aligned(frame_pos, 8))
        return rkv_error_set(RKV_ERR_INVALID_ARG,
                         "%s: row must be 16-byte aligned and session_idx / frame_pos 8-byte "
                         "aligned",
                         what);
    if ((st = rkv__cuda_check_device(&l, what)) != RKV_OK) return st;
    const int64_t vecs = l.total_slots / 16;
    int64_t blocks = (vecs + kRowThreads - 1) / kRowThreads;
    if (blocks > kRowMaxBlocks) blocks = kRowMaxBlocks;
    RKV_LAUNCH((unsigned)blocks, kRowThreads, 0, static_cast<cudaStream_t>(stream),
               visible_row_kernel)(
        reinterpret_cast<const uint4 *>(l.written), reinterpret_cast<uint4 *>(row), session_idx,
        frame_pos, l.err, l.g.num_sessions, l.g.tokens_per_frame, l.capacity, l.total_slots,
        l.g.ring_buckets, l.g.pinned_dilation);
    return rkv__cuda_after_launch(what);
}

extern "C" rkv_status rkv_cuda_ring_attend(const rkv_cuda_ring_view *ring,
                                           const rkv_cuda_attention_args *args, void *stream) {
    rkv_cuda_layer l;
    rkv_status st = view_layer(ring, "rkv_cuda_ring_attend", true, &l);
    if (st != RKV_OK) return st;
    return rkv_cuda_layer_attend(&l, args, stream);
}

extern "C" size_t rkv_cuda_ring_attention_workspace_bytes(const rkv_cuda_ring_view *ring,
                                                          const rkv_cuda_attention_args *args) {
    rkv_cuda_layer l;
    if (view_layer(ring, "rkv_cuda_ring_attention_workspace_bytes", true, &l) != RKV_OK) return 0;
    return rkv_cuda_attention_workspace_bytes(&l, args);
}

extern "C" rkv_status rkv_cuda_ring_check(const rkv_cuda_ring_view *ring, void *stream) {
    rkv_cuda_layer l;
    rkv_status st = view_layer(ring, "rkv_cuda_ring_check", false, &l);
    if (st != RKV_OK) return st;
    return rkv_cuda_layer_check(&l, stream);
}

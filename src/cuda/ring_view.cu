// A GPU's properties and the kernels' limits, read once per process and
// device (rkv__cuda_prepare: every context on the device shares them; the
// kernel choice is read per context); and
// the visibility row of one row on its own (the upsert computes it fused).
#include <atomic>
#include <mutex>
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.cuh"

namespace {

constexpr int kMaxDevices = 64;

// What a context needs of its device, read once per device here.
struct DeviceState {
    std::atomic<bool> ready{false};
    rkv__cuda_device_info dev{};
    bool wgmma_ok = false;  // the Hopper kernel's code is loaded and prepared
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

}  // namespace

rkv_status rkv__cuda_prepare(int device, rkv__cuda_device *out) {
    static const char what[] = "rkv_cuda_backend";
    const int ndev = rkv_cuda_device_count();
    if (device < 0 || device >= ndev || device >= kMaxDevices)
        return rkv_error_set(RKV_ERR_RANGE, "%s: device %d; the CUDA runtime sees %d device(s)%s",
                             what, device, ndev,
                             ndev == 0 ? " (no GPU, or no driver: use the CPU backend)" : "");
    DeviceState &d = g_devices[device];
    if (!d.ready.load()) {
        std::lock_guard<std::mutex> guard(g_prepare_lock);
        if (!d.ready.load()) {
            cudaDeviceProp prop;
            cudaError_t e = cudaGetDeviceProperties(&prop, device);
            rkv__cuda_device probe;
            memset(&probe, 0, sizeof probe);
            if (e == cudaSuccess) {
                probe.device = device;
                probe.dev.sm_count = prop.multiProcessorCount;
                probe.dev.smem_optin = prop.sharedMemPerBlockOptin;
                probe.dev.cc_major = prop.major;
                probe.attn_kernel = RKV__KERNEL_WGMMA;  // prepared whenever it can run
                e = rkv__cuda_attention_prepare(&probe);
            }
            if (e != cudaSuccess) {
                (void)cudaGetLastError();
                return rkv_error_set(RKV_ERR_STATE,
                                     "%s: cannot read device %d or raise the attention kernels' "
                                     "shared memory limit: CUDA error %s (%s)",
                                     what, device, cudaGetErrorName(e), cudaGetErrorString(e));
            }
            d.dev = probe.dev;
            d.wgmma_ok = probe.dev.cc_major == 9 && probe.attn_kernel == RKV__KERNEL_WGMMA;
            d.ready.store(true);
        }
    }
    // The kernel choice is each context's, read when it is made.
    out->device = device;
    out->dev = d.dev;
    const char *env = getenv("RKV_CUDA_ATTN_STAGES");
    out->attn_stages = env && atoi(env) == 3 ? 3 : 2;
    // The wgmma kernel is opt-in until it has passed the GPU check; asked
    // for where its code is not loaded, the context runs the mma kernel.
    env = getenv("RKV_CUDA_ATTN_KERNEL");
    out->attn_kernel = env && strcmp(env, "wgmma") == 0 && d.wgmma_ok ? RKV__KERNEL_WGMMA
                                                                       : RKV__KERNEL_MMA;
    return RKV_OK;
}

rkv_status rkv__cuda_visible_row_launch(const rkv_cuda_layer *l, const int64_t *session_idx,
                                        const int64_t *frame_pos, uint8_t *row,
                                        cudaStream_t stream) {
    static const char what[] = "rkv_layer_visible_row";
    rkv_status st = rkv__cuda_check_device(l, what);
    if (st != RKV_OK) return st;
    const int64_t vecs = l->total_slots / 16;
    int64_t blocks = (vecs + kRowThreads - 1) / kRowThreads;
    if (blocks > kRowMaxBlocks) blocks = kRowMaxBlocks;
    RKV_LAUNCH((unsigned)blocks, kRowThreads, 0, stream, visible_row_kernel)(
        reinterpret_cast<const uint4 *>(l->written), reinterpret_cast<uint4 *>(row), session_idx,
        frame_pos, l->err, l->g.num_sessions, l->g.tokens_per_frame, l->capacity,
        l->total_slots, l->g.ring_buckets, l->g.pinned_dilation);
    return rkv__cuda_after_launch(what);
}

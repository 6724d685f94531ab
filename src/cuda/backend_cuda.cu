// The CUDA backend's table (include/ringkv_backend.h) and its context
// (ringkv_cuda.h); begin_frame's batch copy goes through a small ring of
// pinned staging slots so that it stays asynchronous.
#include <mutex>
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.cuh"

namespace {

// Staging slots for copy_in: begin_frame copies one slot per frame, so 8
// slots let the host run 8 frames ahead of the GPU before it waits.
constexpr int kStageSlots = 8;
// Error words a context holds for its layers (a model's: RKV_MAX_LAYERS).
constexpr int kErrWords = RKV_MAX_LAYERS;

struct CudaCtx {
    rkv__cuda_device dev;           // the GPU, its properties, kernel choice, stream
    size_t slot_bytes;              // bytes of one staging slot
    uint8_t *stage;                 // pinned HOST [kStageSlots][slot_bytes]
    cudaEvent_t done[kStageSlots];  // recorded after each slot's copy
    bool armed[kStageSlots];        // its event was recorded at least once
    bool made[kStageSlots];         // its event exists
    int next;                       // the slot of the next copy
    // The layers' error words, side by side, so that one copy reads them
    // all (check): a layer created on the context takes the next word.
    int *err_pool;                  // DEVICE [kErrWords]
    int *err_host;                  // pinned HOST [kErrWords]: check's copy
    int err_used;                   // words handed out
};

CudaCtx *ctx_of(void *c) { return static_cast<CudaCtx *>(c); }
rkv_cuda_layer *layer_of(void *l) { return static_cast<rkv_cuda_layer *>(l); }
const rkv_cuda_layer *layer_of(const void *l) { return static_cast<const rkv_cuda_layer *>(l); }

void ctx_destroy(void *vc) {
    CudaCtx *c = ctx_of(vc);
    if (!c) return;
    (void)cudaStreamSynchronize(c->dev.stream);
    for (int k = 0; k < kStageSlots; k++)
        if (c->made[k]) cudaEventDestroy(c->done[k]);
    if (c->stage) cudaFreeHost(c->stage);
    if (c->err_host) cudaFreeHost(c->err_host);
    if (c->err_pool) cudaFree(c->err_pool);
    (void)cudaGetLastError();
    free(c);
}

void limits(void *, rkv_backend_limits *out) {
    const rkv_backend_limits lim = RKV__CUDA_LIMITS;  // plan.h
    *out = lim;
}

rkv_status layer_create(void *vc, const rkv_geometry *g, rkv_backend_storage *storage,
                        void **layer) {
    CudaCtx *c = ctx_of(vc);
    // A layer of its own storage takes the pool's next word while there is
    // one (check reads them all at once).
    const bool pooled = !storage->kv && c->err_used < kErrWords;
    if (!storage->kv) storage->error = pooled ? c->err_pool + c->err_used : nullptr;
    rkv_status st = rkv__cuda_layer_create(g, &c->dev, storage,
                                           reinterpret_cast<rkv_cuda_layer **>(layer));
    if (st == RKV_OK && pooled) c->err_used++;
    return st;
}
void layer_destroy(void *, void *layer) { rkv__cuda_layer_destroy(layer_of(layer)); }

// The table's alloc (device memory, cudaMalloc) and host_alloc (pinned host
// memory, cudaMallocHost: the session images' span copies of offload and
// page-in then run as DMA at the link's rate), on the model's device.
template <bool pinned>
rkv_status alloc_on(void *vc, size_t bytes, void **ptr) {
    const char *what = pinned ? "cuda backend: cudaMallocHost" : "cuda backend: cudaMalloc";
    rkv_status st = rkv__cuda_check_current(ctx_of(vc)->dev.device, "model", what);
    if (st != RKV_OK) return st;
    void *p = nullptr;
    cudaError_t e = pinned ? cudaMallocHost(&p, bytes) : cudaMalloc(&p, bytes);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return rkv_error_set(e == cudaErrorMemoryAllocation ? RKV_ERR_NO_MEMORY : RKV_ERR_STATE,
                             "%s of %zu bytes: CUDA error %s (%s)", what, bytes,
                             cudaGetErrorName(e), cudaGetErrorString(e));
    }
    *ptr = p;
    return RKV_OK;
}

// cudaFree waits for the device's work that may use the memory.
template <bool pinned>
void free_on(void *, void *ptr) {
    if (ptr) pinned ? cudaFreeHost(ptr) : cudaFree(ptr);
    (void)cudaGetLastError();
}

// HOST src -> device dst on the model's stream, through the next staging
// slot once its previous copy has run (its event); a copy larger than a slot
// is refused (begin_frame's batch, at most max_batch rows, fits one).
rkv_status copy_in(void *vc, void *dst, const void *src, size_t bytes) {
    static const char what[] = "cuda backend: batch copy";
    CudaCtx *c = ctx_of(vc);
    rkv_status st = rkv__cuda_check_current(c->dev.device, "model", what);
    if (st != RKV_OK) return st;
    cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    cudaError_t e = cudaStreamIsCapturing(c->dev.stream, &cs);
    if (e != cudaSuccess) return rkv__cuda_fail(e, what);
    if (cs != cudaStreamCaptureStatusNone)
        return rkv_error_set(RKV_ERR_STATE,
                             "%s: the model's stream is being captured; rkv_model_begin_frame "
                             "copies the batch from host memory and must run outside the capture "
                             "(the captured calls read the buffers it writes)",
                             what);
    if (bytes > c->slot_bytes)
        return rkv_error_set(RKV_ERR_INVALID_ARG, "%s of %zu bytes: a staging slot holds %zu",
                             what, bytes, c->slot_bytes);
    const int k = c->next;
    if (c->armed[k] && (e = cudaEventSynchronize(c->done[k])) != cudaSuccess)
        return rkv__cuda_fail(e, what);
    uint8_t *slot = c->stage + (size_t)k * c->slot_bytes;
    memcpy(slot, src, bytes);
    e = cudaMemcpyAsync(dst, slot, bytes, cudaMemcpyHostToDevice, c->dev.stream);
    if (e == cudaSuccess) e = cudaEventRecord(c->done[k], c->dev.stream);
    if (e != cudaSuccess) return rkv__cuda_fail(e, what);
    c->armed[k] = true;
    c->next = (k + 1) % kStageSlots;
    return RKV_OK;
}

rkv_status synchronize(void *vc) {
    static const char what[] = "cuda backend: cudaStreamSynchronize";
    CudaCtx *c = ctx_of(vc);
    rkv_status st = rkv__cuda_check_current(c->dev.device, "model", what);
    if (st != RKV_OK) return st;
    // (not cudaGetLastError: it would report the caller's own earlier
    // failures; a kernel's asynchronous failure comes back from here)
    cudaError_t e = cudaStreamSynchronize(c->dev.stream);
    return e == cudaSuccess ? RKV_OK : rkv__cuda_fail(e, what);
}
// One layer's error word, read (one copy and one wait) and cleared.
rkv_status check_one(const rkv_cuda_layer *l, cudaStream_t s) {
    static const char what[] = "rkv_layer_check";
    rkv_status st = rkv__cuda_check_current(l->d.device, "layer", what);
    if (st != RKV_OK) return st;
    int word = 0;
    cudaError_t e = cudaMemcpyAsync(&word, l->err, sizeof word, cudaMemcpyDeviceToHost, s);
    if (e == cudaSuccess) e = cudaStreamSynchronize(s);
    if (e == cudaSuccess && word) e = cudaMemsetAsync(l->err, 0, sizeof word, s);
    if (e != cudaSuccess) return rkv__cuda_fail(e, what);
    return word ? rkv__cuda_device_error_status(word, l->g.num_sessions) : RKV_OK;
}
// Every layer's error word with one copy and one wait when they all lie in
// the context's pool (a model's layers), then the nonzero ones cleared
// (enqueued: later work is ordered after the clear).
rkv_status check(void *vc, void *const *layers, int64_t n, int64_t *bad) {
    static const char what[] = "cuda backend: error check";
    CudaCtx *c = ctx_of(vc);
    bool pooled = true;
    for (int64_t i = 0; i < n && pooled; i++) {
        const int *w = layer_of(layers[i])->err;
        pooled = w >= c->err_pool && w < c->err_pool + c->err_used;
    }
    if (!pooled) {  // layers of their own words: one check each
        for (int64_t i = 0; i < n; i++) {
            rkv_status st = check_one(layer_of(layers[i]), c->dev.stream);
            if (st != RKV_OK) {
                *bad = i;
                return st;
            }
        }
        return RKV_OK;
    }
    rkv_status st = rkv__cuda_check_current(c->dev.device, "model", what);
    if (st != RKV_OK || c->err_used == 0) return st;
    cudaError_t e = cudaMemcpyAsync(c->err_host, c->err_pool, (size_t)c->err_used * sizeof(int),
                                    cudaMemcpyDeviceToHost, c->dev.stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(c->dev.stream);
    if (e != cudaSuccess) return rkv__cuda_fail(e, what);
    rkv_status first = RKV_OK;
    for (int64_t i = 0; i < n; i++) {
        const rkv_cuda_layer *l = layer_of(layers[i]);
        const int word = c->err_host[l->err - c->err_pool];
        if (!word) continue;
        if ((e = cudaMemsetAsync(l->err, 0, sizeof word, c->dev.stream)) != cudaSuccess)
            return rkv__cuda_fail(e, what);
        if (first == RKV_OK) {
            first = rkv__cuda_device_error_status(word, l->g.num_sessions);
            *bad = i;
        }
    }
    return first;
}

// ---- per pass (capture-safe; unchecked: the core checked everything) -----------

rkv_status visible_row(void *, const void *layer, const int64_t *session_idx,
                       const int64_t *frame_pos, uint8_t *row) {
    return rkv__cuda_upsert(nullptr, const_cast<void *>(layer), nullptr, 1, frame_pos,
                            session_idx, 0, row);
}
rkv_status attend(void *, const void *layer, const rkv_attention_args *a, void *workspace,
                  size_t workspace_bytes) {
    rkv_cuda_attention_args ca;
    rkv__cuda_model_attention_args(a, workspace, workspace_bytes, &ca);
    return rkv__cuda_attend_launch(layer_of(layer), &ca, "rkv_layer_attend");
}
size_t attend_workspace_bytes(void *, const void *layer, const rkv_attention_args *a) {
    rkv__cuda_attn_plan plan;
    if (rkv__cuda_attention_plan_checked(layer_of(layer), a, 1, "rkv_layer_attend", &plan))
        return 0;
    return plan.workspace_bytes;
}

rkv_backend_ops make_ops() {
    rkv_backend_ops o;
    memset(&o, 0, sizeof o);
    o.abi_version = RKV_BACKEND_ABI_VERSION;
    o.struct_size = sizeof o;
    o.name = "cuda";
    o.ctx_destroy = ctx_destroy;
    o.limits = limits;
    o.layer_create = layer_create;
    o.layer_destroy = layer_destroy;
    o.alloc = alloc_on<false>;
    o.free = free_on<false>;
    o.copy_in = copy_in;
    o.synchronize = synchronize;
    o.check = check;
    o.upsert = rkv__cuda_upsert;
    o.visible_row = visible_row;
    o.attend = attend;
    o.attend_workspace_bytes = attend_workspace_bytes;
    o.reset = rkv__cuda_reset;
    o.span_read = rkv__cuda_span_read;
    o.span_write = rkv__cuda_span_write;
    o.span_copy = rkv__cuda_span_copy;
    o.span_region = rkv__cuda_span_region;
    o.host_alloc = alloc_on<true>;
    o.host_free = free_on<true>;
    return o;
}

const rkv_backend_ops cuda_ops = make_ops();

constexpr int kMaxDevices = 64;

// What a context needs of its device, read once per device here.
struct DeviceState {
    bool ready = false;
    rkv__cuda_device_info dev{};
    bool wgmma_ok = false;  // the Hopper kernel's code is loaded and prepared
};
DeviceState g_devices[kMaxDevices];
std::mutex g_prepare_lock;

// rkv_cuda_backend's device set-up (ringkv_cuda.h): g_devices[device] once,
// under one lock (contexts are made rarely), the kernel choice per context.
rkv_status prepare(int device, rkv__cuda_device *out, const char *what) {
    const int ndev = rkv_cuda_device_count();
    if (device < 0 || device >= ndev || device >= kMaxDevices)
        return rkv_error_set(RKV_ERR_RANGE, "%s: device %d; the CUDA runtime sees %d device(s)%s",
                             what, device, ndev,
                             ndev == 0 ? " (no GPU, or no driver: use the CPU backend)" : "");
    std::lock_guard<std::mutex> guard(g_prepare_lock);
    DeviceState &d = g_devices[device];
    if (!d.ready) {
        cudaDeviceProp prop;
        cudaError_t e = cudaGetDeviceProperties(&prop, device);
        if (e == cudaSuccess) {
            d.dev.sm_count = prop.multiProcessorCount;
            d.dev.smem_optin = prop.sharedMemPerBlockOptin;
            d.dev.cc_major = prop.major;
            e = rkv__cuda_attention_prepare(&d.dev, &d.wgmma_ok);
        }
        if (e != cudaSuccess) {
            (void)cudaGetLastError();
            return rkv_error_set(RKV_ERR_STATE,
                                 "%s: cannot read device %d or raise the attention kernels' "
                                 "shared memory limit: CUDA error %s (%s)",
                                 what, device, cudaGetErrorName(e), cudaGetErrorString(e));
        }
        d.ready = true;
    }
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

// The backend's context: the device, the stream, the pinned staging ring
// (`what` names the call).
rkv_status ctx_create(int device, void *stream, int64_t num_sessions, const char *what,
                      void **out) {
    rkv__cuda_device dev;
    rkv_status st = prepare(device, &dev, what);
    if (st != RKV_OK) return st;
    cudaError_t e0 = cudaSetDevice(device);
    if (e0 != cudaSuccess) return rkv__cuda_fail(e0, what);
    CudaCtx *c = static_cast<CudaCtx *>(calloc(1, sizeof *c));
    if (!c) return rkv_error_set(RKV_ERR_NO_MEMORY, "%s: out of host memory", what);
    c->dev = dev;
    c->dev.stream = static_cast<cudaStream_t>(stream);
    c->slot_bytes = 2 * (size_t)rkv__cuda_max_batch(num_sessions) * sizeof(int64_t);
    void *stage = nullptr, *err_host = nullptr, *err_pool = nullptr;
    cudaError_t e = cudaMallocHost(&stage, kStageSlots * c->slot_bytes);
    c->stage = static_cast<uint8_t *>(stage);
    if (e == cudaSuccess && (e = cudaMallocHost(&err_host, kErrWords * sizeof(int))) == cudaSuccess)
        c->err_host = static_cast<int *>(err_host);
    if (e == cudaSuccess && (e = cudaMalloc(&err_pool, kErrWords * sizeof(int))) == cudaSuccess)
        c->err_pool = static_cast<int *>(err_pool);
    if (e == cudaSuccess) e = cudaMemset(c->err_pool, 0, kErrWords * sizeof(int));
    if (e == cudaSuccess) e = cudaDeviceSynchronize();
    for (int k = 0; e == cudaSuccess && k < kStageSlots; k++)
        if ((e = cudaEventCreateWithFlags(&c->done[k], cudaEventDisableTiming)) == cudaSuccess)
            c->made[k] = true;
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        const size_t pinned = kStageSlots * c->slot_bytes;
        ctx_destroy(c);
        return rkv_error_set(
            e == cudaErrorMemoryAllocation ? RKV_ERR_NO_MEMORY : RKV_ERR_STATE,
            "%s: cannot set up the batch staging (%zu bytes of pinned host memory, %d events): "
            "CUDA error %s (%s)",
            what, pinned, kStageSlots, cudaGetErrorName(e), cudaGetErrorString(e));
    }
    *out = c;
    return RKV_OK;
}

}  // namespace

extern "C" rkv_status rkv_cuda_backend(int device, void *stream, const rkv_backend_ops **ops,
                                       void **ctx) {
    static const char what[] = "rkv_cuda_backend";
    if (!ops || !ctx) return rkv_error_set(RKV_ERR_NULL, "%s: %s is NULL", what, ops ? "ctx" : "ops");
    rkv_status st = ctx_create(device, stream, RKV_CUDA_MAX_BATCH, what, ctx);
    if (st == RKV_OK) *ops = &cuda_ops;
    return st;
}

extern "C" rkv_status rkv_model_create_cuda(const rkv_model_config *cfg, int device, void *stream,
                                            rkv_model **out) {
    static const char what[] = "rkv_model_create_cuda";
    if (!out) return rkv_error_set(RKV_ERR_NULL, "%s: out is NULL", what);
    if (!cfg) return rkv_error_set(RKV_ERR_NULL, "%s: cfg is NULL", what);
    // The config first (the same checks and messages as rkv_model_create).
    rkv_status st = rkv_model_config_memory(cfg, nullptr, nullptr);
    if (st != RKV_OK) return st;
    void *c = nullptr;
    if ((st = ctx_create(device, stream, cfg->num_sessions, what, &c)) != RKV_OK) return st;
    if ((st = rkv_model_create_with_backend(cfg, &cuda_ops, c, out)) != RKV_OK) ctx_destroy(c);
    return st;
}

namespace {
// The describe calls' own arguments, args into *a in this library's layout.
rkv_status describe_args(const char *what, const rkv_attention_args *args, const char *buf,
                         size_t buf_size, rkv_attention_args *a) {
    if (!args) return rkv_error_set(RKV_ERR_NULL, "%s: args is NULL", what);
    if (!buf || !buf_size) return rkv_error_set(RKV_ERR_NULL, "%s: buf is NULL or empty", what);
    rkv_status st = rkv__cuda_model_args_check(what, args);
    if (st != RKV_OK) return st;
    memset(a, 0, sizeof *a);
    memcpy(a, args, args->struct_size);
    a->struct_size = sizeof *a;
    return RKV_OK;
}

// The plan rkv_layer_attend would use on l for a (checked here), described
// into buf.
rkv_status describe(const char *what, const rkv_cuda_layer *l, const rkv_attention_args *a,
                    char *buf, size_t buf_size) {
    rkv__cuda_attn_plan plan;
    rkv_status st = rkv__cuda_attention_check(what, &l->g, a);
    if (st == RKV_OK) st = rkv__cuda_attention_plan_checked(l, a, 0, what, &plan);
    if (st == RKV_OK) rkv__cuda_attention_plan_describe(&plan, buf, buf_size);
    return st;
}
}  // namespace

extern "C" rkv_status rkv_cuda_attention_describe(const rkv_layer *layer,
                                                  const rkv_attention_args *args, char *buf,
                                                  size_t buf_size) {
    static const char what[] = "rkv_cuda_attention_describe";
    const rkv_backend_ops *ops = nullptr;
    const rkv_cuda_layer *l = layer_of(rkv_layer_backend_handle(layer, &ops, nullptr));
    if (!layer) return rkv_error_set(RKV_ERR_NULL, "%s: layer is NULL", what);
    if (ops != &cuda_ops)
        return rkv_error_set(RKV_ERR_INVALID_ARG, "%s: the layer is on the %s backend, not cuda",
                             what, ops && ops->name ? ops->name : "(unnamed)");
    rkv_attention_args a;
    rkv_status st = describe_args(what, args, buf, buf_size, &a);
    return st == RKV_OK ? describe(what, l, &a, buf, buf_size) : st;
}

extern "C" rkv_status rkv_model_cuda_attention_describe(const rkv_model *model, int64_t layer,
                                                        int64_t batch,
                                                        const rkv_attention_args *args, char *buf,
                                                        size_t buf_size) {
    static const char what[] = "rkv_model_cuda_attention_describe";
    if (!model) return rkv_error_set(RKV_ERR_NULL, "%s: model is NULL", what);
    rkv_attention_args a;
    rkv_status st = describe_args(what, args, buf, buf_size, &a);
    if (st != RKV_OK) return st;
    const rkv_backend_ops *ops = nullptr;
    rkv_layer_backend_handle(rkv_model_layer((rkv_model *)model, 0), &ops, nullptr);
    if (ops != &cuda_ops)
        return rkv_error_set(RKV_ERR_INVALID_ARG, "%s: the model runs on the %s backend, not cuda",
                             what, rkv_model_backend_name(model));
    const rkv_model_config *cfg = rkv_model_get_config(model);
    if (layer < 0 || layer >= cfg->n_layers)
        return rkv_error_set(RKV_ERR_RANGE, "%s: layer %lld out of range; expected 0..%lld", what,
                             (long long)layer, (long long)(cfg->n_layers - 1));
    if (a.n_q_heads != cfg->n_q_heads)
        return rkv_error_set(RKV_ERR_INVALID_ARG, "%s: args->n_q_heads = %lld; this model has %lld",
                             what, (long long)a.n_q_heads, (long long)cfg->n_q_heads);
    // The model's workspace, as rkv_model_create_with_backend sized it: the
    // most any layer needs (rings differ: local and global layers), since the
    // split count is cut to fit it. The plan reads no memory: the batch's
    // device buffers and the workspace only need to be valid pointers.
    size_t ws_bytes = 0;
    for (int64_t i = 0; i < cfg->n_layers; i++) {
        const rkv_cuda_layer *li = layer_of(
            rkv_layer_backend_handle(rkv_model_layer((rkv_model *)model, i), nullptr, nullptr));
        const size_t b = rkv__cuda_model_workspace_bytes(&li->g, &li->d.dev, li->d.attn_stages,
                                                         li->d.attn_kernel, RKV_CUDA_MAX_BATCH,
                                                         cfg->n_q_heads);
        if (b > ws_bytes) ws_bytes = b;
    }
    const rkv_cuda_layer *l = layer_of(
        rkv_layer_backend_handle(rkv_model_layer((rkv_model *)model, layer), nullptr, nullptr));
    alignas(16) static const int64_t placeholder[2] = {0, 0};
    a.batch = batch;  // checked against min(S, RKV_CUDA_MAX_BATCH) with the others
    a.session_idx = a.frame_pos = placeholder;
    a.visible = nullptr;
    a.workspace = ws_bytes ? (void *)placeholder : nullptr;
    a.workspace_bytes = ws_bytes;
    return describe(what, l, &a, buf, buf_size);
}

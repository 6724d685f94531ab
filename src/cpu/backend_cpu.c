/* The CPU backend's table: layers are struct rkv__cpu_layer, host storage in
 * the layout of SEMANTICS 2 (its own, 64-byte aligned for the vector paths,
 * or the caller's), so every operation is a direct call on it -- the memcpy
 * upsert (SEM 3), the reference's visibility row, reset, one session's span
 * piece by piece -- memory is malloc'd, copies are memcpy and there is
 * nothing to wait for. The attention engines are cpu/attention*.c. Every
 * operation is unchecked (include/ringkv_backend.h): the core checked the
 * arguments once (src/layer.c, src/model_frame.c; the check of a table
 * handed to the core is src/backend.c). */
#include <stdlib.h>
#include <string.h>

#include "cpu_internal.h"

typedef struct rkv__cpu_layer cpu_layer;

/* 64-byte aligned: NULL when bytes rounded up overflows or is 0. */
static void *alloc64(size_t bytes) {
    const size_t rounded = RKV__ALIGN64(bytes);
    return rounded >= bytes && rounded ? aligned_alloc(64, rounded) : NULL;
}

static void *alloc_zeroed(size_t bytes) {
    void *p = alloc64(bytes ? bytes : 1);
    if (p) memset(p, 0, bytes);
    return p;
}

/* Marks every scratch slot written and every ring slot not (SEM 2). */
static void arm_written(cpu_layer *l, int64_t session) {
    uint8_t *w = l->written + session * l->capacity;
    memset(w, 0, (size_t)l->ring_len);
    memset(w + l->ring_len, 1, (size_t)l->g.tokens_per_frame);
}

static void cpu_layer_destroy(void *ctx, void *layer) {
    (void)ctx;
    cpu_layer *l = layer;
    if (!l) return;
    if (l->owns_storage) {
        free(l->kv);
        free(l->written);
    }
    free(l);
}

/* A layer of its own storage, or over the caller's (storage->kv set, kept
 * as it is, never freed); *storage receives its pointers. */
static rkv_status cpu_layer_create(void *ctx, const rkv_geometry *g, rkv_backend_storage *storage,
                                   void **layer) {
    cpu_layer *l = calloc(1, sizeof *l);
    if (!l) return rkv__fail(RKV_ERR_NO_MEMORY, "rkv_layer_create: out of memory");
    l->g = *g;
    l->ring_len = g->ring_frames * g->tokens_per_frame;
    l->capacity = rkv_geometry_capacity(g);
    l->total_slots = rkv_geometry_total_slots(g);
    l->row_bytes = (size_t)g->d_head * rkv_dtype_size(g->dtype);
    l->kv = storage->kv;
    l->written = storage->written;
    if (!l->kv) {
        l->owns_storage = true;
        l->kv = alloc_zeroed(rkv_geometry_memory_bytes(g));
        l->written = alloc_zeroed((size_t)l->total_slots);
        if (!l->kv || !l->written) {
            cpu_layer_destroy(ctx, l);
            return rkv__fail(RKV_ERR_NO_MEMORY,
                             "rkv_layer_create: cannot allocate %zu bytes of K/V",
                             rkv_geometry_memory_bytes(g));
        }
        for (int64_t s = 0; s < g->num_sessions; s++) arm_written(l, s);
    }
    storage->kv = l->kv;
    storage->written = l->written;
    storage->error = NULL;
    *layer = l;
    return RKV_OK;
}

static void cpu_limits(void *ctx, rkv_backend_limits *out) {
    (void)ctx;
    out->host_memory = 1; /* no other limit: any batch up to S, any d_head */
}

static rkv_status cpu_alloc(void *ctx, size_t bytes, void **ptr) {
    (void)ctx;
    void *p = alloc64(bytes);
    if (!p) return rkv__fail(RKV_ERR_NO_MEMORY, "cpu backend: cannot allocate %zu bytes", bytes);
    *ptr = p;
    return RKV_OK;
}
static void cpu_free(void *ctx, void *ptr) {
    (void)ctx;
    free(ptr);
}
static rkv_status cpu_copy_in(void *ctx, void *dst, const void *src, size_t bytes) {
    (void)ctx;
    memcpy(dst, src, bytes);
    return RKV_OK;
}
static rkv_status cpu_synchronize(void *ctx) {
    (void)ctx;
    return RKV_OK;
}

/* The reference's row (SEM 3 step 2) of session s at clock f, from the bits
 * as they are now: written AND the session's span, minus the ring frame a
 * write step is about to overwrite. */
static rkv_status cpu_visible_row(void *ctx, const void *layer, const int64_t *session_idx,
                                  const int64_t *frame_pos, uint8_t *row) {
    (void)ctx;
    const cpu_layer *l = layer;
    const int64_t C = l->capacity, lo = session_idx[0] * C;
    memset(row, 0, (size_t)l->total_slots);
    memcpy(row + lo, l->written + lo, (size_t)C);
    int write;
    const int64_t slot = rkv_ring_slot(&l->g, frame_pos[0], &write);
    if (write) memset(row + lo + slot * l->g.tokens_per_frame, 0, (size_t)l->g.tokens_per_frame);
    return RKV_OK;
}

/* Copies row b's frame (T slots of every head, K and V) from the upsert input
 * [2][H][B*T][D] to slots [dst, dst+T) of the storage. */
static void copy_frame(const cpu_layer *l, const uint8_t *kv, int64_t batch, int64_t b,
                       int64_t dst) {
    const int64_t T = l->g.tokens_per_frame, H = l->g.n_kv_heads;
    const size_t frame_bytes = (size_t)T * l->row_bytes;
    for (int c = 0; c < 2; c++)
        for (int64_t h = 0; h < H; h++) {
            const uint8_t *src = kv + ((size_t)(c * H + h) * (size_t)(batch * T) + (size_t)(b * T)) *
                                          l->row_bytes;
            memcpy(rkv__slot_ptr(l, c, h, dst), src, frame_bytes);
        }
}

/* The upsert of SEM 3. */
static rkv_status cpu_upsert(void *ctx, void *layer, const void *kv, int64_t batch,
                             const int64_t *frame_pos, const int64_t *session_idx, int commit,
                             uint8_t *visible) {
    const cpu_layer *l = layer;
    const int64_t T = l->g.tokens_per_frame, C = l->capacity, L = l->ring_len;

    /* 1. scratch write for every row */
    for (int64_t b = 0; b < batch; b++) copy_frame(l, kv, batch, b, session_idx[b] * C + L);

    /* 2. visibility row, before the commit */
    if (visible) cpu_visible_row(ctx, l, session_idx, frame_pos, visible);

    /* 3. commit: ring slot on write steps, scratch (again) otherwise */
    if (commit)
        for (int64_t b = 0; b < batch; b++) {
            int write;
            const int64_t slot = rkv_ring_slot(&l->g, frame_pos[b], &write);
            const int64_t dst = session_idx[b] * C + (write ? slot * T : L);
            copy_frame(l, kv, batch, b, dst);
            memset(l->written + dst, 1, (size_t)T);
        }
    return RKV_OK;
}

static rkv_status cpu_reset(void *ctx, void *layer, int64_t session) {
    (void)ctx;
    cpu_layer *l = layer;
    const int64_t lo = session * l->capacity;
    for (int c = 0; c < 2; c++)
        for (int64_t h = 0; h < l->g.n_kv_heads; h++)
            memset(rkv__slot_ptr(l, c, h, lo), 0, (size_t)l->capacity * l->row_bytes);
    arm_written(l, session);
    return RKV_OK;
}

/* The address of a (valid) span piece, and its bytes. */
static uint8_t *span_at(const cpu_layer *l, int64_t session, rkv_span_part part, int64_t head,
                        size_t *bytes) {
    size_t offset = 0, n = 0;
    bool in_written = false;
    (void)rkv__span_piece(&l->g, "cpu backend", session, part, head, &offset, &n, &in_written);
    if (bytes) *bytes = n;
    return (in_written ? l->written : l->kv) + offset;
}
static rkv_status cpu_span_read(void *ctx, const void *layer, int64_t session,
                                rkv_span_part part, int64_t head, void *dst) {
    (void)ctx;
    size_t bytes;
    const uint8_t *src = span_at(layer, session, part, head, &bytes);
    memcpy(dst, src, bytes);
    return RKV_OK;
}
static rkv_status cpu_span_write(void *ctx, void *layer, int64_t session, rkv_span_part part,
                                 int64_t head, const void *src) {
    (void)ctx;
    size_t bytes;
    uint8_t *dst = span_at(layer, session, part, head, &bytes);
    memcpy(dst, src, bytes);
    return RKV_OK;
}
static rkv_status cpu_span_copy(void *ctx, void *layer, int64_t src_session,
                                int64_t dst_session) {
    (void)ctx;
    cpu_layer *l = layer;
    if (src_session == dst_session) return RKV_OK;
    const int64_t slo = src_session * l->capacity, dlo = dst_session * l->capacity;
    const size_t bytes = (size_t)l->capacity * l->row_bytes;
    for (int c = 0; c < 2; c++)
        for (int64_t h = 0; h < l->g.n_kv_heads; h++)
            memcpy(rkv__slot_ptr(l, c, h, dlo), rkv__slot_ptr(l, c, h, slo), bytes);
    memcpy(l->written + dlo, l->written + slo, (size_t)l->capacity);
    return RKV_OK;
}
static rkv_status cpu_span_region(void *ctx, const void *layer, int64_t session,
                                  rkv_span_part part, int64_t head, void **ptr, int *device) {
    (void)ctx;
    *ptr = span_at(layer, session, part, head, NULL);
    *device = -1;
    return RKV_OK;
}

#define CPU_TABLE(NAME, ATTEND)                                                      \
    {                                                                                \
        .abi_version = RKV_BACKEND_ABI_VERSION, .struct_size = sizeof(rkv_backend_ops), \
        .name = NAME, .ctx_destroy = NULL, .limits = cpu_limits,                     \
        .layer_create = cpu_layer_create, .layer_destroy = cpu_layer_destroy,        \
        .alloc = cpu_alloc, .free = cpu_free, .copy_in = cpu_copy_in,                \
        .synchronize = cpu_synchronize, .check = NULL, .upsert = cpu_upsert,         \
        .visible_row = cpu_visible_row, .attend = ATTEND,                            \
        .attend_workspace_bytes = NULL, .reset = cpu_reset,                          \
        .span_read = cpu_span_read, .span_write = cpu_span_write,                    \
        .span_copy = cpu_span_copy, .span_region = cpu_span_region,                  \
        .host_alloc = NULL, .host_free = NULL,                                       \
    }
/* check NULL: everything is checked on the host; attend_workspace_bytes
 * NULL: the thread pool keeps its own scratch; host_alloc NULL: the core's
 * aligned heap memory. The reference table is the same but its attention,
 * the oracle's. */
static const rkv_backend_ops cpu_ops = CPU_TABLE("cpu", rkv__attend_run);
static const rkv_backend_ops cpu_reference_ops =
    CPU_TABLE("cpu-reference", rkv__attend_reference_run);

const rkv_backend_ops *rkv_backend_cpu(void) { return &cpu_ops; }
const rkv_backend_ops *rkv_backend_cpu_reference(void) { return &cpu_reference_ops; }

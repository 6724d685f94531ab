/* The CPU backend's table: layers are struct rkv__cpu_layer in host memory
 * (cpu/layer_cpu.c, cpu/attention*.c), so every operation is a direct
 * call, memory is malloc'd, copies are memcpy and there is nothing to wait
 * for. Every operation is unchecked (include/ringkv_backend.h): the core
 * checked the arguments once. (The check of a table handed to the core is
 * src/backend.c.) */
#include <stdlib.h>
#include <string.h>

#include "cpu_internal.h"

typedef struct rkv__cpu_layer cpu_layer;

/* A layer of its own storage, or over the caller's (storage->kv set);
 * *storage receives its pointers. */
static rkv_status cpu_layer_create(void *ctx, const rkv_geometry *g, rkv_backend_storage *storage,
                                   void **layer) {
    (void)ctx;
    cpu_layer *l = NULL;
    rkv_status st = rkv__cpu_layer_create(g, storage->kv, storage->written, &l);
    if (st != RKV_OK) return st;
    storage->kv = l->kv;
    storage->written = l->written;
    storage->error = NULL;
    *layer = l;
    return RKV_OK;
}
static void cpu_layer_destroy(void *ctx, void *layer) {
    (void)ctx;
    rkv__cpu_layer_destroy(layer);
}
static void cpu_limits(void *ctx, rkv_backend_limits *out) {
    (void)ctx;
    out->host_memory = 1; /* no other limit: any batch up to S, any d_head */
}

static rkv_status cpu_alloc(void *ctx, size_t bytes, void **ptr) {
    (void)ctx;
    const size_t rounded = (bytes + 63) & ~(size_t)63;
    void *p = rounded >= bytes && rounded ? aligned_alloc(64, rounded) : NULL;
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

static rkv_status cpu_upsert(void *ctx, void *layer, const void *kv, int64_t batch,
                             const int64_t *frame_pos, const int64_t *session_idx, int commit,
                             uint8_t *visible) {
    (void)ctx;
    rkv__upsert_run(layer, kv, batch, frame_pos, session_idx, commit, visible);
    return RKV_OK;
}
static rkv_status cpu_visible_row(void *ctx, const void *layer, const int64_t *session_idx,
                                  const int64_t *frame_pos, uint8_t *row) {
    (void)ctx;
    rkv__cpu_visible_row(layer, session_idx[0], frame_pos[0], row);
    return RKV_OK;
}
static rkv_status cpu_attend(void *ctx, const void *layer, const rkv_attention_args *a,
                             void *workspace, size_t workspace_bytes) {
    (void)ctx, (void)workspace, (void)workspace_bytes;
    return rkv__attend_run(layer, a, "rkv_layer_attend");
}

static rkv_status cpu_attend_reference(void *ctx, const void *layer, const rkv_attention_args *a,
                                       void *workspace, size_t workspace_bytes) {
    (void)ctx, (void)workspace, (void)workspace_bytes;
    return rkv__attend_reference_run(layer, a);
}

static rkv_status cpu_reset(void *ctx, void *layer, int64_t session) {
    (void)ctx;
    rkv__cpu_reset(layer, session);
    return RKV_OK;
}
static rkv_status cpu_span_read(void *ctx, const void *layer, int64_t session,
                                rkv_span_part part, int64_t head, void *dst) {
    (void)ctx;
    const cpu_layer *l = layer;
    memcpy(dst, rkv__cpu_span_at(l, session, part, head),
           part == RKV_SPAN_WRITTEN ? (size_t)l->capacity : (size_t)l->capacity * l->row_bytes);
    return RKV_OK;
}
static rkv_status cpu_span_write(void *ctx, void *layer, int64_t session, rkv_span_part part,
                                 int64_t head, const void *src) {
    (void)ctx;
    const cpu_layer *l = layer;
    memcpy(rkv__cpu_span_at(l, session, part, head), src,
           part == RKV_SPAN_WRITTEN ? (size_t)l->capacity : (size_t)l->capacity * l->row_bytes);
    return RKV_OK;
}
static rkv_status cpu_span_copy(void *ctx, void *layer, int64_t src_session,
                                int64_t dst_session) {
    (void)ctx;
    rkv__cpu_copy_span(layer, src_session, dst_session);
    return RKV_OK;
}
static rkv_status cpu_span_region(void *ctx, const void *layer, int64_t session,
                                  rkv_span_part part, int64_t head, void **ptr, int *device) {
    (void)ctx;
    *ptr = rkv__cpu_span_at(layer, session, part, head);
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
static const rkv_backend_ops cpu_ops = CPU_TABLE("cpu", cpu_attend);
static const rkv_backend_ops cpu_reference_ops = CPU_TABLE("cpu-reference", cpu_attend_reference);

const rkv_backend_ops *rkv_backend_cpu(void) { return &cpu_ops; }
const rkv_backend_ops *rkv_backend_cpu_reference(void) { return &cpu_reference_ops; }

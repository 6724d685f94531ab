/* The CPU backend's table: the model's layers are rkv_layer in host memory
 * (layer.c, cpu/attention*.c), so every operation is a direct call, memory
 * is malloc'd, copies are memcpy and there is nothing to wait for. (The
 * check of a table handed to rkv_model_create_with_backend is the core's:
 * src/backend.c.) */
#include <stdlib.h>
#include <string.h>

#include "cpu_internal.h"

/* A layer of its own storage; *storage receives its pointers. */
static rkv_status cpu_layer_create(void *ctx, const rkv_geometry *g, rkv_backend_storage *storage,
                                   void **layer) {
    (void)ctx;
    rkv_layer *l = NULL;
    rkv_status st = rkv_layer_create(g, &l);
    if (st != RKV_OK) return st;
    storage->kv = l->kv;
    storage->written = l->written;
    storage->error = NULL;
    *layer = l;
    return RKV_OK;
}
static void cpu_layer_destroy(void *ctx, void *layer) {
    (void)ctx;
    rkv_layer_destroy(layer);
}
static void cpu_limits(void *ctx, rkv_backend_limits *out) {
    (void)ctx;
    (void)out; /* none: any batch up to S, any d_head, element alignment */
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

/* The per-pass operations run the engines directly: the model checked
 * every argument once (include/ringkv_backend.h). */
static rkv_status cpu_upsert(void *ctx, void *layer, const void *kv, int64_t batch,
                             const int64_t *frame_pos, const int64_t *session_idx, int commit) {
    (void)ctx;
    rkv__upsert_run(layer, kv, batch, frame_pos, session_idx, commit, NULL);
    return RKV_OK;
}
static rkv_status cpu_attend(void *ctx, const void *layer, const rkv_attention_args *a,
                             void *workspace, size_t workspace_bytes) {
    (void)ctx, (void)workspace, (void)workspace_bytes;
    return rkv__attend_run(layer, a, "rkv_layer_attend");
}

static rkv_status cpu_reset(void *ctx, void *layer, int64_t session) {
    (void)ctx;
    return rkv_layer_reset(layer, session);
}
static rkv_status cpu_span_read(void *ctx, const void *layer, int64_t session,
                                rkv_span_part part, int64_t head, void *dst) {
    (void)ctx;
    return rkv_layer_read_span(layer, session, part, head, dst);
}
static rkv_status cpu_span_write(void *ctx, void *layer, int64_t session, rkv_span_part part,
                                 int64_t head, const void *src) {
    (void)ctx;
    return rkv_layer_write_span(layer, session, part, head, src);
}
static rkv_status cpu_span_copy(void *ctx, void *layer, int64_t src_session,
                                int64_t dst_session) {
    (void)ctx;
    return rkv_layer_copy_span(layer, src_session, dst_session);
}

static rkv_status cpu_span_region(void *ctx, const void *layer, int64_t session,
                                  rkv_span_part part, int64_t head, void **ptr, int *device) {
    (void)ctx;
    const rkv_layer *l = layer;
    size_t offset = 0, bytes = 0;
    bool in_written = false;
    rkv_status st = rkv__span_piece(&l->g, "cpu backend: span_region", session, part, head,
                                    &offset, &bytes, &in_written);
    if (st != RKV_OK) return st;
    *ptr = (in_written ? l->written : l->kv) + offset;
    *device = -1;
    return RKV_OK;
}

static const rkv_backend_ops cpu_ops = {
    .abi_version = RKV_BACKEND_ABI_VERSION,
    .struct_size = sizeof(rkv_backend_ops),
    .name = "cpu",
    .ctx_destroy = NULL,
    .limits = cpu_limits,
    .layer_create = cpu_layer_create,
    .layer_destroy = cpu_layer_destroy,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .copy_in = cpu_copy_in,
    .synchronize = cpu_synchronize,
    .check = NULL, /* everything is checked on the host */
    .upsert = cpu_upsert,
    .attend = cpu_attend,
    .attend_workspace_bytes = NULL, /* the thread pool keeps its own scratch */
    .reset = cpu_reset,
    .span_read = cpu_span_read,
    .span_write = cpu_span_write,
    .span_copy = cpu_span_copy,
    .span_region = cpu_span_region,
    .host_alloc = NULL, /* the core's aligned heap memory */
    .host_free = NULL,
};

const rkv_backend_ops *rkv_backend_cpu(void) { return &cpu_ops; }

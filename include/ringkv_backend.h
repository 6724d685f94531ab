/*
 * ringkv backend SPI: how a backend library plugs its layers into rkv_model.
 *
 * A model (ringkv.h, "A whole model") keeps the sessions, request ids and
 * frame clocks on the host, and reaches layer storage only through a table
 * of operations, the way SQLite reaches files through an sqlite3_vfs and
 * ggml reaches devices through a backend interface. The core library
 * (libringkv) brings the CPU table (rkv_backend_cpu); libringkv_cuda brings
 * the CUDA one and registers it by passing it to
 * rkv_model_create_with_backend (rkv_model_create_cuda does that). Every
 * name in this header is public and exported, so a backend built as its own
 * shared library links against the core's public symbols only (nothing
 * private crosses the library boundary; docs/backends.md).
 *
 * Data walks one way: the model checks sessions and clocks on the host and
 * hands the table session indices and clocks that are already valid; below
 * the table nothing knows request ids, above it nothing knows the backend's
 * memory (docs/backends.md).
 *
 * Terms used below:
 *  - BACKEND memory: memory the backend's kernels read (host memory for the
 *    CPU backend, device memory for CUDA), allocated by `alloc`.
 *  - "capture-safe": the operation only enqueues work on the backend's
 *    stream: it never allocates, frees, synchronizes or copies between host
 *    and backend memory, so that a CUDA graph can record it and replay it.
 *  - A layer handle is the backend's own (rkv_layer * for the CPU table,
 *    rkv_cuda_layer * for CUDA), passed back unchanged.
 * Every operation that returns rkv_status sets its message with
 * rkv_error_set on failure (read back through rkv_last_error()).
 */
#ifndef RINGKV_BACKEND_H
#define RINGKV_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "ringkv.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The version of rkv_backend_ops this header describes. A later version
 * only appends members; a table declares the version and the size it was
 * compiled with, and the core reads only what both know (members a table
 * lacks count as NULL). */
#define RKV_BACKEND_ABI_VERSION 2

typedef struct rkv_backend_ops {
    uint32_t abi_version; /* RKV_BACKEND_ABI_VERSION of the header the table
                             was written for (1 .. the core's)            */
    uint32_t struct_size; /* sizeof(rkv_backend_ops) where it was compiled */
    const char *name;     /* "cpu", "cuda": static string                 */
    int64_t max_batch;    /* largest B of one per-pass call; 0: no limit
                             beyond num_sessions                          */

    /* Frees the backend context given to rkv_model_create_with_backend
     * (called once by rkv_model_destroy, after every layer and buffer was
     * freed). NULL: nothing to free. */
    void (*ctx_destroy)(void *ctx);

    /* ---- layers (not capture-safe) ---------------------------------------
     * layer_create: a layer of geometry g with the CPU layout of SEM 2
     * (K/V [2][H][N][D] zeroed, written bits: ring 0, scratch 1).
     * layer_destroy: frees it (NULL is a no-op).
     * layer_memory_bytes: its resident K/V bytes (2*H*N*D*sizeof(dtype)). */
    rkv_status (*layer_create)(void *ctx, const rkv_geometry *g, void **layer);
    void (*layer_destroy)(void *ctx, void *layer);
    size_t (*layer_memory_bytes)(void *ctx, const void *layer);

    /* ---- memory and stream (not capture-safe) -----------------------------
     * alloc: `bytes` (> 0) of BACKEND memory, 16-byte aligned, contents
     * undefined, into *ptr. free: releases it (NULL is a no-op; waits for
     * work that may still use it).
     * copy_in: copies `bytes` from HOST `src` to BACKEND `dst`, ordered after
     * the work already enqueued and before the work enqueued later; `src`
     * may be reused as soon as the call returns (the CUDA table stages it
     * in pinned memory and copies asynchronously on its stream).
     * synchronize: waits until every enqueued operation finished; reports
     * an asynchronous failure of one of them.
     * check: reports (and clears) an error that a capture-safe call on
     * `layer` found on the device since the last check (may synchronize);
     * RKV_OK where the backend checks everything on the host. */
    rkv_status (*alloc)(void *ctx, size_t bytes, void **ptr);
    void (*free)(void *ctx, void *ptr);
    rkv_status (*copy_in)(void *ctx, void *dst, const void *src, size_t bytes);
    rkv_status (*synchronize)(void *ctx);
    rkv_status (*check)(void *ctx, void *layer);

    /* ---- per pass (capture-safe) ------------------------------------------
     * upsert: rkv_layer_upsert's operation for B rows (visible = NULL); kv,
     * frame_pos [B] and session_idx [B] in BACKEND memory (the model passes
     * the batch buffers that rkv_model_begin_frame filled).
     * attend_check: every host-side check of `attend` for these arguments,
     * without running anything (a step checks both halves first).
     * attend: rkv_layer_attend's operation; args->q/out/session_idx/
     * frame_pos in BACKEND memory, args->visible NULL, args->batch = B;
     * `workspace` (BACKEND memory of workspace_bytes, or NULL/0) is the
     * model's, sized at creation by attend_workspace_bytes. */
    rkv_status (*upsert)(void *ctx, void *layer, const void *kv, rkv_dtype kv_dtype,
                         int64_t batch, const int64_t *frame_pos,
                         const int64_t *session_idx, int commit);
    rkv_status (*attend_check)(void *ctx, const void *layer, const rkv_attention_args *args);
    rkv_status (*attend)(void *ctx, const void *layer, const rkv_attention_args *args,
                         void *workspace, size_t workspace_bytes);
    /* Workspace bytes `attend` can use on this layer for any batch of 1 ..
     * max_batch rows of n_q_heads query heads and tokens_per_frame queries
     * (0: none needed). Host only. */
    size_t (*attend_workspace_bytes)(void *ctx, const void *layer, int64_t max_batch,
                                     int64_t n_q_heads);

    /* ---- sessions (not capture-safe) --------------------------------------
     * reset: rkv_layer_reset's operation (ordered after enqueued work).
     * span_read / span_write / span_copy: rkv_layer_read_span /
     * rkv_layer_write_span / rkv_layer_copy_span's operations (HOST dst /
     * src; ordered after enqueued work; read and write return when the host
     * buffer may be used again). */
    rkv_status (*reset)(void *ctx, void *layer, int64_t session);
    rkv_status (*span_read)(void *ctx, const void *layer, int64_t session, rkv_span_part part,
                            int64_t head, void *dst);
    rkv_status (*span_write)(void *ctx, void *layer, int64_t session, rkv_span_part part,
                             int64_t head, const void *src);
    rkv_status (*span_copy)(void *ctx, void *layer, int64_t src_session, int64_t dst_session);

    /* ---- version 2: sessions that move (optional) --------------------------
     * span_region: where piece (part, head) of `session`'s span lives in the
     * layer's storage, without copying: *ptr (BACKEND memory, valid while
     * the layer lives) and *device (-1: host memory, else the CUDA device
     * ordinal); its bytes are those of span_read's piece. The same checks
     * as span_read. Host only. NULL: the backend exposes no regions
     * (rkv_model_session_regions refuses; offload and snapshots still
     * work through span_read / span_write).
     * host_alloc / host_free: HOST memory for session images, 64-byte
     * aligned, that span_read / span_write copy fastest to and from (CUDA:
     * pinned, cudaMallocHost). NULL: the core uses aligned heap memory. */
    rkv_status (*span_region)(void *ctx, const void *layer, int64_t session, rkv_span_part part,
                              int64_t head, void **ptr, int *device);
    rkv_status (*host_alloc)(void *ctx, size_t bytes, void **ptr);
    void (*host_free)(void *ctx, void *ptr);
} rkv_backend_ops;

/* The CPU backend's table (static; layers are rkv_layer, BACKEND memory is
 * host memory, copy_in is memcpy, synchronize and check return RKV_OK). Its
 * context is NULL. rkv_model_create(cfg, out) is
 * rkv_model_create_with_backend(cfg, rkv_backend_cpu(), NULL, out). */
RKV_API const rkv_backend_ops *rkv_backend_cpu(void);

/* Creates a model whose layers live in `ops`'s backend. `ops` must stay
 * valid for the model's life (a static table); the model keeps a copy of
 * the members both sides know, and the pointer as the backend's identity
 * (rkv_model_backend). On success the model owns `ctx` and calls
 * ops->ctx_destroy(ctx) from rkv_model_destroy; on failure the caller still
 * owns it. At creation the model allocates, through the table, every layer,
 * its batch buffers (2 * num_sessions int64 of BACKEND memory) and the
 * attention workspace (the largest attend_workspace_bytes over its layers).
 * Errors: RKV_ERR_NULL (cfg, ops, out), an invalid config (as
 * rkv_model_create), RKV_ERR_INVALID_ARG (ops->abi_version 0 or newer than
 * RKV_BACKEND_ABI_VERSION, struct_size too small for that version, a
 * required member NULL, max_batch < 0), and whatever the table's layer_create
 * or alloc report (RKV_ERR_NO_MEMORY, ...); *out untouched on failure. */
RKV_API rkv_status rkv_model_create_with_backend(const rkv_model_config *cfg,
                                                 const rkv_backend_ops *ops, void *ctx,
                                                 rkv_model **out);

/* The table the model was created with (the pointer passed to
 * rkv_model_create_with_backend; rkv_backend_cpu() for rkv_model_create);
 * NULL for NULL. */
RKV_API const rkv_backend_ops *rkv_model_backend(const rkv_model *model);
/* The backend's handle of layer i (owned by the model); NULL when i is out
 * of range or model is NULL. */
RKV_API void *rkv_model_backend_layer(const rkv_model *model, int64_t layer);

/* Records a message for rkv_last_error() on the calling thread (printf
 * format, truncated to 511 bytes) and returns `status`: the error reporting
 * of every ringkv library, exported so that a backend in another shared
 * library reports through the same thread-local message. */
RKV_API rkv_status rkv_error_set(rkv_status status, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

#ifdef __cplusplus
}
#endif

#endif /* RINGKV_BACKEND_H */

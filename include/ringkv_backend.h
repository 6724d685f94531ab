/*
 * ringkv backend SPI: how a backend library plugs its layers into rkv_model.
 *
 * A model or layer keeps sessions, request ids and clocks on the host and
 * reaches layer storage only through a table of operations, as SQLite
 * reaches files through an sqlite3_vfs and ggml devices through a backend
 * interface: below the table nothing knows request ids, above it nothing
 * knows the backend's memory. libringkv brings the CPU table
 * (rkv_backend_cpu), libringkv_cuda the CUDA one (not yet run on a GPU;
 * rkv_model_create_cuda passes it to rkv_model_create_with_backend). Every
 * name here is public and exported: a backend in its own shared library
 * links against the core's public symbols only (docs/backends.md).
 *
 * Terms used below:
 *  - BACKEND memory (ringkv.h's conventions) is allocated by `alloc`.
 *  - "capture-safe": the operation only enqueues work on the backend's
 *    stream: it never allocates, frees, synchronizes or copies between host
 *    and backend memory, so that a CUDA graph can record it and replay it.
 *  - A layer handle (the operations' `layer`) is the backend's own, behind
 *    the public rkv_layer (rkv_layer_backend_handle), passed back
 *    unchanged.
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

/* The version of rkv_backend_ops this header describes; the core accepts
 * tables of exactly this version (CHANGELOG.md: 0.2.0 changed it). */
#define RKV_BACKEND_ABI_VERSION 3

/* What a backend can run, asked once per model (limits) and applied by the
 * core's checks above the table (one check per call). 0 means no limit. */
typedef struct rkv_backend_limits {
    int64_t max_batch;    /* largest B of one per-pass call (begin_frame
                             refuses more); 0: num_sessions               */
    int64_t max_d_head;   /* largest d_head an attention runs on          */
    int64_t max_kv_heads; /* largest n_kv_heads an attention runs on      */
    size_t align;         /* byte alignment of the BACKEND buffers of the
                             per-pass calls (kv, q, out, visibility rows);
                             0: their element size                        */
    int32_t host_memory;  /* nonzero: BACKEND memory is host memory, whose
                             session ids and clocks the core reads and
                             checks (the CPU); 0: device memory, whose
                             values the kernels check (the check operation
                             reports them)                                */
} rkv_backend_limits;

/* One layer's storage, in the layout of SEM 2 (BACKEND memory). */
typedef struct rkv_backend_storage {
    void *kv;         /* [2][H][N][D] in the storage dtype                 */
    uint8_t *written; /* [N] 0/1                                           */
    int32_t *error;   /* the word a backend that checks device values
                         records the first bad row in (CUDA); NULL where the
                         backend keeps none                                */
} rkv_backend_storage;

/* The contract of every operation below: UNCHECKED. The core (the public
 * rkv_layer_* / rkv_model_* calls) checks every argument once, above the
 * table: indices in range, B within 1..limits.max_batch, sessions distinct
 * and held, clocks >= 0 (host values), dtypes, alignment, buffers that must
 * not overlap, the attention arguments (src/attention_check.h). An
 * operation reports only what it alone can see: a failed allocation, copy
 * or launch, device memory that is not the current device's, and (check)
 * a bad row its kernels found in device values. */
typedef struct rkv_backend_ops {
    uint32_t abi_version; /* RKV_BACKEND_ABI_VERSION of the header the table
                             was written for                              */
    uint32_t struct_size; /* sizeof(rkv_backend_ops) where it was compiled */
    const char *name;     /* "cpu", "cuda": static string                 */

    /* Frees the context given to rkv_model_create_with_backend (once, by
     * rkv_model_destroy, after its layers and buffers). NULL: nothing. */
    void (*ctx_destroy)(void *ctx);
    /* The backend's limits (into *out, zeroed by the caller). NULL: none. */
    void (*limits)(void *ctx, rkv_backend_limits *out);

    /* ---- layers (not capture-safe) ---------------------------------------
     * layer_create: a layer of geometry g (valid) with the layout of SEM 2:
     * storage->kv NULL, its own storage (as rkv_layer_create's); else over
     * the caller's *storage, as rkv_layer_wrap says. On return *storage
     * holds the layer's storage pointers (BACKEND memory, valid until
     * layer_destroy).
     * layer_destroy: frees it (NULL is a no-op). */
    rkv_status (*layer_create)(void *ctx, const rkv_geometry *g, rkv_backend_storage *storage,
                               void **layer);
    void (*layer_destroy)(void *ctx, void *layer);

    /* ---- memory and stream (not capture-safe) -----------------------------
     * alloc: `bytes` (> 0) of BACKEND memory, 16-byte aligned, contents
     * undefined, into *ptr. free: releases it (NULL is a no-op; waits for
     * work that may still use it).
     * copy_in: copies `bytes` from HOST `src` to BACKEND `dst`, in stream
     * order; `src` may be reused when the call returns (CUDA: staged in
     * pinned memory, copied asynchronously).
     * synchronize: waits for every enqueued operation; reports an
     * asynchronous failure of one.
     * check: reports (and clears) the errors that capture-safe calls on
     * layers[0 .. n_layers) found in device values since the last check,
     * reading every layer's word at once (CUDA: one copy, one wait); on
     * failure *bad_layer is the first such layer, whose message is set.
     * NULL where the backend checks everything on the host. */
    rkv_status (*alloc)(void *ctx, size_t bytes, void **ptr);
    void (*free)(void *ctx, void *ptr);
    rkv_status (*copy_in)(void *ctx, void *dst, const void *src, size_t bytes);
    rkv_status (*synchronize)(void *ctx);
    rkv_status (*check)(void *ctx, void *const *layers, int64_t n_layers, int64_t *bad_layer);

    /* ---- per pass (capture-safe) ------------------------------------------
     * upsert, visible_row, attend: the operations of rkv_layer_upsert,
     * rkv_layer_visible_row and rkv_layer_attend, their arguments as there
     * (BACKEND memory; the model passes its batch buffers and visible NULL;
     * args in this library's layout, struct_size = sizeof). `workspace`
     * (BACKEND, workspace_bytes, or NULL/0): the model's, sized at creation
     * by attend_workspace_bytes, or the layer call's args->workspace. */
    rkv_status (*upsert)(void *ctx, void *layer, const void *kv, int64_t batch,
                         const int64_t *frame_pos, const int64_t *session_idx, int commit,
                         uint8_t *visible);
    rkv_status (*visible_row)(void *ctx, const void *layer, const int64_t *session_idx,
                              const int64_t *frame_pos, uint8_t *row);
    rkv_status (*attend)(void *ctx, const void *layer, const rkv_attention_args *args,
                         void *workspace, size_t workspace_bytes);
    /* Workspace bytes `attend` would use for these (checked) arguments to
     * split the keys as it prefers (0: none). Host only. NULL: none. */
    size_t (*attend_workspace_bytes)(void *ctx, const void *layer,
                                     const rkv_attention_args *args);

    /* ---- sessions (not capture-safe) --------------------------------------
     * reset: rkv_layer_reset's operation (ordered after enqueued work).
     * span_read / span_write / span_copy: rkv_layer_read_span /
     * rkv_layer_write_span / rkv_layer_copy_span's operations, as there
     * (ordered after enqueued work; written bits already checked).
     * span_region: where piece (part, head) of `session`'s span lives in the
     * layer's storage, without copying: *ptr (BACKEND memory, valid while
     * the layer lives) and *device (-1: host memory, else the CUDA device
     * ordinal); its bytes are those of span_read's piece. Host only. NULL:
     * the backend exposes no regions (rkv_model_session_regions refuses;
     * offload and snapshots still work through span_read / span_write).
     * host_alloc / host_free: HOST memory for session images, 64-byte
     * aligned, that span_read / span_write copy fastest to and from (CUDA:
     * pinned, cudaMallocHost). NULL: the core uses aligned heap memory. */
    rkv_status (*reset)(void *ctx, void *layer, int64_t session);
    rkv_status (*span_read)(void *ctx, const void *layer, int64_t session, rkv_span_part part,
                            int64_t head, void *dst);
    rkv_status (*span_write)(void *ctx, void *layer, int64_t session, rkv_span_part part,
                             int64_t head, const void *src);
    rkv_status (*span_copy)(void *ctx, void *layer, int64_t src_session, int64_t dst_session);
    rkv_status (*span_region)(void *ctx, const void *layer, int64_t session, rkv_span_part part,
                              int64_t head, void **ptr, int *device);
    rkv_status (*host_alloc)(void *ctx, size_t bytes, void **ptr);
    void (*host_free)(void *ctx, void *ptr);
} rkv_backend_ops;

/* The CPU backend's table (static; context NULL; BACKEND memory is host
 * memory, copy_in is memcpy, no check). rkv_model_create(cfg, out) is
 * rkv_model_create_with_backend(cfg, rkv_backend_cpu(), NULL, out). */
RKV_API const rkv_backend_ops *rkv_backend_cpu(void);

/* Creates a model whose layers live in `ops`'s backend. `ops` must stay
 * valid for the model's life (a static table); the model keeps a copy of
 * the members both sides know, and the pointer as the backend's identity
 * (what rkv_layer_backend_handle gives for each rkv_model_layer). On
 * success the model owns `ctx` (ops->ctx_destroy(ctx) from
 * rkv_model_destroy); on failure the caller still does. The model
 * allocates, through the table, every layer, its batch buffers
 * (2 * num_sessions int64 of BACKEND memory) and the attention workspace
 * (the largest attend_workspace_bytes over its layers). Errors: an invalid
 * config (as rkv_model_create), RKV_ERR_INVALID_ARG (ops->abi_version
 * other than RKV_BACKEND_ABI_VERSION, struct_size too small, a required
 * member NULL, a negative limit), the table's layer_create or alloc
 * (RKV_ERR_NO_MEMORY, ...). */
RKV_API rkv_status rkv_model_create_with_backend(const rkv_model_config *cfg,
                                                 const rkv_backend_ops *ops, void *ctx,
                                                 rkv_model **out);

/* ---- layers on a backend ------------------------------------------------
 * These make an rkv_layer (ringkv.h: every rkv_layer_* call works on it)
 * on any table, with its own storage or over the caller's. `ops` must
 * stay valid for the layer's life (a static table) and `ctx` too (the
 * caller keeps owning it: ops->ctx_destroy(ctx) after the last layer on it
 * is destroyed). rkv_layer_wrap takes ops NULL as the CPU table (ctx NULL);
 * rkv_layer_create_on refuses it (RKV_ERR_NULL: rkv_layer_create is the CPU
 * one). Not capture-safe except where a backend says so (CUDA:
 * rkv_layer_wrap with an error word allocates host memory only).
 *  rkv_layer_create_on: the layer's own storage, as rkv_layer_create's
 *    (CUDA's table and a context: rkv_cuda_backend, ringkv_cuda.h).
 *  rkv_layer_wrap: a layer over the caller's storage (storage->kv:
 *    BACKEND [2][H][N][D] in g->dtype, storage->written: BACKEND [N] 0/1
 *    with every scratch slot 1 and frames whole -- not checked: other
 *    contents give other visibility, never an access outside the buffers;
 *    both aligned to the backend's limits.align, at least the element
 *    size; storage->error: a BACKEND int32 error word, zeroed before first
 *    use, or NULL: one of the layer's own (CUDA: allocated, not
 *    capture-safe); ignored on the CPU). The layer reads and writes
 *    exactly those buffers and never frees them: what a framework that
 *    holds the memory itself (PyTorch tensors) uses.
 * Errors: RKV_ERR_NULL (g, out, storage or its kv / written), invalid
 * geometry (rkv_geometry_check), an unusable table (as
 * rkv_model_create_with_backend), RKV_ERR_INVALID_ARG (misaligned
 * storage), and the backend's (RKV_ERR_NO_MEMORY, RKV_ERR_RANGE for a
 * context on no device, ...). */
RKV_API rkv_status rkv_layer_create_on(const rkv_backend_ops *ops, void *ctx,
                                       const rkv_geometry *g, rkv_layer **out);
RKV_API rkv_status rkv_layer_wrap(const rkv_backend_ops *ops, void *ctx, const rkv_geometry *g,
                                  const rkv_backend_storage *storage, rkv_layer **out);
/* The backend's own handle of a layer (what the table's operations take),
 * with its table in *ops and context in *ctx (either may be NULL); NULL for
 * NULL. For a backend's own calls on a layer (rkv_cuda_attention_describe).
 * On a model's layer (rkv_model_layer) *ops is the pointer the model was
 * created with (rkv_backend_cpu() for rkv_model_create). */
RKV_API void *rkv_layer_backend_handle(const rkv_layer *layer, const rkv_backend_ops **ops,
                                       void **ctx);

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

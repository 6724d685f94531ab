/* Private: the model's state, shared by model.c (layers, sessions, forks,
 * in-memory snapshots), model_frame.c (the batch and the per-pass calls)
 * and snapshot_file.c (snapshot files). Layer storage is reached only
 * through the backend table. */
#ifndef RKV_MODEL_INTERNAL_H
#define RKV_MODEL_INTERNAL_H

#include <stdatomic.h>

#include "internal.h"

typedef struct rkv__session_state {
    bool held;
    bool importing;         /* reserved for an import (not held, not free;
                               request_id is the incoming session's)      */
    uint64_t import_meta;   /* the XXH3-64 of the metadata it was reserved
                               with (model_regions.c)                     */
    char request_id[RKV_MAX_REQUEST_ID];
    int64_t last_committed; /* -1: no clock                                */
    int64_t row;            /* its row in the current batch, or -1         */
} rkv__session_state;

/* A paged-out session's reservation (model_offload.c). */
typedef struct rkv__offloaded {
    char request_id[RKV_MAX_REQUEST_ID];
    int64_t last_committed;
    uint64_t data_xxh3;   /* of the image rkv_model_offload wrote: with the
                             clock, what page-in requires of an image (its
                             header may carry keys a tool added) */
} rkv__offloaded;

/* The current batch (ringkv.h, "Frames"). n == 0: none. */
typedef struct rkv__batch {
    int64_t n;                /* B                                          */
    bool open;                /* its frame has not ended yet                */
    int64_t *host;            /* HOST [2S]: sessions [0, B), clocks [B, 2B) */
    int64_t *stage;           /* HOST [2S]: begin_frame's next batch        */
    int64_t *dev;             /* BACKEND [2S], the same layout: the per-pass
                                 calls pass dev and dev + B to the kernels */
    uint8_t *committed;       /* [n_layers] flags of the open frame         */
    int64_t layers_committed; /* distinct layers committed in it            */
} rkv__batch;

struct rkv_model {
    rkv_model_config cfg;
    rkv_backend_ops ops;          /* the adopted table (rkv__backend_adopt) */
    const rkv_backend_ops *ops_id; /* the pointer passed at creation        */
    void *ctx;                    /* the backend's context (owned)          */
    rkv_backend_limits limits;    /* the table's limits (asked at creation) */
    void **layers;                /* [n_layers] backend layer handles       */
    struct rkv_layer *handles;    /* [n_layers] the public handles over them
                                     (rkv_model_layer; borrowed), with
                                     their storage (BACKEND)                */
    rkv__session_state *sessions; /* [S]                                    */
    rkv__batch batch;
    void *workspace;              /* BACKEND attention workspace, or NULL   */
    size_t workspace_bytes;
    rkv__offloaded *offloaded;    /* [offload_cap]: entries [0, offload_used)
                                     are in use (model_offload.c)           */
    int64_t offload_cap, offload_used;
    rkv__buf *storage;            /* [n_storage] the layers' storage in host
                                     memory (span_region, adjacent pieces
                                     merged; none for device memory or a
                                     backend without span_region): what a
                                     caller's host buffer must not overlap */
    size_t n_storage;
    char (*storage_names)[64];    /* [n_storage] their names               */
    struct rkv__snap_slot *snap;  /* [S] the in-memory images' header per
                                     session (snapshot_file.c)             */
    _Atomic size_t snap_header_len; /* the longest header, once known (0: not
                                       yet; snapshot_file.c)              */
};

/* RKV_OK when `session` is in range and claimed; otherwise RKV_ERR_NULL,
 * RKV_ERR_RANGE or RKV_ERR_STATE with a message starting with `what`. */
rkv_status rkv__model_check_held(const rkv_model *m, const char *what, int64_t session);
/* The same, and not a row of an open batch (snapshots, restores, forks). */
rkv_status rkv__model_check_between_frames(const rkv_model *m, const char *what,
                                           int64_t session);

/* Zeroes a session in every layer and drops its clock (it stays claimed;
 * rkv__model_set_clock's batch rule). A backend failure is reported after
 * the rest is done. */
rkv_status rkv__model_clear_session(rkv_model *m, int64_t session);
/* Installs a clock (-1: none); closes the current batch when the session is
 * one of its rows (rkv__model_close_batch, model_frame.c: its rows leave
 * it, an open frame is abandoned with no clock change). */
void rkv__model_set_clock(rkv_model *m, int64_t session, int64_t last_committed);
void rkv__model_close_batch(rkv_model *m);

/* Geometry of layer i: its handle's (valid: the config was checked at creation). */
rkv_geometry rkv__model_layer_geometry(const rkv_model *m, int64_t layer);

/* Bytes of one piece of a session's span on layer i (the HOST buffer that
 * ops.span_read / span_write of m->layers[i] take). */
size_t rkv__model_span_bytes(const rkv_model *m, int64_t layer, rkv_span_part part);
/* Region k of a session (model_regions.c), in rkv_model_session_regions'
 * order: per layer K of each head, V of each head, the written bits. */
void rkv__model_region_at(const rkv_model *m, size_t k, int64_t *layer, rkv_span_part *part,
                          int64_t *head);
/* The host address of a piece of a session's span when the backend exposes
 * it (rkv_backend_ops.span_region, host memory), else NULL: the piece is
 * then copied through span_read / span_write. */
uint8_t *rkv__model_host_region(const rkv_model *m, int64_t layer, int64_t session,
                                rkv_span_part part, int64_t head);
/* Bytes of every region of one session (= a snapshot's data section). */
uint64_t rkv__model_session_data_bytes(const rkv_model *m);
/* The largest piece over every layer and part: the bounce buffer a whole
 * session's copy needs. */
size_t rkv__model_max_span_bytes(const rkv_model *m);

/* The caller's host buffers of a model call against each other and the
 * model's storage (rkv_model.storage): RKV_ERR_INVALID_ARG naming the first
 * pair that shares a byte. `written`: the ones the call writes;
 * writes_model: it writes the model's storage (restore, page-in, import). */
rkv_status rkv__model_check_bufs(const rkv_model *m, const char *what, const rkv__buf *written,
                                 size_t n_written, const rkv__buf *read, size_t n_read,
                                 bool writes_model);

/* Prefixes the backend's message with `what` ("what: <message>"), keeping
 * the status. */
rkv_status rkv__model_backend_fail(rkv_status st, const char *what);

/* ---- request ids (model.c) ----
 * RKV_OK when id is a NUL-terminated string of 1 .. RKV_MAX_REQUEST_ID-1
 * bytes; RKV_ERR_NULL / RKV_ERR_INVALID_ARG naming `what` otherwise. */
rkv_status rkv__model_check_request_id(const char *what, const char *id);
/* The session of request id held (importing false) or reserved for its
 * import (true), or -1. */
int64_t rkv__model_find(const rkv_model *m, const char *id, bool importing);
/* RKV_ERR_STATE (message starting with `what`) when id is held, paged out
 * or reserved for an import here; RKV_OK when it is none of these. */
rkv_status rkv__model_id_unused(const rkv_model *m, const char *what, const char *id);
/* The lowest slot neither held nor reserved for import, or -1. */
int64_t rkv__model_free_slot(const rkv_model *m);
/* Index of id's entry in the offload table, or -1; entry i leaves the
 * table (the last one takes its place) (model_offload.c). */
int64_t rkv__model_offloaded_find(const rkv_model *m, const char *id);
void rkv__model_offloaded_remove(rkv_model *m, int64_t i);

/* ---- copies of pieces (copy_hash.c) ----
 * Copies every piece, in order, and feeds the copied bytes, in order, to
 * the XXH3-64 stream xxh3_state (an XXH3_state_t *, or NULL: copy only);
 * large copies hash on a second thread that follows the copy. */
typedef struct rkv__piece {
    uint8_t *dst;
    const uint8_t *src;
    size_t bytes;
} rkv__piece;
void rkv__copy_pieces_hashed(const rkv__piece *p, size_t n, void *xxh3_state);

/* ---- the in-memory images' per-session header cache (snapshot_file.c) ----
 * Allocated with the model (RKV_ERR_NO_MEMORY), freed with it (NULL safe). */
rkv_status rkv__snapshot_cache_create(rkv_model *m, const char *what);
void rkv__snapshot_cache_free(rkv_model *m);

/* ---- snapshot images (snapshot_file.c) for offload and page-in ----
 * rkv_model_save_session_mem / rkv_model_save_session with `what` naming
 * the call, the header padded to header_len bytes when that is not 0
 * (rkv_model_snapshot's one size), and the image's data checksum in
 * *data_xxh3 when not NULL. */
rkv_status rkv__snapshot_save_mem(const rkv_model *model, int64_t session, const char *what,
                                  void *buf, size_t buf_bytes, size_t header_len,
                                  size_t *file_bytes, uint64_t *data_xxh3);
rkv_status rkv__snapshot_save_file(const rkv_model *model, int64_t session, const char *what,
                                   const char *path, uint64_t *data_xxh3);
/* Page-in's reading: the image in memory (buf, bytes) or the file `path`
 * (when not NULL), its header and geometry checked; then admit(arg, info,
 * &slot) decides (reservation, a free slot), then the data is copied into
 * that free slot while it is hashed, once; a bad data checksum or written
 * bits zero the slot again (RKV_ERR_FORMAT). On RKV_OK *info is the
 * image's and *slot the slot (still not held: the caller makes it so). */
typedef rkv_status (*rkv__page_in_admit)(void *arg, const rkv_snapshot_info *info,
                                         int64_t *slot);
rkv_status rkv__snapshot_page_in(rkv_model *m, const char *what, const void *buf, size_t bytes,
                                 const char *path, rkv__page_in_admit admit, void *arg,
                                 rkv_snapshot_info *info, int64_t *slot);

#endif

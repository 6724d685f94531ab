/* Private: the model's state, shared by model.c (layers, sessions, forks,
 * in-memory snapshots), model_frame.c (the batch and the per-pass calls)
 * and snapshot_file.c (snapshot files). Layer storage is reached only
 * through the backend table (backend.h). */
#ifndef RKV_MODEL_INTERNAL_H
#define RKV_MODEL_INTERNAL_H

#include "backend.h"

typedef struct rkv__session_state {
    bool held;
    char request_id[RKV_MAX_REQUEST_ID];
    int64_t last_committed; /* -1: no clock                                */
    int64_t row;            /* its row in the current batch, or -1         */
} rkv__session_state;

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
    rkv_backend_ops ops;          /* the adopted table (backend.h)          */
    const rkv_backend_ops *ops_id; /* the pointer passed at creation        */
    void *ctx;                    /* the backend's context (owned)          */
    void **layers;                /* [n_layers] backend layer handles       */
    rkv__session_state *sessions; /* [S]                                    */
    rkv__batch batch;
    void *workspace;              /* BACKEND attention workspace, or NULL   */
    size_t workspace_bytes;
};

/* RKV_OK when `session` is in range and claimed; otherwise RKV_ERR_NULL,
 * RKV_ERR_RANGE or RKV_ERR_STATE with a message starting with `what`. */
rkv_status rkv__model_check_held(const rkv_model *m, const char *what, int64_t session);

/* Like rkv__model_check_held, and the session must not be a row of an open
 * batch (RKV_ERR_STATE): what snapshots, restores and forks need. */
rkv_status rkv__model_check_between_frames(const rkv_model *m, const char *what,
                                           int64_t session);

/* Zeroes a session in every layer and drops its clock (it stays claimed);
 * closes the current batch when the session is one of its rows (an open
 * frame is abandoned). A backend failure is reported after the rest is
 * done (the session's clock is dropped whatever happens). */
rkv_status rkv__model_clear_session(rkv_model *m, int64_t session);

/* Installs a restored clock: last committed frame `last_committed` (-1: no
 * clock); closes the current batch when the session is one of its rows. */
void rkv__model_set_clock(rkv_model *m, int64_t session, int64_t last_committed);

/* Closes the current batch (model_frame.c): its rows leave it; an open
 * frame is abandoned (no clock changes). */
void rkv__model_close_batch(rkv_model *m);

/* Geometry of layer i (valid: the config was checked at creation). */
rkv_geometry rkv__model_layer_geometry(const rkv_model *m, int64_t layer);

/* A piece of a session's span on layer i through the backend (HOST buf of
 * rkv__model_span_bytes bytes); the backend's message on failure. */
size_t rkv__model_span_bytes(const rkv_model *m, int64_t layer, rkv_span_part part);
rkv_status rkv__model_span_read(const rkv_model *m, int64_t layer, int64_t session,
                                rkv_span_part part, int64_t head, void *buf);
rkv_status rkv__model_span_write(rkv_model *m, int64_t layer, int64_t session,
                                 rkv_span_part part, int64_t head, const void *buf);
/* The largest piece over every layer and part: the bounce buffer a whole
 * session's copy needs. */
size_t rkv__model_max_span_bytes(const rkv_model *m);

/* Prefixes the backend's message with `what` ("what: <message>"), keeping
 * the status. */
rkv_status rkv__model_backend_fail(rkv_status st, const char *what);

#endif

/* Private: the model's state, shared by model.c (sessions, clocks, frames,
 * in-memory snapshots, forks) and snapshot_file.c (snapshot files). */
#ifndef RKV_MODEL_INTERNAL_H
#define RKV_MODEL_INTERNAL_H

#include "internal.h"

typedef struct rkv__session_state {
    bool held;
    char request_id[RKV_MAX_REQUEST_ID];
    int64_t last_committed; /* -1: no clock                                */
    int64_t frame_pos;      /* declared clock of the current / last frame;
                               -1 when none since the last reset/restore   */
    bool in_frame;
    int64_t layers_committed; /* distinct layers committed in this frame   */
    uint8_t *committed;       /* [n_layers] flags of this frame            */
} rkv__session_state;

struct rkv_model {
    rkv_model_config cfg;
    rkv_layer **layers;           /* [n_layers]                            */
    rkv__session_state *sessions; /* [S]                                   */
    int64_t *row_clock;           /* [S] per-call scratch: each row's clock */
};

/* RKV_OK when `session` is in range and claimed; otherwise RKV_ERR_NULL,
 * RKV_ERR_RANGE or RKV_ERR_STATE with a message starting with `what`. */
rkv_status rkv__model_check_held(const rkv_model *m, const char *what, int64_t session);

/* Like rkv__model_check_held, and the session must not be inside a frame
 * (RKV_ERR_STATE): what snapshots, restores and forks need. */
rkv_status rkv__model_check_between_frames(const rkv_model *m, const char *what,
                                           int64_t session);

/* Zeroes a session in every layer and drops its clock (it stays claimed). */
void rkv__model_clear_session(rkv_model *m, int64_t session);

/* Installs a restored clock: last committed frame `last_committed` (-1: no
 * clock), no frame begun. */
void rkv__model_set_clock(rkv_model *m, int64_t session, int64_t last_committed);

/* Checks one session's written bits of a layer of geometry g ([C] bytes):
 * every byte 0 or 1, every scratch slot 1, and each ring frame's T bits all
 * equal (frames are written whole). Returns -1 when valid, else the index
 * of the first bad slot. */
int64_t rkv__written_span_check(const rkv_geometry *g, const uint8_t *written);

#endif

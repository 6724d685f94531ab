/* A whole model (SEMANTICS 6): one layer per transformer layer, sessions
 * claimed by request id, host-side frame clocks, batched steps, forks and
 * in-memory snapshots. Snapshot files are in snapshot_file.c. */
#define _POSIX_C_SOURCE 200809L /* strnlen */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model_internal.h"

typedef rkv__session_state session_state;

/* Snapshot buffer layout (host-endian; in-memory only, files: snapshot_file.c):
 * header, then per layer: K span [H][C][D], V span [H][C][D], written [C].
 * Files (snapshot_file.c) use the safetensors layout instead. */
#define SNAP_MAGIC "RKVSNAP\0"
#define SNAP_VERSION 1u
typedef struct snap_header {
    char magic[8];
    uint32_t version;
    uint32_t dtype;
    int64_t n_layers, n_kv_heads, d_head, tokens_per_frame;
    int64_t last_committed;
    rkv_layer_spec layers[RKV_MAX_LAYERS];
} snap_header;

rkv_status rkv_model_create(const rkv_model_config *cfg, rkv_model **out) {
    if (!out) return rkv__fail(RKV_ERR_NULL, "rkv_model_create: out is NULL");
    rkv_status st = rkv__model_config_check(cfg, NULL, NULL);
    if (st != RKV_OK) return st;
    rkv_model *m = calloc(1, sizeof *m);
    if (!m) return rkv__fail(RKV_ERR_NO_MEMORY, "rkv_model_create: out of memory");
    m->cfg = *cfg;
    const int64_t S = cfg->num_sessions, nl = cfg->n_layers;
    m->layers = calloc((size_t)nl, sizeof *m->layers);
    m->sessions = calloc((size_t)S, sizeof *m->sessions);
    m->row_clock = calloc((size_t)S, sizeof *m->row_clock);
    if (!m->layers || !m->sessions || !m->row_clock) goto oom;
    for (int64_t s = 0; s < S; s++) {
        m->sessions[s].last_committed = m->sessions[s].frame_pos = -1;
        if (!(m->sessions[s].committed = calloc((size_t)nl, 1))) goto oom;
    }
    for (int64_t i = 0; i < nl; i++) {
        rkv_geometry g;
        rkv_model_config_layer_geometry(cfg, i, &g);
        if ((st = rkv_layer_create(&g, &m->layers[i])) != RKV_OK) {
            rkv_model_destroy(m);
            return st;
        }
    }
    *out = m;
    return RKV_OK;
oom:
    rkv_model_destroy(m);
    return rkv__fail(RKV_ERR_NO_MEMORY, "rkv_model_create: out of memory");
}

void rkv_model_destroy(rkv_model *model) {
    if (!model) return;
    if (model->layers)
        for (int64_t i = 0; i < model->cfg.n_layers; i++) rkv_layer_destroy(model->layers[i]);
    if (model->sessions)
        for (int64_t s = 0; s < model->cfg.num_sessions; s++) free(model->sessions[s].committed);
    free(model->layers);
    free(model->sessions);
    free(model->row_clock);
    free(model);
}

const rkv_model_config *rkv_model_get_config(const rkv_model *model) {
    return model ? &model->cfg : NULL;
}

rkv_layer *rkv_model_layer(rkv_model *model, int64_t layer) {
    if (!model || layer < 0 || layer >= model->cfg.n_layers) return NULL;
    return model->layers[layer];
}

size_t rkv_model_memory_bytes(const rkv_model *model) {
    size_t total = 0;
    if (model)
        for (int64_t i = 0; i < model->cfg.n_layers; i++)
            total += rkv_layer_memory_bytes(model->layers[i]);
    return total;
}

/* ---- sessions ------------------------------------------------------------ */

static rkv_status check_request_id(const char *what, const char *id) {
    if (!id) return rkv__fail(RKV_ERR_NULL, "%s: request_id is NULL", what);
    size_t n = strnlen(id, RKV_MAX_REQUEST_ID);
    if (n == 0 || n >= RKV_MAX_REQUEST_ID)
        return rkv__fail(RKV_ERR_INVALID_ARG,
                         "%s: request_id has %s bytes; expected 1..%d", what,
                         n == 0 ? "0" : "too many", RKV_MAX_REQUEST_ID - 1);
    return RKV_OK;
}

static int64_t find_session(const rkv_model *m, const char *id) {
    for (int64_t s = 0; s < m->cfg.num_sessions; s++)
        if (m->sessions[s].held && !strcmp(m->sessions[s].request_id, id)) return s;
    return -1;
}

/* A held session index, or an error naming what is wrong. */
rkv_status rkv__model_check_held(const rkv_model *m, const char *what, int64_t session) {
    if (!m) return rkv__fail(RKV_ERR_NULL, "%s: model is NULL", what);
    if (session < 0 || session >= m->cfg.num_sessions)
        return rkv__fail(RKV_ERR_RANGE, "%s: session %lld out of range; expected 0..%lld", what,
                         (long long)session, (long long)(m->cfg.num_sessions - 1));
    if (!m->sessions[session].held)
        return rkv__fail(RKV_ERR_STATE, "%s: session %lld is not claimed", what,
                         (long long)session);
    return RKV_OK;
}
#define check_held rkv__model_check_held

rkv_status rkv__model_check_between_frames(const rkv_model *m, const char *what,
                                           int64_t session) {
    rkv_status st = check_held(m, what, session);
    if (st != RKV_OK) return st;
    if (m->sessions[session].in_frame)
        return rkv__fail(RKV_ERR_STATE,
                         "%s: session %lld is inside frame %lld (its commit pass has not gone "
                         "through every layer); only sessions between frames can be "
                         "snapshotted, restored or forked",
                         what, (long long)session, (long long)m->sessions[session].frame_pos);
    return RKV_OK;
}

/* Zeroes a session in every layer and drops its clock. */
void rkv__model_clear_session(rkv_model *m, int64_t s) {
    for (int64_t i = 0; i < m->cfg.n_layers; i++) rkv_layer_reset(m->layers[i], s);
    rkv__model_set_clock(m, s, -1);
}
#define clear_session rkv__model_clear_session

void rkv__model_set_clock(rkv_model *m, int64_t s, int64_t last_committed) {
    session_state *ss = &m->sessions[s];
    ss->last_committed = last_committed;
    ss->frame_pos = -1;
    ss->in_frame = false;
    ss->layers_committed = 0;
    memset(ss->committed, 0, (size_t)m->cfg.n_layers);
}

int64_t rkv__written_span_check(const rkv_geometry *g, const uint8_t *w) {
    const int64_t T = g->tokens_per_frame, L = g->ring_frames * T, C = L + T;
    for (int64_t j = 0; j < C; j++) {
        if (w[j] > 1 || (j >= L && w[j] != 1)) return j;
        if (j < L && j % T && w[j] != w[j - j % T]) return j;
    }
    return -1;
}

rkv_status rkv_model_claim(rkv_model *model, const char *request_id, int64_t *session) {
    RKV__REQUIRE("rkv_model_claim", model);
    RKV__REQUIRE("rkv_model_claim", session);
    rkv_status st = check_request_id("rkv_model_claim", request_id);
    if (st != RKV_OK) return st;
    int64_t s = find_session(model, request_id);
    if (s < 0) {
        for (s = 0; s < model->cfg.num_sessions && model->sessions[s].held; s++) {
        }
        if (s == model->cfg.num_sessions)
            return rkv__fail(RKV_ERR_FULL,
                             "rkv_model_claim: all %lld sessions are held; cannot claim one for "
                             "request '%s' (release a session first; there is no eviction)",
                             (long long)model->cfg.num_sessions, request_id);
        model->sessions[s].held = true;
        snprintf(model->sessions[s].request_id, RKV_MAX_REQUEST_ID, "%s", request_id);
    }
    *session = s;
    return RKV_OK;
}

rkv_status rkv_model_lookup(const rkv_model *model, const char *request_id, int64_t *session) {
    RKV__REQUIRE("rkv_model_lookup", model);
    RKV__REQUIRE("rkv_model_lookup", session);
    rkv_status st = check_request_id("rkv_model_lookup", request_id);
    if (st != RKV_OK) return st;
    int64_t s = find_session(model, request_id);
    if (s < 0)
        return rkv__fail(RKV_ERR_NOT_FOUND, "rkv_model_lookup: no session holds request '%s'",
                         request_id);
    *session = s;
    return RKV_OK;
}

rkv_status rkv_model_release(rkv_model *model, int64_t session) {
    rkv_status st = check_held(model, "rkv_model_release", session);
    if (st != RKV_OK) return st;
    clear_session(model, session);
    model->sessions[session].held = false;
    memset(model->sessions[session].request_id, 0, RKV_MAX_REQUEST_ID);
    return RKV_OK;
}

rkv_status rkv_model_reset(rkv_model *model, int64_t session) {
    rkv_status st = check_held(model, "rkv_model_reset", session);
    if (st != RKV_OK) return st;
    clear_session(model, session);
    return RKV_OK;
}

rkv_status rkv_model_clock(const rkv_model *model, int64_t session, int64_t *last_committed) {
    if (!last_committed) return rkv__fail(RKV_ERR_NULL, "rkv_model_clock: last_committed is NULL");
    rkv_status st = check_held(model, "rkv_model_clock", session);
    if (st != RKV_OK) return st;
    *last_committed = model->sessions[session].last_committed;
    return RKV_OK;
}

/* ---- frames -------------------------------------------------------------- */

/* Checks a batch of session rows: 1 <= B <= S, in range, distinct, held. */
static rkv_status check_held_rows(const rkv_model *m, const char *what, int64_t batch,
                                  const int64_t *session_idx) {
    if (batch < 1 || batch > m->cfg.num_sessions)
        return rkv__fail(RKV_ERR_INVALID_ARG, "%s: batch B = %lld; expected 1..%lld", what,
                         (long long)batch, (long long)m->cfg.num_sessions);
    rkv_status st = rkv__check_sessions(what, session_idx, batch, m->cfg.num_sessions);
    if (st != RKV_OK) return st;
    for (int64_t b = 0; b < batch; b++)
        if (!m->sessions[session_idx[b]].held)
            return rkv__fail(RKV_ERR_STATE, "%s: session %lld (row %lld) is not claimed", what,
                             (long long)session_idx[b], (long long)b);
    return RKV_OK;
}

/* Checks a per-layer call: the layer, the rows (check_held_rows), and each
 * session inside a frame when need_in_frame (else with a frame begun, for
 * attention after the frame ended). */
static rkv_status check_rows(const rkv_model *m, const char *what, int64_t layer, int64_t batch,
                             const int64_t *session_idx, bool need_in_frame) {
    if (!m) return rkv__fail(RKV_ERR_NULL, "%s: model is NULL", what);
    if (layer < 0 || layer >= m->cfg.n_layers)
        return rkv__fail(RKV_ERR_RANGE, "%s: layer %lld out of range; expected 0..%lld", what,
                         (long long)layer, (long long)(m->cfg.n_layers - 1));
    rkv_status st = check_held_rows(m, what, batch, session_idx);
    if (st != RKV_OK) return st;
    for (int64_t b = 0; b < batch; b++) {
        const session_state *ss = &m->sessions[session_idx[b]];
        if (need_in_frame ? !ss->in_frame : ss->frame_pos < 0)
            return rkv__fail(RKV_ERR_STATE,
                             "%s: session %lld (row %lld) has no frame begun; call "
                             "rkv_model_begin_frame first",
                             what, (long long)session_idx[b], (long long)b);
    }
    return RKV_OK;
}

rkv_status rkv_model_begin_frame(rkv_model *model, int64_t batch, const int64_t *session_idx,
                                 const int64_t *frame_pos) {
    static const char *what = "rkv_model_begin_frame";
    if (!model) return rkv__fail(RKV_ERR_NULL, "%s: model is NULL", what);
    if (!frame_pos) return rkv__fail(RKV_ERR_NULL, "%s: frame_pos is NULL", what);
    rkv_status st = check_held_rows(model, what, batch, session_idx);
    if (st != RKV_OK) return st;
    for (int64_t b = 0; b < batch; b++) {
        const int64_t s = session_idx[b], f = frame_pos[b];
        const session_state *ss = &model->sessions[s];
        if (ss->in_frame)
            return rkv__fail(RKV_ERR_STATE,
                             "%s: session %lld is inside frame %lld, whose commit pass has not "
                             "gone through every layer yet",
                             what, (long long)s, (long long)ss->frame_pos);
        if (f < 0)
            return rkv__fail(RKV_ERR_CLOCK, "%s: frame_pos[%lld] = %lld; expected >= 0", what,
                             (long long)b, (long long)f);
        if (ss->last_committed == INT64_MAX)
            return rkv__fail(RKV_ERR_CLOCK,
                             "%s: session %lld committed frame %lld, the largest clock; there is "
                             "no next frame (reset the session to start over)",
                             what, (long long)s, (long long)ss->last_committed);
        if (ss->last_committed >= 0 && f != ss->last_committed + 1)
            return rkv__fail(RKV_ERR_CLOCK,
                             "%s: session %lld declared frame %lld; expected %lld (last committed "
                             "%lld + 1): a skipped or repeated frame would write and hide the "
                             "wrong slots",
                             what, (long long)s, (long long)f, (long long)(ss->last_committed + 1),
                             (long long)ss->last_committed);
    }
    for (int64_t b = 0; b < batch; b++) {
        session_state *ss = &model->sessions[session_idx[b]];
        ss->in_frame = true;
        ss->frame_pos = frame_pos[b];
        ss->layers_committed = 0;
        memset(ss->committed, 0, (size_t)model->cfg.n_layers);
    }
    return RKV_OK;
}

rkv_status rkv_model_upsert(rkv_model *model, int64_t layer, int64_t batch,
                            const int64_t *session_idx, const void *kv, rkv_dtype kv_dtype,
                            int commit) {
    rkv_status st = check_rows(model, "rkv_model_upsert", layer, batch, session_idx, true);
    if (st != RKV_OK) return st;
    for (int64_t b = 0; b < batch; b++) model->row_clock[b] = model->sessions[session_idx[b]].frame_pos;
    st = rkv_layer_upsert(model->layers[layer], kv, kv_dtype, batch, model->row_clock, session_idx,
                          commit, NULL);
    if (st != RKV_OK || !commit) return st;
    for (int64_t b = 0; b < batch; b++) {
        session_state *ss = &model->sessions[session_idx[b]];
        if (!ss->committed[layer]) {
            ss->committed[layer] = 1;
            ss->layers_committed++;
        }
        if (ss->layers_committed == model->cfg.n_layers) { /* the frame ends */
            ss->in_frame = false;
            ss->last_committed = ss->frame_pos;
        }
    }
    return RKV_OK;
}

/* The layer-level attention arguments of a model call: the caller's q, out,
 * dtypes, scale and pool; the model's rows, clocks and bits-and-clock rule.
 * Checks everything rkv_layer_attend would, plus Hq against the model's. */
static rkv_status model_attention_args(rkv_model *m, const char *what, int64_t layer,
                                       int64_t batch, const int64_t *session_idx,
                                       const rkv_attention_args *args, rkv_attention_args *out) {
    if (!args) return rkv__fail(RKV_ERR_NULL, "%s: args is NULL", what);
    if (args->n_q_heads != m->cfg.n_q_heads)
        return rkv__fail(RKV_ERR_INVALID_ARG, "%s: args->n_q_heads = %lld; this model has %lld",
                         what, (long long)args->n_q_heads, (long long)m->cfg.n_q_heads);
    for (int64_t b = 0; b < batch; b++) m->row_clock[b] = m->sessions[session_idx[b]].frame_pos;
    *out = *args;
    out->batch = batch;
    out->session_idx = session_idx;
    out->frame_pos = m->row_clock;
    out->visible = NULL;
    return rkv__attention_check(m->layers[layer], out, what);
}

rkv_status rkv_model_attend(rkv_model *model, int64_t layer, int64_t batch,
                            const int64_t *session_idx, const rkv_attention_args *args) {
    static const char *what = "rkv_model_attend";
    rkv_status st = check_rows(model, what, layer, batch, session_idx, false);
    rkv_attention_args a;
    if (st == RKV_OK) st = model_attention_args(model, what, layer, batch, session_idx, args, &a);
    if (st != RKV_OK) return st;
    return rkv_layer_attend(model->layers[layer], &a);
}

rkv_status rkv_model_step(rkv_model *model, int64_t layer, int64_t batch,
                          const int64_t *session_idx, const void *kv, rkv_dtype kv_dtype,
                          int commit, const rkv_attention_args *args) {
    static const char *what = "rkv_model_step";
    rkv_status st = check_rows(model, what, layer, batch, session_idx, true);
    rkv_attention_args a;
    if (st == RKV_OK) st = model_attention_args(model, what, layer, batch, session_idx, args, &a);
    if (st != RKV_OK) return st;
    if (!kv) return rkv__fail(RKV_ERR_NULL, "%s: kv is NULL", what);
    if (kv_dtype != model->cfg.dtype)
        return rkv__fail(RKV_ERR_DTYPE, "%s: kv dtype %d (%s) does not match the storage dtype %s",
                         what, (int)kv_dtype,
                         rkv_dtype_name(kv_dtype) ? rkv_dtype_name(kv_dtype) : "unknown",
                         rkv_dtype_name(model->cfg.dtype));
    /* Every argument the upsert and the attention check is valid now:
     * neither can refuse them, so a refused step writes nothing. */
    if ((st = rkv_model_upsert(model, layer, batch, session_idx, kv, kv_dtype, commit)) != RKV_OK)
        return st;
    return rkv_layer_attend(model->layers[layer], &a);
}

/* ---- forks --------------------------------------------------------------- */

rkv_status rkv_model_fork(rkv_model *model, int64_t src_session, int64_t dst_session) {
    static const char *what = "rkv_model_fork";
    rkv_status st = rkv__model_check_between_frames(model, what, src_session);
    if (st != RKV_OK) return st;
    if ((st = rkv__model_check_between_frames(model, what, dst_session)) != RKV_OK) return st;
    if (src_session == dst_session)
        return rkv__fail(RKV_ERR_INVALID_ARG,
                         "%s: source and destination are both session %lld; expected two "
                         "different sessions",
                         what, (long long)src_session);
    for (int64_t i = 0; i < model->cfg.n_layers; i++) {
        rkv_layer *l = model->layers[i];
        const int64_t C = l->capacity;
        const size_t bytes = (size_t)C * l->row_bytes;
        for (int c = 0; c < 2; c++)
            for (int64_t h = 0; h < l->g.n_kv_heads; h++)
                memcpy(rkv__slot_ptr(l, c, h, dst_session * C),
                       rkv__slot_ptr(l, c, h, src_session * C), bytes);
        memcpy(l->written + dst_session * C, l->written + src_session * C, (size_t)C);
    }
    rkv__model_set_clock(model, dst_session, model->sessions[src_session].last_committed);
    return RKV_OK;
}

/* ---- in-memory snapshots ------------------------------------------------- */

static size_t layer_span_bytes(const rkv_layer *l) {
    const rkv_geometry *g = rkv_layer_geometry(l);
    return 2 * (size_t)g->n_kv_heads * (size_t)rkv_layer_capacity(l) * (size_t)g->d_head *
               rkv_dtype_size(g->dtype) +
           (size_t)rkv_layer_capacity(l);
}

size_t rkv_model_snapshot_bytes(const rkv_model *model) {
    if (!model) return 0;
    size_t n = sizeof(snap_header);
    for (int64_t i = 0; i < model->cfg.n_layers; i++) n += layer_span_bytes(model->layers[i]);
    return n;
}

static void fill_header(const rkv_model *m, snap_header *h, int64_t last_committed) {
    memset(h, 0, sizeof *h);
    memcpy(h->magic, SNAP_MAGIC, 8);
    h->version = SNAP_VERSION;
    h->dtype = (uint32_t)m->cfg.dtype;
    h->n_layers = m->cfg.n_layers;
    h->n_kv_heads = m->cfg.n_kv_heads;
    h->d_head = m->cfg.d_head;
    h->tokens_per_frame = m->cfg.tokens_per_frame;
    h->last_committed = last_committed;
    memcpy(h->layers, m->cfg.layers, (size_t)m->cfg.n_layers * sizeof h->layers[0]);
}

/* Copies one session's span of a layer to (to_buf) or from the buffer. */
static uint8_t *copy_span(rkv_layer *l, int64_t s, uint8_t *p, bool to_buf) {
    const rkv_geometry *g = rkv_layer_geometry(l);
    const int64_t C = rkv_layer_capacity(l);
    const size_t bytes = (size_t)C * l->row_bytes;
    for (int c = 0; c < 2; c++)
        for (int64_t h = 0; h < g->n_kv_heads; h++, p += bytes) {
            uint8_t *span = rkv__slot_ptr(l, c, h, s * C);
            if (to_buf) memcpy(p, span, bytes);
            else memcpy(span, p, bytes);
        }
    if (to_buf) memcpy(p, l->written + s * C, (size_t)C);
    else memcpy(l->written + s * C, p, (size_t)C);
    return p + C;
}

rkv_status rkv_model_snapshot(const rkv_model *model, int64_t session, void *buf,
                              size_t buf_bytes) {
    rkv_status st = check_held(model, "rkv_model_snapshot", session);
    if (st != RKV_OK) return st;
    if (!buf) return rkv__fail(RKV_ERR_NULL, "rkv_model_snapshot: buf is NULL");
    const size_t need = rkv_model_snapshot_bytes(model);
    if (buf_bytes < need)
        return rkv__fail(RKV_ERR_INVALID_ARG, "rkv_model_snapshot: buffer has %zu bytes; need %zu",
                         buf_bytes, need);
    if (model->sessions[session].in_frame)
        return rkv__fail(RKV_ERR_STATE,
                         "rkv_model_snapshot: session %lld is inside frame %lld; snapshot between "
                         "frames",
                         (long long)session, (long long)model->sessions[session].frame_pos);
    snap_header h;
    fill_header(model, &h, model->sessions[session].last_committed);
    uint8_t *p = buf;
    memcpy(p, &h, sizeof h);
    p += sizeof h;
    for (int64_t i = 0; i < model->cfg.n_layers; i++) p = copy_span(model->layers[i], session, p, true);
    return RKV_OK;
}

rkv_status rkv_model_restore(rkv_model *model, int64_t session, const void *buf,
                             size_t buf_bytes) {
    static const char *what = "rkv_model_restore";
    rkv_status st = check_held(model, what, session);
    if (st != RKV_OK) return st;
    if (!buf) return rkv__fail(RKV_ERR_NULL, "%s: buf is NULL", what);
    if (model->sessions[session].in_frame)
        return rkv__fail(RKV_ERR_STATE, "%s: session %lld is inside a frame", what,
                         (long long)session);
    const size_t need = rkv_model_snapshot_bytes(model);
    if (buf_bytes != need)
        return rkv__fail(RKV_ERR_FORMAT, "%s: snapshot has %zu bytes; this model's take %zu", what,
                         buf_bytes, need);
    snap_header h, mine;
    memcpy(&h, buf, sizeof h);
    fill_header(model, &mine, h.last_committed);
    if (memcmp(h.magic, SNAP_MAGIC, 8))
        return rkv__fail(RKV_ERR_FORMAT, "%s: not a ringkv snapshot (bad magic)", what);
    if (h.version != SNAP_VERSION)
        return rkv__fail(RKV_ERR_FORMAT, "%s: snapshot version %u; expected %u", what, h.version,
                         SNAP_VERSION);
    if (memcmp(&h, &mine, sizeof h))
        return rkv__fail(RKV_ERR_FORMAT,
                         "%s: snapshot geometry (layers, heads, d_head, tokens, dtype, ring "
                         "table) differs from this model's",
                         what);
    if (h.last_committed < -1)
        return rkv__fail(RKV_ERR_FORMAT, "%s: snapshot clock %lld is invalid", what,
                         (long long)h.last_committed);
    /* written bytes must be 0/1 and every scratch slot armed */
    const uint8_t *p = (const uint8_t *)buf + sizeof h;
    for (int64_t i = 0; i < model->cfg.n_layers; i++) {
        const rkv_layer *l = model->layers[i];
        const size_t span = layer_span_bytes(l);
        const int64_t C = rkv_layer_capacity(l);
        const uint8_t *w = p + span - (size_t)C;
        const int64_t bad = rkv__written_span_check(&l->g, w);
        if (bad >= 0)
            return rkv__fail(RKV_ERR_FORMAT,
                             "%s: layer %lld written bit of slot %lld is %u (expected 0/1, "
                             "scratch 1, whole frames)",
                             what, (long long)i, (long long)bad, w[bad]);
        p += span;
    }
    uint8_t *q = (uint8_t *)buf + sizeof h;
    for (int64_t i = 0; i < model->cfg.n_layers; i++) q = copy_span(model->layers[i], session, q, false);
    rkv__model_set_clock(model, session, h.last_committed);
    return RKV_OK;
}

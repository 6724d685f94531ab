/* The frame's batch and the per-pass calls of a model (ringkv.h, "Frames"):
 * begin_frame checks the batch and copies it into the model's BACKEND
 * buffers; the per-pass calls hand the table K/V, queries, outputs and
 * those buffers (the capture contract). */
#include <stdio.h>
#include <string.h>

#include "attention_check.h"
#include "model_internal.h"

/* Row b's session and clock in the current batch (host copies). */
static int64_t row_session(const rkv_model *m, int64_t b) { return m->batch.host[b]; }
static int64_t row_clock(const rkv_model *m, int64_t b) { return m->batch.host[m->batch.n + b]; }

void rkv__model_close_batch(rkv_model *m) {
    for (int64_t b = 0; b < m->batch.n; b++) m->sessions[row_session(m, b)].row = -1;
    m->batch.n = 0;
    m->batch.open = false;
    m->batch.layers_committed = 0;
    memset(m->batch.committed, 0, (size_t)m->cfg.n_layers);
}

/* The frame ends: every row's clock becomes committed. */
static void end_frame(rkv_model *m) {
    for (int64_t b = 0; b < m->batch.n; b++)
        m->sessions[row_session(m, b)].last_committed = row_clock(m, b);
    m->batch.open = false;
}

static void mark_committed(rkv_model *m, int64_t layer) {
    if (!m->batch.committed[layer]) {
        m->batch.committed[layer] = 1;
        m->batch.layers_committed++;
    }
    if (m->batch.layers_committed == m->cfg.n_layers) end_frame(m);
}

/* ---- refusals ------------------------------------------------------------- */

/* RKV_ERR_STATE for a call that needs an open frame and has none: never
 * begun (or closed), or committed already (issue 10: say which frame was
 * committed and what the next call is). */
static rkv_status no_open_frame(const rkv_model *m, const char *what) {
    if (m->batch.n == 0)
        return rkv__fail(RKV_ERR_STATE,
                         "%s: no frame begun (none since the model's creation, or the last "
                         "batch was abandoned, reset or released); call rkv_model_begin_frame "
                         "first",
                         what);
    const int64_t s = row_session(m, 0), f = row_clock(m, 0);
    char next[96];
    if (f == INT64_MAX)
        snprintf(next, sizeof next, "there is no frame after %lld (reset the session)",
                 (long long)f);
    else
        snprintf(next, sizeof next, "call rkv_model_begin_frame with frame %lld%s next",
                 (long long)f + 1, m->batch.n > 1 ? " (each row's frame + 1)" : "");
    return rkv__fail(RKV_ERR_STATE,
                     "%s: frame %lld of session %lld%s was committed on every layer by an "
                     "earlier pass, which ended it; an upsert needs an open frame: %s",
                     what, (long long)f, (long long)s,
                     m->batch.n > 1 ? " (row 0 of the batch)" : "", next);
}

static rkv_status check_layer(const rkv_model *m, const char *what, int64_t layer) {
    if (!m) return rkv__fail(RKV_ERR_NULL, "%s: model is NULL", what);
    if (layer < 0 || layer >= m->cfg.n_layers)
        return rkv__fail(RKV_ERR_RANGE, "%s: layer %lld out of range; expected 0..%lld", what,
                         (long long)layer, (long long)(m->cfg.n_layers - 1));
    return RKV_OK;
}

/* Checks B rows of sessions: 1 <= B <= S (and the backend's limit when
 * max_batch), in range, distinct, held. */
static rkv_status check_held_rows(const rkv_model *m, const char *what, int64_t batch,
                                  const int64_t *session_idx, bool max_batch) {
    const int64_t S = m->cfg.num_sessions, cap = m->limits.max_batch;
    const int64_t most = max_batch && cap > 0 && cap < S ? cap : S;
    if (batch < 1 || batch > most)
        return rkv__fail(RKV_ERR_INVALID_ARG, "%s: batch B = %lld; expected 1..%lld%s", what,
                         (long long)batch, (long long)most,
                         most < S ? " (the backend's largest batch)" : "");
    rkv_status st = rkv__check_sessions(what, session_idx, batch, S);
    if (st != RKV_OK) return st;
    for (int64_t b = 0; b < batch; b++)
        if (!m->sessions[session_idx[b]].held)
            return rkv__fail(RKV_ERR_STATE, "%s: session %lld (row %lld) is not claimed", what,
                             (long long)session_idx[b], (long long)b);
    return RKV_OK;
}

/* Checks a caller's ring (rkv_model_upsert / _attend; NULL: none) against
 * layer `layer`'s backend and geometry. */
static rkv_status check_ring(const rkv_model *m, const char *what, int64_t layer,
                             const rkv_layer *ring) {
    if (!ring) return RKV_OK;
    if (ring->ops_id != m->ops_id)
        return rkv__fail(RKV_ERR_STATE,
                         "%s: the model runs on the %s backend and the ring's layer on the %s "
                         "backend; the storage given must be a layer of the model's backend",
                         what, m->ops.name, ring->ops.name);
    int64_t va, vb;
    const char *field = rkv__geometry_differs(&m->handles[layer].g, &ring->g, &va, &vb);
    if (field)
        return rkv__fail(RKV_ERR_INVALID_ARG,
                         "%s: the ring's geometry differs from layer %lld's in %s (the ring's "
                         "%lld, the layer's %lld); the storage given must be that layer's (or a "
                         "copy of it)",
                         what, (long long)layer, field, (long long)vb, (long long)va);
    return RKV_OK;
}

/* The calls that spell the batch out: layer, rows, then the rows must be
 * the current batch (open when need_open), as begun. */
static rkv_status check_batch_rows(const rkv_model *m, const char *what, int64_t layer,
                                   const rkv_layer *ring, int64_t batch,
                                   const int64_t *session_idx, bool need_open) {
    rkv_status st = check_layer(m, what, layer);
    if (st == RKV_OK) st = check_ring(m, what, layer, ring);
    if (st == RKV_OK) st = check_held_rows(m, what, batch, session_idx, false);
    if (st != RKV_OK) return st;
    for (int64_t b = 0; b < batch; b++) {
        const int64_t s = session_idx[b];
        if (m->sessions[s].row >= 0) continue;
        const char *id = m->sessions[s].request_id;
        if (m->batch.n == 0)
            return rkv__fail(RKV_ERR_STATE,
                             "%s: session %lld (request '%s', row %lld) has no frame begun "
                             "(there is no current batch); call rkv_model_begin_frame first",
                             what, (long long)s, id, (long long)b);
        return rkv__fail(RKV_ERR_STATE,
                         "%s: session %lld (request '%s', row %lld) has no frame begun: it is "
                         "not in the current batch (B = %lld, row 0: session %lld), which "
                         "rkv_model_begin_frame sets for the per-pass calls",
                         what, (long long)s, id, (long long)b, (long long)m->batch.n,
                         (long long)row_session(m, 0));
    }
    if (need_open && !m->batch.open) return no_open_frame(m, what);
    if (batch != m->batch.n)
        return rkv__fail(RKV_ERR_INVALID_ARG,
                         "%s: B = %lld rows; the current batch has %lld (the per-pass calls "
                         "act on the whole batch that rkv_model_begin_frame set, in its order)",
                         what, (long long)batch, (long long)m->batch.n);
    for (int64_t b = 0; b < batch; b++)
        if (session_idx[b] != row_session(m, b))
            return rkv__fail(RKV_ERR_INVALID_ARG,
                             "%s: row %lld is session %lld; the current batch has session %lld "
                             "there (session_idx must list the batch in its begin_frame order)",
                             what, (long long)b, (long long)session_idx[b],
                             (long long)row_session(m, b));
    return RKV_OK;
}

/* ---- the batch ------------------------------------------------------------ */

rkv_status rkv_model_begin_frame(rkv_model *model, int64_t batch, const int64_t *session_idx,
                                 const int64_t *frame_pos) {
    static const char *what = "rkv_model_begin_frame";
    if (!model) return rkv__fail(RKV_ERR_NULL, "%s: model is NULL", what);
    if (!frame_pos) return rkv__fail(RKV_ERR_NULL, "%s: frame_pos is NULL", what);
    rkv_status st = check_held_rows(model, what, batch, session_idx, true);
    if (st != RKV_OK) return st;
    for (int64_t b = 0; b < batch; b++) {
        const int64_t s = session_idx[b], f = frame_pos[b];
        const rkv__session_state *ss = &model->sessions[s];
        /* Each refusal of a row names its session index and its request id
         * (the caller's name for it: a server knows its requests, not the
         * slots the model gave them). */
        const char *id = ss->request_id;
        if (ss->row >= 0 && model->batch.open)
            return rkv__fail(RKV_ERR_STATE,
                             "%s: session %lld (request '%s') is inside frame %lld, whose commit "
                             "pass has not gone through every layer yet",
                             what, (long long)s, id, (long long)row_clock(model, ss->row));
        if (f < 0)
            return rkv__fail(RKV_ERR_CLOCK,
                             "%s: frame_pos[%lld] = %lld (session %lld, request '%s'); expected "
                             ">= 0",
                             what, (long long)b, (long long)f, (long long)s, id);
        if (ss->last_committed == INT64_MAX)
            return rkv__fail(RKV_ERR_CLOCK,
                             "%s: session %lld (request '%s') committed frame %lld, the largest "
                             "clock; there is no next frame (reset the session to start over)",
                             what, (long long)s, id, (long long)ss->last_committed);
        if (ss->last_committed >= 0 && f != ss->last_committed + 1)
            return rkv__fail(RKV_ERR_CLOCK,
                             "%s: session %lld (request '%s') declared frame %lld; expected %lld "
                             "(last committed %lld + 1): a skipped or repeated frame would write "
                             "and hide the wrong slots",
                             what, (long long)s, id, (long long)f,
                             (long long)(ss->last_committed + 1), (long long)ss->last_committed);
    }
    if (model->batch.open)
        return rkv__fail(RKV_ERR_STATE,
                         "%s: a frame is open for another batch (B = %lld, row 0: session %lld at "
                         "frame %lld; its commit pass has gone through %lld of %lld layers); "
                         "end it (commit every layer, or rkv_model_end_frame after a graph "
                         "replay) or rkv_model_abandon_frame first",
                         what, (long long)model->batch.n, (long long)row_session(model, 0),
                         (long long)row_clock(model, 0), (long long)model->batch.layers_committed,
                         (long long)model->cfg.n_layers);
    /* Stage the rows in the host layout of the buffers, copy them (the only
     * step that can fail now), then switch the model to the new batch. */
    int64_t *stage = model->batch.stage;
    memcpy(stage, session_idx, (size_t)batch * sizeof *stage);
    memcpy(stage + batch, frame_pos, (size_t)batch * sizeof *stage);
    if ((st = model->ops.copy_in(model->ctx, model->batch.dev, stage,
                                 2 * (size_t)batch * sizeof *stage)) != RKV_OK)
        return rkv__model_backend_fail(st, what);
    rkv__model_close_batch(model);
    memcpy(model->batch.host, stage, 2 * (size_t)batch * sizeof *stage);
    model->batch.n = batch;
    model->batch.open = true;
    for (int64_t b = 0; b < batch; b++) model->sessions[session_idx[b]].row = b;
    return RKV_OK;
}

rkv_status rkv_model_end_frame(rkv_model *model) {
    if (!model) return rkv__fail(RKV_ERR_NULL, "rkv_model_end_frame: model is NULL");
    if (model->batch.n == 0) return no_open_frame(model, "rkv_model_end_frame");
    if (model->batch.open) end_frame(model);
    return RKV_OK;
}

rkv_status rkv_model_abandon_frame(rkv_model *model) {
    if (!model) return rkv__fail(RKV_ERR_NULL, "rkv_model_abandon_frame: model is NULL");
    rkv__model_close_batch(model);
    return RKV_OK;
}

rkv_status rkv_model_synchronize(rkv_model *model) {
    static const char what[] = "rkv_model_synchronize";
    if (!model) return rkv__fail(RKV_ERR_NULL, "%s: model is NULL", what);
    rkv_status st = model->ops.synchronize(model->ctx);
    if (st != RKV_OK) return rkv__model_backend_fail(st, what);
    if (!model->ops.check) return RKV_OK;
    /* every layer's error word, read (and cleared) at once; the first said */
    int64_t bad = -1;
    if ((st = model->ops.check(model->ctx, model->layers, model->cfg.n_layers, &bad)) != RKV_OK) {
        if (bad < 0) return rkv__model_backend_fail(st, what);
        char msg[512];
        snprintf(msg, sizeof msg, "%s", rkv_last_error());
        return rkv__fail(st, "%s: layer %lld: %s", what, (long long)bad, msg);
    }
    return RKV_OK;
}

/* ---- per-pass calls --------------------------------------------------------- */

/* The upsert's one check (the rows were checked at begin_frame). */
static rkv_status check_kv(const rkv_model *m, const char *what, int64_t layer,
                           const rkv_layer *on, const void *kv, rkv_dtype kv_dtype) {
    if (!kv) return rkv__fail(RKV_ERR_NULL, "%s: kv is NULL", what);
    rkv_status dst = rkv__check_kv_dtype(what, kv_dtype, m->cfg.dtype);
    if (dst != RKV_OK) return dst;
    const size_t esz = rkv_dtype_size(m->cfg.dtype);
    const size_t align = m->limits.align > esz ? m->limits.align : esz;
    if ((uintptr_t)kv % align)
        return rkv__fail(RKV_ERR_INVALID_ARG, "%s: kv %p is not %zu-byte aligned", what, kv,
                         align);
    return rkv__upsert_overlap(on ? on : &m->handles[layer], what, kv, m->batch.n, NULL, NULL,
                               NULL);
}

/* The caller's attention arguments with the batch's rows and clocks and
 * the bits-and-clock rule, checked once (rkv__attend_args_check). */
static rkv_status attention_args(const rkv_model *m, const char *what, int64_t layer,
                                 const rkv_layer *on, const rkv_attention_args *args,
                                 rkv_attention_args *out) {
    if (!args) return rkv__fail(RKV_ERR_NULL, "%s: args is NULL", what);
    rkv_status st = rkv__attention_args_load(what, args, out);
    if (st != RKV_OK) return st;
    if (out->n_q_heads != m->cfg.n_q_heads)
        return rkv__fail(RKV_ERR_INVALID_ARG, "%s: args->n_q_heads = %lld; this model has %lld",
                         what, (long long)out->n_q_heads, (long long)m->cfg.n_q_heads);
    out->batch = m->batch.n;
    out->session_idx = m->batch.dev;
    out->frame_pos = m->batch.dev + m->batch.n;
    out->visible = NULL;
    const rkv_layer *l = &m->handles[layer];
    return rkv__attend_args_check(&l->g, &m->limits, &(on ? on : l)->store, out, false, what);
}

/* One pass on layer `layer` or on `on` (rkv_model_upsert's ring): the
 * upsert (kv, when up) and / or the attention (args, when att). Every
 * argument is checked first: neither operation can refuse them then, so a
 * refused step writes nothing. */
static rkv_status frame_pass(rkv_model *m, const char *what, int64_t layer, const rkv_layer *on,
                             bool up, const void *kv, rkv_dtype kv_dtype, int commit, bool att,
                             const rkv_attention_args *args) {
    rkv_attention_args a;
    rkv_status st = att ? attention_args(m, what, layer, on, args, &a) : RKV_OK;
    if (st == RKV_OK && up) st = check_kv(m, what, layer, on, kv, kv_dtype);
    if (st != RKV_OK) return st;
    void *impl = on ? on->impl : m->layers[layer];
    if (up) {
        const int64_t *rows = m->batch.dev; /* BACKEND: sessions, then clocks */
        st = m->ops.upsert(m->ctx, impl, kv, m->batch.n, rows + m->batch.n, rows, commit, NULL);
        if (st != RKV_OK) return rkv__model_backend_fail(st, what);
        if (commit) mark_committed(m, layer);
    }
    if (att && (st = m->ops.attend(m->ctx, impl, &a, m->workspace, m->workspace_bytes)) != RKV_OK)
        return rkv__model_backend_fail(st, what);
    return RKV_OK;
}

/* The per-pass calls on the current batch: layer, then a frame open
 * (need_open) or at least begun. */
static rkv_status check_current(const rkv_model *m, const char *what, int64_t layer,
                                bool need_open) {
    rkv_status st = check_layer(m, what, layer);
    if (st == RKV_OK && (need_open ? !m->batch.open : m->batch.n == 0))
        st = no_open_frame(m, what);
    return st;
}

rkv_status rkv_model_frame_upsert(rkv_model *model, int64_t layer, const void *kv,
                                  rkv_dtype kv_dtype, int commit) {
    static const char what[] = "rkv_model_frame_upsert";
    rkv_status st = check_current(model, what, layer, true);
    return st == RKV_OK ? frame_pass(model, what, layer, NULL, true, kv, kv_dtype, commit, false,
                                     NULL)
                        : st;
}

rkv_status rkv_model_frame_attend(rkv_model *model, int64_t layer,
                                  const rkv_attention_args *args) {
    static const char what[] = "rkv_model_frame_attend";
    rkv_status st = check_current(model, what, layer, false);
    return st == RKV_OK ? frame_pass(model, what, layer, NULL, false, NULL, 0, 0, true, args) : st;
}

rkv_status rkv_model_frame_step(rkv_model *model, int64_t layer, const void *kv,
                                rkv_dtype kv_dtype, int commit, const rkv_attention_args *args) {
    static const char what[] = "rkv_model_frame_step";
    rkv_status st = check_current(model, what, layer, true);
    return st == RKV_OK ? frame_pass(model, what, layer, NULL, true, kv, kv_dtype, commit, true,
                                     args)
                        : st;
}

rkv_status rkv_model_upsert(rkv_model *model, int64_t layer, const rkv_layer *ring,
                            int64_t batch, const int64_t *session_idx, const void *kv,
                            rkv_dtype kv_dtype, int commit) {
    static const char what[] = "rkv_model_upsert";
    rkv_status st = check_batch_rows(model, what, layer, ring, batch, session_idx, true);
    return st == RKV_OK
               ? frame_pass(model, what, layer, ring, true, kv, kv_dtype, commit, false, NULL)
               : st;
}

rkv_status rkv_model_attend(rkv_model *model, int64_t layer, const rkv_layer *ring,
                            int64_t batch, const int64_t *session_idx,
                            const rkv_attention_args *args) {
    static const char what[] = "rkv_model_attend";
    rkv_status st = check_batch_rows(model, what, layer, ring, batch, session_idx, false);
    return st == RKV_OK ? frame_pass(model, what, layer, ring, false, NULL, 0, 0, true, args) : st;
}

rkv_status rkv_model_step(rkv_model *model, int64_t layer, int64_t batch,
                          const int64_t *session_idx, const void *kv, rkv_dtype kv_dtype,
                          int commit, const rkv_attention_args *args) {
    static const char what[] = "rkv_model_step";
    rkv_status st = check_batch_rows(model, what, layer, NULL, batch, session_idx, true);
    return st == RKV_OK ? frame_pass(model, what, layer, NULL, true, kv, kv_dtype, commit, true, args)
                        : st;
}

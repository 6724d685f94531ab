/* A whole model (SEMANTICS 6) on any backend table: one backend layer per
 * transformer layer, sessions claimed by request id, forks (the batch and
 * per-pass calls: model_frame.c; snapshots: snapshot_file.c). */
#define _POSIX_C_SOURCE 200809L /* strnlen */
#include <stdalign.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model_internal.h"

/* ---- creation ------------------------------------------------------------ */

/* The attention workspace: the largest any layer can use (0: none). */
static size_t workspace_bytes(const rkv_model *m) {
    if (!m->ops.attend_workspace_bytes) return 0;
    const int64_t S = m->cfg.num_sessions, cap = m->limits.max_batch;
    const int64_t max_b = cap > 0 && cap < S ? cap : S;
    /* B = 1 .. max_b rows of n_q_heads heads and tokens_per_frame queries,
     * q and out in the storage dtype (placeholders: the query plans only) */
    alignas(64) static int64_t placeholder[8];
    rkv_attention_args a = RKV_ATTENTION_ARGS_INIT;
    a.n_q_heads = m->cfg.n_q_heads;
    a.q = a.out = placeholder;
    a.q_dtype = a.out_dtype = m->cfg.dtype;
    a.session_idx = a.frame_pos = placeholder;
    size_t most = 0;
    for (int64_t i = 0; i < m->cfg.n_layers; i++)
        for (a.batch = 1; a.batch <= max_b; a.batch++) {
            size_t b = m->ops.attend_workspace_bytes(m->ctx, m->layers[i], &a);
            if (b > most) most = b;
        }
    return most;
}

/* Frees what a (possibly half-built) model holds, through its table; the
 * backend context too when destroy_ctx. (Nothing here sets a message: a
 * failed creation keeps the one that made it fail.) */
static void free_model(rkv_model *m, bool destroy_ctx) {
    for (int64_t i = 0; m->layers && i < m->cfg.n_layers; i++)
        if (m->layers[i]) m->ops.layer_destroy(m->ctx, m->layers[i]);
    if (m->batch.dev) m->ops.free(m->ctx, m->batch.dev);
    if (m->workspace) m->ops.free(m->ctx, m->workspace);
    if (destroy_ctx && m->ops.ctx_destroy) m->ops.ctx_destroy(m->ctx);
    free(m->layers);
    free(m->handles);
    free(m->sessions);
    free(m->batch.host);
    free(m->batch.stage);
    free(m->batch.committed);
    free(m->offloaded);
    free(m->storage);
    free(m->storage_names);
    rkv__snapshot_cache_free(m);
    free(m);
}

/* One piece of the storage into m->storage: merged with the last range
 * when it continues it (same layer and kind). */
static bool add_storage(rkv_model *m, size_t *cap, int64_t layer, bool bits, const uint8_t *p,
                        size_t bytes, bool *open) {
    rkv__buf *last = m->n_storage ? &m->storage[m->n_storage - 1] : NULL;
    if (*open && last && (const uint8_t *)last->p + last->bytes == p) {
        last->bytes += bytes;
        return true;
    }
    if (m->n_storage == *cap) {
        const size_t n = *cap ? 2 * *cap : 16;
        rkv__buf *b = realloc(m->storage, n * sizeof *b);
        if (!b) return false;
        m->storage = b;
        char(*names)[64] = realloc(m->storage_names, n * sizeof *names);
        if (!names) return false;
        m->storage_names = names;
        *cap = n;
    }
    snprintf(m->storage_names[m->n_storage], sizeof m->storage_names[0],
             "the model's layer %lld %s", (long long)layer, bits ? "written bits" : "K/V storage");
    m->storage[m->n_storage++] = (rkv__buf){p, bytes, NULL};
    *open = true;
    return true;
}

/* m->storage: every piece of every session's span that the backend
 * exposes in host memory (span_region), adjacent pieces merged (the CPU
 * layout gives one K/V range and one written-bits range per layer). */
static rkv_status collect_storage(rkv_model *m, const char *what) {
    if (!m->ops.span_region) return RKV_OK;
    size_t cap = 0;
    for (int64_t i = 0; i < m->cfg.n_layers; i++)
        for (int part = RKV_SPAN_K; part <= RKV_SPAN_WRITTEN; part++) {
            bool open = part == RKV_SPAN_V; /* V continues K */
            const int64_t heads = part == RKV_SPAN_WRITTEN ? 1 : m->cfg.n_kv_heads;
            const size_t bytes = rkv__model_span_bytes(m, i, (rkv_span_part)part);
            for (int64_t h = 0; h < heads; h++)
                for (int64_t s = 0; s < m->cfg.num_sessions; s++) {
                    const uint8_t *p = rkv__model_host_region(m, i, s, (rkv_span_part)part, h);
                    if (!p) {
                        open = false;
                        continue;
                    }
                    if (!add_storage(m, &cap, i, part == RKV_SPAN_WRITTEN, p, bytes, &open))
                        return rkv__fail(RKV_ERR_NO_MEMORY, "%s: out of memory", what);
                }
        }
    for (size_t k = 0; k < m->n_storage; k++) m->storage[k].name = m->storage_names[k];
    return RKV_OK;
}

rkv_status rkv__model_check_bufs(const rkv_model *m, const char *what, const rkv__buf *written,
                                 size_t n_written, const rkv__buf *read, size_t n_read,
                                 bool writes_model) {
    rkv_status st = rkv__check_no_overlap(what, written, n_written, read, n_read);
    if (st != RKV_OK) return st;
    for (size_t k = 0; k < m->n_storage && st == RKV_OK; k++) {
        const rkv__buf *s = &m->storage[k];
        if (writes_model) {
            if ((st = rkv__check_no_overlap(what, s, 1, written, n_written)) == RKV_OK)
                st = rkv__check_no_overlap(what, s, 1, read, n_read);
        } else {
            if ((st = rkv__check_no_overlap(what, written, n_written, s, 1)) == RKV_OK)
                for (size_t j = 0; j < n_read; j++)
                    if (rkv__shares(&read[j], s))
                        return rkv__fail(RKV_ERR_INVALID_ARG,
                                         "%s: %s (%p, %zu bytes) lies in %s (%p, %zu bytes); "
                                         "expected a buffer of the caller's own",
                                         what, read[j].name, read[j].p, read[j].bytes, s->name,
                                         s->p, s->bytes);
        }
    }
    return st;
}

/* Bytes of the host tables rkv_model_create_with_backend allocates (for its
 * message when they do not fit), saturated at SIZE_MAX. */
static size_t host_table_bytes(const rkv_model *m) {
    const size_t S = (size_t)m->cfg.num_sessions, nl = (size_t)m->cfg.n_layers;
    const size_t parts[][2] = {
        {nl, sizeof *m->layers},          {nl, sizeof *m->handles},
        {S, sizeof *m->sessions},
        {2 * S, sizeof *m->batch.host},   {2 * S, sizeof *m->batch.stage},
        {nl, 1},                          {(size_t)m->offload_cap, sizeof *m->offloaded},
    };
    size_t sum = 0, b;
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++)
        if (__builtin_mul_overflow(parts[i][0], parts[i][1], &b) ||
            __builtin_add_overflow(sum, b, &sum))
            return SIZE_MAX;
    return sum;
}

static rkv_status model_create(const char *what, const rkv_model_config *cfg,
                               const rkv_backend_ops *ops, void *ctx, rkv_model **out) {
    if (!out) return rkv__fail(RKV_ERR_NULL, "%s: out is NULL", what);
    rkv_backend_ops adopted;
    rkv_backend_limits limits;
    rkv_status st = rkv__backend_adopt(ops, ctx, what, &adopted, &limits);
    if (st != RKV_OK) return st;
    if (!cfg) return rkv__fail(RKV_ERR_NULL, "%s: cfg (the model config) is NULL", what);
    rkv_model_config mine; /* the caller's config in this library's layout */
    size_t kv_bytes = 0;
    if ((st = rkv__model_config_load(what, cfg, &mine)) != RKV_OK ||
        (st = rkv__model_config_check(&mine, NULL, &kv_bytes)) != RKV_OK)
        return st;
    cfg = &mine;
    rkv_model *m = calloc(1, sizeof *m);
    if (!m) return rkv__fail(RKV_ERR_NO_MEMORY, "%s: out of memory", what);
    m->cfg = mine;
    m->ops = adopted;
    m->limits = limits;
    m->ops_id = ops;
    m->ctx = ctx;
    const int64_t S = cfg->num_sessions, nl = cfg->n_layers;
    m->layers = calloc((size_t)nl, sizeof *m->layers);
    m->handles = calloc((size_t)nl, sizeof *m->handles);
    m->sessions = calloc((size_t)S, sizeof *m->sessions);
    m->batch.host = calloc(2 * (size_t)S, sizeof *m->batch.host);
    m->batch.stage = calloc(2 * (size_t)S, sizeof *m->batch.stage);
    m->batch.committed = calloc((size_t)nl, 1);
    m->offload_cap = cfg->max_offloaded ? cfg->max_offloaded : RKV_DEFAULT_OFFLOADED(S);
    if (m->offload_cap > RKV_MAX_OFFLOADED) m->offload_cap = RKV_MAX_OFFLOADED;
    m->offloaded = calloc((size_t)m->offload_cap, sizeof *m->offloaded);
    if (!m->layers || !m->handles || !m->sessions || !m->batch.host || !m->batch.stage ||
        !m->batch.committed || !m->offloaded) {
        st = rkv__fail(RKV_ERR_NO_MEMORY,
                       "%s: cannot allocate %zu bytes of host tables for %lld sessions and %lld "
                       "layers (the layers' K/V would take %zu bytes more)",
                       what, host_table_bytes(m), (long long)S, (long long)nl, kv_bytes);
        goto fail;
    }
    for (int64_t s = 0; s < S; s++) {
        m->sessions[s].last_committed = -1;
        m->sessions[s].row = -1;
    }
    for (int64_t i = 0; i < nl; i++) {
        rkv_geometry g;
        rkv_model_config_layer_geometry(&m->cfg, i, &g);
        rkv_backend_storage store = {NULL, NULL, NULL};
        if ((st = m->ops.layer_create(ctx, &g, &store, &m->layers[i])) != RKV_OK) goto fail;
        rkv__layer_borrow(&m->handles[i], &m->ops, ops, &m->limits, ctx, &g, m->layers[i], &store);
    }
    if ((st = collect_storage(m, what)) != RKV_OK ||
        (st = rkv__snapshot_cache_create(m, what)) != RKV_OK)
        goto fail;
    void *dev = NULL;
    if ((st = m->ops.alloc(ctx, 2 * (size_t)S * sizeof(int64_t), &dev)) != RKV_OK) goto fail;
    m->batch.dev = dev;
    if ((m->workspace_bytes = workspace_bytes(m)) > 0 &&
        (st = m->ops.alloc(ctx, m->workspace_bytes, &m->workspace)) != RKV_OK)
        goto fail;
    *out = m;
    return RKV_OK;
fail:
    free_model(m, false); /* the caller keeps its context on failure */
    return st;
}

/* Both creations are one; each names itself in its messages. */
rkv_status rkv_model_create(const rkv_model_config *cfg, rkv_model **out) {
    return model_create("rkv_model_create", cfg, rkv_backend_cpu(), NULL, out);
}
rkv_status rkv_model_create_with_backend(const rkv_model_config *cfg, const rkv_backend_ops *ops,
                                         void *ctx, rkv_model **out) {
    return model_create("rkv_model_create_with_backend", cfg, ops, ctx, out);
}

void rkv_model_destroy(rkv_model *model) {
    if (model) free_model(model, true);
}

const rkv_model_config *rkv_model_get_config(const rkv_model *model) {
    return model ? &model->cfg : NULL;
}

const char *rkv_model_backend_name(const rkv_model *model) {
    return model ? model->ops.name : NULL;
}

rkv_layer *rkv_model_layer(rkv_model *model, int64_t layer) {
    if (!model || layer < 0 || layer >= model->cfg.n_layers) return NULL;
    return &model->handles[layer];
}

rkv_geometry rkv__model_layer_geometry(const rkv_model *m, int64_t layer) {
    return m->handles[layer].g;
}

rkv_status rkv__model_backend_fail(rkv_status st, const char *what) {
    char msg[512];
    const char *m = rkv_last_error();
    /* the CPU backend's messages lead with the internal rkv_layer_* call
     * that made them: the public call's name replaces it */
    if (!strncmp(m, "rkv_", 4)) {
        const char *e = m + 4;
        while ((*e >= 'a' && *e <= 'z') || *e == '_' || (*e >= '0' && *e <= '9')) e++;
        if (e[0] == ':' && e[1] == ' ') m = e + 2;
    }
    snprintf(msg, sizeof msg, "%s", m);
    return rkv__fail(st, "%s: %s", what, msg);
}

/* ---- session spans through the backend ----------------------------------- */

size_t rkv__model_span_bytes(const rkv_model *m, int64_t layer, rkv_span_part part) {
    const rkv_geometry g = rkv__model_layer_geometry(m, layer);
    const size_t C = (size_t)rkv_geometry_capacity(&g);
    return part == RKV_SPAN_WRITTEN ? C : C * (size_t)g.d_head * rkv_dtype_size(g.dtype);
}

size_t rkv__model_max_span_bytes(const rkv_model *m) {
    size_t most = 0;
    for (int64_t i = 0; i < m->cfg.n_layers; i++) {
        const size_t b = rkv__model_span_bytes(m, i, RKV_SPAN_K);
        if (b > most) most = b;
    }
    return most;
}

/* ---- sessions ------------------------------------------------------------ */

rkv_status rkv__model_check_request_id(const char *what, const char *id) {
    if (!id) return rkv__fail(RKV_ERR_NULL, "%s: request_id is NULL", what);
    size_t n = strnlen(id, RKV_MAX_REQUEST_ID);
    if (n == 0 || n >= RKV_MAX_REQUEST_ID)
        return rkv__fail(RKV_ERR_INVALID_ARG,
                         "%s: request_id has %s bytes; expected 1..%d", what,
                         n == 0 ? "0" : "too many", RKV_MAX_REQUEST_ID - 1);
    return RKV_OK;
}

int64_t rkv__model_find(const rkv_model *m, const char *id, bool importing) {
    for (int64_t s = 0; s < m->cfg.num_sessions; s++)
        if ((importing ? m->sessions[s].importing : m->sessions[s].held) &&
            !strcmp(m->sessions[s].request_id, id))
            return s;
    return -1;
}

int64_t rkv__model_free_slot(const rkv_model *m) {
    for (int64_t s = 0; s < m->cfg.num_sessions; s++)
        if (!m->sessions[s].held && !m->sessions[s].importing) return s;
    return -1;
}

/* RKV_ERR_STATE when id is paged out or being imported (not held). */
static rkv_status id_not_away(const rkv_model *m, const char *what, const char *id) {
    if (rkv__model_offloaded_find(m, id) >= 0)
        return rkv__fail(RKV_ERR_STATE,
                         "%s: request '%s' is paged out of this model (rkv_model_offload); page "
                         "it in with rkv_model_page_in, or drop it with "
                         "rkv_model_offload_discard, before its id is used again",
                         what, id);
    const int64_t s = rkv__model_find(m, id, true);
    if (s >= 0)
        return rkv__fail(RKV_ERR_STATE,
                         "%s: request '%s' is being imported into session %lld "
                         "(rkv_model_import_reserve); finish with rkv_model_session_import or "
                         "rkv_model_import_cancel first",
                         what, id, (long long)s);
    return RKV_OK;
}

rkv_status rkv__model_id_unused(const rkv_model *m, const char *what, const char *id) {
    const int64_t s = rkv__model_find(m, id, false);
    if (s >= 0)
        return rkv__fail(RKV_ERR_STATE, "%s: request '%s' is held by session %lld of this model",
                         what, id, (long long)s);
    return id_not_away(m, what, id);
}

rkv_status rkv__model_check_held(const rkv_model *m, const char *what, int64_t session) {
    if (!m) return rkv__fail(RKV_ERR_NULL, "%s: model is NULL", what);
    if (session < 0 || session >= m->cfg.num_sessions)
        return rkv__fail(RKV_ERR_RANGE, "%s: session %lld out of range; expected 0..%lld", what,
                         (long long)session, (long long)(m->cfg.num_sessions - 1));
    if (!m->sessions[session].held)
        return rkv__fail(RKV_ERR_STATE, "%s: session %lld is not claimed%s", what,
                         (long long)session,
                         m->sessions[session].importing
                             ? " (it is reserved for an import: rkv_model_session_import makes "
                               "it live, rkv_model_import_cancel frees it)"
                             : "");
    return RKV_OK;
}

rkv_status rkv__model_check_between_frames(const rkv_model *m, const char *what,
                                           int64_t session) {
    rkv_status st = rkv__model_check_held(m, what, session);
    if (st != RKV_OK) return st;
    const int64_t row = m->sessions[session].row;
    if (row >= 0 && m->batch.open)
        return rkv__fail(RKV_ERR_STATE,
                         "%s: session %lld (request '%s') is inside frame %lld (row %lld of "
                         "the open batch, whose commit pass has not gone through every layer); "
                         "only sessions between frames can be snapshotted, restored or forked",
                         what, (long long)session, m->sessions[session].request_id,
                         (long long)m->batch.host[m->batch.n + row], (long long)row);
    return RKV_OK;
}

rkv_status rkv__model_clear_session(rkv_model *m, int64_t s) {
    rkv_status first = RKV_OK;
    char msg[512] = "";
    for (int64_t i = 0; i < m->cfg.n_layers; i++) {
        rkv_status st = m->ops.reset(m->ctx, m->layers[i], s);
        if (st != RKV_OK && first == RKV_OK) {
            first = st;
            snprintf(msg, sizeof msg, "%s", rkv_last_error());
        }
    }
    rkv__model_set_clock(m, s, -1);
    if (first != RKV_OK)
        return rkv__fail(first, "session %lld: resetting its storage failed: %s", (long long)s,
                         msg);
    return RKV_OK;
}

void rkv__model_set_clock(rkv_model *m, int64_t s, int64_t last_committed) {
    if (m->sessions[s].row >= 0) rkv__model_close_batch(m);
    m->sessions[s].last_committed = last_committed;
}

rkv_status rkv_model_claim(rkv_model *model, const char *request_id, int64_t *session) {
    RKV__REQUIRE("rkv_model_claim", model);
    RKV__REQUIRE("rkv_model_claim", session);
    rkv_status st = rkv__model_check_request_id("rkv_model_claim", request_id);
    if (st != RKV_OK) return st;
    int64_t s = rkv__model_find(model, request_id, false);
    if (s < 0) {
        if ((st = id_not_away(model, "rkv_model_claim", request_id)) != RKV_OK) return st;
        if ((s = rkv__model_free_slot(model)) < 0)
            return rkv__fail(RKV_ERR_FULL,
                             "rkv_model_claim: all %lld sessions are held or reserved for an "
                             "import; cannot claim one for request '%s' (release a session or "
                             "page one out first; there is no eviction)",
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
    rkv_status st = rkv__model_check_request_id("rkv_model_lookup", request_id);
    if (st != RKV_OK) return st;
    int64_t s = rkv__model_find(model, request_id, false);
    if (s < 0)
        return rkv__fail(RKV_ERR_NOT_FOUND, "rkv_model_lookup: no session holds request '%s'%s",
                         request_id,
                         rkv__model_offloaded_find(model, request_id) >= 0
                             ? " (it is paged out: rkv_model_page_in brings it back)"
                         : rkv__model_find(model, request_id, true) >= 0
                             ? " (it is being imported: rkv_model_session_import makes it live)"
                             : "");
    *session = s;
    return RKV_OK;
}

/* A backend failure while zeroing the session (CUDA: a launch that fails)
 * is reported after the host state has changed: the session is released
 * (or reset) whatever happens, so that the model's bookkeeping stays whole. */
static rkv_status clear(rkv_model *model, int64_t session, const char *what, bool release) {
    rkv_status st = rkv__model_check_held(model, what, session);
    if (st != RKV_OK) return st;
    st = rkv__model_clear_session(model, session);
    if (release) {
        model->sessions[session].held = false;
        memset(model->sessions[session].request_id, 0, RKV_MAX_REQUEST_ID);
    }
    return st == RKV_OK ? RKV_OK : rkv__model_backend_fail(st, what);
}
rkv_status rkv_model_release(rkv_model *model, int64_t session) {
    return clear(model, session, "rkv_model_release", true);
}
rkv_status rkv_model_reset(rkv_model *model, int64_t session) {
    return clear(model, session, "rkv_model_reset", false);
}

rkv_status rkv_model_clock(const rkv_model *model, int64_t session, int64_t *last_committed) {
    if (!last_committed) return rkv__fail(RKV_ERR_NULL, "rkv_model_clock: last_committed is NULL");
    rkv_status st = rkv__model_check_held(model, "rkv_model_clock", session);
    if (st != RKV_OK) return st;
    *last_committed = model->sessions[session].last_committed;
    return RKV_OK;
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
    for (int64_t i = 0; i < model->cfg.n_layers; i++)
        if ((st = model->ops.span_copy(model->ctx, model->layers[i], src_session,
                                       dst_session)) != RKV_OK) {
            /* a backend failure half-way (CUDA): dst must not be half src */
            rkv__model_backend_fail(st, what);
            char msg[512];
            snprintf(msg, sizeof msg, "%s", rkv_last_error());
            rkv__model_clear_session(model, dst_session);
            return rkv__fail(st, "%s; session %lld was reset", msg, (long long)dst_session);
        }
    rkv__model_set_clock(model, dst_session, model->sessions[src_session].last_committed);
    return RKV_OK;
}

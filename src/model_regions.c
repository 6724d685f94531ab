/* Sessions that move (ringkv.h, "Sessions that move"; docs/migration.md):
 * the regions that hold one session in the model's storage (through the
 * backend's span_region), the metadata an importer checks (the session's
 * snapshot header: src/snapshot_header.c writes and reads it), the digest
 * of the regions, and the destination's side: a slot reserved for the
 * import, filled by a transfer engine (or rkv_model_transfer_session's
 * plain copy), checked and made live. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include <xxhash.h>

#include "model_internal.h"
#include "snapshot_header.h"

/* ---- the metadata: the session's snapshot header (docs/migration.md) ---- */

size_t rkv_model_session_meta_bytes(const rkv_model *model) {
    const size_t image = rkv_model_snapshot_bytes(model); /* 8 + the longest header + data */
    return image ? rkv__snap_meta_bytes(image - 8 - rkv__model_session_data_bytes(model)) : 0;
}

size_t rkv_model_session_region_count(const rkv_model *model) {
    return model ? (size_t)model->cfg.n_layers * (size_t)(2 * model->cfg.n_kv_heads + 1) : 0;
}

uint64_t rkv__model_session_data_bytes(const rkv_model *m) {
    uint64_t n = 0;
    for (int64_t i = 0; i < m->cfg.n_layers; i++)
        n += 2 * (uint64_t)m->cfg.n_kv_heads * rkv__model_span_bytes(m, i, RKV_SPAN_K) +
             rkv__model_span_bytes(m, i, RKV_SPAN_WRITTEN);
    return n;
}

/* The model's enqueued work has finished (the regions hold its result). */
static rkv_status wait_idle(const rkv_model *m, const char *what) {
    rkv_status st = m->ops.synchronize(m->ctx);
    return st == RKV_OK ? RKV_OK : rkv__model_backend_fail(st, what);
}

void rkv__model_region_at(const rkv_model *m, size_t k, int64_t *layer, rkv_span_part *part,
                          int64_t *head) {
    const size_t H = (size_t)m->cfg.n_kv_heads, r = k % (2 * H + 1);
    *layer = (int64_t)(k / (2 * H + 1));
    *part = r == 2 * H ? RKV_SPAN_WRITTEN : r < H ? RKV_SPAN_K : RKV_SPAN_V;
    *head = *part == RKV_SPAN_WRITTEN ? 0 : (int64_t)(r % H);
}

uint8_t *rkv__model_host_region(const rkv_model *m, int64_t layer, int64_t session,
                                rkv_span_part part, int64_t head) {
    void *ptr = NULL;
    int device = 0;
    if (!m->ops.span_region ||
        m->ops.span_region(m->ctx, m->layers[layer], session, part, head, &ptr, &device) !=
            RKV_OK ||
        device >= 0)
        return NULL;
    return ptr;
}

/* XXH3-64 of the session's regions in order (only the written bits with
 * written_only), once the model's enqueued work has finished: hashed in
 * place when the backend exposes host regions, else read through a host
 * buffer. With check, written bits that break the layer's invariant are
 * RKV_ERR_FORMAT naming layer and slot. */
static rkv_status hash_regions(const rkv_model *m, const char *what, int64_t session,
                               bool written_only, bool check, uint64_t *out) {
    rkv_status st = wait_idle(m, what);
    if (st != RKV_OK) return st;
    XXH3_state_t hs;
    XXH3_64bits_reset(&hs);
    uint8_t *bounce = NULL;
    const size_t n = rkv_model_session_region_count(m);
    for (size_t k = 0; k < n && st == RKV_OK; k++) {
        int64_t i, h;
        rkv_span_part part;
        rkv__model_region_at(m, k, &i, &part, &h);
        if (written_only && part != RKV_SPAN_WRITTEN) continue;
        const uint8_t *ptr = rkv__model_host_region(m, i, session, part, h);
        if (!ptr) { /* device memory: through the host */
            if (!bounce && !(bounce = malloc(rkv__model_max_span_bytes(m))))
                return rkv__fail(RKV_ERR_NO_MEMORY, "%s: out of memory", what);
            if ((st = m->ops.span_read(m->ctx, m->layers[i], session, part, h, bounce)) != RKV_OK) {
                st = rkv__model_backend_fail(st, what);
                break;
            }
            ptr = bounce;
        }
        XXH3_64bits_update(&hs, ptr, rkv__model_span_bytes(m, i, part));
        const rkv_geometry g = rkv__model_layer_geometry(m, i);
        const int64_t bad =
            check && part == RKV_SPAN_WRITTEN ? rkv__written_span_check(&g, ptr) : -1;
        char why[160];
        if (bad >= 0)
            st = rkv__fail(RKV_ERR_FORMAT,
                           "%s: corrupted data: layer %lld of the session: %s; the regions were "
                           "not filled, or not with this session",
                           what, (long long)i,
                           rkv__written_bad_what(&g, ptr, bad, why, sizeof why));
    }
    free(bounce);
    if (st == RKV_OK) *out = XXH3_64bits_digest(&hs);
    return st;
}

/* Validates metadata against this model into *h (its table freed): the
 * snapshot header's checks (rkv__snap_meta_parse: length, JSON, versions,
 * checksum, clock, tensor table), the geometry (the first difference
 * named), a request id. */
static rkv_status read_meta(const rkv_model *m, const char *what, const void *meta,
                            size_t meta_bytes, rkv__snap_header *h) {
    if (!meta) return rkv__fail(RKV_ERR_NULL, "%s: meta is NULL", what);
    const rkv__buf in = {meta, meta_bytes, "meta"};
    rkv_status st = rkv__model_check_bufs(m, what, NULL, 0, &in, 1, false);
    if (st != RKV_OK) return st;
    const rkv__snap_where w = {what, "(session metadata)"};
    st = rkv__snap_meta_parse(&w, meta, meta_bytes, h);
    rkv__snap_header_free(h); /* the table is the geometry's, compared next */
    if (st == RKV_OK)
        st = rkv__snap_geometry_check(what, w.name, "session", &h->info.config, &m->cfg);
    if (st == RKV_OK && !h->info.request_id[0])
        st = rkv__fail(RKV_ERR_FORMAT, "%s: %s: the request id is empty; a held session has one",
                       what, w.name);
    return st;
}

rkv_status rkv_model_session_export_meta(const rkv_model *model, int64_t session, void *meta,
                                         size_t meta_bytes) {
    static const char what[] = "rkv_model_session_export_meta";
    rkv_status st = rkv__model_check_between_frames(model, what, session);
    if (st != RKV_OK) return st;
    if (!meta) return rkv__fail(RKV_ERR_NULL, "%s: meta is NULL", what);
    const size_t need = rkv_model_session_meta_bytes(model);
    if (!need) return rkv__fail(RKV_ERR_NO_MEMORY, "%s: out of memory", what);
    if (meta_bytes < need)
        return rkv__fail(RKV_ERR_INVALID_ARG,
                         "%s: meta has %zu bytes; the metadata takes %zu "
                         "(rkv_model_session_meta_bytes)",
                         what, meta_bytes, need);
    const rkv__buf out = {meta, need, "meta"};
    if ((st = rkv__model_check_bufs(model, what, &out, 1, NULL, 0, false)) != RKV_OK) return st;
    const rkv__session_state *ss = &model->sessions[session];
    uint64_t wx = 0;
    if ((st = hash_regions(model, what, session, true, false, &wx)) != RKV_OK) return st;
    /* the header with the two keys, padded to the size reckoned, sealed with
     * data_xxh3 0, after its length */
    rkv__snap_text t;
    if ((st = rkv__snap_header_build(&model->cfg, session, ss->request_id, ss->last_committed,
                                     &wx, need - 8, what, &t)) != RKV_OK)
        return st;
    if (8 + t.len > need)
        st = rkv__fail(RKV_ERR_STATE, "%s: the metadata takes %zu bytes, more than the %zu "
                                      "reckoned (a bug)", what, 8 + t.len, need);
    if (st == RKV_OK) {
        rkv__snap_header_seal(&t, 0);
        memcpy(meta, t.first8, 8);
        memcpy((uint8_t *)meta + 8, t.text, t.len);
    }
    free(t.text);
    return st;
}

/* ---- regions ------------------------------------------------------------------- */

/* A held session between frames, or a slot reserved for import. */
static rkv_status check_mover(const rkv_model *m, const char *what, int64_t session) {
    if (m && session >= 0 && session < m->cfg.num_sessions && m->sessions[session].importing)
        return RKV_OK;
    return rkv__model_check_between_frames(m, what, session);
}

/* A reserved slot (a NULL model or a session out of range: the errors of a
 * held session's check). */
static rkv_status check_reserved(const rkv_model *m, const char *what, int64_t session) {
    if (!m || session < 0 || session >= m->cfg.num_sessions)
        return rkv__model_check_held(m, what, session);
    if (m->sessions[session].importing) return RKV_OK;
    return rkv__fail(RKV_ERR_STATE,
                     "%s: session %lld is not reserved for an import (%s; "
                     "rkv_model_import_reserve reserves one)",
                     what, (long long)session,
                     m->sessions[session].held ? "it is held" : "it is free");
}

rkv_status rkv_model_session_regions(rkv_model *model, int64_t session,
                                     rkv_session_region *regions, size_t max_regions,
                                     size_t *count) {
    static const char what[] = "rkv_model_session_regions";
    rkv_status st = check_mover(model, what, session);
    if (st != RKV_OK) return st;
    RKV__REQUIRE(what, regions);
    RKV__REQUIRE(what, count);
    const size_t n = rkv_model_session_region_count(model);
    if (max_regions < n)
        return rkv__fail(RKV_ERR_INVALID_ARG,
                         "%s: max_regions = %zu; the session has %zu regions "
                         "(rkv_model_session_region_count)",
                         what, max_regions, n);
    const rkv__buf out[] = {{regions, n * sizeof *regions, "regions"},
                            {count, sizeof *count, "count"}};
    if ((st = rkv__model_check_bufs(model, what, out, 2, NULL, 0, false)) != RKV_OK) return st;
    if (!model->ops.span_region)
        return rkv__fail(RKV_ERR_STATE,
                         "%s: the '%s' backend exposes no session regions (its table has no "
                         "span_region); move sessions with snapshot images instead",
                         what, model->ops.name);
    if ((st = wait_idle(model, what)) != RKV_OK) return st;
    rkv_session_region *tmp = malloc(n * sizeof *tmp);
    if (!tmp) return rkv__fail(RKV_ERR_NO_MEMORY, "%s: out of memory", what);
    for (size_t k = 0; k < n && st == RKV_OK; k++) {
        int64_t i, h;
        rkv_span_part part;
        void *ptr = NULL;
        int device = -1;
        rkv__model_region_at(model, k, &i, &part, &h);
        st = model->ops.span_region(model->ctx, model->layers[i], session, part, h, &ptr, &device);
        tmp[k] = (rkv_session_region){ptr, rkv__model_span_bytes(model, i, part), device, part, i, h};
    }
    if (st == RKV_OK) {
        memcpy(regions, tmp, n * sizeof *tmp);
        *count = n;
    }
    free(tmp);
    return st == RKV_OK ? RKV_OK : rkv__model_backend_fail(st, what);
}

rkv_status rkv_model_session_digest(rkv_model *model, int64_t session, uint64_t *xxh3) {
    static const char what[] = "rkv_model_session_digest";
    rkv_status st = check_mover(model, what, session);
    if (st != RKV_OK) return st;
    RKV__REQUIRE(what, xxh3);
    const rkv__buf out = {xxh3, sizeof *xxh3, "xxh3"};
    if ((st = rkv__model_check_bufs(model, what, &out, 1, NULL, 0, false)) != RKV_OK) return st;
    return hash_regions(model, what, session, false, false, xxh3);
}

/* ---- import ---------------------------------------------------------------------- */

rkv_status rkv_model_import_reserve(rkv_model *model, const void *meta, size_t meta_bytes,
                                    int64_t *session) {
    static const char what[] = "rkv_model_import_reserve";
    RKV__REQUIRE(what, model);
    RKV__REQUIRE(what, session);
    rkv__snap_header v;
    const rkv__buf out = {session, sizeof *session, "session"}, in = {meta, meta_bytes, "meta"};
    rkv_status st = rkv__model_check_bufs(model, what, &out, 1, &in, 1, false);
    if (st == RKV_OK) st = read_meta(model, what, meta, meta_bytes, &v);
    if (st != RKV_OK || (st = rkv__model_id_unused(model, what, v.info.request_id)) != RKV_OK)
        return st;
    const int64_t s = rkv__model_free_slot(model);
    if (s < 0)
        return rkv__fail(RKV_ERR_FULL,
                         "%s: all %lld sessions are held or reserved for an import; no room "
                         "for request '%s' (the source keeps it)",
                         what, (long long)model->cfg.num_sessions, v.info.request_id);
    rkv__session_state *ss = &model->sessions[s];
    ss->importing = true;
    ss->import_meta = v.info.header_xxh3;
    memcpy(ss->request_id, v.info.request_id, RKV_MAX_REQUEST_ID);
    ss->last_committed = -1;
    *session = s;
    return RKV_OK;
}

/* Every check of an import; *v receives what meta says. */
static rkv_status check_import(const rkv_model *m, const char *what, int64_t session,
                               const void *meta, size_t meta_bytes, rkv__snap_header *v) {
    rkv_status st = check_reserved(m, what, session);
    if (st != RKV_OK || (st = read_meta(m, what, meta, meta_bytes, v)) != RKV_OK) return st;
    const rkv__session_state *ss = &m->sessions[session];
    if (v->info.header_xxh3 != ss->import_meta)
        return rkv__fail(RKV_ERR_FORMAT,
                         "%s: the metadata (request '%s', clock %lld) is not the one session "
                         "%lld was reserved with (request '%s')",
                         what, v->info.request_id, (long long)v->info.last_committed,
                         (long long)session, ss->request_id);
    uint64_t wx = 0;
    if ((st = hash_regions(m, what, session, true, true, &wx)) != RKV_OK) return st;
    if (wx != v->written_xxh3)
        return rkv__fail(RKV_ERR_FORMAT,
                         "%s: the written bits in the regions of session %lld (XXH3-64 %016llx) "
                         "are not the exporter's (the metadata says %016llx): the regions were "
                         "not filled, or not with this session's data; copy every region of "
                         "rkv_model_session_regions before the import",
                         what, (long long)session, (unsigned long long)wx,
                         (unsigned long long)v->written_xxh3);
    return RKV_OK;
}

rkv_status rkv_model_import_check(const rkv_model *model, int64_t session, const void *meta,
                                  size_t meta_bytes) {
    rkv__snap_header v;
    return check_import(model, "rkv_model_import_check", session, meta, meta_bytes, &v);
}

rkv_status rkv_model_session_import(rkv_model *model, int64_t session, const void *meta,
                                    size_t meta_bytes) {
    rkv__snap_header v;
    rkv_status st =
        check_import(model, "rkv_model_session_import", session, meta, meta_bytes, &v);
    if (st != RKV_OK) return st;
    rkv__session_state *ss = &model->sessions[session];
    ss->importing = false;
    ss->import_meta = 0;
    ss->held = true;
    rkv__model_set_clock(model, session, v.info.last_committed);
    return RKV_OK;
}

rkv_status rkv_model_import_cancel(rkv_model *model, int64_t session) {
    static const char what[] = "rkv_model_import_cancel";
    rkv_status st = check_reserved(model, what, session);
    if (st != RKV_OK) return st;
    rkv__session_state *ss = &model->sessions[session];
    st = rkv__model_clear_session(model, session);
    ss->importing = false;
    ss->import_meta = 0;
    memset(ss->request_id, 0, RKV_MAX_REQUEST_ID);
    return st == RKV_OK ? RKV_OK : rkv__model_backend_fail(st, what);
}

/* ---- the plain copy ------------------------------------------------------------------ */

rkv_status rkv_model_transfer_session(const rkv_model *src, int64_t src_session, rkv_model *dst,
                                      int64_t dst_session) {
    static const char what[] = "rkv_model_transfer_session";
    rkv_status st = rkv__model_check_between_frames(src, what, src_session);
    if (st != RKV_OK || (st = check_reserved(dst, what, dst_session)) != RKV_OK ||
        (st = rkv__snap_geometry_check(what, NULL, "source model", &src->cfg, &dst->cfg)) !=
            RKV_OK ||
        (st = wait_idle(src, what)) != RKV_OK || (st = wait_idle(dst, what)) != RKV_OK)
        return st;
    uint8_t *bounce = NULL; /* memcpy between host regions, else through it by span copies */
    for (size_t k = 0; k < rkv_model_session_region_count(src) && st == RKV_OK; k++) {
        int64_t i, h;
        rkv_span_part part;
        rkv__model_region_at(src, k, &i, &part, &h);
        uint8_t *sp = rkv__model_host_region(src, i, src_session, part, h);
        uint8_t *dp = sp ? rkv__model_host_region(dst, i, dst_session, part, h) : NULL;
        if (dp)
            memcpy(dp, sp, rkv__model_span_bytes(src, i, part));
        else if (!bounce && !(bounce = malloc(rkv__model_max_span_bytes(src))))
            st = rkv__fail(RKV_ERR_NO_MEMORY, "%s: out of memory", what);
        else if ((st = src->ops.span_read(src->ctx, src->layers[i], src_session, part, h,
                                          bounce)) == RKV_OK)
            st = dst->ops.span_write(dst->ctx, dst->layers[i], dst_session, part, h, bounce);
    }
    free(bounce);
    return st == RKV_OK ? RKV_OK : rkv__model_backend_fail(st, what);
}

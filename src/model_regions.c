/* Sessions that move (ringkv.h, "Sessions that move"; docs/migration.md):
 * the regions that hold one session in the model's storage (through the
 * backend's span_region), the metadata blob an importer checks, the digest
 * of the regions, and the destination's side: a slot reserved for the
 * import, filled by a transfer engine (or rkv_model_transfer_session's
 * plain copy), checked and made live. */
#define _POSIX_C_SOURCE 200809L /* strnlen */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include <xxhash.h>

#include "model_internal.h"
#include "snapshot_header.h"

/* ---- the metadata blob (RKV_SESSION_META_VERSION, little-endian: ringkv.h) ---- */

#define META_MAGIC "RKVSESS"     /* 8 bytes with its NUL */
#define META_FIXED 344           /* bytes before the per-layer triples, checksum included */
#define META_ID_AT 72            /* the request id: 256 bytes */
#define META_WRITTEN_AT 328      /* XXH3-64 of the session's written bits, layer by layer */
#define META_LAYERS_AT 336       /* the per-layer triples */

static void put_u32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static void put_u64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static uint32_t get_u32(const uint8_t *p) {
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}
static uint64_t get_u64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

size_t rkv_model_session_meta_bytes(const rkv_model *model) {
    return model ? META_FIXED + 24 * (size_t)model->cfg.n_layers : 0;
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

/* XXH3-64 of `session`'s written bits, layer after layer (read through the
 * backend: the cheap part of the data, C bytes a layer). With check, a
 * layer whose bits break the invariant is RKV_ERR_FORMAT naming it. */
static rkv_status written_digest(const rkv_model *m, const char *what, int64_t session,
                                 bool check, uint64_t *out) {
    size_t most = 0;
    for (int64_t i = 0; i < m->cfg.n_layers; i++) {
        const size_t b = rkv__model_span_bytes(m, i, RKV_SPAN_WRITTEN);
        if (b > most) most = b;
    }
    uint8_t *bits = malloc(most);
    if (!bits) return rkv__fail(RKV_ERR_NO_MEMORY, "%s: out of memory", what);
    XXH3_state_t hs;
    XXH3_64bits_reset(&hs);
    rkv_status st = RKV_OK;
    for (int64_t i = 0; i < m->cfg.n_layers && st == RKV_OK; i++) {
        if ((st = rkv__model_span_read(m, i, session, RKV_SPAN_WRITTEN, 0, bits)) != RKV_OK) {
            st = rkv__model_backend_fail(st, what);
            break;
        }
        const size_t n = rkv__model_span_bytes(m, i, RKV_SPAN_WRITTEN);
        XXH3_64bits_update(&hs, bits, n);
        if (!check) continue;
        const rkv_geometry g = rkv__model_layer_geometry(m, i);
        const int64_t bad = rkv__written_span_check(&g, bits);
        char why[160];
        if (bad >= 0)
            st = rkv__fail(RKV_ERR_FORMAT,
                           "%s: corrupted data: layer %lld of the session: %s; the regions were "
                           "not filled, or not with this session",
                           what, (long long)i, rkv__written_bad_what(&g, bits, bad, why, sizeof why));
    }
    free(bits);
    if (st == RKV_OK) *out = XXH3_64bits_digest(&hs);
    return st;
}

static void write_meta(const rkv_model *m, const char *request_id, int64_t last_committed,
                       uint64_t written_xxh3, uint8_t *out) {
    const int64_t nl = m->cfg.n_layers;
    const size_t n = rkv_model_session_meta_bytes(m);
    memset(out, 0, n);
    memcpy(out, META_MAGIC, 8);
    put_u32(out + 8, RKV_SESSION_META_VERSION);
    put_u32(out + 12, (uint32_t)m->cfg.dtype);
    put_u64(out + 16, (uint64_t)nl);
    put_u64(out + 24, (uint64_t)m->cfg.n_kv_heads);
    put_u64(out + 32, (uint64_t)m->cfg.d_head);
    put_u64(out + 40, (uint64_t)m->cfg.tokens_per_frame);
    put_u64(out + 48, (uint64_t)last_committed);
    put_u64(out + 56, (uint64_t)rkv_model_session_region_count(m));
    put_u64(out + 64, rkv__model_session_data_bytes(m));
    memcpy(out + META_ID_AT, request_id, strnlen(request_id, RKV_MAX_REQUEST_ID - 1));
    put_u64(out + META_WRITTEN_AT, written_xxh3);
    for (int64_t i = 0; i < nl; i++) {
        uint8_t *p = out + META_LAYERS_AT + 24 * (size_t)i;
        put_u64(p, (uint64_t)m->cfg.layers[i].ring_frames);
        put_u64(p + 8, (uint64_t)m->cfg.layers[i].ring_buckets);
        put_u64(p + 16, (uint64_t)m->cfg.layers[i].pinned_dilation);
    }
    put_u64(out + n - 8, XXH3_64bits(out, n - 8));
}

/* What a valid blob says. */
typedef struct meta_view {
    char request_id[RKV_MAX_REQUEST_ID];
    int64_t last_committed;
    uint64_t written_xxh3; /* of the exporter's written bits */
    uint64_t xxh3; /* the blob's own checksum: identifies it */
} meta_view;

/* Validates a blob against this model: size, magic, version, checksum,
 * geometry (the first difference named), request id, clock, sizes. */
static rkv_status read_meta(const rkv_model *m, const char *what, const void *meta,
                            size_t meta_bytes, meta_view *out) {
    if (!meta) return rkv__fail(RKV_ERR_NULL, "%s: meta is NULL", what);
    const rkv__buf in = {meta, meta_bytes, "meta"};
    rkv_status st = rkv__model_check_bufs(m, what, NULL, 0, &in, 1, false);
    if (st != RKV_OK) return st;
    const uint8_t *b = meta;
    if (meta_bytes < 16 || memcmp(b, META_MAGIC, 8))
        return rkv__fail(RKV_ERR_FORMAT,
                         "%s: not ringkv session metadata (%zu bytes; expected the magic "
                         "\"RKVSESS\" of rkv_model_session_export_meta)",
                         what, meta_bytes);
    const uint32_t version = get_u32(b + 8);
    if (version != RKV_SESSION_META_VERSION)
        return rkv__fail(RKV_ERR_FORMAT,
                         "%s: session metadata version %u; this ringkv reads version %d", what,
                         (unsigned)version, RKV_SESSION_META_VERSION);
    const size_t need = rkv_model_session_meta_bytes(m);
    if (meta_bytes < META_FIXED || get_u64(b + 16) != (uint64_t)m->cfg.n_layers ||
        meta_bytes != need) {
        const uint64_t nl = meta_bytes >= 24 ? get_u64(b + 16) : 0;
        return rkv__fail(RKV_ERR_FORMAT,
                         "%s: wrong geometry: the metadata has %zu bytes and n_layers %llu; this "
                         "model's has %zu bytes and n_layers %lld",
                         what, meta_bytes, (unsigned long long)nl, need,
                         (long long)m->cfg.n_layers);
    }
    const uint64_t sum = get_u64(b + need - 8);
    if (sum != XXH3_64bits(b, need - 8))
        return rkv__fail(RKV_ERR_FORMAT,
                         "%s: damaged session metadata (checksum %016llx, computed %016llx)", what,
                         (unsigned long long)sum, (unsigned long long)XXH3_64bits(b, need - 8));
#define FIELD(at, label, mine)                                                                     \
    if (get_u64(b + (at)) != (uint64_t)(mine))                                                    \
        return rkv__fail(RKV_ERR_FORMAT,                                                           \
                         "%s: wrong geometry: the session has %s %lld, this model %lld", what,    \
                         label, (long long)get_u64(b + (at)), (long long)(mine));
    if (get_u32(b + 12) != (uint32_t)m->cfg.dtype) {
        const uint32_t d = get_u32(b + 12);
        char theirs[40];
        const char *name = d <= INT32_MAX ? rkv_dtype_name((rkv_dtype)d) : NULL;
        snprintf(theirs, sizeof theirs, "%s (%u)", name ? name : "unknown", (unsigned)d);
        return rkv__fail(RKV_ERR_FORMAT,
                         "%s: wrong geometry: the session has dtype %s, this model %s (%u)", what,
                         theirs, rkv_dtype_name(m->cfg.dtype), (unsigned)m->cfg.dtype);
    }
    FIELD(24, "n_kv_heads", m->cfg.n_kv_heads)
    FIELD(32, "d_head", m->cfg.d_head)
    FIELD(40, "tokens_per_frame", m->cfg.tokens_per_frame)
    for (int64_t i = 0; i < m->cfg.n_layers; i++) {
        const uint8_t *p = b + META_LAYERS_AT + 24 * (size_t)i;
        const rkv_layer_spec *y = &m->cfg.layers[i];
        if (get_u64(p) != (uint64_t)y->ring_frames || get_u64(p + 8) != (uint64_t)y->ring_buckets ||
            get_u64(p + 16) != (uint64_t)y->pinned_dilation)
            return rkv__fail(RKV_ERR_FORMAT,
                             "%s: wrong geometry: layer %lld of the session has ring_frames "
                             "%lld, ring_buckets %lld, pinned_dilation %lld; this model's has "
                             "%lld, %lld, %lld",
                             what, (long long)i, (long long)get_u64(p), (long long)get_u64(p + 8),
                             (long long)get_u64(p + 16), (long long)y->ring_frames,
                             (long long)y->ring_buckets, (long long)y->pinned_dilation);
    }
    FIELD(56, "region count", rkv_model_session_region_count(m))
    FIELD(64, "data bytes", rkv__model_session_data_bytes(m))
#undef FIELD
    const int64_t clock = (int64_t)get_u64(b + 48);
    if (clock < -1)
        return rkv__fail(RKV_ERR_FORMAT, "%s: session metadata clock %lld; expected >= -1", what,
                         (long long)clock);
    const char *id = (const char *)b + META_ID_AT;
    const size_t n = strnlen(id, RKV_MAX_REQUEST_ID);
    if (n == 0 || n == RKV_MAX_REQUEST_ID)
        return rkv__fail(RKV_ERR_FORMAT,
                         "%s: session metadata request id has %s bytes; expected 1..%d", what,
                         n ? "too many" : "0", RKV_MAX_REQUEST_ID - 1);
    for (size_t i = n; i < RKV_MAX_REQUEST_ID; i++)
        if (id[i])
            return rkv__fail(RKV_ERR_FORMAT,
                             "%s: session metadata request id is not NUL-padded (byte %zu)", what,
                             i);
    memcpy(out->request_id, id, RKV_MAX_REQUEST_ID);
    out->last_committed = clock;
    out->written_xxh3 = get_u64(b + META_WRITTEN_AT);
    out->xxh3 = sum;
    return RKV_OK;
}

rkv_status rkv_model_session_export_meta(const rkv_model *model, int64_t session, void *meta,
                                         size_t meta_bytes) {
    static const char what[] = "rkv_model_session_export_meta";
    rkv_status st = rkv__model_check_between_frames(model, what, session);
    if (st != RKV_OK) return st;
    if (!meta) return rkv__fail(RKV_ERR_NULL, "%s: meta is NULL", what);
    const size_t need = rkv_model_session_meta_bytes(model);
    if (meta_bytes < need)
        return rkv__fail(RKV_ERR_INVALID_ARG,
                         "%s: meta has %zu bytes; the metadata takes %zu "
                         "(rkv_model_session_meta_bytes)",
                         what, meta_bytes, need);
    const rkv__buf out = {meta, need, "meta"};
    if ((st = rkv__model_check_bufs(model, what, &out, 1, NULL, 0, false)) != RKV_OK) return st;
    const rkv__session_state *ss = &model->sessions[session];
    uint64_t wx = 0;
    if ((st = wait_idle(model, what)) != RKV_OK ||
        (st = written_digest(model, what, session, false, &wx)) != RKV_OK)
        return st;
    write_meta(model, ss->request_id, ss->last_committed, wx, meta);
    return RKV_OK;
}

/* ---- regions ------------------------------------------------------------------- */

/* A held session between frames, or a slot reserved for import. */
static rkv_status check_mover(const rkv_model *m, const char *what, int64_t session) {
    if (!m) return rkv__fail(RKV_ERR_NULL, "%s: model is NULL", what);
    if (session >= 0 && session < m->cfg.num_sessions && m->sessions[session].importing)
        return RKV_OK;
    return rkv__model_check_between_frames(m, what, session);
}

/* A reserved slot. */
static rkv_status check_reserved(const rkv_model *m, const char *what, int64_t session) {
    if (!m) return rkv__fail(RKV_ERR_NULL, "%s: model is NULL", what);
    if (session < 0 || session >= m->cfg.num_sessions)
        return rkv__fail(RKV_ERR_RANGE, "%s: session %lld out of range; expected 0..%lld", what,
                         (long long)session, (long long)(m->cfg.num_sessions - 1));
    if (!m->sessions[session].importing)
        return rkv__fail(RKV_ERR_STATE,
                         "%s: session %lld is not reserved for an import (%s; "
                         "rkv_model_import_reserve reserves one)",
                         what, (long long)session,
                         m->sessions[session].held ? "it is held" : "it is free");
    return RKV_OK;
}

/* Every region, in order, through the backend (no waiting). */
static rkv_status list_regions(const rkv_model *m, const char *what, int64_t session,
                               rkv_session_region *out) {
    if (!m->ops.span_region)
        return rkv__fail(RKV_ERR_STATE,
                         "%s: the '%s' backend exposes no session regions (its table has no "
                         "span_region); move sessions with snapshot images instead",
                         what, m->ops.name);
    size_t k = 0;
    for (int64_t i = 0; i < m->cfg.n_layers; i++)
        for (int part = RKV_SPAN_K; part <= RKV_SPAN_WRITTEN; part++)
            for (int64_t h = 0; h < (part == RKV_SPAN_WRITTEN ? 1 : m->cfg.n_kv_heads); h++) {
                void *ptr = NULL;
                int device = -1;
                rkv_status st = m->ops.span_region(m->ctx, m->layers[i], session,
                                                   (rkv_span_part)part, h, &ptr, &device);
                if (st != RKV_OK) return rkv__model_backend_fail(st, what);
                out[k++] = (rkv_session_region){ptr,
                                                rkv__model_span_bytes(m, i, (rkv_span_part)part),
                                                device, part, i, h};
            }
    return RKV_OK;
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
    if (model->ops.span_region && (st = wait_idle(model, what)) != RKV_OK) return st;
    rkv_session_region *tmp = malloc(n * sizeof *tmp);
    if (!tmp) return rkv__fail(RKV_ERR_NO_MEMORY, "%s: out of memory", what);
    if ((st = list_regions(model, what, session, tmp)) == RKV_OK) {
        memcpy(regions, tmp, n * sizeof *tmp);
        *count = n;
    }
    free(tmp);
    return st;
}

/* XXH3-64 over every piece of the session, in region order: hashed in
 * place when the backend exposes host regions, else read through a host
 * buffer. */
static rkv_status digest_session(const rkv_model *m, const char *what, int64_t session,
                                 uint64_t *out) {
    XXH3_state_t hs;
    XXH3_64bits_reset(&hs);
    uint8_t *bounce = NULL;
    rkv_status st = RKV_OK;
    for (int64_t i = 0; i < m->cfg.n_layers && st == RKV_OK; i++)
        for (int part = RKV_SPAN_K; part <= RKV_SPAN_WRITTEN && st == RKV_OK; part++)
            for (int64_t h = 0; h < (part == RKV_SPAN_WRITTEN ? 1 : m->cfg.n_kv_heads); h++) {
                const size_t bytes = rkv__model_span_bytes(m, i, (rkv_span_part)part);
                void *ptr = NULL;
                int device = 0;
                if (m->ops.span_region &&
                    (st = m->ops.span_region(m->ctx, m->layers[i], session, (rkv_span_part)part,
                                             h, &ptr, &device)) != RKV_OK)
                    break;
                if (!ptr || device >= 0) { /* device memory: through the host */
                    if (!bounce && !(bounce = malloc(rkv__model_max_span_bytes(m)))) {
                        free(bounce);
                        return rkv__fail(RKV_ERR_NO_MEMORY, "%s: out of memory", what);
                    }
                    if ((st = rkv__model_span_read(m, i, session, (rkv_span_part)part, h,
                                                   bounce)) != RKV_OK)
                        break;
                    ptr = bounce;
                }
                XXH3_64bits_update(&hs, ptr, bytes);
            }
    free(bounce);
    if (st != RKV_OK) return rkv__model_backend_fail(st, what);
    *out = XXH3_64bits_digest(&hs);
    return RKV_OK;
}

rkv_status rkv_model_session_digest(rkv_model *model, int64_t session, uint64_t *xxh3) {
    static const char what[] = "rkv_model_session_digest";
    rkv_status st = check_mover(model, what, session);
    if (st != RKV_OK) return st;
    RKV__REQUIRE(what, xxh3);
    const rkv__buf out = {xxh3, sizeof *xxh3, "xxh3"};
    if ((st = rkv__model_check_bufs(model, what, &out, 1, NULL, 0, false)) != RKV_OK) return st;
    if ((st = wait_idle(model, what)) != RKV_OK) return st;
    return digest_session(model, what, session, xxh3);
}

/* ---- import ---------------------------------------------------------------------- */

rkv_status rkv_model_import_reserve(rkv_model *model, const void *meta, size_t meta_bytes,
                                    int64_t *session) {
    static const char what[] = "rkv_model_import_reserve";
    RKV__REQUIRE(what, model);
    RKV__REQUIRE(what, session);
    meta_view v;
    const rkv__buf out = {session, sizeof *session, "session"}, in = {meta, meta_bytes, "meta"};
    rkv_status st = rkv__model_check_bufs(model, what, &out, 1, &in, 1, false);
    if (st == RKV_OK) st = read_meta(model, what, meta, meta_bytes, &v);
    if (st != RKV_OK || (st = rkv__model_id_unused(model, what, v.request_id)) != RKV_OK)
        return st;
    const int64_t s = rkv__model_free_slot(model);
    if (s < 0)
        return rkv__fail(RKV_ERR_FULL,
                         "%s: all %lld sessions are held or reserved for an import; no room "
                         "for request '%s' (the source keeps it)",
                         what, (long long)model->cfg.num_sessions, v.request_id);
    rkv__session_state *ss = &model->sessions[s];
    ss->importing = true;
    ss->import_meta = v.xxh3;
    memcpy(ss->request_id, v.request_id, RKV_MAX_REQUEST_ID);
    ss->last_committed = -1;
    *session = s;
    return RKV_OK;
}

/* Every check of an import; *v receives what meta says. */
static rkv_status check_import(const rkv_model *m, const char *what, int64_t session,
                               const void *meta, size_t meta_bytes, meta_view *v) {
    rkv_status st = check_reserved(m, what, session);
    if (st != RKV_OK || (st = read_meta(m, what, meta, meta_bytes, v)) != RKV_OK) return st;
    const rkv__session_state *ss = &m->sessions[session];
    if (v->xxh3 != ss->import_meta)
        return rkv__fail(RKV_ERR_FORMAT,
                         "%s: the metadata (request '%s', clock %lld) is not the one session "
                         "%lld was reserved with (request '%s')",
                         what, v->request_id, (long long)v->last_committed, (long long)session,
                         ss->request_id);
    uint64_t wx = 0;
    if ((st = wait_idle(m, what)) != RKV_OK ||
        (st = written_digest(m, what, session, true, &wx)) != RKV_OK)
        return st;
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
    meta_view v;
    return check_import(model, "rkv_model_import_check", session, meta, meta_bytes, &v);
}

rkv_status rkv_model_session_import(rkv_model *model, int64_t session, const void *meta,
                                    size_t meta_bytes) {
    meta_view v;
    rkv_status st =
        check_import(model, "rkv_model_session_import", session, meta, meta_bytes, &v);
    if (st != RKV_OK) return st;
    rkv__session_state *ss = &model->sessions[session];
    ss->importing = false;
    ss->import_meta = 0;
    ss->held = true;
    rkv__model_set_clock(model, session, v.last_committed);
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

/* One piece from src's session to dst's slot: memcpy between host regions,
 * else through the host buffer by the backends' span copies. */
static rkv_status copy_piece(const rkv_model *src, int64_t ss, rkv_model *dst, int64_t ds,
                             int64_t i, rkv_span_part part, int64_t h, uint8_t **bounce) {
    void *sp = NULL, *dp = NULL;
    int sdev = 0, ddev = 0;
    if (src->ops.span_region && dst->ops.span_region &&
        src->ops.span_region(src->ctx, src->layers[i], ss, part, h, &sp, &sdev) == RKV_OK &&
        dst->ops.span_region(dst->ctx, dst->layers[i], ds, part, h, &dp, &ddev) == RKV_OK &&
        sdev < 0 && ddev < 0) {
        memcpy(dp, sp, rkv__model_span_bytes(src, i, part));
        return RKV_OK;
    }
    if (!*bounce && !(*bounce = malloc(rkv__model_max_span_bytes(src))))
        return rkv__fail(RKV_ERR_NO_MEMORY, "rkv_model_transfer_session: out of memory");
    rkv_status st = rkv__model_span_read(src, i, ss, part, h, *bounce);
    if (st == RKV_OK) st = rkv__model_span_write(dst, i, ds, part, h, *bounce);
    return st;
}

rkv_status rkv_model_transfer_session(const rkv_model *src, int64_t src_session, rkv_model *dst,
                                      int64_t dst_session) {
    static const char what[] = "rkv_model_transfer_session";
    rkv_status st = rkv__model_check_between_frames(src, what, src_session);
    if (st != RKV_OK || (st = check_reserved(dst, what, dst_session)) != RKV_OK) return st;
    if ((st = rkv__snap_geometry_check(what, NULL, "source model", &src->cfg, &dst->cfg)) != RKV_OK)
        return st;
    if ((st = wait_idle(src, what)) != RKV_OK || (st = wait_idle(dst, what)) != RKV_OK) return st;
    uint8_t *bounce = NULL;
    for (int64_t i = 0; i < src->cfg.n_layers && st == RKV_OK; i++)
        for (int part = RKV_SPAN_K; part <= RKV_SPAN_WRITTEN && st == RKV_OK; part++)
            for (int64_t h = 0; h < (part == RKV_SPAN_WRITTEN ? 1 : src->cfg.n_kv_heads) &&
                                st == RKV_OK;
                 h++)
                st = copy_piece(src, src_session, dst, dst_session, i, (rkv_span_part)part, h,
                                &bounce);
    free(bounce);
    return st == RKV_OK ? RKV_OK : rkv__model_backend_fail(st, what);
}

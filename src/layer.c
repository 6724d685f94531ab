/* One layer's ring: storage, written bits, upsert, reset (SEMANTICS 2, 3). */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* Storage is 64-byte aligned for the vector paths. */
static void *alloc_zeroed(size_t bytes) {
    size_t rounded = (bytes + 63) & ~(size_t)63;
    if (rounded < bytes) return NULL;
    void *p = aligned_alloc(64, rounded ? rounded : 64);
    if (p) memset(p, 0, rounded);
    return p;
}

/* Marks every scratch slot written and every ring slot not (SEM 2). */
static void arm_written(struct rkv_layer *l, int64_t session) {
    uint8_t *w = l->written + session * l->capacity;
    memset(w, 0, (size_t)l->ring_len);
    memset(w + l->ring_len, 1, (size_t)l->g.tokens_per_frame);
}

rkv_status rkv_layer_create(const rkv_geometry *g, rkv_layer **out) {
    if (!out) return rkv__fail(RKV_ERR_NULL, "rkv_layer_create: out is NULL");
    rkv_status st = rkv_geometry_check(g);
    if (st != RKV_OK) return st;
    struct rkv_layer *l = calloc(1, sizeof *l);
    if (!l) return rkv__fail(RKV_ERR_NO_MEMORY, "rkv_layer_create: out of memory");
    l->g = *g;
    l->ring_len = rkv_geometry_ring_len(g);
    l->capacity = rkv_geometry_capacity(g);
    l->total_slots = rkv_geometry_total_slots(g);
    l->elem_bytes = rkv_dtype_size(g->dtype);
    l->row_bytes = (size_t)g->d_head * l->elem_bytes;
    l->kv = alloc_zeroed(rkv_geometry_memory_bytes(g));
    l->written = alloc_zeroed((size_t)l->total_slots);
    if (!l->kv || !l->written) {
        rkv_layer_destroy(l);
        return rkv__fail(RKV_ERR_NO_MEMORY, "rkv_layer_create: cannot allocate %zu bytes of K/V",
                         rkv_geometry_memory_bytes(g));
    }
    for (int64_t s = 0; s < g->num_sessions; s++) arm_written(l, s);
    *out = l;
    return RKV_OK;
}

void rkv_layer_destroy(rkv_layer *layer) {
    if (!layer) return;
    free(layer->kv);
    free(layer->written);
    free(layer);
}

/* Getters: NULL in, 0 or NULL out. */
const rkv_geometry *rkv_layer_geometry(const rkv_layer *layer) { return layer ? &layer->g : NULL; }
int64_t rkv_layer_capacity(const rkv_layer *layer) { return layer ? layer->capacity : 0; }
int64_t rkv_layer_total_slots(const rkv_layer *layer) { return layer ? layer->total_slots : 0; }
size_t rkv_layer_memory_bytes(const rkv_layer *layer) {
    return layer ? rkv_geometry_memory_bytes(&layer->g) : 0;
}
const void *rkv_layer_kv(const rkv_layer *layer) { return layer ? layer->kv : NULL; }
const void *rkv_layer_k(const rkv_layer *layer) { return layer ? layer->kv : NULL; }
const void *rkv_layer_v(const rkv_layer *layer) { return layer ? rkv__slot_ptr(layer, 1, 0, 0) : NULL; }
const uint8_t *rkv_layer_written(const rkv_layer *layer) { return layer ? layer->written : NULL; }

rkv_status rkv_layer_session_span(const rkv_layer *layer, int64_t session, int64_t *lo,
                                  int64_t *hi) {
    RKV__REQUIRE("rkv_layer_session_span", layer);
    RKV__REQUIRE("rkv_layer_session_span", lo);
    RKV__REQUIRE("rkv_layer_session_span", hi);
    if (session < 0 || session >= layer->g.num_sessions)
        return rkv__fail(RKV_ERR_RANGE, "session_idx %lld out of range for %lld sessions",
                         (long long)session, (long long)layer->g.num_sessions);
    *lo = session * layer->capacity;
    *hi = *lo + layer->capacity;
    return RKV_OK;
}

rkv_status rkv_layer_reset(rkv_layer *layer, int64_t session) {
    int64_t lo, hi;
    rkv_status st = rkv_layer_session_span(layer, session, &lo, &hi);
    if (st != RKV_OK) return st;
    for (int c = 0; c < 2; c++)
        for (int64_t h = 0; h < layer->g.n_kv_heads; h++)
            memset(rkv__slot_ptr(layer, c, h, lo), 0, (size_t)layer->capacity * layer->row_bytes);
    arm_written(layer, session);
    return RKV_OK;
}

/* Copies row b's frame (T slots of every head, K and V) from the upsert input
 * [2][H][B*T][D] to slots [dst, dst+T) of the storage. */
static void copy_frame(struct rkv_layer *l, const uint8_t *kv, int64_t batch, int64_t b,
                       int64_t dst) {
    const int64_t T = l->g.tokens_per_frame, H = l->g.n_kv_heads;
    const size_t frame_bytes = (size_t)T * l->row_bytes;
    for (int c = 0; c < 2; c++)
        for (int64_t h = 0; h < H; h++) {
            const uint8_t *src = kv + ((size_t)(c * H + h) * (size_t)(batch * T) + (size_t)(b * T)) *
                                          l->row_bytes;
            memcpy(rkv__slot_ptr(l, c, h, dst), src, frame_bytes);
        }
}

rkv_status rkv_layer_upsert(rkv_layer *layer, const void *kv, rkv_dtype kv_dtype, int64_t batch,
                            const int64_t *frame_pos, const int64_t *session_idx, int commit,
                            uint8_t *visible) {
    /* Validate everything before touching state. */
    if (!layer) return rkv__fail(RKV_ERR_NULL, "rkv_layer_upsert: layer is NULL");
    if (!kv) return rkv__fail(RKV_ERR_NULL, "rkv_layer_upsert: kv is NULL");
    if (!frame_pos) return rkv__fail(RKV_ERR_NULL, "rkv_layer_upsert: frame_pos is NULL");
    if (batch < 1 || batch > layer->g.num_sessions)
        return rkv__fail(RKV_ERR_INVALID_ARG,
                         "rkv_layer_upsert: batch B = %lld; expected 1..%lld (one frame per "
                         "distinct session)",
                         (long long)batch, (long long)layer->g.num_sessions);
    if (kv_dtype != layer->g.dtype)
        return rkv__fail(RKV_ERR_DTYPE, "rkv_layer_upsert: kv dtype %d (%s) does not match the "
                         "storage dtype %s",
                         (int)kv_dtype, rkv_dtype_name(kv_dtype) ? rkv_dtype_name(kv_dtype) : "unknown",
                         rkv_dtype_name(layer->g.dtype));
    if (visible && batch != 1)
        return rkv__fail(RKV_ERR_INVALID_ARG,
                         "rkv_layer_upsert: the visibility row only supports B == 1; got B = %lld "
                         "(the engine path passes visible = NULL)",
                         (long long)batch);
    for (int64_t b = 0; b < batch; b++)
        if (frame_pos[b] < 0)
            return rkv__fail(RKV_ERR_INVALID_ARG,
                             "rkv_layer_upsert: frame_pos[%lld] = %lld; expected >= 0",
                             (long long)b, (long long)frame_pos[b]);
    rkv_status st = rkv__check_sessions("rkv_layer_upsert", session_idx, batch,
                                        layer->g.num_sessions);
    if (st != RKV_OK) return st;

    const rkv_geometry *g = &layer->g;
    const int64_t T = g->tokens_per_frame, C = layer->capacity, L = layer->ring_len;
    const uint8_t *src = kv;

    /* 1. scratch write for every row */
    for (int64_t b = 0; b < batch; b++) copy_frame(layer, src, batch, b, session_idx[b] * C + L);

    /* 2. visibility row, before the commit */
    if (visible) {
        const int64_t s = session_idx[0], lo = s * C;
        memset(visible, 0, (size_t)layer->total_slots);
        memcpy(visible + lo, layer->written + lo, (size_t)C);
        if (rkv_is_write_step(g, frame_pos[0]))
            memset(visible + lo + rkv_ring_slot(g, frame_pos[0]) * T, 0, (size_t)T);
    }

    /* 3. commit: ring slot on write steps, scratch (again) otherwise */
    if (commit)
        for (int64_t b = 0; b < batch; b++) {
            const int64_t base = session_idx[b] * C;
            const int64_t dst = rkv_is_write_step(g, frame_pos[b])
                                    ? base + rkv_ring_slot(g, frame_pos[b]) * T
                                    : base + L;
            copy_frame(layer, src, batch, b, dst);
            memset(layer->written + dst, 1, (size_t)T);
        }
    return RKV_OK;
}

/* ---- one session's span, piece by piece (forks, snapshots) ---------------- */

size_t rkv_layer_span_bytes(const rkv_layer *layer, rkv_span_part part) {
    if (!layer) return 0;
    switch (part) {
    case RKV_SPAN_K:
    case RKV_SPAN_V: return (size_t)layer->capacity * layer->row_bytes;
    case RKV_SPAN_WRITTEN: return (size_t)layer->capacity;
    }
    return 0;
}

/* The piece's address in the layer, after checking the arguments. */
static rkv_status span_piece(const rkv_layer *l, const char *what, int64_t session,
                             rkv_span_part part, int64_t head, uint8_t **at) {
    if (!l) return rkv__fail(RKV_ERR_NULL, "%s: layer is NULL", what);
    size_t offset = 0, bytes = 0;
    bool in_written = false;
    rkv_status st = rkv__span_piece(&l->g, what, session, part, head, &offset, &bytes, &in_written);
    if (st == RKV_OK) *at = (in_written ? l->written : l->kv) + offset;
    return st;
}

rkv_status rkv_layer_read_span(const rkv_layer *layer, int64_t session, rkv_span_part part,
                               int64_t head, void *dst) {
    static const char what[] = "rkv_layer_read_span";
    uint8_t *at = NULL;
    rkv_status st = span_piece(layer, what, session, part, head, &at);
    if (st != RKV_OK) return st;
    RKV__REQUIRE(what, dst);
    memcpy(dst, at, rkv_layer_span_bytes(layer, part));
    return RKV_OK;
}

rkv_status rkv_layer_write_span(rkv_layer *layer, int64_t session, rkv_span_part part,
                                int64_t head, const void *src) {
    static const char what[] = "rkv_layer_write_span";
    uint8_t *at = NULL;
    rkv_status st = span_piece(layer, what, session, part, head, &at);
    if (st != RKV_OK) return st;
    RKV__REQUIRE(what, src);
    if (part == RKV_SPAN_WRITTEN) {
        const uint8_t *w = src;
        const int64_t bad = rkv__written_span_check(&layer->g, w);
        if (bad >= 0)
            return rkv__fail(RKV_ERR_INVALID_ARG,
                             "%s: written bit of slot %lld is %u; expected 0/1, scratch slots "
                             "1, ring frames written whole",
                             what, (long long)bad, w[bad]);
    }
    memcpy(at, src, rkv_layer_span_bytes(layer, part));
    return RKV_OK;
}

rkv_status rkv_layer_copy_span(rkv_layer *layer, int64_t src_session, int64_t dst_session) {
    static const char what[] = "rkv_layer_copy_span";
    int64_t slo, shi, dlo, dhi;
    RKV__REQUIRE(what, layer);
    rkv_status st = rkv_layer_session_span(layer, src_session, &slo, &shi);
    if (st == RKV_OK) st = rkv_layer_session_span(layer, dst_session, &dlo, &dhi);
    if (st != RKV_OK)
        return rkv__fail(st, "%s: session %lld out of range; expected 0..%lld", what,
                         (long long)(src_session < 0 || src_session >= layer->g.num_sessions
                                         ? src_session
                                         : dst_session),
                         (long long)(layer->g.num_sessions - 1));
    if (src_session == dst_session) return RKV_OK;
    const size_t bytes = (size_t)layer->capacity * layer->row_bytes;
    for (int c = 0; c < 2; c++)
        for (int64_t h = 0; h < layer->g.n_kv_heads; h++)
            memcpy(rkv__slot_ptr(layer, c, h, dlo), rkv__slot_ptr(layer, c, h, slo), bytes);
    memcpy(layer->written + dlo, layer->written + slo, (size_t)layer->capacity);
    return RKV_OK;
}

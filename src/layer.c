/* One layer's ring: storage, written bits, reset (SEMANTICS 2, 3); its upsert
 * runs the view code of ring_view.c on the layer's own storage. */
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
    l->owns_storage = true;
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
    if (layer->owns_storage) {
        free(layer->kv);
        free(layer->written);
    }
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

rkv_status rkv_layer_upsert(rkv_layer *layer, const void *kv, rkv_dtype kv_dtype, int64_t batch,
                            const int64_t *frame_pos, const int64_t *session_idx, int commit,
                            uint8_t *visible) {
    /* the view of the layer's own storage (ring_view.c) */
    if (!layer) return rkv__fail(RKV_ERR_NULL, "rkv_layer_upsert: layer is NULL");
    return rkv__upsert(layer, "rkv_layer_upsert", kv, kv_dtype, batch, frame_pos, session_idx,
                       commit, visible);
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
    const size_t bytes = rkv_layer_span_bytes(layer, part);
    const rkv__buf out = {dst, bytes, "dst"};
    const rkv__buf in[] = {{layer->kv, rkv_geometry_memory_bytes(&layer->g), "the layer's K/V"},
                           {layer->written, (size_t)layer->total_slots, "the layer's written bits"}};
    if ((st = rkv__check_no_overlap(what, &out, 1, in, 2)) != RKV_OK) return st;
    memcpy(dst, at, bytes);
    return RKV_OK;
}

rkv_status rkv_layer_write_span(rkv_layer *layer, int64_t session, rkv_span_part part,
                                int64_t head, const void *src) {
    static const char what[] = "rkv_layer_write_span";
    uint8_t *at = NULL;
    rkv_status st = span_piece(layer, what, session, part, head, &at);
    if (st != RKV_OK) return st;
    RKV__REQUIRE(what, src);
    const rkv__buf out = {at, rkv_layer_span_bytes(layer, part), "the span piece written"},
                   in = {src, out.bytes, "src"};
    if ((st = rkv__check_no_overlap(what, &out, 1, &in, 1)) != RKV_OK) return st;
    if (part == RKV_SPAN_WRITTEN) {
        const uint8_t *w = src;
        const int64_t bad = rkv__written_span_check(&layer->g, w);
        char why[160];
        if (bad >= 0)
            return rkv__fail(RKV_ERR_INVALID_ARG, "%s: %s", what,
                             rkv__written_bad_what(&layer->g, w, bad, why, sizeof why));
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

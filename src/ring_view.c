/* Rings over caller-owned storage (views): the upsert, the reference's
 * visibility row and the attention of SEMANTICS 3-5 on the buffers a view
 * names. The layer calls (rkv_layer_upsert, rkv_layer_attend) run the same
 * code on the view of their own storage. */
#include <stdint.h>
#include <string.h>

#include "internal.h"

rkv_status rkv__view_layer(const rkv_ring_view *ring, const char *what, bool need_kv,
                           struct rkv_layer *out) {
    if (!ring) return rkv__fail(RKV_ERR_NULL, "%s: ring is NULL", what);
    if (!ring->kv && need_kv) return rkv__fail(RKV_ERR_NULL, "%s: ring->kv is NULL", what);
    if (!ring->written) return rkv__fail(RKV_ERR_NULL, "%s: ring->written is NULL", what);
    rkv_status st = rkv_geometry_check(&ring->g);
    if (st != RKV_OK) return st;
    const size_t elem = rkv_dtype_size(ring->g.dtype);
    if ((uintptr_t)ring->kv % elem)
        return rkv__fail(RKV_ERR_INVALID_ARG,
                         "%s: ring->kv %p is not aligned to its element size (%zu bytes, %s)",
                         what, ring->kv, elem, rkv_dtype_name(ring->g.dtype));
    memset(out, 0, sizeof *out);
    out->g = ring->g;
    out->ring_len = rkv_geometry_ring_len(&ring->g);
    out->capacity = rkv_geometry_capacity(&ring->g);
    out->total_slots = rkv_geometry_total_slots(&ring->g);
    out->elem_bytes = elem;
    out->row_bytes = (size_t)ring->g.d_head * elem;
    out->kv = ring->kv;
    out->written = ring->written;
    return RKV_OK;
}

rkv_status rkv_layer_view(rkv_layer *layer, rkv_ring_view *out) {
    RKV__REQUIRE("rkv_layer_view", layer);
    RKV__REQUIRE("rkv_layer_view", out);
    out->g = layer->g;
    out->kv = layer->kv;
    out->written = layer->written;
    return RKV_OK;
}

/* The reference's row (SEM 3 step 2) of session s at clock f, from the bits
 * as they are now: written AND the session's span, minus the ring frame a
 * write step is about to overwrite. */
static void visible_row(const struct rkv_layer *l, int64_t s, int64_t f, uint8_t *row) {
    const int64_t C = l->capacity, lo = s * C;
    memset(row, 0, (size_t)l->total_slots);
    memcpy(row + lo, l->written + lo, (size_t)C);
    if (rkv_is_write_step(&l->g, f))
        memset(row + lo + rkv_ring_slot(&l->g, f) * l->g.tokens_per_frame, 0,
               (size_t)l->g.tokens_per_frame);
}

rkv_status rkv_ring_visible_row(const rkv_ring_view *ring, int64_t session, int64_t frame_pos,
                                uint8_t *row) {
    static const char what[] = "rkv_ring_visible_row";
    struct rkv_layer l;
    rkv_status st = rkv__view_layer(ring, what, false, &l);
    if (st != RKV_OK) return st;
    RKV__REQUIRE(what, row);
    /* rkv__upsert's checks and messages for its one row (B = 1, row 0), in
     * its order (the session, then the clock): the torch route of an upsert
     * (this row, then rkv_ring_upsert) reports a bad row as the one-call
     * route does. */
    if ((st = rkv__check_sessions(what, &session, 1, l.g.num_sessions)) != RKV_OK) return st;
    if (frame_pos < 0)
        return rkv__fail(RKV_ERR_INVALID_ARG, "%s: frame_pos[0] = %lld; expected >= 0", what,
                         (long long)frame_pos);
    const rkv__buf out = {row, (size_t)l.total_slots, "row"},
                   in = {l.written, (size_t)l.total_slots, "ring->written"};
    if ((st = rkv__check_no_overlap(what, &out, 1, &in, 1)) != RKV_OK) return st;
    visible_row(&l, session, frame_pos, row);
    return RKV_OK;
}

/* Copies row b's frame (T slots of every head, K and V) from the upsert input
 * [2][H][B*T][D] to slots [dst, dst+T) of the storage. */
static void copy_frame(const struct rkv_layer *l, const uint8_t *kv, int64_t batch, int64_t b,
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

rkv_status rkv__upsert(const struct rkv_layer *layer, const char *what, const void *kv,
                       rkv_dtype kv_dtype, int64_t batch, const int64_t *frame_pos,
                       const int64_t *session_idx, int commit, uint8_t *visible) {
    /* Validate everything before touching state; the batch first (an empty
     * batch's arrays may well be NULL: say what is wrong, not that). */
    if (batch < 1)
        return rkv__fail(RKV_ERR_INVALID_ARG,
                         "%s: batch B = %lld; expected 1..%lld (one frame per distinct session)",
                         what, (long long)batch, (long long)layer->g.num_sessions);
    if (!kv) return rkv__fail(RKV_ERR_NULL, "%s: kv is NULL", what);
    if (!frame_pos) return rkv__fail(RKV_ERR_NULL, "%s: frame_pos is NULL", what);
    if (kv_dtype != layer->g.dtype)
        return rkv__fail(RKV_ERR_DTYPE, "%s: kv dtype %d (%s) does not match the storage dtype %s",
                         what, (int)kv_dtype,
                         rkv_dtype_name(kv_dtype) ? rkv_dtype_name(kv_dtype) : "unknown",
                         rkv_dtype_name(layer->g.dtype));
    if (visible && batch != 1)
        return rkv__fail(RKV_ERR_INVALID_ARG,
                         "%s: the visibility row only supports B == 1; got B = %lld (the engine "
                         "path passes visible = NULL)",
                         what, (long long)batch);
    /* Sessions before clocks: a session out of range is the reference's
     * IndexError also when a clock is negative (which it lets through);
     * B > S rows hold one out of range (IndexError) or a repeat. */
    rkv_status st = rkv__check_sessions(what, session_idx, batch, layer->g.num_sessions);
    if (st != RKV_OK) return st;
    for (int64_t b = 0; b < batch; b++)
        if (frame_pos[b] < 0)
            return rkv__fail(RKV_ERR_INVALID_ARG, "%s: frame_pos[%lld] = %lld; expected >= 0",
                             what, (long long)b, (long long)frame_pos[b]);
    if ((st = rkv__upsert_overlap(layer, what, kv, batch, frame_pos, session_idx, visible)) !=
        RKV_OK)
        return st;
    rkv__upsert_run(layer, kv, batch, frame_pos, session_idx, commit, visible);
    return RKV_OK;
}

void rkv__upsert_run(const struct rkv_layer *layer, const void *kv, int64_t batch,
                     const int64_t *frame_pos, const int64_t *session_idx, int commit,
                     uint8_t *visible) {
    const rkv_geometry *g = &layer->g;
    const int64_t T = g->tokens_per_frame, C = layer->capacity, L = layer->ring_len;
    const uint8_t *src = kv;

    /* 1. scratch write for every row */
    for (int64_t b = 0; b < batch; b++) copy_frame(layer, src, batch, b, session_idx[b] * C + L);

    /* 2. visibility row, before the commit */
    if (visible) visible_row(layer, session_idx[0], frame_pos[0], visible);

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
}

rkv_status rkv_ring_upsert(const rkv_ring_view *ring, const void *kv, rkv_dtype kv_dtype,
                           int64_t batch, const int64_t *frame_pos, const int64_t *session_idx,
                           int commit, uint8_t *visible) {
    static const char what[] = "rkv_ring_upsert";
    struct rkv_layer l;
    rkv_status st = rkv__view_layer(ring, what, true, &l);
    if (st != RKV_OK) return st;
    return rkv__upsert(&l, what, kv, kv_dtype, batch, frame_pos, session_idx, commit, visible);
}

rkv_status rkv_ring_attend(const rkv_ring_view *ring, const rkv_attention_args *args) {
    static const char what[] = "rkv_ring_attend";
    struct rkv_layer l;
    rkv_status st = rkv__view_layer(ring, what, true, &l);
    if (st != RKV_OK) return st;
    return rkv__attend(&l, args, what);
}

/* Visibility over the ring (SEMANTICS 4, 5): ring_rule.h's two rules with
 * their arguments checked, per-slot rows and FlexAttention block lists. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static rkv_status check_clock(const char *what, int64_t frame_pos) {
    if (frame_pos < 0)
        return rkv__fail(RKV_ERR_INVALID_ARG, "%s: frame_pos = %lld; expected >= 0", what,
                         (long long)frame_pos);
    return RKV_OK;
}

/* The written bits of a layer's session span after the session and clock
 * checks (ring_rule.h's span_written): read in place when the storage is
 * host memory, else through the table into *owned (the caller frees it). */
static rkv_status layer_bits(const rkv_layer *l, const char *what, int64_t session,
                             int64_t frame_pos, const uint8_t **w, uint8_t **owned) {
    int64_t lo, hi;
    *owned = NULL;
    rkv_status st = rkv_layer_session_span(l, session, &lo, &hi);
    if (st != RKV_OK || (st = check_clock(what, frame_pos)) != RKV_OK) return st;
    *w = l->store.written + lo;
    if (l->limits.host_memory) return RKV_OK;
    if (!(*w = *owned = malloc((size_t)l->capacity)))
        return rkv__fail(RKV_ERR_NO_MEMORY, "%s: out of memory", what);
    return l->ops.span_read(l->ctx, l->impl, session, RKV_SPAN_WRITTEN, 0, *owned);
}

rkv_status rkv_layer_visible_frames(const rkv_layer *layer, int64_t session, int64_t frame_pos,
                                    int64_t *frames, int64_t *count) {
    RKV__REQUIRE("rkv_layer_visible_frames", layer);
    RKV__REQUIRE("rkv_layer_visible_frames", frames);
    RKV__REQUIRE("rkv_layer_visible_frames", count);
    const uint8_t *w;
    uint8_t *owned;
    const rkv_geometry *g = &layer->g;
    rkv_status st = layer_bits(layer, "rkv_layer_visible_frames", session, frame_pos, &w, &owned);
    if (st == RKV_OK)
        *count = rkv__rule_visible_frames(w, g->tokens_per_frame, g->ring_frames,
                                          g->ring_buckets, g->pinned_dilation, frame_pos, frames);
    free(owned);
    return st;
}

rkv_status rkv_visible_frames_from_clock(const rkv_geometry *g, int64_t frame_pos,
                                         int64_t *frames, int64_t *count) {
    RKV__REQUIRE("rkv_visible_frames_from_clock", frames);
    RKV__REQUIRE("rkv_visible_frames_from_clock", count);
    rkv_status st = rkv_geometry_check(g);
    if (st != RKV_OK) return st;
    if ((st = check_clock("rkv_visible_frames_from_clock", frame_pos)) != RKV_OK) return st;
    *count = rkv__rule_visible_frames_from_clock(g->ring_frames, g->ring_buckets,
                                                 g->pinned_dilation, frame_pos, frames);
    return RKV_OK;
}

rkv_status rkv_visible_row_from_frames(const rkv_geometry *g, int64_t session,
                                       const int64_t *frames, int64_t count, uint8_t *row) {
    RKV__REQUIRE("rkv_visible_row_from_frames", frames);
    RKV__REQUIRE("rkv_visible_row_from_frames", row);
    rkv_status st = rkv_geometry_check(g);
    if (st != RKV_OK) return st;
    if (session < 0 || session >= g->num_sessions)
        return rkv__fail(RKV_ERR_RANGE, "session_idx %lld out of range for %lld sessions",
                         (long long)session, (long long)g->num_sessions);
    if (count < 0 || count > g->ring_frames + 1)
        return rkv__fail(RKV_ERR_INVALID_ARG, "frame count %lld; expected 0..%lld",
                         (long long)count, (long long)(g->ring_frames + 1));
    for (int64_t i = 0; i < count; i++)
        if (frames[i] < 0 || frames[i] > RKV_SCRATCH_FRAME(g))
            return rkv__fail(RKV_ERR_RANGE, "frames[%lld] = %lld; expected 0..%lld (%lld = scratch)",
                             (long long)i, (long long)frames[i], (long long)RKV_SCRATCH_FRAME(g),
                             (long long)RKV_SCRATCH_FRAME(g));
    const int64_t T = g->tokens_per_frame, base = session * rkv_geometry_capacity(g);
    memset(row, 0, (size_t)rkv_geometry_total_slots(g));
    for (int64_t i = 0; i < count; i++) memset(row + base + frames[i] * T, 1, (size_t)T);
    return RKV_OK;
}

rkv_status rkv_layer_block_mask(const rkv_layer *layer, int64_t session, int64_t frame_pos,
                                int32_t *kv_num_blocks, int32_t *kv_indices) {
    static const char what[] = "rkv_layer_block_mask";
    RKV__REQUIRE(what, layer);
    RKV__REQUIRE(what, kv_num_blocks);
    RKV__REQUIRE(what, kv_indices);
    const rkv_geometry *g = &layer->g;
    const int64_t per_frame = g->tokens_per_frame / RKV_BLOCK_TOKENS;
    const int64_t kv_blocks = layer->total_slots / RKV_BLOCK_TOKENS;
    if (kv_blocks > INT32_MAX)
        return rkv__fail(RKV_ERR_OVERFLOW, "%s: %lld key blocks exceed int32", what,
                         (long long)kv_blocks);
    const uint8_t *w;
    uint8_t *owned;
    rkv_status st = layer_bits(layer, what, session, frame_pos, &w, &owned);
    if (st == RKV_OK) { /* the visible frames' key blocks (ring_rule.h's
                         * rkv__rule_visible_frames: ring frames ascending,
                         * the scratch last), for every query block */
        const int64_t first = session * layer->capacity / RKV_BLOCK_TOKENS;
        const int64_t hidden = rkv__rule_hidden_frame(frame_pos, g->pinned_dilation,
                                                      g->ring_buckets);
        int64_t n = 0;
        memset(kv_indices, 0, (size_t)kv_blocks * sizeof *kv_indices);
        for (int64_t r = 0; r <= g->ring_frames; r++)
            if (r == g->ring_frames || rkv__rule_frame_visible(w, g->tokens_per_frame, hidden, r))
                for (int64_t k = 0; k < per_frame; k++)
                    kv_indices[n++] = (int32_t)(first + r * per_frame + k);
        for (int64_t qb = 0; qb < per_frame; qb++) {
            kv_num_blocks[qb] = (int32_t)n;
            if (qb) memcpy(kv_indices + qb * kv_blocks, kv_indices, (size_t)kv_blocks * 4);
        }
    }
    free(owned);
    return st;
}

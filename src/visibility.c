/* Visibility over the ring (SEMANTICS 4, 5): the bits-and-clock rule, the
 * clock-only rule (both ring_rule.h's, checked here), per-slot rows and
 * FlexAttention block lists. Visibility is frame-granular: a list of frame
 * slots, ring frames ascending, scratch last. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* Session s's written bits [C] on the host into *w: in place when the
 * layer's storage is host memory, else read through its table into a
 * buffer the caller frees (*owned). */
static rkv_status session_bits(const rkv_layer *l, const char *what, int64_t s,
                               const uint8_t **w, uint8_t **owned) {
    *owned = NULL;
    if (l->limits.host_memory) {
        *w = l->store.written + s * l->capacity;
        return RKV_OK;
    }
    uint8_t *buf = malloc((size_t)l->capacity);
    if (!buf) return rkv__fail(RKV_ERR_NO_MEMORY, "%s: out of memory", what);
    rkv_status st = l->ops.span_read(l->ctx, l->impl, s, RKV_SPAN_WRITTEN, 0, buf);
    if (st != RKV_OK) {
        free(buf);
        return st;
    }
    *w = *owned = buf;
    return RKV_OK;
}

static rkv_status check_clock(const char *what, int64_t frame_pos) {
    if (frame_pos < 0)
        return rkv__fail(RKV_ERR_INVALID_ARG, "%s: frame_pos = %lld; expected >= 0", what,
                         (long long)frame_pos);
    return RKV_OK;
}

rkv_status rkv_layer_visible_frames(const rkv_layer *layer, int64_t session, int64_t frame_pos,
                                    int64_t *frames, int64_t *count) {
    RKV__REQUIRE("rkv_layer_visible_frames", layer);
    RKV__REQUIRE("rkv_layer_visible_frames", frames);
    RKV__REQUIRE("rkv_layer_visible_frames", count);
    int64_t lo, hi;
    rkv_status st = rkv_layer_session_span(layer, session, &lo, &hi);
    if (st != RKV_OK) return st;
    if ((st = check_clock("rkv_layer_visible_frames", frame_pos)) != RKV_OK) return st;
    const rkv_geometry *g = &layer->g;
    uint8_t *owned = NULL;
    const uint8_t *w = NULL;
    if ((st = session_bits(layer, "rkv_layer_visible_frames", session, &w, &owned)) != RKV_OK)
        return st;
    *count = rkv__rule_visible_frames(w, g->tokens_per_frame, g->ring_frames, g->ring_buckets,
                                      g->pinned_dilation, frame_pos, frames);
    free(owned);
    return RKV_OK;
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
    RKV__REQUIRE("rkv_layer_block_mask", layer);
    RKV__REQUIRE("rkv_layer_block_mask", kv_num_blocks);
    RKV__REQUIRE("rkv_layer_block_mask", kv_indices);
    const rkv_geometry *g = &layer->g;
    const int64_t q_blocks = g->tokens_per_frame / RKV_BLOCK_TOKENS;
    const int64_t kv_blocks = layer->total_slots / RKV_BLOCK_TOKENS;
    if (kv_blocks > INT32_MAX)
        return rkv__fail(RKV_ERR_OVERFLOW, "rkv_layer_block_mask: %lld key blocks exceed int32",
                         (long long)kv_blocks);
    int64_t lo, hi;
    rkv_status st = rkv_layer_session_span(layer, session, &lo, &hi);
    if (st != RKV_OK) return st;
    if ((st = check_clock("rkv_layer_block_mask", frame_pos)) != RKV_OK) return st;
    const int64_t per_frame = g->tokens_per_frame / RKV_BLOCK_TOKENS;
    const int64_t first = lo / RKV_BLOCK_TOKENS;
    const int64_t hidden = rkv__rule_hidden_frame(frame_pos, g->pinned_dilation, g->ring_buckets);
    uint8_t *owned = NULL;
    const uint8_t *w = NULL;
    if ((st = session_bits(layer, "rkv_layer_block_mask", session, &w, &owned)) != RKV_OK)
        return st;
    int32_t *row0 = kv_indices;
    memset(row0, 0, (size_t)kv_blocks * sizeof *row0);
    int64_t n = 0;
    for (int64_t r = 0; r <= g->ring_frames; r++) /* r == RF: the scratch, always visible */
        if (r == g->ring_frames ||
            rkv__rule_frame_visible(w, g->tokens_per_frame, hidden, r))
            for (int64_t k = 0; k < per_frame; k++) row0[n++] = (int32_t)(first + r * per_frame + k);
    free(owned);
    for (int64_t qb = 0; qb < q_blocks; qb++) {
        kv_num_blocks[qb] = (int32_t)n;
        if (qb) memcpy(kv_indices + qb * kv_blocks, row0, (size_t)kv_blocks * sizeof *row0);
    }
    return RKV_OK;
}

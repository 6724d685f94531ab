/* Attention over the ring: argument checks and the visible-slot list shared
 * by the CPU implementations (SEMANTICS 4, 5). */
#include <math.h>

#include "cpu_internal.h"

/* Visible slots of one row, ascending: from the caller's row, or from the
 * bits-and-clock rule (ring frames ascending, scratch last). */
int64_t rkv__gather_visible_slots(const struct rkv_layer *l, const rkv_attention_args *a,
                                    int64_t b, int64_t *slots) {
    int64_t n = 0;
    if (a->visible) {
        const uint8_t *row = a->visible + (size_t)b * (size_t)l->total_slots;
        for (int64_t j = 0; j < l->total_slots; j++)
            if (row[j]) slots[n++] = j;
        return n;
    }
    const rkv_geometry *g = &l->g;
    const int64_t T = g->tokens_per_frame, lo = a->session_idx[b] * l->capacity;
    const int64_t hidden =
        rkv__rule_hidden_frame(a->frame_pos[b], g->pinned_dilation, g->ring_buckets);
    for (int64_t r = 0; r <= g->ring_frames; r++)
        if (r == g->ring_frames || rkv__rule_frame_visible(l->written + lo, T, hidden, r))
            for (int64_t t = 0; t < T; t++) slots[n++] = lo + r * T + t;
    return n;
}

rkv_status rkv__attention_take(const struct rkv_layer *l, const rkv_attention_args *caller,
                               const char *what, rkv_attention_args *copy) {
    if (!l) return rkv__fail(RKV_ERR_NULL, "%s: layer is NULL", what);
    if (!caller) return rkv__fail(RKV_ERR_NULL, "%s: args is NULL", what);
    rkv_status st = rkv__attention_args_load(what, caller, copy);
    return st == RKV_OK ? rkv__attention_check(l, copy, what) : st;
}

rkv_status rkv__attention_check(const struct rkv_layer *l, const rkv_attention_args *a,
                                const char *what) {
    if (!l) return rkv__fail(RKV_ERR_NULL, "%s: layer is NULL", what);
    if (!a) return rkv__fail(RKV_ERR_NULL, "%s: args is NULL", what);
    rkv_status st = rkv__struct_size_check(what, "args", "rkv_attention_args",
                                           "RKV_ATTENTION_ARGS_INIT", a->struct_size,
                                           RKV__ATTENTION_ARGS_V1, sizeof *a);
    if (st != RKV_OK) return st;
    const rkv_geometry *g = &l->g;
    if (a->batch < 1)
        return rkv__fail(RKV_ERR_INVALID_ARG, "%s: batch B = %lld; expected >= 1", what,
                         (long long)a->batch);
    if (a->n_q_heads < 1 || a->n_q_heads % g->n_kv_heads)
        return rkv__fail(RKV_ERR_INVALID_ARG,
                         "%s: n_q_heads = %lld; expected a positive multiple of "
                         "n_kv_heads (%lld) for GQA", what,
                         (long long)a->n_q_heads, (long long)g->n_kv_heads);
    if (a->n_queries < 0)
        return rkv__fail(RKV_ERR_INVALID_ARG,
                         "%s: n_queries = %lld; expected >= 0 (0 = tokens_per_frame)", what,
                         (long long)a->n_queries);
    if (!a->q || !a->out)
        return rkv__fail(RKV_ERR_NULL, "%s: %s is NULL", what, a->q ? "out" : "q");
    if (!rkv__dtype_valid(a->q_dtype) || !rkv__dtype_valid(a->out_dtype))
        return rkv__fail(RKV_ERR_DTYPE, "%s: unknown dtype (q %d, out %d)", what,
                         (int)a->q_dtype, (int)a->out_dtype);
    if (!isfinite(a->scale))
        return rkv__fail(RKV_ERR_INVALID_ARG, "%s: scale is not finite", what);
    /* attention only reads, so a session may appear in several rows */
    RKV__REQUIRE(what, a->session_idx);
    for (int64_t b = 0; b < a->batch; b++)
        if (a->session_idx[b] < 0 || a->session_idx[b] >= g->num_sessions)
            return rkv__fail(RKV_ERR_RANGE, "%s: session_idx[%lld] = %lld is out of range; expected 0..%lld",
                             what, (long long)b, (long long)a->session_idx[b],
                             (long long)(g->num_sessions - 1));
    if (!a->visible) {
        if (!a->frame_pos)
            return rkv__fail(RKV_ERR_NULL,
                             "%s: frame_pos is NULL (needed when visible is NULL)", what);
        for (int64_t b = 0; b < a->batch; b++)
            if (a->frame_pos[b] < 0)
                return rkv__fail(RKV_ERR_INVALID_ARG,
                                 "%s: frame_pos[%lld] = %lld; expected >= 0", what,
                                 (long long)b, (long long)a->frame_pos[b]);
    }
    const int64_t tq = a->n_queries ? a->n_queries : g->tokens_per_frame;
    int64_t elems;
    if (!rkv__mul_i64(a->batch, a->n_q_heads, &elems) || !rkv__mul_i64(elems, tq, &elems) ||
        !rkv__mul_i64(elems, g->d_head, &elems) || !rkv__mul_i64(elems, 4, &elems))
        return rkv__fail(RKV_ERR_OVERFLOW,
                         "%s: B*Hq*Tq*D = %lld*%lld*%lld*%lld overflows", what,
                         (long long)a->batch, (long long)a->n_q_heads, (long long)tq,
                         (long long)g->d_head);
    return rkv__attend_overlap(l, a, what);
}


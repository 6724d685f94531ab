/* Attention over the ring: argument checks and the visible-slot list shared
 * by the CPU implementations (SEMANTICS 4, 5). */
#include "../attention_check.h"
#include "cpu_internal.h"

/* Visible slots of one row, ascending: from the caller's row, or from the
 * bits-and-clock rule (ring frames ascending, scratch last). */
int64_t rkv__gather_visible_slots(const struct rkv__cpu_layer *l, const rkv_attention_args *a,
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

rkv_status rkv__attention_take(const struct rkv__cpu_layer *l, const rkv_attention_args *caller,
                               const char *what, rkv_attention_args *copy) {
    if (!l) return rkv__fail(RKV_ERR_NULL, "%s: layer is NULL", what);
    if (!caller) return rkv__fail(RKV_ERR_NULL, "%s: args is NULL", what);
    rkv_status st = rkv__attention_args_load(what, caller, copy);
    return st == RKV_OK ? rkv__attention_check(l, copy, what) : st;
}

rkv_status rkv__attention_check(const struct rkv__cpu_layer *l, const rkv_attention_args *a,
                                const char *what) {
    const rkv_backend_storage storage = {l->kv, l->written, NULL};
    return rkv__attend_args_check(&l->g, NULL, &storage, a, true, what);
}

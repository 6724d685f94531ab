/* Host buffers of one call that must not share a byte (internal.h, "host
 * buffers that must not overlap"): the check every host-memory entry point
 * makes before it writes, and the buffer list of the upsert (the
 * attention's: attention_check.c). */
#include "internal.h"

/* Whether [a, a + an) and [b, b + bn) share a byte (empty ranges never). */
static bool shares(const rkv__buf *a, const rkv__buf *b) {
    if (!a->p || !b->p || !a->bytes || !b->bytes) return false;
    const uintptr_t a0 = (uintptr_t)a->p, b0 = (uintptr_t)b->p;
    return a0 < b0 + b->bytes && b0 < a0 + a->bytes;
}

static rkv_status overlap(const char *what, const rkv__buf *w, const rkv__buf *o) {
    return rkv__fail(RKV_ERR_INVALID_ARG,
                     "%s: %s (%p, %zu bytes, written) overlaps %s (%p, %zu bytes); expected "
                     "separate buffers",
                     what, w->name, w->p, w->bytes, o->name, o->p, o->bytes);
}

rkv_status rkv__check_no_overlap(const char *what, const rkv__buf *out, size_t n_out,
                                 const rkv__buf *in, size_t n_in) {
    for (size_t i = 0; i < n_out; i++) {
        for (size_t j = i + 1; j < n_out; j++)
            if (shares(&out[i], &out[j])) return overlap(what, &out[i], &out[j]);
        for (size_t j = 0; j < n_in; j++)
            if (shares(&out[i], &in[j])) return overlap(what, &out[i], &in[j]);
    }
    return RKV_OK;
}

rkv_status rkv__upsert_overlap(const struct rkv_layer *l, const char *what, const void *kv,
                               int64_t batch, const int64_t *frame_pos,
                               const int64_t *session_idx, const uint8_t *visible) {
    const size_t B = (size_t)batch, T = (size_t)l->g.tokens_per_frame;
    const rkv__buf out[] = {
        {l->kv, rkv_geometry_memory_bytes(&l->g), "the ring's K/V storage"},
        {l->written, (size_t)l->total_slots, "the ring's written bits"},
        {visible, visible ? (size_t)l->total_slots : 0, "visible"},
    };
    const rkv__buf in[] = {
        {kv, 2 * (size_t)l->g.n_kv_heads * B * T * l->row_bytes, "kv"},
        {frame_pos, B * sizeof *frame_pos, "frame_pos"},
        {session_idx, B * sizeof *session_idx, "session_idx"},
    };
    return rkv__check_no_overlap(what, out, 3, in, 3);
}

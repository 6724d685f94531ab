/* The upsert's buffers that must not share a byte (internal.h, "host
 * buffers that must not overlap"; the check itself is inline there, the
 * attention's list attention_check.h). */
#include "internal.h"

rkv_status rkv__upsert_overlap(const struct rkv_layer *l, const char *what, const void *kv,
                               int64_t batch, const int64_t *frame_pos,
                               const int64_t *session_idx, const uint8_t *visible) {
    const size_t B = (size_t)batch, T = (size_t)l->g.tokens_per_frame;
    const rkv__buf out[] = {
        {l->store.kv, rkv_geometry_memory_bytes(&l->g), "the ring's K/V storage"},
        {l->store.written, (size_t)l->total_slots, "the ring's written bits"},
        {visible, visible ? (size_t)l->total_slots : 0, "visible"},
    };
    const rkv__buf in[] = {
        {kv, 2 * (size_t)l->g.n_kv_heads * B * T * (size_t)l->g.d_head * rkv_dtype_size(l->g.dtype),
         "kv"},
        {frame_pos, B * sizeof *frame_pos, "frame_pos"},
        {session_idx, B * sizeof *session_idx, "session_idx"},
    };
    return rkv__check_no_overlap(what, out, 3, in, 3);
}

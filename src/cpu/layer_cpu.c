/* The CPU backend's layers: host storage in the layout of SEMANTICS 2 (its
 * own, 64-byte aligned, or the caller's), and the operations of the CPU
 * table on it -- the memcpy upsert (SEM 3), the reference's visibility row,
 * reset, and one session's span piece by piece. Unchecked: the core checked
 * every argument once (src/layer.c, src/model_frame.c; the contract is
 * include/ringkv_backend.h's). */
#include <stdlib.h>
#include <string.h>

#include "cpu_internal.h"

/* Storage is 64-byte aligned for the vector paths. */
static void *alloc_zeroed(size_t bytes) {
    size_t rounded = (bytes + 63) & ~(size_t)63;
    if (rounded < bytes) return NULL;
    void *p = aligned_alloc(64, rounded ? rounded : 64);
    if (p) memset(p, 0, rounded);
    return p;
}

/* Marks every scratch slot written and every ring slot not (SEM 2). */
static void arm_written(struct rkv__cpu_layer *l, int64_t session) {
    uint8_t *w = l->written + session * l->capacity;
    memset(w, 0, (size_t)l->ring_len);
    memset(w + l->ring_len, 1, (size_t)l->g.tokens_per_frame);
}

rkv_status rkv__cpu_layer_create(const rkv_geometry *g, void *kv, uint8_t *written,
                                 struct rkv__cpu_layer **out) {
    struct rkv__cpu_layer *l = calloc(1, sizeof *l);
    if (!l) return rkv__fail(RKV_ERR_NO_MEMORY, "rkv_layer_create: out of memory");
    l->g = *g;
    l->ring_len = g->ring_frames * g->tokens_per_frame;
    l->capacity = rkv_geometry_capacity(g);
    l->total_slots = rkv_geometry_total_slots(g);
    l->elem_bytes = rkv_dtype_size(g->dtype);
    l->row_bytes = (size_t)g->d_head * l->elem_bytes;
    if (kv) { /* the caller's storage, as it is */
        l->kv = kv;
        l->written = written;
        *out = l;
        return RKV_OK;
    }
    l->owns_storage = true;
    l->kv = alloc_zeroed(rkv_geometry_memory_bytes(g));
    l->written = alloc_zeroed((size_t)l->total_slots);
    if (!l->kv || !l->written) {
        rkv__cpu_layer_destroy(l);
        return rkv__fail(RKV_ERR_NO_MEMORY, "rkv_layer_create: cannot allocate %zu bytes of K/V",
                         rkv_geometry_memory_bytes(g));
    }
    for (int64_t s = 0; s < g->num_sessions; s++) arm_written(l, s);
    *out = l;
    return RKV_OK;
}

void rkv__cpu_layer_destroy(struct rkv__cpu_layer *l) {
    if (!l) return;
    if (l->owns_storage) {
        free(l->kv);
        free(l->written);
    }
    free(l);
}

void rkv__cpu_reset(struct rkv__cpu_layer *l, int64_t session) {
    const int64_t lo = session * l->capacity;
    for (int c = 0; c < 2; c++)
        for (int64_t h = 0; h < l->g.n_kv_heads; h++)
            memset(rkv__slot_ptr(l, c, h, lo), 0, (size_t)l->capacity * l->row_bytes);
    arm_written(l, session);
}

uint8_t *rkv__cpu_span_at(const struct rkv__cpu_layer *l, int64_t session, rkv_span_part part,
                          int64_t head) {
    size_t offset = 0, bytes = 0;
    bool in_written = false;
    (void)rkv__span_piece(&l->g, "cpu backend", session, part, head, &offset, &bytes,
                          &in_written);
    return (in_written ? l->written : l->kv) + offset;
}

void rkv__cpu_copy_span(struct rkv__cpu_layer *l, int64_t src_session, int64_t dst_session) {
    if (src_session == dst_session) return;
    const int64_t slo = src_session * l->capacity, dlo = dst_session * l->capacity;
    const size_t bytes = (size_t)l->capacity * l->row_bytes;
    for (int c = 0; c < 2; c++)
        for (int64_t h = 0; h < l->g.n_kv_heads; h++)
            memcpy(rkv__slot_ptr(l, c, h, dlo), rkv__slot_ptr(l, c, h, slo), bytes);
    memcpy(l->written + dlo, l->written + slo, (size_t)l->capacity);
}

/* The reference's row (SEM 3 step 2) of session s at clock f, from the bits
 * as they are now: written AND the session's span, minus the ring frame a
 * write step is about to overwrite. */
void rkv__cpu_visible_row(const struct rkv__cpu_layer *l, int64_t s, int64_t f, uint8_t *row) {
    const int64_t C = l->capacity, lo = s * C;
    memset(row, 0, (size_t)l->total_slots);
    memcpy(row + lo, l->written + lo, (size_t)C);
    int write;
    const int64_t slot = rkv_ring_slot(&l->g, f, &write);
    if (write) memset(row + lo + slot * l->g.tokens_per_frame, 0, (size_t)l->g.tokens_per_frame);
}

/* Copies row b's frame (T slots of every head, K and V) from the upsert input
 * [2][H][B*T][D] to slots [dst, dst+T) of the storage. */
static void copy_frame(const struct rkv__cpu_layer *l, const uint8_t *kv, int64_t batch,
                       int64_t b, int64_t dst) {
    const int64_t T = l->g.tokens_per_frame, H = l->g.n_kv_heads;
    const size_t frame_bytes = (size_t)T * l->row_bytes;
    for (int c = 0; c < 2; c++)
        for (int64_t h = 0; h < H; h++) {
            const uint8_t *src = kv + ((size_t)(c * H + h) * (size_t)(batch * T) + (size_t)(b * T)) *
                                          l->row_bytes;
            memcpy(rkv__slot_ptr(l, c, h, dst), src, frame_bytes);
        }
}

void rkv__upsert_run(const struct rkv__cpu_layer *layer, const void *kv, int64_t batch,
                     const int64_t *frame_pos, const int64_t *session_idx, int commit,
                     uint8_t *visible) {
    const rkv_geometry *g = &layer->g;
    const int64_t T = g->tokens_per_frame, C = layer->capacity, L = layer->ring_len;
    const uint8_t *src = kv;

    /* 1. scratch write for every row */
    for (int64_t b = 0; b < batch; b++) copy_frame(layer, src, batch, b, session_idx[b] * C + L);

    /* 2. visibility row, before the commit */
    if (visible) rkv__cpu_visible_row(layer, session_idx[0], frame_pos[0], visible);

    /* 3. commit: ring slot on write steps, scratch (again) otherwise */
    if (commit)
        for (int64_t b = 0; b < batch; b++) {
            int write;
            const int64_t slot = rkv_ring_slot(g, frame_pos[b], &write);
            const int64_t dst = session_idx[b] * C + (write ? slot * T : L);
            copy_frame(layer, src, batch, b, dst);
            memset(layer->written + dst, 1, (size_t)T);
        }
}

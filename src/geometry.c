/* Geometry of one layer's ring: validation, derived sizes, slot arithmetic
 * (SEMANTICS sections 2 and 3 step 1). */
#include <stdio.h>

#include "internal.h"

/* RKV_ERR_INVALID_ARG naming field `name` unless v >= 1. */
static rkv_status positive(const char *name, int64_t v) {
    if (v >= 1) return RKV_OK;
    return rkv__fail(RKV_ERR_INVALID_ARG, "%s must be >= 1; got %lld", name, (long long)v);
}

rkv_status rkv__geometry_check_shared(const rkv_geometry *g) {
    if (!g) return rkv__fail(RKV_ERR_NULL, "geometry is NULL");
    rkv_status st;
    if ((st = positive("num_sessions", g->num_sessions)) != RKV_OK ||
        (st = positive("n_kv_heads", g->n_kv_heads)) != RKV_OK ||
        (st = positive("d_head", g->d_head)) != RKV_OK)
        return st;
    if (g->tokens_per_frame < RKV_BLOCK_TOKENS || g->tokens_per_frame % RKV_BLOCK_TOKENS)
        return rkv__fail(RKV_ERR_INVALID_ARG,
                         "tokens_per_frame (%lld) must be a positive multiple of the attention "
                         "block size %d (>= %d)",
                         (long long)g->tokens_per_frame, RKV_BLOCK_TOKENS, RKV_BLOCK_TOKENS);
    if (!rkv_dtype_name(g->dtype)) /* an unknown dtype has no name */
        return rkv__fail(RKV_ERR_DTYPE, "dtype %d is unknown; expected " RKV_DTYPE_NAMES " (0 up, in order)",
                         (int)g->dtype);
    return RKV_OK;
}

rkv_status rkv_geometry_check(const rkv_geometry *g) {
    rkv_status st = rkv__geometry_check_shared(g);
    if (st != RKV_OK || (st = positive("ring_frames", g->ring_frames)) != RKV_OK) return st;
    if (g->ring_buckets < 1 || g->ring_buckets > g->ring_frames)
        return rkv__fail(RKV_ERR_INVALID_ARG,
                         "ring_buckets (%lld) must be in [1, ring_frames (%lld)]; the addressable "
                         "slots have to fit inside the allocated ring",
                         (long long)g->ring_buckets, (long long)g->ring_frames);
    if ((st = positive("pinned_dilation", g->pinned_dilation)) != RKV_OK) return st;
    /* N = S*(RF+1)*T slots; bytes = 2*H*N*D*elem must fit size_t and int64. */
    int64_t cap, n, bytes;
    bool fits = g->ring_frames < INT64_MAX &&
                rkv__mul_i64(g->ring_frames + 1, g->tokens_per_frame, &cap) &&
                rkv__mul_i64(g->num_sessions, cap, &n) && rkv__mul_i64(n, g->n_kv_heads, &bytes) &&
                rkv__mul_i64(bytes, g->d_head, &bytes) &&
                rkv__mul_i64(bytes, 2 * (int64_t)rkv_dtype_size(g->dtype), &bytes) &&
                (uint64_t)bytes <= (uint64_t)SIZE_MAX;
    if (!fits)
        return rkv__fail(RKV_ERR_OVERFLOW,
                         "geometry too large: 2*H*S*(RF+1)*T*D*elem bytes overflow (S %lld, H "
                         "%lld, RF %lld, T %lld, D %lld)",
                         (long long)g->num_sessions, (long long)g->n_kv_heads,
                         (long long)g->ring_frames, (long long)g->tokens_per_frame,
                         (long long)g->d_head);
    return RKV_OK;
}

int64_t rkv_geometry_capacity(const rkv_geometry *g) {
    return (g->ring_frames + 1) * g->tokens_per_frame;
}

int64_t rkv_geometry_total_slots(const rkv_geometry *g) {
    return g->num_sessions * rkv_geometry_capacity(g);
}

size_t rkv_geometry_memory_bytes(const rkv_geometry *g) {
    return 2 * (size_t)g->n_kv_heads * (size_t)rkv_geometry_total_slots(g) * (size_t)g->d_head *
           rkv_dtype_size(g->dtype);
}

int64_t rkv_ring_slot(const rkv_geometry *g, int64_t frame_pos, int *write_step) {
    if (write_step) *write_step = rkv__rule_write_step(frame_pos, g->pinned_dilation);
    return rkv__rule_slot(frame_pos, g->pinned_dilation, g->ring_buckets);
}

const char *rkv__written_bad_what(const rkv_geometry *g, const uint8_t *w, int64_t bad,
                                  char *buf, size_t n) {
    const int64_t T = g->tokens_per_frame, L = g->ring_frames * T, j = bad;
    if (w[j] > 1)
        snprintf(buf, n, "written bit of slot %lld is %u; expected 0 or 1", (long long)j, w[j]);
    else if (j >= L)
        snprintf(buf, n, "scratch slot %lld has written bit %u; expected 1", (long long)j, w[j]);
    else {
        const int64_t a = j - j % T;
        snprintf(buf, n,
                 "ring frame %lld (slots %lld..%lld) is partly written (slot %lld is %u, slot "
                 "%lld is %u); frames are written whole",
                 (long long)(j / T), (long long)a, (long long)(a + T - 1), (long long)a, w[a],
                 (long long)j, w[j]);
    }
    return buf;
}

const char *rkv__geometry_differs(const rkv_geometry *a, const rkv_geometry *b, int64_t *va,
                                  int64_t *vb) {
#define FIELD(f)                                                                                   \
    if (a->f != b->f) {                                                                            \
        *va = (int64_t)a->f, *vb = (int64_t)b->f;                                                  \
        return #f;                                                                                 \
    }
    FIELD(num_sessions) FIELD(n_kv_heads) FIELD(ring_frames) FIELD(ring_buckets) FIELD(d_head)
    FIELD(tokens_per_frame) FIELD(pinned_dilation) FIELD(dtype)
#undef FIELD
    return NULL;
}

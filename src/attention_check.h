/* The one check of an attention call's arguments (SEMANTICS 5), above
 * every backend's table (the layer and model calls, the CPU engines, the
 * CUDA backend's describe). Inline: the CUDA library runs it too and links
 * only the core's public symbols (docs/backends.md).
 * `a` in this library's layout (struct_size loaded); g the layer's
 * geometry; lim the backend's limits (NULL: none); storage the layer's
 * (out must not overlap it; NULL: not checked); host_rows: session_idx /
 * frame_pos values are checked here (host memory), else by the kernels or
 * at begin_frame. `what` names the call. */
#ifndef RKV_ATTENTION_CHECK_H
#define RKV_ATTENTION_CHECK_H

#include <math.h>

#include "internal.h"

static inline bool rkv__misaligned(const void *p, size_t to) {
    return to > 1 && (uintptr_t)p % to != 0;
}

static inline rkv_status rkv__attend_args_check(const rkv_geometry *g, const rkv_backend_limits *lim,
                                  const rkv_backend_storage *storage,
                                  const rkv_attention_args *a, bool host_rows, const char *what) {
    static const rkv_backend_limits none = {0, 0, 0, 0, 0};
    if (!lim) lim = &none;
    const int64_t S = g->num_sessions;
    if (a->batch < 1)
        return rkv__fail(RKV_ERR_INVALID_ARG, "%s: batch B = %lld; expected >= 1", what,
                         (long long)a->batch);
    if (lim->max_batch > 0 && a->batch > lim->max_batch)
        return rkv__fail(RKV_ERR_INVALID_ARG, "%s: batch B = %lld; expected 1..%lld", what,
                         (long long)a->batch, (long long)lim->max_batch);
    if (a->n_q_heads < 1 || a->n_q_heads % g->n_kv_heads)
        return rkv__fail(RKV_ERR_INVALID_ARG,
                         "%s: n_q_heads = %lld; expected a positive multiple of "
                         "n_kv_heads (%lld) for GQA", what,
                         (long long)a->n_q_heads, (long long)g->n_kv_heads);
    if (lim->max_kv_heads > 0 && g->n_kv_heads > lim->max_kv_heads)
        return rkv__fail(RKV_ERR_INVALID_ARG,
                         "%s: n_kv_heads = %lld; the backend's attention takes at most %lld",
                         what, (long long)g->n_kv_heads, (long long)lim->max_kv_heads);
    if (a->n_queries < 0)
        return rkv__fail(RKV_ERR_INVALID_ARG,
                         "%s: n_queries = %lld; expected >= 0 (0 = tokens_per_frame)", what,
                         (long long)a->n_queries);
    if (!a->q || !a->out)
        return rkv__fail(RKV_ERR_NULL, "%s: %s is NULL", what, a->q ? "out" : "q");
    if (!rkv_dtype_name(a->q_dtype) || !rkv_dtype_name(a->out_dtype))
        return rkv__fail(RKV_ERR_DTYPE, "%s: unknown dtype (q %d, out %d)", what,
                         (int)a->q_dtype, (int)a->out_dtype);
    if (!isfinite(a->scale))
        return rkv__fail(RKV_ERR_INVALID_ARG, "%s: scale is not finite", what);
    if (lim->max_d_head > 0 && g->d_head > lim->max_d_head)
        return rkv__fail(RKV_ERR_INVALID_ARG, "%s: d_head = %lld; the backend takes at most %lld",
                         what, (long long)g->d_head, (long long)lim->max_d_head);
    if (rkv__misaligned(a->q, lim->align) || rkv__misaligned(a->out, lim->align))
        return rkv__fail(RKV_ERR_INVALID_ARG, "%s: %s is not %zu-byte aligned", what,
                         rkv__misaligned(a->q, lim->align) ? "q" : "out", lim->align);
    /* attention only reads, so a session may appear in several rows */
    RKV__REQUIRE(what, a->session_idx);
    if (!a->visible && !a->frame_pos)
        return rkv__fail(RKV_ERR_NULL, "%s: frame_pos is NULL (needed when visible is NULL)",
                         what);
    if (host_rows) {
        for (int64_t b = 0; b < a->batch; b++)
            if (a->session_idx[b] < 0 || a->session_idx[b] >= S)
                return rkv__fail(RKV_ERR_RANGE,
                                 "%s: session_idx[%lld] = %lld is out of range; expected 0..%lld",
                                 what, (long long)b, (long long)a->session_idx[b],
                                 (long long)(S - 1));
        if (!a->visible)
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
    /* out is written: it must not share a byte with what the call reads */
    const size_t n = (size_t)(elems / 4), B = (size_t)a->batch;
    const size_t N = (size_t)rkv_geometry_total_slots(g);
    const rkv__buf out[] = {{a->out, n * rkv_dtype_size(a->out_dtype), "out"}};
    const rkv__buf in[] = {
        {a->q, n * rkv_dtype_size(a->q_dtype), "q"},
        {storage ? storage->kv : NULL, rkv_geometry_memory_bytes(g), "the ring's K/V storage"},
        {storage ? storage->written : NULL, N, "the ring's written bits"},
        {a->session_idx, B * sizeof *a->session_idx, "session_idx"},
        {a->visible ? NULL : a->frame_pos, B * sizeof *a->frame_pos, "frame_pos"},
        {a->visible, B * N, "visible"},
    };
    return rkv__check_no_overlap(what, out, 1, in, 6);
}

#endif

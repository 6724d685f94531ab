/* Attention over the ring on the CPU (SEMANTICS 5): the simple, exact
 * implementation kept as the test oracle. For each session row it gathers
 * the visible slots (from an explicit row, or from the written bits and the
 * row's clock), widens them to f32 once per KV head, and runs a two-pass
 * softmax per query with f32 accumulation. No causal mask; GQA maps query
 * head h to KV head h / (Hq/H). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* Visible slots of one row, ascending: from the caller's row, or from the
 * bits-and-clock rule (ring frames ascending, scratch last). */
static int64_t gather_visible_slots(const struct rkv_layer *l, const rkv_attention_args *a,
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
    const int64_t hidden = rkv__hidden_frame(g, a->frame_pos[b]);
    for (int64_t r = 0; r <= g->ring_frames; r++)
        if (r == g->ring_frames || rkv__ring_frame_visible(l, lo, hidden, r))
            for (int64_t t = 0; t < T; t++) slots[n++] = lo + r * T + t;
    return n;
}

/* dst[j][:] = half c (K or V), head h, slot slots[j], widened to f32. */
static void widen_rows(const struct rkv_layer *l, int c, int64_t h, const int64_t *slots,
                       int64_t n, float *dst) {
    const int64_t D = l->g.d_head;
    for (int64_t j = 0; j < n; j++) {
        const uint8_t *src = rkv__slot_ptr(l, c, h, slots[j]);
        for (int64_t d = 0; d < D; d++) dst[j * D + d] = rkv__load(src, l->g.dtype, (size_t)d);
    }
}

static float dot(const float *x, const float *y, int64_t n) {
    float acc[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) acc[k] += x[i + k] * y[i + k];
    float s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
    for (; i < n; i++) s += x[i] * y[i];
    return s;
}

static rkv_status validate(const struct rkv_layer *l, const rkv_attention_args *a) {
    if (!l) return rkv__fail(RKV_ERR_NULL, "rkv_layer_attend: layer is NULL");
    if (!a) return rkv__fail(RKV_ERR_NULL, "rkv_layer_attend: args is NULL");
    const rkv_geometry *g = &l->g;
    if (a->batch < 1 || a->batch > g->num_sessions)
        return rkv__fail(RKV_ERR_INVALID_ARG, "rkv_layer_attend: batch B = %lld; expected 1..%lld",
                         (long long)a->batch, (long long)g->num_sessions);
    if (a->n_q_heads < 1 || a->n_q_heads % g->n_kv_heads)
        return rkv__fail(RKV_ERR_INVALID_ARG,
                         "rkv_layer_attend: n_q_heads = %lld; expected a positive multiple of "
                         "n_kv_heads (%lld) for GQA",
                         (long long)a->n_q_heads, (long long)g->n_kv_heads);
    if (a->n_queries < 0)
        return rkv__fail(RKV_ERR_INVALID_ARG,
                         "rkv_layer_attend: n_queries = %lld; expected >= 0 (0 = tokens_per_frame)",
                         (long long)a->n_queries);
    if (!a->q || !a->out)
        return rkv__fail(RKV_ERR_NULL, "rkv_layer_attend: %s is NULL", a->q ? "out" : "q");
    if (!rkv__dtype_valid(a->q_dtype) || !rkv__dtype_valid(a->out_dtype))
        return rkv__fail(RKV_ERR_DTYPE, "rkv_layer_attend: unknown dtype (q %d, out %d)",
                         (int)a->q_dtype, (int)a->out_dtype);
    if (!isfinite(a->scale))
        return rkv__fail(RKV_ERR_INVALID_ARG, "rkv_layer_attend: scale is not finite");
    rkv_status st = rkv__check_sessions("rkv_layer_attend", a->session_idx, a->batch,
                                        g->num_sessions);
    if (st != RKV_OK) return st;
    if (!a->visible) {
        if (!a->frame_pos)
            return rkv__fail(RKV_ERR_NULL,
                             "rkv_layer_attend: frame_pos is NULL (needed when visible is NULL)");
        for (int64_t b = 0; b < a->batch; b++)
            if (a->frame_pos[b] < 0)
                return rkv__fail(RKV_ERR_INVALID_ARG,
                                 "rkv_layer_attend: frame_pos[%lld] = %lld; expected >= 0",
                                 (long long)b, (long long)a->frame_pos[b]);
    }
    const int64_t tq = a->n_queries ? a->n_queries : g->tokens_per_frame;
    int64_t elems;
    if (!rkv__mul_i64(a->batch, a->n_q_heads, &elems) || !rkv__mul_i64(elems, tq, &elems) ||
        !rkv__mul_i64(elems, g->d_head, &elems) || !rkv__mul_i64(elems, 4, &elems))
        return rkv__fail(RKV_ERR_OVERFLOW,
                         "rkv_layer_attend: B*Hq*Tq*D = %lld*%lld*%lld*%lld overflows",
                         (long long)a->batch, (long long)a->n_q_heads, (long long)tq,
                         (long long)g->d_head);
    return RKV_OK;
}

rkv_status rkv_layer_attend(const rkv_layer *layer, const rkv_attention_args *args) {
    rkv_status st = validate(layer, args);
    if (st != RKV_OK) return st;
    const rkv_geometry *g = &layer->g;
    const int64_t D = g->d_head, Hq = args->n_q_heads, group = Hq / g->n_kv_heads;
    const int64_t Tq = args->n_queries ? args->n_queries : g->tokens_per_frame;
    const float scale = args->scale != 0.0f ? args->scale : 1.0f / sqrtf((float)D);
    const size_t N = (size_t)layer->total_slots;

    int64_t *slots = malloc(N * sizeof *slots);
    float *keys = malloc(N * (size_t)D * sizeof *keys);
    float *values = malloc(N * (size_t)D * sizeof *values);
    float *scores = malloc(N * sizeof *scores);
    float *q = malloc((size_t)D * sizeof *q), *acc = malloc((size_t)D * sizeof *acc);
    if (!slots || !keys || !values || !scores || !q || !acc) {
        free(slots), free(keys), free(values), free(scores), free(q), free(acc);
        return rkv__fail(RKV_ERR_NO_MEMORY, "rkv_layer_attend: out of memory");
    }

    for (int64_t b = 0; b < args->batch; b++) {
        const int64_t n = gather_visible_slots(layer, args, b, slots);
        for (int64_t kvh = 0; kvh < g->n_kv_heads; kvh++) {
            widen_rows(layer, 0, kvh, slots, n, keys);
            widen_rows(layer, 1, kvh, slots, n, values);
            for (int64_t h = kvh * group; h < (kvh + 1) * group; h++)
                for (int64_t i = 0; i < Tq; i++) {
                    const size_t base = (size_t)(((b * Hq + h) * Tq + i) * D);
                    for (int64_t d = 0; d < D; d++)
                        q[d] = rkv__load(args->q, args->q_dtype, base + (size_t)d);
                    float m = -INFINITY;
                    for (int64_t j = 0; j < n; j++) {
                        scores[j] = scale * dot(q, keys + j * D, D);
                        if (scores[j] > m) m = scores[j];
                    }
                    float sum = 0.0f;
                    memset(acc, 0, (size_t)D * sizeof *acc);
                    for (int64_t j = 0; j < n; j++) {
                        const float p = expf(scores[j] - m);
                        sum += p;
                        const float *v = values + j * D;
                        for (int64_t d = 0; d < D; d++) acc[d] += p * v[d];
                    }
                    const float inv = n ? 1.0f / sum : 0.0f;
                    for (int64_t d = 0; d < D; d++)
                        rkv__store(args->out, args->out_dtype, base + (size_t)d, acc[d] * inv);
                }
        }
    }
    free(slots), free(keys), free(values), free(scores), free(q), free(acc);
    return RKV_OK;
}

/* Attention over the ring on the CPU (SEMANTICS 4, 5): the visible-slot
 * list every CPU engine uses, and the simple, exact implementation kept as
 * the test oracle (the reference table's attend, rkv_backend_cpu_reference).
 * For each session row it gathers the visible slots, widens them to f32
 * once per KV head, and runs a two-pass softmax per query with f32
 * accumulation. No causal mask; GQA maps query head h to KV head h / (Hq/H). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_internal.h"

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

/* dst[j][:] = half c (K or V), head h, slot slots[j], widened to f32. */
static void widen_rows(const struct rkv__cpu_layer *l, int c, int64_t h, const int64_t *slots,
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

rkv_status rkv__attend_reference_run(void *ctx, const void *impl, const rkv_attention_args *args,
                                     void *workspace, size_t workspace_bytes) {
    (void)ctx, (void)workspace, (void)workspace_bytes;
    const struct rkv__cpu_layer *layer = impl;
    const rkv_geometry *g = &layer->g;
    const int64_t D = g->d_head, Hq = args->n_q_heads, group = Hq / g->n_kv_heads;
    const int64_t Tq = args->n_queries ? args->n_queries : g->tokens_per_frame;
    const float scale = args->scale != 0.0f ? args->scale : 1.0f / sqrtf((float)D);
    const size_t N = (size_t)layer->total_slots;

    const size_t nd = N * (size_t)D;
    int64_t *slots = malloc(N * sizeof *slots);
    float *keys = malloc((2 * nd + N + 2 * (size_t)D) * sizeof *keys); /* and the rest: */
    if (!slots || !keys) {
        free(slots), free(keys);
        return rkv__fail(RKV_ERR_NO_MEMORY, "rkv_layer_attend: out of memory");
    }
    float *values = keys + nd, *scores = values + nd, *q = scores + N, *acc = q + D;

    for (int64_t b = 0; b < args->batch; b++) {
        const int64_t n = rkv__gather_visible_slots(layer, args, b, slots);
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
                    /* every score -inf: weights exp(-inf - 0) = 0 and
                     * the row's output 0, as for a row with no key (m - m
                     * would be NaN); +inf or NaN scores still give NaN */
                    if (m == -INFINITY) m = 0.0f;
                    float sum = 0.0f;
                    memset(acc, 0, (size_t)D * sizeof *acc);
                    for (int64_t j = 0; j < n; j++) {
                        const float p = expf(scores[j] - m);
                        sum += p;
                        const float *v = values + j * D;
                        for (int64_t d = 0; d < D; d++) acc[d] += p * v[d];
                    }
                    const float inv = sum != 0.0f ? 1.0f / sum : 0.0f;
                    for (int64_t d = 0; d < D; d++)
                        rkv__store(args->out, args->out_dtype, base + (size_t)d, acc[d] * inv);
                }
        }
    }
    free(slots), free(keys);
    return RKV_OK;
}

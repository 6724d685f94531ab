/* A peer for `ringkv bench`: attention over one session row of a ring built
 * from OpenBLAS sgemm calls (the "use a BLAS for the tile products if
 * it wins; measure both"). For each query head: S = scale * Q K^T over each
 * contiguous run of visible slots (no gather: runs are read in place), a
 * row softmax in f32, then O = P V run by run. Heads are spread over
 * `threads` threads, each calling single-threaded sgemm. f32 storage only. */
#define _POSIX_C_SOURCE 200809L
#include "blas_attention.h"

#ifdef RKV_HAVE_OPENBLAS
#include <cblas.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

void openblas_set_num_threads(int num_threads); /* OpenBLAS extension */

typedef struct {
    const float *k, *v;        /* [H][N][D] of the layer                  */
    const float *q;            /* [Hq][T][D]                              */
    float *out;                /* [Hq][T][D]                              */
    const int64_t *run_lo, *run_len; /* visible runs of slots          */
    int64_t runs, keys, n_slots, hq, hkv, t, d;
    float scale;
    int threads, index;
} blas_job;

static void *run_heads(void *arg) {
    const blas_job *j = arg;
    float *s = malloc(sizeof(float) * (size_t)(j->t * j->keys));
    if (!s) return (void *)1;
    for (int64_t h = j->index; h < j->hq; h += j->threads) {
        const int64_t kvh = h / (j->hq / j->hkv);
        const float *q = j->q + h * j->t * j->d;
        float *o = j->out + h * j->t * j->d;
        int64_t col = 0;
        for (int64_t r = 0; r < j->runs; r++) { /* S[:, col:col+len] = scale Q K_run^T */
            const float *k = j->k + (kvh * j->n_slots + j->run_lo[r]) * j->d;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)j->t, (int)j->run_len[r],
                        (int)j->d, j->scale, q, (int)j->d, k, (int)j->d, 0.0f, s + col,
                        (int)j->keys);
            col += j->run_len[r];
        }
        for (int64_t i = 0; i < j->t; i++) { /* softmax of each row */
            float *row = s + i * j->keys, m = -INFINITY, sum = 0;
            for (int64_t c = 0; c < j->keys; c++) m = row[c] > m ? row[c] : m;
            for (int64_t c = 0; c < j->keys; c++) sum += row[c] = expf(row[c] - m);
            for (int64_t c = 0; c < j->keys; c++) row[c] /= sum;
        }
        col = 0;
        for (int64_t r = 0; r < j->runs; r++) { /* O += P[:, run] V_run */
            const float *v = j->v + (kvh * j->n_slots + j->run_lo[r]) * j->d;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)j->t, (int)j->d,
                        (int)j->run_len[r], 1.0f, s + col, (int)j->keys, v, (int)j->d,
                        r ? 1.0f : 0.0f, o, (int)j->d);
            col += j->run_len[r];
        }
    }
    free(s);
    return NULL;
}

int blas_attention(const rkv_layer *layer, int64_t session, int64_t frame_pos, int64_t n_q_heads,
                   const float *q, float *out, int threads) {
    const rkv_geometry *g = rkv_layer_geometry(layer);
    if (g->dtype != RKV_DTYPE_F32 || threads < 1 || threads > 64) return -1;
    int64_t frames[1024], count = 0;
    if (g->ring_frames >= 1024 ||
        rkv_layer_visible_frames(layer, session, frame_pos, frames, &count) != RKV_OK)
        return -1;
    /* merge adjacent visible frames into runs of slots */
    int64_t run_lo[1024], run_len[1024], runs = 0, keys = 0;
    const int64_t T = g->tokens_per_frame, lo = session * rkv_geometry_capacity(rkv_layer_geometry(layer));
    for (int64_t i = 0; i < count; i++) {
        const int64_t start = lo + frames[i] * T;
        if (runs && run_lo[runs - 1] + run_len[runs - 1] == start) run_len[runs - 1] += T;
        else run_lo[runs] = start, run_len[runs++] = T;
        keys += T;
    }
    const float *kv = rkv_layer_kv(layer);
    const int64_t N = rkv_geometry_total_slots(rkv_layer_geometry(layer));
    openblas_set_num_threads(1);
    pthread_t tid[64];
    blas_job jobs[64];
    int failed = 0;
    for (int t = 0; t < threads; t++) {
        jobs[t] = (blas_job){.k = kv, .v = kv + g->n_kv_heads * N * g->d_head, .q = q, .out = out,
                             .run_lo = run_lo, .run_len = run_len, .runs = runs, .keys = keys,
                             .n_slots = N, .hq = n_q_heads, .hkv = g->n_kv_heads,
                             .t = T, .d = g->d_head,
                             .scale = 1.0f / sqrtf((float)g->d_head), .threads = threads,
                             .index = t};
        if (t && pthread_create(&tid[t], NULL, run_heads, &jobs[t])) return -1;
    }
    failed |= run_heads(&jobs[0]) != NULL;
    for (int t = 1; t < threads; t++) {
        void *r;
        pthread_join(tid[t], &r);
        failed |= r != NULL;
    }
    return failed ? -1 : 0;
}

#endif /* RKV_HAVE_OPENBLAS */

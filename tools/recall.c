/* Recall metrics of `ringkv rollout` (see recall.h). */
#include "recall.h"

#include <math.h>
#include <stdlib.h>

const char *recall_band_name(recall_band b) {
    switch (b) {
    case RECALL_NEAR: return "near";
    case RECALL_MID: return "mid";
    case RECALL_FAR: return "far";
    case RECALL_UNSEEN: return "unseen";
    default: return "?";
    }
}

const char *recall_class_name(recall_class c) {
    return c == RECALL_LOCAL ? "local" : c == RECALL_GLOBAL ? "global" : "?";
}

recall_band recall_band_of_gap(int64_t gap) {
    if (gap < 1) return RECALL_UNSEEN;
    if (gap <= RECALL_NEAR_MAX) return RECALL_NEAR;
    if (gap <= RECALL_MID_MAX) return RECALL_MID;
    return RECALL_FAR;
}

double recall_psnr_db(const float *truth, const float *got, int64_t n) {
    double se = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double d = (double)got[i] - (double)truth[i];
        se += d * d;
    }
    double mse = se / (double)n;
    if (!(mse > 0.0)) return mse == 0.0 ? RECALL_PSNR_CAP_DB : 0.0; /* NaN: 0 dB */
    double p = -10.0 * log10(mse);
    return p > RECALL_PSNR_CAP_DB ? RECALL_PSNR_CAP_DB : p;
}

void recall_stats_add(recall_stats *s, recall_class c, recall_band b, double psnr_db) {
    recall_tally *t = &s->tally[c][b];
    t->patches++;
    t->psnr_sum_db += psnr_db;
    if (psnr_db >= RECALL_PSNR_OK_DB) t->recalled++;
}

double recall_mean_psnr_db(const recall_tally *t) {
    return t->patches ? t->psnr_sum_db / (double)t->patches : 0.0;
}

double recall_rate(const recall_tally *t) {
    return t->patches ? (double)t->recalled / (double)t->patches : 0.0;
}

int recall_memory_init(recall_memory *m, int64_t cols, int64_t rows) {
    m->cols = cols;
    m->rows = rows;
    m->last_seen = malloc((size_t)(cols * rows) * sizeof *m->last_seen);
    if (!m->last_seen) return -1;
    for (int64_t i = 0; i < cols * rows; i++) m->last_seen[i] = -1;
    return 0;
}

void recall_memory_free(recall_memory *m) {
    free(m->last_seen);
    m->last_seen = NULL;
}

static int64_t cell_index(const recall_memory *m, int64_t col, int64_t row) {
    int64_t c = col % m->cols;
    if (c < 0) c += m->cols;
    return row * m->cols + c;
}

int64_t recall_memory_gap(const recall_memory *m, int64_t col, int64_t row, int64_t frame) {
    int64_t last = m->last_seen[cell_index(m, col, row)];
    return last < 0 ? -1 : frame - last;
}

void recall_memory_see(recall_memory *m, int64_t col, int64_t row, int64_t view_rows,
                       int64_t view_cols, int64_t frame) {
    for (int64_t r = 0; r < view_rows; r++)
        for (int64_t c = 0; c < view_cols; c++)
            m->last_seen[cell_index(m, col + c, row + r)] = frame;
}

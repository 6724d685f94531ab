/* Recall metrics of `ringkv rollout` (docs/rollout.md).
 *
 * On each frame's first pass, the attention output of a view token is that
 * token's "recalled" patch. Only textured patches count (true pixels with a
 * standard deviation of at least WORLD_TEXTURE_STD). Each gets a PSNR against
 * the true patch (peak 1, capped at 60 dB) and is recalled when that PSNR is
 * at least 30 dB. Patches are grouped by how many frames ago their world cell
 * was last in view (in the same session): near 1..15, mid 16..127, far >= 128;
 * a cell never seen before is "unseen" and in no band. Figures are kept per
 * layer class (the first local layer, pinned dilation 1, and the first global
 * layer, dilation > 1) and pooled over sessions. */
#ifndef RKV_TOOLS_RECALL_H
#define RKV_TOOLS_RECALL_H

#include <stdint.h>

#define RECALL_NEAR_MAX 15
#define RECALL_MID_MAX 127
#define RECALL_PSNR_CAP_DB 60.0
#define RECALL_PSNR_OK_DB 30.0

typedef enum recall_band {
    RECALL_UNSEEN = -1,
    RECALL_NEAR = 0,
    RECALL_MID,
    RECALL_FAR,
    RECALL_BANDS
} recall_band;

typedef enum recall_class { RECALL_LOCAL = 0, RECALL_GLOBAL, RECALL_CLASSES } recall_class;

const char *recall_band_name(recall_band b);   /* "near", "mid", "far", "unseen" */
const char *recall_class_name(recall_class c); /* "local", "global" */

/* Band of a cell last in view `gap` frames ago (gap < 0: never seen). */
recall_band recall_band_of_gap(int64_t gap);

/* PSNR in dB of got against truth (n values, peak 1), capped at 60. */
double recall_psnr_db(const float *truth, const float *got, int64_t n);

typedef struct recall_tally {
    int64_t patches, recalled;
    double psnr_sum_db;
} recall_tally;

typedef struct recall_stats {
    recall_tally tally[RECALL_CLASSES][RECALL_BANDS];
    int64_t in_view;   /* every view patch of every first pass           */
    int64_t flat;      /* of which without texture (not measured)        */
    int64_t unseen;    /* textured, cell never in view before (no band)  */
} recall_stats;

void recall_stats_add(recall_stats *s, recall_class c, recall_band b, double psnr_db);
/* Mean PSNR and recall rate of a band; 0 when it holds no patch (callers
 * print null then). */
double recall_mean_psnr_db(const recall_tally *t);
double recall_rate(const recall_tally *t);

/* When each world cell was last in view, for one session. */
typedef struct recall_memory {
    int64_t cols, rows;
    int64_t *last_seen; /* [rows][cols], -1 = never */
} recall_memory;

int recall_memory_init(recall_memory *m, int64_t cols, int64_t rows);
void recall_memory_free(recall_memory *m);
/* Frames since cell (col wrapped, row) was last in view, -1 if never. */
int64_t recall_memory_gap(const recall_memory *m, int64_t col, int64_t row, int64_t frame);
/* Marks a view_rows x view_cols window at (col, row) as seen on `frame`. */
void recall_memory_see(recall_memory *m, int64_t col, int64_t row, int64_t view_rows,
                       int64_t view_cols, int64_t frame);

#endif

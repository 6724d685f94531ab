/* The picture of `ringkv rollout`: a contact sheet, PNG (Debian's libstb).
 *
 * One row per captured frame, four panels per row, left to right:
 *   1. the true view (luma);
 *   2. the view recalled by the first local layer on the frame's first pass;
 *   3. the view recalled by the first global layer;
 *   4. the band of each patch over the true view: green near (1-15 frames
 *      since last in view), yellow mid (16-127), red far (>= 128), blue
 *      unseen, no tint for flat patches (not measured).
 * Panels are 8 pixels per cell (doubled when the view is under 200 pixels
 * wide), on a dark background, under a strip of panel titles; each row has
 * its frame clock and move written above it (stb_easy_font). A text legend
 * (sheet_write_files) says the same at more length. */
#ifndef RKV_TOOLS_SHEET_H
#define RKV_TOOLS_SHEET_H

#include <stddef.h>
#include <stdint.h>

#include "camera.h"

#define SHEET_MAX_ROWS 8
#define SHEET_FLAT 3 /* band value of an untextured patch */

typedef struct sheet_row {
    int64_t frame;
    const char *label;
    float *truth;       /* [T][value_dims] */
    float *recalled[2]; /* local, global: [T][value_dims] */
    int8_t *band;       /* [T]: -1 unseen, 0 near, 1 mid, 2 far, 3 flat */
} sheet_row;

typedef struct sheet {
    camera_view view;
    int64_t value_dims;
    int64_t layer[2]; /* local, global recall layers (titles); -1: none */
    int n_rows;
    sheet_row rows[SHEET_MAX_ROWS];
} sheet;

void sheet_init(sheet *s, camera_view view, int64_t value_dims);
void sheet_free(sheet *s);
/* Copies one frame's views (value_dims floats per token). -1 when full or
 * out of memory. */
int sheet_add(sheet *s, int64_t frame, const char *label, const float *truth,
              const float *local, const float *global, const int8_t *band);
/* Writes the picture, a PNG, to png_path and its text legend to legend_path:
 * `about` (lines about the run), the panels, the band colours and the rows
 * (`picture` names the picture in the legend). Both or neither: each goes
 * into a temporary file beside it, every write checked, and both are on
 * the disk (fsync) before either is renamed over its path
 * (src/atomic_file.h, as the snapshot files); so a full disk or a file-size
 * limit leaves no partial file and the files there before as they were.
 * 0, or -1 with "cannot write the picture 'PATH': WHY" (or "the legend")
 * in err. */
int sheet_write_files(const sheet *s, const char *png_path, const char *legend_path,
                      const char *picture, const char *about, char *err, size_t err_len);

#endif

/* The world of `ringkv rollout`: a real image cut into 8 x 8 pixel cells.
 *
 * The image is decoded (JPEG or PNG, any channel count) and turned into luma
 * in [0, 1] (Rec. 601: 0.299 R + 0.587 G + 0.114 B). Its width and height in
 * cells are floor(pixels / 8); the remainder is cropped. Columns wrap around
 * (longitude); rows do not (latitude): callers never ask for a row outside
 * [0, rows). Each cell knows its 64 pixels and whether it has texture (pixel
 * standard deviation at least WORLD_TEXTURE_STD). See docs/rollout.md. */
#ifndef RKV_TOOLS_WORLD_H
#define RKV_TOOLS_WORLD_H

#include <stddef.h>
#include <stdint.h>

#define WORLD_PATCH 8                             /* pixels per cell side */
#define WORLD_PATCH_PIXELS (WORLD_PATCH * WORLD_PATCH)
#define WORLD_TEXTURE_STD 0.03                    /* textured when std >= */

typedef struct world_map {
    int64_t cols, rows;  /* cells                                    */
    int64_t width_px;    /* cols * 8                                 */
    float *luma;         /* [rows*8][cols*8] in [0, 1]               */
    uint8_t *textured;   /* [rows][cols]: 1 when std >= 0.03         */
    double textured_fraction;
} world_map;

/* Decodes the image at path. Returns 0, or -1 with a message in err. */
int world_load(world_map *w, const char *path, char *err, size_t err_len);
void world_free(world_map *w);

/* Column wrapped into [0, cols). */
int64_t world_wrap_col(const world_map *w, int64_t col);

/* The 64 pixels of cell (col wrapped, row in [0, rows)), row-major. */
void world_cell_pixels(const world_map *w, int64_t col, int64_t row,
                       float out[WORLD_PATCH_PIXELS]);

int world_cell_textured(const world_map *w, int64_t col, int64_t row);

#endif

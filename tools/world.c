/* The world of `ringkv rollout`: image decoding (Debian's libstb), luma,
 * 8 x 8 cells and their texture. */
#define _POSIX_C_SOURCE 200809L

#include "world.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <stb/stb_image.h>

#include "cli.h"
#include "escape.h"

int world_load(world_map *w, const char *path, char *err, size_t err_len) {
    memset(w, 0, sizeof *w);
    /* what stb_image would only call "can't fopen" or "unknown image type" */
    if (cli_check_input_file("image", path, "an image file (a JPEG or PNG)", err, err_len))
        return -1;
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, err_len, "cannot open image '%s': %s", rkv_tool_shown(path),
                 strerror(errno));
        return -1;
    }
    int x = 0, y = 0, channels = 0;
    unsigned char *rgb = stbi_load_from_file(f, &x, &y, &channels, 3);
    fclose(f);
    if (!rgb) {
        snprintf(err, err_len, "cannot decode image '%s': %s (expected a JPEG or PNG file)",
                 rkv_tool_shown(path), stbi_failure_reason());
        return -1;
    }
    int64_t cols = x / WORLD_PATCH, rows = y / WORLD_PATCH;
    if (cols < 2 || rows < 1) {
        snprintf(err, err_len,
                 "image '%s' is %d x %d pixels (width x height): too small (at least 16 x 8: "
                 "2 cols x 1 row of 8 x 8-pixel cells)",
                 rkv_tool_shown(path), x, y);
        stbi_image_free(rgb);
        return -1;
    }
    int64_t wpx = cols * WORLD_PATCH, hpx = rows * WORLD_PATCH;
    w->luma = malloc((size_t)(wpx * hpx) * sizeof *w->luma);
    w->textured = malloc((size_t)(cols * rows));
    if (!w->luma || !w->textured) {
        snprintf(err, err_len, "out of memory for a map of %lld cols x %lld rows of cells",
                 (long long)cols, (long long)rows);
        stbi_image_free(rgb);
        world_free(w);
        return -1;
    }
    w->cols = cols;
    w->rows = rows;
    w->width_px = wpx;
    for (int64_t py = 0; py < hpx; py++)
        for (int64_t px = 0; px < wpx; px++) {
            const unsigned char *p = rgb + 3 * ((size_t)py * (size_t)x + (size_t)px);
            w->luma[py * wpx + px] =
                (float)((0.299 * p[0] + 0.587 * p[1] + 0.114 * p[2]) / 255.0);
        }
    stbi_image_free(rgb);

    int64_t n_textured = 0;
    float pix[WORLD_PATCH_PIXELS];
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) {
            world_cell_pixels(w, c, r, pix);
            double mean = 0.0, var = 0.0;
            for (int i = 0; i < WORLD_PATCH_PIXELS; i++) mean += pix[i];
            mean /= WORLD_PATCH_PIXELS;
            for (int i = 0; i < WORLD_PATCH_PIXELS; i++) var += (pix[i] - mean) * (pix[i] - mean);
            var /= WORLD_PATCH_PIXELS;
            int t = sqrt(var) >= WORLD_TEXTURE_STD;
            w->textured[r * cols + c] = (uint8_t)t;
            n_textured += t;
        }
    w->textured_fraction = (double)n_textured / (double)(cols * rows);
    return 0;
}

void world_free(world_map *w) {
    free(w->luma);
    free(w->textured);
    memset(w, 0, sizeof *w);
}

int64_t world_wrap_col(const world_map *w, int64_t col) {
    int64_t c = col % w->cols;
    return c < 0 ? c + w->cols : c;
}

void world_cell_pixels(const world_map *w, int64_t col, int64_t row,
                       float out[WORLD_PATCH_PIXELS]) {
    int64_t c = world_wrap_col(w, col);
    const float *src = w->luma + row * WORLD_PATCH * w->width_px + c * WORLD_PATCH;
    for (int y = 0; y < WORLD_PATCH; y++)
        memcpy(out + y * WORLD_PATCH, src + y * w->width_px, WORLD_PATCH * sizeof *out);
}

int world_cell_textured(const world_map *w, int64_t col, int64_t row) {
    return w->textured[row * w->cols + world_wrap_col(w, col)];
}

/* The contact sheet of `ringkv rollout` (see sheet.h). */
#include "sheet.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <stb/stb_image_write.h>

#include "world.h"

#define GAP_PX 6
#define BACKGROUND 40

void sheet_init(sheet *s, camera_view view, int64_t value_dims) {
    memset(s, 0, sizeof *s);
    s->view = view;
    s->value_dims = value_dims;
}

void sheet_free(sheet *s) {
    for (int i = 0; i < s->n_rows; i++) {
        free(s->rows[i].truth);
        free(s->rows[i].recalled[0]);
        free(s->rows[i].recalled[1]);
        free(s->rows[i].band);
    }
    s->n_rows = 0;
}

static float *dup_floats(const float *src, size_t n) {
    float *p = malloc(n * sizeof *p);
    if (p) memcpy(p, src, n * sizeof *p);
    return p;
}

int sheet_add(sheet *s, int64_t frame, const char *label, const float *truth,
              const float *local, const float *global, const int8_t *band) {
    if (s->n_rows == SHEET_MAX_ROWS) return -1;
    size_t T = (size_t)(s->view.rows * s->view.cols), n = T * (size_t)s->value_dims;
    sheet_row *r = &s->rows[s->n_rows];
    r->frame = frame;
    r->label = label;
    r->truth = dup_floats(truth, n);
    r->recalled[0] = dup_floats(local, n);
    r->recalled[1] = dup_floats(global, n);
    r->band = malloc(T);
    if (!r->truth || !r->recalled[0] || !r->recalled[1] || !r->band) {
        free(r->truth);
        free(r->recalled[0]);
        free(r->recalled[1]);
        free(r->band);
        memset(r, 0, sizeof *r);
        return -1;
    }
    memcpy(r->band, band, T);
    s->n_rows++;
    return 0;
}

static unsigned char to_byte(float x) {
    if (!(x > 0.0f)) return 0; /* NaN too */
    if (x >= 1.0f) return 255;
    return (unsigned char)(x * 255.0f + 0.5f);
}

/* Pixel (px, py) of a view panel: value of token (py/8, px/8), pixel
 * (py%8, px%8); 0 for pixels beyond value_dims. */
static float view_pixel(const sheet *s, const float *vals, int64_t px, int64_t py) {
    int64_t t = (py / WORLD_PATCH) * s->view.cols + px / WORLD_PATCH;
    int64_t i = (py % WORLD_PATCH) * WORLD_PATCH + px % WORLD_PATCH;
    return i < s->value_dims ? vals[t * s->value_dims + i] : 0.0f;
}

int sheet_write_png(const sheet *s, const char *path, char *err, size_t err_len) {
    if (s->n_rows == 0) {
        snprintf(err, err_len, "no frame captured for the picture");
        return -1;
    }
    static const unsigned char TINT[4][3] = {
        {40, 200, 60}, {240, 200, 30}, {230, 40, 40}, {0, 0, 0}};
    static const unsigned char UNSEEN[3] = {50, 90, 230};
    const int64_t vw = s->view.cols * WORLD_PATCH, vh = s->view.rows * WORLD_PATCH;
    const int64_t scale = vw < 200 ? 2 : 1;
    const int64_t pw = vw * scale, ph = vh * scale;
    const int64_t W = 4 * pw + 5 * GAP_PX, H = s->n_rows * ph + (s->n_rows + 1) * GAP_PX;
    unsigned char *img = malloc((size_t)(W * H * 3));
    if (!img) {
        snprintf(err, err_len, "out of memory for a %lld x %lld picture", (long long)W,
                 (long long)H);
        return -1;
    }
    memset(img, BACKGROUND, (size_t)(W * H * 3));
    for (int r = 0; r < s->n_rows; r++) {
        const sheet_row *row = &s->rows[r];
        const int64_t y0 = GAP_PX + r * (ph + GAP_PX);
        for (int panel = 0; panel < 4; panel++) {
            const int64_t x0 = GAP_PX + panel * (pw + GAP_PX);
            for (int64_t y = 0; y < ph; y++)
                for (int64_t x = 0; x < pw; x++) {
                    int64_t px = x / scale, py = y / scale;
                    unsigned char *o = img + 3 * ((y0 + y) * W + x0 + x);
                    if (panel < 3) {
                        const float *vals = panel == 0 ? row->truth : row->recalled[panel - 1];
                        o[0] = o[1] = o[2] = to_byte(view_pixel(s, vals, px, py));
                        continue;
                    }
                    float l = view_pixel(s, row->truth, px, py);
                    int8_t b = row->band[(py / WORLD_PATCH) * s->view.cols + px / WORLD_PATCH];
                    const unsigned char *tint = b < 0 ? UNSEEN : TINT[b];
                    for (int ch = 0; ch < 3; ch++)
                        o[ch] = b == SHEET_FLAT ? to_byte(l)
                                                : to_byte(0.45f * l + 0.55f * tint[ch] / 255.0f);
                }
        }
    }
    int ok = stbi_write_png(path, (int)W, (int)H, 3, img, (int)(W * 3));
    free(img);
    if (!ok) {
        snprintf(err, err_len, "cannot write PNG '%s'", path);
        return -1;
    }
    return 0;
}

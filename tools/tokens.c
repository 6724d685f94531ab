/* Tokens of `ringkv rollout`: position codes, queries, keys, values, noise
 * (see tokens.h and docs/rollout.md). */
#include "tokens.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "splitmix.h"

static const double TWO_PI = 6.283185307179586476925286766559;

/* Frequencies k = 1, 2, 4, ... <= n/2 (n >= 2); 0 when n < 2. */
static int count_octaves(int64_t n) {
    int m = 0;
    for (int64_t k = 1; 2 * k <= n; k *= 2) m++;
    return m;
}

/* sum over the first `pairs` octaves of cos(2 pi k d / n) */
static double code_dot(int pairs, int64_t d, int64_t n) {
    double s = 0.0;
    int64_t k = 1;
    for (int i = 0; i < pairs; i++, k *= 2) s += cos(TWO_PI * (double)((k * d) % n) / (double)n);
    return s;
}

static void fill_table(float *t, int pairs, int64_t n) {
    for (int64_t x = 0; x < n; x++) {
        int64_t k = 1;
        for (int i = 0; i < pairs; i++, k *= 2) {
            double a = TWO_PI * (double)((k * x) % n) / (double)n;
            t[x * 2 * pairs + 2 * i] = (float)sin(a);
            t[x * 2 * pairs + 2 * i + 1] = (float)cos(a);
        }
    }
}

int tokens_codec_init(tokens_codec *c, const world_map *w, int64_t d_head, char *err,
                      size_t err_len) {
    memset(c, 0, sizeof *c);
    if (d_head < 3) {
        snprintf(err, err_len, "d_head %lld is too small for the rollout's tokens (at least 3)",
                 (long long)d_head);
        return -1;
    }
    c->d_head = d_head;
    c->map_cols = w->cols;
    c->map_rows = w->rows;
    c->value_dims = d_head < WORLD_PATCH_PIXELS ? d_head : WORLD_PATCH_PIXELS;
    /* Octaves of both axes, lowest first, alternating, while they fit in
     * d_head - 1 dims (the last dim used is the constant). */
    int ox = count_octaves(w->cols), oy = count_octaves(w->rows);
    int64_t budget = (d_head - 1) / 2;
    while (c->n_pairs_x + c->n_pairs_y < budget && (c->n_pairs_x < ox || c->n_pairs_y < oy)) {
        if (c->n_pairs_x < ox && (c->n_pairs_x <= c->n_pairs_y || c->n_pairs_y >= oy))
            c->n_pairs_x++;
        else
            c->n_pairs_y++;
    }
    int n = c->n_pairs_x + c->n_pairs_y;
    c->bias_dim = 2 * (int64_t)n;

    /* pos.pos between cells depends only on the differences (dx, dy):
     * fx(dx) + fy(dy), both largest at 0; the best other cell differs in one
     * axis only. */
    double best = -1e300;
    for (int64_t dx = 1; dx < w->cols; dx++) {
        double s = code_dot(c->n_pairs_x, dx, w->cols) + c->n_pairs_y;
        if (s > best) best = s;
    }
    for (int64_t dy = 1; dy < w->rows; dy++) {
        double s = c->n_pairs_x + code_dot(c->n_pairs_y, dy, w->rows);
        if (s > best) best = s;
    }
    c->margin = n - best;
    if (w->cols * w->rows == 1) c->margin = n;
    if (!(c->margin > 1e-3)) {
        snprintf(err, err_len,
                 "cannot tell the map's %lld cols x %lld rows of cells apart with d_head %lld "
                 "(position-code margin %.3g)",
                 (long long)w->cols, (long long)w->rows, (long long)d_head, c->margin);
        return -1;
    }
    c->threshold = n - c->margin / 2;
    c->q_scale = TOKENS_HALF_MARGIN_LOGITS / (c->margin / 2);

    c->enc_col = malloc((size_t)(w->cols * 2 * (c->n_pairs_x ? c->n_pairs_x : 1)) * sizeof(float));
    c->enc_row = malloc((size_t)(w->rows * 2 * (c->n_pairs_y ? c->n_pairs_y : 1)) * sizeof(float));
    if (!c->enc_col || !c->enc_row) {
        snprintf(err, err_len, "out of memory for the position codes");
        tokens_codec_free(c);
        return -1;
    }
    fill_table(c->enc_col, c->n_pairs_x, w->cols);
    fill_table(c->enc_row, c->n_pairs_y, w->rows);
    return 0;
}

void tokens_codec_free(tokens_codec *c) {
    free(c->enc_col);
    free(c->enc_row);
    c->enc_col = c->enc_row = NULL;
}

static void put_code(const tokens_codec *c, int64_t col, int64_t row, float *out) {
    int64_t cc = col % c->map_cols;
    if (cc < 0) cc += c->map_cols;
    memcpy(out, c->enc_col + cc * 2 * c->n_pairs_x, (size_t)(2 * c->n_pairs_x) * sizeof *out);
    memcpy(out + 2 * c->n_pairs_x, c->enc_row + row * 2 * c->n_pairs_y,
           (size_t)(2 * c->n_pairs_y) * sizeof *out);
}

void tokens_key(const tokens_codec *c, int64_t col, int64_t row, float *out) {
    memset(out, 0, (size_t)c->d_head * sizeof *out);
    put_code(c, col, row, out);
    out[c->bias_dim] = 1.0f;
}

void tokens_query(const tokens_codec *c, int64_t col, int64_t row, float *out) {
    memset(out, 0, (size_t)c->d_head * sizeof *out);
    put_code(c, col, row, out);
    const float s = (float)c->q_scale;
    for (int64_t i = 0; i < c->bias_dim; i++) out[i] *= s;
    out[c->bias_dim] = (float)(-c->q_scale * c->threshold);
}

float tokens_noise(uint64_t seed, int64_t session, int64_t frame, int64_t token,
                   int64_t dim) {
    return hash_unit_float(hash4(seed, (uint64_t)session, (uint64_t)frame,
                                 ((uint64_t)token << 20) ^ (uint64_t)dim));
}

void tokens_frame(const tokens_codec *c, const world_map *w, camera_view view,
                  const camera_pose *pose, uint64_t seed, int64_t session,
                  int64_t frame, int pass, float *truth, float *q, float *k,
                  float *v) {
    const int64_t D = c->d_head, VD = c->value_dims;
    const float mix = (float)pass / (float)(TOKENS_PASSES - 1); /* 0 .. 1 */
    const int commit = pass == TOKENS_PASSES - 1;
    float pix[WORLD_PATCH_PIXELS];
    for (int64_t r = 0; r < view.rows; r++)
        for (int64_t col = 0; col < view.cols; col++) {
            int64_t t = r * view.cols + col;
            int64_t wc = pose->col + col, wr = pose->row + r;
            world_cell_pixels(w, wc, wr, pix);
            if (truth) memcpy(truth + t * VD, pix, (size_t)VD * sizeof *truth);
            if (q) tokens_query(c, wc, wr, q + t * D);
            if (k) {
                if (commit)
                    tokens_key(c, wc, wr, k + t * D);
                else
                    memset(k + t * D, 0, (size_t)D * sizeof *k);
            }
            if (v) {
                float *vt = v + t * D;
                memset(vt, 0, (size_t)D * sizeof *vt);
                for (int64_t i = 0; i < VD; i++) {
                    if (commit) {
                        vt[i] = pix[i];
                    } else {
                        float n = tokens_noise(seed, session, frame, t, i);
                        vt[i] = (1.0f - mix) * n + mix * pix[i];
                    }
                }
            }
        }
}

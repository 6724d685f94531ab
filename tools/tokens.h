/* Tokens of `ringkv rollout`: the queries, keys and values that turn
 * attention over the ring into a memory of the world (docs/rollout.md).
 *
 * Token t of a frame is the view's cell (row t / view.cols, col t % view.cols).
 *  - Value: the cell's 64 luma pixels (row-major), truncated or zero-padded
 *    to d_head; the recall is compared on the first min(d_head, 64) dims.
 *  - Key of a committed token: a position code of its world cell,
 *    [pos(col, row), 1, 0...]: pos is sin/cos pairs of 2*pi*k*col/cols for
 *    k = 1, 2, 4, ... <= cols/2 (periods dividing the map's width: no aliasing
 *    across the wrap) and of 2*pi*k*row/rows likewise, lowest frequencies
 *    first, as many pairs as fit in d_head - 1; then one constant 1.
 *  - Query: q_scale * [pos(col, row), -threshold, 0...]: the camera pose is
 *    known, so every view token asks for its own world cell. With n pairs,
 *    pos.pos = n for the same cell and at most n - margin for any other, so
 *    q.k = +HALF_MARGIN_LOGITS for the same cell, <= -HALF_MARGIN_LOGITS for
 *    any other, and 0 for a position-free key (all zeros).
 *  - Passes 0..3 (no commit) put position-free tokens in the scratch: zero
 *    keys and values that go from noise (pass 0) towards the frame (pass p:
 *    (1 - p/4) noise + (p/4) pixels), the frame "being denoised". The commit
 *    pass writes the true frame with its position keys.
 * On pass 0 a view token's output is therefore its cell's pixels when some
 * visible ring frame holds that cell (weight 1 - O(e^-40)), and the mean of
 * the scratch noise when none does: per pixel the mean of T uniform values,
 * near 0.5, the same for every such cell (a mid-grey speckle, one 8 x 8
 * pattern repeated, in the picture).
 * Noise is uniform in [0, 1), a hash of (seed, session, frame, token, dim). */
#ifndef RKV_TOOLS_TOKENS_H
#define RKV_TOOLS_TOKENS_H

#include <stddef.h>
#include <stdint.h>

#include "camera.h"
#include "world.h"

#define TOKENS_HALF_MARGIN_LOGITS 40.0
#define TOKENS_PASSES 5 /* 4 without commit, then the commit pass */

typedef struct tokens_codec {
    int64_t d_head;
    int64_t map_cols, map_rows;
    int64_t value_dims; /* min(d_head, 64): the pixel part of a value   */
    int n_pairs_x, n_pairs_y;
    int64_t bias_dim;   /* index of the constant 1 of a key             */
    float *enc_col;     /* [map_cols][2*n_pairs_x]                      */
    float *enc_row;     /* [map_rows][2*n_pairs_y]                      */
    double margin;      /* pos.pos(same) - max pos.pos(other cell)      */
    double threshold;   /* n_pairs - margin / 2                         */
    double q_scale;     /* HALF_MARGIN_LOGITS / (margin / 2)            */
} tokens_codec;

/* Returns 0, or -1 with a message (d_head too small, map too small to
 * tell its cells apart, out of memory). */
int tokens_codec_init(tokens_codec *c, const world_map *w, int64_t d_head,
                      char *err, size_t err_len);
void tokens_codec_free(tokens_codec *c);

/* Position code parts of one cell, d_head floats each. */
void tokens_key(const tokens_codec *c, int64_t col, int64_t row, float *out);
void tokens_query(const tokens_codec *c, int64_t col, int64_t row, float *out);

/* Noise in [0, 1) for (seed, session, frame, token, dim). */
float tokens_noise(uint64_t seed, int64_t session, int64_t frame, int64_t token,
                   int64_t dim);

/* The frame's tokens for one session, head-independent, d_head floats per
 * token, T = view.rows * view.cols tokens:
 *  truth: [T][value_dims] true pixels (may be NULL);
 *  q:     [T][d_head] queries (may be NULL);
 *  k, v:  [T][d_head] keys and values of pass `pass` (0..4; may be NULL). */
void tokens_frame(const tokens_codec *c, const world_map *w, camera_view view,
                  const camera_pose *pose, uint64_t seed, int64_t session,
                  int64_t frame, int pass, float *truth, float *q, float *k,
                  float *v);

#endif

/* The camera of `ringkv rollout`: which window of the world each frame shows.
 *
 * The view is view.rows x view.cols cells (tokens_per_frame of them); its pose
 * is the world cell of its top-left token. The camera moves in whole cells, so
 * a revisited token is exactly the same world cell. The path is a pure
 * function of (frame clock, session, seed) and the map, built in segments of
 * CAMERA_SEGMENT frames (segment j = frames 8j .. 8j+7), each one move of a
 * fixed cycle of 8 segments (camera.c, docs/rollout.md):
 *   JUMP  to new ground (of 16 hashed candidates, the one that shows the most
 *         textured cells not seen in the last 256 frames), then pan;
 *   PAN   on from the previous frame at its velocity;
 *   REVISIT_NEAR / _MID / _FAR: replay the path of G frames ago,
 *         pose(f) = pose(f - G) for the 8 frames; G = 8, 32/80/96, 144.
 * Velocities: 1 or 2 cells per frame east or west, or one row per frame north
 * or south (reflected at the map's top and bottom rows, so the view never
 * leaves the map vertically; columns wrap). */
#ifndef RKV_TOOLS_CAMERA_H
#define RKV_TOOLS_CAMERA_H

#include <stdint.h>

#include "world.h"

#define CAMERA_SEGMENT 8

typedef struct camera_view {
    int64_t rows, cols; /* cells; rows * cols = tokens_per_frame */
} camera_view;

/* View shape for T tokens: cols = 2 * rows when T/2 is a square (8 x 16 for
 * 128, 16 x 32 for 512), else rows = the largest divisor of T not above
 * sqrt(T/2). */
camera_view camera_view_for_tokens(int64_t tokens_per_frame);

typedef enum camera_move {
    CAMERA_JUMP = 0,
    CAMERA_PAN,
    CAMERA_REVISIT_NEAR,
    CAMERA_REVISIT_MID,
    CAMERA_REVISIT_FAR,
    CAMERA_MOVE_COUNT
} camera_move;

const char *camera_move_name(camera_move m);

typedef struct camera_pose {
    int64_t col, row; /* top-left cell of the view; col in [0, map cols) */
    int vx, vy;       /* cells per frame                                */
    camera_move move; /* the move of the frame's segment                */
    int64_t gap;      /* REVISIT_*: frames back it replays; else 0      */
} camera_pose;

typedef struct camera_path camera_path;

/* Poses a path keeps: the last CAMERA_KEEP frames it computed, a power of two
 * above the longest revisit gap (144) and the step from the frame before, so
 * that its memory does not grow with the frame count: a run of any --frames
 * starts at once (a path built whole before frame 0 took ~20 us a frame). */
#define CAMERA_KEEP 256

/* NULL when out of memory (every allocation is made here). The map must hold
 * the view (rows >= view.rows, cols >= view.cols); the path keeps a pointer
 * to w. */
camera_path *camera_path_create(const world_map *w, camera_view view,
                                uint64_t seed, int64_t session);
void camera_path_destroy(camera_path *p);

/* Pose at frame clock f >= 0, computed in order from frame 0 (each frame
 * once: the path extends to f); a frame more than CAMERA_KEEP - 1 before the
 * last one computed is no longer kept: NULL then, and for f < 0. The
 * pointer is valid until the next call. The same poses as a path kept
 * whole: a pose depends on the frame before it, the frames a revisit
 * replays and the cells seen in the last 256 frames (camera.c). */
const camera_pose *camera_path_pose(camera_path *p, int64_t f);

/* The move of segment j >= 0 (frames 8j .. 8j+7) and, for a revisit, its gap
 * (else 0): a pure function of (seed, session, j), what camera_path_pose
 * gives as .move and .gap for each frame of the segment, without computing
 * a pose. */
camera_move camera_segment_move(const camera_path *p, int64_t j, int64_t *gap);

#endif

/* The camera path of `ringkv rollout` (see camera.h and docs/rollout.md). */
#include "camera.h"

#include <stdlib.h>

#include "splitmix.h"

/* The longest revisit gap of the cycle, which the kept poses must cover. */
#define LONGEST_GAP 144

/* The move of segment j (frames 8j .. 8j+7) is entry j % 8 of this cycle of
 * 8 segments (64 frames). Two kinds of new ground are explored: "B" ground
 * (segments 0-1, a JUMP and its PAN) is revisited only from far away: segment
 * 2 of the cycle two cycles later replays segment 0 (gap 144), and segment 3
 * pans on along the old segment 1. "A" ground (segments 4-5) and the far
 * replays are revisited from mid range: segment 6 replays segment 2 of the
 * same cycle (gap 32), or segment 4 or 2 of the previous one (gap 80 or 96).
 * Segment 7 replays segment 6 (gap 8). Keeping B ground for the far revisits
 * means nobody has refreshed it when they come. Every mid revisit replays a
 * segment the path continued at the same velocity, so each cell it shows was
 * in view on a frame that is a multiple of 8 (what a ring with pinned
 * dilation 8 keeps). A revisit whose every gap would reach before frame 0
 * becomes a JUMP. */
typedef struct cycle_entry {
    camera_move move;
    int n_gaps;
    int64_t gaps[3]; /* ascending */
} cycle_entry;

static const cycle_entry CYCLE[8] = {
    {CAMERA_JUMP, 0, {0}},
    {CAMERA_PAN, 0, {0}},
    {CAMERA_REVISIT_FAR, 1, {LONGEST_GAP}},
    {CAMERA_PAN, 0, {0}},
    {CAMERA_JUMP, 0, {0}},
    {CAMERA_PAN, 0, {0}},
    {CAMERA_REVISIT_MID, 3, {32, 80, 96}},
    {CAMERA_REVISIT_NEAR, 1, {8}},
};

#define JUMP_CANDIDATES 16
#define NOVELTY_FRAMES 256

/* Salts that keep the hash streams of different choices apart. */
enum { SALT_MOVE = 1, SALT_JUMP = 2 };

_Static_assert(CAMERA_KEEP > LONGEST_GAP && (CAMERA_KEEP & (CAMERA_KEEP - 1)) == 0,
               "the kept poses cover every revisit gap and the frame before");

struct camera_path {
    const world_map *w;
    camera_view view;
    uint64_t seed;
    int64_t session;
    camera_pose poses[CAMERA_KEEP]; /* frame f at f % CAMERA_KEEP, f in [n - KEEP, n) */
    int64_t n;                      /* frames computed: 0 .. n-1              */
    int64_t *last_seen; /* [rows][cols]: last frame the cell was in view, or -1 */
};

camera_view camera_view_for_tokens(int64_t t) {
    camera_view v = {1, t};
    int64_t best = 1;
    for (int64_t r = 1; r * r * 2 <= t; r++)
        if (t % r == 0) best = r;
    v.rows = best;
    v.cols = t / best;
    return v;
}

const char *camera_move_name(camera_move m) {
    switch (m) {
    case CAMERA_JUMP: return "jump";
    case CAMERA_PAN: return "pan";
    case CAMERA_REVISIT_NEAR: return "revisit_near";
    case CAMERA_REVISIT_MID: return "revisit_mid";
    case CAMERA_REVISIT_FAR: return "revisit_far";
    default: return "?";
    }
}

camera_path *camera_path_create(const world_map *w, camera_view view,
                                uint64_t seed, int64_t session) {
    camera_path *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->w = w;
    p->view = view;
    p->seed = seed;
    p->session = session;
    p->last_seen = malloc((size_t)(w->rows * w->cols) * sizeof *p->last_seen);
    if (!p->last_seen) {
        free(p);
        return NULL;
    }
    for (int64_t i = 0; i < w->rows * w->cols; i++) p->last_seen[i] = -1;
    return p;
}

void camera_path_destroy(camera_path *p) {
    if (!p) return;
    free(p->last_seen);
    free(p);
}

static int64_t max_row(const camera_path *p) { return p->w->rows - p->view.rows; }

/* One frame of motion: columns wrap, rows reflect off the map's edges. */
static camera_pose step(const camera_path *p, camera_pose s) {
    int64_t r = s.row + s.vy;
    if (r < 0 || r > max_row(p)) {
        s.vy = -s.vy;
        r = s.row + s.vy;
        if (r < 0 || r > max_row(p)) {
            s.vy = 0;
            r = s.row;
        }
    }
    s.row = r;
    s.col = world_wrap_col(p->w, s.col + s.vx);
    return s;
}

/* Novelty of a jump to s on frame f: the textured cells (counted per frame) of
 * its segment and the pan that follows it that were not in view during the
 * last NOVELTY_FRAMES frames. */
static int64_t segment_novelty(const camera_path *p, camera_pose s, int64_t f) {
    int64_t n = 0;
    for (int i = 0; i < 2 * CAMERA_SEGMENT; i++) {
        for (int64_t r = 0; r < p->view.rows; r++)
            for (int64_t c = 0; c < p->view.cols; c++) {
                int64_t col = world_wrap_col(p->w, s.col + c), row = s.row + r;
                int64_t last = p->last_seen[row * p->w->cols + col];
                if ((last < 0 || f - last >= NOVELTY_FRAMES) &&
                    world_cell_textured(p->w, col, row))
                    n++;
            }
        s = step(p, s);
    }
    return n;
}

/* JUMP: of JUMP_CANDIDATES hashed starts, the one with the most novel texture
 * (the first on ties): an explorer that seeks new ground with detail. */
static camera_pose jump_start(const camera_path *p, int64_t segment) {
    static const int VX[4] = {-2, -1, 1, 2};
    camera_pose best = {0};
    int64_t best_score = -1;
    for (int k = 0; k < JUMP_CANDIDATES; k++) {
        uint64_t h = hash4(p->seed, (uint64_t)p->session,
                           (uint64_t)segment * 16 + SALT_JUMP, (uint64_t)k);
        camera_pose s = {0};
        s.col = hash_below(h, p->w->cols);
        h = splitmix64(h);
        s.row = hash_below(h, max_row(p) + 1);
        h = splitmix64(h);
        int64_t v = hash_below(h, 16); /* 14 in 16: east or west, else north or south */
        if (v < 14) {
            s.vx = VX[v % 4];
            s.vy = 0;
        } else {
            s.vx = 0;
            s.vy = v == 14 ? -1 : 1;
        }
        s.move = CAMERA_JUMP;
        int64_t score = segment_novelty(p, s, segment * CAMERA_SEGMENT);
        if (score > best_score) {
            best_score = score;
            best = s;
        }
    }
    return best;
}

/* The move and revisit gap of segment j (starting at frame m = 8j). */
camera_move camera_segment_move(const camera_path *p, int64_t j, int64_t *gap) {
    int64_t m = j * CAMERA_SEGMENT;
    const cycle_entry *e = &CYCLE[j % 8];
    *gap = 0;
    if (e->n_gaps == 0) return j == 0 ? CAMERA_JUMP : e->move;
    int n = 0; /* gaps that stay at or after frame 0 */
    while (n < e->n_gaps && e->gaps[n] <= m) n++;
    if (n == 0) return CAMERA_JUMP;
    uint64_t h = hash4(p->seed, (uint64_t)p->session, (uint64_t)j * 16 + SALT_MOVE, 0);
    *gap = e->gaps[hash_below(h, n)];
    return e->move;
}

/* The kept pose of frame f (in [n - CAMERA_KEEP, n)). */
static camera_pose *kept(camera_path *p, int64_t f) { return &p->poses[f & (CAMERA_KEEP - 1)]; }

/* Frame n: from the frame before or the frame a revisit replays (both kept:
 * gap <= LONGEST_GAP < CAMERA_KEEP), then marks its cells seen. */
static void extend(camera_path *p) {
    int64_t f = p->n, j = f / CAMERA_SEGMENT, i = f % CAMERA_SEGMENT;
    int64_t gap;
    camera_move mv = camera_segment_move(p, j, &gap);
    camera_pose s;
    switch (mv) {
    case CAMERA_JUMP:
        s = i == 0 ? jump_start(p, j) : step(p, *kept(p, f - 1));
        break;
    case CAMERA_PAN:
        s = step(p, *kept(p, f - 1));
        break;
    default: /* a revisit replays the path of gap frames ago */
        s = *kept(p, f - gap);
        break;
    }
    s.move = mv;
    s.gap = gap;
    *kept(p, f) = s;
    p->n++;
    for (int64_t r = 0; r < p->view.rows; r++)
        for (int64_t c = 0; c < p->view.cols; c++)
            p->last_seen[(s.row + r) * p->w->cols + world_wrap_col(p->w, s.col + c)] = f;
}

const camera_pose *camera_path_pose(camera_path *p, int64_t f) {
    if (f < 0 || f < p->n - CAMERA_KEEP) return NULL;
    while (p->n <= f) extend(p);
    return kept(p, f);
}

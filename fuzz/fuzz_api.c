/* libFuzzer target: sequences of model API calls (claim, release, reset,
 * lookup, clock, begin_frame, the per-pass calls on the batch
 * (frame_upsert/attend/step) and the wrappers that spell it out
 * (upsert/attend/step), end_frame, abandon_frame, fork, in-memory
 * snapshot/restore, snapshot-file images saved and loaded, with and
 * without damage; offload, page-in (with and without damage) and discard,
 * with a table of 2 paged-out request ids) checked against a simple model of the rules (SEM 3, 4, 6
 * and ringkv.h, "Frames": one current batch, open until its frame ends,
 * then current for attention until it is closed): every call's status,
 * every session's clock, every frame slot's contents and written bit, and
 * attention outputs (with zero queries the output is the plain mean of the
 * visible frames' V, so visibility is checked through the attention
 * itself). Any disagreement aborts.
 *
 * Frames carry tags: an upsert of row b writes every K and V element of
 * its frame as the float value of a fresh tag, so the reference only has
 * to track which tag each frame slot holds. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/ring_oracle.h"
#include "ringkv.h"

#define S 3   /* sessions                */
#define NL 2  /* layers                  */
#define MAXRF 3
#define HQ 2
#define H 1
#define D 2
#define T 128
#define NIDS 5

static const rkv_layer_spec SPECS[NL] = {{3, 2, 2}, {2, 2, 1}};

typedef struct ref_session {
    int held;
    int id; /* request id index */
    int64_t last;
    int row; /* in the current batch, or -1 */
    float tag[NL][MAXRF + 1]; /* ring frames then scratch (index RF) */
    int written[NL][MAXRF];
} ref_session;

/* The current batch: n rows (0: none), open until its frame ends. */
static struct ref_batch {
    int64_t n, rows[S], clocks[S];
    int open;
    int committed[NL];
} RB;

typedef struct ref_snap {
    int valid;
    ref_session s; /* contents and clock only */
} ref_snap;

/* A paged-out request: its contents and clock, and its image. */
#define MAX_OFFLOADED 2
typedef struct ref_offloaded {
    int reserved;     /* its id is reserved in the model's table */
    ref_session s;    /* contents and clock */
    uint8_t *image;   /* the image rkv_model_offload wrote (kept after page-in) */
    size_t len;
} ref_offloaded;
static ref_offloaded OFF[NIDS];

static rkv_model *M;
static ref_session R[S];
static ref_snap snaps[2], images[2];
static uint8_t *snap_buf[2], *image_buf[2];
static size_t snap_bytes, image_len[2], image_cap;
static float tag_counter;

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz_api: %s:%d: check failed: %s\n  ", __FILE__, __LINE__, #cond);   \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fprintf(stderr, "\n  last error: %s\n", rkv_last_error());                           \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

/* FUZZ_API_TRACE=1 prints every call and its status (to see what a corpus
 * reaches). */
static int tracing = -1;
#define EXPECT(got, want, what)                                                                    \
    do {                                                                                           \
        if (tracing < 0) tracing = getenv("FUZZ_API_TRACE") != NULL;                              \
        if (tracing) fprintf(stderr, "%s -> %s\n", what, rkv_status_str(got));                    \
        CHECK((got) == (want), "%s: got %s, expected %s", what, rkv_status_str(got),              \
              rkv_status_str(want));                                                               \
    } while (0)

/* ---- input ---------------------------------------------------------------- */

typedef struct cursor {
    const uint8_t *p;
    size_t n;
} cursor;
static unsigned next(cursor *c) {
    if (!c->n) return 0;
    c->n--;
    return *c->p++;
}

/* ---- the reference -------------------------------------------------------- */

static void ref_clear_contents(ref_session *r) {
    memset(r->tag, 0, sizeof r->tag);
    memset(r->written, 0, sizeof r->written);
}
static void ref_close_batch(void) {
    for (int64_t b = 0; b < RB.n; b++) R[RB.rows[b]].row = -1;
    memset(&RB, 0, sizeof RB);
}
/* A session's state replaced (reset, release, restore, load, fork into
 * it): its clock, and the current batch closed when it is one of its rows. */
static void ref_drop_clock(int64_t s, int64_t last) {
    if (R[s].row >= 0) ref_close_batch();
    R[s].last = last;
}
static int64_t hidden_of(int layer, int64_t f) {
    return rkvt_rule_hidden(f, SPECS[layer].pinned_dilation, SPECS[layer].ring_buckets);
}

/* Checks every session's clock, slots and written bits against R. */
static void verify_all(void) {
    int64_t reserved = 0;
    for (int id = 0; id < NIDS; id++) reserved += OFF[id].reserved;
    CHECK(rkv_model_offloaded_count(M) == reserved, "%lld paged-out sessions, expected %lld",
          (long long)rkv_model_offloaded_count(M), (long long)reserved);
    for (int s = 0; s < S; s++) {
        int64_t c = -7;
        rkv_status st = rkv_model_clock(M, s, &c);
        if (!R[s].held) {
            EXPECT(st, RKV_ERR_STATE, "clock of a free session");
        } else {
            EXPECT(st, RKV_OK, "clock");
            CHECK(c == R[s].last, "session %d clock %lld, expected %lld", s, (long long)c,
                  (long long)R[s].last);
        }
        for (int i = 0; i < NL; i++) {
            const rkv_layer *l = rkv_model_layer(M, i);
            const int64_t RF = SPECS[i].ring_frames, C = (RF + 1) * T, N = S * C;
            const float *kv = rkv_layer_kv(l);
            const uint8_t *w = rkv_layer_written(l);
            for (int64_t r = 0; r <= RF; r++) {
                const float want = R[s].tag[i][r];
                const int64_t first = s * C + r * T, last = first + T - 1;
                for (int half = 0; half < 2; half++) {
                    const float *p = kv + (size_t)half * (size_t)N * D;
                    CHECK(p[first * D] == want && p[last * D + D - 1] == want,
                          "layer %d session %d frame %lld %s holds %g/%g, expected %g", i, s,
                          (long long)r, half ? "V" : "K", p[first * D], p[last * D + D - 1], want);
                }
                const int wb = r == RF ? 1 : R[s].written[i][r];
                CHECK(w[first] == wb && w[last] == wb,
                      "layer %d session %d frame %lld written %d/%d, expected %d", i, s,
                      (long long)r, w[first], w[last], wb);
            }
        }
    }
}

/* Expected status of the row checks shared by begin_frame/upsert/attend:
 * batch range, then each row's range and distinctness (in row order). */
static rkv_status ref_rows(int64_t B, const int64_t *rows) {
    if (B < 1 || B > S) return RKV_ERR_INVALID_ARG;
    /* every row's range before any repeat (rkv__check_sessions: the
     * reference's IndexError wins over its other row errors) */
    for (int64_t b = 0; b < B; b++)
        if (rows[b] < 0 || rows[b] >= S) return RKV_ERR_RANGE;
    for (int64_t b = 0; b < B; b++)
        for (int64_t a = 0; a < b; a++)
            if (rows[a] == rows[b]) return RKV_ERR_INVALID_ARG;
    return RKV_OK;
}

static void decode_rows(cursor *c, int64_t *B, int64_t rows[4]) {
    unsigned x = next(c);
    *B = (x & 3) + (x >> 7); /* mostly 0..3, sometimes 4 */
    for (int b = 0; b < 4; b++) {
        unsigned y = next(c);
        rows[b] = y < 240 ? (int64_t)(y % S) : (int64_t)(y % 5) - 1; /* -1..3 at times */
    }
}

/* ---- operations ------------------------------------------------------------ */

static void op_claim(cursor *c) {
    const int id = (int)(next(c) % NIDS);
    char name[16];
    snprintf(name, sizeof name, "req-%d", id);
    int64_t got = -9;
    rkv_status st = rkv_model_claim(M, name, &got);
    int want = -1, freeslot = -1;
    for (int s = 0; s < S; s++) {
        if (R[s].held && R[s].id == id) want = s;
        if (!R[s].held && freeslot < 0) freeslot = s;
    }
    if (want >= 0) {
        EXPECT(st, RKV_OK, "claim of a held id");
        CHECK(got == want, "claim returned %lld, expected %d", (long long)got, want);
    } else if (OFF[id].reserved) {
        EXPECT(st, RKV_ERR_STATE, "claim of a paged-out id");
    } else if (freeslot < 0) {
        EXPECT(st, RKV_ERR_FULL, "claim with every session held");
    } else {
        EXPECT(st, RKV_OK, "claim");
        CHECK(got == freeslot, "claim returned %lld, expected %d", (long long)got, freeslot);
        R[freeslot].held = 1;
        R[freeslot].id = id;
    }
}

static void op_lookup(cursor *c) {
    const int id = (int)(next(c) % NIDS);
    char name[16];
    snprintf(name, sizeof name, "req-%d", id);
    int64_t got = -9;
    rkv_status st = rkv_model_lookup(M, name, &got);
    int want = -1;
    for (int s = 0; s < S; s++)
        if (R[s].held && R[s].id == id) want = s;
    EXPECT(st, want >= 0 ? RKV_OK : RKV_ERR_NOT_FOUND, "lookup");
    if (want >= 0) CHECK(got == want, "lookup %lld, expected %d", (long long)got, want);
}

static int64_t decode_session(cursor *c) {
    unsigned y = next(c);
    return y < 240 ? (int64_t)(y % S) : (int64_t)(y % 5) - 1;
}

static rkv_status ref_held(int64_t s) {
    if (s < 0 || s >= S) return RKV_ERR_RANGE;
    return R[s].held ? RKV_OK : RKV_ERR_STATE;
}
static int in_open_frame(int64_t s) { return R[s].row >= 0 && RB.open; }
static rkv_status ref_between(int64_t s) {
    rkv_status st = ref_held(s);
    if (st == RKV_OK && in_open_frame(s)) st = RKV_ERR_STATE;
    return st;
}

static void op_release_reset(cursor *c, int release) {
    const int64_t s = decode_session(c);
    rkv_status st = release ? rkv_model_release(M, s) : rkv_model_reset(M, s);
    rkv_status want = ref_held(s);
    EXPECT(st, want, release ? "release" : "reset");
    if (want != RKV_OK) return;
    ref_clear_contents(&R[s]);
    ref_drop_clock(s, -1);
    if (release) R[s].held = 0;
}

static void op_begin(cursor *c) {
    int64_t B, rows[4], f[4];
    decode_rows(c, &B, rows);
    for (int b = 0; b < 4; b++) {
        const unsigned mode = next(c);
        const int64_t s = rows[b] >= 0 && rows[b] < S ? rows[b] : 0;
        const int64_t base = R[s].last >= 0 ? R[s].last + 1 : (int64_t)(next(c) % 20);
        f[b] = mode < 200 ? base : mode < 250 ? base + (int64_t)(mode % 5) - 2 : -1 - (mode % 3);
    }
    rkv_status st = rkv_model_begin_frame(M, B, rows, f);
    /* Order of the library's checks: every row held first, then each row's
     * frame state and clock in row order. */
    rkv_status want = ref_rows(B, rows);
    for (int64_t b = 0; want == RKV_OK && b < B; b++)
        if (!R[rows[b]].held) want = RKV_ERR_STATE;
    for (int64_t b = 0; want == RKV_OK && b < B; b++) {
        const ref_session *r = &R[rows[b]];
        if (in_open_frame(rows[b])) want = RKV_ERR_STATE;
        else if (f[b] < 0) want = RKV_ERR_CLOCK;
        else if (r->last >= 0 && f[b] != r->last + 1) want = RKV_ERR_CLOCK;
    }
    /* then: no other batch may be open */
    if (want == RKV_OK && RB.open) want = RKV_ERR_STATE;
    EXPECT(st, want, "begin_frame");
    if (want != RKV_OK) return;
    ref_close_batch();
    RB.n = B;
    RB.open = 1;
    for (int64_t b = 0; b < B; b++) {
        RB.rows[b] = rows[b];
        RB.clocks[b] = f[b];
        R[rows[b]].row = (int)b;
    }
}

/* end_frame: the open frame's clocks become committed. */
static void op_end(void) {
    rkv_status st = rkv_model_end_frame(M);
    EXPECT(st, RB.n ? RKV_OK : RKV_ERR_STATE, "end_frame");
    if (RB.open)
        for (int64_t b = 0; b < RB.n; b++) R[RB.rows[b]].last = RB.clocks[b];
    RB.open = 0;
}

static void op_abandon(void) {
    EXPECT(rkv_model_abandon_frame(M), RKV_OK, "abandon_frame");
    ref_close_batch();
}

/* Expected status of the per-pass calls: layer range; for the wrappers the
 * rows (range, distinct, held), each a row of the current batch (STATE),
 * then (upsert, step) an open frame (STATE), then the rows exactly the
 * batch in its order (INVALID_ARG); for the frame calls (rows == NULL) a
 * current batch, open for upsert and step (STATE). */
static rkv_status ref_check_rows(int64_t layer, int64_t B, const int64_t *rows, int need_open) {
    if (layer < 0 || layer >= NL) return RKV_ERR_RANGE;
    if (!rows) return RB.n == 0 || (need_open && !RB.open) ? RKV_ERR_STATE : RKV_OK;
    rkv_status st = ref_rows(B, rows);
    if (st != RKV_OK) return st;
    for (int64_t b = 0; b < B; b++)
        if (!R[rows[b]].held) return RKV_ERR_STATE;
    for (int64_t b = 0; b < B; b++)
        if (R[rows[b]].row < 0) return RKV_ERR_STATE;
    if (need_open && !RB.open) return RKV_ERR_STATE;
    if (B != RB.n) return RKV_ERR_INVALID_ARG;
    for (int64_t b = 0; b < B; b++)
        if (rows[b] != RB.rows[b]) return RKV_ERR_INVALID_ARG;
    return RKV_OK;
}

/* kv [2][H][B*T][D] with row b's frame all `tags[b]`. */
static float *make_kv(int64_t B, const float *tags) {
    float *kv = malloc(sizeof(float) * 2 * H * (size_t)(B > 0 ? B : 1) * T * D);
    for (int half = 0; half < 2; half++)
        for (int64_t b = 0; b < B; b++)
            for (int64_t i = 0; i < T * D; i++) kv[((size_t)half * (size_t)B + (size_t)b) * T * D + (size_t)i] = tags[b];
    return kv;
}

/* An upsert of the current batch (row b tagged tags[b]). */
static void ref_upsert(int64_t layer, const float *tags, int commit) {
    for (int64_t b = 0; b < RB.n; b++) {
        ref_session *r = &R[RB.rows[b]];
        const int64_t RF = SPECS[layer].ring_frames, f = RB.clocks[b];
        r->tag[layer][RF] = tags[b];
        if (!commit) continue;
        const int64_t slot = hidden_of((int)layer, f); /* the write step's slot */
        if (slot >= 0) {
            r->tag[layer][slot] = tags[b];
            r->written[layer][slot] = 1;
        }
    }
    if (!commit) return;
    RB.committed[layer] = 1;
    int all = 1;
    for (int i = 0; i < NL; i++) all &= RB.committed[i];
    if (all) {
        for (int64_t b = 0; b < RB.n; b++) R[RB.rows[b]].last = RB.clocks[b];
        RB.open = 0;
    }
}

/* out [B][HQ][T][D] of an attention of the current batch with zero
 * queries: the mean of the visible frames' tags for every element. */
static void check_outputs(int64_t layer, const float *out) {
    for (int64_t b = 0; b < RB.n; b++) {
        const int64_t *rows = RB.rows;
        const ref_session *r = &R[rows[b]];
        const int64_t RF = SPECS[layer].ring_frames, f = RB.clocks[b];
        const int64_t hidden = hidden_of((int)layer, f);
        double sum = r->tag[layer][RF];
        int n = 1;
        for (int64_t k = 0; k < RF; k++)
            if (r->written[layer][k] && k != hidden) sum += r->tag[layer][k], n++;
        const double want = sum / n;
        for (size_t i = 0; i < (size_t)HQ * T * D; i += 37) {
            const float got = out[(size_t)b * HQ * T * D + i];
            CHECK(fabs(got - want) <= 1e-4 * (1 + fabs(want)),
                  "attention row %lld (session %lld, frame %lld, layer %lld) element %zu = %g, "
                  "expected the mean of %d visible frames %g",
                  (long long)b, (long long)rows[b], (long long)f, (long long)layer, i, got, n,
                  want);
        }
    }
}

/* kind 0 upsert, 1 attend, 2 step; frame: the per-pass calls on the batch
 * (no rows), else the wrappers with rows (mostly the batch's own). */
static void op_upsert_attend(cursor *c, int kind, int frame) {
    const unsigned x = next(c);
    const int64_t layer = x < 250 ? (int64_t)(x % NL) : (int64_t)(x % 4) - 1;
    const int commit = next(c) & 1;
    int64_t B, rows[4];
    decode_rows(c, &B, rows);
    if (!frame && RB.n && next(c) < 200) { /* the batch itself, to get past the checks */
        B = RB.n;
        for (int64_t b = 0; b < B; b++) rows[b] = RB.rows[b];
    }
    if (frame) B = RB.n ? RB.n : 1;
    float tags[4];
    for (int b = 0; b < 4; b++) tags[b] = ++tag_counter;
    float *kv = make_kv(B > 0 && B <= 4 ? B : 1, tags);
    static float q[4 * HQ * T * D], out[4 * HQ * T * D];
    rkv_attention_args a = RKV_ATTENTION_ARGS_INIT;
    a.n_q_heads = HQ;
    a.q = q;
    a.q_dtype = RKV_DTYPE_F32;
    a.out = out;
    a.out_dtype = RKV_DTYPE_F32;
    rkv_status st, want = ref_check_rows(layer, B, frame ? NULL : rows, kind != 1);
    if (kind == 0)
        st = frame ? rkv_model_frame_upsert(M, layer, kv, RKV_DTYPE_F32, commit)
                   : rkv_model_upsert(M, layer, NULL, B, rows, kv, RKV_DTYPE_F32, commit);
    else if (kind == 1)
        st = frame ? rkv_model_frame_attend(M, layer, &a) : rkv_model_attend(M, layer, NULL, B, rows, &a);
    else
        st = frame ? rkv_model_frame_step(M, layer, kv, RKV_DTYPE_F32, commit, &a)
                   : rkv_model_step(M, layer, B, rows, kv, RKV_DTYPE_F32, commit, &a);
    static const char *const names[2][3] = {{"upsert", "attend", "step"},
                                            {"frame_upsert", "frame_attend", "frame_step"}};
    EXPECT(st, want, names[frame][kind]);
    if (want == RKV_OK && kind != 1) ref_upsert(layer, tags, commit);
    if (want == RKV_OK && kind != 0) check_outputs(layer, out);
    free(kv);
}

static void op_fork(cursor *c) {
    const int64_t src = decode_session(c), dst = decode_session(c);
    rkv_status st = rkv_model_fork(M, src, dst);
    rkv_status want = ref_between(src);
    if (want == RKV_OK) want = ref_between(dst);
    if (want == RKV_OK && src == dst) want = RKV_ERR_INVALID_ARG;
    EXPECT(st, want, "fork");
    if (want != RKV_OK) return;
    memcpy(R[dst].tag, R[src].tag, sizeof R[dst].tag);
    memcpy(R[dst].written, R[src].written, sizeof R[dst].written);
    ref_drop_clock(dst, R[src].last);
}

static void op_snapshot(cursor *c, int file) {
    const int64_t s = decode_session(c);
    const int k = next(c) & 1;
    rkv_status st, want = ref_between(s);
    if (file) {
        size_t n = 0;
        st = rkv_model_save_session_mem(M, s, image_buf[k], image_cap, &n);
        if (st == RKV_OK) image_len[k] = n;
    } else {
        st = rkv_model_snapshot(M, s, snap_buf[k], snap_bytes);
    }
    EXPECT(st, want, file ? "save_session_mem" : "snapshot");
    if (want != RKV_OK) return;
    ref_snap *sn = file ? &images[k] : &snaps[k];
    sn->valid = 1;
    sn->s = R[s];
}

static void op_restore(cursor *c, int file) {
    const int64_t s = decode_session(c);
    const int k = next(c) & 1;
    const unsigned damage = next(c);
    ref_snap *sn = file ? &images[k] : &snaps[k];
    if (!sn->valid) return;
    rkv_status st, want = ref_between(s);
    if (file) {
        /* damage: flip one byte (anywhere: length, header, checksums, data) */
        size_t pos = 0;
        uint8_t old = 0;
        const int damaged = damage >= 192;
        if (damaged) {
            pos = ((size_t)next(c) << 8 | next(c)) % image_len[k];
            old = image_buf[k][pos];
            image_buf[k][pos] ^= (uint8_t)(1u << (damage & 7));
            if (want == RKV_OK) want = RKV_ERR_FORMAT;
        }
        st = rkv_model_restore(M, s, image_buf[k], image_len[k]);
        if (damaged) image_buf[k][pos] = old;
    } else {
        st = rkv_model_restore(M, s, snap_buf[k], snap_bytes);
    }
    EXPECT(st, want, "restore");
    if (want != RKV_OK) return;
    memcpy(R[s].tag, sn->s.tag, sizeof R[s].tag);
    memcpy(R[s].written, sn->s.written, sizeof R[s].written);
    ref_drop_clock(s, sn->s.last);
}

/* Offload: the session's image into its request's buffer, its slot freed,
 * its id reserved (a table of MAX_OFFLOADED). */
static void op_offload(cursor *c) {
    const int64_t s = decode_session(c);
    rkv_status want = ref_between(s);
    int64_t reserved = 0;
    for (int id = 0; id < NIDS; id++) reserved += OFF[id].reserved;
    if (want == RKV_OK && reserved == MAX_OFFLOADED) want = RKV_ERR_FULL;
    ref_offloaded *o = want == RKV_OK ? &OFF[R[s].id] : NULL;
    size_t n = 0;
    rkv_status st = rkv_model_offload(M, s, o ? o->image : image_buf[0], image_cap, &n);
    EXPECT(st, want, "offload");
    if (want != RKV_OK) return;
    o->reserved = 1;
    o->s = R[s];
    o->len = n;
    ref_clear_contents(&R[s]);
    ref_drop_clock(s, -1);
    R[s].held = 0;
}

/* Page-in of a request's last image, maybe damaged: a damage in the length
 * or header is refused first (RKV_ERR_FORMAT); one in the data after the
 * reservation and room are checked. */
static void op_page_in(cursor *c) {
    const int id = (int)(next(c) % NIDS);
    const unsigned damage = next(c);
    ref_offloaded *o = &OFF[id];
    if (!o->len) return;
    int freeslot = -1;
    for (int s = 0; s < S && freeslot < 0; s++)
        if (!R[s].held) freeslot = s;
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | o->image[i];
    rkv_status want = !o->reserved ? RKV_ERR_NOT_FOUND : freeslot < 0 ? RKV_ERR_FULL : RKV_OK;
    size_t pos = 0;
    uint8_t old = 0;
    const int damaged = damage >= 160;
    if (damaged) {
        pos = ((size_t)next(c) << 8 | next(c)) % o->len;
        old = o->image[pos];
        o->image[pos] ^= (uint8_t)(1u << (damage & 7));
        if (pos < 8 + hlen || want == RKV_OK) want = RKV_ERR_FORMAT;
    }
    int64_t got = -9;
    rkv_status st = rkv_model_page_in(M, o->image, o->len, &got);
    if (damaged) o->image[pos] = old;
    EXPECT(st, want, damaged ? "page_in of a damaged image" : "page_in");
    if (want != RKV_OK) return;
    CHECK(got == freeslot, "paged in at %lld, expected %d", (long long)got, freeslot);
    R[freeslot] = o->s;
    R[freeslot].held = 1;
    R[freeslot].id = id;
    R[freeslot].row = -1;
    o->reserved = 0;
}

static void op_discard(cursor *c) {
    const int id = (int)(next(c) % NIDS);
    char name[16];
    snprintf(name, sizeof name, "req-%d", id);
    EXPECT(rkv_model_offload_discard(M, name), OFF[id].reserved ? RKV_OK : RKV_ERR_NOT_FOUND,
           "offload_discard");
    OFF[id].reserved = 0;
}

static void op_clock(cursor *c) {
    const int64_t s = decode_session(c);
    int64_t got = -7;
    rkv_status st = rkv_model_clock(M, s, &got);
    EXPECT(st, ref_held(s), "clock");
}

/* ---- driver ----------------------------------------------------------------- */

static void setup(void) {
    rkv_model_config cfg = RKV_MODEL_CONFIG_INIT;
    snprintf(cfg.name, sizeof cfg.name, "fuzz");
    cfg.n_layers = NL;
    for (int i = 0; i < NL; i++) cfg.layers[i] = SPECS[i];
    cfg.num_sessions = S;
    cfg.n_q_heads = HQ;
    cfg.n_kv_heads = H;
    cfg.d_head = D;
    cfg.tokens_per_frame = T;
    cfg.dtype = RKV_DTYPE_F32;
    cfg.max_offloaded = MAX_OFFLOADED;
    if (rkv_model_create(&cfg, &M) != RKV_OK) abort();
    snap_bytes = rkv_model_snapshot_bytes(M);
    int64_t s;
    if (rkv_model_claim(M, "sizer", &s) != RKV_OK) abort();
    if (rkv_model_save_session_mem(M, s, NULL, 0, &image_cap) != RKV_OK) abort();
    image_cap += 64; /* clocks with more digits */
    rkv_model_destroy(M);
    if (rkv_model_create(&cfg, &M) != RKV_OK) abort();
    for (int k = 0; k < 2; k++) {
        snap_buf[k] = malloc(snap_bytes);
        image_buf[k] = malloc(image_cap);
    }
    for (int id = 0; id < NIDS; id++) OFF[id].image = malloc(image_cap);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!M) setup();
    /* a fresh start for every input: release everything */
    rkv_model_abandon_frame(M);
    memset(&RB, 0, sizeof RB);
    for (int s = 0; s < S; s++) {
        if (R[s].held) rkv_model_release(M, s);
        memset(&R[s], 0, sizeof R[s]);
        R[s].row = -1;
        R[s].last = -1;
    }
    memset(snaps, 0, sizeof snaps);
    memset(images, 0, sizeof images);
    for (int id = 0; id < NIDS; id++) {
        char name[16];
        snprintf(name, sizeof name, "req-%d", id);
        if (OFF[id].reserved) rkv_model_offload_discard(M, name);
        OFF[id].reserved = 0;
        OFF[id].len = 0;
    }
    tag_counter = 0;
    cursor c = {data, size};
    while (c.n) {
        switch (next(&c) % 16) {
        case 0: case 1: op_claim(&c); break;
        case 2: op_release_reset(&c, 1); break;
        case 3: op_release_reset(&c, 0); break;
        case 4: op_begin(&c); break;
        case 5: next(&c) < 160 ? op_begin(&c) : next(&c) & 1 ? op_end() : op_abandon(); break;
        case 6: case 7: op_upsert_attend(&c, 0, (int)(next(&c) & 1)); break;
        case 8: op_upsert_attend(&c, 1, (int)(next(&c) & 1)); break;
        case 9: op_upsert_attend(&c, 2, (int)(next(&c) & 1)); break;
        case 10: op_fork(&c); break;
        case 11: op_snapshot(&c, 0); break;
        case 12: op_restore(&c, 0); break;
        case 13: op_snapshot(&c, 1); break;
        case 14: op_restore(&c, 1); break;
        case 15: {
            const unsigned k = next(&c) % 6;
            if (k < 2) op_lookup(&c);
            else if (k == 2) op_clock(&c);
            else if (k == 3) op_offload(&c);
            else if (k == 4) op_page_in(&c);
            else op_discard(&c);
            break;
        }
        default: break;
        }
        verify_all();
        if (tag_counter > 1e6f) break;
    }
    return 0;
}

/* `ringkv replay` on golden operation traces (*.txt, shared/golden/README.md):
 * rebuilds the layer of the trace's geometry, runs every upsert and reset
 * through the public API, compares every visibility row the trace asked
 * for, then the whole K/V buffer and the written bits. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "replay.h"
#include "ringkv.h"
#include "trace.h"

/* Expands a range list into a 0/1 row of n slots. */
static void expand_ranges(const rkv_trace_ranges *r, uint8_t *row, int64_t n) {
    memset(row, 0, (size_t)n);
    for (size_t i = 0; i < r->n; i++)
        memset(row + r->v[i].lo, 1, (size_t)(r->v[i].hi - r->v[i].lo));
}

/* Fills the [2][H][B*T][D] f32 input of upsert `op` (golden/README.md). */
static void fill_trace_input(const rkv_trace *t, const rkv_trace_op *op, float *kv) {
    const rkv_geometry *g = &t->geometry;
    int64_t H = g->n_kv_heads, T = g->tokens_per_frame, D = g->d_head, B = op->batch;
    size_t i = 0;
    for (int c = 0; c < 2; c++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t b = 0; b < B; b++)
                for (int64_t tok = 0; tok < T; tok++)
                    for (int64_t d = 0; d < D; d++)
                        kv[i++] = rkv_trace_value(op->op, c, b, tok, h, d);
}

/* Describes what a slot of the layer holds, read back through the trace's
 * value pattern (d0 = op+1, d1 = row, d2 = token), e.g. "op 12 row 0 token 5". */
static void describe_slot(const float *kv, int64_t N, int64_t D, int64_t h, int64_t slot,
                          char *out, size_t size) {
    const float *x = kv + ((size_t)h * (size_t)N + (size_t)slot) * (size_t)D;
    int zero = 1;
    for (int64_t d = 0; d < D; d++) zero &= (x[d] == 0.0f);
    if (zero) {
        snprintf(out, size, "zeros");
        return;
    }
    snprintf(out, size, "op %.9g", (double)x[0] - 1.0);
    if (D > 1) append(out, size, " row %.9g", (double)x[1]);
    if (D > 2) append(out, size, " token %.9g", (double)x[2]);
}

/* Compares the final K/V buffer with final_tags / untouched (bit-exact),
 * reporting the lowest differing slot. */
static int check_final_kv(const rkv_trace *t, const float *kv, char *msg, size_t size) {
    const rkv_geometry *g = &t->geometry;
    int64_t N = t->total_slots, H = g->n_kv_heads, D = g->d_head;
    size_t run = 0;
    for (int64_t slot = 0; slot < N; slot++) {
        while (run < t->n_final_tags && t->final_tags[run].hi <= slot) run++;
        const rkv_trace_run *r =
            (run < t->n_final_tags && t->final_tags[run].lo <= slot) ? &t->final_tags[run] : NULL;
        for (int c = 0; c < 2; c++)
            for (int64_t h = 0; h < H; h++)
                for (int64_t d = 0; d < D; d++) {
                    float want = r ? rkv_trace_value(r->op, c, r->row, r->token + (slot - r->lo),
                                                     h, d)
                                   : 0.0f;
                    float got = kv[(((size_t)c * (size_t)H + (size_t)h) * (size_t)N +
                                    (size_t)slot) * (size_t)D + (size_t)d];
                    if (memcmp(&want, &got, sizeof want) == 0) continue;
                    char holds[128];
                    describe_slot(kv, N, D, h, slot, holds, sizeof holds);
                    say(msg, size, "final %s: slot %lld head %lld dim %lld: expected %.9g ",
                        c ? "V" : "K", (long long)slot, (long long)h, (long long)d,
                        (double)want);
                    if (r)
                        append(msg, size, "(op %lld row %lld token %lld)", (long long)r->op,
                               (long long)r->row, (long long)(r->token + (slot - r->lo)));
                    else
                        append(msg, size, "(untouched)");
                    append(msg, size, ", got %.9g (K of the slot: %s)", (double)got, holds);
                    return -1;
                }
    }
    return 0;
}


/* Runs every operation of a parsed trace on a fresh layer and checks every
 * visible row, then the final K/V and written bits. 0 = pass. */
static int run_trace(const rkv_trace *t, char *msg, size_t size) {
    const rkv_geometry *g = &t->geometry;
    int64_t N = t->total_slots;
    rkv_layer *layer = NULL;
    float *kv = NULL;
    uint8_t *got = NULL, *want = NULL;
    int rc = -1;

    if (rkv_layer_create(g, &layer) != RKV_OK) {
        say(msg, size, "cannot create the layer: %s", cli_lib_detail(NULL));
        goto done;
    }
    int64_t max_batch = 1;
    for (size_t i = 0; i < t->n_ops; i++)
        if (t->ops[i].batch > max_batch) max_batch = t->ops[i].batch;
    /* max_batch <= S, so this is at most half the layer's (capped) bytes. */
    size_t kv_elems = (size_t)2 * (size_t)g->n_kv_heads * (size_t)max_batch *
                      (size_t)g->tokens_per_frame * (size_t)g->d_head;
    kv = malloc(kv_elems * sizeof *kv);
    got = malloc((size_t)N);
    want = malloc((size_t)N);
    if (!kv || !got || !want) {
        say(msg, size, "out of memory");
        goto done;
    }

    for (size_t i = 0; i < t->n_ops; i++) {
        const rkv_trace_op *op = &t->ops[i];
        if (op->kind == RKV_TRACE_RESET) {
            if (rkv_layer_reset(layer, op->sessions[0]) != RKV_OK) {
                say(msg, size, "op %lld (line %lld): reset of session %lld failed: %s",
                    (long long)op->op, (long long)op->line, (long long)op->sessions[0],
                    cli_lib_detail(NULL));
                goto done;
            }
            continue;
        }
        fill_trace_input(t, op, kv);
        if (op->build_visibility) memset(got, 0xA5, (size_t)N); /* catch unwritten bytes */
        rkv_status st = rkv_layer_upsert(layer, kv, RKV_DTYPE_F32, op->batch, op->frames,
                                         op->sessions, op->commit,
                                         op->build_visibility ? got : NULL);
        if (st != RKV_OK) {
            say(msg, size, "op %lld (line %lld): upsert failed: %s", (long long)op->op,
                (long long)op->line, cli_lib_detail(NULL));
            goto done;
        }
        if (op->build_visibility) {
            char what[160];
            snprintf(what, sizeof what,
                     "op %lld (session %lld, frame %lld%s) visible row (line %lld)",
                     (long long)op->op, (long long)op->sessions[0], (long long)op->frames[0],
                     op->commit ? ", commit" : "", (long long)op->visible_line);
            expand_ranges(&op->visible, want, N);
            if (replay_compare_rows(what, want, got, N, msg, size)) goto done;
        }
    }

    expand_ranges(&t->final_written, want, N);
    if (replay_compare_rows("final written", want, rkv_layer_written(layer), N, msg, size)) goto done;
    if (check_final_kv(t, (const float *)rkv_layer_kv(layer), msg, size)) goto done;
    rc = 0;
done:
    free(kv);
    free(got);
    free(want);
    rkv_layer_destroy(layer);
    return rc;
}

/* Parses and replays one trace file, printing its line. */
void replay_trace_file(const char *path, replay_tally *tl) {
    rkv_trace t;
    char msg[REPLAY_MSG_SIZE];
    if (rkv_trace_load(path, &t, msg, sizeof msg) != 0) {
        replay_fail(tl, path, msg);
        return;
    }
    if (run_trace(&t, msg, sizeof msg) != 0) {
        replay_fail(tl, path, msg);
    } else {
        char detail[128];
        snprintf(detail, sizeof detail, "%zu ops, %zu visible rows", t.n_ops, t.n_visible);
        replay_pass(tl, path, detail);
    }
    rkv_trace_free(&t);
}

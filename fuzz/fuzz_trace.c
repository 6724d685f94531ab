/* libFuzzer target: the golden-trace parser (tools/trace.c, rkv_trace_load)
 * on arbitrary bytes. The parser reads a path, so each input is written to
 * a memfd and loaded through /proc/self/fd/N (no disk I/O).
 *
 * Checked: no crash or sanitizer report, a refusal always has a message, a
 * refused load leaves *out empty, and an accepted trace keeps the promises
 * of trace.h: a valid geometry, ops strictly increasing with sessions in
 * range and distinct, frames >= 0, ranges ascending, disjoint and inside
 * the layer, final_tags plus untouched covering every slot exactly once.
 * Seeds: shared/golden/trace_*.txt (scripts/fuzz.sh copies them). */
#define _GNU_SOURCE /* memfd_create */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "trace.h"

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz_trace: %s:%d: check failed: %s\n  ", __FILE__, __LINE__,         \
                    #cond);                                                                        \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fprintf(stderr, "\n");                                                                 \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

static int fd = -1;
static char path[64];

static void check_ranges(const rkv_trace_ranges *r, int64_t N, const char *what) {
    for (size_t i = 0; i < r->n; i++) {
        CHECK(r->v[i].lo >= 0 && r->v[i].lo < r->v[i].hi && r->v[i].hi <= N,
              "%s range %zu [%lld, %lld) outside [0, %lld)", what, i, (long long)r->v[i].lo,
              (long long)r->v[i].hi, (long long)N);
        if (i) CHECK(r->v[i - 1].hi <= r->v[i].lo, "%s ranges not ascending/disjoint", what);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (fd < 0) {
        fd = memfd_create("fuzz_trace", 0);
        if (fd < 0) abort();
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    }
    if (ftruncate(fd, 0) || pwrite(fd, data, size, 0) != (ssize_t)size) abort();

    rkv_trace t;
    char err[512];
    err[0] = '\0';
    const int rc = rkv_trace_load(path, &t, err, sizeof err);
    if (getenv("FUZZ_TRACE_VERBOSE"))
        fprintf(stderr, "fuzz_trace: %s (%zu ops)\n", rc ? err : "accepted", rc ? 0 : t.n_ops);
    if (rc != 0) {
        CHECK(err[0] != '\0', "a refusal without a message");
        CHECK(t.n_ops == 0 && t.ops == NULL, "a refused load left ops behind");
        rkv_trace_free(&t);
        return 0;
    }
    CHECK(rkv_geometry_check(&t.geometry) == RKV_OK, "accepted an invalid geometry: %s",
          rkv_last_error());
    const int64_t S = t.geometry.num_sessions, N = t.total_slots;
    CHECK(N == rkv_geometry_total_slots(&t.geometry), "total_slots %lld", (long long)N);
    size_t n_visible = 0;
    for (size_t i = 0; i < t.n_ops; i++) {
        const rkv_trace_op *op = &t.ops[i];
        if (i) CHECK(op->op > t.ops[i - 1].op, "op numbers not increasing at %zu", i);
        if (op->kind == RKV_TRACE_RESET) {
            CHECK(op->sessions && op->sessions[0] >= 0 && op->sessions[0] < S, "reset session");
            continue;
        }
        CHECK(op->kind == RKV_TRACE_UPSERT, "op kind %d", (int)op->kind);
        CHECK(op->batch >= 1 && op->batch <= S, "batch %lld", (long long)op->batch);
        for (int64_t b = 0; b < op->batch; b++) {
            CHECK(op->sessions[b] >= 0 && op->sessions[b] < S, "session %lld",
                  (long long)op->sessions[b]);
            CHECK(op->frames[b] >= 0, "frame %lld", (long long)op->frames[b]);
            for (int64_t a = 0; a < b; a++)
                CHECK(op->sessions[a] != op->sessions[b], "duplicate session");
        }
        if (op->build_visibility) {
            n_visible++;
            check_ranges(&op->visible, N, "visible");
        }
        CHECK(rkv_trace_find_op(&t, op->op) == op, "find_op(%lld)", (long long)op->op);
    }
    CHECK(n_visible == t.n_visible, "n_visible %zu, counted %zu", t.n_visible, n_visible);
    check_ranges(&t.final_written, N, "final_written");
    check_ranges(&t.untouched, N, "untouched");
    /* final_tags and untouched cover every slot exactly once */
    int64_t covered = 0;
    for (size_t i = 0; i < t.n_final_tags; i++) {
        const rkv_trace_run *r = &t.final_tags[i];
        CHECK(r->lo >= 0 && r->lo < r->hi && r->hi <= N, "final_tags run %zu", i);
        covered += r->hi - r->lo;
    }
    for (size_t i = 0; i < t.untouched.n; i++) covered += t.untouched.v[i].hi - t.untouched.v[i].lo;
    CHECK(covered == N, "final_tags + untouched cover %lld of %lld slots", (long long)covered,
          (long long)N);
    rkv_trace_free(&t);
    return 0;
}

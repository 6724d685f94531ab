/* What the two halves of `ringkv replay` share: the PASS / FAIL lines and
 * their tally, message buffers, and the comparison of two visibility rows
 * (replay.c, the command); the halves are replay_trace.c (operation
 * traces, *.txt) and replay_vectors.c (attention-vector manifests, *.json).
 * Formats: shared/golden/README.md. */
#ifndef RKV_TOOLS_REPLAY_H
#define RKV_TOOLS_REPLAY_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* Size of the message buffers (one FAIL reason, one PASS detail). */
#define REPLAY_MSG_SIZE 2048
/* Norm-wise relative error allowed against out_f64 and out_flex: f32
 * storage; bf16 storage (the case's K/V and queries rounded to bf16: the
 * error SEMANTICS 5 allows bf16 inputs, about 1e-2). */
#define REPLAY_ATTN_TOLERANCE 1e-5
#define REPLAY_ATTN_TOLERANCE_BF16 1e-2

/* Running count of PASS and FAIL lines. */
typedef struct replay_tally {
    int passed, failed;
} replay_tally;

/* Prints "PASS name[ (detail)]". */
void replay_pass(replay_tally *tl, const char *name, const char *detail);
/* Prints "FAIL name: reason". */
void replay_fail(replay_tally *tl, const char *name, const char *reason);

/* snprintf into a message buffer; returns -1 so callers can `return say(..)`. */
static inline int say(char *msg, size_t size, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, size, fmt, ap);
    va_end(ap);
    return -1;
}

/* Appends to a message buffer without overflowing it. */
static inline void append(char *msg, size_t size, const char *fmt, ...) {
    size_t n = strlen(msg);
    if (n + 1 >= size) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg + n, size - n, fmt, ap);
    va_end(ap);
}

/* Compares a got row (nonzero = set) with an expected 0/1 row; on the first
 * difference writes "what: slot X: expected .., got ..; expected RANGES, got
 * RANGES" and returns -1. */
int replay_compare_rows(const char *what, const uint8_t *want, const uint8_t *got, int64_t n,
                        char *msg, size_t size);

/* Whether the file at path is an attention-vector manifest at all (a JSON
 * object with a "cases" array, its .bin beside it): 0, or -1 with "PATH:
 * not a ringkv attention-vector manifest: ..." (or the .bin's absence, or
 * why the file cannot be read) in msg (replay_vectors.c). */
int replay_manifest_check(const char *path, char *msg, size_t size);

/* Parses and replays one trace file, printing its line (replay_trace.c). */
void replay_trace_file(const char *path, replay_tally *tl);
/* Replays every case of one manifest, one line per case, or one FAIL line
 * for the file when it cannot be read at all (replay_vectors.c). */
void replay_manifest_file(const char *path, replay_tally *tl);

#endif

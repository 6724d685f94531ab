/*
 * The ring rule for the tests and fuzzers, written once (SEMANTICS.md 3
 * step 1 and 4) from the reference's expressions, without the library's
 * help: src/ring_rule.h is the library's own copy, which the tests check
 * against this one (tests/cuda/fragment_model.py is the Python copy, checked
 * against src/ring_rule.h by the ctest ring_rule_model).
 *
 * Header only, plain int64 values (the fuzzers have no rkv_geometry and do
 * not link rkv_testlib); the caller passes a valid geometry (PD >= 1,
 * 1 <= RB <= RF, T >= 1) and a clock f >= 0.
 */
#ifndef RKV_TESTS_RING_ORACLE_H
#define RKV_TESTS_RING_ORACLE_H

#include <stdint.h>

/* The bucket of clock f: the reference's (f + (PD - 1)) // PD on int64
 * tensors, that is ceil(f / PD), except the top PD - 1 clocks, where the sum
 * wraps to a negative value (two's complement) before the floor division. */
static inline int64_t rkvt_rule_bucket(int64_t f, int64_t pd)
{
    if (f <= INT64_MAX - (pd - 1))
        return f / pd + (f % pd != 0);
    const int64_t w = (int64_t)((uint64_t)f + (uint64_t)(pd - 1)); /* < 0 */
    return w / pd - (w % pd != 0);
}

/* The ring frame slot clock f addresses: the bucket mod RB (floor modulo). */
static inline int64_t rkvt_rule_slot(int64_t f, int64_t pd, int64_t rb)
{
    const int64_t m = rkvt_rule_bucket(f, pd) % rb;
    return m < 0 ? m + rb : m;
}

/* Clock f is a write step (its commit goes to the ring) when f mod PD == 0. */
static inline int rkvt_rule_write_step(int64_t f, int64_t pd) { return f % pd == 0; }

/* The ring frame hidden at clock f: its slot on a write step, else -1. */
static inline int64_t rkvt_rule_hidden(int64_t f, int64_t pd, int64_t rb)
{
    return rkvt_rule_write_step(f, pd) ? rkvt_rule_slot(f, pd, rb) : -1;
}

/* The bits-and-clock rule: the visible frames of a session at clock f from
 * its span of written bits (C = (RF+1)*T bytes, nonzero = written; a frame
 * counts as written when its first slot is): ring frames ascending, minus
 * the hidden one, then the scratch RF. frames holds RF + 1; returns the
 * count. */
static inline int64_t rkvt_rule_frames(const uint8_t *span, int64_t t, int64_t rf, int64_t rb,
                                       int64_t pd, int64_t f, int64_t *frames)
{
    const int64_t hidden = rkvt_rule_hidden(f, pd, rb);
    int64_t n = 0;
    for (int64_t r = 0; r < rf; r++)
        if (r != hidden && span[r * t]) frames[n++] = r;
    frames[n++] = rf;
    return n;
}

/* The clock-alone rule, for a session that committed clocks 0 .. f-1 in
 * order: the slots of buckets 0 .. ceil(f/PD) - 1 (at most RB of them),
 * minus the hidden one, then the scratch RF. Same contract as
 * rkvt_rule_frames. */
static inline int64_t rkvt_rule_clock_frames(int64_t rf, int64_t rb, int64_t pd, int64_t f,
                                             int64_t *frames)
{
    const int64_t hidden = rkvt_rule_hidden(f, pd, rb);
    int64_t filled = f / pd + (f % pd != 0), n = 0;
    if (filled > rb) filled = rb;
    for (int64_t r = 0; r < filled; r++)
        if (r != hidden) frames[n++] = r;
    frames[n++] = rf;
    return n;
}

/* The clock whose frame ring slot r holds at clock f, for a session that
 * committed every frame from `start` to f-1 in order: the newest write
 * step p in [start, f) with slot(p) == r (p = PD*b, b mod RB == r), or -1
 * when there is none. */
static inline int64_t rkvt_rule_holder(int64_t r, int64_t start, int64_t f, int64_t pd,
                                       int64_t rb)
{
    if (f <= 0) return -1;
    const int64_t bmax = (f - 1) / pd; /* the largest bucket with PD*b < f */
    const int64_t b = bmax - (((bmax - r) % rb) + rb) % rb;
    return b >= 0 && b * pd >= start ? b * pd : -1;
}

#endif

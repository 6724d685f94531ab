/* The ring rule, written once (SEMANTICS 3 step 1 and 4): which ring frame
 * slot a clock addresses, whether it is a write step, which slot is hidden,
 * and a session's visible frames, from its written bits and clock or from
 * its clock alone. The core, the CPU engines, the CUDA kernels (under nvcc
 * every function is __host__ __device__) and the tools include it; the
 * public visibility calls are thin wrappers over it. Plain int64 values,
 * nothing beyond <stdint.h> and <stdbool.h>, no checks: the callers pass
 * f >= 0, PD >= 1, 1 <= RB <= RF, T >= 1. Nothing overflows (the bucket is
 * the reference's int64 arithmetic, wrap-around included).
 * tests/cuda/fragment_model.py's Python copy is checked against these by
 * the ctest ring_rule_model. */
#ifndef RKV_RING_RULE_H
#define RKV_RING_RULE_H

#include <stdbool.h>
#include <stdint.h>

#if defined(__CUDACC__)
#define RKV__RULE static inline __host__ __device__
#else
#define RKV__RULE static inline
#endif

/* SEM 3 step 1: the bucket of clock f as the reference computes it,
 * (f + (PD - 1)) // PD on int64 tensors: ceil(f / PD) while f + PD - 1 fits
 * int64 (every clock but the top PD - 1), and beyond that what torch gives:
 * the sum wraps modulo 2^64 to a negative value, then floor division. The
 * sum is taken in uint64 (no undefined signed overflow) and mapped back to
 * int64 without an implementation-defined conversion. */
RKV__RULE int64_t rkv__rule_bucket(int64_t f, int64_t pd) {
    const uint64_t u = (uint64_t)f + (uint64_t)(pd - 1);
    const int64_t w = u <= (uint64_t)INT64_MAX ? (int64_t)u : -(int64_t)~u - 1;
    const int64_t q = w / pd;
    return q - (w % pd != 0 && w < 0);
}

/* SEM 3 step 1: the ring frame slot clock f addresses, bucket mod RB as
 * the reference's tensor % (floor modulo: in [0, RB) also for a wrapped,
 * negative bucket; slots RB..RF-1 are never addressed). */
RKV__RULE int64_t rkv__rule_slot(int64_t f, int64_t pd, int64_t rb) {
    const int64_t m = rkv__rule_bucket(f, pd) % rb;
    return m < 0 ? m + rb : m;
}

/* SEM 3 step 1: clock f is a write step (its commit goes to the ring, not
 * back to the scratch) when f mod PD == 0. */
RKV__RULE bool rkv__rule_write_step(int64_t f, int64_t pd) { return f % pd == 0; }

/* SEM 4, bits-and-clock rule: the ring frame hidden at clock f -- on a write
 * step its slot (rkv__rule_slot), holding the frame being evicted before
 * the commit and a copy of frame f after it, hidden on every pass of f --
 * and -1 on other clocks. */
RKV__RULE int64_t rkv__rule_hidden_frame(int64_t f, int64_t pd, int64_t rb) {
    return rkv__rule_write_step(f, pd) ? rkv__rule_slot(f, pd, rb) : -1;
}

/* SEM 4, bits-and-clock rule, one ring frame r < RF of a session:
 * visible when written and not the hidden frame. span_written: the
 * session's C = (RF+1)*T bytes of the written bitmap (nonzero = written);
 * frames are written whole, so a frame's first slot stands for all T. */
RKV__RULE bool rkv__rule_frame_visible(const uint8_t *span_written, int64_t t, int64_t hidden,
                                       int64_t r) {
    return r != hidden && span_written[r * t] != 0;
}

/* SEM 4, bits-and-clock rule: the visible frames of the session whose
 * written bitmap span is span_written (as above) at clock f: ring frames
 * ascending, then the scratch (frame RF, always visible). frames: RF + 1
 * entries; returns the count (1 .. RF + 1). */
RKV__RULE int64_t rkv__rule_visible_frames(const uint8_t *span_written, int64_t t, int64_t rf,
                                           int64_t rb, int64_t pd, int64_t f, int64_t *frames) {
    const int64_t hidden = rkv__rule_hidden_frame(f, pd, rb);
    int64_t n = 0;
    for (int64_t r = 0; r < rf; r++)
        if (rkv__rule_frame_visible(span_written, t, hidden, r)) frames[n++] = r;
    frames[n++] = rf;
    return n;
}

/* SEM 4, clock-alone rule, for a session that committed frames 0..f-1 in
 * order from 0: frames g = 0, PD, 2PD, ... < f were written (buckets
 * 0 .. ceil(f/PD) - 1: slots 0 .. min(ceil(f/PD), RB) - 1); minus the
 * hidden frame; plus the scratch (RF) last. frames: RB + 1 entries suffice;
 * returns the count. Periodic in f (period RB*PD) once the ring is full. */
RKV__RULE int64_t rkv__rule_visible_frames_from_clock(int64_t rf, int64_t rb, int64_t pd,
                                                      int64_t f, int64_t *frames) {
    /* ceil(f / PD) exactly: a count of buckets, not the bucket an upsert
     * addresses (rkv__rule_bucket) */
    const int64_t committed = f / pd + (f % pd != 0);
    const int64_t filled = committed < rb ? committed : rb;
    const int64_t hidden = rkv__rule_hidden_frame(f, pd, rb);
    int64_t n = 0;
    for (int64_t r = 0; r < filled; r++)
        if (r != hidden) frames[n++] = r;
    frames[n++] = rf;
    return n;
}

#endif

/* The ring rule, written once (SEMANTICS 3 step 1 and 4): which ring frame
 * slot a clock addresses, whether it is a write step, which slot is hidden,
 * and the visible frame list of a session, from its written bits and clock
 * or from its clock alone.
 *
 * Included by the core and the CPU engines (geometry.c, visibility.c,
 * cpu/attention_reference.c, through internal.h), the CUDA kernels (host and device
 * code: under nvcc every function is __host__ __device__) and
 * tools/replay_vectors.c. The public functions
 * rkv_ring_slot, rkv_layer_visible_frames and
 * rkv_visible_frames_from_clock are thin wrappers over it. Plain int64
 * values and pointers, no library type, nothing beyond <stdint.h> and
 * <stdbool.h>; the callers check their arguments (clock f >= 0, PD >= 1,
 * 1 <= RB <= RF, T >= 1): nothing here does. No function overflows (C
 * signed overflow is undefined); the bucket is the reference's int64
 * arithmetic, wrap-around included (see rkv__rule_bucket).
 *
 * tests/cuda/fragment_model.py keeps its own copy (Python), checked against
 * these functions' results by the ctest ring_rule_model. */
#ifndef RKV_RING_RULE_H
#define RKV_RING_RULE_H

#include <stdbool.h>
#include <stdint.h>

#if defined(__CUDACC__)
#define RKV__RULE static inline __host__ __device__
#else
#define RKV__RULE static inline
#endif

/* ceil(f / PD) exactly, for f >= 0: f / PD + (f mod PD != 0). A count of
 * buckets (the clock-alone rule), not the bucket an upsert addresses. */
RKV__RULE int64_t rkv__rule_ceil_div(int64_t f, int64_t pd) {
    return f / pd + (f % pd != 0);
}

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
 * step its slot (rkv__rule_slot: ceil(f/PD) mod RB = (f/PD) mod RB short of
 * the reference's wrap at the top PD - 1 clocks), holding the frame
 * being evicted before the commit and a copy of frame f after it, hidden on
 * every pass of f -- and -1 on other clocks. */
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
 * order from 0: frames g = 0, PD, 2PD, ... < f were written, i.e. buckets
 * 0 .. ceil(f/PD) - 1, filling slots 0 .. min(ceil(f/PD), RB) - 1; minus the
 * hidden frame; plus the scratch (RF) last. frames: RF + 1 entries (RB + 1
 * suffice); returns the count. Periodic in f with period RB*PD once every
 * bucket has been written. */
RKV__RULE int64_t rkv__rule_visible_frames_from_clock(int64_t rf, int64_t rb, int64_t pd,
                                                      int64_t f, int64_t *frames) {
    const int64_t committed = rkv__rule_ceil_div(f, pd);
    const int64_t filled = committed < rb ? committed : rb;
    const int64_t hidden = rkv__rule_hidden_frame(f, pd, rb);
    int64_t n = 0;
    for (int64_t r = 0; r < filled; r++)
        if (r != hidden) frames[n++] = r;
    frames[n++] = rf;
    return n;
}

#endif

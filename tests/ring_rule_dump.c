/* Prints src/ring_rule.h's results for a sweep of geometries and clocks, one
 * line each, for tests/cuda/fragment_model.py --ring-rule, which compares
 * them with the Python model's own copy of the rule (ctest ring_rule_model):
 *   slot PD RB f : bucket slot write_step hidden
 *   clock RF RB PD f : frames...            (clock-alone rule)
 *   bits RF RB PD T f mask : frames...      (bits-and-clock rule; bit r of
 *                                            mask = ring frame r written)
 * The sweep: PD 1, 2, 3, 8; RB 1..5 and 16 with RF = RB and RB + 2; clocks
 * 0 .. 3*RB*PD + 2 and near INT64_MAX (where the reference's int64
 * f + PD - 1 wraps: the bucket is then the wrapped sum floor-divided, and
 * must not overflow in C), and PD up to INT64_MAX. Exit 0. */
#include <inttypes.h>
#include <stdio.h>

#include "ring_rule.h"

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static uint64_t next(void) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return g_rng;
}

static void print_frames(const int64_t *frames, int64_t n) {
    printf(" :");
    for (int64_t i = 0; i < n; i++) printf(" %" PRId64, frames[i]);
    printf("\n");
}

static void one(int64_t rf, int64_t rb, int64_t pd, int64_t f) {
    int64_t frames[64];
    printf("slot %" PRId64 " %" PRId64 " %" PRId64 " : %" PRId64 " %" PRId64 " %d %" PRId64 "\n",
           pd, rb, f, rkv__rule_bucket(f, pd), rkv__rule_slot(f, pd, rb),
           (int)rkv__rule_write_step(f, pd), rkv__rule_hidden_frame(f, pd, rb));
    printf("clock %" PRId64 " %" PRId64 " %" PRId64 " %" PRId64, rf, rb, pd, f);
    print_frames(frames, rkv__rule_visible_frames_from_clock(rf, rb, pd, f, frames));
    /* a few written-bit patterns: none, all, and random ones; T 1 and 3 */
    for (int k = 0; k < 4; k++) {
        const uint64_t mask = k == 0   ? 0
                              : k == 1 ? (1ull << rf) - 1
                                       : next() & ((1ull << rf) - 1);
        const int64_t t = 1 + 2 * (k & 1);
        uint8_t span[64 * 3];
        for (int64_t r = 0; r <= rf; r++)
            for (int64_t i = 0; i < t; i++)
                span[r * t + i] = r == rf ? 1 : (uint8_t)(mask >> r & 1);
        printf("bits %" PRId64 " %" PRId64 " %" PRId64 " %" PRId64 " %" PRId64 " %" PRIu64, rf, rb,
               pd, t, f, mask);
        print_frames(frames, rkv__rule_visible_frames(span, t, rf, rb, pd, f, frames));
    }
}

int main(void) {
    static const int64_t pds[] = {1, 2, 3, 8};
    static const int64_t rbs[] = {1, 2, 3, 4, 5, 16};
    for (size_t i = 0; i < sizeof pds / sizeof pds[0]; i++)
        for (size_t j = 0; j < sizeof rbs / sizeof rbs[0]; j++)
            for (int64_t extra = 0; extra <= 2; extra += 2) {
                const int64_t pd = pds[i], rb = rbs[j], rf = rb + extra;
                for (int64_t f = 0; f <= 3 * rb * pd + 2; f++) one(rf, rb, pd, f);
                for (int64_t d = 0; d < 2 * pd + 2; d++) one(rf, rb, pd, INT64_MAX - d);
            }
    /* huge dilations */
    static const int64_t big[] = {INT64_MAX, INT64_MAX - 1, (int64_t)1 << 62, ((int64_t)1 << 62) + 1};
    for (size_t i = 0; i < sizeof big / sizeof big[0]; i++)
        for (int64_t d = 0; d < 3; d++) {
            one(5, 3, big[i], d);
            one(5, 3, big[i], big[i] - d);
            one(5, 3, big[i], INT64_MAX - d);
        }
    return 0;
}

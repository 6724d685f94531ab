/* Register-only throughput loops for `ringkv bench` (peak.c): the physical
 * arithmetic peak of this CPU, the part of each ceiling no library can beat. */
#ifndef RKV_BENCH_PEAK_H
#define RKV_BENCH_PEAK_H

#include <stdbool.h>

typedef enum peak_kind {
    PEAK_FMA_GENERIC, /* f32 multiply + add on 128-bit vectors (plain C) */
    PEAK_FMA_AVX2,    /* f32 VFMADD on 256-bit registers                  */
    PEAK_FMA_AVX512,  /* f32 VFMADD on 512-bit registers                  */
    PEAK_BF16_DOT,    /* AVX512-BF16 VDPBF16PS: 16 lanes x 2 bf16 products */
    PEAK_AMX_BF16,    /* AMX TDPBF16PS on tile registers: 16x16x32 per op */
} peak_kind;

/* Whether this build can run kind at all (the compiler knows the
 * instructions); whether the CPU has them is the caller's question. */
bool peak_built(peak_kind kind);

/* The instruction set's name as rows print it: "generic", "avx2", "avx512",
 * "avx512bf16", "amx". */
const char *peak_isa(peak_kind kind);

/* Runs kind's loop on each of `threads` threads (1..PEAK_MAX_THREADS),
 * started together, in chunks of chunk_iters iterations until `seconds`
 * have passed (every thread finishes the chunk it is in); returns the sum
 * over the threads of each one's FLOPs per second of its own CPU time (each
 * multiply-add counted as 2 FLOPs): the rate of the cores while they run,
 * which time a thread spends descheduled does not lower (peak.c). 0 when a
 * thread cannot be started, the kind is not built or an argument is out of
 * range. The CPU must have the instructions (and, for AMX, the library's
 * tile permission: bench_machine_read). One call at a time (a static thread
 * table). */
#define PEAK_MAX_THREADS 1024 /* as `ringkv bench --threads` */
double peak_run(peak_kind kind, int threads, long chunk_iters, double seconds);

/* An iteration count for which one chunk of kind's loop takes about
 * `seconds` on one thread (0 when the kind is not built). */
long peak_calibrate(peak_kind kind, double seconds);

#endif

/* This machine's own limits, one per dtype, for `ringkv bench` (ceiling.c).
 * A ceiling is the best of its parts, each sampled in turn with the subject
 * it bounds (bench_ceiling_sample between the subject's runs: ABAB), so
 * load on a shared machine hits both:
 *   f32:  OpenBLAS sgemm and the f32 FMA peak loop (peak.c; AVX-512 and
 *         AVX2 where the CPU has them, else plain C);
 *   bf16: a oneDNN bf16 matrix product (weights pre-packed; builds with
 *         oneDNN, CPUs where it has more than its reference kernel) and the
 *         bf16 peak loop: AMX TDPBF16PS, else AVX512-BF16 VDPBF16PS, else
 *         the f32 FMA peak (bf16 then runs on the f32 units). */
#ifndef RKV_BENCH_CEILING_H
#define RKV_BENCH_CEILING_H

#include "bench.h"
#include "ringkv.h"

typedef struct bench_ceiling bench_ceiling;

/* The ceiling of dtype (RKV_DTYPE_F32 or RKV_DTYPE_BF16) on o->threads
 * threads: buffers allocated, primitives created, loops calibrated; parts
 * this machine or build lacks are left out, said once on o->err. NULL for
 * another dtype or when out of memory. */
bench_ceiling *bench_ceiling_create(const bench_opts *o, rkv_dtype dtype);
/* One run of every part; each part keeps its best. */
void bench_ceiling_sample(bench_ceiling *c);
/* The best part's GFLOP/s (0 before any sample) and, in *kind, what it is:
 * "sgemm_openblas", "fma_peak_avx512", "fma_peak_avx2", "fma_peak_generic",
 * "onednn_bf16_matmul", "amx_peak", "avx512bf16_peak" (static strings). */
double bench_ceiling_best(const bench_ceiling *c, const char **kind);
/* When the peak loops of a and b are the same loops (on a CPU without AMX
 * or AVX512-BF16 the bf16 peak is the f32 FMA peak), they are one
 * measurement of one thing sampled twice: both peaks become the better of
 * the two (with its loop's isa), so the f32 and bf16 ratios share one
 * ceiling (a run once read 39.6 and 107.9 GFLOP/s for the same loop). Call
 * before bench_ceiling_best and bench_ceiling_emit; returns whether they
 * were shared. */
bool bench_ceiling_share_peak(bench_ceiling *a, bench_ceiling *b);
/* One row per part (its best): cpu_sgemm_gflops, cpu_fma_peak_gflops,
 * cpu_onednn_bf16_gflops, cpu_bf16_peak_gflops. */
void bench_ceiling_emit(const bench_ceiling *c);
void bench_ceiling_destroy(bench_ceiling *c);

#endif

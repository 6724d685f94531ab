/* Shared by the parts of `ringkv bench`: bench.c (the CPU path, the options),
 * row.c (the one row emitter), machine.c (facts about this machine),
 * ceiling.c and peak.c (this machine's limits) and bench_gpu.c
 * (--backend cuda: the one GPU bench, on a CUDA model through
 * tools/device.c). */
#ifndef RKV_BENCH_BENCH_H
#define RKV_BENCH_BENCH_H

#include <stdbool.h>
#include <stdio.h>

#include <cjson/cJSON.h>

#include "cli.h" /* cli_load */

/* What every row says about the machine it was measured on (machine.c
 * fills it; tests may fill it by hand). Strings are NUL-terminated. */
typedef struct bench_machine {
    char cpu_model[128];        /* CPUID brand string, else /proc/cpuinfo's "model name" */
    char blas_core[64];         /* openblas_get_corename(): the kernel OpenBLAS runs */
    char openblas_coretype[64]; /* OPENBLAS_CORETYPE from the environment; "" when unset */
    const char *isa;            /* rkv_attention_isa(NULL): the library's kernel (static) */
    bool fma_avx2;              /* CPU + OS: AVX2 and FMA */
    bool avx512;                /* AVX-512 F/BW/DQ/VL */
    bool avx512bf16;            /* and AVX512-BF16 (VDPBF16PS) */
    bool amx;                   /* AMX-TILE + AMX-BF16, and Linux granted the tile data */
} bench_machine;

typedef struct bench_opts {
    bool json;
    bool quick;
    int threads;
    const bench_machine *machine; /* facts every row carries; required */
    FILE *out;                    /* rows; NULL: stdout */
    FILE *err;                    /* warnings; NULL: stderr */
} bench_opts;

/* Seconds of CPU time the calling thread has had (CLOCK_THREAD_CPUTIME_ID;
 * peak.c). A ceiling timed by it is what the core does while it runs: time
 * spent descheduled on a loaded machine counts for nobody, so load lowers
 * only the subject (timed by the wall clock) and ratios err low, never high.
 * Only for work done on the calling thread alone. */
double bench_thread_cpu_s(void);

/* Run-to-run noise allowed on a ratio: value / ceiling above this means the
 * ceiling is not the machine's limit (a measurement error, flagged). */
#define BENCH_RATIO_NOISE 1.05

/* value / ceiling; *suspect = the ratio exceeds BENCH_RATIO_NOISE (or is
 * not a number). ceiling must be > 0. */
double bench_ratio(double value, double ceiling, bool *suspect);

/* The one row emitter: every row of `ringkv bench` (CPU and CUDA) goes
 * through it. A row is name, value, unit, then params (the keys that tell
 * rows apart: dtype, B, preset, threads, ...; ownership taken, may be NULL),
 * then, when ceiling > 0: ceiling, ratio and ceiling_suspect; then always
 * ceiling_kind (what the ceiling is: ceiling_kind, or "none" when NULL),
 * isa (params' own "isa" where given, else the library's kernel),
 * cpu_model, blas_core, and openblas_coretype when the environment set it.
 * A suspect ratio is also said on o->err with the row's name and both
 * numbers. Printed as one JSON object per line (o->json) or an aligned
 * text line. */
void bench_emit(const bench_opts *o, const char *name, double value, const char *unit,
                cJSON *params, double ceiling, const char *ceiling_kind);
/* The last row of a run, bench_seconds: wall_s (the run's wall time,
 * unit "s") with cpu_seconds (cpu_s: the CPU time the process got over it,
 * every thread), threads (o->threads, when set), cpus_online and the load
 * averages when the run started, load_1min, load_5min, load_15min (left
 * out when load->known is 0): so that rows measured on a busy machine can
 * be told from a slow library (CPU time well under wall x threads, or a
 * load near the CPUs before the run). Through bench_emit. */
void bench_emit_run_time(const bench_opts *o, double wall_s, double cpu_s, const cli_load *load);

/* Text mode only (nothing with o->json): one line with the machine facts
 * that JSON rows carry on every row. */
void bench_emit_machine(const bench_opts *o);

/* machine.c: reads the facts above (once; cheap). Asks the library for
 * the AMX tile permission, as its own kernel choice does. */
void bench_machine_read(bench_machine *m);
/* machine.c: one line on o->err when the environment sets OPENBLAS_CORETYPE
 * (the bench never sets it) or OpenBLAS runs a kernel narrower than the
 * CPU's vectors; nothing otherwise. */
void bench_machine_warn(const bench_opts *o);

/* bench_offload.c: offload, page-in and export/import of one 360P session
 * against memcpy of the same bytes (issue 13). */
void bench_offload(const bench_opts *o);
/* bench_offload.c: rkv_model_snapshot / rkv_model_restore of a demo and a
 * 360P session, warm, per call and against memcpy of the same pieces
 * (issue 20). */
void bench_snapshot(const bench_opts *o);

/* `ringkv bench --backend cuda`: the exit status (2, refused before any
 * output, in a build without CUDA and where no GPU is seen; 1 for a
 * failure during the run, with a message). */
int bench_cuda_run(const bench_opts *o);

#endif

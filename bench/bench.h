/* Shared by the parts of `ringkv bench`: bench.c (the CPU path, the options)
 * and bench_gpu.c (--backend cuda). */
#ifndef RKV_BENCH_BENCH_H
#define RKV_BENCH_BENCH_H

#include <stdbool.h>

#include <cjson/cJSON.h>

typedef struct bench_opts {
    bool json;
    bool quick;
    int threads;
} bench_opts;

/* One result row: printed as JSON (--json) or as an aligned text line.
 * Takes ownership of params (may be NULL); ceiling > 0 adds ceiling/ratio. */
void bench_emit(const bench_opts *o, const char *name, double value, const char *unit,
                cJSON *params, double ceiling);

/* bench_gpu.c: 1 when this build has the CUDA backend. */
int bench_cuda_built(void);
/* `ringkv bench --backend cuda`: the exit status (1 without a GPU, with the
 * library's message). */
int bench_cuda_run(const bench_opts *o);

#endif

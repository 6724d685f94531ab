/* `ringkv bench`: measures the CPU path against the machine's own ceilings in
 * one run and prints one row per measurement (row.c: name, value, unit, the
 * parameters that tell rows apart, ceiling/ratio where one applies, and the
 * machine facts). Ceilings (ceiling.c): per dtype, the best of library
 * matrix products and the physical peak loops, sampled between the
 * subject's runs (ABAB, best of each); memcpy of the same bytes to the same
 * addresses for upsert. FLOPs of attention: 4 * queries * visible keys *
 * d_head * q_heads. */
#define _POSIX_C_SOURCE 200809L
#include <cjson/cJSON.h>
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"
#include "ringkv_backend.h"
#include "blas_attention.h"
#include "ceiling.h"
#include "cli.h"
#include "commands.h"
#include "isa.h" /* src/cpu: the engine choice, and one call on a named engine */
#include "ringkv.h"

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static float rnd(void) { /* xorshift64*: uniform in [-1, 1) */
    rng_state ^= rng_state >> 12, rng_state ^= rng_state << 25, rng_state ^= rng_state >> 27;
    return (float)((rng_state * 2685821657736338717ull) >> 40) / 8388608.0f - 1.0f;
}

static void *xmalloc(size_t n) {
    void *p = aligned_alloc(64, (n + 63) & ~(size_t)63);
    if (!p) {
        fprintf(stderr, "ringkv bench: out of memory (%zu bytes)\n", n);
        exit(1);
    }
    return p;
}

static void fill_random(void *buf, rkv_dtype dtype, size_t n) {
    float *tmp = xmalloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) tmp[i] = rnd();
    rkv_convert(tmp, RKV_DTYPE_F32, buf, dtype, n);
    free(tmp);
}

static void check(rkv_status st, const char *what) {
    if (st != RKV_OK) {
        fprintf(stderr, "ringkv bench: %s: %s\n", what, rkv_last_error());
        exit(1);
    }
}

/* ---- memory ------------------------------------------------------------------ */

static size_t llc_bytes(void) {
    long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
    return l3 > 0 ? (size_t)l3 : (size_t)64 << 20;
}

/* ---- attention --------------------------------------------------------------- */

/* Seconds of one call of rkv_layer_attend (or of the BLAS peer). */
static double time_attend(const rkv_layer *l, const rkv_attention_args *a) {
    double t = now_s();
    check(rkv_layer_attend(l, a), "attend");
    return now_s() - t;
}

/* Seconds of one call on the engine `isa` (rkv__attend_engine). */
static double time_attend_on(const rkv_layer *l, const rkv_attention_args *a, rkv__isa isa) {
    double t = now_s();
    check(rkv__attend_engine(l, a, isa), "attend on the other engine");
    return now_s() - t;
}

/* The other candidate for bf16 storage on this CPU, or RKV__ISA_COUNT: where
 * the pair path runs by default (amx, avx512bf16), the widening AVX-512
 * kernel; where the AVX-512 kernel runs although the CPU has AVX512-BF16
 * (Intel without AMX), the AVX512-BF16 engine: the rule of rkv__isa_pick,
 * measured on each machine the bench runs on. */
static rkv__isa other_engine(const char *isa) {
    const rkv__cpu cpu = rkv__cpu_read();
    const rkv__isa now = rkv__isa_parse(isa);
    if (now == RKV__ISA_AMX || now == RKV__ISA_AVX512BF16) return RKV__ISA_AVX512;
    if (now == RKV__ISA_AVX512 && rkv__isa_pick(&cpu, RKV__ISA_AVX512BF16) == RKV__ISA_AVX512BF16)
        return RKV__ISA_AVX512BF16;
    return RKV__ISA_COUNT;
}

static double time_blas_peer(const rkv_layer *l, int64_t f, const rkv_attention_args *a,
                             int threads) {
    double t = now_s();
#ifdef RKV_HAVE_OPENBLAS
    if (blas_attention(l, 0, f, 32, a->q, a->out, threads)) {
        fprintf(stderr, "ringkv bench: the OpenBLAS attention peer failed\n");
        exit(1);
    }
#else
    (void)l, (void)f, (void)a, (void)threads;
#endif
    return now_s() - t;
}

/* One dtype's attention figures, kept until both dtypes' ceilings are in. */
typedef struct attention_run {
    rkv_dtype dtype;
    double flops, keys;
    double best, blas, ref; /* least seconds: ringkv, the BLAS peer, the reference */
    bool peer;
    const char *isa;        /* the kernel ringkv ran (static) */
    rkv__isa other;         /* bf16: the other candidate engine, timed in the same rounds */
    double other_best;      /*   its least seconds (RKV__ISA_COUNT: none) */
    bench_ceiling *ceil;
} attention_run;

/* One session row of a 360P local layer in steady state: 15 ring frames +
 * scratch visible (2,048 keys), 32 query heads over 16 KV heads, d_head 64,
 * of one dtype, against the dtype's ceiling. Rounds of: one sample of every
 * part of the ceiling, then a few runs of the attention (and, in f32, of
 * the OpenBLAS peer); each side keeps its best. 6 rounds of 3 (--quick) or
 * 12 of 4: a shared host runs cache-bound code 20-35% slower for seconds
 * at a time while the FMA peak loop holds (bench/RESULTS.md, 2026-12-01
 * 02:40), so the runs are spread over more rounds. Fills *x (x->ceil to
 * be destroyed by the caller). */
static void measure_attention(const bench_opts *o, rkv_threadpool *pool, rkv_dtype dt,
                              attention_run *x) {
    const int rounds = o->quick ? 6 : 12, reps = o->quick ? 3 : 4;
    rkv_geometry g = {1, 16, 16, 16, 64, 128, 1, dt};
    rkv_layer *l;
    check(rkv_layer_create(&g, &l), "layer");
    const size_t frame = 2 * 16 * 128 * 64;
    void *kv = xmalloc(frame * 4);
    int64_t s = 0, f;
    for (f = 0; f < 20; f++) {
        fill_random(kv, dt, frame);
        check(rkv_layer_upsert(l, kv, dt, 1, &f, &s, 1, NULL), "upsert");
    }
    int64_t nframes = 0, frames[17];
    check(rkv_layer_visible_frames(l, 0, f, frames, &nframes), "visible");
    x->dtype = dt;
    x->keys = (double)nframes * 128;
    const size_t qn = 32 * 128 * 64;
    void *q = xmalloc(qn * 4), *out = xmalloc(qn * 4);
    fill_random(q, dt, qn);
    rkv_attention_args a = {.struct_size = sizeof(rkv_attention_args),
                            .batch = 1, .n_q_heads = 32, .q = q, .q_dtype = dt, .out = out,
                            .out_dtype = dt, .session_idx = &s, .frame_pos = &f, .pool = pool};
    x->flops = 4.0 * 128 * x->keys * 64 * 32;
#ifdef RKV_HAVE_OPENBLAS
    x->peer = dt == RKV_DTYPE_F32; /* the BLAS peer: sgemm tile products */
#else
    x->peer = false;
#endif
    x->ceil = bench_ceiling_create(o, dt);
    if (!x->ceil) {
        fprintf(stderr, "ringkv bench: out of memory for the %s ceiling\n", rkv_dtype_name(dt));
        exit(1);
    }
    time_attend(l, &a); /* warm-up */
    x->other = dt == RKV_DTYPE_BF16 ? other_engine(rkv_attention_isa(l)) : RKV__ISA_COUNT;
    if (x->other != RKV__ISA_COUNT) time_attend_on(l, &a, x->other);
    x->best = x->blas = x->other_best = 1e30;
    for (int r = 0; r < rounds; r++) {
        bench_ceiling_sample(x->ceil);
        for (int i = 0; i < reps; i++) {
            const double t = time_attend(l, &a);
            if (t < x->best) x->best = t;
        }
        for (int i = 0; x->other != RKV__ISA_COUNT && i < reps; i++) {
            const double t = time_attend_on(l, &a, x->other);
            if (t < x->other_best) x->other_best = t;
        }
        for (int i = 0; x->peer && i < reps; i++) {
            const double t = time_blas_peer(l, f, &a, rkv_threadpool_size(pool));
            if (t < x->blas) x->blas = t;
        }
    }
    x->ref = 1e30;
    /* the reference engine on the same bytes: the storage wrapped on the
     * reference table (rkv_backend_cpu_reference) */
    const rkv_backend_storage st = {(void *)rkv_layer_kv(l), (uint8_t *)rkv_layer_written(l), NULL};
    rkv_layer *ref = NULL;
    check(rkv_layer_wrap(rkv_backend_cpu_reference(), NULL, rkv_layer_geometry(l), &st, &ref),
          "wrap");
    for (int r = 0; r < (o->quick ? 1 : 2); r++) {
        double t = now_s();
        check(rkv_layer_attend(ref, &a), "attend_reference");
        t = now_s() - t;
        if (t < x->ref) x->ref = t;
    }
    rkv_layer_destroy(ref);
    x->isa = rkv_attention_isa(l);
    free(q), free(out), free(kv);
    rkv_layer_destroy(l);
}

/* The rows of one dtype: its ceiling's parts, then attention against it. */
static void emit_attention(const bench_opts *o, rkv_threadpool *pool, const attention_run *x) {
    const char *kind;
    const double ceiling = bench_ceiling_best(x->ceil, &kind);
    bench_ceiling_emit(x->ceil);
    cJSON *p = cJSON_CreateObject();
    cJSON_AddStringToObject(p, "dtype", rkv_dtype_name(x->dtype));
    cJSON_AddNumberToObject(p, "B", 1);
    cJSON_AddStringToObject(p, "preset", "waypoint-1.5-360p");
    cJSON_AddNumberToObject(p, "keys", x->keys);
    cJSON_AddNumberToObject(p, "threads", rkv_threadpool_size(pool));
    cJSON_AddStringToObject(p, "isa", x->isa);
    cJSON *p2 = cJSON_Duplicate(p, 1);
    cJSON *p3 = cJSON_Duplicate(p, 1);
    cJSON *q = x->other != RKV__ISA_COUNT ? cJSON_Duplicate(p, 1) : NULL;
    cJSON *q2 = x->other != RKV__ISA_COUNT ? cJSON_Duplicate(p, 1) : NULL;
    bench_emit(o, "attention_gflops", x->flops / x->best / 1e9, "GFLOP/s", p, ceiling, kind);
    bench_emit(o, "attention_speedup_vs_reference", x->ref / x->best, "x", p2, 0, NULL);
    if (x->other != RKV__ISA_COUNT) { /* the other engine, in the same rounds */
        cJSON_ReplaceItemInObject(q, "isa", cJSON_CreateString(rkv__isa_name(x->other)));
        bench_emit(o, "attention_gflops", x->flops / x->other_best / 1e9, "GFLOP/s", q, ceiling,
                   kind);
        cJSON_AddStringToObject(q2, "other_isa", rkv__isa_name(x->other));
        bench_emit(o, "attention_speedup_vs_engine", x->other_best / x->best, "x", q2, 0, NULL);
    }
    if (x->peer) {
        char isa[96];
        snprintf(isa, sizeof isa, "openblas:%s", o->machine->blas_core);
        cJSON_ReplaceItemInObject(p3, "isa", cJSON_CreateString(isa));
        cJSON_AddStringToObject(p3, "peer", "openblas");
        cJSON *p4 = cJSON_Duplicate(p3, 1);
        bench_emit(o, "attention_blas_gflops", x->flops / x->blas / 1e9, "GFLOP/s", p3, ceiling,
                   kind);
        bench_emit(o, "attention_speedup_vs_blas", x->blas / x->best, "x", p4, 0, NULL);
    } else {
        cJSON_Delete(p3);
    }
}

/* f32 and bf16 attention against their ceilings. Both are measured before
 * any row is printed: where the bf16 peak loop is the f32 one (no AMX or
 * AVX512-BF16), the two runs of it share their best (ceiling.h). */
static void bench_attention(const bench_opts *o, rkv_threadpool *pool) {
    attention_run x[2];
    measure_attention(o, pool, RKV_DTYPE_F32, &x[0]);
    measure_attention(o, pool, RKV_DTYPE_BF16, &x[1]);
    bench_ceiling_share_peak(x[0].ceil, x[1].ceil);
    for (int k = 0; k < 2; k++) {
        emit_attention(o, pool, &x[k]);
        bench_ceiling_destroy(x[k].ceil);
    }
}

/* ---- upsert -------------------------------------------------------------------- */

/* The bytes one upsert call moves, as plain memcpy calls to the same
 * addresses in the same order (scratch write, then the commit's copy): the
 * ceiling the upsert is compared with, in the same cache state. */
static void memcpy_as_upsert(const rkv_layer *l, const uint8_t *src, int64_t B,
                             const int64_t *sess, const int64_t *fpos, int commit) {
    const rkv_geometry *g = rkv_layer_geometry(l);
    const int64_t T = g->tokens_per_frame, H = g->n_kv_heads, N = rkv_geometry_total_slots(rkv_layer_geometry(l));
    const int64_t C = rkv_geometry_capacity(rkv_layer_geometry(l)), L = C - T;
    const size_t row = (size_t)g->d_head * rkv_dtype_size(g->dtype), chunk = (size_t)T * row;
    uint8_t *kv = (uint8_t *)rkv_layer_kv(l); /* the bench writes what the upsert would */
    for (int pass = 0; pass < (commit ? 2 : 1); pass++)
        for (int64_t b = 0; b < B; b++) {
            int64_t dst = sess[b] * C + L;
            int write;
            const int64_t slot = rkv_ring_slot(g, fpos[b], &write);
            if (pass && write) dst = sess[b] * C + slot * T;
            for (int64_t ch = 0; ch < 2 * H; ch++)
                memcpy(kv + ((size_t)ch * (size_t)N + (size_t)dst) * row,
                       src + ((size_t)ch * (size_t)B + (size_t)b) * chunk, chunk);
        }
}

/* Upserts of B 720P frames (T 512, 16 KV heads, d 64, bf16: 2 MiB per row)
 * over 2x the last-level cache of sessions and source frames, each timed
 * against memcpy_as_upsert on the same call sequence (best of the reps; each
 * upsert sample between two memcpy samples, BAB, so a quiet moment that
 * helps the subject helps a ceiling sample beside it, and both sides see
 * the same cache states). The upsert is timed on the wall clock, the
 * memcpy on this thread's CPU time (bench_thread_cpu_s: load lowers only
 * the subject; the same copies once read 1.44 of a wall-clock ceiling
 * under load). Bytes moved: the frame once without commit, twice with. */
static void bench_upsert(const bench_opts *o) {
    const size_t llc = llc_bytes();
    const size_t row_bytes = 2 * 16 * 512 * 64 * 2; /* one frame, K and V */
    const size_t per_session = 2 * 16 * (size_t)(17 * 512) * 64 * 2;
    int64_t S = (int64_t)(2 * llc / per_session) + 8;
    if (S > 64) S = 64;
    rkv_geometry g = {S, 16, 16, 16, 64, 512, 1, RKV_DTYPE_BF16};
    rkv_layer *l;
    check(rkv_layer_create(&g, &l), "upsert layer");
    const int batches[] = {1, 4};
    for (int bi = 0; bi < 2; bi++) {
        const int64_t B = batches[bi];
        const int64_t nsrc = (int64_t)(2 * llc / (row_bytes * (size_t)B)) + 2;
        uint8_t *src = xmalloc((size_t)nsrc * B * row_bytes);
        fill_random(src, RKV_DTYPE_BF16, row_bytes / 2); /* contents do not matter here */
        for (int64_t i = 1; i < nsrc * B; i++) memcpy(src + (size_t)i * row_bytes, src, row_bytes);
        for (int commit = 0; commit < 2; commit++) {
            const int64_t calls = S / B * 6; /* samples of ~15 ms: shorter ones are noise */
            const double bytes = (double)calls * B * row_bytes * (commit ? 2 : 1);
            int64_t sess[4], fpos[4];
            double best = 0, best_mc = 0;
            for (int rep = 0; rep < (o->quick ? 4 : 6); rep++)
                for (int turn = 0; turn < 3; turn++) { /* BAB: a ceiling beside each subject */
                    const int side = turn != 1; /* 0: upsert, 1: memcpy */
                    /* the subject on the wall clock, the ceiling on this
                     * thread's CPU time (bench.h: load lowers only the
                     * subject) */
                    double t = side ? bench_thread_cpu_s() : now_s();
                    for (int64_t c = 0; c < calls; c++) {
                        for (int64_t b = 0; b < B; b++) {
                            sess[b] = (c * B + b) % S;
                            fpos[b] = c / (S / B) + 1;
                        }
                        const uint8_t *frame = src + (size_t)(c % nsrc) * B * row_bytes;
                        if (side) memcpy_as_upsert(l, frame, B, sess, fpos, commit);
                        else check(rkv_layer_upsert(l, frame, RKV_DTYPE_BF16, B, fpos, sess, commit, NULL),
                                   "upsert");
                    }
                    t = (side ? bench_thread_cpu_s() : now_s()) - t;
                    double *rate = side ? &best_mc : &best;
                    if (bytes / t > *rate) *rate = bytes / t;
                }
            cJSON *p = cJSON_CreateObject();
            cJSON_AddStringToObject(p, "dtype", "bf16");
            cJSON_AddNumberToObject(p, "B", (double)B);
            cJSON_AddBoolToObject(p, "commit", commit);
            cJSON_AddStringToObject(p, "preset", "waypoint-1.5-720p");
            bench_emit(o, "upsert_gbps", best / 1e9, "GB/s", p, best_mc / 1e9,
                       "memcpy_same_bytes");
        }
        free(src);
    }
    rkv_layer_destroy(l);
}

/* ---- a whole rollout step --------------------------------------------------- */

/* Frames per second of one session through all 24 layers x 5 passes of the
 * real 360P geometry (bf16), through the model API: upsert then attention in
 * every layer of every pass, the 5th pass committing. The full run times 8
 * whole frames; --quick times layer steps (upsert + attention) of one frame
 * until the frame ends or 10 s have passed, and counts 120 steps a frame
 * (layer_steps says how many were timed). */
static void bench_rollout(const bench_opts *o, rkv_threadpool *pool) {
    rkv_model_config cfg = RKV_MODEL_CONFIG_INIT;
    check(rkv_model_preset("waypoint-1.5-360p", 0, &cfg), "preset");
    rkv_model *m;
    check(rkv_model_create(&cfg, &m), "model");
    int64_t s;
    check(rkv_model_claim(m, "bench", &s), "claim");
    const size_t kvn = 2 * 16 * 128 * 64, qn = 32 * 128 * 64;
    void *kv = xmalloc(kvn * 2), *q = xmalloc(qn * 2), *out = xmalloc(qn * 2);
    fill_random(kv, RKV_DTYPE_BF16, kvn);
    fill_random(q, RKV_DTYPE_BF16, qn);
    rkv_attention_args a = {.struct_size = sizeof(rkv_attention_args),
                            .n_q_heads = 32, .q = q, .q_dtype = RKV_DTYPE_BF16, .out = out,
                            .out_dtype = RKV_DTYPE_BF16, .pool = pool};
    /* fill every ring first (commit passes only), then time whole frames */
    const int64_t warm = 16, frames = o->quick ? 1 : 8;
    const double budget = o->quick ? 10.0 : 1e30;
    int64_t steps = 0;
    double t0 = 0;
    bool out_of_time = false;
    for (int64_t f = 0; f < warm + frames && !out_of_time; f++) {
        check(rkv_model_begin_frame(m, 1, &s, &f), "begin_frame");
        if (f < warm) {
            for (int64_t layer = 0; layer < cfg.n_layers; layer++)
                check(rkv_model_upsert(m, layer, NULL, 1, &s, kv, RKV_DTYPE_BF16, 1), "upsert");
            continue;
        }
        if (f == warm) t0 = now_s();
        for (int pass = 0; pass < 5 && !out_of_time; pass++)
            for (int64_t layer = 0; layer < cfg.n_layers && !out_of_time; layer++) {
                check(rkv_model_upsert(m, layer, NULL, 1, &s, kv, RKV_DTYPE_BF16, pass == 4), "upsert");
                check(rkv_model_attend(m, layer, NULL, 1, &s, &a), "attend");
                steps++;
                out_of_time = now_s() - t0 > budget;
            }
    }
    const double fps = (double)steps / (5.0 * (double)cfg.n_layers) / (now_s() - t0);
    cJSON *p = cJSON_CreateObject();
    cJSON_AddStringToObject(p, "dtype", "bf16");
    cJSON_AddNumberToObject(p, "B", 1);
    cJSON_AddStringToObject(p, "preset", "waypoint-1.5-360p");
    cJSON_AddNumberToObject(p, "threads", rkv_threadpool_size(pool));
    cJSON_AddNumberToObject(p, "layer_steps", (double)steps);
    bench_emit(o, "rollout_fps_360p", fps, "frames/s", p, 0, NULL);
    free(kv), free(q), free(out);
    rkv_model_destroy(m);
}

/* ---- what the machine gave the run ------------------------------------------ */

/* The run's start: wall clock, this process's CPU time, the machine's load
 * (before the bench adds to it). */
typedef struct run_time {
    double wall0, cpu0;
    cli_load load;
} run_time;

static void start_run_time(run_time *t) {
    t->wall0 = now_s();
    t->cpu0 = cli_cpu_seconds();
    cli_load_read(&t->load);
}

/* The last row (bench_emit_run_time): the run's wall time beside its CPU
 * time and the load when it started. */
static void emit_run_time(const bench_opts *o, const run_time *t) {
    bench_emit_run_time(o, now_s() - t->wall0, cli_cpu_seconds() - t->cpu0, &t->load);
}

static void usage(FILE *f) {
    fprintf(f,
            "usage: ringkv bench [--quick] [--json] [--threads N] [--backend cpu|cuda]\n"
            "  Measures attention and upsert on this CPU against its own ceilings, sampled\n"
            "  between the measured runs: f32 attention against the best of OpenBLAS sgemm\n"
            "  and an FMA peak loop; bf16 against the best of a oneDNN bf16 matmul and a\n"
            "  bf16 peak loop (AMX tiles, AVX512-BF16, else the FMA peak), and bf16 on the\n"
            "  CPU's other candidate engine in the same rounds (the widening AVX-512 kernel\n"
            "  where bf16 pairs run by default; AVX512-BF16 where AVX-512 does); upsert against\n"
            "  memcpy of the same bytes; offload, page-in and export/import of a 360P\n"
            "  session, and snapshot/restore of a demo and a 360P session (warm: us per\n"
            "  call), against memcpy of the same bytes; and a 360P rollout. Every row\n"
            "  names the CPU, the OpenBLAS kernel, the instruction set and the ceiling's\n"
            "  kind; a ratio above 1.05 is flagged (ceiling_suspect) and said on stderr.\n"
            "  The last row, bench_seconds, is the run's wall time beside the CPU time it\n"
            "  got (cpu_seconds) and the load average before it (load_1min, ...) on\n"
            "  cpus_online CPUs: CPU time well under wall x threads, or a load near the\n"
            "  CPUs, means other work shared the machine and the rows are low for it.\n"
            "  One JSON object per line with --json. --quick finishes in under 2 minutes\n"
            "  on 2 cores.\n"
            "  --threads N: worker threads (default: the machine's cores).\n"
            "  --backend cuda: the GPU bench, on a CUDA model on GPU 0 (device copy\n"
            "  bandwidth; upsert in a CUDA graph against it; attention at the Waypoint-1.5\n"
            "  geometries per kernel, mma.sync and wgmma, with a float64 spot check; a\n"
            "  whole 720P frame in one graph and the sessions at 15 fps); builds with CUDA\n"
            "  only; refused (exit 2) where no GPU is seen. The CUDA backend has not yet\n"
            "  run on a GPU: no GPU run is recorded (bench/gpu/h200.jsonl, which\n"
            "  scripts/gpu_check.sh keeps the rows in, does not exist yet).\n\n"
            "Exit status: 0 done; 1 a failure during the run (a library call, memory,\n"
            "the GPU); 2 refused before any measurement: a bad option, or --backend cuda\n"
            "in a build without CUDA or where no GPU is seen ('ringkv help' has the rule).\n");
}

/* The options as the command line gives them (cli_parse_options). */
typedef struct bench_args {
    int json, quick, threads, backend; /* backend: 0 cpu, 1 cuda */
} bench_args;

#define OPT(field) offsetof(bench_args, field)
static const cli_option OPTIONS[] = {
    {"--json", 0, cli_set_flag, OPT(json), NULL, 0, 0, NULL},
    {"--quick", 0, cli_set_flag, OPT(quick), NULL, 0, 0, NULL},
    {"--threads", 1, cli_set_int, OPT(threads), "an integer in 1..1024", 1, 1024, NULL},
    {"--backend", 1, cli_set_choice, OPT(backend), "cpu or cuda", 0, 0, cli_backends},
};
#undef OPT

int rkv_cmd_bench(int argc, char **argv) {
    bench_args args = {0, 0, 0, 0};
    const int rc = cli_parse_options("bench", argc, argv, OPTIONS,
                                     sizeof OPTIONS / sizeof OPTIONS[0], &args, NULL, NULL, usage);
    if (rc >= 0) return rc;
    bench_opts o = {.json = args.json, .quick = args.quick, .threads = args.threads};
    const bool cuda = args.backend == CLI_BACKEND_CUDA;
    run_time t;
    start_run_time(&t);
    bench_machine machine;
    bench_machine_read(&machine);
    o.machine = &machine;
    if (cuda) { /* refused first (2) without CUDA or a GPU: nothing printed before */
        const int cuda_rc = bench_cuda_run(&o);
        if (cuda_rc == 0) emit_run_time(&o, &t);
        return cuda_rc;
    }
    bench_machine_warn(&o); /* notices about the CPU rows' OpenBLAS peer */
    rkv_threadpool *pool;
    check(rkv_threadpool_create(o.threads, &pool), "thread pool");
    o.threads = rkv_threadpool_size(pool);
    bench_emit_machine(&o);
    bench_attention(&o, pool);
    bench_upsert(&o);
    bench_offload(&o);
    bench_snapshot(&o);
    bench_rollout(&o, pool);
    rkv_threadpool_destroy(pool);
    emit_run_time(&o, &t);
    return 0;
}

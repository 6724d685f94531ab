/* The per-dtype ceilings of `ringkv bench` (ceiling.h): each the best of
 * library matrix products and the physical peak loops of peak.c, sampled
 * in turn with the subject they bound. */
#define _POSIX_C_SOURCE 200809L
#include "ceiling.h"

#ifdef RKV_HAVE_OPENBLAS
#include <cblas.h>
#endif
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "peak.h"

#ifdef RKV_HAVE_DNNL
#include <oneapi/dnnl/dnnl.h>
#include <omp.h>
#endif

#define MAX_PARTS 3
#define MAX_PEAKS 2
#define PEAK_REPS 3        /* runs of each peak loop per sample            */
#define PEAK_WINDOW_S 0.01 /* each run: every thread busy this long        */
#define PEAK_CHUNK_S 0.001 /* in chunks of about this long (the overshoot) */

typedef struct part part;
struct part {
    const char *row;   /* row name */
    const char *kind;  /* ceiling_kind when this part wins */
    char isa[96];      /* what ran: the loop's ISA, or library:kernel */
    double best;       /* GFLOP/s */
    int n;             /* matrix size (sgemm, oneDNN), 0 for loops */
    double (*sample)(part *p, int threads);
    void (*destroy)(part *p);
    /* peak loops: the kinds tried, each with its iteration count */
    int npeaks;
    peak_kind peaks[MAX_PEAKS];
    long iters[MAX_PEAKS]; /* per chunk */
    double peak_best[MAX_PEAKS];
    /* sgemm */
    float *a, *b, *c;
    void *lib; /* oneDNN state */
};

struct bench_ceiling {
    const bench_opts *o;
    rkv_dtype dtype;
    int nparts;
    part parts[MAX_PARTS];
};

/* The matrix-product parts (OpenBLAS, oneDNN) time and fill their matrices. */
#if defined(RKV_HAVE_OPENBLAS) || defined(RKV_HAVE_DNNL)
static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static uint64_t rng = 0x243f6a8885a308d3ull;
static void fill_f32(float *x, size_t n) { /* uniform in [-1, 1) */
    for (size_t i = 0; i < n; i++) {
        rng ^= rng >> 12, rng ^= rng << 25, rng ^= rng >> 27;
        x[i] = (float)((rng * 2685821657736338717ull) >> 40) / 8388608.0f - 1.0f;
    }
}
#endif

/* ---- OpenBLAS sgemm ------------------------------------------------------------ */
#ifdef RKV_HAVE_OPENBLAS

static double sgemm_sample(part *p, int threads) {
    openblas_set_num_threads(threads);
    const int n = p->n;
    const double t0 = now_s();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1, p->a, n, p->b, n, 0, p->c, n);
    return 2.0 * n * n * (double)n / (now_s() - t0) / 1e9;
}

static void sgemm_destroy(part *p) { free(p->a), free(p->b), free(p->c); }

static bool sgemm_init(part *p, const bench_opts *o) {
    const size_t nn = (size_t)p->n * (size_t)p->n;
    p->a = malloc(nn * sizeof(float)), p->b = malloc(nn * sizeof(float)), p->c = malloc(nn * sizeof(float));
    if (!p->a || !p->b || !p->c) return sgemm_destroy(p), false;
    fill_f32(p->a, nn), fill_f32(p->b, nn);
    p->row = "cpu_sgemm_gflops", p->kind = "sgemm_openblas";
    snprintf(p->isa, sizeof p->isa, "openblas:%s", o->machine->blas_core);
    p->sample = sgemm_sample, p->destroy = sgemm_destroy;
    sgemm_sample(p, o->threads); /* warm-up: OpenBLAS starts its threads */
    return true;
}
#endif /* RKV_HAVE_OPENBLAS */

/* ---- peak loops -------------------------------------------------------------------- */

static const char *peak_kind_name(peak_kind k) {
    switch (k) {
    case PEAK_AMX_BF16: return "amx_peak";
    case PEAK_BF16_DOT: return "avx512bf16_peak";
    case PEAK_FMA_AVX512: return "fma_peak_avx512";
    case PEAK_FMA_AVX2: return "fma_peak_avx2";
    default: return "fma_peak_generic";
    }
}

static double peak_sample(part *p, int threads) {
    double best = 0;
    for (int rep = 0; rep < PEAK_REPS; rep++) /* short runs: one may dodge a busy spell */
        for (int i = 0; i < p->npeaks; i++) {
            const double g = peak_run(p->peaks[i], threads, p->iters[i], PEAK_WINDOW_S) / 1e9;
            if (g > p->peak_best[i]) p->peak_best[i] = g;
            if (g > best) best = g;
        }
    /* the row names the loop that reached the best so far */
    int w = 0;
    for (int i = 1; i < p->npeaks; i++)
        if (p->peak_best[i] > p->peak_best[w]) w = i;
    snprintf(p->isa, sizeof p->isa, "%s", peak_isa(p->peaks[w]));
    p->kind = peak_kind_name(p->peaks[w]);
    return best;
}

/* The f32 FMA loops this CPU has, widest first. */
static int fma_peaks(const bench_machine *m, peak_kind *out) {
    int n = 0;
    if (m->avx512 && peak_built(PEAK_FMA_AVX512)) out[n++] = PEAK_FMA_AVX512;
    if (m->fma_avx2 && peak_built(PEAK_FMA_AVX2)) out[n++] = PEAK_FMA_AVX2;
    if (!n) out[n++] = PEAK_FMA_GENERIC;
    return n;
}

static void peak_init(part *p, const bench_opts *o, rkv_dtype dtype) {
    const bench_machine *m = o->machine;
    if (dtype == RKV_DTYPE_BF16 && m->amx && peak_built(PEAK_AMX_BF16))
        p->peaks[0] = PEAK_AMX_BF16, p->npeaks = 1;
    else if (dtype == RKV_DTYPE_BF16 && m->avx512bf16 && peak_built(PEAK_BF16_DOT))
        p->peaks[0] = PEAK_BF16_DOT, p->npeaks = 1;
    else
        p->npeaks = fma_peaks(m, p->peaks);
    p->row = dtype == RKV_DTYPE_BF16 ? "cpu_bf16_peak_gflops" : "cpu_fma_peak_gflops";
    p->kind = peak_kind_name(p->peaks[0]);
    snprintf(p->isa, sizeof p->isa, "%s", peak_isa(p->peaks[0]));
    for (int i = 0; i < p->npeaks; i++)
        p->iters[i] = peak_calibrate(p->peaks[i], PEAK_CHUNK_S);
    p->sample = peak_sample;
}

/* ---- oneDNN bf16 matrix product ------------------------------------------------------ */

#ifdef RKV_HAVE_DNNL
typedef struct {
    dnnl_engine_t engine;
    dnnl_stream_t stream;
    dnnl_primitive_t matmul;
    dnnl_memory_t src, weights, dst;
} onednn_state;

static void onednn_destroy(part *p) {
    onednn_state *s = p->lib;
    if (!s) return;
    if (s->matmul) dnnl_primitive_destroy(s->matmul);
    if (s->src) dnnl_memory_destroy(s->src);
    if (s->weights) dnnl_memory_destroy(s->weights);
    if (s->dst) dnnl_memory_destroy(s->dst);
    if (s->stream) dnnl_stream_destroy(s->stream);
    if (s->engine) dnnl_engine_destroy(s->engine);
    free(s);
    p->lib = NULL;
}

static double onednn_sample(part *p, int threads) {
    onednn_state *s = p->lib;
    omp_set_num_threads(threads);
    dnnl_exec_arg_t args[3] = {
        {DNNL_ARG_SRC, s->src}, {DNNL_ARG_WEIGHTS, s->weights}, {DNNL_ARG_DST, s->dst}};
    const double t0 = now_s();
    if (dnnl_primitive_execute(s->matmul, s->stream, 3, args) != dnnl_success ||
        dnnl_stream_wait(s->stream) != dnnl_success)
        return 0;
    const int n = p->n;
    return 2.0 * n * n * (double)n / (now_s() - t0) / 1e9;
}

/* bf16 values of n uniform random floats into a oneDNN memory's buffer. */
static bool onednn_fill(dnnl_memory_t mem, size_t n) {
    void *h = NULL;
    float *f = malloc(n * sizeof(float));
    if (!f || dnnl_memory_get_data_handle(mem, &h) != dnnl_success || !h) return free(f), false;
    fill_f32(f, n);
    const bool ok = rkv_convert(f, RKV_DTYPE_F32, h, RKV_DTYPE_BF16, n) == RKV_OK;
    free(f);
    return ok;
}

/* C[n][n] f32 = A[n][n] bf16 . B[n][n] bf16, B reordered once into the
 * layout the primitive chose ("pre-packed"), as an inference engine keeps
 * its weights. NULL with *why set when oneDNN has nothing better than its
 * reference kernel here or a call fails. */
static bool onednn_init(part *p, const bench_opts *o, const char **why) {
    onednn_state *s = calloc(1, sizeof *s);
    if (!s) return *why = "out of memory", false;
    p->lib = s, p->destroy = onednn_destroy;
    omp_set_num_threads(o->threads);
    const int64_t n = p->n;
    dnnl_dims_t dims = {n, n};
    dnnl_memory_desc_t src_md, any_md, plain_md, dst_md;
    dnnl_matmul_desc_t desc;
    dnnl_primitive_desc_t pd = NULL, rpd = NULL;
    dnnl_primitive_t reorder = NULL;
    dnnl_memory_t plain = NULL;
    const char *impl = "";
    bool ok = dnnl_engine_create(&s->engine, dnnl_cpu, 0) == dnnl_success &&
              dnnl_stream_create(&s->stream, s->engine, dnnl_stream_default_flags) == dnnl_success &&
              dnnl_memory_desc_init_by_tag(&src_md, 2, dims, dnnl_bf16, dnnl_ab) == dnnl_success &&
              dnnl_memory_desc_init_by_tag(&plain_md, 2, dims, dnnl_bf16, dnnl_ab) == dnnl_success &&
              dnnl_memory_desc_init_by_tag(&any_md, 2, dims, dnnl_bf16, dnnl_format_tag_any) == dnnl_success &&
              dnnl_memory_desc_init_by_tag(&dst_md, 2, dims, dnnl_f32, dnnl_ab) == dnnl_success &&
              dnnl_matmul_desc_init(&desc, &src_md, &any_md, NULL, &dst_md) == dnnl_success &&
              dnnl_primitive_desc_create(&pd, &desc, NULL, s->engine, NULL) == dnnl_success &&
              dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) == dnnl_success;
    if (!ok) *why = "oneDNN has no bf16 matmul for this CPU";
    if (ok && (!impl || !strncmp(impl, "ref", 3))) {
        *why = "oneDNN has only its reference bf16 matmul for this CPU";
        ok = false;
    }
    const dnnl_memory_desc_t *w_md = ok ? dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0) : NULL;
    ok = ok && w_md && dnnl_primitive_create(&s->matmul, pd) == dnnl_success &&
         dnnl_memory_create(&s->src, &src_md, s->engine, DNNL_MEMORY_ALLOCATE) == dnnl_success &&
         dnnl_memory_create(&s->dst, &dst_md, s->engine, DNNL_MEMORY_ALLOCATE) == dnnl_success &&
         dnnl_memory_create(&s->weights, w_md, s->engine, DNNL_MEMORY_ALLOCATE) == dnnl_success &&
         dnnl_memory_create(&plain, &plain_md, s->engine, DNNL_MEMORY_ALLOCATE) == dnnl_success &&
         onednn_fill(s->src, (size_t)(n * n)) && onednn_fill(plain, (size_t)(n * n)) &&
         dnnl_reorder_primitive_desc_create(&rpd, &plain_md, s->engine, w_md, s->engine, NULL) ==
             dnnl_success &&
         dnnl_primitive_create(&reorder, rpd) == dnnl_success;
    if (ok) {
        dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, plain}, {DNNL_ARG_TO, s->weights}};
        ok = dnnl_primitive_execute(reorder, s->stream, 2, args) == dnnl_success &&
             dnnl_stream_wait(s->stream) == dnnl_success;
        if (!ok) *why = "oneDNN could not pack the weights";
    } else if (!*why) {
        *why = "oneDNN could not set up the bf16 matmul";
    }
    if (ok) snprintf(p->isa, sizeof p->isa, "onednn:%s", impl);
    if (reorder) dnnl_primitive_destroy(reorder);
    if (rpd) dnnl_primitive_desc_destroy(rpd);
    if (pd) dnnl_primitive_desc_destroy(pd);
    if (plain) dnnl_memory_destroy(plain);
    if (!ok) return onednn_destroy(p), false;
    p->row = "cpu_onednn_bf16_gflops", p->kind = "onednn_bf16_matmul";
    p->sample = onednn_sample;
    return onednn_sample(p, o->threads) > 0; /* warm-up */
}
#endif

/* ---- the ceiling ---------------------------------------------------------------------- */

bench_ceiling *bench_ceiling_create(const bench_opts *o, rkv_dtype dtype) {
    if (dtype != RKV_DTYPE_F32 && dtype != RKV_DTYPE_BF16) return NULL;
    bench_ceiling *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->o = o, c->dtype = dtype;
    FILE *err = o->err ? o->err : stderr;
    if (dtype == RKV_DTYPE_F32) {
#ifdef RKV_HAVE_OPENBLAS
        part *p = &c->parts[c->nparts];
        p->n = o->quick ? 1024 : 2048;
        if (sgemm_init(p, o)) c->nparts++;
        else fprintf(err, "ringkv bench: out of memory for the sgemm ceiling; left out\n");
#else
        fprintf(err, "ringkv bench: built without OpenBLAS: the f32 ceiling is the FMA peak "
                     "loop alone\n");
#endif
    } else {
#ifdef RKV_HAVE_DNNL
        part *p = &c->parts[c->nparts];
        const char *why = NULL;
        p->n = 2048;
        if (onednn_init(p, o, &why)) c->nparts++;
        else {
            fprintf(err, "ringkv bench: bf16 ceiling without oneDNN's matmul: %s\n",
                    why ? why : "it failed");
            memset(p, 0, sizeof *p);
        }
#else
        fprintf(err, "ringkv bench: built without oneDNN (libdnnl-dev): the bf16 ceiling is "
                     "the bf16 peak loop alone\n");
#endif
    }
    peak_init(&c->parts[c->nparts++], o, dtype);
    return c;
}

void bench_ceiling_sample(bench_ceiling *c) {
    for (int i = 0; i < c->nparts; i++) {
        part *p = &c->parts[i];
        const double g = p->sample(p, c->o->threads);
        if (g > p->best) p->best = g;
    }
}

/* The part of c that runs peak loops (the last one; bench_ceiling_create). */
static part *peak_part(bench_ceiling *c) { return &c->parts[c->nparts - 1]; }

bool bench_ceiling_share_peak(bench_ceiling *a, bench_ceiling *b) {
    part *pa = peak_part(a), *pb = peak_part(b);
    if (pa->npeaks != pb->npeaks ||
        memcmp(pa->peaks, pb->peaks, (size_t)pa->npeaks * sizeof pa->peaks[0]))
        return false;
    part *w = pa->best >= pb->best ? pa : pb, *l = w == pa ? pb : pa;
    l->best = w->best, l->kind = w->kind;
    memcpy(l->peak_best, w->peak_best, sizeof l->peak_best);
    memcpy(l->isa, w->isa, sizeof l->isa);
    return true;
}

double bench_ceiling_best(const bench_ceiling *c, const char **kind) {
    double best = 0;
    *kind = "none";
    for (int i = 0; i < c->nparts; i++)
        if (c->parts[i].best > best) best = c->parts[i].best, *kind = c->parts[i].kind;
    return best;
}

void bench_ceiling_emit(const bench_ceiling *c) {
    for (int i = 0; i < c->nparts; i++) {
        const part *p = &c->parts[i];
        cJSON *params = cJSON_CreateObject();
        cJSON_AddStringToObject(params, "dtype", rkv_dtype_name(c->dtype));
        cJSON_AddNumberToObject(params, "threads", c->o->threads);
        if (p->n) cJSON_AddNumberToObject(params, "n", p->n);
        cJSON_AddStringToObject(params, "isa", p->isa);
        cJSON_AddStringToObject(params, "part_of", c->dtype == RKV_DTYPE_F32 ? "f32 ceiling" : "bf16 ceiling");
        bench_emit(c->o, p->row, p->best, "GFLOP/s", params, 0, NULL);
    }
}

void bench_ceiling_destroy(bench_ceiling *c) {
    if (!c) return;
    for (int i = 0; i < c->nparts; i++)
        if (c->parts[i].destroy) c->parts[i].destroy(&c->parts[i]);
    free(c);
}

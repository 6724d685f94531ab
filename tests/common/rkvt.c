/* The helpers every ringkv test program shares (rkvt.h). */
#define _POSIX_C_SOURCE 200809L /* fork, pipe, strcasecmp */
#include "rkvt.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ring_oracle.h"

#define GAMMA 0x9E3779B97F4A7C15ull

static uint64_t finalize(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

uint64_t rkvt_mix(uint64_t x) { return finalize(x + GAMMA); }

uint64_t rkvt_next(rkvt_rng *r) { return finalize(r->s += GAMMA); }

float rkvt_unit(uint64_t u) {
    const int64_t k = (int64_t)(u >> 43) - (1 << 20); /* [-2^20, 2^20) */
    return (float)(k ? k : 1) / (float)(1 << 20);
}

float rkvt_uniform(rkvt_rng *r) { return rkvt_unit(rkvt_next(r)); }

int64_t rkvt_randint(rkvt_rng *r, int64_t n) { return (int64_t)(rkvt_next(r) % (uint64_t)n); }

rkv_status rkvt_fill(void *dst, rkv_dtype dt, size_t n, float amp, rkvt_rng *r) {
    float *tmp = malloc((n ? n : 1) * sizeof *tmp);
    if (!tmp) return RKV_ERR_NO_MEMORY;
    for (size_t i = 0; i < n; i++) tmp[i] = amp * rkvt_uniform(r);
    const rkv_status st = rkv_convert(tmp, RKV_DTYPE_F32, dst, dt, n);
    free(tmp);
    return st;
}

float rkvt_f16_to_f32(uint16_t h) {
    const int sign = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    float v;
    if (e == 0) v = ldexpf((float)m, -24);
    else if (e == 31) v = m ? NAN : INFINITY;
    else v = ldexpf((float)(m | 1024), e - 25);
    return sign ? -v : v;
}

float rkvt_bf16_to_f32(uint16_t b) {
    const uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

double rkvt_get(const void *base, rkv_dtype dt, size_t i) {
    if (dt == RKV_DTYPE_F32) {
        float f;
        memcpy(&f, (const char *)base + 4 * i, 4);
        return f;
    }
    uint16_t u;
    memcpy(&u, (const char *)base + 2 * i, 2);
    return dt == RKV_DTYPE_F16 ? rkvt_f16_to_f32(u) : rkvt_bf16_to_f32(u);
}

/* The relative error over element accessors (got and ref as doubles). */
typedef struct pair_src {
    const void *got, *ref;
    rkv_dtype got_dt;
    int ref_f64; /* ref is double[], else float[] */
} pair_src;

static double ref_at(const pair_src *p, size_t i) {
    return p->ref_f64 ? ((const double *)p->ref)[i] : (double)((const float *)p->ref)[i];
}

static double rel_err(const pair_src *p, size_t n, size_t *worst) {
    double num = 0, den = 0, big = -1;
    int finite = 1;
    size_t w = 0;
    for (size_t i = 0; i < n; i++) {
        const double x = rkvt_get(p->got, p->got_dt, i), r = ref_at(p, i), d = x - r;
        num += d * d;
        den += r * r;
        if (!isfinite(x)) {
            if (finite) w = i;
            finite = 0;
        } else if (finite && fabs(d) > big) {
            big = fabs(d);
            w = i;
        }
    }
    if (worst) *worst = w;
    if (!finite || !isfinite(num)) return INFINITY;
    if (den == 0) return num == 0 ? 0 : INFINITY;
    return sqrt(num / den);
}

double rkvt_rel_err(const float *got, const float *ref, size_t n, size_t *worst) {
    const pair_src p = {got, ref, RKV_DTYPE_F32, 0};
    return rel_err(&p, n, worst);
}

double rkvt_rel_err_f64(const void *got, rkv_dtype dt, const double *ref, size_t n,
                        size_t *worst) {
    const pair_src p = {got, ref, dt, 1};
    return rel_err(&p, n, worst);
}

int rkvt_check_close(const char *what, const char *geometry, const void *got, rkv_dtype dt,
                     const double *ref, size_t n, double tol, char *msg, size_t len) {
    size_t worst = 0;
    const double err = rkvt_rel_err_f64(got, dt, ref, n, &worst);
    if (err <= tol) return 0;
    double scale = 0;
    for (size_t i = 0; i < n; i++)
        if (fabs(ref[i]) > scale) scale = fabs(ref[i]);
    size_t first = worst;
    for (size_t i = 0; i < n; i++)
        if (!(fabs(rkvt_get(got, dt, i) - ref[i]) <= tol * scale)) { /* NaN counts */
            first = i;
            break;
        }
    snprintf(msg, len,
             "%s%s%s%s: relative error %.3g > %.3g; first element off by more than %.3g x "
             "max|ref| at index %zu: got %.9g, expected %.9g; largest difference at index %zu: "
             "got %.9g, expected %.9g",
             what, geometry ? " (" : "", geometry ? geometry : "", geometry ? ")" : "", err, tol,
             tol, first, rkvt_get(got, dt, first), ref[first], worst, rkvt_get(got, dt, worst),
             ref[worst]);
    return -1;
}

void rkvt_describe_geometry(const rkv_geometry *g, char *out, size_t len) {
    snprintf(out, len, "S %lld, H %lld, RF %lld, RB %lld, D %lld, T %lld, PD %lld, %s",
             (long long)g->num_sessions, (long long)g->n_kv_heads, (long long)g->ring_frames,
             (long long)g->ring_buckets, (long long)g->d_head, (long long)g->tokens_per_frame,
             (long long)g->pinned_dilation, rkv_dtype_name(g->dtype));
}

void rkvt_describe_config(const rkv_model_config *c, char *out, size_t len) {
    int n = snprintf(out, len, "S %lld, Hq %lld, H %lld, D %lld, T %lld, %s, layers (RF/RB/PD)",
                     (long long)c->num_sessions, (long long)c->n_q_heads,
                     (long long)c->n_kv_heads, (long long)c->d_head,
                     (long long)c->tokens_per_frame, rkv_dtype_name(c->dtype));
    for (int64_t l = 0; l < c->n_layers && n > 0 && (size_t)n < len; l++)
        n += snprintf(out + n, len - (size_t)n, " %lld/%lld/%lld",
                      (long long)c->layers[l].ring_frames, (long long)c->layers[l].ring_buckets,
                      (long long)c->layers[l].pinned_dilation);
}

int64_t rkvt_visible_frames(const rkv_geometry *g, const uint8_t *written, int64_t s, int64_t f,
                            int64_t *frames) {
    const int64_t T = g->tokens_per_frame, C = (g->ring_frames + 1) * T;
    return rkvt_rule_frames(written + s * C, T, g->ring_frames, g->ring_buckets,
                            g->pinned_dilation, f, frames);
}

void rkvt_attend_row(const rkv_geometry *g, const void *kv, int64_t kvh, const int64_t *slots,
                     int64_t n, const double *q, double scale, double *w, double *out) {
    const int64_t H = g->n_kv_heads, D = g->d_head;
    const int64_t N = g->num_sessions * (g->ring_frames + 1) * g->tokens_per_frame;
    double mx = -INFINITY, sum = 0;
    for (int64_t j = 0; j < n; j++) {
        double dot = 0;
        for (int64_t d = 0; d < D; d++)
            dot += q[d] * rkvt_get(kv, g->dtype, (size_t)((kvh * N + slots[j]) * D + d));
        w[j] = dot * scale;
        if (w[j] > mx) mx = w[j];
    }
    if (mx == -INFINITY) mx = 0; /* every score -inf: weights 0, not NaN */
    for (int64_t j = 0; j < n; j++) sum += (w[j] = exp(w[j] - mx));
    for (int64_t d = 0; d < D; d++) out[d] = 0;
    for (int64_t j = 0; j < n; j++)
        for (int64_t d = 0; d < D; d++)
            out[d] += (sum != 0 ? w[j] / sum : 0) *
                      rkvt_get(kv, g->dtype, (size_t)(((H + kvh) * N + slots[j]) * D + d));
}

/* ---- how much a test runs ---------------------------------------------------------- */

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define RKVT_SANITIZER_BUILD 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define RKVT_SANITIZER_BUILD 1
#endif
#endif
#ifndef RKVT_SANITIZER_BUILD
#define RKVT_SANITIZER_BUILD 0
#endif

int rkvt_sanitized(void) {
    const char *env = getenv("RKV_SANITIZED");
    if (env && (env[0] == '0' || env[0] == '1') && env[1] == '\0') return env[0] == '1';
    return RKVT_SANITIZER_BUILD;
}

/* The kernel this CPU picks without RKV_ISA, asked in a child process;
 * "" when the child could not answer. */
static void default_isa(char *out, size_t n) {
    int fd[2];
    out[0] = '\0';
    if (n == 0 || pipe(fd) != 0) return;
    fflush(NULL);
    const pid_t pid = fork();
    if (pid == 0) {
        close(fd[0]);
        unsetenv("RKV_ISA");
        const char *isa = rkv_attention_isa(NULL);
        const ssize_t w = write(fd[1], isa, strlen(isa));
        _exit(w < 0 ? 1 : 0);
    }
    close(fd[1]);
    if (pid > 0) {
        size_t got = 0;
        ssize_t r;
        while (got + 1 < n && (r = read(fd[0], out + got, n - 1 - got)) > 0) got += (size_t)r;
        out[got] = '\0';
        int status = 0;
        if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
            out[0] = '\0';
    }
    close(fd[0]);
}

int rkvt_isa_entry_redundant(char *why, size_t n) {
    const char *want = getenv("RKV_ISA");
    if (!want || !*want) return 0;
    char dflt[32];
    default_isa(dflt, sizeof dflt);
    if (!dflt[0]) return 0;
    const char *isa = rkv_attention_isa(NULL);
    if (strcasecmp(isa, want) != 0) { /* RKV_ISA is read in any case */
        if (!strcmp(isa, dflt))
            snprintf(why, n,
                     "this CPU has no %s kernel: RKV_ISA=%s runs %s, the kernel it picks without "
                     "RKV_ISA, which the plain entry tests",
                     want, want, isa);
        else
            snprintf(why, n,
                     "this CPU has no %s kernel: RKV_ISA=%s runs %s, which the entry with "
                     "RKV_ISA=%s tests",
                     want, want, isa, isa);
        return 1;
    }
    if (!strcmp(isa, dflt)) {
        snprintf(why, n, "%s is the kernel this CPU picks without RKV_ISA: the plain entry tests it",
                 isa);
        return 1;
    }
    return 0;
}

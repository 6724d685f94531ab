/*
 * The helpers every ringkv test program shares, the CPU tests (cmocka,
 * tests/testutil.h builds on these) and the GPU programs and the backend-
 * parity suite (plain C, tests/cuda/cuda_test_util.h) alike: the static
 * library rkv_testlib (tests/common/rkvt.c, tests/common/testlib.cmake).
 * Plain C11, no cmocka, no CUDA header; nothing here aborts.
 *
 * The oracles are written from SEMANTICS.md without the library's help (the
 * decoders of f16/bf16 storage, the bits-and-clock rule, the float64
 * attention), so that a test compares the library with something
 * independent of it; only rkvt_fill converts with rkv_convert (tested on
 * its own by test_dtype.c).
 */
#ifndef RKV_TESTS_RKVT_H
#define RKV_TESTS_RKVT_H

#include <stddef.h>
#include <stdint.h>

#include "ringkv.h"
#include "ringkv_backend.h"

/* ---- random inputs ---------------------------------------------------------- */

/* splitmix64's output function of x + 0x9E3779B97F4A7C15: a well-mixed
 * 64-bit value of any key. */
uint64_t rkvt_mix(uint64_t x);

/* splitmix64: state s, advanced by the golden gamma at each draw. */
typedef struct rkvt_rng {
    uint64_t s;
} rkvt_rng;
uint64_t rkvt_next(rkvt_rng *r);
/* A uniform value in [-1, 1) on a 2^-20 grid, never exactly 0, from the top
 * 21 bits of u. */
float rkvt_unit(uint64_t u);
/* rkvt_unit of the next draw. */
float rkvt_uniform(rkvt_rng *r);
/* Uniform in [0, n), n >= 1. */
int64_t rkvt_randint(rkvt_rng *r, int64_t n);
/* n values amp * rkvt_uniform into a host buffer dst in dtype dt
 * (rkv_convert's rounding); RKV_OK, or its status (out of memory: RKV_ERR_NO_MEMORY). */
rkv_status rkvt_fill(void *dst, rkv_dtype dt, size_t n, float amp, rkvt_rng *r);

/* ---- decoding storage -------------------------------------------------------------- */

float rkvt_f16_to_f32(uint16_t h);
float rkvt_bf16_to_f32(uint16_t b);
/* Element i of a host buffer in dtype dt (f32, f16 or bf16), as a double. */
double rkvt_get(const void *base, rkv_dtype dt, size_t i);

/* ---- comparing ------------------------------------------------------------------------ */

/* The norm-wise relative error ||got - ref|| / ||ref|| in double (0 when both
 * are 0, INFINITY when only ref is 0 or when got has a value that is not
 * finite, so NaN never passes a bound). When worst is not NULL it receives
 * the index of the largest |got - ref| (the first non-finite one first).
 * rkvt_rel_err: both f32 (the GPU programs, the parity suite);
 * rkvt_rel_err_f64: got in dtype dt (f32, f16, bf16) against a float64
 * reference (the CPU tests' oracles). */
double rkvt_rel_err(const float *got, const float *ref, size_t n, size_t *worst);
double rkvt_rel_err_f64(const void *got, rkv_dtype dt, const double *ref, size_t n,
                        size_t *worst);

/* got (in dtype dt) against the float64 ref within tol (rkvt_rel_err_f64).
 * 0 when within; else -1 with msg = "WHAT (GEOMETRY): relative error E >
 * TOL; first element off by more than TOL x max|ref| at index I: got G,
 * expected R; largest difference at index J: got G, expected R".
 * `geometry` is the caller's description (rkvt_describe_geometry,
 * rkvt_describe_config) or NULL. */
int rkvt_check_close(const char *what, const char *geometry, const void *got, rkv_dtype dt,
                     const double *ref, size_t n, double tol, char *msg, size_t len);

/* "S 2, H 1, RF 4, RB 4, D 64, T 16, PD 1, bf16" */
void rkvt_describe_geometry(const rkv_geometry *g, char *out, size_t len);
/* "S 2, Hq 4, H 1, D 64, T 16, bf16, layers (RF/RB/PD) 4/4/1 17/16/8" */
void rkvt_describe_config(const rkv_model_config *c, char *out, size_t len);

/* ---- oracles (SEMANTICS 4, 5) ------------------------------------------------------- */

/* The visible frames of session s at clock f by the bits-and-clock rule
 * (rkvt_rule_frames of ring_oracle.h, the tests' ring rule), from a host
 * copy of the written bits [N]: ring frames ascending, minus the hidden
 * one, the scratch (RF) last. frames holds RF + 1; returns the count. */
int64_t rkvt_visible_frames(const rkv_geometry *g, const uint8_t *written, int64_t s, int64_t f,
                            int64_t *frames);

/* float64 attention of one query row q[D] over the keys at `slots`
 * (n of them, in the order given) of KV head kvh of a host copy of the
 * storage kv [2][H][N][D] in g->dtype: out[D] = sum_j softmax(scale * q.K_j)
 * V_j, with w[n] as scratch. No key, or every score -inf, gives 0 (ringkv.h's
 * definition); +inf or NaN scores give NaN. */
void rkvt_attend_row(const rkv_geometry *g, const void *kv, int64_t kvh, const int64_t *slots,
                     int64_t n, const double *q, double scale, double *w, double *out);

/* ---- how much a test runs (issue 10 s.6: the test command's time) ----------------- */

/* 1 under AddressSanitizer, UndefinedBehaviorSanitizer or ThreadSanitizer
 * (as rkvt.c is compiled: the same build as the tests), where the heavy
 * tests run smaller sizes and fewer repetitions: every code path, dtype and
 * edge case still runs and every assertion still holds; only the counts
 * shrink. The environment variable RKV_SANITIZED overrides it: 1 = the
 * small sizes (in any build), 0 = the full ones (scripts/test.sh sets 1 for
 * its sanitizer build). */
int rkvt_sanitized(void);
/* full in a plain build, small under a sanitizer. */
#define RKVT_SIZE(full, small) (rkvt_sanitized() ? (small) : (full))

/* The per-ISA ctest entries (RKV_ISA=x, tests/CMakeLists.txt) test each CPU
 * kernel once: 1 when this process runs under RKV_ISA=x and x is a kernel
 * this CPU lacks (RKV_ISA falls to a lower one, which its own entry tests)
 * or the one it picks without RKV_ISA (the plain entry tests it); `why`
 * (n bytes) then says which and why. 0 without RKV_ISA, and whenever the
 * default kernel cannot be asked (the entry then runs: never a skip by
 * accident). The default is asked in a child process (the library reads
 * RKV_ISA once per process): call this first in main(), before anything
 * picks a kernel. */
int rkvt_isa_entry_redundant(char *why, size_t n);

/* The reference attention (the oracle, ringkv_cpu.h) on layer l's bytes:
 * l's storage wrapped on the reference table, then rkv_layer_attend, the
 * same checks and errors (a NULL layer: rkv_layer_attend's refusal). */
static inline rkv_status rkvt_attend_reference(const rkv_layer *l, const rkv_attention_args *a) {
    if (!l) return rkv_layer_attend(NULL, a);
    const rkv_backend_storage st = {(void *)rkv_layer_kv(l), (uint8_t *)rkv_layer_written(l), NULL};
    rkv_layer *ref = NULL;
    rkv_status s = rkv_layer_wrap(rkv_backend_cpu_reference(), NULL, rkv_layer_geometry(l), &st,
                                  &ref);
    if (s != RKV_OK) return s;
    s = rkv_layer_attend(ref, a);
    rkv_layer_destroy(ref);
    return s;
}

#endif

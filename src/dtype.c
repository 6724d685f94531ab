/* Element types: the dtype table (sizes, names, conversions to and from f32). */
#include <math.h>
#include <string.h>

#include "internal.h"

static inline uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static inline float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline float bf16_to_f32(uint16_t h) { return bits_f32((uint32_t)h << 16); }

static inline uint16_t f32_to_bf16(float f) {
    uint32_t u = f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);                                          /* RNE */
    return (uint16_t)(u >> 16);
}

static inline float f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    if (exp == 0x1f) return bits_f32(sign | 0x7f800000u | (man << 13));
    if (exp == 0) { /* zero or subnormal: man * 2^-24 */
        float v = (float)man * 5.9604644775390625e-8f;
        return sign ? -v : v;
    }
    return bits_f32(sign | ((exp + 112u) << 23) | (man << 13));
}

static inline uint16_t f32_to_f16(float f) {
    uint32_t u = f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return sign | 0x7e00u;  /* NaN */
    if (a >= 0x477ff000u) return sign | 0x7c00u; /* rounds to >= 65520: inf */
    if (a < 0x38800000u) {                       /* below 2^-14: subnormal or zero */
        /* value / 2^-24, rounded to nearest even, by adding 0.5 in f32 */
        float v = bits_f32(a) * 16777216.0f; /* exact scaling by 2^24 */
        uint32_t m = (uint32_t)lrintf(v);    /* default rounding mode: nearest even */
        return sign | (uint16_t)m;           /* m <= 0x400 rolls into the normal range */
    }
    uint32_t r = a + 0xfffu + ((a >> 13) & 1u); /* RNE on the dropped 13 bits */
    return sign | (uint16_t)((r - 0x38000000u) >> 13);
}

/* n elements of one dtype to and from f32: tight loops the compiler
 * vectorizes (rkv_convert runs them over chunks). */
#define CONVERSIONS(NAME, T, TO_F32, FROM_F32)                                                    \
    static void widen_##NAME(const void *src, float *dst, size_t n) {                            \
        for (size_t i = 0; i < n; i++) dst[i] = TO_F32(((const T *)src)[i]);                      \
    }                                                                                             \
    static void narrow_##NAME(const float *src, void *dst, size_t n) {                          \
        for (size_t i = 0; i < n; i++) ((T *)dst)[i] = FROM_F32(src[i]);                          \
    }
#define SAME(x) (x)
CONVERSIONS(f32, float, SAME, SAME)
CONVERSIONS(f16, uint16_t, f16_to_f32, f32_to_f16)
CONVERSIONS(bf16, uint16_t, bf16_to_f32, f32_to_bf16)

/* The dtype table: one row per rkv_dtype, indexed by its value; every size,
 * name and f32 conversion of the library and the snapshot format. */
static const struct dtype_row {
    size_t size;
    const char *names[3];    /* rkv_dtype_name's, then other spellings parsed */
    const char *safetensors; /* the snapshot's tensor dtype                  */
    void (*widen)(const void *src, float *dst, size_t n);   /* n elements to f32   */
    void (*narrow)(const float *src, void *dst, size_t n);  /* from f32, nearest even */
} rows[] = {
    [RKV_DTYPE_F32] = {4, {"f32", "float32"}, "F32", widen_f32, narrow_f32},
    [RKV_DTYPE_F16] = {2, {"f16", "float16", "half"}, "F16", widen_f16, narrow_f16},
    [RKV_DTYPE_BF16] = {2, {"bf16", "bfloat16"}, "BF16", widen_bf16, narrow_bf16},
};
#define N_ROWS (sizeof rows / sizeof rows[0])

/* True when dtype is one of the enum's values (a row of the table). */
static bool dtype_valid(rkv_dtype dtype) { return (unsigned)dtype < N_ROWS; }

size_t rkv_dtype_size(rkv_dtype dtype) { return dtype_valid(dtype) ? rows[dtype].size : 0; }

const char *rkv_dtype_name(rkv_dtype dtype) {
    return dtype_valid(dtype) ? rows[dtype].names[0] : NULL;
}

const char *rkv__dtype_safetensors(rkv_dtype dtype) {
    return dtype_valid(dtype) ? rows[dtype].safetensors : "?";
}

rkv_status rkv_dtype_parse(const char *name, rkv_dtype *out) {
    RKV__REQUIRE("rkv_dtype_parse", name);
    RKV__REQUIRE("rkv_dtype_parse", out);
    for (size_t d = 0; d < N_ROWS; d++)
        for (size_t k = 0; k < 3 && rows[d].names[k]; k++)
            if (!strcmp(name, rows[d].names[k])) {
                *out = (rkv_dtype)d;
                return RKV_OK;
            }
    return rkv__fail(RKV_ERR_DTYPE, "unknown dtype '%s'; expected " RKV_DTYPE_NAMES, name);
}

float rkv__load(const void *base, rkv_dtype dtype, size_t i) {
    float v = NAN;
    if (dtype_valid(dtype)) rows[dtype].widen((const char *)base + i * rows[dtype].size, &v, 1);
    return v;
}

void rkv__store(void *base, rkv_dtype dtype, size_t i, float v) {
    if (dtype_valid(dtype)) rows[dtype].narrow(&v, (char *)base + i * rows[dtype].size, 1);
}

rkv_status rkv_convert(const void *src, rkv_dtype src_dtype, void *dst, rkv_dtype dst_dtype,
                       size_t n) {
    if (!dtype_valid(src_dtype) || !dtype_valid(dst_dtype))
        return rkv__fail(RKV_ERR_DTYPE, "rkv_convert: unknown dtype (src %d, dst %d)",
                         (int)src_dtype, (int)dst_dtype);
    if (n == 0) return RKV_OK;
    if (!src || !dst) return rkv__fail(RKV_ERR_NULL, "rkv_convert: src or dst is NULL");
    size_t bytes, dst_bytes;
    if (__builtin_mul_overflow(n, rkv_dtype_size(src_dtype), &bytes) ||
        __builtin_mul_overflow(n, rkv_dtype_size(dst_dtype), &dst_bytes))
        return rkv__fail(RKV_ERR_OVERFLOW, "rkv_convert: %zu elements overflow size_t", n);
    if (src_dtype == dst_dtype) {
        if (src != dst) memmove(dst, src, bytes);
        return RKV_OK;
    }
    /* element by element: a destination over the source would be read after
     * it was written */
    const rkv__buf out = {dst, dst_bytes, "dst"}, in = {src, bytes, "src"};
    rkv_status st = rkv__check_no_overlap("rkv_convert", &out, 1, &in, 1);
    if (st != RKV_OK) return st;
    const struct dtype_row *from = &rows[src_dtype], *to = &rows[dst_dtype];
    float f32[512];
    for (size_t i = 0, k; i < n; i += k) {
        k = n - i < 512 ? n - i : 512;
        from->widen((const char *)src + i * from->size, f32, k);
        to->narrow(f32, (char *)dst + i * to->size, k);
    }
    return RKV_OK;
}

rkv_status rkv__check_kv_dtype(const char *what, rkv_dtype got, rkv_dtype want) {
    if (got == want) return RKV_OK;
    return rkv__fail(RKV_ERR_DTYPE, "%s: kv dtype %d (%s) does not match the storage dtype %s",
                     what, (int)got, rkv_dtype_name(got) ? rkv_dtype_name(got) : "unknown",
                     rkv_dtype_name(want));
}

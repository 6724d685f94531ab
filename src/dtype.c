/* Element types: sizes, names, and conversions between f32, f16 and bf16. */
#include <math.h>
#include <string.h>

#include "internal.h"

bool rkv__dtype_valid(rkv_dtype dtype) {
    return dtype == RKV_DTYPE_F32 || dtype == RKV_DTYPE_F16 || dtype == RKV_DTYPE_BF16;
}

size_t rkv_dtype_size(rkv_dtype dtype) {
    switch (dtype) {
    case RKV_DTYPE_F32: return 4;
    case RKV_DTYPE_F16: return 2;
    case RKV_DTYPE_BF16: return 2;
    }
    return 0;
}

const char *rkv_dtype_name(rkv_dtype dtype) {
    switch (dtype) {
    case RKV_DTYPE_F32: return "f32";
    case RKV_DTYPE_F16: return "f16";
    case RKV_DTYPE_BF16: return "bf16";
    }
    return NULL;
}

rkv_status rkv_dtype_parse(const char *name, rkv_dtype *out) {
    RKV__REQUIRE("rkv_dtype_parse", name);
    RKV__REQUIRE("rkv_dtype_parse", out);
    static const struct { const char *name; rkv_dtype dtype; } names[] = {
        {"f32", RKV_DTYPE_F32},  {"float32", RKV_DTYPE_F32}, {"f16", RKV_DTYPE_F16},
        {"float16", RKV_DTYPE_F16}, {"half", RKV_DTYPE_F16}, {"bf16", RKV_DTYPE_BF16},
        {"bfloat16", RKV_DTYPE_BF16},
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!strcmp(name, names[i].name)) {
            *out = names[i].dtype;
            return RKV_OK;
        }
    return rkv__fail(RKV_ERR_DTYPE, "unknown dtype '%s'; expected f32, f16 or bf16", name);
}

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

float rkv__load(const void *base, rkv_dtype dtype, size_t i) {
    switch (dtype) {
    case RKV_DTYPE_F32: return ((const float *)base)[i];
    case RKV_DTYPE_F16: return f16_to_f32(((const uint16_t *)base)[i]);
    case RKV_DTYPE_BF16: return bf16_to_f32(((const uint16_t *)base)[i]);
    }
    return NAN;
}

void rkv__store(void *base, rkv_dtype dtype, size_t i, float v) {
    switch (dtype) {
    case RKV_DTYPE_F32: ((float *)base)[i] = v; break;
    case RKV_DTYPE_F16: ((uint16_t *)base)[i] = f32_to_f16(v); break;
    case RKV_DTYPE_BF16: ((uint16_t *)base)[i] = f32_to_bf16(v); break;
    }
}

rkv_status rkv_convert(const void *src, rkv_dtype src_dtype, void *dst, rkv_dtype dst_dtype,
                       size_t n) {
    if (!rkv__dtype_valid(src_dtype) || !rkv__dtype_valid(dst_dtype))
        return rkv__fail(RKV_ERR_DTYPE, "rkv_convert: unknown dtype (src %d, dst %d)",
                         (int)src_dtype, (int)dst_dtype);
    if (n == 0) return RKV_OK;
    if (!src || !dst) return rkv__fail(RKV_ERR_NULL, "rkv_convert: src or dst is NULL");
    size_t bytes;
    if (!rkv__mul_size(n, rkv_dtype_size(src_dtype), &bytes))
        return rkv__fail(RKV_ERR_OVERFLOW, "rkv_convert: %zu elements overflow size_t", n);
    if (src_dtype == dst_dtype) {
        if (src != dst) memmove(dst, src, bytes);
        return RKV_OK;
    }
    /* element by element: a destination over the source would be read after
     * it was written */
    size_t dst_bytes;
    if (!rkv__mul_size(n, rkv_dtype_size(dst_dtype), &dst_bytes))
        return rkv__fail(RKV_ERR_OVERFLOW, "rkv_convert: %zu elements overflow size_t", n);
    const rkv__buf out = {dst, dst_bytes, "dst"}, in = {src, bytes, "src"};
    rkv_status st = rkv__check_no_overlap("rkv_convert", &out, 1, &in, 1);
    if (st != RKV_OK) return st;
    for (size_t i = 0; i < n; i++) rkv__store(dst, dst_dtype, i, rkv__load(src, src_dtype, i));
    return RKV_OK;
}

/* Version, status names, element types and conversions. */
#include "testutil.h"

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static float bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static void test_last_error_initially_empty(void **state)
{
    (void)state;
    /* runs first: nothing has failed on this thread yet */
    const char *m = rkv_last_error();
    assert_non_null(m);
    assert_string_equal(m, "");
}

static void test_version(void **state)
{
    (void)state;
    char want[64];
    snprintf(want, sizeof want, "%d.%d.%d", RKV_VERSION_MAJOR,
             RKV_VERSION_MINOR, RKV_VERSION_PATCH);
    assert_non_null(rkv_version());
    assert_string_equal(rkv_version(), want);
    /* the header's string and the library's are the same macros */
    assert_string_equal(RKV_VERSION_STRING, want);
    /* CMake's project version (the .so's name, ringkv.pc's Version) is
     * read from the same macros (cmake/ringkv_version.cmake); ringkv.pc
     * itself is checked by the install_and_link test */
    assert_string_equal(RKV_PROJECT_VERSION, want);
}

static void test_status_str(void **state)
{
    (void)state;
    static const struct {
        rkv_status st;
        const char *name;
    } names[] = {
        {RKV_OK, "RKV_OK"},
        {RKV_ERR_INVALID_ARG, "RKV_ERR_INVALID_ARG"},
        {RKV_ERR_NULL, "RKV_ERR_NULL"},
        {RKV_ERR_RANGE, "RKV_ERR_RANGE"},
        {RKV_ERR_OVERFLOW, "RKV_ERR_OVERFLOW"},
        {RKV_ERR_NO_MEMORY, "RKV_ERR_NO_MEMORY"},
        {RKV_ERR_DTYPE, "RKV_ERR_DTYPE"},
        {RKV_ERR_CLOCK, "RKV_ERR_CLOCK"},
        {RKV_ERR_FULL, "RKV_ERR_FULL"},
        {RKV_ERR_NOT_FOUND, "RKV_ERR_NOT_FOUND"},
        {RKV_ERR_STATE, "RKV_ERR_STATE"},
        {RKV_ERR_FORMAT, "RKV_ERR_FORMAT"},
        {RKV_ERR_IO, "RKV_ERR_IO"},
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        assert_non_null(rkv_status_str(names[i].st));
        assert_string_equal(rkv_status_str(names[i].st), names[i].name);
    }
    assert_string_equal(rkv_status_str((rkv_status)1), "unknown status");
    assert_string_equal(rkv_status_str((rkv_status)-13), "unknown status");
    assert_string_equal(rkv_status_str((rkv_status)-1000), "unknown status");
}

static void test_dtype_size_name(void **state)
{
    (void)state;
    assert_int_equal(rkv_dtype_size(RKV_DTYPE_F32), 4);
    assert_int_equal(rkv_dtype_size(RKV_DTYPE_F16), 2);
    assert_int_equal(rkv_dtype_size(RKV_DTYPE_BF16), 2);
    assert_int_equal(rkv_dtype_size((rkv_dtype)3), 0);
    assert_int_equal(rkv_dtype_size((rkv_dtype)-1), 0);
    assert_string_equal(rkv_dtype_name(RKV_DTYPE_F32), "f32");
    assert_string_equal(rkv_dtype_name(RKV_DTYPE_F16), "f16");
    assert_string_equal(rkv_dtype_name(RKV_DTYPE_BF16), "bf16");
    assert_null(rkv_dtype_name((rkv_dtype)3));
    assert_null(rkv_dtype_name((rkv_dtype)-1));
}

/* RKV_DTYPE_NAMES, the list the messages and --help texts print, names
 * every dtype of the table in enum order. */
static void test_dtype_names_list_the_table(void **state)
{
    (void)state;
    const char *at = RKV_DTYPE_NAMES;
    int n = 0;
    for (; rkv_dtype_name((rkv_dtype)n); n++) {
        at = strstr(at, rkv_dtype_name((rkv_dtype)n));
        assert_non_null(at);
    }
    assert_int_equal(n, 3);
}

static void test_dtype_parse(void **state)
{
    (void)state;
    static const struct {
        const char *s;
        rkv_dtype dt;
    } ok[] = {
        {"f32", RKV_DTYPE_F32},   {"float32", RKV_DTYPE_F32},
        {"f16", RKV_DTYPE_F16},   {"float16", RKV_DTYPE_F16},
        {"half", RKV_DTYPE_F16},  {"bf16", RKV_DTYPE_BF16},
        {"bfloat16", RKV_DTYPE_BF16},
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        rkv_dtype d = (rkv_dtype)99;
        TU_OK(rkv_dtype_parse(ok[i].s, &d));
        assert_int_equal(d, ok[i].dt);
        /* the name round-trips */
        rkv_dtype d2 = (rkv_dtype)99;
        TU_OK(rkv_dtype_parse(rkv_dtype_name(d), &d2));
        assert_int_equal(d2, d);
    }
    static const char *bad[] = {"f64", "", "bf", "float", "f32 ", "int8",
                                "f16x"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        rkv_dtype d = (rkv_dtype)99;
        if (bad[i][0])
            TU_ERR(rkv_dtype_parse(bad[i], &d), RKV_ERR_DTYPE, bad[i]);
        else
            TU_ERR(rkv_dtype_parse(bad[i], &d), RKV_ERR_DTYPE, NULL);
        assert_int_equal(d, 99); /* untouched */
    }
    rkv_dtype d = (rkv_dtype)99;
    TU_ERR(rkv_dtype_parse(NULL, &d), RKV_ERR_NULL, NULL);
    assert_int_equal(d, 99);
    TU_ERR(rkv_dtype_parse("f32", NULL), RKV_ERR_NULL, NULL);
}

static uint16_t to_bf16(float f)
{
    uint16_t out = 0xDEAD;
    TU_OK(rkv_convert(&f, RKV_DTYPE_F32, &out, RKV_DTYPE_BF16, 1));
    return out;
}
static uint16_t to_f16(float f)
{
    uint16_t out = 0xDEAD;
    TU_OK(rkv_convert(&f, RKV_DTYPE_F32, &out, RKV_DTYPE_F16, 1));
    return out;
}

static void test_convert_bf16_rounding(void **state)
{
    (void)state;
    assert_int_equal(to_bf16(1.0f), 0x3F80);
    assert_int_equal(to_bf16(-2.0f), 0xC000);
    assert_int_equal(to_bf16(0.0f), 0x0000);
    assert_int_equal(to_bf16(-0.0f), 0x8000);
    /* 1 + 2^-8: halfway between 0x3F80 and 0x3F81, ties to even */
    assert_int_equal(to_bf16(bits_f32(0x3F808000u)), 0x3F80);
    /* 1 + 3*2^-8: halfway between 0x3F81 and 0x3F82, ties to even */
    assert_int_equal(to_bf16(bits_f32(0x3F818000u)), 0x3F82);
    /* just above half: rounds up */
    assert_int_equal(to_bf16(bits_f32(0x3F808001u)), 0x3F81);
    /* just below half: rounds down */
    assert_int_equal(to_bf16(bits_f32(0x3F807FFFu)), 0x3F80);
    assert_int_equal(to_bf16(INFINITY), 0x7F80);
    assert_int_equal(to_bf16(-INFINITY), 0xFF80);
    /* the largest float rounds to infinity in bf16 */
    assert_int_equal(to_bf16(bits_f32(0x7F7FFFFFu)), 0x7F80);
    /* NaN stays NaN (also a NaN whose payload sits only in the low bits) */
    uint16_t n1 = to_bf16(NAN);
    assert_true((n1 & 0x7F80) == 0x7F80 && (n1 & 0x7F) != 0);
    uint16_t n2 = to_bf16(bits_f32(0x7F800001u));
    assert_true((n2 & 0x7F80) == 0x7F80 && (n2 & 0x7F) != 0);
    /* subnormal bf16 */
    assert_int_equal(to_bf16(bits_f32(0x00010000u)), 0x0001);
}

static void test_convert_f16_rounding(void **state)
{
    (void)state;
    assert_int_equal(to_f16(1.0f), 0x3C00);
    assert_int_equal(to_f16(-2.0f), 0xC000);
    assert_int_equal(to_f16(0.5f), 0x3800);
    assert_int_equal(to_f16(-0.0f), 0x8000);
    assert_int_equal(to_f16(65504.0f), 0x7BFF);
    /* 65520 is halfway to 65536 (not representable): ties to even = inf */
    assert_int_equal(to_f16(65520.0f), 0x7C00);
    assert_int_equal(to_f16(65519.0f), 0x7BFF);
    assert_int_equal(to_f16(1e10f), 0x7C00);
    assert_int_equal(to_f16(-1e10f), 0xFC00);
    assert_int_equal(to_f16(INFINITY), 0x7C00);
    /* 1 + 2^-11: halfway between 0x3C00 and 0x3C01, ties to even */
    assert_int_equal(to_f16(1.0f + ldexpf(1, -11)), 0x3C00);
    assert_int_equal(to_f16(1.0f + 3 * ldexpf(1, -11)), 0x3C02);
    assert_int_equal(to_f16(1.0f + ldexpf(1, -11) + ldexpf(1, -20)),
                     0x3C01);
    /* subnormals */
    assert_int_equal(to_f16(ldexpf(1, -24)), 0x0001);
    assert_int_equal(to_f16(ldexpf(1, -25)), 0x0000);     /* tie -> even 0 */
    assert_int_equal(to_f16(3 * ldexpf(1, -25)), 0x0002); /* tie -> even 2 */
    assert_int_equal(to_f16(ldexpf(1, -25) * 1.0001f), 0x0001);
    assert_int_equal(to_f16(ldexpf(1, -14)), 0x0400); /* smallest normal */
    assert_int_equal(to_f16(ldexpf(1023, -24)), 0x03FF);
    assert_int_equal(to_f16(1e-10f), 0x0000);
    uint16_t n = to_f16(NAN);
    assert_true((n & 0x7C00) == 0x7C00 && (n & 0x3FF) != 0);
    n = to_f16(bits_f32(0x7F800001u));
    assert_true((n & 0x7C00) == 0x7C00 && (n & 0x3FF) != 0);
}

/* Every f16 and bf16 bit pattern widens exactly to f32 and narrows back
 * (NaN stays NaN). */
static void test_convert_widen_narrow_all_patterns(void **state)
{
    (void)state;
    uint16_t *h = tu_xmalloc(65536 * 2), *back = tu_xmalloc(65536 * 2);
    float *f = tu_xmalloc(65536 * 4);
    for (uint32_t i = 0; i < 65536; i++)
        h[i] = (uint16_t)i;
    for (int k = 0; k < 2; k++) {
        rkv_dtype dt = k ? RKV_DTYPE_BF16 : RKV_DTYPE_F16;
        TU_OK(rkv_convert(h, dt, f, RKV_DTYPE_F32, 65536));
        TU_OK(rkv_convert(f, RKV_DTYPE_F32, back, dt, 65536));
        for (uint32_t i = 0; i < 65536; i++) {
            float want = dt == RKV_DTYPE_F16 ? rkvt_f16_to_f32((uint16_t)i)
                                             : rkvt_bf16_to_f32((uint16_t)i);
            if (isnan(want)) {
                if (!isnan(f[i]))
                    fail_msg("%s 0x%04x: NaN widened to %g",
                             rkv_dtype_name(dt), i, f[i]);
                assert_true(isnan(dt == RKV_DTYPE_F16
                                      ? rkvt_f16_to_f32(back[i])
                                      : rkvt_bf16_to_f32(back[i])));
            } else {
                if (f32_bits(f[i]) != f32_bits(want))
                    fail_msg("%s 0x%04x widened to %a, expected %a",
                             rkv_dtype_name(dt), i, f[i], want);
                assert_int_equal(back[i], i);
            }
        }
    }
    /* bf16 -> f16 and back for values exact in both */
    float vals[] = {1.0f, -0.5f, 3.0f, 0.125f, -96.0f, 0.0f};
    uint16_t b[6], hf[6], b2[6];
    TU_OK(rkv_convert(vals, RKV_DTYPE_F32, b, RKV_DTYPE_BF16, 6));
    TU_OK(rkv_convert(b, RKV_DTYPE_BF16, hf, RKV_DTYPE_F16, 6));
    TU_OK(rkv_convert(hf, RKV_DTYPE_F16, b2, RKV_DTYPE_BF16, 6));
    for (int i = 0; i < 6; i++) {
        assert_true(rkvt_f16_to_f32(hf[i]) == vals[i]);
        assert_int_equal(b2[i], b[i]);
    }
    free(h);
    free(back);
    free(f);
}

static void test_convert_same_dtype_in_place(void **state)
{
    (void)state;
    float x[5] = {1.5f, -2.25f, 0.0f, 1e30f, -7.0f};
    float y[5];
    memcpy(y, x, sizeof x);
    TU_OK(rkv_convert(y, RKV_DTYPE_F32, y, RKV_DTYPE_F32, 5));
    assert_memory_equal(x, y, sizeof x);
    float z[5] = {0};
    TU_OK(rkv_convert(x, RKV_DTYPE_F32, z, RKV_DTYPE_F32, 5));
    assert_memory_equal(x, z, sizeof x);
    uint16_t h[3] = {0x3C00, 0xC000, 0x7BFF}, h0[3];
    memcpy(h0, h, sizeof h);
    TU_OK(rkv_convert(h, RKV_DTYPE_F16, h, RKV_DTYPE_F16, 3));
    assert_memory_equal(h, h0, sizeof h);
    /* n = 0 converts nothing */
    float w = 42.0f;
    TU_OK(rkv_convert(x, RKV_DTYPE_F32, &w, RKV_DTYPE_BF16, 0));
    assert_true(w == 42.0f);
}

static void test_convert_errors(void **state)
{
    (void)state;
    float x[2] = {1, 2};
    uint16_t y[2] = {7, 7};
    TU_ERR(rkv_convert(NULL, RKV_DTYPE_F32, y, RKV_DTYPE_F16, 2),
           RKV_ERR_NULL, NULL);
    TU_ERR(rkv_convert(x, RKV_DTYPE_F32, NULL, RKV_DTYPE_F16, 2),
           RKV_ERR_NULL, NULL);
    TU_ERR(rkv_convert(x, (rkv_dtype)5, y, RKV_DTYPE_F16, 2), RKV_ERR_DTYPE,
           "5");
    TU_ERR(rkv_convert(x, RKV_DTYPE_F32, y, (rkv_dtype)6, 2), RKV_ERR_DTYPE,
           "6");
    assert_int_equal(y[0], 7);
    assert_int_equal(y[1], 7);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_last_error_initially_empty),
        cmocka_unit_test(test_version),
        cmocka_unit_test(test_status_str),
        cmocka_unit_test(test_dtype_size_name),
        cmocka_unit_test(test_dtype_names_list_the_table),
        cmocka_unit_test(test_dtype_parse),
        cmocka_unit_test(test_convert_bf16_rounding),
        cmocka_unit_test(test_convert_f16_rounding),
        cmocka_unit_test(test_convert_widen_narrow_all_patterns),
        cmocka_unit_test(test_convert_same_dtype_in_place),
        cmocka_unit_test(test_convert_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

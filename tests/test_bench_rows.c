/* The row emitter of `ringkv bench` (bench/row.c), with no timing: every row
 * carries the keys the bench promises (the old ones and the machine facts),
 * and a ratio above 1 beyond the 5% noise is flagged in the row and on
 * stderr, one within it is not; integers print as integers. */
#define _POSIX_C_SOURCE 200809L
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

typedef struct {
    bench_machine m;
    bench_opts o;
    char *out, *err;
    size_t out_n, err_n;
} capture;

static void capture_open(capture *c, bool json, const char *coretype) {
    memset(c, 0, sizeof *c);
    snprintf(c->m.cpu_model, sizeof c->m.cpu_model, "Test CPU 9000");
    snprintf(c->m.blas_core, sizeof c->m.blas_core, "Prescott");
    snprintf(c->m.openblas_coretype, sizeof c->m.openblas_coretype, "%s", coretype);
    c->m.isa = "avx512";
    c->o.json = json;
    c->o.threads = 2;
    c->o.machine = &c->m;
    c->o.out = open_memstream(&c->out, &c->out_n);
    c->o.err = open_memstream(&c->err, &c->err_n);
    assert_non_null(c->o.out);
    assert_non_null(c->o.err);
}

static void capture_close(capture *c) {
    fclose(c->o.out);
    fclose(c->o.err);
}

static void capture_free(capture *c) { free(c->out), free(c->err); }

/* An attention-like row: the params the CPU bench gives its attention rows. */
static cJSON *attention_params(const char *isa) {
    cJSON *p = cJSON_CreateObject();
    cJSON_AddStringToObject(p, "dtype", "f32");
    cJSON_AddNumberToObject(p, "B", 1);
    cJSON_AddStringToObject(p, "preset", "waypoint-1.5-360p");
    cJSON_AddNumberToObject(p, "threads", 2);
    if (isa) cJSON_AddStringToObject(p, "isa", isa);
    return p;
}

/* Emits one JSON row; returns it parsed (caller frees) and stderr's text. */
static cJSON *emit_one(capture *c, double value, double ceiling, const char *kind, const char *isa) {
    bench_emit(&c->o, "attention_gflops", value, "GFLOP/s", attention_params(isa), ceiling, kind);
    capture_close(c);
    cJSON *row = cJSON_Parse(c->out);
    assert_non_null(row);
    /* exactly one line */
    assert_non_null(strchr(c->out, '\n'));
    assert_int_equal(strchr(c->out, '\n') - c->out + 1, (long)strlen(c->out));
    return row;
}

static const char *str_of(const cJSON *row, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(row, key);
    assert_true(cJSON_IsString(v));
    return v->valuestring;
}

static double num_of(const cJSON *row, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(row, key);
    assert_true(cJSON_IsNumber(v));
    return v->valuedouble;
}

static void test_row_has_every_key(void **state) {
    (void)state;
    capture c;
    capture_open(&c, true, "");
    cJSON *row = emit_one(&c, 90.0, 100.0, "fma_peak_avx512", NULL);
    assert_string_equal(str_of(row, "name"), "attention_gflops");
    assert_true(num_of(row, "value") == 90.0);
    assert_string_equal(str_of(row, "unit"), "GFLOP/s");
    assert_string_equal(str_of(row, "dtype"), "f32");
    assert_true(num_of(row, "B") == 1);
    assert_string_equal(str_of(row, "preset"), "waypoint-1.5-360p");
    assert_true(num_of(row, "threads") == 2);
    assert_true(num_of(row, "ceiling") == 100.0);
    assert_true(num_of(row, "ratio") == 0.9);
    assert_string_equal(str_of(row, "ceiling_kind"), "fma_peak_avx512");
    assert_string_equal(str_of(row, "cpu_model"), "Test CPU 9000");
    assert_string_equal(str_of(row, "blas_core"), "Prescott");
    assert_string_equal(str_of(row, "isa"), "avx512"); /* the machine's: params had none */
    assert_true(cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(row, "ceiling_suspect")));
    assert_null(cJSON_GetObjectItemCaseSensitive(row, "openblas_coretype")); /* not set */
    assert_string_equal(c.err, ""); /* nothing to say */
    cJSON_Delete(row);
    capture_free(&c);
}

static void test_ratio_above_noise_is_flagged(void **state) {
    (void)state;
    capture c;
    capture_open(&c, true, "");
    cJSON *row = emit_one(&c, 510.0, 100.0, "sgemm_openblas", "amx");
    assert_true(num_of(row, "ratio") == 5.1);
    assert_true(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(row, "ceiling_suspect")));
    assert_string_equal(str_of(row, "isa"), "amx"); /* the row's own isa wins */
    /* said on stderr: which row, the ratio, the ceiling's kind */
    assert_non_null(strstr(c.err, "attention_gflops"));
    assert_non_null(strstr(c.err, "5.100"));
    assert_non_null(strstr(c.err, "sgemm_openblas"));
    assert_non_null(strstr(c.err, "ceiling_suspect"));
    cJSON_Delete(row);
    capture_free(&c);
}

static void test_ratio_bounds(void **state) {
    (void)state;
    bool suspect = true;
    assert_true(bench_ratio(104.0, 100.0, &suspect) == 1.04);
    assert_false(suspect); /* within the noise */
    bench_ratio(105.0, 100.0, &suspect);
    assert_false(suspect); /* the bound itself is allowed */
    bench_ratio(105.1, 100.0, &suspect);
    assert_true(suspect);
    bench_ratio(1.06, 1.0, &suspect);
    assert_true(suspect);
    bench_ratio(NAN, 1.0, &suspect);
    assert_true(suspect); /* a NaN ratio is no measurement either */

    capture c; /* just above the noise, through the emitter */
    capture_open(&c, true, "");
    cJSON *row = emit_one(&c, 1.06, 1.0, "memcpy", NULL);
    assert_true(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(row, "ceiling_suspect")));
    assert_non_null(strstr(c.err, "1.060"));
    cJSON_Delete(row);
    capture_free(&c);
    capture_open(&c, true, ""); /* and just within it */
    row = emit_one(&c, 1.04, 1.0, "memcpy", NULL);
    assert_true(cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(row, "ceiling_suspect")));
    assert_string_equal(c.err, "");
    cJSON_Delete(row);
    capture_free(&c);
}

static void test_row_without_ceiling(void **state) {
    (void)state;
    capture c;
    capture_open(&c, true, "");
    cJSON *row = emit_one(&c, 7.5, 0, NULL, NULL);
    assert_null(cJSON_GetObjectItemCaseSensitive(row, "ceiling"));
    assert_null(cJSON_GetObjectItemCaseSensitive(row, "ratio"));
    assert_null(cJSON_GetObjectItemCaseSensitive(row, "ceiling_suspect"));
    assert_string_equal(str_of(row, "ceiling_kind"), "none");
    assert_string_equal(str_of(row, "cpu_model"), "Test CPU 9000");
    assert_string_equal(str_of(row, "blas_core"), "Prescott");
    assert_string_equal(str_of(row, "isa"), "avx512");
    cJSON_Delete(row);
    capture_free(&c);
}

static void test_coretype_from_environment_is_reported(void **state) {
    (void)state;
    capture c;
    capture_open(&c, true, "Haswell");
    cJSON *row = emit_one(&c, 1, 2, "fma_peak_avx2", NULL);
    assert_string_equal(str_of(row, "openblas_coretype"), "Haswell");
    cJSON_Delete(row);
    capture_free(&c);
}

static void test_text_row_marks_suspect(void **state) {
    (void)state;
    capture c;
    capture_open(&c, false, "");
    bench_emit(&c.o, "attention_gflops", 300, "GFLOP/s", attention_params(NULL), 60, "sgemm_openblas");
    bench_emit(&c.o, "attention_gflops", 50, "GFLOP/s", attention_params(NULL), 60, "sgemm_openblas");
    capture_close(&c);
    char *second = strchr(c.out, '\n');
    assert_non_null(second);
    *second++ = '\0';
    assert_non_null(strstr(c.out, "ratio 5.000 of 60.00 (sgemm_openblas) CEILING SUSPECT"));
    assert_non_null(strstr(second, "ratio 0.833 of 60.00 (sgemm_openblas)"));
    assert_null(strstr(second, "SUSPECT"));
    assert_non_null(strstr(c.err, "attention_gflops"));
    capture_free(&c);
}

/* Integer parameters (byte counts above %g's 6 digits) print as integers,
 * in text and in JSON; fractions as numbers. */
static void test_integers_print_whole(void **state) {
    (void)state;
    for (int json = 0; json <= 1; json++) {
        capture c;
        capture_open(&c, json, "");
        cJSON *p = cJSON_CreateObject();
        cJSON_AddNumberToObject(p, "bytes", 213962752);
        cJSON_AddNumberToObject(p, "region_bytes", 8589934592.0); /* 8 GiB, above 2^31 */
        cJSON_AddNumberToObject(p, "share", 0.25);
        bench_emit(&c.o, "export_import_gbps", 9.5, "GB/s", p, 10, "memcpy");
        capture_close(&c);
        const char *want[] = {json ? "\"bytes\":213962752" : " bytes=213962752",
                              json ? "\"region_bytes\":8589934592" : " region_bytes=8589934592",
                              json ? "\"share\":0.25" : " share=0.25"};
        for (int i = 0; i < 3; i++) {
            if (!strstr(c.out, want[i])) fail_msg("no '%s' in %s", want[i], c.out);
        }
        assert_null(strstr(c.out, "e+"));
        capture_free(&c);
    }
}

/* The last row, bench_seconds: the wall time beside the CPU time and the
 * load when the run started (docs/json.md), in JSON and text; the load
 * averages left out where the system has none. */
static void test_run_time_row(void **state) {
    (void)state;
    for (int known = 0; known <= 1; known++) {
        capture c;
        capture_open(&c, true, "");
        const cli_load load = {{3.25, 2.5, 1.0}, known, 2};
        bench_emit_run_time(&c.o, 90.5, 120.25, &load);
        capture_close(&c);
        cJSON *row = cJSON_Parse(c.out);
        assert_non_null(row);
        assert_string_equal(str_of(row, "name"), "bench_seconds");
        assert_string_equal(str_of(row, "unit"), "s");
        assert_true(num_of(row, "value") == 90.5);
        assert_true(num_of(row, "cpu_seconds") == 120.25);
        assert_true(num_of(row, "threads") == 2);
        assert_true(num_of(row, "cpus_online") == 2);
        assert_string_equal(str_of(row, "ceiling_kind"), "none");
        const char *keys[3] = {"load_1min", "load_5min", "load_15min"};
        for (int k = 0; k < 3; k++) {
            if (known) assert_true(num_of(row, keys[k]) == load.avg[k]);
            else assert_null(cJSON_GetObjectItemCaseSensitive(row, keys[k]));
        }
        cJSON_Delete(row);
        capture_free(&c);
    }
    capture c;
    capture_open(&c, false, "");
    const cli_load load = {{3.25, 2.5, 1.0}, 1, 2};
    bench_emit_run_time(&c.o, 90.5, 120.25, &load);
    capture_close(&c);
    if (!strstr(c.out, "bench_seconds") || !strstr(c.out, " cpu_seconds=120.25") ||
        !strstr(c.out, " load_1min=3.25") || !strstr(c.out, " cpus_online=2"))
        fail_msg("text row: %s", c.out);
    capture_free(&c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_row_has_every_key),
        cmocka_unit_test(test_ratio_above_noise_is_flagged),
        cmocka_unit_test(test_ratio_bounds),
        cmocka_unit_test(test_row_without_ceiling),
        cmocka_unit_test(test_coretype_from_environment_is_reported),
        cmocka_unit_test(test_text_row_marks_suspect),
        cmocka_unit_test(test_integers_print_whole),
        cmocka_unit_test(test_run_time_row),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

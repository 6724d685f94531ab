/* The one row emitter of `ringkv bench` (bench.h): every row, CPU and CUDA,
 * carries the same machine facts and the same ratio check. A ratio above 1
 * beyond run-to-run noise is a measurement error -- the ceiling is then not
 * this machine's limit -- so it is said on stderr and marked in the row. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "json_out.h"

double bench_ratio(double value, double ceiling, bool *suspect) {
    const double r = value / ceiling;
    *suspect = !(r <= BENCH_RATIO_NOISE); /* NaN too */
    return r;
}

static double round3(double x) { return round(x * 1000) / 1000; }

static void add_string_if_absent(cJSON *row, const char *key, const char *value) {
    if (!cJSON_HasObjectItem(row, key)) cJSON_AddStringToObject(row, key, value);
}

static void emit_json(FILE *out, const bench_machine *m, const char *name, double value,
                      const char *unit, const cJSON *params, double ceiling, double ratio,
                      bool suspect, const char *kind) {
    cJSON *row = cJSON_CreateObject();
    cJSON_AddStringToObject(row, "name", name);
    cJSON_AddNumberToObject(row, "value", round3(value));
    cJSON_AddStringToObject(row, "unit", unit);
    for (const cJSON *p = params ? params->child : NULL; p; p = p->next)
        cJSON_AddItemToObject(row, p->string, cJSON_Duplicate(p, 1));
    if (ceiling > 0) {
        cJSON_AddNumberToObject(row, "ceiling", round3(ceiling));
        cJSON_AddNumberToObject(row, "ratio", round3(ratio));
        cJSON_AddBoolToObject(row, "ceiling_suspect", suspect);
    }
    add_string_if_absent(row, "ceiling_kind", kind);
    add_string_if_absent(row, "isa", m->isa ? m->isa : "unknown");
    add_string_if_absent(row, "cpu_model", m->cpu_model);
    add_string_if_absent(row, "blas_core", m->blas_core);
    if (m->openblas_coretype[0]) add_string_if_absent(row, "openblas_coretype", m->openblas_coretype);
    char *s = cli_json_print(row, 0);
    fprintf(out, "%s\n", s);
    free(s);
    cJSON_Delete(row);
}

/* Whether x is an integer a double holds exactly (|x| <= 2^53). */
static bool is_exact_integer(double x) { return x == floor(x) && fabs(x) <= 9007199254740992.0; }

static void emit_text(FILE *out, const char *name, double value, const char *unit,
                      const cJSON *params, double ceiling, double ratio, bool suspect,
                      const char *kind) {
    char extra[320] = "";
    size_t n = 0;
    for (const cJSON *p = params ? params->child : NULL; p && n < sizeof extra - 64; p = p->next) {
        if (cJSON_IsBool(p))
            n += (size_t)snprintf(extra + n, sizeof extra - n, " %s=%s", p->string,
                                  cJSON_IsTrue(p) ? "true" : "false");
        else if (cJSON_IsString(p))
            n += (size_t)snprintf(extra + n, sizeof extra - n, " %s=%s", p->string, p->valuestring);
        else if (is_exact_integer(p->valuedouble)) /* byte counts, B, threads: all digits */
            n += (size_t)snprintf(extra + n, sizeof extra - n, " %s=%.0f", p->string,
                                  p->valuedouble);
        else
            n += (size_t)snprintf(extra + n, sizeof extra - n, " %s=%g", p->string, p->valuedouble);
    }
    if (ceiling > 0)
        fprintf(out, "%-32s %10.2f %-8s ratio %.3f of %.2f (%s)%s%s\n", name, value, unit, ratio,
                ceiling, kind, suspect ? " CEILING SUSPECT" : "", extra);
    else
        fprintf(out, "%-32s %10.2f %-8s%s\n", name, value, unit, extra);
}

void bench_emit(const bench_opts *o, const char *name, double value, const char *unit,
                cJSON *params, double ceiling, const char *ceiling_kind) {
    FILE *out = o->out ? o->out : stdout, *err = o->err ? o->err : stderr;
    const char *kind = ceiling_kind ? ceiling_kind : "none";
    bool suspect = false;
    const double ratio = ceiling > 0 ? bench_ratio(value, ceiling, &suspect) : 0;
    if (suspect)
        fprintf(err,
                "ringkv bench: %s is %.3f of its ceiling (%.2f %s, %s), above 1 beyond the %.0f%% "
                "noise allowed: the ceiling is not this machine's limit (marked "
                "ceiling_suspect)\n",
                name, ratio, ceiling, unit, kind, (BENCH_RATIO_NOISE - 1) * 100);
    if (o->json) emit_json(out, o->machine, name, value, unit, params, ceiling, ratio, suspect, kind);
    else emit_text(out, name, value, unit, params, ceiling, ratio, suspect, kind);
    fflush(out);
    cJSON_Delete(params);
}

void bench_emit_machine(const bench_opts *o) {
    if (o->json) return;
    const bench_machine *m = o->machine;
    char ct[96] = "";
    if (m->openblas_coretype[0]) snprintf(ct, sizeof ct, " (OPENBLAS_CORETYPE=%s)", m->openblas_coretype);
    fprintf(o->out ? o->out : stdout, "machine: %s; OpenBLAS core %s%s; ringkv kernel %s\n",
            m->cpu_model, m->blas_core, ct, m->isa ? m->isa : "unknown");
}

void bench_emit_run_time(const bench_opts *o, double wall_s, double cpu_s, const cli_load *load) {
    cJSON *p = cJSON_CreateObject();
    cJSON_AddNumberToObject(p, "cpu_seconds", round3(cpu_s));
    if (o->threads > 0) cJSON_AddNumberToObject(p, "threads", o->threads);
    cJSON_AddNumberToObject(p, "cpus_online", (double)load->cpus);
    if (load->known) {
        static const char *const KEYS[3] = {"load_1min", "load_5min", "load_15min"};
        for (int k = 0; k < 3; k++) cJSON_AddNumberToObject(p, KEYS[k], round(load->avg[k] * 100) / 100);
    }
    bench_emit(o, "bench_seconds", wall_s, "s", p, 0, NULL);
}

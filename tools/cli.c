/* Shared command-line conventions of `ringkv` (cli.h). */
#define _POSIX_C_SOURCE 200809L
#define _DEFAULT_SOURCE /* getloadavg */

#include "cli.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../src/atomic_file.h" /* rkv__file_kind */
#include "escape.h"
#include "ringkv.h"

const char CLI_EXIT_RULE[] =
    "Exit status (every command): 0 done; 1 a failure at run time (a library call,\n"
    "the GPU, memory or a write failed, or the work found a fault: replay's\n"
    "comparisons, inspect's verdicts); 2 refused before any work (an unknown\n"
    "command or option, an option given twice, a bad value, an input file that is\n"
    "missing, unreadable, not a regular file, not of its kind or not matching the\n"
    "other options, an output path that cannot be written or is not a regular\n"
    "file, a run too big for the memory available, --backend cuda where no GPU is\n"
    "seen; the CUDA backend has not yet run on a GPU: no GPU run is recorded).\n";

/* Length of a leading "rkv_identifier: " in s, else 0. */
static size_t function_prefix(const char *s) {
    if (strncmp(s, "rkv_", 4)) return 0;
    size_t i = 4;
    while ((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '_') i++;
    return s[i] == ':' && s[i + 1] == ' ' ? i + 2 : 0;
}

const char *cli_lib_detail(const char *path) {
    const char *m = rkv_last_error();
    m += function_prefix(m);
    if (path && *path) { /* the library shows a path escaped (as rkv_tool_shown) */
        const char *shown = rkv_tool_shown(path);
        const size_t n = strlen(shown);
        if (!strncmp(m, shown, n) && m[n] == ':' && m[n + 1] == ' ') m += n + 2;
    }
    return m;
}

int cli_check_input_file(const char *what, const char *path, const char *expected, char *err,
                         size_t n) {
    struct stat st;
    if (stat(path, &st) != 0) {
        snprintf(err, n, "%s '%s': %s", what, rkv_tool_shown(path),
                 errno == ENOENT ? "no such file" : strerror(errno));
        return -1;
    }
    if (S_ISDIR(st.st_mode)) {
        snprintf(err, n, "%s '%s' is a folder, not %s", what, rkv_tool_shown(path), expected);
        return -1;
    }
    if (!S_ISREG(st.st_mode)) { /* a pipe would block the open, a device never end */
        snprintf(err, n, "%s '%s' is %s, not a regular file; expected %s", what,
                 rkv_tool_shown(path), rkv__file_kind(st.st_mode), expected);
        return -1;
    }
    /* O_NONBLOCK: should the path have become a pipe since the stat */
    const int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        snprintf(err, n, "%s '%s': cannot open: %s", what, rkv_tool_shown(path), strerror(errno));
        return -1;
    }
    close(fd);
    return 0;
}

void cli_load_read(cli_load *l) {
    memset(l, 0, sizeof *l);
    l->known = getloadavg(l->avg, 3) == 3;
    const long n = sysconf(_SC_NPROCESSORS_ONLN);
    l->cpus = n > 0 ? n : 0;
}

double cli_cpu_seconds(void) {
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru)) return 0.0;
    return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
           1e-6 * (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

/* The number of leading decimal digits of s. */
static size_t digits(const char *s) {
    size_t n = 0;
    while (s[n] >= '0' && s[n] <= '9') n++;
    return n;
}

int cli_parse_int64(const char *s, int64_t lo, int64_t hi, int64_t *out) {
    const size_t sign = lo < 0 && s[0] == '-';
    const size_t n = digits(s + sign);
    if (n == 0 || s[sign + n] != '\0') return -1;
    errno = 0;
    const long long v = strtoll(s, NULL, 10);
    if (errno || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

int cli_parse_uint64(const char *s, uint64_t *out) {
    const size_t n = digits(s);
    if (n == 0 || s[n] != '\0') return -1;
    errno = 0;
    const unsigned long long v = strtoull(s, NULL, 10);
    if (errno) return -1;
    *out = v;
    return 0;
}

int cli_parse_real(const char *s, double lo, double hi, double *out) {
    const size_t whole = digits(s);
    size_t n = whole;
    if (whole && s[n] == '.') { /* a fraction: digits on both sides of the '.' */
        const size_t frac = digits(s + n + 1);
        if (!frac) return -1;
        n += 1 + frac;
    }
    if (!whole || s[n] != '\0') return -1;
    const double v = strtod(s, NULL);
    if (!isfinite(v) || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

/* ---- options --------------------------------------------------------- */

#define FIELD(opts, d, type) ((type *)((char *)(opts) + (d)->field))

int cli_set_flag(const cli_option *d, const char *val, void *opts, char *why, size_t n) {
    (void)val, (void)why, (void)n;
    *FIELD(opts, d, int) = 1;
    return 0;
}

int cli_set_int64(const cli_option *d, const char *val, void *opts, char *why, size_t n) {
    (void)why, (void)n;
    return cli_parse_int64(val, d->lo, d->hi, FIELD(opts, d, int64_t));
}

int cli_set_int(const cli_option *d, const char *val, void *opts, char *why, size_t n) {
    (void)why, (void)n;
    int64_t v;
    if (cli_parse_int64(val, d->lo, d->hi, &v)) return -1;
    *FIELD(opts, d, int) = (int)v;
    return 0;
}

int cli_set_uint64(const cli_option *d, const char *val, void *opts, char *why, size_t n) {
    (void)why, (void)n;
    return cli_parse_uint64(val, FIELD(opts, d, uint64_t));
}

int cli_set_real(const cli_option *d, const char *val, void *opts, char *why, size_t n) {
    (void)why, (void)n;
    return cli_parse_real(val, (double)d->lo, (double)d->hi, FIELD(opts, d, double));
}

int cli_set_text(const cli_option *d, const char *val, void *opts, char *why, size_t n) {
    if (d->expects && !*val) return -1;
    if (d->hi > 0 && strlen(val) > (size_t)d->hi) {
        snprintf(why, n, "longer than %lld bytes", (long long)d->hi);
        return -1;
    }
    *FIELD(opts, d, const char *) = val;
    return 0;
}

int cli_set_choice(const cli_option *d, const char *val, void *opts, char *why, size_t n) {
    (void)why, (void)n;
    const char *const *choices = d->choices();
    for (int i = 0; choices[i]; i++)
        if (!strcmp(val, choices[i])) {
            *FIELD(opts, d, int) = i;
            return 0;
        }
    return -1;
}

int cli_set_dtype(const cli_option *d, const char *val, void *opts, char *why, size_t n) {
    (void)why, (void)n;
    cli_dtype *t = FIELD(opts, d, cli_dtype);
    if (rkv_dtype_parse(val, &t->dtype) != RKV_OK) return -1;
    t->given = 1;
    return 0;
}

const char *const *cli_backends(void) {
    static const char *const names[] = {"cpu", "cuda", NULL};
    return names;
}

int cli_refuse(const char *cmd, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "ringkv %s: ", cmd);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n(see 'ringkv %s --help')\n", cmd);
    va_end(ap);
    return CLI_EXIT_USAGE;
}

/* "--preset needs a value (demo, waypoint-1.5-720p or waypoint-1.5-360p)":
 * d->choices() listed as the library lists the presets. */
static int refuse_missing_name(const char *cmd, const cli_option *d) {
    const char *const *names = d->choices();
    char list[512] = "";
    size_t len = 0;
    for (int k = 0; names && names[k] && len < sizeof list; k++)
        len += (size_t)snprintf(list + len, sizeof list - len, "%s%s",
                                k == 0 ? "" : names[k + 1] ? ", " : " or ", names[k]);
    return cli_refuse(cmd, "%s needs a value (%s)", d->name, list);
}

/* The row of table[0..n) that argument a names: the name exactly, or
 * --name=VALUE (then *val points at VALUE, *eq is set). -1 when none. */
static int find_option(const cli_option *table, size_t n, const char *a, const char **val) {
    *val = NULL;
    for (size_t k = 0; k < n; k++) {
        const size_t len = strlen(table[k].name);
        if (strncmp(a, table[k].name, len)) continue;
        if (a[len] == '\0') return (int)k;
        if (a[len] == '=') {
            *val = a + len + 1;
            return (int)k;
        }
    }
    return -1;
}

int cli_parse_options(const char *cmd, int argc, char **argv, const cli_option *table, size_t n,
                      void *opts, const char **positional, int *n_positional,
                      void (*usage)(FILE *f)) {
    uint64_t given = 0;
    int options_end = 0;
    if (n_positional) *n_positional = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *val;
        if (!options_end && (!strcmp(a, "--help") || !strcmp(a, "-h"))) {
            usage(stdout);
            return CLI_EXIT_OK;
        }
        if (!options_end && !strcmp(a, "--") && positional) {
            options_end = 1;
            continue;
        }
        if (options_end || a[0] != '-' || a[1] == '\0') {
            if (!positional) return cli_refuse(cmd, "unexpected argument '%s'", rkv_tool_shown(a));
            positional[(*n_positional)++] = a;
            continue;
        }
        const int k = n <= 64 ? find_option(table, n, a, &val) : -1;
        if (k < 0) return cli_refuse(cmd, "unknown option '%s'", rkv_tool_shown(a));
        const cli_option *d = &table[k];
        if (given >> k & 1)
            return cli_refuse(cmd, "%s given twice (give each option once)",
                          d->name);
        given |= (uint64_t)1 << k;
        if (!d->takes_value && val)
            return cli_refuse(cmd, "%s takes no value, got '%s'", d->name, rkv_tool_shown(a));
        if (d->takes_value && !val) {
            if (i + 1 >= argc && d->choices) return refuse_missing_name(cmd, d);
            if (i + 1 >= argc)
                return d->expects ? cli_refuse(cmd, "%s needs a value (%s)", d->name, d->expects)
                                  : cli_refuse(cmd, "%s needs a value", d->name);
            val = argv[++i];
        }
        char why[128] = "";
        if (d->set(d, val, opts, why, sizeof why))
            return cli_refuse(cmd, "%s expects %s, got '%s'%s%s%s", d->name,
                          d->expects ? d->expects : "a value", rkv_tool_shown(val),
                          why[0] ? " (" : "", why,
                          why[0] ? ")" : "");
    }
    return -1;
}

/* docs/snapshot-format.md: __metadata__.format of every ringkv snapshot, and
 * the largest header the library reads. */
#define SNAPSHOT_FORMAT "ringkv-snapshot"
#define SNAPSHOT_MAX_HEADER ((uint64_t)16 << 20)
/* The shortest safetensors file: the 8-byte length and the header "{}". */
#define SNAPSHOT_MIN_BYTES 10

/* The format named by a snapshot header's JSON text (h, n bytes): 0 when it
 * names ringkv's or does not parse (the library says how it is broken), -1
 * with the reason in why. */
static int header_format_is_ringkv(const char *h, size_t n, char *why, size_t wn) {
    cJSON *root = cJSON_ParseWithLength(h, n);
    if (!root) return 0;
    const cJSON *meta = cJSON_GetObjectItemCaseSensitive(root, "__metadata__");
    const cJSON *format = cJSON_GetObjectItemCaseSensitive(meta, "format");
    int rc = 0;
    if (!cJSON_IsString(format)) {
        snprintf(why, wn, "a safetensors file without __metadata__.format (a ringkv snapshot "
                          "has '" SNAPSHOT_FORMAT "')");
        rc = -1;
    } else if (strcmp(format->valuestring, SNAPSHOT_FORMAT)) {
        char shown[4 * 40 + 1];
        rkv_tool_escape(shown, sizeof shown, format->valuestring);
        snprintf(why, wn, "a safetensors file of format '%s' (a ringkv snapshot has '"
                          SNAPSHOT_FORMAT "')", shown);
        rc = -1;
    }
    cJSON_Delete(root);
    return rc;
}

int cli_check_snapshot_kind(const char *what, const char *path, char *err, size_t n) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, n, "%s '%s': cannot open: %s", what, rkv_tool_shown(path), strerror(errno));
        return -1;
    }
    unsigned char head[SNAPSHOT_MIN_BYTES];
    char why[256] = "";
    int rc = 0;
    const size_t got = fread(head, 1, sizeof head, f);
    if (got < sizeof head) { /* no safetensors file is this short */
        snprintf(why, sizeof why,
                 "it holds %zu byte%s, too short to be a safetensors file (at least %d bytes: an "
                 "8-byte header length, then a JSON header, at least '{}')",
                 got, got == 1 ? "" : "s", SNAPSHOT_MIN_BYTES);
        rc = -1;
    } else if (fseek(f, 8, SEEK_SET) == 0) {
        uint64_t len = 0, at = 8; /* the offset of c, counted (ftell is -1 on a device) */
        for (int i = 7; i >= 0; i--) len = len << 8 | head[i];
        int c;
        while ((c = getc(f)) == ' ' || c == '\t' || c == '\n' || c == '\r') len--, at++;
        if (c != EOF && c != '{') {
            char shown[8];
            snprintf(shown, sizeof shown, c > 0x20 && c < 0x7f ? "'%c'" : "0x%02x", c);
            snprintf(why, sizeof why,
                     "a snapshot is a safetensors file (an 8-byte header length, then a JSON "
                     "header '{...}'); byte %llu of this one is %s",
                     (unsigned long long)at, shown);
            rc = -1;
        } else if (c == '{' && len >= 2 && len <= SNAPSHOT_MAX_HEADER) {
            /* the whole header, when the file holds it */
            char *h = malloc((size_t)len);
            if (h && (h[0] = '{', fread(h + 1, 1, (size_t)len - 1, f) == (size_t)len - 1))
                rc = header_format_is_ringkv(h, (size_t)len, why, sizeof why);
            free(h);
        }
    }
    fclose(f);
    if (rc)
        snprintf(err, n, "%s '%s' is not a ringkv snapshot: %s", what, rkv_tool_shown(path), why);
    return rc;
}

const char *cli_layer_kind(const rkv_layer_spec *l) {
    return l->pinned_dilation > 1 ? "global" : "local";
}

int cli_json_header(cJSON *obj, const char *command) {
    return cJSON_AddStringToObject(obj, "command", command) &&
                   cJSON_AddStringToObject(obj, "ringkv_version", rkv_version())
               ? 0
               : -1;
}

int cli_json_model(cJSON *obj, const rkv_model_config *cfg) {
    int ok = cJSON_AddStringToObject(obj, "preset", cfg->name) &&
             cJSON_AddStringToObject(obj, "dtype", rkv_dtype_name(cfg->dtype)) &&
             cJSON_AddNumberToObject(obj, "n_layers", (double)cfg->n_layers) &&
             cJSON_AddNumberToObject(obj, "n_q_heads", (double)cfg->n_q_heads) &&
             cJSON_AddNumberToObject(obj, "n_kv_heads", (double)cfg->n_kv_heads) &&
             cJSON_AddNumberToObject(obj, "d_head", (double)cfg->d_head) &&
             cJSON_AddNumberToObject(obj, "tokens_per_frame", (double)cfg->tokens_per_frame);
    cJSON *layers = ok ? cJSON_AddArrayToObject(obj, "layers") : NULL;
    if (!layers) return -1;
    for (int64_t i = 0; i < cfg->n_layers; i++) {
        const rkv_layer_spec *l = &cfg->layers[i];
        rkv_geometry g;
        if (rkv_model_config_layer_geometry(cfg, i, &g) != RKV_OK) return -1;
        g.num_sessions = 1;
        cJSON *e = cJSON_CreateObject();
        if (!e || !cJSON_AddItemToArray(layers, e)) {
            cJSON_Delete(e);
            return -1;
        }
        cJSON *mem;
        if (!cJSON_AddNumberToObject(e, "layer", (double)i) ||
            !cJSON_AddStringToObject(e, "kind", cli_layer_kind(l)) ||
            !cJSON_AddNumberToObject(e, "ring_frames", (double)l->ring_frames) ||
            !cJSON_AddNumberToObject(e, "ring_buckets", (double)l->ring_buckets) ||
            !cJSON_AddNumberToObject(e, "pinned_dilation", (double)l->pinned_dilation) ||
            !cJSON_AddNumberToObject(e, "capacity_slots", (double)rkv_geometry_capacity(&g)) ||
            !(mem = cJSON_AddObjectToObject(e, "memory_bytes")) ||
            !cJSON_AddNumberToObject(mem, "per_session", (double)rkv_geometry_memory_bytes(&g)))
            return -1;
    }
    return 0;
}

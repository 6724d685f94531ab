/* Parser for the golden operation-trace text format; see trace.h. */
#include "trace.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "escape.h"

#define MAX_FIELDS 16 /* fields per record, record name included */

/* State of one parse: where we are, what has been seen, where errors go. */
typedef struct parser {
    const char *path;
    int64_t line;
    char *err;
    size_t err_size;
    rkv_trace *t;
    size_t ops_cap;
    int have_geometry;
    int have_written, have_tags, have_untouched;
    int64_t untouched_line;
    int pending_visible; /* the last op is an upsert still waiting for its row */
} parser;

/* Formats "path:line: message" into the error buffer, the path and the
 * message escaped (rkv_tool_escape: bytes echoed from the file or the
 * command line that are not printable ASCII are written as \xNN). Returns
 * -1. */
static int fail(parser *p, const char *fmt, ...) {
    if (!p->err || p->err_size == 0) return -1;
    const char *path = rkv_tool_shown(p->path);
    int n = p->line > 0 ? snprintf(p->err, p->err_size, "%s:%lld: ", path, (long long)p->line)
                        : snprintf(p->err, p->err_size, "%s: ", path);
    if (n < 0) n = 0;
    if ((size_t)n < p->err_size) {
        char msg[1024];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        rkv_tool_escape(p->err + n, p->err_size - (size_t)n, msg);
    }
    return -1;
}

/* At most `max` bytes of s for a message, "..." appended when s is longer
 * (fail() escapes what is not printable). */
static const char *excerpt(char *buf, size_t size, const char *s, size_t max) {
    if (max + 4 > size) max = size - 4;
    const size_t len = strlen(s);
    snprintf(buf, size, "%.*s%s", (int)(len < max ? len : max), s, len > max ? "..." : "");
    return buf;
}

/* Whether s looks like binary data rather than text: a control byte, or
 * bytes that are not UTF-8. */
static int looks_binary(const char *str) {
    const unsigned char *s = (const unsigned char *)str;
    while (*s) {
        if (*s < 0x20 || *s == 0x7f) return 1;
        if (*s < 0x80) {
            s++;
            continue;
        }
        const int follow = (*s & 0xe0) == 0xc0   ? 1
                           : (*s & 0xf0) == 0xe0 ? 2
                           : (*s & 0xf8) == 0xf0 ? 3
                                                 : -1;
        if (follow < 0 || *s == 0xc0 || *s == 0xc1) return 1;
        s++;
        for (int k = 0; k < follow; k++, s++)
            if ((*s & 0xc0) != 0x80) return 1;
    }
    return 0;
}

/* Reads one line (without its '\n') into *buf, growing it like getline but
 * refusing lines longer than RKV_TRACE_MAX_LINE, so a file without newlines
 * cannot make us allocate without bound. Returns 1 for a line, 0 at end of
 * file, -1 for a line that is too long, -2 on a read error. *has_nul is set
 * when the line contains a NUL byte. */
static int read_line(FILE *f, char **buf, size_t *cap, size_t *len, int *has_nul) {
    size_t n = 0;
    int c;
    *has_nul = 0;
    while ((c = getc(f)) != EOF) {
        if (c == '\n') break;
        if (n + 2 > *cap) {
            if (*cap >= RKV_TRACE_MAX_LINE) return -1;
            size_t ncap = *cap ? *cap * 2 : 256;
            if (ncap > RKV_TRACE_MAX_LINE) ncap = RKV_TRACE_MAX_LINE;
            char *nb = realloc(*buf, ncap);
            if (!nb) return -2;
            *buf = nb;
            *cap = ncap;
        }
        if (c == 0) *has_nul = 1;
        (*buf)[n++] = (char)c;
    }
    if (ferror(f)) return -2;
    if (c == EOF && n == 0) return 0;
    if (!*buf) { /* an empty last line: still hand back a valid string */
        *buf = malloc(1);
        if (!*buf) return -2;
        *cap = 1;
    }
    (*buf)[n] = '\0';
    *len = n;
    return 1;
}

/* Splits a line in place into whitespace-separated fields, dropping a '\r'
 * and a '#' comment. Returns the field count, or -1 when there are more
 * than `max` fields. */
static int split_line(char *s, char **fields, int max) {
    int n = 0;
    for (;;) {
        while (*s == ' ' || *s == '\t' || *s == '\r' || *s == '\v' || *s == '\f') s++;
        if (*s == '\0' || *s == '#') break;
        if (n == max) return -1;
        fields[n++] = s;
        while (*s && *s != ' ' && *s != '\t' && *s != '\r' && *s != '\v' && *s != '\f') s++;
        if (*s) *s++ = '\0';
    }
    return n;
}

/* Matches the key=value fields of a record (fields[1..n-1]) against `keys`:
 * every key exactly once, nothing else. vals[k] receives key k's value. */
static int match_fields(parser *p, char **fields, int n, const char *const *keys,
                        int nkeys, const char **vals) {
    char shown[64];
    for (int k = 0; k < nkeys; k++) vals[k] = NULL;
    for (int i = 1; i < n; i++) {
        char *eq = strchr(fields[i], '=');
        if (!eq)
            return fail(p, "%s: field '%s' is not key=value", fields[0],
                        excerpt(shown, sizeof shown, fields[i], 40));
        *eq = '\0';
        int k = 0;
        while (k < nkeys && strcmp(keys[k], fields[i]) != 0) k++;
        if (k == nkeys)
            return fail(p, "%s: unknown field '%s'", fields[0],
                        excerpt(shown, sizeof shown, fields[i], 40));
        if (vals[k]) return fail(p, "%s: field '%s' given twice", fields[0], keys[k]);
        vals[k] = eq + 1;
    }
    for (int k = 0; k < nkeys; k++)
        if (!vals[k]) return fail(p, "%s: missing field '%s'", fields[0], keys[k]);
    return 0;
}

/* Reads a non-negative decimal integer at *s (digits only: no sign, no
 * spaces), advancing *s. Returns 0, -1 when no digit is there, -2 when it
 * does not fit int64. */
static int scan_u63(const char **s, int64_t *out) {
    if (**s < '0' || **s > '9') return -1;
    char *end = NULL;
    errno = 0;
    long long v = strtoll(*s, &end, 10);
    if (errno == ERANGE) return -2;
    *s = end;
    *out = (int64_t)v;
    return 0;
}

/* Parses a whole value as one integer in [min, max] (min >= 0). */
static int parse_int(parser *p, const char *rec, const char *key, const char *val,
                     int64_t min, int64_t max, int64_t *out) {
    const char *s = val;
    int64_t v = 0;
    int rc = scan_u63(&s, &v);
    if (rc == -2) return fail(p, "%s: %s=%.40s does not fit a 64-bit integer", rec, key, val);
    if (rc != 0 || *s != '\0')
        return fail(p, "%s: %s='%.40s' is not a non-negative integer", rec, key, val);
    if (v < min || v > max)
        return fail(p, "%s: %s=%lld is out of range [%lld, %lld]", rec, key, (long long)v,
                    (long long)min, (long long)max);
    *out = v;
    return 0;
}

/* Parses "a,b,c" into a new array of integers, each in [min, max]. */
static int parse_int_list(parser *p, const char *rec, const char *key, const char *val,
                          int64_t min, int64_t max, int64_t **out, int64_t *count) {
    size_t n = 1;
    for (const char *c = val; *c; c++) n += (*c == ',');
    int64_t *v = malloc(n * sizeof *v);
    if (!v) return fail(p, "out of memory");
    const char *s = val;
    for (size_t i = 0; i < n; i++) {
        int rc = scan_u63(&s, &v[i]);
        if (rc == -2) {
            free(v);
            return fail(p, "%s: %s: item %zu does not fit a 64-bit integer", rec, key, i);
        }
        if (rc != 0 || (*s != ',' && *s != '\0')) {
            free(v);
            return fail(p, "%s: %s: item %zu of '%.60s' is not a non-negative integer", rec,
                        key, i, val);
        }
        if (v[i] < min || v[i] > max) {
            long long bad = (long long)v[i];
            free(v);
            return fail(p, "%s: %s: item %zu = %lld is out of range [%lld, %lld]", rec, key, i,
                        bad, (long long)min, (long long)max);
        }
        if (*s == ',') s++;
    }
    *out = v;
    *count = (int64_t)n;
    return 0;
}

/* Counts the comma-separated items of a non-"none" list value. */
static size_t count_items(const char *val) {
    size_t n = 1;
    for (const char *c = val; *c; c++) n += (*c == ',');
    return n;
}

/* Parses "lo-hi,lo-hi,..." or "none": ascending, disjoint, 0 <= lo < hi <= N. */
static int parse_ranges(parser *p, const char *rec, const char *key, const char *val,
                        rkv_trace_ranges *out) {
    int64_t N = p->t->total_slots;
    out->v = NULL;
    out->n = 0;
    if (strcmp(val, "none") == 0) return 0;
    size_t n = count_items(val);
    rkv_trace_range *v = malloc(n * sizeof *v);
    if (!v) return fail(p, "out of memory");
    const char *s = val;
    int64_t prev_hi = 0;
    for (size_t i = 0; i < n; i++) {
        int64_t lo = 0, hi = 0;
        if (scan_u63(&s, &lo) != 0 || *s++ != '-' || scan_u63(&s, &hi) != 0 ||
            (*s != ',' && *s != '\0')) {
            free(v);
            return fail(p, "%s: %s: item %zu is not a range lo-hi of slots", rec, key, i);
        }
        if (*s == ',') s++;
        if (!(lo < hi && hi <= N)) {
            free(v);
            return fail(p, "%s: %s: range %lld-%lld is empty or outside [0, %lld)", rec, key,
                        (long long)lo, (long long)hi, (long long)N);
        }
        if (lo < prev_hi) {
            free(v);
            return fail(p, "%s: %s: range %lld-%lld is not after the previous one", rec, key,
                        (long long)lo, (long long)hi);
        }
        prev_hi = hi;
        v[i].lo = lo;
        v[i].hi = hi;
    }
    out->v = v;
    out->n = n;
    return 0;
}

const rkv_trace_op *rkv_trace_find_op(const rkv_trace *t, int64_t op) {
    size_t lo = 0, hi = t->n_ops;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (t->ops[mid].op < op) lo = mid + 1;
        else hi = mid;
    }
    if (lo < t->n_ops && t->ops[lo].op == op) return &t->ops[lo];
    return NULL;
}

/* Parses "lo-hi:o:b:t,..." (or "none") into t->final_tags, checking each run
 * names an earlier upsert, one of its rows, and tokens inside one frame. */
static int parse_runs(parser *p, const char *val) {
    rkv_trace *t = p->t;
    int64_t N = t->total_slots, T = t->geometry.tokens_per_frame;
    if (strcmp(val, "none") == 0) return 0;
    size_t n = count_items(val);
    rkv_trace_run *v = malloc(n * sizeof *v);
    if (!v) return fail(p, "out of memory");
    t->final_tags = v;
    const char *s = val;
    int64_t prev_hi = 0;
    for (size_t i = 0; i < n; i++) {
        rkv_trace_run r;
        if (scan_u63(&s, &r.lo) != 0 || *s++ != '-' || scan_u63(&s, &r.hi) != 0 ||
            *s++ != ':' || scan_u63(&s, &r.op) != 0 || *s++ != ':' ||
            scan_u63(&s, &r.row) != 0 || *s++ != ':' || scan_u63(&s, &r.token) != 0 ||
            (*s != ',' && *s != '\0'))
            return fail(p, "final_tags: run %zu is not lo-hi:op:row:token", i);
        if (*s == ',') s++;
        if (!(r.lo < r.hi && r.hi <= N))
            return fail(p, "final_tags: run %zu: range %lld-%lld is empty or outside [0, %lld)",
                        i, (long long)r.lo, (long long)r.hi, (long long)N);
        if (r.lo < prev_hi)
            return fail(p, "final_tags: run %zu: range %lld-%lld is not after the previous one",
                        i, (long long)r.lo, (long long)r.hi);
        prev_hi = r.hi;
        const rkv_trace_op *op = rkv_trace_find_op(t, r.op);
        if (!op || op->kind != RKV_TRACE_UPSERT)
            return fail(p, "final_tags: run %zu names op %lld, which is not an upsert of this "
                        "trace", i, (long long)r.op);
        if (r.row >= op->batch)
            return fail(p, "final_tags: run %zu names row %lld of op %lld, which has %lld rows",
                        i, (long long)r.row, (long long)r.op, (long long)op->batch);
        if (r.token >= T || r.hi - r.lo > T - r.token)
            return fail(p, "final_tags: run %zu: tokens %lld..%lld run past the frame (T=%lld)",
                        i, (long long)r.token, (long long)(r.token + (r.hi - r.lo) - 1),
                        (long long)T);
        v[i] = r;
        t->n_final_tags = i + 1;
    }
    return 0;
}

/* The geometry record: builds and checks the layer geometry. */
static int parse_geometry(parser *p, char **fields, int n) {
    static const char *const keys[] = {"num_sessions", "n_kv_heads", "ring_frames",
                                       "ring_buckets", "d_head", "tokens_per_frame",
                                       "pinned_dilation"};
    const char *vals[7];
    int64_t x[7];
    if (match_fields(p, fields, n, keys, 7, vals)) return -1;
    for (int k = 0; k < 7; k++)
        if (parse_int(p, "geometry", keys[k], vals[k], 0, INT64_MAX, &x[k])) return -1;
    rkv_geometry *g = &p->t->geometry;
    g->num_sessions = x[0];
    g->n_kv_heads = x[1];
    g->ring_frames = x[2];
    g->ring_buckets = x[3];
    g->d_head = x[4];
    g->tokens_per_frame = x[5];
    g->pinned_dilation = x[6];
    g->dtype = RKV_DTYPE_F32;
    if (rkv_geometry_check(g) != RKV_OK)
        return fail(p, "geometry: invalid: %s", rkv_last_error());
    size_t bytes = rkv_geometry_memory_bytes(g);
    if (bytes == 0 || bytes > RKV_TRACE_MAX_LAYER_BYTES)
        return fail(p, "geometry: the layer needs %zu bytes of K/V; this tool replays at "
                    "most %zu", bytes, (size_t)RKV_TRACE_MAX_LAYER_BYTES);
    p->t->total_slots = rkv_geometry_total_slots(g);
    if (p->t->total_slots <= 0) return fail(p, "geometry: no slots");
    p->have_geometry = 1;
    return 0;
}

/* Appends a zeroed op to t->ops; NULL when out of memory. */
static rkv_trace_op *push_op(parser *p) {
    rkv_trace *t = p->t;
    if (t->n_ops == p->ops_cap) {
        size_t ncap = p->ops_cap ? p->ops_cap * 2 : 64;
        if (ncap > SIZE_MAX / sizeof *t->ops) return NULL;
        rkv_trace_op *nv = realloc(t->ops, ncap * sizeof *nv);
        if (!nv) return NULL;
        t->ops = nv;
        p->ops_cap = ncap;
    }
    rkv_trace_op *op = &t->ops[t->n_ops++];
    memset(op, 0, sizeof *op);
    return op;
}

/* Checks that a new op number is above the previous op's. */
static int check_op_order(parser *p, int64_t opnum) {
    rkv_trace *t = p->t;
    if (t->n_ops > 0 && opnum <= t->ops[t->n_ops - 1].op)
        return fail(p, "op=%lld does not follow op=%lld (op numbers must increase)",
                    (long long)opnum, (long long)t->ops[t->n_ops - 1].op);
    return 0;
}

/* qsort comparison of int64 values. */
static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* The upsert record. */
static int parse_upsert(parser *p, char **fields, int n) {
    static const char *const keys[] = {"op", "sessions", "frames", "commit", "build_visibility"};
    const char *vals[5];
    const rkv_geometry *g = &p->t->geometry;
    int64_t opnum, commit, bv, nf = 0;
    if (match_fields(p, fields, n, keys, 5, vals)) return -1;
    if (parse_int(p, "upsert", "op", vals[0], 0, INT64_MAX, &opnum)) return -1;
    if (check_op_order(p, opnum)) return -1;
    if (parse_int(p, "upsert", "commit", vals[3], 0, 1, &commit)) return -1;
    if (parse_int(p, "upsert", "build_visibility", vals[4], 0, 1, &bv)) return -1;
    rkv_trace_op *op = push_op(p);
    if (!op) return fail(p, "out of memory");
    op->kind = RKV_TRACE_UPSERT;
    op->op = opnum;
    op->line = p->line;
    op->commit = (int)commit;
    op->build_visibility = (int)bv;
    if (parse_int_list(p, "upsert", "sessions", vals[1], 0, g->num_sessions - 1,
                       &op->sessions, &op->batch))
        return -1;
    if (parse_int_list(p, "upsert", "frames", vals[2], 0, INT64_MAX, &op->frames, &nf))
        return -1;
    if (nf != op->batch)
        return fail(p, "upsert: %lld sessions but %lld frames", (long long)op->batch,
                    (long long)nf);
    if (bv && op->batch != 1)
        return fail(p, "upsert: build_visibility=1 needs exactly one session, got %lld",
                    (long long)op->batch);
    if (op->batch > 1) {
        int64_t *sorted = malloc((size_t)op->batch * sizeof *sorted);
        if (!sorted) return fail(p, "out of memory");
        memcpy(sorted, op->sessions, (size_t)op->batch * sizeof *sorted);
        qsort(sorted, (size_t)op->batch, sizeof *sorted, cmp_i64);
        for (int64_t i = 1; i < op->batch; i++)
            if (sorted[i] == sorted[i - 1]) {
                long long dup = (long long)sorted[i];
                free(sorted);
                return fail(p, "upsert: session %lld appears twice in one batch", dup);
            }
        free(sorted);
    }
    p->pending_visible = (int)bv;
    return 0;
}

/* The reset record. */
static int parse_reset(parser *p, char **fields, int n) {
    static const char *const keys[] = {"op", "session"};
    const char *vals[2];
    int64_t opnum, s;
    if (match_fields(p, fields, n, keys, 2, vals)) return -1;
    if (parse_int(p, "reset", "op", vals[0], 0, INT64_MAX, &opnum)) return -1;
    if (check_op_order(p, opnum)) return -1;
    if (parse_int(p, "reset", "session", vals[1], 0, p->t->geometry.num_sessions - 1, &s))
        return -1;
    rkv_trace_op *op = push_op(p);
    if (!op) return fail(p, "out of memory");
    op->kind = RKV_TRACE_RESET;
    op->op = opnum;
    op->line = p->line;
    op->batch = 1;
    op->sessions = malloc(sizeof *op->sessions);
    if (!op->sessions) return fail(p, "out of memory");
    op->sessions[0] = s;
    return 0;
}

/* The visible record: must follow the upsert that asked for it. */
static int parse_visible(parser *p, char **fields, int n) {
    static const char *const keys[] = {"op", "ranges"};
    const char *vals[2];
    int64_t opnum;
    if (!p->pending_visible)
        return fail(p, "visible: no upsert with build_visibility=1 right before this line");
    rkv_trace_op *op = &p->t->ops[p->t->n_ops - 1];
    if (match_fields(p, fields, n, keys, 2, vals)) return -1;
    if (parse_int(p, "visible", "op", vals[0], 0, INT64_MAX, &opnum)) return -1;
    if (opnum != op->op)
        return fail(p, "visible: op=%lld, but the upsert before it is op=%lld",
                    (long long)opnum, (long long)op->op);
    if (parse_ranges(p, "visible", "ranges", vals[1], &op->visible)) return -1;
    op->visible_line = p->line;
    p->t->n_visible++;
    p->pending_visible = 0;
    return 0;
}

/* Checks that final_tags and untouched cover every slot exactly once. */
static int check_coverage(parser *p) {
    const rkv_trace *t = p->t;
    size_t i = 0, j = 0;
    int64_t pos = 0;
    p->line = t->final_tags_line > p->untouched_line ? t->final_tags_line : p->untouched_line;
    while (pos < t->total_slots) {
        int64_t a = i < t->n_final_tags ? t->final_tags[i].lo : INT64_MAX;
        int64_t b = j < t->untouched.n ? t->untouched.v[j].lo : INT64_MAX;
        if (a < pos || b < pos || (a == pos && b == pos))
            return fail(p, "final_tags and untouched overlap at slot %lld",
                        (long long)(a < pos ? a : b < pos ? b : pos));
        if (a == pos) pos = t->final_tags[i++].hi;
        else if (b == pos) pos = t->untouched.v[j++].hi;
        else return fail(p, "slot %lld is in neither final_tags nor untouched", (long long)pos);
    }
    return 0;
}

/* The names of a trace's records, in the order a trace has them. */
static const char *const RECORDS[] = {"geometry",      "upsert",     "visible",  "reset",
                                      "final_written", "final_tags", "untouched"};
#define RECORD_LIST "geometry, upsert, visible, reset, final_written, final_tags, untouched"

static int is_record(const char *name) {
    for (size_t i = 0; i < sizeof RECORDS / sizeof RECORDS[0]; i++)
        if (!strcmp(name, RECORDS[i])) return 1;
    return 0;
}

/* Handles one record; returns 0 or -1 (message set). */
static int parse_record(parser *p, char **fields, int n) {
    const char *rec = fields[0];
    int is_op = !strcmp(rec, "upsert") || !strcmp(rec, "reset");
    if (!is_record(rec)) {
        char shown[64];
        return fail(p, "unknown record '%s'%s", excerpt(shown, sizeof shown, rec, 24),
                    looks_binary(rec) ? " (binary data: not a text trace?)" : "");
    }
    if (!strcmp(rec, "geometry")) {
        if (p->have_geometry) return fail(p, "a second geometry line");
        return parse_geometry(p, fields, n);
    }
    if (!p->have_geometry) return fail(p, "'%s' before the geometry line", rec);
    if (strcmp(rec, "visible") && p->pending_visible)
        return fail(p, "op %lld has build_visibility=1 but no visible line follows it",
                    (long long)p->t->ops[p->t->n_ops - 1].op);
    if (is_op && (p->have_written || p->have_tags || p->have_untouched))
        return fail(p, "'%s' after the final state lines", rec);
    if (!strcmp(rec, "upsert")) return parse_upsert(p, fields, n);
    if (!strcmp(rec, "reset")) return parse_reset(p, fields, n);
    if (!strcmp(rec, "visible")) return parse_visible(p, fields, n);

    static const char *const ranges_key[] = {"ranges"};
    static const char *const runs_key[] = {"runs"};
    const char *val;
    if (!strcmp(rec, "final_tags")) {
        if (p->have_tags) return fail(p, "a second final_tags line");
        if (match_fields(p, fields, n, runs_key, 1, &val)) return -1;
        p->have_tags = 1;
        p->t->final_tags_line = p->line;
        return parse_runs(p, val);
    }
    if (!strcmp(rec, "final_written")) {
        if (p->have_written) return fail(p, "a second final_written line");
        if (match_fields(p, fields, n, ranges_key, 1, &val)) return -1;
        p->have_written = 1;
        return parse_ranges(p, rec, "ranges", val, &p->t->final_written);
    }
    if (p->have_untouched) return fail(p, "a second untouched line");
    if (match_fields(p, fields, n, ranges_key, 1, &val)) return -1;
    p->have_untouched = 1;
    p->untouched_line = p->line;
    return parse_ranges(p, rec, "ranges", val, &p->t->untouched);
}

void rkv_trace_free(rkv_trace *t) {
    if (!t) return;
    for (size_t i = 0; i < t->n_ops; i++) {
        free(t->ops[i].sessions);
        free(t->ops[i].frames);
        free(t->ops[i].visible.v);
    }
    free(t->ops);
    free(t->final_written.v);
    free(t->final_tags);
    free(t->untouched.v);
    memset(t, 0, sizeof *t);
}

/* Reads the file line by line into the parser: every record (sniff 0), or
 * only up to the first one, which must name a trace record (sniff 1: then
 * every message starts "not a ringkv operation trace: "). 0, -1 (message
 * set), or -2 when the file cannot be opened or read. */
static int scan(parser *p, int sniff) {
    const char *not_trace = sniff ? "not a ringkv operation trace: " : "";
    FILE *f = fopen(p->path, "rb");
    if (!f) {
        if (p->err && p->err_size)
            snprintf(p->err, p->err_size, "%s: cannot open: %s", rkv_tool_shown(p->path),
                     strerror(errno));
        return -2;
    }
    char *buf = NULL;
    size_t cap = 0, len = 0;
    int rc = 0, has_nul = 0, r;
    while ((r = read_line(f, &buf, &cap, &len, &has_nul)) == 1) {
        p->line++;
        if (has_nul) {
            rc = fail(p, "%sthe line contains a NUL byte (binary data, not a text trace)",
                      not_trace);
            break;
        }
        char *fields[MAX_FIELDS];
        int n = split_line(buf, fields, MAX_FIELDS);
        if (n == 0) continue;
        if (sniff) {
            char shown[64];
            if (!is_record(fields[0]))
                rc = fail(p, "%sthe first record is '%s'%s, not one of " RECORD_LIST
                          " (shared/golden/README.md)",
                          not_trace, excerpt(shown, sizeof shown, fields[0], 24),
                          looks_binary(fields[0]) ? " (binary data)" : "");
            break;
        }
        if (n < 0) {
            rc = fail(p, "more than %d fields on one line", MAX_FIELDS - 1);
            break;
        }
        if ((rc = parse_record(p, fields, n)) != 0) break;
    }
    if (rc == 0 && r == -1) {
        p->line++;
        rc = fail(p, "%sa line longer than %zu bytes", not_trace, (size_t)RKV_TRACE_MAX_LINE);
    } else if (rc == 0 && r == -2) {
        if (p->err && p->err_size)
            snprintf(p->err, p->err_size, "%s: read error: %s", rkv_tool_shown(p->path),
                     strerror(errno));
        rc = -2;
    }
    free(buf);
    fclose(f);
    return rc;
}

int rkv_trace_sniff(const char *path, char *err, size_t err_size) {
    parser p;
    memset(&p, 0, sizeof p);
    p.path = path;
    p.err = err;
    p.err_size = err_size;
    if (err && err_size) err[0] = '\0';
    return scan(&p, 1);
}

int rkv_trace_load(const char *path, rkv_trace *out, char *err, size_t err_size) {
    parser p;
    memset(&p, 0, sizeof p);
    memset(out, 0, sizeof *out);
    p.path = path;
    p.err = err;
    p.err_size = err_size;
    p.t = out;
    if (err && err_size) err[0] = '\0';

    int rc = scan(&p, 0) ? -1 : 0;
    if (rc == 0) {
        p.line++; /* messages about what is missing point past the last line */
        if (!p.have_geometry) rc = fail(&p, "end of file: no geometry line (empty trace?)");
        else if (p.pending_visible)
            rc = fail(&p, "end of file: op %lld has build_visibility=1 but no visible line",
                      (long long)out->ops[out->n_ops - 1].op);
        else if (!p.have_written) rc = fail(&p, "end of file: no final_written line (truncated?)");
        else if (!p.have_tags) rc = fail(&p, "end of file: no final_tags line (truncated?)");
        else if (!p.have_untouched) rc = fail(&p, "end of file: no untouched line (truncated?)");
        else rc = check_coverage(&p);
    }
    if (rc != 0) rkv_trace_free(out);
    return rc;
}

float rkv_trace_value(int64_t op, int c, int64_t b, int64_t t, int64_t h, int64_t d) {
    switch (d) {
    case 0: return (float)((double)op + 1.0 + 0.5 * c);
    case 1: return (float)b;
    case 2: return (float)t;
    case 3: return (float)h;
    default: return (float)((double)d + 0.25 * c);
    }
}

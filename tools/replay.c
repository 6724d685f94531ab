/* `ringkv replay FILE...`: replays golden operation traces (*.txt) and
 * attention-vector manifests (*.json, with the .bin of the same stem beside
 * them) against ringkv, through the public API only, and prints one PASS or
 * FAIL line per trace or case, then "N passed, M failed". The formats are
 * those of shared/golden/README.md. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/ring_rule.h" /* the ring rule the library uses (header only) */
#include "cli.h"
#include "commands.h"
#include "ringkv.h"
#include "trace.h"

#define MSG_SIZE 2048
/* Norm-wise relative error allowed against out_f64 and out_flex (f32). */
#define ATTN_TOLERANCE 1e-5
/* Largest manifest (.json) and data file (.bin) this tool reads. */
#define MAX_JSON_BYTES ((size_t)64 << 20)
#define MAX_BIN_BYTES ((size_t)8 << 30)
/* Largest integer a JSON number carries exactly. */
#define JSON_MAX_INT ((int64_t)1 << 53)

/* Running count of PASS and FAIL lines. */
typedef struct tally {
    int passed, failed;
} tally;

/* Prints "PASS name[ (detail)]". */
static void report_pass(tally *tl, const char *name, const char *detail) {
    if (detail && detail[0]) printf("PASS %s (%s)\n", name, detail);
    else printf("PASS %s\n", name);
    fflush(stdout);
    tl->passed++;
}

/* Prints "FAIL name: reason". */
static void report_fail(tally *tl, const char *name, const char *reason) {
    printf("FAIL %s: %s\n", name, reason);
    fflush(stdout);
    tl->failed++;
}

/* snprintf into a message buffer; returns -1 so callers can `return say(..)`. */
static int say(char *msg, size_t size, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, size, fmt, ap);
    va_end(ap);
    return -1;
}

/* Appends to a message buffer without overflowing it. */
static void append(char *msg, size_t size, const char *fmt, ...) {
    size_t n = strlen(msg);
    if (n + 1 >= size) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg + n, size - n, fmt, ap);
    va_end(ap);
}

/* Writes the set slots of row[0..n) as "lo-hi,lo-hi" (or "none") into out,
 * ending in "..." when it does not fit. */
static void format_row(const uint8_t *row, int64_t n, char *out, size_t size) {
    out[0] = '\0';
    int any = 0;
    for (int64_t i = 0; i < n;) {
        if (!row[i]) {
            i++;
            continue;
        }
        int64_t j = i;
        while (j < n && row[j]) j++;
        size_t len = strlen(out);
        if (len + 48 >= size) {
            append(out, size, "...");
            return;
        }
        append(out, size, "%s%lld-%lld", any ? "," : "", (long long)i, (long long)j);
        any = 1;
        i = j;
    }
    if (!any) append(out, size, "none");
}

/* Expands a range list into a 0/1 row of n slots. */
static void expand_ranges(const rkv_trace_ranges *r, uint8_t *row, int64_t n) {
    memset(row, 0, (size_t)n);
    for (size_t i = 0; i < r->n; i++)
        memset(row + r->v[i].lo, 1, (size_t)(r->v[i].hi - r->v[i].lo));
}

/* ------------------------------------------------------------------------ */
/* Traces                                                                    */
/* ------------------------------------------------------------------------ */

/* Fills the [2][H][B*T][D] f32 input of upsert `op` (golden/README.md). */
static void fill_trace_input(const rkv_trace *t, const rkv_trace_op *op, float *kv) {
    const rkv_geometry *g = &t->geometry;
    int64_t H = g->n_kv_heads, T = g->tokens_per_frame, D = g->d_head, B = op->batch;
    size_t i = 0;
    for (int c = 0; c < 2; c++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t b = 0; b < B; b++)
                for (int64_t tok = 0; tok < T; tok++)
                    for (int64_t d = 0; d < D; d++)
                        kv[i++] = rkv_trace_value(op->op, c, b, tok, h, d);
}

/* Describes what a slot of the layer holds, read back through the trace's
 * value pattern (d0 = op+1, d1 = row, d2 = token), e.g. "op 12 row 0 token 5". */
static void describe_slot(const float *kv, int64_t N, int64_t D, int64_t h, int64_t slot,
                          char *out, size_t size) {
    const float *x = kv + ((size_t)h * (size_t)N + (size_t)slot) * (size_t)D;
    int zero = 1;
    for (int64_t d = 0; d < D; d++) zero &= (x[d] == 0.0f);
    if (zero) {
        snprintf(out, size, "zeros");
        return;
    }
    snprintf(out, size, "op %.9g", (double)x[0] - 1.0);
    if (D > 1) append(out, size, " row %.9g", (double)x[1]);
    if (D > 2) append(out, size, " token %.9g", (double)x[2]);
}

/* Compares the final K/V buffer with final_tags / untouched (bit-exact),
 * reporting the lowest differing slot. */
static int check_final_kv(const rkv_trace *t, const float *kv, char *msg, size_t size) {
    const rkv_geometry *g = &t->geometry;
    int64_t N = t->total_slots, H = g->n_kv_heads, D = g->d_head;
    size_t run = 0;
    for (int64_t slot = 0; slot < N; slot++) {
        while (run < t->n_final_tags && t->final_tags[run].hi <= slot) run++;
        const rkv_trace_run *r =
            (run < t->n_final_tags && t->final_tags[run].lo <= slot) ? &t->final_tags[run] : NULL;
        for (int c = 0; c < 2; c++)
            for (int64_t h = 0; h < H; h++)
                for (int64_t d = 0; d < D; d++) {
                    float want = r ? rkv_trace_value(r->op, c, r->row, r->token + (slot - r->lo),
                                                     h, d)
                                   : 0.0f;
                    float got = kv[(((size_t)c * (size_t)H + (size_t)h) * (size_t)N +
                                    (size_t)slot) * (size_t)D + (size_t)d];
                    if (memcmp(&want, &got, sizeof want) == 0) continue;
                    char holds[128];
                    describe_slot(kv, N, D, h, slot, holds, sizeof holds);
                    say(msg, size, "final %s: slot %lld head %lld dim %lld: expected %.9g ",
                        c ? "V" : "K", (long long)slot, (long long)h, (long long)d,
                        (double)want);
                    if (r)
                        append(msg, size, "(op %lld row %lld token %lld)", (long long)r->op,
                               (long long)r->row, (long long)(r->token + (slot - r->lo)));
                    else
                        append(msg, size, "(untouched)");
                    append(msg, size, ", got %.9g (K of the slot: %s)", (double)got, holds);
                    return -1;
                }
    }
    return 0;
}

/* Compares a got row (nonzero = set) with an expected 0/1 row; on the first
 * difference writes "what: slot X: expected .., got ..; expected RANGES, got
 * RANGES" and returns -1. */
static int compare_rows(const char *what, const uint8_t *want, const uint8_t *got, int64_t n,
                        char *msg, size_t size) {
    for (int64_t i = 0; i < n; i++) {
        if ((want[i] != 0) == (got[i] != 0)) continue;
        char ew[512], gw[512];
        uint8_t *norm = malloc((size_t)n);
        format_row(want, n, ew, sizeof ew);
        if (norm) {
            for (int64_t j = 0; j < n; j++) norm[j] = got[j] != 0;
            format_row(norm, n, gw, sizeof gw);
            free(norm);
        } else {
            snprintf(gw, sizeof gw, "?");
        }
        return say(msg, size, "%s: slot %lld: expected %d, got %u; expected ranges %s, got %s",
                   what, (long long)i, want[i] != 0, (unsigned)got[i], ew, gw);
    }
    return 0;
}

/* Runs every operation of a parsed trace on a fresh layer and checks every
 * visible row, then the final K/V and written bits. 0 = pass. */
static int run_trace(const rkv_trace *t, char *msg, size_t size) {
    const rkv_geometry *g = &t->geometry;
    int64_t N = t->total_slots;
    rkv_layer *layer = NULL;
    float *kv = NULL;
    uint8_t *got = NULL, *want = NULL;
    int rc = -1;

    if (rkv_layer_create(g, &layer) != RKV_OK) {
        say(msg, size, "cannot create the layer: %s", cli_lib_detail(NULL));
        goto done;
    }
    int64_t max_batch = 1;
    for (size_t i = 0; i < t->n_ops; i++)
        if (t->ops[i].batch > max_batch) max_batch = t->ops[i].batch;
    /* max_batch <= S, so this is at most half the layer's (capped) bytes. */
    size_t kv_elems = (size_t)2 * (size_t)g->n_kv_heads * (size_t)max_batch *
                      (size_t)g->tokens_per_frame * (size_t)g->d_head;
    kv = malloc(kv_elems * sizeof *kv);
    got = malloc((size_t)N);
    want = malloc((size_t)N);
    if (!kv || !got || !want) {
        say(msg, size, "out of memory");
        goto done;
    }

    for (size_t i = 0; i < t->n_ops; i++) {
        const rkv_trace_op *op = &t->ops[i];
        if (op->kind == RKV_TRACE_RESET) {
            if (rkv_layer_reset(layer, op->sessions[0]) != RKV_OK) {
                say(msg, size, "op %lld (line %lld): reset of session %lld failed: %s",
                    (long long)op->op, (long long)op->line, (long long)op->sessions[0],
                    cli_lib_detail(NULL));
                goto done;
            }
            continue;
        }
        fill_trace_input(t, op, kv);
        if (op->build_visibility) memset(got, 0xA5, (size_t)N); /* catch unwritten bytes */
        rkv_status st = rkv_layer_upsert(layer, kv, RKV_DTYPE_F32, op->batch, op->frames,
                                         op->sessions, op->commit,
                                         op->build_visibility ? got : NULL);
        if (st != RKV_OK) {
            say(msg, size, "op %lld (line %lld): upsert failed: %s", (long long)op->op,
                (long long)op->line, cli_lib_detail(NULL));
            goto done;
        }
        if (op->build_visibility) {
            char what[160];
            snprintf(what, sizeof what,
                     "op %lld (session %lld, frame %lld%s) visible row (line %lld)",
                     (long long)op->op, (long long)op->sessions[0], (long long)op->frames[0],
                     op->commit ? ", commit" : "", (long long)op->visible_line);
            expand_ranges(&op->visible, want, N);
            if (compare_rows(what, want, got, N, msg, size)) goto done;
        }
    }

    expand_ranges(&t->final_written, want, N);
    if (compare_rows("final written", want, rkv_layer_written(layer), N, msg, size)) goto done;
    if (check_final_kv(t, (const float *)rkv_layer_kv(layer), msg, size)) goto done;
    rc = 0;
done:
    free(kv);
    free(got);
    free(want);
    rkv_layer_destroy(layer);
    return rc;
}

/* Parses and replays one trace file, printing its line. */
static void replay_trace(const char *path, tally *tl) {
    rkv_trace t;
    char msg[MSG_SIZE];
    if (rkv_trace_load(path, &t, msg, sizeof msg) != 0) {
        report_fail(tl, path, msg);
        return;
    }
    if (run_trace(&t, msg, sizeof msg) != 0) {
        report_fail(tl, path, msg);
    } else {
        char detail[128];
        snprintf(detail, sizeof detail, "%zu ops, %zu visible rows", t.n_ops, t.n_visible);
        report_pass(tl, path, detail);
    }
    rkv_trace_free(&t);
}

/* ------------------------------------------------------------------------ */
/* Attention-vector manifests                                                */
/* ------------------------------------------------------------------------ */

/* Reads a whole file (at most max bytes) into a new buffer with a NUL after
 * the data. 0 on success; -1 with a message. */
static int read_file(const char *path, size_t max, unsigned char **data, size_t *len, char *msg,
                     size_t size) {
    FILE *f = fopen(path, "rb");
    if (!f) return say(msg, size, "%s: cannot open: %s", path, strerror(errno));
    size_t cap = 0, n = 0;
    unsigned char *buf = NULL;
    for (;;) {
        if (n + 1 >= cap) {
            if (cap > max) {
                free(buf);
                fclose(f);
                return say(msg, size, "%s: larger than %zu bytes", path, max);
            }
            size_t ncap = cap ? cap * 2 : 65536;
            unsigned char *nb = realloc(buf, ncap);
            if (!nb) {
                free(buf);
                fclose(f);
                return say(msg, size, "%s: out of memory", path);
            }
            buf = nb;
            cap = ncap;
        }
        size_t got = fread(buf + n, 1, cap - n - 1, f);
        n += got;
        if (got == 0) break;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        return say(msg, size, "%s: read error", path);
    }
    if (n > max) {
        free(buf);
        return say(msg, size, "%s: larger than %zu bytes", path, max);
    }
    buf[n] = '\0';
    *data = buf;
    *len = n;
    return 0;
}

/* One case of a manifest, its arrays decoded from the .bin. */
typedef struct attn_case {
    int64_t S, Hq, Hkv, D, T, slots, session, frame_pos, RF, RB, PD;
    double scale;
    float *q, *k, *v, *out_flex, *out_f64;
    uint8_t *vis;
} attn_case;

/* Frees a case's arrays. */
static void free_case(attn_case *c) {
    free(c->q);
    free(c->k);
    free(c->v);
    free(c->out_flex);
    free(c->out_f64);
    free(c->vis);
}

/* Reads an integer field of a case in [min, max] (max <= 2^53). */
static int json_int(const cJSON *obj, const char *key, int64_t min, int64_t max, int64_t *out,
                    char *msg, size_t size) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!it) return say(msg, size, "missing field \"%s\"", key);
    if (!cJSON_IsNumber(it)) return say(msg, size, "field \"%s\" is not a number", key);
    double x = it->valuedouble;
    if (!(x >= (double)min && x <= (double)max) || x != floor(x))
        return say(msg, size, "field \"%s\" = %.17g is not an integer in [%lld, %lld]", key, x,
                   (long long)min, (long long)max);
    *out = (int64_t)x;
    return 0;
}

/* a*b into *out unless it overflows int64 (a, b >= 0). */
static int mul_ok(int64_t a, int64_t b, int64_t *out) {
    if (a != 0 && b > INT64_MAX / a) return 0;
    *out = a * b;
    return 1;
}

/* Decodes n little-endian float32 values. */
static void decode_f32le(const unsigned char *src, float *dst, size_t n) {
    for (size_t i = 0; i < n; i++) {
        const unsigned char *b = src + 4 * i;
        uint32_t u = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 |
                     (uint32_t)b[3] << 24;
        memcpy(&dst[i], &u, sizeof u);
    }
}

/* Reads array `key` = [offset, length, shape] of a case, checks its shape
 * against want[0..ndim), its length against the shape, and its bytes against
 * the .bin, and returns a new decoded copy (float32, or uint8 when elem == 1). */
static int json_array(const cJSON *obj, const char *key, const int64_t *want, int ndim,
                      size_t elem, const unsigned char *bin, size_t bin_len, void **out,
                      char *msg, size_t size) {
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!a) return say(msg, size, "missing array \"%s\"", key);
    if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) != 3)
        return say(msg, size, "\"%s\" is not [offset, length, shape]", key);
    int64_t off, len, count = 1;
    const cJSON *o = cJSON_GetArrayItem(a, 0), *l = cJSON_GetArrayItem(a, 1),
                *sh = cJSON_GetArrayItem(a, 2);
    if (!cJSON_IsNumber(o) || !cJSON_IsNumber(l) || !cJSON_IsArray(sh))
        return say(msg, size, "\"%s\" is not [offset, length, shape]", key);
    double od = o->valuedouble, ld = l->valuedouble;
    if (!(od >= 0 && od <= (double)JSON_MAX_INT) || od != floor(od) ||
        !(ld >= 0 && ld <= (double)JSON_MAX_INT) || ld != floor(ld))
        return say(msg, size, "\"%s\": offset %.17g / length %.17g are not byte counts", key, od,
                   ld);
    off = (int64_t)od;
    len = (int64_t)ld;
    if (cJSON_GetArraySize(sh) != ndim)
        return say(msg, size, "\"%s\": shape has %d dims, expected %d", key,
                   cJSON_GetArraySize(sh), ndim);
    for (int i = 0; i < ndim; i++) {
        const cJSON *d = cJSON_GetArrayItem(sh, i);
        if (!cJSON_IsNumber(d) || d->valuedouble != (double)want[i]) {
            char ws[200] = "";
            for (int j = 0; j < ndim; j++)
                append(ws, sizeof ws, "%s%lld", j ? "," : "", (long long)want[j]);
            return say(msg, size, "\"%s\": shape dim %d is %s, expected shape [%s]", key, i,
                       cJSON_IsNumber(d) ? "different" : "not a number", ws);
        }
        if (!mul_ok(count, want[i], &count))
            return say(msg, size, "\"%s\": shape overflows", key);
    }
    int64_t bytes;
    if (!mul_ok(count, (int64_t)elem, &bytes))
        return say(msg, size, "\"%s\": shape overflows", key);
    if (bytes != len)
        return say(msg, size, "\"%s\": length %lld bytes, but the shape needs %lld", key,
                   (long long)len, (long long)bytes);
    if ((uint64_t)off > bin_len || (uint64_t)len > bin_len - (uint64_t)off)
        return say(msg, size, "\"%s\": bytes [%lld, %lld) are past the end of the .bin (%zu bytes)",
                   key, (long long)off, (long long)(off + len), bin_len);
    void *buf = malloc(len ? (size_t)len : 1);
    if (!buf) return say(msg, size, "\"%s\": out of memory", key);
    if (elem == 1) memcpy(buf, bin + off, (size_t)len);
    else decode_f32le(bin + off, buf, (size_t)count);
    *out = buf;
    return 0;
}

/* Reads and validates one case object (fields, geometry, arrays). */
static int parse_case(const cJSON *obj, const unsigned char *bin, size_t bin_len, attn_case *c,
                      char *msg, size_t size) {
    memset(c, 0, sizeof *c);
    if (!cJSON_IsObject(obj)) return say(msg, size, "the case is not a JSON object");
    struct {
        const char *key;
        int64_t *dst;
        int64_t min;
    } f[] = {{"S", &c->S, 1},          {"Hq", &c->Hq, 1},
             {"Hkv", &c->Hkv, 1},      {"D", &c->D, 1},
             {"T", &c->T, 1},          {"slots", &c->slots, 1},
             {"session", &c->session, 0}, {"frame_pos", &c->frame_pos, 0},
             {"ring_frames", &c->RF, 1}, {"ring_buckets", &c->RB, 1},
             {"pinned_dilation", &c->PD, 1}};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        if (json_int(obj, f[i].key, f[i].min, JSON_MAX_INT, f[i].dst, msg, size)) return -1;
    const cJSON *sc = cJSON_GetObjectItemCaseSensitive(obj, "scale");
    if (!cJSON_IsNumber(sc) || !(sc->valuedouble > 0 && sc->valuedouble < 1e30))
        return say(msg, size, "field \"scale\" is missing or not a positive number");
    c->scale = sc->valuedouble;

    rkv_geometry g = {c->S, c->Hkv, c->RF, c->RB, c->D, c->T, c->PD, RKV_DTYPE_F32};
    if (rkv_geometry_check(&g) != RKV_OK)
        return say(msg, size, "invalid geometry: %s", cli_lib_detail(NULL));
    size_t bytes = rkv_geometry_memory_bytes(&g);
    if (bytes > RKV_TRACE_MAX_LAYER_BYTES)
        return say(msg, size, "the layer needs %zu bytes; this tool handles at most %zu", bytes,
                   (size_t)RKV_TRACE_MAX_LAYER_BYTES);
    if (c->slots != rkv_geometry_total_slots(&g))
        return say(msg, size, "slots = %lld, but the geometry has %lld", (long long)c->slots,
                   (long long)rkv_geometry_total_slots(&g));
    if (c->Hq % c->Hkv != 0)
        return say(msg, size, "Hq = %lld is not a multiple of Hkv = %lld", (long long)c->Hq,
                   (long long)c->Hkv);
    if (c->session >= c->S)
        return say(msg, size, "session %lld is not in [0, %lld)", (long long)c->session,
                   (long long)c->S);

    int64_t qshape[4] = {1, c->Hq, c->T, c->D}, kvshape[4] = {1, c->Hkv, c->slots, c->D},
            visshape[1] = {c->slots};
    if (json_array(obj, "q", qshape, 4, 4, bin, bin_len, (void **)&c->q, msg, size) ||
        json_array(obj, "k", kvshape, 4, 4, bin, bin_len, (void **)&c->k, msg, size) ||
        json_array(obj, "v", kvshape, 4, 4, bin, bin_len, (void **)&c->v, msg, size) ||
        json_array(obj, "out_flex", qshape, 4, 4, bin, bin_len, (void **)&c->out_flex, msg,
                   size) ||
        json_array(obj, "out_f64", qshape, 4, 4, bin, bin_len, (void **)&c->out_f64, msg,
                   size) ||
        json_array(obj, "vis", visshape, 1, 1, bin, bin_len, (void **)&c->vis, msg, size)) {
        free_case(c);
        return -1;
    }
    return 0;
}

/* Whether the case's K or V is nonzero anywhere in slots [base, base+T). */
static int frame_nonzero(const attn_case *c, int64_t base) {
    for (int64_t h = 0; h < c->Hkv; h++)
        for (int64_t t = 0; t < c->T; t++)
            for (int64_t d = 0; d < c->D; d++) {
                size_t i = ((size_t)h * (size_t)c->slots + (size_t)(base + t)) * (size_t)c->D +
                           (size_t)d;
                if (c->k[i] != 0.0f || c->v[i] != 0.0f) return 1;
            }
    return 0;
}

/* Upserts the case's K/V at slots [base, base+T) as one frame of `session`
 * at clock f (B = 1, no visibility row). */
static int upsert_frame(rkv_layer *layer, const attn_case *c, float *frame, int64_t base,
                        int64_t session, int64_t f, int commit, char *msg, size_t size) {
    size_t i = 0;
    for (int cv = 0; cv < 2; cv++) {
        const float *src = cv ? c->v : c->k;
        for (int64_t h = 0; h < c->Hkv; h++)
            for (int64_t t = 0; t < c->T; t++)
                for (int64_t d = 0; d < c->D; d++)
                    frame[i++] = src[((size_t)h * (size_t)c->slots + (size_t)(base + t)) *
                                         (size_t)c->D + (size_t)d];
    }
    rkv_status st = rkv_layer_upsert(layer, frame, RKV_DTYPE_F32, 1, &f, &session, commit, NULL);
    if (st != RKV_OK)
        return say(msg, size,
                   "loading session %lld slots %lld.. at clock %lld: upsert failed: %s",
                   (long long)session, (long long)base, (long long)f, cli_lib_detail(NULL));
    return 0;
}

/* Fills a layer of the case's geometry with the case's K/V through the public
 * API: ring frames with commit=1 at clock PD*r (a write step landing in ring
 * slot r), then every session's scratch with commit=0. For the queried
 * session a ring frame is filled when vis shows it, or when it is the slot
 * hidden by the case's own write step and holds data; for the other sessions
 * every ring frame that holds data. */
static int load_case(rkv_layer *layer, const attn_case *c, char *msg, size_t size) {
    int64_t C = (c->RF + 1) * c->T, L = c->RF * c->T;
    const int64_t hidden = rkv__rule_hidden_frame(c->frame_pos, c->PD, c->RB);
    float *frame = malloc((size_t)2 * (size_t)c->Hkv * (size_t)c->T * (size_t)c->D * sizeof *frame);
    if (!frame) return say(msg, size, "out of memory");
    int rc = 0;
    for (int64_t s = 0; s < c->S && rc == 0; s++)
        for (int64_t r = 0; r < c->RB && rc == 0; r++) {
            int64_t base = s * C + r * c->T;
            int fill = s == c->session ? (c->vis[base] || (r == hidden && frame_nonzero(c, base)))
                                       : frame_nonzero(c, base);
            if (fill) rc = upsert_frame(layer, c, frame, base, s, c->PD * r, 1, msg, size);
        }
    for (int64_t s = 0; s < c->S && rc == 0; s++)
        rc = upsert_frame(layer, c, frame, s * C + L, s, s == c->session ? c->frame_pos : 0, 0,
                          msg, size);
    free(frame);
    return rc;
}

/* Checks that every slot the vis row shows holds the case's K and V in the
 * layer (so attention with that row reads the case's data). */
static int check_loaded(const rkv_layer *layer, const attn_case *c, char *msg, size_t size) {
    const float *kv = rkv_layer_kv(layer);
    size_t half = (size_t)c->Hkv * (size_t)c->slots * (size_t)c->D;
    for (int64_t j = 0; j < c->slots; j++) {
        if (!c->vis[j]) continue;
        for (int64_t h = 0; h < c->Hkv; h++)
            for (int64_t d = 0; d < c->D; d++) {
                size_t i = ((size_t)h * (size_t)c->slots + (size_t)j) * (size_t)c->D + (size_t)d;
                if (memcmp(&kv[i], &c->k[i], sizeof(float)) ||
                    memcmp(&kv[half + i], &c->v[i], sizeof(float)))
                    return say(msg, size, "slot %lld is visible in vis but the layer does not hold "
                               "the case's K/V there after loading (head %lld dim %lld: K %.9g "
                               "vs %.9g, V %.9g vs %.9g)", (long long)j, (long long)h,
                               (long long)d, (double)kv[i], (double)c->k[i],
                               (double)kv[half + i], (double)c->v[i]);
            }
    }
    return 0;
}

/* ||out - ref|| / ||ref|| in double; the index of the largest |out - ref|
 * goes to *worst. NaN anywhere makes the result NaN. */
static double rel_err(const float *out, const float *ref, size_t n, size_t *worst) {
    double num = 0, den = 0, big = -1;
    int nan_seen = 0;
    *worst = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)out[i] - (double)ref[i];
        num += d * d;
        den += (double)ref[i] * (double)ref[i];
        if (isnan(d)) {
            if (!nan_seen) *worst = i;
            nan_seen = 1;
        } else if (!nan_seen && fabs(d) > big) {
            big = fabs(d);
            *worst = i;
        }
    }
    if (den == 0) return num == 0 ? 0 : INFINITY;
    return sqrt(num / den);
}

/* Runs rkv_layer_attend once (vis row or session+clock) and compares with
 * out_f64 and out_flex; the errors go to e64 / eflex. */
static int attend_and_compare(const rkv_layer *layer, const attn_case *c, const char *way,
                              const uint8_t *vis, float *out, double *e64, double *eflex,
                              char *msg, size_t size) {
    size_t n = (size_t)c->Hq * (size_t)c->T * (size_t)c->D;
    for (size_t i = 0; i < n; i++) out[i] = NAN; /* catch outputs never written */
    rkv_attention_args a = RKV_ATTENTION_ARGS_INIT;
    a.batch = 1;
    a.n_q_heads = c->Hq;
    a.n_queries = c->T;
    a.q = c->q;
    a.q_dtype = RKV_DTYPE_F32;
    a.out = out;
    a.out_dtype = RKV_DTYPE_F32;
    a.session_idx = &c->session;
    a.frame_pos = vis ? NULL : &c->frame_pos;
    a.visible = vis;
    a.scale = (float)c->scale;
    rkv_status st = rkv_layer_attend(layer, &a);
    if (st != RKV_OK)
        return say(msg, size, "%s: attention failed: %s", way, cli_lib_detail(NULL));
    size_t w64, wflex;
    *e64 = rel_err(out, c->out_f64, n, &w64);
    *eflex = rel_err(out, c->out_flex, n, &wflex);
    if (!(*e64 <= ATTN_TOLERANCE) || !(*eflex <= ATTN_TOLERANCE)) {
        size_t w = w64, TD = (size_t)c->T * (size_t)c->D;
        return say(msg, size, "%s: relative error %.3g vs out_f64, %.3g vs out_flex (max %g); "
                   "largest difference at head %zu query %zu dim %zu: got %.9g, out_f64 %.9g",
                   way, *e64, *eflex, ATTN_TOLERANCE, w / TD, (w % TD) / (size_t)c->D,
                   w % (size_t)c->D, (double)out[w], (double)c->out_f64[w]);
    }
    return 0;
}

/* Runs one parsed case both ways; 0 = pass, detail gets the errors. */
static int run_case(const attn_case *c, char *msg, size_t size, char *detail, size_t dsize) {
    rkv_geometry g = {c->S, c->Hkv, c->RF, c->RB, c->D, c->T, c->PD, RKV_DTYPE_F32};
    rkv_layer *layer = NULL;
    float *out = NULL;
    int64_t *frames = NULL;
    uint8_t *row = NULL;
    int rc = -1;
    double a64, aflex, b64, bflex;

    if (rkv_layer_create(&g, &layer) != RKV_OK) {
        say(msg, size, "cannot create the layer: %s", cli_lib_detail(NULL));
        goto done;
    }
    out = malloc((size_t)c->Hq * (size_t)c->T * (size_t)c->D * sizeof *out);
    frames = malloc((size_t)(c->RF + 1) * sizeof *frames);
    row = malloc((size_t)c->slots);
    if (!out || !frames || !row) {
        say(msg, size, "out of memory");
        goto done;
    }
    if (load_case(layer, c, msg, size) || check_loaded(layer, c, msg, size)) goto done;

    /* The bits-and-clock rule must show exactly the reference's row. */
    int64_t count = 0;
    rkv_status st = rkv_layer_visible_frames(layer, c->session, c->frame_pos, frames, &count);
    if (st == RKV_OK) {
        memset(row, 0, (size_t)c->slots);
        st = rkv_visible_row_from_frames(&g, c->session, frames, count, row);
    }
    if (st != RKV_OK) {
        say(msg, size, "visibility from bits and clock: %s", cli_lib_detail(NULL));
        goto done;
    }
    uint8_t *vis01 = malloc((size_t)c->slots);
    if (!vis01) {
        say(msg, size, "out of memory");
        goto done;
    }
    for (int64_t j = 0; j < c->slots; j++) vis01[j] = c->vis[j] != 0;
    int bad = compare_rows("visibility from bits and clock vs vis", vis01, row, c->slots, msg,
                           size);
    free(vis01);
    if (bad) goto done;

    if (attend_and_compare(layer, c, "(a) with the vis row", c->vis, out, &a64, &aflex, msg,
                           size) ||
        attend_and_compare(layer, c, "(b) with session and clock", NULL, out, &b64, &bflex, msg,
                           size))
        goto done;
    snprintf(detail, dsize, "vis row: %.2g vs f64, %.2g vs flex; session+clock: %.2g vs f64, "
             "%.2g vs flex", a64, aflex, b64, bflex);
    rc = 0;
done:
    free(out);
    free(frames);
    free(row);
    rkv_layer_destroy(layer);
    return rc;
}

/* The .bin beside a manifest: its path with ".json" replaced by ".bin". */
static char *bin_path_for(const char *json_path) {
    size_t n = strlen(json_path);
    size_t stem = (n >= 5 && !strcmp(json_path + n - 5, ".json")) ? n - 5 : n;
    char *p = malloc(stem + 5);
    if (!p) return NULL;
    memcpy(p, json_path, stem);
    memcpy(p + stem, ".bin", 5);
    return p;
}

/* Replays every case of one manifest, one line per case (or one FAIL line
 * for the file when it cannot be read at all). */
static void replay_manifest(const char *path, tally *tl) {
    char msg[MSG_SIZE], detail[MSG_SIZE], name[1024];
    unsigned char *json = NULL, *bin = NULL;
    size_t json_len = 0, bin_len = 0;
    cJSON *root = NULL;
    char *bin_path = bin_path_for(path);
    if (!bin_path) {
        report_fail(tl, path, "out of memory");
        return;
    }
    if (read_file(path, MAX_JSON_BYTES, &json, &json_len, msg, sizeof msg) ||
        read_file(bin_path, MAX_BIN_BYTES, &bin, &bin_len, msg, sizeof msg)) {
        report_fail(tl, path, msg);
        goto done;
    }
    if (memchr(json, 0, json_len)) {
        report_fail(tl, path, "the manifest contains a NUL byte (not JSON text)");
        goto done;
    }
    root = cJSON_ParseWithLength((const char *)json, json_len);
    if (!root) {
        const char *at = cJSON_GetErrorPtr();
        long off = at ? (long)(at - (const char *)json) : -1;
        snprintf(msg, sizeof msg, "not valid JSON (parse error near byte %ld)", off);
        report_fail(tl, path, msg);
        goto done;
    }
    const cJSON *cases = cJSON_GetObjectItemCaseSensitive(root, "cases");
    if (!cJSON_IsObject(root) || !cJSON_IsArray(cases) || cJSON_GetArraySize(cases) == 0) {
        report_fail(tl, path, "no non-empty \"cases\" array at the top level");
        goto done;
    }
    int i = 0;
    const cJSON *obj;
    cJSON_ArrayForEach(obj, cases) {
        attn_case c;
        snprintf(name, sizeof name, "%s case %d", path, i++);
        detail[0] = '\0';
        if (parse_case(obj, bin, bin_len, &c, msg, sizeof msg)) {
            report_fail(tl, name, msg);
            continue;
        }
        if (run_case(&c, msg, sizeof msg, detail, sizeof detail)) report_fail(tl, name, msg);
        else report_pass(tl, name, detail);
        free_case(&c);
    }
done:
    cJSON_Delete(root);
    free(json);
    free(bin);
    free(bin_path);
}

/* ------------------------------------------------------------------------ */
/* The command                                                               */
/* ------------------------------------------------------------------------ */

/* Prints the usage text. */
static void usage(FILE *f) {
    fprintf(f,
            "usage: ringkv replay FILE...\n\n"
            "Replays golden data against ringkv (formats: shared/golden/README.md):\n"
            "  *.txt   an operation trace: rebuilds the layer, runs every upsert and\n"
            "          reset, compares every visible row, then the whole K/V buffer\n"
            "          and the written bits\n"
            "  *.json  an attention-vector manifest (its .bin beside it): runs\n"
            "          ringkv's attention on each case with the case's vis row and\n"
            "          with its session and clock, against out_f64 and out_flex\n"
            "          (norm-wise relative error at most %g)\n\n"
            "Prints PASS or FAIL per trace or case, then 'N passed, M failed'.\n"
            "Exit status: 0 everything passed; 1 a trace or case failed (or none ran); 2 a\n"
            "bad option or a FILE that is missing or cannot be read (nothing is replayed).\n",
            ATTN_TOLERANCE);
}

int rkv_cmd_replay(int argc, char **argv) {
    /* the FILE arguments, in order (everything after "--" is a file) */
    const char **files = malloc((size_t)argc * sizeof *files);
    int nfiles = 0, rc = CLI_EXIT_USAGE;
    if (!files) {
        fprintf(stderr, "ringkv replay: out of memory\n");
        return CLI_EXIT_FAILURE;
    }
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--")) {
            while (++i < argc) files[nfiles++] = argv[i];
            break;
        }
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            rc = CLI_EXIT_OK;
            goto done;
        }
        if (argv[i][0] == '-' && argv[i][1] != '\0') {
            fprintf(stderr, "ringkv replay: unknown option '%s'\n\n", argv[i]);
            usage(stderr);
            goto done;
        }
        files[nfiles++] = argv[i];
    }
    if (nfiles == 0) {
        fprintf(stderr, "ringkv replay: no file given\n\n");
        usage(stderr);
        goto done;
    }
    /* every FILE must exist and be readable before any is replayed */
    for (int i = 0; i < nfiles; i++) {
        char err[4600];
        if (cli_check_input_file("file", files[i], "a trace or a manifest", err, sizeof err)) {
            fprintf(stderr, "ringkv replay: %s\n", err);
            goto done;
        }
    }
    tally tl = {0, 0};
    for (int i = 0; i < nfiles; i++) {
        size_t n = strlen(files[i]);
        if (n >= 5 && !strcmp(files[i] + n - 5, ".json")) replay_manifest(files[i], &tl);
        else replay_trace(files[i], &tl);
    }
    printf("%d passed, %d failed\n", tl.passed, tl.failed);
    rc = (tl.failed == 0 && tl.passed > 0) ? CLI_EXIT_OK : CLI_EXIT_FAILURE;
done:
    free(files);
    return rc;
}

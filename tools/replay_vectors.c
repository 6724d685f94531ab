/* `ringkv replay` on attention-vector manifests (*.json, with the .bin of
 * the same stem beside them; shared/golden/README.md): loads each case's
 * K/V into a layer through the public API, checks that the bits-and-clock
 * rule shows exactly the case's vis row, and runs attention with the vis
 * row and with the session and clock against out_f64 and out_flex; each
 * case twice: in f32 storage, and in bf16 storage (K/V rounded on the way
 * in, queries f32: the bf16 engines, AVX512-BF16 and AMX pairs where d_head
 * suits them, against bf16's tolerance). */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/ring_rule.h" /* the ring rule the library uses (header only) */
#include "cli.h"
#include "escape.h"
#include "replay.h"
#include "ringkv.h"
#include "trace.h"

/* Largest manifest (.json) and data file (.bin) this tool reads. */
#define MAX_JSON_BYTES ((size_t)64 << 20)
#define MAX_BIN_BYTES ((size_t)8 << 30)
/* Largest integer a JSON number carries exactly. */
#define JSON_MAX_INT ((int64_t)1 << 53)

/* Reads a whole file (at most max bytes) into a new buffer with a NUL after
 * the data. 0 on success; -1 with a message. */
static int read_file(const char *path, size_t max, unsigned char **data, size_t *len, char *msg,
                     size_t size) {
    FILE *f = fopen(path, "rb");
    if (!f) return say(msg, size, "%s: cannot open: %s", rkv_tool_shown(path), strerror(errno));
    size_t cap = 0, n = 0;
    unsigned char *buf = NULL;
    for (;;) {
        if (n + 1 >= cap) {
            if (cap > max) {
                free(buf);
                fclose(f);
                return say(msg, size, "%s: larger than %zu bytes", rkv_tool_shown(path), max);
            }
            size_t ncap = cap ? cap * 2 : 65536;
            unsigned char *nb = realloc(buf, ncap);
            if (!nb) {
                free(buf);
                fclose(f);
                return say(msg, size, "%s: out of memory", rkv_tool_shown(path));
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
        return say(msg, size, "%s: read error", rkv_tool_shown(path));
    }
    if (n > max) {
        free(buf);
        return say(msg, size, "%s: larger than %zu bytes", rkv_tool_shown(path), max);
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
    const rkv_dtype dt = rkv_layer_geometry(layer)->dtype;
    size_t i = 0;
    for (int cv = 0; cv < 2; cv++) {
        const float *src = cv ? c->v : c->k;
        for (int64_t h = 0; h < c->Hkv; h++)
            for (int64_t t = 0; t < c->T; t++)
                for (int64_t d = 0; d < c->D; d++)
                    frame[i++] = src[((size_t)h * (size_t)c->slots + (size_t)(base + t)) *
                                         (size_t)c->D + (size_t)d];
    }
    /* 16-bit storage: the frame converted in place (element i's 2 bytes
     * land below element i's 4, already read), as the upsert takes it */
    const void *kv = frame;
    if (dt != RKV_DTYPE_F32) {
        uint16_t *h = (uint16_t *)(void *)frame;
        for (size_t j = 0; j < i; j++) {
            float x = frame[j];
            if (rkv_convert(&x, RKV_DTYPE_F32, &h[j], dt, 1) != RKV_OK)
                return say(msg, size, "converting the case's K/V: %s", cli_lib_detail(NULL));
        }
        kv = h;
    }
    rkv_status st = rkv_layer_upsert(layer, kv, dt, 1, &f, &session, commit, NULL);
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
    const rkv_dtype dt = rkv_layer_geometry(layer)->dtype;
    const size_t es = rkv_dtype_size(dt);
    const unsigned char *kv = rkv_layer_kv(layer);
    size_t half = (size_t)c->Hkv * (size_t)c->slots * (size_t)c->D;
    for (int64_t j = 0; j < c->slots; j++) {
        if (!c->vis[j]) continue;
        for (int64_t h = 0; h < c->Hkv; h++)
            for (int64_t d = 0; d < c->D; d++) {
                size_t i = ((size_t)h * (size_t)c->slots + (size_t)j) * (size_t)c->D + (size_t)d;
                /* the layer's element widened, against the case's rounded
                 * to the storage dtype and widened back */
                float got[2], want[2];
                unsigned char tmp[8];
                for (int cv = 0; cv < 2; cv++) {
                    const float src = cv ? c->v[i] : c->k[i];
                    if (rkv_convert(kv + ((size_t)cv * half + i) * es, dt, &got[cv], RKV_DTYPE_F32,
                                    1) != RKV_OK ||
                        rkv_convert(&src, RKV_DTYPE_F32, tmp, dt, 1) != RKV_OK ||
                        rkv_convert(tmp, dt, &want[cv], RKV_DTYPE_F32, 1) != RKV_OK)
                        return say(msg, size, "converting K/V: %s", cli_lib_detail(NULL));
                }
                if (memcmp(&got[0], &want[0], sizeof(float)) || memcmp(&got[1], &want[1], sizeof(float)))
                    return say(msg, size, "slot %lld is visible in vis but the layer does not hold "
                               "the case's K/V there after loading (head %lld dim %lld: K %.9g "
                               "vs %.9g, V %.9g vs %.9g)", (long long)j, (long long)h,
                               (long long)d, (double)got[0], (double)want[0],
                               (double)got[1], (double)want[1]);
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
    const double tol = rkv_layer_geometry(layer)->dtype == RKV_DTYPE_F32
                           ? REPLAY_ATTN_TOLERANCE
                           : REPLAY_ATTN_TOLERANCE_BF16;
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
    if (!(*e64 <= tol) || !(*eflex <= tol)) {
        size_t w = w64, TD = (size_t)c->T * (size_t)c->D;
        return say(msg, size, "%s: relative error %.3g vs out_f64, %.3g vs out_flex (max %g); "
                   "largest difference at head %zu query %zu dim %zu: got %.9g, out_f64 %.9g",
                   way, *e64, *eflex, tol, w / TD, (w % TD) / (size_t)c->D,
                   w % (size_t)c->D, (double)out[w], (double)c->out_f64[w]);
    }
    return 0;
}

/* Runs one parsed case both ways in storage dtype dt; 0 = pass, detail
 * gets the errors (and the attention kernel that ran). */
static int run_case(const attn_case *c, rkv_dtype dt, char *msg, size_t size, char *detail,
                    size_t dsize) {
    rkv_geometry g = {c->S, c->Hkv, c->RF, c->RB, c->D, c->T, c->PD, dt};
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
    int bad = replay_compare_rows("visibility from bits and clock vs vis", vis01, row, c->slots, msg,
                           size);
    free(vis01);
    if (bad) goto done;

    if (attend_and_compare(layer, c, "(a) with the vis row", c->vis, out, &a64, &aflex, msg,
                           size) ||
        attend_and_compare(layer, c, "(b) with session and clock", NULL, out, &b64, &bflex, msg,
                           size))
        goto done;
    snprintf(detail, dsize, "vis row: %.2g vs f64, %.2g vs flex; session+clock: %.2g vs f64, "
             "%.2g vs flex; kernel %s", a64, aflex, b64, bflex, rkv_attention_isa(layer));
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

/* Reads the manifest at path and parses it: a JSON object with a "cases"
 * array. 0 with *root (the caller frees it), -1 with a message when it is
 * not a manifest at all, -2 when it cannot be read. */
static int load_manifest(const char *path, cJSON **root, char *msg, size_t size) {
    unsigned char *json = NULL;
    size_t json_len = 0;
    *root = NULL;
    if (read_file(path, MAX_JSON_BYTES, &json, &json_len, msg, size)) return -2;
    int rc = 0;
    if (memchr(json, 0, json_len)) {
        rc = say(msg, size, "the file holds a NUL byte (binary data, not JSON text)");
    } else if (!(*root = cJSON_ParseWithLength((const char *)json, json_len))) {
        const char *at = cJSON_GetErrorPtr();
        if (at && at >= (const char *)json && at <= (const char *)json + json_len)
            rc = say(msg, size, "not valid JSON (parse error near byte %zu)",
                     (size_t)(at - (const char *)json));
        else
            rc = say(msg, size, "not valid JSON");
    } else if (!cJSON_IsObject(*root) ||
               !cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(*root, "cases"))) {
        rc = say(msg, size, "no \"cases\" array at the top level of a JSON object");
        cJSON_Delete(*root);
        *root = NULL;
    }
    free(json);
    return rc;
}

int replay_manifest_check(const char *path, char *msg, size_t size) {
    cJSON *root;
    char why[REPLAY_MSG_SIZE];
    const int rc = load_manifest(path, &root, why, sizeof why);
    cJSON_Delete(root);
    if (rc == -2) return say(msg, size, "%s", why);
    if (rc)
        return say(msg, size,
                   "%s: not a ringkv attention-vector manifest: %s (shared/golden/README.md)",
                   rkv_tool_shown(path), why);
    char *bin_path = bin_path_for(path);
    if (!bin_path) return say(msg, size, "out of memory");
    const int bad = cli_check_input_file("its data file", bin_path, "a .bin file", why, sizeof why);
    if (bad) say(msg, size, "manifest %s: %s", rkv_tool_shown(path), why);
    free(bin_path);
    return bad ? -1 : 0;
}

/* Replays every case of one manifest, one line per case (or one FAIL line
 * for the file when it cannot be read at all). */
void replay_manifest_file(const char *path, replay_tally *tl) {
    char msg[REPLAY_MSG_SIZE], detail[REPLAY_MSG_SIZE], name[1024];
    unsigned char *bin = NULL;
    size_t bin_len = 0;
    cJSON *root = NULL;
    char *bin_path = bin_path_for(path);
    if (!bin_path) {
        replay_fail(tl, path, "out of memory");
        return;
    }
    if (load_manifest(path, &root, msg, sizeof msg) ||
        read_file(bin_path, MAX_BIN_BYTES, &bin, &bin_len, msg, sizeof msg)) {
        replay_fail(tl, path, msg);
        goto done;
    }
    const cJSON *cases = cJSON_GetObjectItemCaseSensitive(root, "cases");
    if (cJSON_GetArraySize(cases) == 0) {
        replay_fail(tl, path, "the \"cases\" array is empty");
        goto done;
    }
    int i = 0;
    const cJSON *obj;
    cJSON_ArrayForEach(obj, cases) {
        attn_case c;
        snprintf(name, sizeof name, "%s case %d", path, i++);
        detail[0] = '\0';
        if (parse_case(obj, bin, bin_len, &c, msg, sizeof msg)) {
            replay_fail(tl, name, msg);
            continue;
        }
        if (run_case(&c, RKV_DTYPE_F32, msg, sizeof msg, detail, sizeof detail))
            replay_fail(tl, name, msg);
        else
            replay_pass(tl, name, detail);
        const size_t at = strlen(name);
        snprintf(name + at, sizeof name - at, " (bf16 storage)");
        if (run_case(&c, RKV_DTYPE_BF16, msg, sizeof msg, detail, sizeof detail))
            replay_fail(tl, name, msg);
        else
            replay_pass(tl, name, detail);
        free_case(&c);
    }
done:
    cJSON_Delete(root);
    free(bin);
    free(bin_path);
}

/* The snapshot header codec (snapshot_header.h; docs/snapshot-format.md).
 *
 * A header has one reading only (issue 10; the format's "One reading only"):
 * whatever another reader would read differently is refused. Hence Jansson
 * (Debian libjansson-dev) rather than cJSON: Jansson's parser is strict
 * RFC 8259, refuses duplicate keys (JSON_REJECT_DUPLICATES, naming the key),
 * tells integers from reals and is reentrant; cJSON accepts all of these
 * silently and records parse errors in a global. The strings in
 * "__metadata__" are checked here: integers in one canonical decimal form,
 * text printable or hex, every message escaped. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include <xxhash.h>

#include "snapshot_header.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "snapshot files hold little-endian tensors; big-endian hosts are not supported yet"
#endif

#define FORMAT_NAME "ringkv-snapshot"
#define HASH_DIGITS 16
#define ZERO_DIGITS "0000000000000000"
/* session metadata (rkv_model_session_export_meta): the image's header and
 * these two keys, compact JSON as the writer adds them */
#define SESSION_META_KEY "session_meta_version"
#define WRITTEN_KEY "written_xxh3"
#define STR_(x) #x
#define STR(x) STR_(x)
#define META_KEYS                                                                                  \
    ",\"" SESSION_META_KEY "\":\"" STR(RKV_SESSION_META_VERSION) "\",\"" WRITTEN_KEY "\":\"" ZERO_DIGITS  \
    "\""
#define ESC(n) (4 * (n) + 4) /* bytes of an escaped excerpt of n bytes */

static const char *const KIND_NAMES[3] = {"k", "v", "written"};

/* The geometry's metadata after "dtype", in the writer's order: N_INTS
 * integers of the config, then per-layer lists of a spec field. */
#define N_INTS 5
static const struct {
    const char *key;
    size_t off; /* in rkv_model_config, then in rkv_layer_spec */
} GEOMETRY[] = {{"n_layers", offsetof(rkv_model_config, n_layers)},
                {"n_q_heads", offsetof(rkv_model_config, n_q_heads)},
                {"n_kv_heads", offsetof(rkv_model_config, n_kv_heads)},
                {"d_head", offsetof(rkv_model_config, d_head)},
                {"tokens_per_frame", offsetof(rkv_model_config, tokens_per_frame)},
                {"ring_frames", offsetof(rkv_layer_spec, ring_frames)},
                {"ring_buckets", offsetof(rkv_layer_spec, ring_buckets)},
                {"pinned_dilation", offsetof(rkv_layer_spec, pinned_dilation)}};
#define N_GEOMETRY (sizeof GEOMETRY / sizeof GEOMETRY[0])
#define CFG_INT(cfg, f) ((int64_t *)((char *)(cfg) + GEOMETRY[f].off))

/* ------------------------------------------------------------------------ */
/* Small helpers                                                             */
/* ------------------------------------------------------------------------ */

static rkv_status refuse(const rkv__snap_where *w, const char *fmt, ...) RKV__PRINTF(2, 3);
/* RKV_ERR_FORMAT with "what: name: " and the message. */
static rkv_status refuse(const rkv__snap_where *w, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return rkv__fail(RKV_ERR_FORMAT, "%s: %s: %s", w->what, w->name, msg);
}

static const char *escape_n(char *buf, size_t size, const uint8_t *s, size_t n, size_t max) {
    size_t o = 0, i = 0;
    for (; i < n && i < max; i++) {
        char one[5];
        const int k = s[i] == '\\'                  ? snprintf(one, sizeof one, "\\\\")
                      : s[i] >= 0x20 && s[i] < 0x7f ? snprintf(one, sizeof one, "%c", s[i])
                                                    : snprintf(one, sizeof one, "\\x%02x", s[i]);
        if (o + (size_t)k + 4 > size) break;
        memcpy(buf + o, one, (size_t)k);
        o += (size_t)k;
    }
    if (i < n && o + 4 <= size) {
        memcpy(buf + o, "...", 3);
        o += 3;
    }
    if (size) buf[o] = '\0';
    return buf;
}

const char *rkv__snap_escape(char *buf, size_t size, const char *s, size_t max) {
    return escape_n(buf, size, (const uint8_t *)s, strlen(s), max);
}

static void put_le64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static uint64_t get_le64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

static int hex_digit(char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}
static void hex16(uint64_t v, char *out) {
    static const char digits[] = "0123456789abcdef";
    for (int i = HASH_DIGITS - 1; i >= 0; i--, v >>= 4) out[i] = digits[v & 15];
}
/* 16 lowercase hex digits -> value; false otherwise. */
static bool parse_hex16(const char *s, size_t n, uint64_t *out) {
    if (n != HASH_DIGITS) return false;
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        const int d = hex_digit(s[i]);
        if (d < 0) return false;
        v = (v << 4) | (uint64_t)d;
    }
    *out = v;
    return true;
}

/* The one canonical decimal form of an int64 in s[0, n): "0", or an
 * optional '-' and a nonzero digit followed by digits, within int64.
 * Nothing else: no '+', leading zeros, "-0", blanks, fraction, exponent. */
static bool parse_i64n(const char *s, size_t n, int64_t *out) {
    const bool neg = n > 0 && s[0] == '-';
    const char *p = s + neg;
    const size_t m = n - neg;
    if (m == 0 || m > 19 || (p[0] == '0' && (m > 1 || neg))) return false;
    uint64_t v = 0; /* 19 digits stay below 2^64 */
    for (size_t i = 0; i < m; i++) {
        if (p[i] < '0' || p[i] > '9') return false;
        v = v * 10 + (uint64_t)(p[i] - '0');
    }
    if (v > (uint64_t)INT64_MAX + neg) return false;
    *out = neg ? -(int64_t)(v - 1) - 1 : (int64_t)v;
    return true;
}

static bool printable_ascii(const char *s) {
    for (; *s; s++)
        if (*s < 0x20 || *s > 0x7e) return false;
    return true;
}
static bool blank(uint8_t c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/* header_xxh3: XXH3-64 of the 8 length bytes and the n header bytes with
 * its own 16 digits, at pos, read as '0'. */
static uint64_t header_sum(const uint8_t first8[8], const uint8_t *h, uint64_t n, uint64_t pos) {
    XXH3_state_t hs;
    XXH3_64bits_reset(&hs);
    XXH3_64bits_update(&hs, first8, 8);
    XXH3_64bits_update(&hs, h, (size_t)pos);
    XXH3_64bits_update(&hs, ZERO_DIGITS, HASH_DIGITS);
    XXH3_64bits_update(&hs, h + pos + HASH_DIGITS, (size_t)(n - pos - HASH_DIGITS));
    return XXH3_64bits_digest(&hs);
}

/* Tensor `kind` (0 K, 1 V, 2 written) of layer i of one session: dtype,
 * shape ([n_kv_heads, slots, d_head], or [slots] for the written bits; a
 * session's slots are (RF + 1) * T) and bytes. */
typedef struct tensor_form {
    const char *dtype;
    uint64_t shape[3];
    size_t rank;
    uint64_t bytes;
} tensor_form;
static tensor_form form_of(const rkv_model_config *cfg, int64_t i, int kind) {
    rkv_geometry g;
    rkv_model_config_layer_geometry(cfg, i, &g);
    const uint64_t C = (uint64_t)((g.ring_frames + 1) * g.tokens_per_frame);
    if (kind == 2) return (tensor_form){"U8", {C}, 1, C};
    const uint64_t H = (uint64_t)g.n_kv_heads, D = (uint64_t)g.d_head;
    return (tensor_form){rkv__dtype_safetensors(g.dtype), {H, C, D}, 3,
                         H * C * D * rkv_dtype_size(g.dtype)};
}

/* ------------------------------------------------------------------------ */
/* Reading, stage by stage                                                   */
/* ------------------------------------------------------------------------ */

rkv_status rkv__snap_header_length(const rkv__snap_where *w, const uint8_t *first8,
                                   uint64_t file_size, uint64_t *n) {
    if (file_size < 8 || !first8)
        return refuse(w,
                      "truncated: the %s has %llu bytes; a snapshot starts with an 8-byte "
                      "header length",
                      strcmp(w->name, "(memory)") ? "file" : "image",
                      (unsigned long long)file_size);
    *n = get_le64(first8);
    if (*n < 2 || *n > RKV__SNAP_MAX_HEADER)
        return refuse(w, "corrupted header length: %llu bytes (expected 2 to %llu)",
                      (unsigned long long)*n, (unsigned long long)RKV__SNAP_MAX_HEADER);
    if (*n > file_size - 8)
        return refuse(w,
                      "truncated (or corrupted header length): the header length says %llu "
                      "bytes but only %llu follow",
                      (unsigned long long)*n, (unsigned long long)(file_size - 8));
    return RKV_OK;
}

/* The header as one JSON object, every key once in each object. */
static rkv_status load_json(const rkv__snap_where *w, const uint8_t *h, uint64_t n,
                            json_t **root) {
    json_error_t e;
    *root = json_loadb((const char *)h, (size_t)n, JSON_REJECT_DUPLICATES, &e);
    if (*root && json_is_object(*root)) return RKV_OK;
    if (*root) {
        json_decref(*root);
        *root = NULL;
        return refuse(w, "corrupted header: the %llu-byte header is not a JSON object",
                      (unsigned long long)n);
    }
    char text[ESC(100)], around[ESC(40)];
    const size_t pos = e.position > 0 && (uint64_t)e.position <= n ? (size_t)e.position : 0;
    const size_t from = pos > 32 ? pos - 32 : 0;
    escape_n(around, sizeof around, h + from, (size_t)n - from, 40);
    const char *near = strstr(e.text, "near '");
    if (json_error_code(&e) == json_error_duplicate_key && near) {
        const size_t len = strlen(near + 6);
        escape_n(text, sizeof text, (const uint8_t *)near + 6, len ? len - 1 : 0, 60);
        return refuse(w,
                      "corrupted header: duplicate key %s at header byte %zu (each key may "
                      "appear once in an object: JSON readers differ on which value they keep)",
                      text, pos);
    }
    return refuse(w, "corrupted header: the %llu-byte header is not valid JSON: %s at header "
                     "byte %zu (%s%s)",
                  (unsigned long long)n, rkv__snap_escape(text, sizeof text, e.text, 100), pos,
                  from ? "..." : "", around);
}

static const char *meta_str(const json_t *meta, const char *key) {
    return json_string_value(json_object_get(meta, key));
}

/* 16 lowercase hex digits under key into *out. */
static rkv_status meta_hex(const rkv__snap_where *w, const json_t *meta, const char *key,
                           uint64_t *out) {
    const char *v = meta_str(meta, key);
    if (v && parse_hex16(v, strlen(v), out)) return RKV_OK;
    return refuse(w, "corrupted header: metadata '%s' is missing or is not 16 lowercase hex digits",
                  key);
}

/* format and version: read before the checksum, so that a file of another
 * version (which may hash differently) is reported as such. */
static rkv_status check_format(const rkv__snap_where *w, const json_t *meta, bool session,
                               rkv_snapshot_info *info) {
    char e[ESC(40)];
    const char *format = meta_str(meta, "format");
    if (!format || strcmp(format, FORMAT_NAME))
        return refuse(w,
                      "not a ringkv snapshot: __metadata__.format is %s%s%s; expected "
                      "'" FORMAT_NAME "'",
                      format ? "'" : "",
                      format ? rkv__snap_escape(e, sizeof e, format, 40) : "missing",
                      format ? "'" : "");
    const char *version = meta_str(meta, "format_version");
    int64_t ver = 0;
    if (!version || !parse_i64n(version, strlen(version), &ver) || ver != RKV_SNAPSHOT_VERSION)
        return refuse(w, "unsupported format version '%s'; this ringkv (%s) reads version %d",
                      version ? rkv__snap_escape(e, sizeof e, version, 20) : "(missing)",
                      rkv_version(), RKV_SNAPSHOT_VERSION);
    info->format_version = ver;
    if (!session) return RKV_OK;
    if (!(version = meta_str(meta, SESSION_META_KEY)))
        return refuse(w, "not ringkv session metadata: __metadata__." SESSION_META_KEY " is "
                         "missing (a snapshot image's header has none; "
                         "rkv_model_session_export_meta writes it)");
    if (!parse_i64n(version, strlen(version), &ver) || ver != RKV_SESSION_META_VERSION)
        return refuse(w, "unsupported session metadata version %s; this ringkv reads version %d",
                      rkv__snap_escape(e, sizeof e, version, 20), RKV_SESSION_META_VERSION);
    return RKV_OK;
}

/* Finds the 16 digits of "header_xxh3" in the raw header: the key must occur
 * exactly once, followed by optional blanks, ':', blanks and a quote. */
static bool find_header_digits(const uint8_t *h, uint64_t n, uint64_t *pos) {
    static const char key[] = "\"header_xxh3\"";
    const size_t klen = sizeof key - 1;
    int found = 0;
    for (uint64_t i = 0; i + klen <= n; i++) {
        if (h[i] != '"' || memcmp(h + i, key, klen)) continue;
        if (++found > 1) return false;
        uint64_t j = i + klen;
        while (j < n && blank(h[j])) j++;
        if (j >= n || h[j++] != ':') return false;
        while (j < n && blank(h[j])) j++;
        if (j >= n || h[j++] != '"') return false;
        if (j + HASH_DIGITS + 1 > n || h[j + HASH_DIGITS] != '"') return false;
        *pos = j;
    }
    return found == 1;
}

/* header_xxh3 (header_sum), then data_xxh3's form (the data is file work). */
static rkv_status check_checksums(const rkv__snap_where *w, const uint8_t first8[8],
                                  const uint8_t *h, uint64_t n, const json_t *meta,
                                  rkv_snapshot_info *info) {
    uint64_t pos = 0, want = 0;
    const char *hv = meta_str(meta, "header_xxh3"); /* = the raw digits at pos, unescaped */
    if (!hv || !parse_hex16(hv, strlen(hv), &want) || !find_header_digits(h, n, &pos) ||
        memcmp(hv, h + pos, HASH_DIGITS))
        return refuse(w, "corrupted header: metadata 'header_xxh3' is missing or is not 16 "
                         "lowercase hex digits appearing once");
    const uint64_t got = header_sum(first8, h, n, pos);
    info->header_xxh3 = want;
    if (got != want)
        return refuse(w, "corrupted header: header checksum mismatch (header_xxh3 %016llx, "
                         "computed %016llx)",
                      (unsigned long long)want, (unsigned long long)got);
    return meta_hex(w, meta, "data_xxh3", &info->data_xxh3);
}

/* safetensors' rule: "__metadata__" maps strings to strings. */
static rkv_status check_meta_values(const rkv__snap_where *w, const json_t *meta) {
    const char *key;
    json_t *v;
    char e[ESC(40)];
    json_object_foreach((json_t *)meta, key, v) {
        if (!json_is_string(v))
            return refuse(w,
                          "corrupted header: metadata '%s' is not a string (safetensors "
                          "metadata maps strings to strings)",
                          rkv__snap_escape(e, sizeof e, key, 40));
    }
    return RKV_OK;
}

static rkv_status meta_int(const rkv__snap_where *w, const json_t *meta, const char *key,
                           int64_t *out) {
    char e[ESC(40)];
    const char *v = meta_str(meta, key);
    if (!v) return refuse(w, "corrupted header: metadata '%s' is missing", key);
    if (!parse_i64n(v, strlen(v), out))
        return refuse(w,
                      "corrupted header: metadata '%s' = '%s' is not an integer in canonical "
                      "decimal form (digits, '-' if negative; no '+', leading zero, blank, "
                      "fraction or exponent; within int64)",
                      key, rkv__snap_escape(e, sizeof e, v, 40));
    return RKV_OK;
}

/* "a,b,c": exactly n canonical integers into the spec field at byte `field`. */
static rkv_status meta_list(const rkv__snap_where *w, const json_t *meta, const char *key,
                            int64_t n, rkv_layer_spec *specs, size_t field) {
    char e[ESC(60)];
    const char *v = meta_str(meta, key);
    if (!v) return refuse(w, "corrupted header: metadata '%s' is missing", key);
    const char *p = v;
    bool ok = true;
    for (int64_t i = 0; i < n && ok; i++) {
        const size_t len = strcspn(p, ",");
        int64_t x;
        ok = parse_i64n(p, len, &x) && p[len] == (i + 1 < n ? ',' : '\0');
        if (ok) memcpy((char *)&specs[i] + field, &x, sizeof x);
        p += len + (ok && i + 1 < n);
    }
    if (!ok)
        return refuse(w,
                      "corrupted header: metadata '%s' = '%s' is not a list of %lld integers "
                      "in canonical decimal form separated by ','",
                      key, rkv__snap_escape(e, sizeof e, v, 60), (long long)n);
    return RKV_OK;
}

/* dtype, sizes, per-layer lists (a valid model config) and the clock. */
static rkv_status read_geometry(const rkv__snap_where *w, const json_t *meta,
                                rkv_snapshot_info *info) {
    rkv_model_config *cfg = &info->config;
    char e[ESC(20)];
    const char *dts = meta_str(meta, "dtype");
    if (!dts || rkv_dtype_parse(dts, &cfg->dtype) != RKV_OK ||
        strcmp(dts, rkv_dtype_name(cfg->dtype)))
        return refuse(w, "corrupted header: metadata 'dtype' is %s%s%s; expected " RKV_DTYPE_NAMES,
                      dts ? "'" : "", dts ? rkv__snap_escape(e, sizeof e, dts, 20) : "missing",
                      dts ? "'" : "");
    rkv_status st = RKV_OK;
    for (size_t f = 0; f < N_INTS && st == RKV_OK; f++)
        st = meta_int(w, meta, GEOMETRY[f].key, CFG_INT(cfg, f));
    if (st != RKV_OK || (st = meta_int(w, meta, "last_committed", &info->last_committed)) != RKV_OK)
        return st;
    if (cfg->n_layers < 1 || cfg->n_layers > RKV_MAX_LAYERS)
        return refuse(w, "corrupted header: n_layers = %lld; expected 1..%d",
                      (long long)cfg->n_layers, RKV_MAX_LAYERS);
    for (size_t f = N_INTS; f < N_GEOMETRY && st == RKV_OK; f++)
        st = meta_list(w, meta, GEOMETRY[f].key, cfg->n_layers, cfg->layers, GEOMETRY[f].off);
    if (st != RKV_OK) return st;
    cfg->num_sessions = 1;
    if (rkv__model_config_check(cfg, NULL, NULL) != RKV_OK) {
        char msg[300];
        snprintf(msg, sizeof msg, "%s", rkv_last_error());
        return refuse(w, "corrupted header: invalid geometry: %s", msg);
    }
    if (info->last_committed < -1)
        return refuse(w, "corrupted header: last_committed = %lld; expected >= -1",
                      (long long)info->last_committed);
    return RKV_OK;
}

rkv_status rkv__snap_geometry_check(const char *what, const char *name, const char *noun,
                                   const rkv_model_config *theirs, const rkv_model_config *mine) {
    char names[2 * ESC(RKV_MAX_NAME) + 80], a[ESC(RKV_MAX_NAME)], b[ESC(RKV_MAX_NAME)];
    names[0] = '\0'; /* the names only when they differ (the field differing is named) */
    if (strncmp(theirs->name, mine->name, RKV_MAX_NAME))
        snprintf(names, sizeof names, " (the %s is of model '%s', this model is '%s')", noun,
                 rkv__snap_escape(a, sizeof a, theirs->name, RKV_MAX_NAME),
                 rkv__snap_escape(b, sizeof b, mine->name, RKV_MAX_NAME));
    char head[RKV__ESC(RKV__PATH_SHOWN) + sizeof names + 120]; /* what: name: wrong geometry */
    snprintf(head, sizeof head, "%s: %s%swrong geometry%s", what, name ? name : "",
             name ? ": " : "", names);
    if (theirs->n_layers != mine->n_layers)
        return rkv__fail(RKV_ERR_FORMAT, "%s: the %s has n_layers %lld, this model %lld", head,
                         noun, (long long)theirs->n_layers, (long long)mine->n_layers);
    for (int64_t i = 0; i < mine->n_layers; i++) {
        rkv_geometry x, y;
        rkv_model_config_layer_geometry(theirs, i, &x);
        rkv_model_config_layer_geometry(mine, i, &y);
        x.num_sessions = y.num_sessions; /* not geometry: a snapshot holds one session */
        int64_t u, v;
        const char *f = rkv__geometry_differs(&x, &y, &u, &v);
        if (!f) continue;
        if (!strcmp(f, "dtype"))
            return rkv__fail(RKV_ERR_FORMAT, "%s: the %s has dtype %s, this model %s", head, noun,
                             rkv_dtype_name((rkv_dtype)u), rkv_dtype_name((rkv_dtype)v));
        const bool own = !strcmp(f, "ring_frames") || !strcmp(f, "ring_buckets") ||
                         !strcmp(f, "pinned_dilation"); /* a layer's own field */
        char layer[40] = "";
        if (own) snprintf(layer, sizeof layer, "layer %lld of ", (long long)i);
        return rkv__fail(RKV_ERR_FORMAT, "%s: %sthe %s has %s %lld, this model%s %lld", head,
                         layer, noun, f, (long long)u, own ? "'s" : "", (long long)v);
    }
    return RKV_OK;
}

/* Text as the writer stores it: printable ASCII under `key`, or (when
 * hex_key) the lowercase hex of other bytes, none zero, under hex_key; at
 * most one of the two ("" when neither), fitting out[size] with its NUL. */
static rkv_status read_text(const rkv__snap_where *w, const json_t *meta, const char *key,
                            const char *hex_key, char *out, size_t size) {
    char e[ESC(40)];
    const char *plain = meta_str(meta, key), *hex = hex_key ? meta_str(meta, hex_key) : NULL;
    out[0] = '\0';
    if (plain && hex)
        return refuse(w, "corrupted header: both metadata '%s' and '%s' are present; expected one",
                      key, hex_key);
    if (plain && !printable_ascii(plain))
        return refuse(w, "corrupted header: metadata '%s' = '%s' has bytes outside printable "
                         "ASCII%s%s%s",
                      key, rkv__snap_escape(e, sizeof e, plain, 40),
                      hex_key ? " (ringkv writes such text hex-encoded as '" : "",
                      hex_key ? hex_key : "", hex_key ? "')" : "");
    if (plain && strlen(plain) >= size)
        return refuse(w, "corrupted header: metadata '%s' has %zu bytes; at most %zu fit", key,
                      strlen(plain), size - 1);
    if (plain) {
        memcpy(out, plain, strlen(plain) + 1);
        return RKV_OK;
    }
    const size_t len = hex ? strlen(hex) : 0;
    bool ok = len % 2 == 0 && len / 2 < size;
    for (size_t i = 0; ok && i < len / 2; i++) {
        const int hi = hex_digit(hex[2 * i]), lo = hex_digit(hex[2 * i + 1]);
        ok = hi >= 0 && lo >= 0 && (hi | lo);
        if (ok) out[i] = (char)(hi << 4 | lo);
    }
    out[ok ? len / 2 : 0] = '\0';
    if (!ok)
        return refuse(w, "corrupted header: metadata '%s' = '%s' is not lowercase hex of at most "
                         "%zu nonzero bytes",
                      hex_key, rkv__snap_escape(e, sizeof e, hex, 40), size - 1);
    return RKV_OK;
}

/* Information: the model's name, the request id, the writer's version,
 * the saved session's index (-1 when absent). */
static rkv_status read_names(const rkv__snap_where *w, const json_t *meta,
                             rkv_snapshot_info *info) {
    rkv_status st;
    if ((st = read_text(w, meta, "model", "model_hex", info->config.name,
                        sizeof info->config.name)) != RKV_OK ||
        (st = read_text(w, meta, "request_id", "request_id_hex", info->request_id,
                        sizeof info->request_id)) != RKV_OK ||
        (st = read_text(w, meta, "ringkv_version", NULL, info->ringkv_version,
                        sizeof info->ringkv_version)) != RKV_OK)
        return st;
    info->source_session = -1;
    if (!json_object_get(meta, "session")) return RKV_OK;
    if ((st = meta_int(w, meta, "session", &info->source_session)) != RKV_OK) return st;
    if (info->source_session < 0)
        return refuse(w, "corrupted header: session = %lld; expected >= 0",
                      (long long)info->source_session);
    return RKV_OK;
}

/* "layer.{i}.{k|v|written}", i canonical in [0, nl): layer and kind. */
static bool tensor_name(const char *name, int64_t nl, int64_t *layer, int *kind) {
    if (strncmp(name, "layer.", 6)) return false;
    const char *p = name + 6, *dot = strchr(p, '.');
    if (!dot || !parse_i64n(p, (size_t)(dot - p), layer) || *layer < 0 || *layer >= nl)
        return false;
    for (int k = 0; k < 3; k++)
        if (!strcmp(dot + 1, KIND_NAMES[k])) {
            *kind = k;
            return true;
        }
    return false;
}

/* A JSON value where an integer was expected, in words. */
static const char *describe(const json_t *v, char *buf, size_t size) {
    if (json_is_integer(v)) {
        snprintf(buf, size, "%lld, negative", (long long)json_integer_value(v));
    } else if (json_is_real(v)) {
        int k = snprintf(buf, size, "the real number %.17g", json_real_value(v));
        if (k > 0 && (size_t)k + 2 < size && !strpbrk(buf + 16, ".en")) strcat(buf, ".0");
    } else {
        snprintf(buf, size, "%s", json_is_string(v) ? "a string" : "not a number");
    }
    return buf;
}

/* Tensor `name`'s `key`: an array of exactly n non-negative integers. */
static rkv_status tensor_ints(const rkv__snap_where *w, const char *name, const char *key,
                              const json_t *a, size_t n, uint64_t *out) {
    char d[64];
    if (!json_is_array(a) || json_array_size(a) != n)
        return refuse(w, "corrupted header: tensor '%s': '%s' is %s; expected an array of %zu "
                         "integers",
                      name, key,
                      !a                  ? "missing"
                      : json_is_array(a) ? "of another length"
                                         : "not an array",
                      n);
    for (size_t i = 0; i < n; i++) {
        const json_t *v = json_array_get(a, i);
        if (!json_is_integer(v) || json_integer_value(v) < 0)
            return refuse(w, "corrupted header: tensor '%s': %s[%zu] is %s; expected a "
                             "non-negative integer (digits only: no fraction or exponent)",
                          name, key, i, describe(v, d, sizeof d));
        out[i] = (uint64_t)json_integer_value(v);
    }
    return RKV_OK;
}

/* One entry of the table: dtype, shape and byte size of its layer's kind. */
static rkv_status read_tensor(const rkv__snap_where *w, const char *name, const json_t *e,
                              const rkv_model_config *cfg, rkv__snap_tensor *r) {
    const tensor_form f = form_of(cfg, r->layer, r->kind);
    if (!json_is_object(e))
        return refuse(w, "corrupted header: tensor '%s' is not a JSON object", name);
    uint64_t shape[3], offs[2];
    rkv_status st;
    if ((st = tensor_ints(w, name, "shape", json_object_get(e, "shape"), f.rank, shape)) != RKV_OK ||
        (st = tensor_ints(w, name, "data_offsets", json_object_get(e, "data_offsets"), 2, offs)) !=
            RKV_OK)
        return st;
    const char *dt = json_string_value(json_object_get(e, "dtype"));
    bool ok = dt && !strcmp(dt, f.dtype) && offs[1] >= offs[0] && offs[1] - offs[0] == f.bytes;
    for (size_t k = 0; k < f.rank; k++) ok = ok && shape[k] == f.shape[k];
    char dims[72]; /* the message's shape */
    for (size_t k = 0, o = 0; !ok && k < f.rank; k++)
        o += (size_t)snprintf(dims + o, sizeof dims - o, k ? ", %llu" : "%llu",
                              (unsigned long long)f.shape[k]);
    if (!ok)
        return refuse(w,
                      "corrupted header: tensor '%s' is not {dtype %s, shape [%s]%s, %llu bytes}",
                      name, f.dtype, dims, f.rank == 3 ? " (n_kv_heads, slots, d_head)" : "",
                      (unsigned long long)f.bytes);
    r->begin = offs[0];
    r->end = offs[1];
    r->seen = true;
    return RKV_OK;
}

/* Every entry but "__metadata__": the 3 tensors of each layer, no other. */
static rkv_status read_tensors(const rkv__snap_where *w, const json_t *root,
                               const rkv_model_config *cfg, rkv__snap_tensor *t) {
    const int64_t nl = cfg->n_layers;
    const char *name;
    json_t *e;
    char en[ESC(60)];
    json_object_foreach((json_t *)root, name, e) {
        if (!strcmp(name, "__metadata__")) continue;
        int64_t layer;
        int kind;
        if (!tensor_name(name, nl, &layer, &kind))
            return refuse(w, "corrupted header: unexpected tensor '%s'",
                          rkv__snap_escape(en, sizeof en, name, 60));
        rkv__snap_tensor *r = &t[layer * 3 + kind]; /* keys are distinct: r is new */
        r->layer = layer;
        r->kind = kind;
        rkv_status st = read_tensor(w, name, e, cfg, r);
        if (st != RKV_OK) return st;
    }
    for (int64_t i = 0; i < nl * 3; i++)
        if (!t[i].seen)
            return refuse(w, "corrupted header: tensor 'layer.%lld.%s' is missing",
                          (long long)(i / 3), KIND_NAMES[i % 3]);
    return RKV_OK;
}

static int cmp_begin(const void *a, const void *b) {
    const rkv__snap_tensor *x = *(const rkv__snap_tensor *const *)a;
    const rkv__snap_tensor *y = *(const rkv__snap_tensor *const *)b;
    return x->begin < y->begin ? -1 : x->begin > y->begin;
}

/* The tensors tile [0, data bytes) without gaps or overlaps; *order
 * receives them in file order. */
static rkv_status check_tiling(const rkv__snap_where *w, rkv__snap_tensor *t, int64_t nt,
                               uint64_t data_bytes, rkv__snap_tensor ***order) {
    rkv__snap_tensor **o = *order = malloc((size_t)nt * sizeof *o);
    if (!o) return rkv__fail(RKV_ERR_NO_MEMORY, "%s: out of memory", w->what);
    for (int64_t i = 0; i < nt; i++) o[i] = &t[i];
    qsort(o, (size_t)nt, sizeof *o, cmp_begin);
    uint64_t at = 0;
    bool tiled = true;
    for (int64_t i = 0; i < nt && tiled; i++) {
        tiled = o[i]->begin == at;
        at = o[i]->end;
    }
    if (!tiled)
        return refuse(w, "corrupted header: the tensors' data_offsets overlap or leave gaps");
    if (at > data_bytes)
        return refuse(w, "truncated: the data section has %llu bytes; the tensors take %llu",
                      (unsigned long long)data_bytes, (unsigned long long)at);
    if (at < data_bytes)
        return refuse(w, "corrupted: %llu unexpected bytes after the tensors' %llu",
                      (unsigned long long)(data_bytes - at), (unsigned long long)at);
    return RKV_OK;
}

/* The stages after the JSON parse, in the documented order. */
static rkv_status read_header(const rkv__snap_where *w, const uint8_t first8[8],
                              const uint8_t *h, uint64_t n, const json_t *root, bool session,
                              rkv__snap_header *out) {
    rkv_snapshot_info *info = &out->info;
    const json_t *meta = json_object_get(root, "__metadata__");
    rkv_status st;
    if ((st = check_format(w, meta, session, info)) != RKV_OK ||
        (st = check_checksums(w, first8, h, n, meta, info)) != RKV_OK)
        return st;
    if ((session && (st = meta_hex(w, meta, WRITTEN_KEY, &out->written_xxh3)) != RKV_OK) ||
        (st = check_meta_values(w, meta)) != RKV_OK ||
        (st = read_geometry(w, meta, info)) != RKV_OK || (st = read_names(w, meta, info)) != RKV_OK)
        return st;
    const int64_t nt = info->config.n_layers * 3;
    if (!(out->t = calloc((size_t)nt, sizeof *out->t)))
        return rkv__fail(RKV_ERR_NO_MEMORY, "%s: out of memory", w->what);
    if ((st = read_tensors(w, root, &info->config, out->t)) != RKV_OK) return st;
    if (session) { /* the header alone: its data section is the regions */
        info->data_bytes = 0;
        for (int64_t i = 0; i < nt; i++) info->data_bytes += out->t[i].end - out->t[i].begin;
        info->file_bytes = 8 + n + info->data_bytes;
    }
    return check_tiling(w, out->t, nt, info->data_bytes, &out->order);
}

rkv_status rkv__snap_header_parse(const rkv__snap_where *w, const uint8_t first8[8],
                                  const uint8_t *h, uint64_t n, uint64_t file_size, bool session,
                                  rkv__snap_header *out) {
    memset(out, 0, sizeof *out);
    out->data_offset = 8 + n;
    out->info.struct_size = sizeof out->info;
    out->info.config.struct_size = sizeof out->info.config;
    out->info.file_bytes = file_size;
    out->info.header_bytes = n;
    out->info.data_bytes = file_size - 8 - n;
    json_t *root = NULL;
    rkv_status st = load_json(w, h, n, &root);
    if (st == RKV_OK) st = read_header(w, first8, h, n, root, session, out);
    json_decref(root);
    if (st != RKV_OK) rkv__snap_header_free(out);
    return st;
}

rkv_status rkv__snap_meta_parse(const rkv__snap_where *w, const uint8_t *meta, size_t bytes,
                                rkv__snap_header *out) {
    memset(out, 0, sizeof *out);
    const uint64_t n = bytes >= 8 ? get_le64(meta) : 0;
    if (bytes < 8 || n < 2 || n > RKV__SNAP_MAX_HEADER || n != bytes - 8)
        return refuse(w,
                      "not ringkv session metadata: %zu bytes, %s %llu; expected the 8-byte "
                      "header length and the header alone (rkv_model_session_export_meta's "
                      "bytes)",
                      bytes, bytes >= 8 ? "the header length" : "short of the 8-byte length by",
                      (unsigned long long)(bytes >= 8 ? n : 8 - bytes));
    return rkv__snap_header_parse(w, meta, meta + 8, n, bytes, true, out);
}

void rkv__snap_header_free(rkv__snap_header *p) {
    if (!p->borrowed) {
        free(p->t);
        free(p->order);
    }
    p->t = NULL;
    p->order = NULL;
}

/* ------------------------------------------------------------------------ */
/* Writing                                                                   */
/* ------------------------------------------------------------------------ */

/* The writer's text, grown as it is written (NULL once out of memory):
 * compact JSON as Jansson's json_dumps(JSON_COMPACT) writes it, the bytes
 * of the files written so far (tests/data holds two). */
typedef struct writer {
    char *text;
    size_t len, cap;
} writer;

static void put(writer *o, const char *fmt, ...) RKV__PRINTF(2, 3);
static void put(writer *o, const char *fmt, ...) {
    if (!o->text) return;
    va_list ap;
    va_start(ap, fmt);
    const size_t n = (size_t)vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *t = o->len + n < o->cap ? o->text : realloc(o->text, o->cap = 2 * (o->len + n + 1));
    if (!t) free(o->text);
    if (!(o->text = t)) return;
    va_start(ap, fmt);
    vsnprintf(t + o->len, n + 1, fmt, ap);
    va_end(ap);
    o->len += n;
}
/* ,"key":"v" for printable ASCII v ('"' and '\' escaped as JSON writes
 * them); else (hex) ,"key_hex":"<lowercase hex of v>": the header stays
 * ASCII JSON whatever the bytes. */
static void put_str(writer *o, const char *key, const char *v, bool hex) {
    hex = hex && !printable_ascii(v);
    put(o, ",\"%s%s\":\"", key, hex ? "_hex" : "");
    for (; *v; v++)
        put(o, hex ? "%02x" : *v == '"' || *v == '\\' ? "\\%c" : "%c", (unsigned char)*v);
    put(o, "\"");
}

#define CLOCK_KEY "\"last_committed\":\""
#define DATA_KEY "\"data_xxh3\":\""
#define HEADER_KEY "\"header_xxh3\":\""

/* n header bytes padded with spaces so that 8 + n is a multiple of 8. */
static size_t padded(size_t n) { return (n + 8 + 7) / 8 * 8 - 8; }

/* The writer's compact JSON of the header with clock 0 and both checksums
 * zero, with where the clock's digit and the checksums' digits are: what
 * the header of any clock is made of (rkv__snap_template_emit). The
 * tensors "layer.{i}.{k,v,written}" of every layer lie back to back from
 * byte 0. */
static rkv_status build_json(const rkv_model_config *cfg, int64_t session, const char *request_id,
                             const uint64_t *written_xxh3, const char *what,
                             rkv__snap_template *t) {
    memset(t, 0, sizeof *t);
    writer o = {malloc(4096), 0, 4096};
    put(&o, "{\"__metadata__\":{\"format\":\"" FORMAT_NAME "\",\"format_version\":\"%d\"",
        RKV_SNAPSHOT_VERSION);
    put_str(&o, "ringkv_version", rkv_version(), false);
    put_str(&o, "model", cfg->name, true);
    put_str(&o, "request_id", request_id, true);
    put(&o, ",\"session\":\"%lld\",\"dtype\":\"%s\"", (long long)session,
        rkv_dtype_name(cfg->dtype));
    for (size_t f = 0; f < N_INTS; f++)
        put(&o, ",\"%s\":\"%lld\"", GEOMETRY[f].key, (long long)*CFG_INT(cfg, f));
    for (size_t f = N_INTS; f < N_GEOMETRY; f++) {
        put(&o, ",\"%s\":\"", GEOMETRY[f].key);
        for (int64_t i = 0; i < cfg->n_layers; i++)
            put(&o, "%s%lld", i ? "," : "", (long long)*CFG_INT(&cfg->layers[i], f));
        put(&o, "\"");
    }
    put(&o, "," CLOCK_KEY);
    t->clock_at = o.len;
    put(&o, "0\"," DATA_KEY);
    t->data_digits = o.len;
    put(&o, ZERO_DIGITS "\"," HEADER_KEY);
    t->header_digits = o.len;
    put(&o, ZERO_DIGITS "\"%s}", written_xxh3 ? META_KEYS : "");
    if (written_xxh3 && o.text) hex16(*written_xxh3, o.text + o.len - 2 - HASH_DIGITS);
    for (int64_t i = 0; i < cfg->n_layers; i++)
        for (int k = 0; k < 3; k++) {
            const tensor_form f = form_of(cfg, i, k);
            put(&o, ",\"layer.%lld.%s\":{\"dtype\":\"%s\",\"shape\":[", (long long)i,
                KIND_NAMES[k], f.dtype);
            for (size_t d = 0; d < f.rank; d++)
                put(&o, "%s%llu", d ? "," : "", (unsigned long long)f.shape[d]);
            put(&o, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)t->data_bytes,
                (unsigned long long)(t->data_bytes + f.bytes));
            t->data_bytes += f.bytes;
        }
    put(&o, "}");
    if (!(t->text = o.text))
        return rkv__fail(RKV_ERR_NO_MEMORY, "%s: out of memory building the header", what);
    t->len = o.len;
    return RKV_OK;
}

rkv_status rkv__snap_header_build(const rkv_model_config *cfg, int64_t session,
                                  const char *request_id, int64_t last_committed,
                                  const uint64_t *written_xxh3, size_t len, const char *what,
                                  rkv__snap_text *out) {
    memset(out, 0, sizeof *out);
    rkv__snap_template t;
    rkv_status st = build_json(cfg, session, request_id, written_xxh3, what, &t);
    if (st != RKV_OK) return st;
    const int nd = snprintf(NULL, 0, "%lld", (long long)last_committed); /* the clock's digits */
    if (len < padded(t.len + (size_t)nd - 1)) len = padded(t.len + (size_t)nd - 1);
    char *text = malloc(len);
    if (text) rkv__snap_template_emit(&t, last_committed, text, len, out);
    rkv__snap_template_free(&t);
    if (!text) return rkv__fail(RKV_ERR_NO_MEMORY, "%s: out of memory building the header", what);
    return RKV_OK;
}

size_t rkv__snap_meta_bytes(size_t longest) {
    return longest ? 8 + longest + (sizeof META_KEYS - 1 + 7) / 8 * 8 : 0;
}

rkv_status rkv__snap_header_longest(const rkv_model_config *cfg, const char *what, size_t *len) {
    char id[RKV_MAX_REQUEST_ID];
    *len = 0;
    for (int kind = 0; kind < 2; kind++) { /* hex-coded, then escaped JSON */
        memset(id, kind ? '"' : 0x01, sizeof id - 1);
        id[sizeof id - 1] = '\0';
        rkv__snap_text t;
        rkv_status st =
            rkv__snap_header_build(cfg, cfg->num_sessions - 1, id, INT64_MAX, NULL, 0, what, &t);
        if (st != RKV_OK) return st;
        if (t.len > *len) *len = t.len;
        free(t.text);
    }
    return RKV_OK;
}

uint64_t rkv__snap_header_seal(rkv__snap_text *t, uint64_t data_xxh3) {
    hex16(data_xxh3, t->text + t->data_digits);
    const uint64_t header_xxh3 =
        header_sum(t->first8, (const uint8_t *)t->text, t->len, t->header_digits);
    hex16(header_xxh3, t->text + t->header_digits);
    return header_xxh3;
}

/* ------------------------------------------------------------------------ */
/* The header of one session, any clock                                      */
/* ------------------------------------------------------------------------ */

void rkv__snap_template_free(rkv__snap_template *t) {
    free(t->text);
    rkv__snap_header_free(&t->parsed);
    memset(t, 0, sizeof *t);
}

rkv_status rkv__snap_template_build(const rkv_model_config *cfg, int64_t session,
                                    const char *request_id, const char *what,
                                    rkv__snap_template *t) {
    rkv_status st = build_json(cfg, session, request_id, NULL, what, t);
    if (st != RKV_OK) return st;
    t->session = session;
    snprintf(t->request_id, sizeof t->request_id, "%s", request_id);
    /* its own parse (the tensor table every match borrows): of its header
     * of clock 0, sealed as an image's would be */
    const size_t len = padded(t->len);
    char *img = malloc(len);
    rkv__snap_text b;
    const rkv__snap_where w = {what, "(template)"};
    if (!img) st = rkv__fail(RKV_ERR_NO_MEMORY, "%s: out of memory building the header", what);
    if (img) {
        rkv__snap_template_emit(t, 0, img, len, &b);
        rkv__snap_header_seal(&b, 0);
        st = rkv__snap_header_parse(&w, b.first8, (const uint8_t *)img, len, 8 + len + b.data_bytes,
                                    false, &t->parsed);
    }
    free(img);
    if (st != RKV_OK) rkv__snap_template_free(t);
    return st;
}

void rkv__snap_template_emit(const rkv__snap_template *t, int64_t last_committed, char *out,
                             size_t len, rkv__snap_text *hd) {
    char digits[24];
    const size_t nd = (size_t)snprintf(digits, sizeof digits, "%lld", (long long)last_committed);
    const size_t shift = nd - 1, rest = t->len - t->clock_at - 1;
    memcpy(out, t->text, t->clock_at);
    memcpy(out + t->clock_at, digits, nd);
    memcpy(out + t->clock_at + nd, t->text + t->clock_at + 1, rest);
    memset(out + t->len + shift, ' ', len - t->len - shift);
    put_le64(hd->first8, len);
    hd->text = out;
    hd->len = len;
    hd->data_digits = t->data_digits + shift;
    hd->header_digits = t->header_digits + shift;
    hd->data_bytes = t->data_bytes;
}

bool rkv__snap_template_match(const rkv__snap_template *t, const uint8_t first8[8],
                              const uint8_t *h, uint64_t n, uint64_t file_size,
                              rkv__snap_header *out) {
    const uint8_t *x = (const uint8_t *)t->text;
    if (!t->text || n < t->len || file_size != 8 + n + t->data_bytes ||
        memcmp(h, x, t->clock_at))
        return false;
    /* the clock: canonical decimal up to its closing quote */
    size_t j = t->clock_at;
    while (j < n && j < t->clock_at + 20 && ((h[j] >= '0' && h[j] <= '9') || h[j] == '-')) j++;
    int64_t clock;
    if (j >= n || h[j] != '"' || !parse_i64n((const char *)h + t->clock_at, j - t->clock_at,
                                             &clock) || clock < -1)
        return false;
    const size_t shift = j - t->clock_at - 1, dd = t->data_digits + shift,
                 hd = t->header_digits + shift;
    uint64_t dx, hx;
    if (t->len + shift > n || memcmp(h + j, x + t->clock_at + 1, t->data_digits - t->clock_at - 1) ||
        !parse_hex16((const char *)h + dd, HASH_DIGITS, &dx) ||
        memcmp(h + dd + HASH_DIGITS, x + t->data_digits + HASH_DIGITS,
               t->header_digits - t->data_digits - HASH_DIGITS) ||
        !parse_hex16((const char *)h + hd, HASH_DIGITS, &hx) ||
        memcmp(h + hd + HASH_DIGITS, x + t->header_digits + HASH_DIGITS,
               t->len - t->header_digits - HASH_DIGITS))
        return false;
    for (uint64_t i = t->len + shift; i < n; i++) /* JSON's blanks after the object */
        if (!blank(h[i])) return false;
    if (header_sum(first8, h, n, hd) != hx) return false;
    *out = t->parsed;
    out->borrowed = true;
    out->data_offset = 8 + n;
    out->info.file_bytes = file_size;
    out->info.header_bytes = n;
    out->info.data_bytes = file_size - 8 - n;
    out->info.last_committed = clock;
    out->info.data_xxh3 = dx;
    out->info.header_xxh3 = hx;
    return true;
}

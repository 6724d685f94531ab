/* Snapshot files of one session (docs/snapshot-format.md): the safetensors
 * layout (8-byte little-endian header length, JSON header, raw little-endian
 * tensors) with ringkv's facts in the "__metadata__" strings and two XXH3-64
 * checksums, one over the data section and one over the header itself.
 *
 * Saving is atomic (temporary file in the same directory, fsync, rename).
 * Loading validates everything (length, JSON, format and version, header
 * checksum, geometry, tensor table, data checksum, written bits) before it
 * changes the session; see rkv_model_load_session in ringkv.h. */
#define _POSIX_C_SOURCE 200809L /* pread, pwrite, fsync, mkstemp, fchmod */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cJSON.h>
#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include <xxhash.h>

#include "model_internal.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "snapshot files hold little-endian tensors; big-endian hosts are not supported yet"
#endif

#define FORMAT_NAME "ringkv-snapshot"
#define MAX_HEADER_BYTES ((uint64_t)16 << 20) /* a 256-layer header is ~80 KB */
#define CHUNK_BYTES ((size_t)1 << 20)
#define HASH_DIGITS 16
#define ZERO_DIGITS "0000000000000000"

/* cJSON's parser records its error position in a process-wide variable
 * (cJSON_GetErrorPtr), so parses are serialized to keep concurrent loads of
 * different models free of data races (docs/thread-safety.md). */
static pthread_mutex_t cjson_parse_lock = PTHREAD_MUTEX_INITIALIZER;

/* ------------------------------------------------------------------------ */
/* Small helpers                                                             */
/* ------------------------------------------------------------------------ */

static const char *st_dtype_name(rkv_dtype dt) {
    switch (dt) {
    case RKV_DTYPE_F32: return "F32";
    case RKV_DTYPE_F16: return "F16";
    case RKV_DTYPE_BF16: return "BF16";
    }
    return "?";
}

static void put_le64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static uint64_t get_le64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
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
        char c = s[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (d < 0) return false;
        v = (v << 4) | (uint64_t)d;
    }
    *out = v;
    return true;
}

/* Strict decimal int64: optional '-', 1..19 digits, nothing else. */
static bool parse_i64(const char *s, int64_t *out) {
    if (!s) return false;
    bool neg = *s == '-';
    const char *p = s + neg;
    if (!*p) return false;
    uint64_t v = 0;
    for (; *p; p++) {
        if (*p < '0' || *p > '9') return false;
        if (v > (UINT64_MAX - 9) / 10) return false;
        v = v * 10 + (uint64_t)(*p - '0');
    }
    if (v > (uint64_t)INT64_MAX) return false;
    *out = neg ? -(int64_t)v : (int64_t)v;
    return true;
}

static bool printable_ascii(const char *s) {
    for (; *s; s++)
        if (*s < 0x20 || *s > 0x7e) return false;
    return true;
}

/* Per-layer tensor sizes of one session. */
typedef struct layer_sizes {
    int64_t C;        /* capacity (slots)     */
    uint64_t kv;      /* bytes of K (= of V)  */
    uint64_t written; /* bytes of written = C */
} layer_sizes;

static layer_sizes sizes_of(const rkv_geometry *g) {
    layer_sizes z;
    z.C = (g->ring_frames + 1) * g->tokens_per_frame;
    z.kv = (uint64_t)g->n_kv_heads * (uint64_t)z.C * (uint64_t)g->d_head * rkv_dtype_size(g->dtype);
    z.written = (uint64_t)z.C;
    return z;
}

/* ------------------------------------------------------------------------ */
/* Reading: a file (pread) or a memory image                                 */
/* ------------------------------------------------------------------------ */

typedef struct source {
    const char *what;   /* the API call, for messages                */
    const char *name;   /* the path, or "(memory)"                   */
    const uint8_t *mem; /* the image, or NULL for a file             */
    int fd;
    uint64_t size;
} source;

static rkv_status src_read(const source *s, uint64_t off, void *buf, size_t n) {
    if (s->mem) {
        memcpy(buf, s->mem + off, n);
        return RKV_OK;
    }
    uint8_t *p = buf;
    while (n) {
        ssize_t got = pread(s->fd, p, n, (off_t)off);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0)
            return rkv__fail(RKV_ERR_IO, "%s: %s: read failed at byte %llu: %s", s->what, s->name,
                             (unsigned long long)off, strerror(errno));
        if (got == 0)
            return rkv__fail(RKV_ERR_IO,
                             "%s: %s: the file shrank while it was read (truncated at byte %llu)",
                             s->what, s->name, (unsigned long long)off);
        p += got;
        off += (uint64_t)got;
        n -= (size_t)got;
    }
    return RKV_OK;
}

/* One tensor of the table: layer, kind (0 K, 1 V, 2 written), byte range
 * relative to the start of the data section. */
typedef struct tensor_ref {
    int64_t layer;
    int kind;
    uint64_t begin, end;
    bool seen;
} tensor_ref;

/* What the header says, once validated. */
typedef struct parsed {
    rkv_snapshot_info info;
    uint64_t data_offset; /* 8 + header length                          */
    tensor_ref *t;        /* [3 * n_layers]: layer i kind k at 3*i + k  */
} parsed;

static void parsed_free(parsed *p) {
    free(p->t);
    p->t = NULL;
}

/* Metadata helpers: a required string value. */
static const char *meta_str(const cJSON *meta, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(meta, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static rkv_status meta_int(const source *s, const cJSON *meta, const char *key, int64_t *out) {
    const char *v = meta_str(meta, key);
    if (!v)
        return rkv__fail(RKV_ERR_FORMAT, "%s: %s: corrupted header: metadata '%s' is missing",
                         s->what, s->name, key);
    if (!parse_i64(v, out))
        return rkv__fail(RKV_ERR_FORMAT,
                         "%s: %s: corrupted header: metadata '%s' = '%.40s' is not an integer",
                         s->what, s->name, key, v);
    return RKV_OK;
}

/* "a,b,c" with exactly n integers into the spec field at byte `field`. */
static rkv_status meta_list(const source *s, const cJSON *meta, const char *key, int64_t n,
                            rkv_layer_spec *specs, size_t field) {
    const char *v = meta_str(meta, key);
    if (!v)
        return rkv__fail(RKV_ERR_FORMAT, "%s: %s: corrupted header: metadata '%s' is missing",
                         s->what, s->name, key);
    const char *p = v;
    for (int64_t i = 0; i < n; i++) {
        char num[24];
        size_t len = strcspn(p, ",");
        int64_t x;
        if (len == 0 || len >= sizeof num) goto bad;
        memcpy(num, p, len);
        num[len] = '\0';
        if (!parse_i64(num, &x)) goto bad;
        memcpy((char *)&specs[i] + field, &x, sizeof x);
        p += len;
        if (i + 1 < n) {
            if (*p != ',') goto bad;
            p++;
        }
    }
    if (*p) goto bad;
    return RKV_OK;
bad:
    return rkv__fail(RKV_ERR_FORMAT,
                     "%s: %s: corrupted header: metadata '%s' = '%.60s' is not a list of %lld "
                     "integers",
                     s->what, s->name, key, v, (long long)n);
}

/* An integer JSON number in [0, 2^53]. */
static bool json_u64(const cJSON *v, uint64_t *out) {
    if (!cJSON_IsNumber(v)) return false;
    double d = v->valuedouble;
    if (!(d >= 0 && d <= 9007199254740992.0) || d != (double)(uint64_t)d) return false;
    *out = (uint64_t)d;
    return true;
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
        while (j < n && (h[j] == ' ' || h[j] == '\t' || h[j] == '\n' || h[j] == '\r')) j++;
        if (j >= n || h[j++] != ':') return false;
        while (j < n && (h[j] == ' ' || h[j] == '\t' || h[j] == '\n' || h[j] == '\r')) j++;
        if (j >= n || h[j++] != '"') return false;
        if (j + HASH_DIGITS + 1 > n || h[j + HASH_DIGITS] != '"') return false;
        *pos = j;
    }
    return found == 1;
}

static int cmp_ref(const void *a, const void *b) {
    const tensor_ref *x = *(const tensor_ref *const *)a, *y = *(const tensor_ref *const *)b;
    return x->begin < y->begin ? -1 : x->begin > y->begin;
}

/* Reads and validates everything but the data section: header length,
 * JSON, format and version, header checksum, metadata (geometry, clock),
 * and the tensor table (names, dtypes, shapes, sizes, a gapless tiling of
 * the data section, which must have exactly the bytes the tensors take).
 * Messages name the class: truncated, corrupted, unsupported version. */
static rkv_status parse_header(const source *s, parsed *out) {
    memset(out, 0, sizeof *out);
    rkv_snapshot_info *info = &out->info;
    uint8_t lenbuf[8];
    if (s->size < 8)
        return rkv__fail(RKV_ERR_FORMAT,
                         "%s: %s: truncated: the file has %llu bytes; a snapshot starts with an "
                         "8-byte header length",
                         s->what, s->name, (unsigned long long)s->size);
    rkv_status st = src_read(s, 0, lenbuf, 8);
    if (st != RKV_OK) return st;
    const uint64_t n = get_le64(lenbuf);
    if (n < 2 || n > MAX_HEADER_BYTES)
        return rkv__fail(RKV_ERR_FORMAT,
                         "%s: %s: corrupted header length: %llu bytes (expected 2 to %llu)",
                         s->what, s->name, (unsigned long long)n,
                         (unsigned long long)MAX_HEADER_BYTES);
    if (n > s->size - 8)
        return rkv__fail(RKV_ERR_FORMAT,
                         "%s: %s: truncated (or corrupted header length): the header length "
                         "says %llu bytes but only %llu follow",
                         s->what, s->name, (unsigned long long)n,
                         (unsigned long long)(s->size - 8));
    out->data_offset = 8 + n;
    info->file_bytes = s->size;
    info->header_bytes = n;
    info->data_bytes = s->size - 8 - n;

    uint8_t *owned = NULL;
    const uint8_t *h = s->mem ? s->mem + 8 : NULL;
    if (!h) {
        if (!(owned = malloc((size_t)n)))
            return rkv__fail(RKV_ERR_NO_MEMORY, "%s: %s: cannot allocate the %llu-byte header",
                             s->what, s->name, (unsigned long long)n);
        if ((st = src_read(s, 8, owned, (size_t)n)) != RKV_OK) {
            free(owned);
            return st;
        }
        h = owned;
    }

    cJSON *root = NULL;
    const char *end = NULL;
    pthread_mutex_lock(&cjson_parse_lock);
    root = cJSON_ParseWithLengthOpts((const char *)h, (size_t)n, &end, 0);
    pthread_mutex_unlock(&cjson_parse_lock);
    if (!root || !cJSON_IsObject(root)) {
        st = rkv__fail(RKV_ERR_FORMAT,
                       "%s: %s: corrupted header: the %llu-byte header is not a JSON object",
                       s->what, s->name, (unsigned long long)n);
        goto done;
    }
    for (const char *p = end; p < (const char *)h + n; p++)
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') {
            st = rkv__fail(RKV_ERR_FORMAT,
                           "%s: %s: corrupted header: unexpected bytes after the JSON object "
                           "(offset %llu)",
                           s->what, s->name, (unsigned long long)(8 + (p - (const char *)h)));
            goto done;
        }

    /* format and version come first: a future version may hash differently */
    const cJSON *meta = cJSON_GetObjectItemCaseSensitive(root, "__metadata__");
    const char *format = cJSON_IsObject(meta) ? meta_str(meta, "format") : NULL;
    if (!format || strcmp(format, FORMAT_NAME)) {
        st = rkv__fail(RKV_ERR_FORMAT,
                       "%s: %s: not a ringkv snapshot: __metadata__.format is %s%.40s%s; expected "
                       "'" FORMAT_NAME "'",
                       s->what, s->name, format ? "'" : "", format ? format : "missing",
                       format ? "'" : "");
        goto done;
    }
    const char *version = meta_str(meta, "format_version");
    int64_t ver = 0;
    if (!version || !parse_i64(version, &ver) || ver != RKV_SNAPSHOT_VERSION) {
        st = rkv__fail(RKV_ERR_FORMAT,
                       "%s: %s: unsupported format version '%.20s'; this ringkv (%s) reads "
                       "version %d",
                       s->what, s->name, version ? version : "(missing)", rkv_version(),
                       RKV_SNAPSHOT_VERSION);
        goto done;
    }
    info->format_version = ver;

    /* header checksum: XXH3-64 of the 8 length bytes and the header with
     * header_xxh3's own 16 digits read as '0' */
    uint64_t pos = 0, want = 0;
    const char *hv = meta_str(meta, "header_xxh3");
    if (!hv || !find_header_digits(h, n, &pos) ||
        !parse_hex16((const char *)h + pos, HASH_DIGITS, &want) ||
        memcmp(hv, h + pos, HASH_DIGITS) || strlen(hv) != HASH_DIGITS) {
        st = rkv__fail(RKV_ERR_FORMAT,
                       "%s: %s: corrupted header: metadata 'header_xxh3' is missing or is not 16 "
                       "lowercase hex digits appearing once",
                       s->what, s->name);
        goto done;
    }
    {
        XXH3_state_t hs;
        XXH3_64bits_reset(&hs);
        XXH3_64bits_update(&hs, lenbuf, 8);
        XXH3_64bits_update(&hs, h, (size_t)pos);
        XXH3_64bits_update(&hs, ZERO_DIGITS, HASH_DIGITS);
        XXH3_64bits_update(&hs, h + pos + HASH_DIGITS, (size_t)(n - pos - HASH_DIGITS));
        const uint64_t got = XXH3_64bits_digest(&hs);
        info->header_xxh3 = want;
        if (got != want) {
            st = rkv__fail(RKV_ERR_FORMAT,
                           "%s: %s: corrupted header: header checksum mismatch (header_xxh3 "
                           "%016llx, computed %016llx)",
                           s->what, s->name, (unsigned long long)want, (unsigned long long)got);
            goto done;
        }
    }
    const char *dv = meta_str(meta, "data_xxh3");
    if (!dv || !parse_hex16(dv, strlen(dv), &info->data_xxh3)) {
        st = rkv__fail(RKV_ERR_FORMAT,
                       "%s: %s: corrupted header: metadata 'data_xxh3' is missing or is not 16 "
                       "lowercase hex digits",
                       s->what, s->name);
        goto done;
    }

    /* geometry and clock */
    rkv_model_config *cfg = &info->config;
    const char *dts = meta_str(meta, "dtype");
    if (!dts || rkv_dtype_parse(dts, &cfg->dtype) != RKV_OK) {
        st = rkv__fail(RKV_ERR_FORMAT, "%s: %s: corrupted header: metadata 'dtype' is %.20s",
                       s->what, s->name, dts ? dts : "missing");
        goto done;
    }
    if ((st = meta_int(s, meta, "n_layers", &cfg->n_layers)) != RKV_OK ||
        (st = meta_int(s, meta, "n_q_heads", &cfg->n_q_heads)) != RKV_OK ||
        (st = meta_int(s, meta, "n_kv_heads", &cfg->n_kv_heads)) != RKV_OK ||
        (st = meta_int(s, meta, "d_head", &cfg->d_head)) != RKV_OK ||
        (st = meta_int(s, meta, "tokens_per_frame", &cfg->tokens_per_frame)) != RKV_OK ||
        (st = meta_int(s, meta, "last_committed", &info->last_committed)) != RKV_OK)
        goto done;
    if (cfg->n_layers < 1 || cfg->n_layers > RKV_MAX_LAYERS) {
        st = rkv__fail(RKV_ERR_FORMAT,
                       "%s: %s: corrupted header: n_layers = %lld; expected 1..%d", s->what,
                       s->name, (long long)cfg->n_layers, RKV_MAX_LAYERS);
        goto done;
    }
    if ((st = meta_list(s, meta, "ring_frames", cfg->n_layers, cfg->layers,
                        offsetof(rkv_layer_spec, ring_frames))) != RKV_OK ||
        (st = meta_list(s, meta, "ring_buckets", cfg->n_layers, cfg->layers,
                        offsetof(rkv_layer_spec, ring_buckets))) != RKV_OK ||
        (st = meta_list(s, meta, "pinned_dilation", cfg->n_layers, cfg->layers,
                        offsetof(rkv_layer_spec, pinned_dilation))) != RKV_OK)
        goto done;
    cfg->num_sessions = 1;
    const char *model_name = meta_str(meta, "model");
    snprintf(cfg->name, sizeof cfg->name, "%s", model_name ? model_name : "");
    if (rkv__model_config_check(cfg, NULL, NULL) != RKV_OK) {
        char msg[300];
        snprintf(msg, sizeof msg, "%s", rkv_last_error());
        st = rkv__fail(RKV_ERR_FORMAT, "%s: %s: corrupted header: invalid geometry: %s",
                       s->what, s->name, msg);
        goto done;
    }
    if (info->last_committed < -1) {
        st = rkv__fail(RKV_ERR_FORMAT,
                       "%s: %s: corrupted header: last_committed = %lld; expected >= -1",
                       s->what, s->name, (long long)info->last_committed);
        goto done;
    }
    const char *rid = meta_str(meta, "request_id");
    snprintf(info->request_id, sizeof info->request_id, "%s", rid ? rid : "");
    const char *rid_hex = rid ? NULL : meta_str(meta, "request_id_hex");
    for (size_t i = 0; rid_hex && rid_hex[2 * i] && rid_hex[2 * i + 1] &&
                       i + 1 < sizeof info->request_id;
         i++) {
        unsigned x = 0;
        if (sscanf(rid_hex + 2 * i, "%2x", &x) != 1 || !x) break;
        info->request_id[i] = (char)x;
        info->request_id[i + 1] = '\0';
    }
    const char *sess = meta_str(meta, "session");
    if (!sess || !parse_i64(sess, &info->source_session)) info->source_session = -1;
    const char *rv = meta_str(meta, "ringkv_version");
    snprintf(info->ringkv_version, sizeof info->ringkv_version, "%s", rv ? rv : "");

    /* tensor table */
    const int64_t nl = cfg->n_layers;
    if (!(out->t = calloc((size_t)nl * 3, sizeof *out->t))) {
        st = rkv__fail(RKV_ERR_NO_MEMORY, "%s: out of memory", s->what);
        goto done;
    }
    int64_t n_entries = 0;
    for (const cJSON *e = root->child; e; e = e->next) {
        if (e->string && !strcmp(e->string, "__metadata__")) continue;
        n_entries++;
        const char *name = e->string ? e->string : "";
        int64_t layer = -1;
        int kind = -1;
        if (!strncmp(name, "layer.", 6)) {
            const char *p = name + 6, *dot = strchr(p, '.');
            char num[24];
            if (dot && dot > p && (size_t)(dot - p) < sizeof num) {
                memcpy(num, p, (size_t)(dot - p));
                num[dot - p] = '\0';
                if (num[0] != '-' && (num[0] != '0' || !num[1]) && parse_i64(num, &layer) &&
                    layer < nl)
                    kind = !strcmp(dot + 1, "k") ? 0
                           : !strcmp(dot + 1, "v") ? 1
                           : !strcmp(dot + 1, "written") ? 2
                                                          : -1;
            }
        }
        if (kind < 0) {
            st = rkv__fail(RKV_ERR_FORMAT, "%s: %s: corrupted header: unexpected tensor '%.60s'",
                           s->what, s->name, name);
            goto done;
        }
        tensor_ref *r = &out->t[layer * 3 + kind];
        if (r->seen) {
            st = rkv__fail(RKV_ERR_FORMAT, "%s: %s: corrupted header: tensor '%.60s' appears twice",
                           s->what, s->name, name);
            goto done;
        }
        rkv_geometry g;
        rkv_model_config_layer_geometry(cfg, layer, &g);
        const layer_sizes z = sizes_of(&g);
        const char *want_dtype = kind == 2 ? "U8" : st_dtype_name(cfg->dtype);
        const uint64_t want_shape[3] = {(uint64_t)cfg->n_kv_heads, (uint64_t)z.C,
                                        (uint64_t)cfg->d_head};
        const uint64_t *shape_want = kind == 2 ? want_shape + 1 : want_shape;
        const int rank = kind == 2 ? 1 : 3;
        const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
        const cJSON *shape = cJSON_GetObjectItemCaseSensitive(e, "shape");
        const cJSON *offs = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
        bool ok = cJSON_IsObject(e) && cJSON_IsString(dt) && !strcmp(dt->valuestring, want_dtype) &&
                  cJSON_IsArray(shape) && cJSON_GetArraySize(shape) == rank &&
                  cJSON_IsArray(offs) && cJSON_GetArraySize(offs) == 2;
        for (int k = 0; ok && k < rank; k++) {
            uint64_t x;
            ok = json_u64(cJSON_GetArrayItem(shape, k), &x) && x == shape_want[k];
        }
        uint64_t b = 0, en = 0;
        ok = ok && json_u64(cJSON_GetArrayItem(offs, 0), &b) &&
             json_u64(cJSON_GetArrayItem(offs, 1), &en) && en >= b &&
             en - b == (kind == 2 ? z.written : z.kv);
        if (!ok) {
            st = rkv__fail(RKV_ERR_FORMAT,
                           "%s: %s: corrupted header: tensor '%.60s' is not {dtype %s, shape "
                           "[%s%llu%s], %llu bytes}",
                           s->what, s->name, name, want_dtype, kind == 2 ? "" : "H, ",
                           (unsigned long long)z.C, kind == 2 ? "" : ", D",
                           (unsigned long long)(kind == 2 ? z.written : z.kv));
            goto done;
        }
        r->layer = layer;
        r->kind = kind;
        r->begin = b;
        r->end = en;
        r->seen = true;
    }
    if (n_entries != nl * 3) {
        int64_t i = 0;
        while (i < nl * 3 && out->t[i].seen) i++;
        static const char *const kinds[3] = {"k", "v", "written"};
        st = rkv__fail(RKV_ERR_FORMAT, "%s: %s: corrupted header: tensor 'layer.%lld.%s' is missing",
                       s->what, s->name, (long long)(i / 3), kinds[i % 3]);
        goto done;
    }
    /* the tensors must tile [0, data bytes) without gaps or overlaps */
    {
        tensor_ref **order = malloc((size_t)nl * 3 * sizeof *order);
        if (!order) {
            st = rkv__fail(RKV_ERR_NO_MEMORY, "%s: out of memory", s->what);
            goto done;
        }
        for (int64_t i = 0; i < nl * 3; i++) order[i] = &out->t[i];
        qsort(order, (size_t)nl * 3, sizeof *order, cmp_ref);
        uint64_t at = 0;
        bool tiled = true;
        for (int64_t i = 0; i < nl * 3 && tiled; i++) {
            tiled = order[i]->begin == at;
            at = order[i]->end;
        }
        free(order);
        if (!tiled) {
            st = rkv__fail(RKV_ERR_FORMAT,
                           "%s: %s: corrupted header: the tensors' data_offsets overlap or leave "
                           "gaps",
                           s->what, s->name);
            goto done;
        }
        if (at > info->data_bytes) {
            st = rkv__fail(RKV_ERR_FORMAT,
                           "%s: %s: truncated: the data section has %llu bytes; the tensors take "
                           "%llu",
                           s->what, s->name, (unsigned long long)info->data_bytes,
                           (unsigned long long)at);
            goto done;
        }
        if (at < info->data_bytes) {
            st = rkv__fail(RKV_ERR_FORMAT,
                           "%s: %s: corrupted: %llu unexpected bytes after the tensors' %llu",
                           s->what, s->name, (unsigned long long)(info->data_bytes - at),
                           (unsigned long long)at);
            goto done;
        }
    }
    st = RKV_OK;
done:
    cJSON_Delete(root);
    free(owned);
    if (st != RKV_OK) parsed_free(out);
    return st;
}

/* Pass over the data section: checks data_xxh3 and every layer's written
 * bits (0/1, scratch 1, whole frames). */
static rkv_status verify_data(const source *s, parsed *p) {
    const rkv_snapshot_info *info = &p->info;
    rkv_status st = RKV_OK;
    uint64_t got;
    uint8_t *buf = NULL;
    if (s->mem) {
        got = XXH3_64bits(s->mem + p->data_offset, (size_t)info->data_bytes);
    } else {
        const size_t chunk = info->data_bytes < CHUNK_BYTES ? (size_t)info->data_bytes + 1
                                                            : CHUNK_BYTES;
        if (!(buf = malloc(chunk)))
            return rkv__fail(RKV_ERR_NO_MEMORY, "%s: out of memory", s->what);
        XXH3_state_t hs;
        XXH3_64bits_reset(&hs);
        for (uint64_t off = 0; off < info->data_bytes;) {
            size_t n = info->data_bytes - off < chunk ? (size_t)(info->data_bytes - off) : chunk;
            if ((st = src_read(s, p->data_offset + off, buf, n)) != RKV_OK) goto done;
            XXH3_64bits_update(&hs, buf, n);
            off += n;
        }
        got = XXH3_64bits_digest(&hs);
    }
    if (got != info->data_xxh3) {
        st = rkv__fail(RKV_ERR_FORMAT,
                       "%s: %s: corrupted data: data checksum mismatch (data_xxh3 %016llx, "
                       "computed %016llx)",
                       s->what, s->name, (unsigned long long)info->data_xxh3,
                       (unsigned long long)got);
        goto done;
    }
    for (int64_t i = 0; i < info->config.n_layers; i++) {
        const tensor_ref *r = &p->t[i * 3 + 2];
        rkv_geometry g;
        rkv_model_config_layer_geometry(&info->config, i, &g);
        const uint8_t *w;
        if (s->mem) {
            w = s->mem + p->data_offset + r->begin;
        } else {
            free(buf);
            if (!(buf = malloc((size_t)(r->end - r->begin)))) {
                st = rkv__fail(RKV_ERR_NO_MEMORY, "%s: out of memory", s->what);
                goto done;
            }
            if ((st = src_read(s, p->data_offset + r->begin, buf, (size_t)(r->end - r->begin))) !=
                RKV_OK)
                goto done;
            w = buf;
        }
        const int64_t bad = rkv__written_span_check(&g, w);
        if (bad >= 0) {
            st = rkv__fail(RKV_ERR_FORMAT,
                           "%s: %s: corrupted data: layer.%lld.written[%lld] = %u (expected 0/1, "
                           "scratch slots 1, frames written whole)",
                           s->what, s->name, (long long)i, (long long)bad, w[bad]);
            goto done;
        }
    }
done:
    free(buf);
    return st;
}

/* Opens a file source; RKV_ERR_IO with the reason. */
static rkv_status src_open(source *s, const char *what, const char *path) {
    memset(s, 0, sizeof *s);
    s->what = what;
    s->name = path;
    s->fd = -1;
    if (!path) return rkv__fail(RKV_ERR_NULL, "%s: path is NULL", what);
    s->fd = open(path, O_RDONLY | O_CLOEXEC);
    if (s->fd < 0)
        return rkv__fail(RKV_ERR_IO, "%s: cannot open %s: %s", what, path, strerror(errno));
    struct stat sb;
    const char *why = NULL;
    if (fstat(s->fd, &sb)) why = strerror(errno);
    else if (!S_ISREG(sb.st_mode)) why = "not a regular file";
    if (why) {
        close(s->fd);
        s->fd = -1;
        return rkv__fail(RKV_ERR_IO, "%s: %s: %s", what, path, why);
    }
    s->size = (uint64_t)sb.st_size;
    return RKV_OK;
}

static void src_mem(source *s, const char *what, const void *buf, size_t bytes) {
    memset(s, 0, sizeof *s);
    s->what = what;
    s->name = "(memory)";
    s->mem = buf;
    s->fd = -1;
    s->size = bytes;
}

/* ------------------------------------------------------------------------ */
/* Inspect                                                                   */
/* ------------------------------------------------------------------------ */

static rkv_status inspect_source(const source *s, rkv_snapshot_info *info) {
    parsed p;
    rkv_status st = parse_header(s, &p);
    if (st != RKV_OK) return st;
    st = verify_data(s, &p);
    if (st == RKV_OK && info) *info = p.info;
    parsed_free(&p);
    return st;
}

rkv_status rkv_snapshot_inspect(const char *path, rkv_snapshot_info *info) {
    source s;
    rkv_status st = src_open(&s, "rkv_snapshot_inspect", path);
    if (st != RKV_OK) return st;
    st = inspect_source(&s, info);
    close(s.fd);
    return st;
}

rkv_status rkv_snapshot_inspect_mem(const void *buf, size_t bytes, rkv_snapshot_info *info) {
    if (!buf && bytes) return rkv__fail(RKV_ERR_NULL, "rkv_snapshot_inspect_mem: buf is NULL");
    source s;
    src_mem(&s, "rkv_snapshot_inspect_mem", buf ? buf : "", bytes);
    return inspect_source(&s, info);
}

/* ------------------------------------------------------------------------ */
/* Load                                                                      */
/* ------------------------------------------------------------------------ */

/* The snapshot's geometry against the model's: RKV_OK or "wrong geometry"
 * naming the first difference, and both models' names (a snapshot of
 * another preset is the usual cause). */
static rkv_status check_geometry(const source *s, const rkv_model_config *snap,
                                 const rkv_model_config *mine) {
    char names[2 * RKV_MAX_NAME + 64];
    snprintf(names, sizeof names, " (the snapshot is of model '%s', this model is '%s')",
             snap->name, mine->name);
#define DIFF(field, label)                                                                         \
    if (snap->field != mine->field)                                                                \
        return rkv__fail(RKV_ERR_FORMAT,                                                           \
                         "%s: %s: wrong geometry%s: the snapshot has %s %lld, this model %lld",   \
                         s->what, s->name, names, label, (long long)snap->field,                  \
                         (long long)mine->field);
    DIFF(n_layers, "n_layers")
    DIFF(n_kv_heads, "n_kv_heads")
    DIFF(d_head, "d_head")
    DIFF(tokens_per_frame, "tokens_per_frame")
#undef DIFF
    if (snap->dtype != mine->dtype)
        return rkv__fail(RKV_ERR_FORMAT,
                         "%s: %s: wrong geometry%s: the snapshot has dtype %s, this model %s",
                         s->what, s->name, names, rkv_dtype_name(snap->dtype),
                         rkv_dtype_name(mine->dtype));
    for (int64_t i = 0; i < mine->n_layers; i++) {
        const rkv_layer_spec *a = &snap->layers[i], *b = &mine->layers[i];
        if (a->ring_frames != b->ring_frames || a->ring_buckets != b->ring_buckets ||
            a->pinned_dilation != b->pinned_dilation)
            return rkv__fail(RKV_ERR_FORMAT,
                             "%s: %s: wrong geometry%s: layer %lld of the snapshot has "
                             "ring_frames %lld, ring_buckets %lld, pinned_dilation %lld; this "
                             "model's has %lld, %lld, %lld",
                             s->what, s->name, names, (long long)i, (long long)a->ring_frames,
                             (long long)a->ring_buckets, (long long)a->pinned_dilation,
                             (long long)b->ring_frames, (long long)b->ring_buckets,
                             (long long)b->pinned_dilation);
    }
    return RKV_OK;
}

/* Copies the validated data section into the session, tensor by tensor in
 * file order, one piece of the span at a time through the model's backend
 * (a bounce buffer of one head's span). For files the bytes are hashed
 * again: if the file changed after verify_data, the session is reset and
 * RKV_ERR_IO returned. */
static rkv_status install(const source *s, parsed *p, rkv_model *m, int64_t session) {
    const int64_t nl = m->cfg.n_layers;
    tensor_ref **order = malloc((size_t)nl * 3 * sizeof *order);
    uint8_t *bounce = malloc(rkv__model_max_span_bytes(m));
    if (!order || !bounce) {
        free(order);
        free(bounce);
        return rkv__fail(RKV_ERR_NO_MEMORY, "%s: out of memory", s->what);
    }
    for (int64_t i = 0; i < nl * 3; i++) order[i] = &p->t[i];
    qsort(order, (size_t)nl * 3, sizeof *order, cmp_ref);
    XXH3_state_t hs;
    XXH3_64bits_reset(&hs);
    rkv_status st = RKV_OK;
    for (int64_t k = 0; k < nl * 3 && st == RKV_OK; k++) {
        const tensor_ref *r = order[k];
        const rkv_span_part part = (rkv_span_part)r->kind; /* k, v, written */
        const size_t bytes = rkv__model_span_bytes(m, r->layer, part);
        const int64_t heads = part == RKV_SPAN_WRITTEN ? 1 : m->cfg.n_kv_heads;
        uint64_t off = p->data_offset + r->begin;
        for (int64_t h = 0; h < heads && st == RKV_OK; h++, off += bytes) {
            if ((st = src_read(s, off, bounce, bytes)) != RKV_OK) break;
            if (!s->mem) XXH3_64bits_update(&hs, bounce, bytes);
            st = rkv__model_span_write(m, r->layer, session, part, h, bounce);
            if (st == RKV_ERR_INVALID_ARG && !s->mem) /* bits verified, then changed */
                st = rkv__fail(RKV_ERR_IO,
                               "%s: %s: the file changed while it was loaded (its written bits "
                               "are no longer valid on the second read); session %lld was reset",
                               s->what, s->name, (long long)session);
            else if (st != RKV_OK)
                st = rkv__model_backend_fail(st, s->what);
        }
    }
    free(order);
    free(bounce);
    if (st == RKV_OK && !s->mem && XXH3_64bits_digest(&hs) != p->info.data_xxh3)
        st = rkv__fail(RKV_ERR_IO,
                       "%s: %s: the file changed while it was loaded (data checksum differs on "
                       "the second read); session %lld was reset",
                       s->what, s->name, (long long)session);
    if (st != RKV_OK) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", rkv_last_error());
        rkv__model_clear_session(m, session);
        return rkv__fail(st, "%s%s", msg, strstr(msg, "was reset") ? "" : "; the session was reset");
    }
    rkv__model_set_clock(m, session, p->info.last_committed);
    return RKV_OK;
}

static rkv_status load_source(const source *s, rkv_model *model, int64_t session) {
    parsed p;
    rkv_status st = parse_header(s, &p);
    if (st != RKV_OK) return st;
    if ((st = check_geometry(s, &p.info.config, &model->cfg)) == RKV_OK &&
        (st = verify_data(s, &p)) == RKV_OK)
        st = install(s, &p, model, session);
    parsed_free(&p);
    return st;
}

rkv_status rkv_model_load_session(rkv_model *model, int64_t session, const char *path) {
    static const char *what = "rkv_model_load_session";
    rkv_status st = rkv__model_check_between_frames(model, what, session);
    if (st != RKV_OK) return st;
    source s;
    if ((st = src_open(&s, what, path)) != RKV_OK) return st;
    st = load_source(&s, model, session);
    close(s.fd);
    return st;
}

rkv_status rkv_model_load_session_mem(rkv_model *model, int64_t session, const void *buf,
                                      size_t bytes) {
    static const char *what = "rkv_model_load_session_mem";
    rkv_status st = rkv__model_check_between_frames(model, what, session);
    if (st != RKV_OK) return st;
    if (!buf && bytes) return rkv__fail(RKV_ERR_NULL, "%s: buf is NULL", what);
    source s;
    src_mem(&s, what, buf ? buf : "", bytes);
    return load_source(&s, model, session);
}

/* ------------------------------------------------------------------------ */
/* Save                                                                      */
/* ------------------------------------------------------------------------ */

/* The header of a session, padded with spaces so that 8 + its length is a
 * multiple of 8, both checksums still "0000000000000000". */
typedef struct header {
    char *text;          /* malloc'd, len bytes (not NUL-terminated)  */
    size_t len;
    size_t data_digits;  /* offset of data_xxh3's digits in text      */
    size_t header_digits;
    uint64_t data_bytes;
} header;

static bool add_str(cJSON *o, const char *key, const char *v) {
    return cJSON_AddStringToObject(o, key, v) != NULL;
}
static bool add_int(cJSON *o, const char *key, int64_t v) {
    char buf[24];
    snprintf(buf, sizeof buf, "%lld", (long long)v);
    return add_str(o, key, buf);
}
static bool add_raw_u64s(cJSON *o, const char *key, const uint64_t *v, int n) {
    cJSON *a = cJSON_AddArrayToObject(o, key);
    if (!a) return false;
    for (int i = 0; i < n; i++) {
        char buf[24];
        snprintf(buf, sizeof buf, "%llu", (unsigned long long)v[i]);
        cJSON *x = cJSON_CreateRaw(buf);
        if (!x || !cJSON_AddItemToArray(a, x)) {
            cJSON_Delete(x);
            return false;
        }
    }
    return true;
}
/* A string metadata field that keeps the header valid UTF-8 JSON: printable
 * ASCII is stored as is under `key`, anything else as hex under key_hex. */
static bool add_text(cJSON *o, const char *key, const char *v) {
    if (printable_ascii(v)) return add_str(o, key, v);
    char hexkey[40], *hex = malloc(2 * strlen(v) + 1);
    if (!hex) return false;
    for (size_t i = 0; v[i]; i++) snprintf(hex + 2 * i, 3, "%02x", (unsigned char)v[i]);
    hex[2 * strlen(v)] = '\0';
    snprintf(hexkey, sizeof hexkey, "%s_hex", key);
    bool ok = add_str(o, hexkey, hex);
    free(hex);
    return ok;
}

static rkv_status build_header(const rkv_model *m, int64_t session, const char *what,
                               header *out) {
    const rkv_model_config *cfg = &m->cfg;
    const rkv__session_state *ss = &m->sessions[session];
    memset(out, 0, sizeof *out);
    cJSON *root = cJSON_CreateObject();
    cJSON *meta = root ? cJSON_AddObjectToObject(root, "__metadata__") : NULL;
    bool ok = meta != NULL;
    char *lists[3] = {NULL, NULL, NULL};
    static const char *const list_keys[3] = {"ring_frames", "ring_buckets", "pinned_dilation"};
    for (int k = 0; k < 3 && ok; k++) {
        ok = (lists[k] = malloc((size_t)cfg->n_layers * 21 + 1)) != NULL;
        size_t at = 0;
        for (int64_t i = 0; ok && i < cfg->n_layers; i++) {
            const rkv_layer_spec *sp = &cfg->layers[i];
            int64_t v = k == 0 ? sp->ring_frames : k == 1 ? sp->ring_buckets : sp->pinned_dilation;
            at += (size_t)sprintf(lists[k] + at, "%s%lld", i ? "," : "", (long long)v);
        }
    }
    ok = ok && add_str(meta, "format", FORMAT_NAME) &&
         add_int(meta, "format_version", RKV_SNAPSHOT_VERSION) &&
         add_str(meta, "ringkv_version", rkv_version()) && add_text(meta, "model", cfg->name) &&
         add_text(meta, "request_id", ss->request_id) && add_int(meta, "session", session) &&
         add_str(meta, "dtype", rkv_dtype_name(cfg->dtype)) &&
         add_int(meta, "n_layers", cfg->n_layers) && add_int(meta, "n_q_heads", cfg->n_q_heads) &&
         add_int(meta, "n_kv_heads", cfg->n_kv_heads) && add_int(meta, "d_head", cfg->d_head) &&
         add_int(meta, "tokens_per_frame", cfg->tokens_per_frame);
    for (int k = 0; k < 3 && ok; k++) ok = add_str(meta, list_keys[k], lists[k]);
    ok = ok && add_int(meta, "last_committed", ss->last_committed) &&
         add_str(meta, "data_xxh3", ZERO_DIGITS) && add_str(meta, "header_xxh3", ZERO_DIGITS);
    for (int k = 0; k < 3; k++) free(lists[k]);
    uint64_t at = 0;
    for (int64_t i = 0; ok && i < cfg->n_layers; i++) {
        const rkv_geometry gi = rkv__model_layer_geometry(m, i);
        const rkv_geometry *g = &gi;
        const layer_sizes z = sizes_of(g);
        static const char *const kinds[3] = {"k", "v", "written"};
        for (int k = 0; k < 3 && ok; k++) {
            char name[48];
            snprintf(name, sizeof name, "layer.%lld.%s", (long long)i, kinds[k]);
            cJSON *t = cJSON_AddObjectToObject(root, name);
            const uint64_t shape[3] = {(uint64_t)g->n_kv_heads, (uint64_t)z.C,
                                       (uint64_t)g->d_head};
            const uint64_t bytes = k == 2 ? z.written : z.kv;
            const uint64_t offs[2] = {at, at + bytes};
            ok = t && add_str(t, "dtype", k == 2 ? "U8" : st_dtype_name(g->dtype)) &&
                 add_raw_u64s(t, "shape", k == 2 ? shape + 1 : shape, k == 2 ? 1 : 3) &&
                 add_raw_u64s(t, "data_offsets", offs, 2);
            at += bytes;
        }
    }
    char *json = ok ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(root);
    if (!json) return rkv__fail(RKV_ERR_NO_MEMORY, "%s: out of memory building the header", what);
    const size_t jlen = strlen(json), padded = (jlen + 8 + 7) / 8 * 8 - 8;
    char *text = malloc(padded);
    const char *dk = strstr(json, "\"data_xxh3\":\"" ZERO_DIGITS "\"");
    const char *hk = strstr(json, "\"header_xxh3\":\"" ZERO_DIGITS "\"");
    if (!text || !dk || !hk) {
        free(text);
        cJSON_free(json);
        return rkv__fail(RKV_ERR_NO_MEMORY, "%s: out of memory building the header", what);
    }
    memcpy(text, json, jlen);
    memset(text + jlen, ' ', padded - jlen);
    out->text = text;
    out->len = padded;
    out->data_digits = (size_t)(dk - json) + strlen("\"data_xxh3\":\"");
    out->header_digits = (size_t)(hk - json) + strlen("\"header_xxh3\":\"");
    out->data_bytes = at;
    cJSON_free(json);
    return RKV_OK;
}

/* Where the bytes go: a file descriptor or a memory buffer. */
typedef struct sink {
    const char *what, *name;
    int fd;
    uint8_t *mem;
    uint64_t off;
} sink;

static rkv_status sink_write(sink *k, const void *p, size_t n) {
    if (k->mem) {
        memcpy(k->mem + k->off, p, n);
        k->off += n;
        return RKV_OK;
    }
    const uint8_t *q = p;
    while (n) {
        ssize_t put = write(k->fd, q, n);
        if (put < 0 && errno == EINTR) continue;
        if (put <= 0)
            return rkv__fail(RKV_ERR_IO, "%s: writing %s failed at byte %llu: %s", k->what,
                             k->name, (unsigned long long)k->off,
                             put < 0 ? strerror(errno) : "no progress");
        q += put;
        n -= (size_t)put;
        k->off += (uint64_t)put;
    }
    return RKV_OK;
}

/* Writes the whole image: length, header (checksums zero), data (hashed),
 * then the header again with both checksums filled in. */
/* The data section: per layer K of every head, V of every head, the
 * written bits, each piece read through the model's backend into a bounce
 * buffer, hashed and written. */
static rkv_status write_data(const rkv_model *m, int64_t session, sink *k, XXH3_state_t *hs) {
    uint8_t *bounce = malloc(rkv__model_max_span_bytes(m));
    if (!bounce) return rkv__fail(RKV_ERR_NO_MEMORY, "%s: out of memory", k->what);
    rkv_status st = RKV_OK;
    for (int64_t i = 0; i < m->cfg.n_layers && st == RKV_OK; i++)
        for (int part = RKV_SPAN_K; part <= RKV_SPAN_WRITTEN && st == RKV_OK; part++) {
            const size_t bytes = rkv__model_span_bytes(m, i, (rkv_span_part)part);
            const int64_t heads = part == RKV_SPAN_WRITTEN ? 1 : m->cfg.n_kv_heads;
            for (int64_t h = 0; h < heads && st == RKV_OK; h++) {
                if ((st = rkv__model_span_read(m, i, session, (rkv_span_part)part, h, bounce)) !=
                    RKV_OK) {
                    st = rkv__model_backend_fail(st, k->what);
                    break;
                }
                XXH3_64bits_update(hs, bounce, bytes);
                st = sink_write(k, bounce, bytes);
            }
        }
    free(bounce);
    return st;
}

static rkv_status write_image(const rkv_model *m, int64_t session, header *hd, sink *k) {
    uint8_t lenbuf[8];
    put_le64(lenbuf, hd->len);
    rkv_status st;
    if ((st = sink_write(k, lenbuf, 8)) != RKV_OK ||
        (st = sink_write(k, hd->text, hd->len)) != RKV_OK)
        return st;
    XXH3_state_t hs;
    XXH3_64bits_reset(&hs);
    if ((st = write_data(m, session, k, &hs)) != RKV_OK) return st;
    hex16(XXH3_64bits_digest(&hs), hd->text + hd->data_digits);
    XXH3_64bits_reset(&hs);
    XXH3_64bits_update(&hs, lenbuf, 8);
    XXH3_64bits_update(&hs, hd->text, hd->len);
    hex16(XXH3_64bits_digest(&hs), hd->text + hd->header_digits);
    if (k->mem) {
        memcpy(k->mem + 8, hd->text, hd->len);
        return RKV_OK;
    }
    for (size_t done = 0; done < hd->len;) {
        ssize_t put = pwrite(k->fd, hd->text + done, hd->len - done, (off_t)(8 + done));
        if (put < 0 && errno == EINTR) continue;
        if (put <= 0)
            return rkv__fail(RKV_ERR_IO, "%s: writing the header of %s failed: %s", k->what,
                             k->name, put < 0 ? strerror(errno) : "no progress");
        done += (size_t)put;
    }
    return RKV_OK;
}

rkv_status rkv_model_save_session_mem(const rkv_model *model, int64_t session, void *buf,
                                      size_t buf_bytes, size_t *file_bytes) {
    static const char *what = "rkv_model_save_session_mem";
    rkv_status st = rkv__model_check_between_frames(model, what, session);
    if (st != RKV_OK) return st;
    if (!file_bytes) return rkv__fail(RKV_ERR_NULL, "%s: file_bytes is NULL", what);
    header hd;
    if ((st = build_header(model, session, what, &hd)) != RKV_OK) return st;
    const uint64_t total = 8 + hd.len + hd.data_bytes;
    if (total > SIZE_MAX) {
        free(hd.text);
        return rkv__fail(RKV_ERR_OVERFLOW, "%s: the image takes %llu bytes", what,
                         (unsigned long long)total);
    }
    if (buf && buf_bytes < total) {
        free(hd.text);
        return rkv__fail(RKV_ERR_INVALID_ARG, "%s: buffer has %zu bytes; the image takes %llu",
                         what, buf_bytes, (unsigned long long)total);
    }
    if (buf) {
        sink k = {what, "(memory)", -1, buf, 0};
        st = write_image(model, session, &hd, &k);
    }
    free(hd.text);
    if (st == RKV_OK) *file_bytes = (size_t)total;
    return st;
}

rkv_status rkv_model_save_session(const rkv_model *model, int64_t session, const char *path) {
    static const char *what = "rkv_model_save_session";
    rkv_status st = rkv__model_check_between_frames(model, what, session);
    if (st != RKV_OK) return st;
    if (!path) return rkv__fail(RKV_ERR_NULL, "%s: path is NULL", what);
    if (!*path) return rkv__fail(RKV_ERR_INVALID_ARG, "%s: path is empty", what);
    header hd;
    if ((st = build_header(model, session, what, &hd)) != RKV_OK) return st;

    /* temporary file next to the destination, so that rename is atomic */
    const size_t plen = strlen(path);
    char *tmp = malloc(plen + 16);
    if (!tmp) {
        free(hd.text);
        return rkv__fail(RKV_ERR_NO_MEMORY, "%s: out of memory", what);
    }
    snprintf(tmp, plen + 16, "%s.tmp-XXXXXX", path);
    int fd = mkstemp(tmp);
    if (fd < 0) {
        st = rkv__fail(RKV_ERR_IO, "%s: cannot create a temporary file next to %s: %s", what,
                       path, strerror(errno));
        free(tmp);
        free(hd.text);
        return st;
    }
    struct stat old;
    (void)fchmod(fd, stat(path, &old) == 0 ? (old.st_mode & 07777) : 0644);
    sink k = {what, tmp, fd, NULL, 0};
    st = write_image(model, session, &hd, &k);
    free(hd.text);
    if (st == RKV_OK && fsync(fd))
        st = rkv__fail(RKV_ERR_IO, "%s: fsync of %s failed: %s", what, tmp, strerror(errno));
    if (close(fd) && st == RKV_OK)
        st = rkv__fail(RKV_ERR_IO, "%s: closing %s failed: %s", what, tmp, strerror(errno));
    if (st == RKV_OK && rename(tmp, path))
        st = rkv__fail(RKV_ERR_IO, "%s: cannot rename %s to %s: %s", what, tmp, path,
                       strerror(errno));
    if (st != RKV_OK) {
        unlink(tmp);
        free(tmp);
        return st;
    }
    free(tmp);
    /* make the rename itself durable (best effort: some file systems refuse
     * to fsync a directory) */
    char *dir = strdup(path);
    if (dir) {
        char *slash = strrchr(dir, '/');
        const char *d = slash ? (slash == dir ? "/" : (*slash = '\0', dir)) : ".";
        int dfd = open(d, O_RDONLY | O_CLOEXEC);
        if (dfd >= 0) {
            (void)fsync(dfd);
            close(dfd);
        }
        free(dir);
    }
    return RKV_OK;
}

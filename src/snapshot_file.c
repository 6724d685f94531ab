/* Snapshot files of one session (docs/snapshot-format.md): the safetensors
 * layout (8-byte little-endian header length, JSON header, raw little-endian
 * tensors) with ringkv's facts in the "__metadata__" strings and two XXH3-64
 * checksums, one over the data section and one over the header itself.
 *
 * This file holds the file part: where the bytes come from (a file read
 * with pread, or a memory image) and go to (a file, or a buffer), the atomic
 * save (temporary file in the same directory, fsync, rename), the data
 * checksum and written-bit checks, and the copy of each layer's span into or
 * out of the model. The header itself (length, JSON, version, header
 * checksum, geometry, tensor table, tiling) is src/snapshot_header.c.
 *
 * Loading validates everything (header, geometry against the model, data
 * checksum, written bits) before it changes the session; see
 * rkv_model_load_session in ringkv.h. */
#define _POSIX_C_SOURCE 200809L /* pread, fsync, mkstemp, fchmod */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include <xxhash.h>

#include "model_internal.h"
#include "snapshot_header.h"

#define CHUNK_BYTES ((size_t)1 << 20)

/* ------------------------------------------------------------------------ */
/* Reading: a file (pread) or a memory image                                 */
/* ------------------------------------------------------------------------ */

typedef struct source {
    rkv__snap_where w;  /* the API call and the path, or "(memory)"  */
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
            return rkv__fail(RKV_ERR_IO, "%s: %s: read failed at byte %llu: %s", s->w.what,
                             s->w.name, (unsigned long long)off, strerror(errno));
        if (got == 0)
            return rkv__fail(RKV_ERR_IO,
                             "%s: %s: the file shrank while it was read (truncated at byte %llu)",
                             s->w.what, s->w.name, (unsigned long long)off);
        p += got;
        off += (uint64_t)got;
        n -= (size_t)got;
    }
    return RKV_OK;
}

/* Opens a file source; RKV_ERR_IO with the reason. */
static rkv_status src_open(source *s, const char *what, const char *path) {
    memset(s, 0, sizeof *s);
    s->w.what = what;
    s->w.name = path;
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
    s->w.what = what;
    s->w.name = "(memory)";
    s->mem = buf;
    s->fd = -1;
    s->size = bytes;
}

/* Reads the length and header bytes of the source and hands them to the
 * header codec. */
static rkv_status read_header(const source *s, rkv__snap_header *out) {
    uint8_t first8[8];
    uint64_t n = 0;
    rkv_status st = s->size >= 8 ? src_read(s, 0, first8, 8) : RKV_OK;
    if (st != RKV_OK ||
        (st = rkv__snap_header_length(&s->w, s->size >= 8 ? first8 : NULL, s->size, &n)) != RKV_OK)
        return st;
    if (s->mem) return rkv__snap_header_parse(&s->w, first8, s->mem + 8, n, s->size, out);
    uint8_t *h = malloc((size_t)n);
    if (!h)
        return rkv__fail(RKV_ERR_NO_MEMORY, "%s: %s: cannot allocate the %llu-byte header",
                         s->w.what, s->w.name, (unsigned long long)n);
    if ((st = src_read(s, 8, h, (size_t)n)) == RKV_OK)
        st = rkv__snap_header_parse(&s->w, first8, h, n, s->size, out);
    free(h);
    return st;
}

/* XXH3-64 of the data section, read in chunks from a file. */
static rkv_status data_hash(const source *s, const rkv__snap_header *p, uint64_t *got) {
    const uint64_t n = p->info.data_bytes;
    if (s->mem) {
        *got = XXH3_64bits(s->mem + p->data_offset, (size_t)n);
        return RKV_OK;
    }
    const size_t chunk = n < CHUNK_BYTES ? (size_t)n + 1 : CHUNK_BYTES;
    uint8_t *buf = malloc(chunk);
    if (!buf) return rkv__fail(RKV_ERR_NO_MEMORY, "%s: out of memory", s->w.what);
    XXH3_state_t hs;
    XXH3_64bits_reset(&hs);
    rkv_status st = RKV_OK;
    for (uint64_t off = 0; off < n && st == RKV_OK;) {
        const size_t k = n - off < chunk ? (size_t)(n - off) : chunk;
        if ((st = src_read(s, p->data_offset + off, buf, k)) == RKV_OK)
            XXH3_64bits_update(&hs, buf, k);
        off += k;
    }
    free(buf);
    *got = XXH3_64bits_digest(&hs);
    return st;
}

/* Layer i's written bits: 0/1, scratch 1, frames whole. */
static rkv_status check_written(const source *s, const rkv__snap_header *p, int64_t i) {
    const rkv__snap_tensor *r = &p->t[i * 3 + 2];
    rkv_geometry g;
    rkv_model_config_layer_geometry(&p->info.config, i, &g);
    uint8_t *buf = NULL;
    const uint8_t *bits = s->mem ? s->mem + p->data_offset + r->begin : NULL;
    rkv_status st = RKV_OK;
    if (!bits) {
        if (!(buf = malloc((size_t)(r->end - r->begin))))
            return rkv__fail(RKV_ERR_NO_MEMORY, "%s: out of memory", s->w.what);
        st = src_read(s, p->data_offset + r->begin, buf, (size_t)(r->end - r->begin));
        bits = buf;
    }
    const int64_t bad = st == RKV_OK ? rkv__written_span_check(&g, bits) : -1;
    if (bad >= 0)
        st = rkv__fail(RKV_ERR_FORMAT,
                       "%s: %s: corrupted data: layer.%lld.written[%lld] = %u (expected 0/1, "
                       "scratch slots 1, frames written whole)",
                       s->w.what, s->w.name, (long long)i, (long long)bad, bits[bad]);
    free(buf);
    return st;
}

/* Pass over the data section: checks data_xxh3 and every layer's written
 * bits. */
static rkv_status verify_data(const source *s, const rkv__snap_header *p) {
    uint64_t got = 0;
    rkv_status st = data_hash(s, p, &got);
    if (st != RKV_OK) return st;
    if (got != p->info.data_xxh3)
        return rkv__fail(RKV_ERR_FORMAT,
                         "%s: %s: corrupted data: data checksum mismatch (data_xxh3 %016llx, "
                         "computed %016llx)",
                         s->w.what, s->w.name, (unsigned long long)p->info.data_xxh3,
                         (unsigned long long)got);
    for (int64_t i = 0; i < p->info.config.n_layers && st == RKV_OK; i++)
        st = check_written(s, p, i);
    return st;
}

/* ------------------------------------------------------------------------ */
/* Inspect                                                                   */
/* ------------------------------------------------------------------------ */

static rkv_status inspect_source(const source *s, rkv_snapshot_info *info) {
    rkv__snap_header p;
    rkv_status st = read_header(s, &p);
    if (st != RKV_OK) return st;
    st = verify_data(s, &p);
    if (st == RKV_OK && info) *info = p.info;
    rkv__snap_header_free(&p);
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
    char names[2 * 4 * RKV_MAX_NAME + 80], a[4 * RKV_MAX_NAME + 4], b[4 * RKV_MAX_NAME + 4];
    snprintf(names, sizeof names, " (the snapshot is of model '%s', this model is '%s')",
             rkv__snap_escape(a, sizeof a, snap->name, RKV_MAX_NAME),
             rkv__snap_escape(b, sizeof b, mine->name, RKV_MAX_NAME));
#define DIFF(field, label)                                                                         \
    if (snap->field != mine->field)                                                                \
        return rkv__fail(RKV_ERR_FORMAT,                                                           \
                         "%s: %s: wrong geometry%s: the snapshot has %s %lld, this model %lld",   \
                         s->w.what, s->w.name, names, label, (long long)snap->field,              \
                         (long long)mine->field);
    DIFF(n_layers, "n_layers")
    DIFF(n_kv_heads, "n_kv_heads")
    DIFF(d_head, "d_head")
    DIFF(tokens_per_frame, "tokens_per_frame")
#undef DIFF
    if (snap->dtype != mine->dtype)
        return rkv__fail(RKV_ERR_FORMAT,
                         "%s: %s: wrong geometry%s: the snapshot has dtype %s, this model %s",
                         s->w.what, s->w.name, names, rkv_dtype_name(snap->dtype),
                         rkv_dtype_name(mine->dtype));
    for (int64_t i = 0; i < mine->n_layers; i++) {
        const rkv_layer_spec *x = &snap->layers[i], *y = &mine->layers[i];
        if (x->ring_frames != y->ring_frames || x->ring_buckets != y->ring_buckets ||
            x->pinned_dilation != y->pinned_dilation)
            return rkv__fail(RKV_ERR_FORMAT,
                             "%s: %s: wrong geometry%s: layer %lld of the snapshot has "
                             "ring_frames %lld, ring_buckets %lld, pinned_dilation %lld; this "
                             "model's has %lld, %lld, %lld",
                             s->w.what, s->w.name, names, (long long)i, (long long)x->ring_frames,
                             (long long)x->ring_buckets, (long long)x->pinned_dilation,
                             (long long)y->ring_frames, (long long)y->ring_buckets,
                             (long long)y->pinned_dilation);
    }
    return RKV_OK;
}

/* Copies tensor r (one layer's K, V or written span of a session) from the
 * source into `session` of the model, one piece at a time (K or V of one
 * head, or the written bits) through the model's backend and the bounce
 * buffer (rkv__model_max_span_bytes); file bytes are hashed into hs on the
 * way. */
static rkv_status install_span(const source *s, uint64_t off, const rkv__snap_tensor *r,
                               rkv_model *m, int64_t session, XXH3_state_t *hs,
                               uint8_t *bounce) {
    const rkv_span_part part = (rkv_span_part)r->kind; /* k, v, written */
    const size_t bytes = rkv__model_span_bytes(m, r->layer, part);
    const int64_t heads = part == RKV_SPAN_WRITTEN ? 1 : m->cfg.n_kv_heads;
    rkv_status st = RKV_OK;
    for (int64_t h = 0; h < heads && st == RKV_OK; h++, off += bytes) {
        if ((st = src_read(s, off, bounce, bytes)) != RKV_OK) break;
        if (!s->mem) XXH3_64bits_update(hs, bounce, bytes);
        st = rkv__model_span_write(m, r->layer, session, part, h, bounce);
        if (st == RKV_ERR_INVALID_ARG && !s->mem) /* bits verified, then changed */
            st = rkv__fail(RKV_ERR_IO,
                           "%s: %s: the file changed while it was loaded (its written bits are "
                           "no longer valid on the second read); session %lld was reset",
                           s->w.what, s->w.name, (long long)session);
        else if (st != RKV_OK)
            st = rkv__model_backend_fail(st, s->w.what);
    }
    return st;
}

/* Copies the validated data section into the session, tensor by tensor in
 * file order. For files the bytes are hashed again: if the file changed
 * after verify_data, the session is reset and RKV_ERR_IO returned. */
static rkv_status install(const source *s, const rkv__snap_header *p, rkv_model *m,
                          int64_t session) {
    uint8_t *bounce = malloc(rkv__model_max_span_bytes(m));
    if (!bounce) return rkv__fail(RKV_ERR_NO_MEMORY, "%s: out of memory", s->w.what);
    XXH3_state_t hs;
    XXH3_64bits_reset(&hs);
    rkv_status st = RKV_OK;
    for (int64_t k = 0; k < m->cfg.n_layers * 3 && st == RKV_OK; k++) {
        const rkv__snap_tensor *r = p->order[k];
        st = install_span(s, p->data_offset + r->begin, r, m, session, &hs, bounce);
    }
    free(bounce);
    if (st == RKV_OK && !s->mem && XXH3_64bits_digest(&hs) != p->info.data_xxh3)
        st = rkv__fail(RKV_ERR_IO,
                       "%s: %s: the file changed while it was loaded (data checksum differs on "
                       "the second read); session %lld was reset",
                       s->w.what, s->w.name, (long long)session);
    if (st != RKV_OK) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", rkv_last_error());
        rkv__model_clear_session(m, session);
        return rkv__fail(st, "%s%s", msg,
                         strstr(msg, "was reset") ? "" : "; the session was reset");
    }
    rkv__model_set_clock(m, session, p->info.last_committed);
    return RKV_OK;
}

static rkv_status load_source(const source *s, rkv_model *model, int64_t session) {
    rkv__snap_header p;
    rkv_status st = read_header(s, &p);
    if (st != RKV_OK) return st;
    if ((st = check_geometry(s, &p.info.config, &model->cfg)) == RKV_OK &&
        (st = verify_data(s, &p)) == RKV_OK)
        st = install(s, &p, model, session);
    rkv__snap_header_free(&p);
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

/* Writes layer i's K, V and written spans of `session` (the tensors
 * layer.i.k, .v, .written), one piece at a time read through the model's
 * backend into the bounce buffer, hashing them into hs. */
static rkv_status write_layer_span(sink *k, const rkv_model *m, int64_t i, int64_t session,
                                   XXH3_state_t *hs, uint8_t *bounce) {
    rkv_status st = RKV_OK;
    for (int part = RKV_SPAN_K; part <= RKV_SPAN_WRITTEN && st == RKV_OK; part++) {
        const size_t bytes = rkv__model_span_bytes(m, i, (rkv_span_part)part);
        const int64_t heads = part == RKV_SPAN_WRITTEN ? 1 : m->cfg.n_kv_heads;
        for (int64_t h = 0; h < heads && st == RKV_OK; h++) {
            if ((st = rkv__model_span_read(m, i, session, (rkv_span_part)part, h, bounce)) !=
                RKV_OK)
                return rkv__model_backend_fail(st, k->what);
            XXH3_64bits_update(hs, bounce, bytes);
            st = sink_write(k, bounce, bytes);
        }
    }
    return st;
}

/* Writes the header in place again, now with both checksums. */
static rkv_status rewrite_header(sink *k, const rkv__snap_text *hd) {
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

/* Writes the whole image: length, header (checksums zero), data (hashed),
 * then the header again with both checksums filled in. */
static rkv_status write_image(const rkv_model *m, int64_t session, rkv__snap_text *hd, sink *k) {
    uint8_t first8[8];
    rkv__snap_header_put_length(hd, first8);
    rkv_status st;
    if ((st = sink_write(k, first8, 8)) != RKV_OK ||
        (st = sink_write(k, hd->text, hd->len)) != RKV_OK)
        return st;
    uint8_t *bounce = malloc(rkv__model_max_span_bytes(m));
    if (!bounce) return rkv__fail(RKV_ERR_NO_MEMORY, "%s: out of memory", k->what);
    XXH3_state_t hs;
    XXH3_64bits_reset(&hs);
    for (int64_t i = 0; i < m->cfg.n_layers && st == RKV_OK; i++)
        st = write_layer_span(k, m, i, session, &hs, bounce);
    free(bounce);
    if (st != RKV_OK) return st;
    rkv__snap_header_seal(hd, XXH3_64bits_digest(&hs));
    return rewrite_header(k, hd);
}

static rkv_status build_header(const rkv_model *m, int64_t session, const char *what,
                               rkv__snap_text *out) {
    const rkv__session_state *ss = &m->sessions[session];
    return rkv__snap_header_build(&m->cfg, session, ss->request_id, ss->last_committed, what, out);
}

rkv_status rkv_model_save_session_mem(const rkv_model *model, int64_t session, void *buf,
                                      size_t buf_bytes, size_t *file_bytes) {
    static const char *what = "rkv_model_save_session_mem";
    rkv_status st = rkv__model_check_between_frames(model, what, session);
    if (st != RKV_OK) return st;
    if (!file_bytes) return rkv__fail(RKV_ERR_NULL, "%s: file_bytes is NULL", what);
    rkv__snap_text hd;
    if ((st = build_header(model, session, what, &hd)) != RKV_OK) return st;
    const uint64_t total = 8 + hd.len + hd.data_bytes;
    if (total > SIZE_MAX)
        st = rkv__fail(RKV_ERR_OVERFLOW, "%s: the image takes %llu bytes", what,
                       (unsigned long long)total);
    else if (buf && buf_bytes < total)
        st = rkv__fail(RKV_ERR_INVALID_ARG, "%s: buffer has %zu bytes; the image takes %llu", what,
                       buf_bytes, (unsigned long long)total);
    else if (buf) {
        sink k = {what, "(memory)", -1, buf, 0};
        st = write_image(model, session, &hd, &k);
    }
    free(hd.text);
    if (st == RKV_OK) *file_bytes = (size_t)total;
    return st;
}

/* fsync of the directory holding path, so that a rename is durable (best
 * effort: some file systems refuse to fsync a directory). */
static void sync_dir_of(const char *path) {
    char *dir = strdup(path);
    if (!dir) return;
    char *slash = strrchr(dir, '/');
    const char *d = slash ? (slash == dir ? "/" : (*slash = '\0', dir)) : ".";
    int dfd = open(d, O_RDONLY | O_CLOEXEC);
    if (dfd >= 0) {
        (void)fsync(dfd);
        close(dfd);
    }
    free(dir);
}

/* The image into the new temporary file tmp (fd), fsync'ed and closed,
 * then renamed over path. */
static rkv_status write_and_rename(const rkv_model *m, int64_t session, rkv__snap_text *hd,
                                   const char *what, int fd, const char *tmp, const char *path) {
    struct stat old;
    (void)fchmod(fd, stat(path, &old) == 0 ? (old.st_mode & 07777) : 0644);
    sink k = {what, tmp, fd, NULL, 0};
    rkv_status st = write_image(m, session, hd, &k);
    if (st == RKV_OK && fsync(fd))
        st = rkv__fail(RKV_ERR_IO, "%s: fsync of %s failed: %s", what, tmp, strerror(errno));
    if (close(fd) && st == RKV_OK)
        st = rkv__fail(RKV_ERR_IO, "%s: closing %s failed: %s", what, tmp, strerror(errno));
    if (st == RKV_OK && rename(tmp, path))
        st = rkv__fail(RKV_ERR_IO, "%s: cannot rename %s to %s: %s", what, tmp, path,
                       strerror(errno));
    if (st != RKV_OK) unlink(tmp);
    return st;
}

rkv_status rkv_model_save_session(const rkv_model *model, int64_t session, const char *path) {
    static const char *what = "rkv_model_save_session";
    rkv_status st = rkv__model_check_between_frames(model, what, session);
    if (st != RKV_OK) return st;
    if (!path) return rkv__fail(RKV_ERR_NULL, "%s: path is NULL", what);
    if (!*path) return rkv__fail(RKV_ERR_INVALID_ARG, "%s: path is empty", what);
    rkv__snap_text hd;
    if ((st = build_header(model, session, what, &hd)) != RKV_OK) return st;
    /* temporary file next to the destination, so that rename is atomic */
    const size_t plen = strlen(path);
    char *tmp = malloc(plen + 16);
    int fd = -1;
    if (!tmp) {
        st = rkv__fail(RKV_ERR_NO_MEMORY, "%s: out of memory", what);
    } else {
        snprintf(tmp, plen + 16, "%s.tmp-XXXXXX", path);
        if ((fd = mkstemp(tmp)) < 0)
            st = rkv__fail(RKV_ERR_IO, "%s: cannot create a temporary file next to %s: %s", what,
                           path, strerror(errno));
    }
    if (st == RKV_OK) st = write_and_rename(model, session, &hd, what, fd, tmp, path);
    free(tmp);
    free(hd.text);
    if (st == RKV_OK) sync_dir_of(path);
    return st;
}

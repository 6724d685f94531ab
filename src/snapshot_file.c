/* Snapshot files and images of one session (docs/snapshot-format.md): the
 * file part. Where the bytes come from (a file read with pread, or a memory
 * image) and go to (a file saved by src/atomic_file.c, or a buffer), the
 * data checksum and written-bit checks, and the copy of each layer's span
 * into or out of the model; the header is src/snapshot_header.c. Loading
 * validates everything before it changes the session (ringkv.h,
 * rkv_model_load_session). */
#define _POSIX_C_SOURCE 200809L /* pread */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include <xxhash.h>

#include "atomic_file.h"
#include "model_internal.h"
#include "snapshot_header.h"

#define CHUNK_BYTES ((size_t)1 << 20)

/* ------------------------------------------------------------------------ */
/* The in-memory images' header, per session                                 */
/* ------------------------------------------------------------------------ */

/* One session's cache: the header template of its last in-memory image
 * (rkv__snap_template: the key is the image's session and request id), the
 * emitted header and the copy's piece list of rkv_model_snapshot. `busy`:
 * taken by one call at a time (snapshots are readers of the model and may
 * run concurrently); a call that finds it taken takes the allocating path. */
struct rkv__snap_slot {
    atomic_bool busy;
    rkv__snap_template t;
    char *out;      /* [snap_header_len] */
    rkv__piece *pieces; /* [rkv_model_session_region_count] */
};

rkv_status rkv__snapshot_cache_create(rkv_model *m, const char *what) {
    m->snap = calloc((size_t)m->cfg.num_sessions, sizeof *m->snap);
    if (!m->snap) return rkv__fail(RKV_ERR_NO_MEMORY, "%s: out of memory", what);
    for (int64_t s = 0; s < m->cfg.num_sessions; s++) atomic_init(&m->snap[s].busy, false);
    return RKV_OK;
}

void rkv__snapshot_cache_free(rkv_model *m) {
    for (int64_t s = 0; m->snap && s < m->cfg.num_sessions; s++) {
        rkv__snap_template_free(&m->snap[s].t);
        free(m->snap[s].out);
        free(m->snap[s].pieces);
    }
    free(m->snap);
    m->snap = NULL;
}

static struct rkv__snap_slot *slot_take(const rkv_model *m, int64_t session) {
    struct rkv__snap_slot *k = &m->snap[session];
    bool idle = false;
    return atomic_compare_exchange_strong(&k->busy, &idle, true) ? k : NULL;
}
static void slot_give(struct rkv__snap_slot *k) {
    if (k) atomic_store(&k->busy, false);
}
static bool slot_has(const struct rkv__snap_slot *k, int64_t session, const char *request_id) {
    return k->t.text && k->t.session == session && !strcmp(k->t.request_id, request_id);
}

/* ------------------------------------------------------------------------ */
/* Reading: a file (pread) or a memory image                                 */
/* ------------------------------------------------------------------------ */

typedef struct source {
    rkv__snap_where w;  /* the API call and the path (escaped: name_buf), or "(memory)" */
    rkv__path_shown name_buf;
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

/* The image mem[bytes] when mem is not NULL, else the file at path
 * (RKV_ERR_IO with the reason); close with src_close. */
static rkv_status src_open(source *s, const char *what, const char *path, const void *mem,
                           size_t bytes) {
    memset(s, 0, sizeof *s);
    s->w.what = what;
    s->fd = -1;
    if (mem) {
        s->w.name = "(memory)";
        s->mem = mem;
        s->size = bytes;
        return RKV_OK;
    }
    if (!path) return rkv__fail(RKV_ERR_NULL, "%s: path is NULL", what);
    if (!*path) return rkv__fail(RKV_ERR_INVALID_ARG, "%s: path is empty", what);
    s->w.name = RKV__SHOW_PATH(s->name_buf, path);
    /* O_NONBLOCK: the open of a named pipe without a writer would block;
     * it is refused below, as every file that is not a regular one */
    s->fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (s->fd < 0)
        return rkv__fail(RKV_ERR_IO, "%s: cannot open %s: %s", what, s->w.name, strerror(errno));
    struct stat sb;
    char why[96] = "";
    if (fstat(s->fd, &sb) || fcntl(s->fd, F_SETFL, fcntl(s->fd, F_GETFL) & ~O_NONBLOCK))
        snprintf(why, sizeof why, "%s", strerror(errno));
    else if (!S_ISREG(sb.st_mode))
        snprintf(why, sizeof why, "%s, not a regular file", rkv__file_kind(sb.st_mode));
    if (why[0]) {
        close(s->fd);
        s->fd = -1;
        return rkv__fail(RKV_ERR_IO, "%s: %s: %s", what, s->w.name, why);
    }
    s->size = (uint64_t)sb.st_size;
    return RKV_OK;
}

static void src_close(const source *s) {
    if (s->fd >= 0) close(s->fd);
}

/* Reads the length and header bytes of the source and hands them to the
 * header codec; an image in memory that matches `tpl` (when not NULL) is
 * parsed by it (rkv__snap_template_match: no allocation). */
static rkv_status read_header(const source *s, const rkv__snap_template *tpl,
                              rkv__snap_header *out) {
    uint8_t first8[8];
    uint64_t n = 0;
    rkv_status st = s->size >= 8 ? src_read(s, 0, first8, 8) : RKV_OK;
    if (st != RKV_OK ||
        (st = rkv__snap_header_length(&s->w, s->size >= 8 ? first8 : NULL, s->size, &n)) != RKV_OK)
        return st;
    if (s->mem && tpl && rkv__snap_template_match(tpl, first8, s->mem + 8, n, s->size, out))
        return RKV_OK;
    if (s->mem) return rkv__snap_header_parse(&s->w, first8, s->mem + 8, n, s->size, false, out);
    uint8_t *h = malloc((size_t)n);
    if (!h)
        return rkv__fail(RKV_ERR_NO_MEMORY, "%s: %s: cannot allocate the %llu-byte header",
                         s->w.what, s->w.name, (unsigned long long)n);
    if ((st = src_read(s, 8, h, (size_t)n)) == RKV_OK)
        st = rkv__snap_header_parse(&s->w, first8, h, n, s->size, false, out);
    free(h);
    return st;
}

/* RKV_OK, or RKV_ERR_FORMAT naming the first slot of layer i's written
 * bits (of geometry cfg) that breaks the invariant (0/1, scratch 1, frames
 * whole). */
static rkv_status written_ok(const source *s, const rkv_model_config *cfg, const uint8_t *bits,
                             int64_t i) {
    rkv_geometry g;
    rkv_model_config_layer_geometry(cfg, i, &g);
    const int64_t bad = rkv__written_span_check(&g, bits);
    char why[160];
    if (bad < 0) return RKV_OK;
    return rkv__fail(RKV_ERR_FORMAT, "%s: %s: corrupted data: layer.%lld.written: %s", s->w.what,
                     s->w.name, (long long)i,
                     rkv__written_bad_what(&g, bits, bad, why, sizeof why));
}

/* RKV_ERR_FORMAT: the data section does not hash to data_xxh3. */
static rkv_status data_mismatch(const source *s, uint64_t want, uint64_t got) {
    return rkv__fail(RKV_ERR_FORMAT,
                     "%s: %s: corrupted data: data checksum mismatch (data_xxh3 %016llx, "
                     "computed %016llx)",
                     s->w.what, s->w.name, (unsigned long long)want, (unsigned long long)got);
}

/* Pass over the data section: checks data_xxh3 (a file read in chunks)
 * and every layer's written bits (read into a buffer from a file). */
static rkv_status verify_data(const source *s, const rkv__snap_header *p) {
    const uint64_t n = p->info.data_bytes;
    const size_t chunk = n < CHUNK_BYTES ? (size_t)n + 1 : CHUNK_BYTES;
    uint8_t *buf = s->mem ? NULL : malloc(chunk);
    if (!s->mem && !buf) return rkv__fail(RKV_ERR_NO_MEMORY, "%s: out of memory", s->w.what);
    XXH3_state_t hs;
    XXH3_64bits_reset(&hs);
    rkv_status st = RKV_OK;
    if (s->mem) XXH3_64bits_update(&hs, s->mem + p->data_offset, (size_t)n);
    for (uint64_t off = 0; buf && off < n && st == RKV_OK;) {
        const size_t k = n - off < chunk ? (size_t)(n - off) : chunk;
        if ((st = src_read(s, p->data_offset + off, buf, k)) == RKV_OK)
            XXH3_64bits_update(&hs, buf, k);
        off += k;
    }
    free(buf);
    const uint64_t got = XXH3_64bits_digest(&hs);
    if (st != RKV_OK) return st;
    if (got != p->info.data_xxh3) return data_mismatch(s, p->info.data_xxh3, got);
    for (int64_t i = 0; i < p->info.config.n_layers && st == RKV_OK; i++) {
        const uint64_t at = p->data_offset + p->t[i * 3 + 2].begin;
        const size_t bytes = (size_t)(p->t[i * 3 + 2].end - p->t[i * 3 + 2].begin);
        if (!s->mem && !(buf = malloc(bytes)))
            return rkv__fail(RKV_ERR_NO_MEMORY, "%s: out of memory", s->w.what);
        if (!buf || (st = src_read(s, at, buf, bytes)) == RKV_OK)
            st = written_ok(s, &p->info.config, buf ? buf : s->mem + at, i);
        free(buf);
    }
    return st;
}

/* Copies between `session`'s span in host memory and an image's data
 * section at `data` (to_image: into it), tensor by tensor in file order
 * (`order`, or when NULL the writer's: layer by layer K, V, written, back
 * to back), head by head, as one list (`into`: rkv_model_session_region_count
 * pieces, or NULL for a new one) hashed into hs behind the copy. false,
 * nothing copied, when a piece is not in host memory (or out of memory). */
static bool copy_host(const rkv_model *m, int64_t session, rkv__snap_tensor *const *order,
                      uint8_t *data, bool to_image, rkv__piece *into, XXH3_state_t *hs) {
    rkv__piece *pc = into ? into : malloc(rkv_model_session_region_count(m) * sizeof *pc);
    size_t k = 0;
    uint64_t off = 0;
    for (int64_t t = 0; pc && t < m->cfg.n_layers * 3; t++) {
        const int64_t i = order ? order[t]->layer : t / 3;
        const rkv_span_part part = (rkv_span_part)(order ? order[t]->kind : t % 3);
        const size_t bytes = rkv__model_span_bytes(m, i, part);
        if (order) off = order[t]->begin;
        for (int64_t h = 0; h < (part == RKV_SPAN_WRITTEN ? 1 : m->cfg.n_kv_heads); h++) {
            uint8_t *host = rkv__model_host_region(m, i, session, part, h);
            if (!host) {
                if (!into) free(pc);
                return false;
            }
            pc[k++] = to_image ? (rkv__piece){data + off, host, bytes}
                               : (rkv__piece){host, data + off, bytes};
            off += bytes;
        }
    }
    const bool listed = pc != NULL;
    if (listed) rkv__copy_pieces_hashed(pc, k, hs);
    if (!into) free(pc);
    return listed;
}

/* ------------------------------------------------------------------------ */
/* Inspect                                                                   */
/* ------------------------------------------------------------------------ */

rkv_status rkv_snapshot_inspect(const char *path, const void *buf, size_t bytes,
                                rkv_snapshot_info *info) {
    static const char what[] = "rkv_snapshot_inspect";
    if (!path && !buf) return rkv__fail(RKV_ERR_NULL, "%s: path and buf are NULL", what);
    if (path && buf)
        return rkv__fail(RKV_ERR_INVALID_ARG, "%s: both path and buf given; pass one", what);
    if (path && bytes)
        return rkv__fail(RKV_ERR_INVALID_ARG,
                         "%s: bytes is %zu with a path; bytes is the size of buf, 0 for a file",
                         what, bytes);
    rkv_status st = info ? rkv__snapshot_info_check(what, info) : RKV_OK;
    if (st != RKV_OK) return st;
    source s;
    rkv__snap_header p;
    if ((st = src_open(&s, what, path, path ? NULL : buf, bytes)) != RKV_OK) return st;
    if ((st = read_header(&s, NULL, &p)) == RKV_OK) {
        if ((st = verify_data(&s, &p)) == RKV_OK && info) rkv__snapshot_info_store(info, &p.info);
        rkv__snap_header_free(&p);
    }
    src_close(&s);
    return st;
}

/* ------------------------------------------------------------------------ */
/* Load                                                                      */
/* ------------------------------------------------------------------------ */

/* Copies the data section into `session`, tensor by tensor in file order
 * (which tiles it exactly): into a free slot in host memory (`fresh`: paged
 * in, its bytes not verified yet) as one list of pieces; else piece by
 * piece through the backend, from an image in memory or through the bounce
 * buffer from a file. Hashed when fresh or from a file: a checksum or
 * written bits that differ are corrupted data when fresh, else a file that
 * changed since verify_data (RKV_ERR_IO). On failure the session is reset
 * (zeroed, no clock) and the message says so. */
static rkv_status install_pieces(const source *s, const rkv__snap_header *p, rkv_model *m,
                                 int64_t session, bool fresh) {
    const bool hash = fresh || !s->mem;
    XXH3_state_t hs;
    XXH3_64bits_reset(&hs);
    /* from the image (read only) into a free slot in host memory: copied once */
    const bool listed = fresh && s->mem &&
                        copy_host(m, session, p->order, (uint8_t *)s->mem + p->data_offset,
                                  false, NULL, &hs);
    rkv_status st = RKV_OK;
    for (int64_t i = 0; listed && i < m->cfg.n_layers && st == RKV_OK; i++)
        st = written_ok(s, &m->cfg, rkv__model_host_region(m, i, session, RKV_SPAN_WRITTEN, 0), i);
    uint8_t *bounce = s->mem ? NULL : malloc(rkv__model_max_span_bytes(m));
    if (!s->mem && !bounce) return rkv__fail(RKV_ERR_NO_MEMORY, "%s: out of memory", s->w.what);
    for (int64_t k = 0; !listed && k < m->cfg.n_layers * 3 && st == RKV_OK; k++) {
        const rkv__snap_tensor *r = p->order[k];
        const rkv_span_part part = (rkv_span_part)r->kind;
        const size_t bytes = rkv__model_span_bytes(m, r->layer, part);
        uint64_t off = p->data_offset + r->begin;
        for (int64_t h = 0; h < (part == RKV_SPAN_WRITTEN ? 1 : m->cfg.n_kv_heads) && st == RKV_OK;
             h++, off += bytes) {
            const uint8_t *piece = s->mem ? s->mem + off : bounce;
            if (!s->mem && (st = src_read(s, off, bounce, bytes)) != RKV_OK) break;
            if (hash) XXH3_64bits_update(&hs, piece, bytes);
            st = m->ops.span_write(m->ctx, m->layers[r->layer], session, part, h, piece);
            if (st == RKV_ERR_INVALID_ARG && fresh)
                st = rkv__fail(RKV_ERR_FORMAT,
                               "%s: %s: corrupted data: layer.%lld.written breaks the layer's "
                               "invariant (0/1, scratch slots 1, frames written whole)",
                               s->w.what, s->w.name, (long long)r->layer);
            else if (st == RKV_ERR_INVALID_ARG && !s->mem) /* bits verified, then changed */
                st = rkv__fail(RKV_ERR_IO,
                               "%s: %s: the file changed while it was loaded (its written bits "
                               "are no longer valid on the second read); session %lld was reset",
                               s->w.what, s->w.name, (long long)session);
            else if (st != RKV_OK)
                st = rkv__model_backend_fail(st, s->w.what);
        }
    }
    free(bounce);
    const uint64_t got = XXH3_64bits_digest(&hs);
    if (st == RKV_OK && hash && got != p->info.data_xxh3)
        st = fresh ? data_mismatch(s, p->info.data_xxh3, got)
                   : rkv__fail(RKV_ERR_IO,
                               "%s: %s: the file changed while it was loaded (data checksum "
                               "differs on the second read); session %lld was reset",
                               s->w.what, s->w.name, (long long)session);
    if (st == RKV_OK) return RKV_OK;
    char msg[512];
    snprintf(msg, sizeof msg, "%s", rkv_last_error());
    rkv__model_clear_session(m, session);
    return rkv__fail(st, "%s%s", msg,
                     strstr(msg, "was reset") || fresh ? "" : "; the session was reset");
}

/* An image in memory whose header is not the session's template: after a
 * load, the template of the image's own session and request id, kept when
 * the image's header is its (an image of this model's writer: the next
 * one of that session matches). */
static void learn_template(const source *s, const rkv_model *m, struct rkv__snap_slot *k,
                           const rkv__snap_header *p) {
    if (!k || p->info.source_session < 0 || slot_has(k, p->info.source_session, p->info.request_id))
        return;
    rkv__snap_template t;
    rkv__snap_header q;
    if (rkv__snap_template_build(&m->cfg, p->info.source_session, p->info.request_id,
                                 s->w.what, &t) != RKV_OK)
        return;
    const bool kept = rkv__snap_template_match(&t, s->mem, s->mem + 8, p->info.header_bytes,
                                               s->size, &q);
    rkv__snap_template_free(kept ? &k->t : &t); /* the one it replaces, or the one refused */
    if (kept) k->t = t;
}

/* Load (admit NULL: into *session, the data verified first; an image in
 * memory through the session's header template) or page-in
 * (rkv__snapshot_page_in: admit chooses *session, the data is copied and
 * checked in one pass, *info receives the header) of the image mem[bytes]
 * or the file at path. */
static rkv_status load_source(rkv_model *model, int64_t *session, const char *what,
                              const char *path, const void *mem, size_t bytes,
                              rkv__page_in_admit admit, void *arg, rkv_snapshot_info *info) {
    source src, *s = &src;
    rkv_status st = src_open(s, what, path, mem, bytes);
    if (st != RKV_OK) return st;
    rkv__snap_header p;
    /* a load from memory: the session's header template, when the slot is
     * free (it is held until the template's borrowed table is done with) */
    struct rkv__snap_slot *k = s->mem && !admit ? slot_take(model, *session) : NULL;
    if ((st = read_header(s, k && k->t.text ? &k->t : NULL, &p)) == RKV_OK) {
        if ((st = rkv__snap_geometry_check(what, s->w.name, "snapshot", &p.info.config,
                                             &model->cfg)) == RKV_OK &&
            (st = admit ? admit(arg, &p.info, session) : verify_data(s, &p)) == RKV_OK &&
            (st = install_pieces(s, &p, model, *session, admit != NULL)) == RKV_OK &&
            !admit)
            rkv__model_set_clock(model, *session, p.info.last_committed);
        if (st == RKV_OK && admit) *info = p.info;
        if (st == RKV_OK && !p.borrowed) learn_template(s, model, k, &p);
        rkv__snap_header_free(&p);
    }
    slot_give(k);
    src_close(s);
    return st;
}

rkv_status rkv__snapshot_page_in(rkv_model *m, const char *what, const void *buf, size_t bytes,
                                 const char *path, rkv__page_in_admit admit, void *arg,
                                 rkv_snapshot_info *info, int64_t *slot) {
    return load_source(m, slot, what, path, path ? NULL : buf ? buf : "", bytes, admit, arg, info);
}

rkv_status rkv_model_load_session(rkv_model *model, int64_t session, const char *path) {
    static const char *what = "rkv_model_load_session";
    rkv_status st = rkv__model_check_between_frames(model, what, session);
    return st != RKV_OK ? st : load_source(model, &session, what, path, NULL, 0, NULL, NULL, NULL);
}

rkv_status rkv_model_restore(rkv_model *model, int64_t session, const void *buf, size_t bytes) {
    static const char what[] = "rkv_model_restore";
    rkv_status st = rkv__model_check_between_frames(model, what, session);
    if (st != RKV_OK) return st;
    if (!buf && bytes) return rkv__fail(RKV_ERR_NULL, "%s: buf is NULL", what);
    const rkv__buf in = {buf, bytes, "buf"};
    if ((st = rkv__model_check_bufs(model, what, NULL, 0, &in, 1, true)) != RKV_OK) return st;
    return load_source(model, &session, what, NULL, buf ? buf : "", bytes, NULL, NULL, NULL);
}

/* ------------------------------------------------------------------------ */
/* Save                                                                      */
/* ------------------------------------------------------------------------ */

/* Where the bytes go: a file being saved or a memory buffer. */
typedef struct sink {
    const char *what;
    rkv__atomic_file *f;
    uint8_t *mem;
    uint64_t off;
} sink;

static rkv_status sink_write(sink *k, const void *p, size_t n) {
    if (!k->mem) return rkv__atomic_write(k->f, p, n);
    memcpy(k->mem + k->off, p, n);
    k->off += n;
    return RKV_OK;
}

/* Writes `session`'s regions in order (the tensors layer.i.k, .v,
 * .written of each layer), hashing them into hs: a region in host memory
 * straight from the storage, else read through the model's backend into a
 * memory sink (hashed while it is in cache) or the bounce buffer. */
static rkv_status write_regions(sink *k, const rkv_model *m, int64_t session, XXH3_state_t *hs) {
    uint8_t *bounce = k->mem ? NULL : malloc(rkv__model_max_span_bytes(m));
    if (!k->mem && !bounce) return rkv__fail(RKV_ERR_NO_MEMORY, "%s: out of memory", k->what);
    rkv_status st = RKV_OK;
    for (size_t r = 0; r < rkv_model_session_region_count(m) && st == RKV_OK; r++) {
        int64_t i, h;
        rkv_span_part part;
        rkv__model_region_at(m, r, &i, &part, &h);
        const size_t bytes = rkv__model_span_bytes(m, i, part);
        const uint8_t *region = rkv__model_host_region(m, i, session, part, h);
        uint8_t *piece = k->mem ? k->mem + k->off : bounce;
        if (!region &&
            (st = m->ops.span_read(m->ctx, m->layers[i], session, part, h, piece)) != RKV_OK) {
            st = rkv__model_backend_fail(st, k->what);
            break;
        }
        XXH3_64bits_update(hs, region ? region : piece, bytes);
        if (region || !k->mem) st = sink_write(k, region ? region : piece, bytes);
        else k->off += bytes;
    }
    free(bounce);
    return st;
}

/* Writes the whole image: length, header (checksums zero), data (hashed),
 * then the header again with both checksums filled in (*data_xxh3: the
 * data checksum, when not NULL). pieces: rkv_model_session_region_count
 * entries for the copy's list, or NULL (allocated here). */
static rkv_status write_image(const rkv_model *m, int64_t session, rkv__snap_text *hd, sink *k,
                              uint64_t *data_xxh3, rkv__piece *pieces) {
    rkv_status st;
    if ((st = sink_write(k, hd->first8, 8)) != RKV_OK ||
        (st = sink_write(k, hd->text, hd->len)) != RKV_OK)
        return st;
    XXH3_state_t hs;
    XXH3_64bits_reset(&hs);
    if (k->mem && copy_host(m, session, NULL, k->mem + k->off, true, pieces, &hs))
        k->off += hd->data_bytes; /* memory to memory: copied once */
    else if ((st = write_regions(k, m, session, &hs)) != RKV_OK)
        return st;
    const uint64_t data = XXH3_64bits_digest(&hs);
    rkv__snap_header_seal(hd, data);
    if (data_xxh3) *data_xxh3 = data;
    k->off = 8; /* the header in place again, now with both checksums */
    if (!k->mem) k->f->off = 8;
    if (!k->mem && lseek(k->f->fd, 8, SEEK_SET) < 0) {
        rkv__path_shown e;
        return rkv__fail(RKV_ERR_IO, "%s: writing the header of %s failed: %s", k->what,
                         RKV__SHOW_PATH(e, k->f->tmp), strerror(errno));
    }
    return sink_write(k, hd->text, hd->len);
}

rkv_status rkv__snapshot_save_mem(const rkv_model *model, int64_t session, const char *what,
                                  void *buf, size_t buf_bytes, size_t header_len,
                                  size_t *file_bytes, uint64_t *data_xxh3) {
    rkv_status st = rkv__model_check_between_frames(model, what, session);
    if (st != RKV_OK) return st;
    if (!file_bytes) return rkv__fail(RKV_ERR_NULL, "%s: file_bytes is NULL", what);
    const rkv__session_state *ss = &model->sessions[session];
    rkv__snap_text hd;
    if ((st = rkv__snap_header_build(&model->cfg, session, ss->request_id, ss->last_committed, NULL,
                                     header_len, what, &hd)) != RKV_OK)
        return st;
    const uint64_t total = 8 + hd.len + hd.data_bytes;
    if (total > SIZE_MAX)
        st = rkv__fail(RKV_ERR_OVERFLOW, "%s: the image takes %llu bytes", what,
                       (unsigned long long)total);
    else if (buf && buf_bytes < total)
        st = rkv__fail(RKV_ERR_INVALID_ARG, "%s: buffer has %zu bytes; the image takes %llu", what,
                       buf_bytes, (unsigned long long)total);
    else {
        /* file_bytes is written by a size query (buf NULL) too */
        const rkv__buf out[] = {{file_bytes, sizeof *file_bytes, "file_bytes"},
                                {buf, (size_t)total, "buf"}};
        st = rkv__model_check_bufs(model, what, out, buf ? 2 : 1, NULL, 0, false);
        if (st == RKV_OK && buf) {
            sink k = {what, NULL, buf, 0};
            st = write_image(model, session, &hd, &k, data_xxh3, NULL);
        }
    }
    free(hd.text);
    if (st == RKV_OK) *file_bytes = (size_t)total;
    return st;
}

rkv_status rkv_model_save_session_mem(const rkv_model *model, int64_t session, void *buf,
                                      size_t buf_bytes, size_t *file_bytes) {
    return rkv__snapshot_save_mem(model, session, "rkv_model_save_session_mem", buf, buf_bytes, 0,
                                  file_bytes, NULL);
}

/* ---- in-memory images: the same image, one size per model ---------------- */

/* The longest header of the model's images (*header_len) and the whole
 * image's bytes; 0 when the size does not fit size_t (or for NULL). The
 * longest header is worked out once per model (the config never changes;
 * two readers at once may both work it out, to the same value). */
static size_t snapshot_bytes(const rkv_model *m, const char *what, size_t *header_len) {
    if (!m) return 0;
    size_t len = atomic_load(&((rkv_model *)m)->snap_header_len);
    if (!len) {
        if (rkv__snap_header_longest(&m->cfg, what, &len) != RKV_OK) return 0;
        atomic_store(&((rkv_model *)m)->snap_header_len, len);
    }
    *header_len = len;
    const uint64_t total = 8 + (uint64_t)len + rkv__model_session_data_bytes(m);
    return total <= SIZE_MAX ? (size_t)total : 0;
}

size_t rkv_model_snapshot_bytes(const rkv_model *model) {
    size_t header_len = 0;
    return snapshot_bytes(model, "rkv_model_snapshot_bytes", &header_len);
}

/* rkv_model_snapshot through the session's header template (no allocation
 * once the session's first image has built it): false, with nothing
 * written, when the template or its buffers cannot be had (the caller takes
 * the allocating path). */
static bool snapshot_templated(const rkv_model *m, const char *what, int64_t session,
                               struct rkv__snap_slot *k, void *buf, size_t header_len,
                               rkv_status *st) {
    const rkv__session_state *ss = &m->sessions[session];
    if (!slot_has(k, session, ss->request_id)) { /* built for the first image of a request */
        rkv__snap_template_free(&k->t); /* a failure: the caller's allocating path says why */
        if (rkv__snap_template_build(&m->cfg, session, ss->request_id, what, &k->t) != RKV_OK)
            return false;
    }
    if (!k->out && !(k->out = malloc(header_len))) return false;
    const size_t regions = rkv_model_session_region_count(m);
    if (!k->pieces && !(k->pieces = malloc(regions * sizeof *k->pieces))) return false;
    rkv__snap_text hd;
    rkv__snap_template_emit(&k->t, ss->last_committed, k->out, header_len, &hd);
    const rkv__buf out = {buf, 8 + header_len + (size_t)hd.data_bytes, "buf"};
    if ((*st = rkv__model_check_bufs(m, what, &out, 1, NULL, 0, false)) != RKV_OK) return true;
    sink snk = {what, NULL, buf, 0};
    *st = write_image(m, session, &hd, &snk, NULL, k->pieces);
    return true;
}

rkv_status rkv_model_snapshot(const rkv_model *model, int64_t session, void *buf,
                              size_t buf_bytes) {
    static const char what[] = "rkv_model_snapshot";
    rkv_status st = rkv__model_check_between_frames(model, what, session);
    if (st != RKV_OK) return st;
    if (!buf) return rkv__fail(RKV_ERR_NULL, "%s: buf is NULL", what);
    size_t header_len = 0, n = 0;
    const size_t need = snapshot_bytes(model, what, &header_len);
    if (!need) return rkv__fail(RKV_ERR_OVERFLOW, "%s: the image does not fit size_t", what);
    if (buf_bytes < need)
        return rkv__fail(RKV_ERR_INVALID_ARG, "%s: buffer has %zu bytes; need %zu", what,
                         buf_bytes, need);
    struct rkv__snap_slot *k = slot_take(model, session);
    const bool done = k && snapshot_templated(model, what, session, k, buf, header_len, &st);
    slot_give(k);
    if (done) return st;
    return rkv__snapshot_save_mem(model, session, what, buf, buf_bytes, header_len, &n, NULL);
}

rkv_status rkv_model_save_session(const rkv_model *model, int64_t session, const char *path) {
    return rkv__snapshot_save_file(model, session, "rkv_model_save_session", path, NULL);
}

rkv_status rkv__snapshot_save_file(const rkv_model *model, int64_t session, const char *what,
                                   const char *path, uint64_t *data_xxh3) {
    rkv_status st = rkv__model_check_between_frames(model, what, session);
    if (st != RKV_OK) return st;
    if (!path) return rkv__fail(RKV_ERR_NULL, "%s: path is NULL", what);
    if (!*path) return rkv__fail(RKV_ERR_INVALID_ARG, "%s: path is empty", what);
    rkv__atomic_file f;
    if ((st = rkv__atomic_begin(&f, what, path)) != RKV_OK) return st;
    const rkv__session_state *ss = &model->sessions[session];
    rkv__snap_text hd = {0};
    if ((st = rkv__snap_header_build(&model->cfg, session, ss->request_id, ss->last_committed, NULL,
                                     0, what, &hd)) == RKV_OK) {
        sink k = {what, &f, NULL, 0};
        st = write_image(model, session, &hd, &k, data_xxh3, NULL);
    }
    if (st == RKV_OK) st = rkv__atomic_commit(&f);
    else rkv__atomic_abort(&f);
    free(hd.text);
    return st;
}

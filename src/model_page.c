/* Offload and page-in (ringkv.h, "Sessions that leave"; docs/migration.md):
 * a held session's state goes out as a snapshot image (snapshot_file.c
 * writes it), its slot is freed and its request id stays reserved in the
 * model's offload table (model_offload.c) with the image's clock and data
 * checksum; the image comes back into any free slot, checked and copied in
 * one pass (admit says which images). Apart from the table because it
 * needs the snapshot-file code: a build without Jansson and xxHash leaves
 * this file out. */
#include <stdio.h>
#include <string.h>

#include "model_internal.h"

/* What offload checks before it writes anything; room: that the table has room for the image. */
static rkv_status check_offload(const rkv_model *m, const char *what, int64_t session, bool room) {
    rkv_status st = rkv__model_check_between_frames(m, what, session);
    if (st != RKV_OK || !room) return st;
    if (m->offload_used == m->offload_cap)
        return rkv__fail(RKV_ERR_FULL,
                         "%s: the offload table is full (%lld paged-out sessions, "
                         "config.max_offloaded); page one in (rkv_model_page_in) or drop one "
                         "(rkv_model_offload_discard) first, or create the model with a larger "
                         "max_offloaded (at most %lld)",
                         what, (long long)m->offload_cap, (long long)RKV_MAX_OFFLOADED);
    return RKV_OK;
}

/* The image is out: the slot is released, the id reserved. */
static rkv_status finish_offload(rkv_model *m, const char *what, int64_t session,
                                 uint64_t data_xxh3) {
    rkv__session_state *ss = &m->sessions[session];
    rkv__offloaded *e = &m->offloaded[m->offload_used++];
    memcpy(e->request_id, ss->request_id, RKV_MAX_REQUEST_ID);
    e->last_committed = ss->last_committed;
    e->data_xxh3 = data_xxh3;
    rkv_status st = rkv__model_clear_session(m, session);
    ss->held = false;
    memset(ss->request_id, 0, RKV_MAX_REQUEST_ID);
    return st == RKV_OK ? RKV_OK : rkv__model_backend_fail(st, what);
}

rkv_status rkv_model_offload(rkv_model *model, int64_t session, void *buf, size_t buf_bytes,
                             size_t *image_bytes) {
    static const char what[] = "rkv_model_offload";
    if (!image_bytes) return rkv__fail(RKV_ERR_NULL, "%s: image_bytes is NULL", what);
    rkv_status st = check_offload(model, what, session, buf != NULL); /* NULL: a size query */
    const rkv__buf out[] = {{buf, buf_bytes, "buf"},
                            {image_bytes, sizeof *image_bytes, "image_bytes"}};
    if (st == RKV_OK) st = rkv__model_check_bufs(model, what, out, 2, NULL, 0, false);
    if (st != RKV_OK) return st;
    uint64_t data_xxh3 = 0; /* *image_bytes is written on success only */
    st = rkv__snapshot_save_mem(model, session, what, buf, buf_bytes, 0, image_bytes, &data_xxh3);
    if (st != RKV_OK) return st;
    return buf ? finish_offload(model, what, session, data_xxh3) : RKV_OK;
}

rkv_status rkv_model_offload_file(rkv_model *model, int64_t session, const char *path) {
    static const char what[] = "rkv_model_offload_file";
    rkv_status st = check_offload(model, what, session, true);
    if (st != RKV_OK) return st;
    uint64_t data_xxh3 = 0;
    if ((st = rkv__snapshot_save_file(model, session, what, path, &data_xxh3)) != RKV_OK)
        return st;
    return finish_offload(model, what, session, data_xxh3);
}

/* ---- page-in ---------------------------------------------------------------- */

typedef struct admit_arg {
    const rkv_model *m;
    const char *what;
    int64_t entry; /* the reservation found */
} admit_arg;

/* After the image's header and geometry: its request id must be paged out
 * of this model, the image must be the state offloaded (its clock and its
 * data checksum, which the copy then verifies: the rest of the header is
 * information, and a tool may have added keys to it, as ringkv.ray adds
 * the session's incarnation), and a slot must be free. */
static rkv_status admit(void *varg, const rkv_snapshot_info *info, int64_t *slot) {
    admit_arg *a = varg;
    const rkv_model *m = a->m;
    const int64_t i = rkv__model_offloaded_find(m, info->request_id);
    if (i < 0) {
        const int64_t held = rkv__model_find(m, info->request_id, false);
        if (held >= 0)
            return rkv__fail(RKV_ERR_NOT_FOUND,
                             "%s: the image's request '%s' is not paged out of this model: it is "
                             "held by session %lld",
                             a->what, info->request_id, (long long)held);
        return rkv__fail(RKV_ERR_NOT_FOUND,
                         "%s: the image's request '%s' is not paged out of this model (%lld "
                         "paged-out sessions; an image of another model loads with "
                         "rkv_model_restore into a claimed session)",
                         a->what, info->request_id, (long long)m->offload_used);
    }
    const rkv__offloaded *e = &m->offloaded[i];
    if (e->data_xxh3 != info->data_xxh3 || e->last_committed != info->last_committed)
        return rkv__fail(RKV_ERR_STATE,
                         "%s: the image of request '%s' is not the one offloaded (data_xxh3 "
                         "%016llx, clock %lld; the offloaded image has %016llx, clock %lld): an "
                         "older image of the same request, or one written elsewhere",
                         a->what, info->request_id, (unsigned long long)info->data_xxh3,
                         (long long)info->last_committed, (unsigned long long)e->data_xxh3,
                         (long long)e->last_committed);
    const int64_t s = rkv__model_free_slot(m);
    if (s < 0)
        return rkv__fail(RKV_ERR_FULL,
                         "%s: all %lld sessions are held or reserved for an import; cannot page "
                         "request '%s' in (release or offload a session first)",
                         a->what, (long long)m->cfg.num_sessions, info->request_id);
    a->entry = i;
    *slot = s;
    return RKV_OK;
}

static rkv_status page_in(rkv_model *m, const char *what, const void *buf, size_t bytes,
                          const char *path, int64_t *session) {
    if (!m) return rkv__fail(RKV_ERR_NULL, "%s: model is NULL", what);
    if (!session) return rkv__fail(RKV_ERR_NULL, "%s: session is NULL", what);
    const rkv__buf out = {session, sizeof *session, "session"}, in = {buf, bytes, "buf"};
    admit_arg a = {m, what, -1};
    rkv_snapshot_info info;
    int64_t s = -1;
    rkv_status st = rkv__model_check_bufs(m, what, &out, 1, &in, 1, true);
    if (st != RKV_OK ||
        (st = rkv__snapshot_page_in(m, what, buf, bytes, path, admit, &a, &info, &s)) != RKV_OK)
        return st;
    rkv__session_state *ss = &m->sessions[s];
    ss->held = true;
    memcpy(ss->request_id, info.request_id, RKV_MAX_REQUEST_ID);
    rkv__model_set_clock(m, s, info.last_committed);
    rkv__model_offloaded_remove(m, a.entry);
    *session = s;
    return RKV_OK;
}

rkv_status rkv_model_page_in(rkv_model *model, const void *buf, size_t bytes, int64_t *session) {
    static const char what[] = "rkv_model_page_in";
    if (!buf && bytes) return rkv__fail(RKV_ERR_NULL, "%s: buf is NULL", what);
    return page_in(model, what, buf, bytes, NULL, session);
}

rkv_status rkv_model_page_in_file(rkv_model *model, const char *path, int64_t *session) {
    static const char what[] = "rkv_model_page_in_file";
    if (!path) return rkv__fail(RKV_ERR_NULL, "%s: path is NULL", what);
    return page_in(model, what, NULL, 0, path, session);
}


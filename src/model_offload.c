/* Offload and page-in (ringkv.h, "Sessions that leave"; docs/migration.md):
 * a held session's state goes out as a snapshot image (snapshot_file.c
 * writes it), its slot is freed and its request id stays reserved in the
 * model's offload table with the image's clock and header checksum; the
 * image comes back into any free slot, checked and copied in one pass.
 * Host memory for images comes from the backend (pinned on CUDA). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model_internal.h"

int64_t rkv__model_offloaded_find(const rkv_model *m, const char *id) {
    for (int64_t i = 0; i < m->offload_used; i++)
        if (!strcmp(m->offloaded[i].request_id, id)) return i;
    return -1;
}

int64_t rkv_model_offload_capacity(const rkv_model *model) {
    return model ? model->offload_cap : 0;
}

int64_t rkv_model_offloaded_count(const rkv_model *model) {
    return model ? model->offload_used : 0;
}

/* Entry i leaves the table (the last one takes its place). */
static void table_remove(rkv_model *m, int64_t i) {
    m->offloaded[i] = m->offloaded[m->offload_used - 1];
    memset(&m->offloaded[m->offload_used - 1], 0, sizeof m->offloaded[0]);
    m->offload_used--;
}

/* What offload checks before it writes anything. */
static rkv_status check_offload(const rkv_model *m, const char *what, int64_t session) {
    rkv_status st = rkv__model_check_between_frames(m, what, session);
    if (st != RKV_OK) return st;
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
                                 uint64_t header_xxh3) {
    rkv__session_state *ss = &m->sessions[session];
    rkv__offloaded *e = &m->offloaded[m->offload_used++];
    memcpy(e->request_id, ss->request_id, RKV_MAX_REQUEST_ID);
    e->last_committed = ss->last_committed;
    e->header_xxh3 = header_xxh3;
    rkv_status st = rkv__model_clear_session(m, session);
    ss->held = false;
    memset(ss->request_id, 0, RKV_MAX_REQUEST_ID);
    return st == RKV_OK ? RKV_OK : rkv__model_backend_fail(st, what);
}

rkv_status rkv_model_offload(rkv_model *model, int64_t session, void *buf, size_t buf_bytes,
                             size_t *image_bytes) {
    static const char what[] = "rkv_model_offload";
    if (!image_bytes) return rkv__fail(RKV_ERR_NULL, "%s: image_bytes is NULL", what);
    rkv_status st = buf ? check_offload(model, what, session)
                        : rkv__model_check_between_frames(model, what, session);
    if (st != RKV_OK) return st;
    uint64_t header_xxh3 = 0;
    size_t n = 0;
    st = rkv__snapshot_save_mem(model, session, what, buf, buf_bytes, &n, &header_xxh3);
    if (st != RKV_OK) return st;
    *image_bytes = n;
    return buf ? finish_offload(model, what, session, header_xxh3) : RKV_OK;
}

rkv_status rkv_model_offload_file(rkv_model *model, int64_t session, const char *path) {
    static const char what[] = "rkv_model_offload_file";
    rkv_status st = check_offload(model, what, session);
    if (st != RKV_OK) return st;
    uint64_t header_xxh3 = 0;
    if ((st = rkv__snapshot_save_file(model, session, what, path, &header_xxh3)) != RKV_OK)
        return st;
    return finish_offload(model, what, session, header_xxh3);
}

/* ---- page-in ---------------------------------------------------------------- */

typedef struct admit_arg {
    const rkv_model *m;
    const char *what;
    int64_t entry; /* the reservation found */
} admit_arg;

/* After the image's header and geometry: its request id must be paged out
 * of this model with this very image, and a slot must be free. */
static rkv_status admit(void *varg, const rkv_snapshot_info *info, int64_t *slot) {
    admit_arg *a = varg;
    const rkv_model *m = a->m;
    const int64_t i = rkv__model_offloaded_find(m, info->request_id);
    if (i < 0) {
        const int64_t held = rkv__model_find_held(m, info->request_id);
        if (held >= 0)
            return rkv__fail(RKV_ERR_NOT_FOUND,
                             "%s: the image's request '%s' is not paged out of this model: it is "
                             "held by session %lld",
                             a->what, info->request_id, (long long)held);
        return rkv__fail(RKV_ERR_NOT_FOUND,
                         "%s: the image's request '%s' is not paged out of this model (%lld "
                         "paged-out sessions; an image of another model loads with "
                         "rkv_model_load_session_mem into a claimed session)",
                         a->what, info->request_id, (long long)m->offload_used);
    }
    const rkv__offloaded *e = &m->offloaded[i];
    if (e->header_xxh3 != info->header_xxh3)
        return rkv__fail(RKV_ERR_STATE,
                         "%s: the image of request '%s' is not the one offloaded (header_xxh3 "
                         "%016llx, clock %lld; the offloaded image has %016llx, clock %lld): an "
                         "older image of the same request, or one written elsewhere",
                         a->what, info->request_id, (unsigned long long)info->header_xxh3,
                         (long long)info->last_committed, (unsigned long long)e->header_xxh3,
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
    admit_arg a = {m, what, -1};
    rkv_snapshot_info info;
    int64_t s = -1;
    rkv_status st = rkv__snapshot_page_in(m, what, buf, bytes, path, admit, &a, &info, &s);
    if (st != RKV_OK) return st;
    rkv__session_state *ss = &m->sessions[s];
    ss->held = true;
    memcpy(ss->request_id, info.request_id, RKV_MAX_REQUEST_ID);
    rkv__model_set_clock(m, s, info.last_committed);
    table_remove(m, a.entry);
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

/* ---- the table -------------------------------------------------------------- */

rkv_status rkv_model_offloaded_clock(const rkv_model *model, const char *request_id,
                                     int64_t *last_committed) {
    static const char what[] = "rkv_model_offloaded_clock";
    RKV__REQUIRE(what, model);
    RKV__REQUIRE(what, last_committed);
    rkv_status st = rkv__model_check_request_id(what, request_id);
    if (st != RKV_OK) return st;
    const int64_t i = rkv__model_offloaded_find(model, request_id);
    if (i < 0)
        return rkv__fail(RKV_ERR_NOT_FOUND, "%s: request '%s' is not paged out of this model",
                         what, request_id);
    *last_committed = model->offloaded[i].last_committed;
    return RKV_OK;
}

rkv_status rkv_model_offload_discard(rkv_model *model, const char *request_id) {
    static const char what[] = "rkv_model_offload_discard";
    RKV__REQUIRE(what, model);
    rkv_status st = rkv__model_check_request_id(what, request_id);
    if (st != RKV_OK) return st;
    const int64_t i = rkv__model_offloaded_find(model, request_id);
    if (i < 0)
        return rkv__fail(RKV_ERR_NOT_FOUND, "%s: request '%s' is not paged out of this model",
                         what, request_id);
    table_remove(model, i);
    return RKV_OK;
}

/* ---- host memory for images --------------------------------------------------- */

rkv_status rkv_model_host_alloc(rkv_model *model, size_t bytes, void **ptr) {
    static const char what[] = "rkv_model_host_alloc";
    RKV__REQUIRE(what, model);
    RKV__REQUIRE(what, ptr);
    if (bytes == 0) return rkv__fail(RKV_ERR_INVALID_ARG, "%s: bytes is 0; expected > 0", what);
    if (model->ops.host_alloc) {
        void *p = NULL;
        rkv_status st = model->ops.host_alloc(model->ctx, bytes, &p);
        if (st != RKV_OK) return rkv__model_backend_fail(st, what);
        *ptr = p;
        return RKV_OK;
    }
    const size_t rounded = (bytes + 63) & ~(size_t)63;
    void *p = rounded >= bytes ? aligned_alloc(64, rounded) : NULL;
    if (!p) return rkv__fail(RKV_ERR_NO_MEMORY, "%s: cannot allocate %zu bytes", what, bytes);
    *ptr = p;
    return RKV_OK;
}

void rkv_model_host_free(rkv_model *model, void *ptr) {
    if (!ptr) return;
    if (model && model->ops.host_free) model->ops.host_free(model->ctx, ptr);
    else free(ptr);
}

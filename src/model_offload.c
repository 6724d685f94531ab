/* The offload table (ringkv.h, "Sessions that leave"; docs/migration.md):
 * the request ids of paged-out sessions, with their images' clocks and
 * data checksums, which claim and lookup consult; and host memory for
 * images, from the backend (pinned on CUDA). Offload and page-in
 * themselves, which go through snapshot images, are model_page.c. */
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

void rkv__model_offloaded_remove(rkv_model *m, int64_t i) {
    m->offloaded[i] = m->offloaded[m->offload_used - 1];
    memset(&m->offloaded[m->offload_used - 1], 0, sizeof m->offloaded[0]);
    m->offload_used--;
}

/* ---- the table -------------------------------------------------------------- */

/* The table entry of a paged-out request id: RKV_OK with *i, or the
 * errors of an id argument (NULL, empty, overlong) and RKV_ERR_NOT_FOUND. */
static rkv_status entry_of(const rkv_model *m, const char *what, const char *id, int64_t *i) {
    rkv_status st = rkv__model_check_request_id(what, id);
    if (st != RKV_OK) return st;
    if ((*i = rkv__model_offloaded_find(m, id)) < 0)
        return rkv__fail(RKV_ERR_NOT_FOUND, "%s: request '%s' is not paged out of this model",
                         what, id);
    return RKV_OK;
}

rkv_status rkv_model_offloaded_clock(const rkv_model *model, const char *request_id,
                                     int64_t *last_committed) {
    static const char what[] = "rkv_model_offloaded_clock";
    RKV__REQUIRE(what, model);
    RKV__REQUIRE(what, last_committed);
    int64_t i = -1;
    rkv_status st = entry_of(model, what, request_id, &i);
    if (st == RKV_OK) *last_committed = model->offloaded[i].last_committed;
    return st;
}

rkv_status rkv_model_offload_discard(rkv_model *model, const char *request_id) {
    static const char what[] = "rkv_model_offload_discard";
    RKV__REQUIRE(what, model);
    int64_t i = -1;
    rkv_status st = entry_of(model, what, request_id, &i);
    if (st == RKV_OK) rkv__model_offloaded_remove(model, i);
    return st;
}

/* ---- host memory for images --------------------------------------------------- */

rkv_status rkv_model_host_alloc(rkv_model *model, size_t bytes, void **ptr) {
    static const char what[] = "rkv_model_host_alloc";
    RKV__REQUIRE(what, model);
    RKV__REQUIRE(what, ptr);
    if (bytes == 0) return rkv__fail(RKV_ERR_INVALID_ARG, "%s: bytes is 0; expected > 0", what);
    void *p = NULL;
    const size_t rounded = (bytes + 63) & ~(size_t)63;
    rkv_status st = model->ops.host_alloc ? model->ops.host_alloc(model->ctx, bytes, &p) : RKV_OK;
    if (st != RKV_OK) return rkv__model_backend_fail(st, what);
    if (!model->ops.host_alloc && !(p = rounded >= bytes ? aligned_alloc(64, rounded) : NULL))
        return rkv__fail(RKV_ERR_NO_MEMORY, "%s: cannot allocate %zu bytes", what, bytes);
    *ptr = p;
    return RKV_OK;
}

void rkv_model_host_free(rkv_model *model, void *ptr) {
    if (!ptr) return;
    if (model && model->ops.host_free) model->ops.host_free(model->ctx, ptr);
    else free(ptr);
}

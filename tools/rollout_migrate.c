/* `ringkv rollout --migrate-every N` (issue 13): every N frames, between
 * two frames, every session moves from the model it runs in to a second
 * model of the same geometry and backend through the export / import path
 * of sessions that move (docs/migration.md): the destination reserves a
 * slot from the session's metadata, the regions are copied
 * (rkv_model_transfer_session, the plain copy a transfer engine would do),
 * both digests must agree, the import makes the slot live, the source
 * releases its copy; then the models swap roles. The run's output digest
 * proves nothing changed (ctest rollout_migrate). The second model is made
 * like the first on the same device (tools/rollout.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rollout_migrate.h"

/* One session from src into a reserved slot of dst, made live there, then
 * released at src. */
static int move_one(rkv_model *src, int64_t s, rkv_model *dst, int64_t *got, uint64_t *bytes,
                    uint8_t *meta, size_t mb, char *err, size_t n_err) {
    rkv_status st;
    int64_t d = -1;
    uint64_t ds = 0, dd = 1;
    const char *step = "export_meta";
    if ((st = rkv_model_session_export_meta(src, s, meta, mb)) != RKV_OK) goto fail;
    step = "import_reserve";
    if ((st = rkv_model_import_reserve(dst, meta, mb, &d)) != RKV_OK) goto fail;
    step = "transfer";
    if ((st = rkv_model_transfer_session(src, s, dst, d)) != RKV_OK) goto cancel;
    step = "digest";
    if ((st = rkv_model_session_digest(src, s, &ds)) != RKV_OK ||
        (st = rkv_model_session_digest(dst, d, &dd)) != RKV_OK)
        goto cancel;
    if (ds != dd) {
        snprintf(err, n_err, "migrating session %lld: the copy's digest %016llx differs from "
                             "the source's %016llx", (long long)s, (unsigned long long)dd,
                 (unsigned long long)ds);
        rkv_model_import_cancel(dst, d);
        return 1;
    }
    step = "import";
    if ((st = rkv_model_session_import(dst, d, meta, mb)) != RKV_OK) goto cancel;
    step = "release";
    if ((st = rkv_model_release(src, s)) != RKV_OK) goto fail;
    size_t n = rkv_model_session_region_count(src), count = 0;
    rkv_session_region *rg = malloc(n * sizeof *rg);
    if (rg && rkv_model_session_regions(dst, d, rg, n, &count) == RKV_OK)
        for (size_t i = 0; i < count; i++) *bytes += rg[i].bytes;
    free(rg);
    *got = d;
    return 0;
cancel:
    snprintf(err, n_err, "migrating session %lld (%s): %s", (long long)s, step, rkv_last_error());
    if (d >= 0) rkv_model_import_cancel(dst, d);
    return 1;
fail:
    snprintf(err, n_err, "migrating session %lld (%s): %s", (long long)s, step, rkv_last_error());
    return 1;
}

int rollout_migrate(rkv_model **model, rkv_model **spare, int64_t B, int64_t *sessions,
                    uint64_t *bytes, char *err, size_t n_err) {
    const size_t mb = rkv_model_session_meta_bytes(*model);
    uint8_t *meta = malloc(mb);
    if (!meta) {
        snprintf(err, n_err, "out of memory for the session metadata");
        return 1;
    }
    int rc = 0;
    for (int64_t b = 0; b < B && !rc; b++)
        rc = move_one(*model, sessions[b], *spare, &sessions[b], bytes, meta, mb, err, n_err);
    free(meta);
    if (rc) return 1;
    rkv_model *t = *model;
    *model = *spare;
    *spare = t;
    return 0;
}

/* A model's upsert and attention on storage the caller gives (SEMANTICS 6
 * over a layer that wraps it, rkv_layer_wrap): the model's checks and clock
 * bookkeeping, the caller's buffers. The model's own code runs on the
 * wrapped layer's backend handle (model_frame.c: rkv__model_upsert_on);
 * nothing of the model's own storage is touched or swapped. */
#include "model_internal.h"

/* Checks the model, the layer index and the wrapped layer against that
 * layer's geometry and backend. Messages name `what`, the model call whose
 * checks and messages these calls share. */
static rkv_status check_ring(rkv_model *m, const char *what, int64_t layer, const rkv_layer *ring) {
    if (!m) return rkv__fail(RKV_ERR_NULL, "%s: model is NULL", what);
    if (layer < 0 || layer >= m->cfg.n_layers)
        return rkv__fail(RKV_ERR_RANGE, "%s: layer %lld out of range; expected 0..%lld", what,
                         (long long)layer, (long long)(m->cfg.n_layers - 1));
    if (!ring) return rkv__fail(RKV_ERR_NULL, "%s: ring is NULL", what);
    if (ring->ops_id != m->ops_id)
        return rkv__fail(RKV_ERR_STATE,
                         "%s: the model runs on the %s backend and the ring's layer on the %s "
                         "backend; the storage given must be a layer of the model's backend",
                         what, m->ops.name, ring->ops.name);
    const rkv_geometry layer_g = rkv__model_layer_geometry(m, layer);
    int64_t va, vb;
    const char *field = rkv__geometry_differs(&layer_g, &ring->g, &va, &vb);
    if (field)
        return rkv__fail(RKV_ERR_INVALID_ARG,
                         "%s: the ring's geometry differs from layer %lld's in %s (the ring's "
                         "%lld, the layer's %lld); the storage given must be that layer's (or a "
                         "copy of it)",
                         what, (long long)layer, field, (long long)vb, (long long)va);
    return RKV_OK;
}

rkv_status rkv_model_upsert_ring(rkv_model *model, int64_t layer, const rkv_layer *ring,
                                 int64_t batch, const int64_t *session_idx, const void *kv,
                                 rkv_dtype kv_dtype, int commit) {
    rkv_status st = check_ring(model, "rkv_model_upsert", layer, ring);
    return st == RKV_OK
               ? rkv__model_upsert_on(model, layer, ring, batch, session_idx, kv, kv_dtype, commit)
               : st;
}

rkv_status rkv_model_attend_ring(rkv_model *model, int64_t layer, const rkv_layer *ring,
                                 int64_t batch, const int64_t *session_idx,
                                 const rkv_attention_args *args) {
    rkv_status st = check_ring(model, "rkv_model_attend", layer, ring);
    return st == RKV_OK ? rkv__model_attend_on(model, layer, ring, batch, session_idx, args) : st;
}

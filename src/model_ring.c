/* A model's upsert and attention on storage the caller gives (SEMANTICS 6
 * over rkv_ring_view): the model's checks and clock bookkeeping, the
 * caller's buffers. For a model on the CPU backend, whose layers are
 * rkv_layer, the layer's storage pointers are pointed at the view for the
 * duration of one rkv_model_upsert / rkv_model_attend call (both are
 * writers of the model: nothing else may use the model meanwhile, see
 * docs/thread-safety.md) and restored before returning, so the model code
 * runs unchanged and its own storage is not touched. */
#include "model_internal.h"

/* Checks the model, the layer index and the view against that layer's
 * geometry; the layer struct to run on. Messages name `what`, the model
 * call whose checks and messages these calls share. */
static rkv_status check_ring(rkv_model *m, const char *what, int64_t layer,
                             const rkv_ring_view *ring, struct rkv_layer **out,
                             struct rkv_layer *view) {
    if (!m) return rkv__fail(RKV_ERR_NULL, "%s: model is NULL", what);
    if (layer < 0 || layer >= m->cfg.n_layers)
        return rkv__fail(RKV_ERR_RANGE, "%s: layer %lld out of range; expected 0..%lld", what,
                         (long long)layer, (long long)(m->cfg.n_layers - 1));
    if (m->ops_id != rkv_backend_cpu())
        return rkv__fail(RKV_ERR_STATE,
                         "%s: the model runs on the %s backend; a ring view of host memory is "
                         "for a model on the CPU backend",
                         what, m->ops.name);
    rkv_status st = rkv__view_layer(ring, what, true, view);
    if (st != RKV_OK) return st;
    const rkv_geometry layer_g = rkv__model_layer_geometry(m, layer);
    int64_t va, vb;
    const char *field = rkv__geometry_differs(&layer_g, &ring->g, &va, &vb);
    if (field)
        return rkv__fail(RKV_ERR_INVALID_ARG,
                         "%s: the ring's geometry differs from layer %lld's in %s (the ring's "
                         "%lld, the layer's %lld); the storage given must be that layer's (or a "
                         "copy of it)",
                         what, (long long)layer, field, (long long)vb, (long long)va);
    *out = (struct rkv_layer *)m->layers[layer]; /* the CPU table's layers are rkv_layer */
    return RKV_OK;
}

/* Points layer l at the view's buffers; returns the old pointers in *saved. */
static void swap_storage(struct rkv_layer *l, struct rkv_layer *saved, const struct rkv_layer *view) {
    saved->kv = l->kv;
    saved->written = l->written;
    l->kv = view->kv;
    l->written = view->written;
}

rkv_status rkv_model_upsert_ring(rkv_model *model, int64_t layer, const rkv_ring_view *ring,
                                 int64_t batch, const int64_t *session_idx, const void *kv,
                                 rkv_dtype kv_dtype, int commit) {
    struct rkv_layer *l = NULL, view, saved;
    rkv_status st = check_ring(model, "rkv_model_upsert", layer, ring, &l, &view);
    if (st != RKV_OK) return st;
    swap_storage(l, &saved, &view);
    st = rkv_model_upsert(model, layer, batch, session_idx, kv, kv_dtype, commit);
    swap_storage(l, &view, &saved);
    return st;
}

rkv_status rkv_model_attend_ring(rkv_model *model, int64_t layer, const rkv_ring_view *ring,
                                 int64_t batch, const int64_t *session_idx,
                                 const rkv_attention_args *args) {
    struct rkv_layer *l = NULL, view, saved;
    rkv_status st = check_ring(model, "rkv_model_attend", layer, ring, &l, &view);
    if (st != RKV_OK) return st;
    swap_storage(l, &saved, &view);
    st = rkv_model_attend(model, layer, batch, session_idx, args);
    swap_storage(l, &view, &saved);
    return st;
}

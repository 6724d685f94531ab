/* One layer on any backend (SEMANTICS 2-5): the public rkv_layer_* calls,
 * each checking its arguments once before the table's unchecked operation
 * (src/cpu/backend_cpu.c, src/cuda/layer.cu). */
#include <stdlib.h>

#include "attention_check.h"

void rkv__layer_borrow(struct rkv_layer *l, const rkv_backend_ops *ops,
                       const rkv_backend_ops *ops_id, const rkv_backend_limits *limits, void *ctx,
                       const rkv_geometry *g, void *impl, const rkv_backend_storage *store) {
    *l = (struct rkv_layer){.g = *g, .capacity = rkv_geometry_capacity(g),
                            .total_slots = rkv_geometry_total_slots(g), .ops = *ops,
                            .ops_id = ops_id, .limits = *limits, .ctx = ctx, .impl = impl,
                            .store = *store};
}

/* The byte alignment the backend needs of its per-pass buffers (at least
 * the element size `elem`). */
static size_t align_of(const struct rkv_layer *l, size_t elem) {
    return l->limits.align > elem ? l->limits.align : elem;
}

static rkv_status layer_new(const rkv_backend_ops *ops, void *ctx, const rkv_geometry *g,
                            const rkv_backend_storage *wrap, const char *what, rkv_layer **out) {
    if (!out) return rkv__fail(RKV_ERR_NULL, "%s: out is NULL", what);
    if (!ops) ops = rkv_backend_cpu(), ctx = NULL;
    struct rkv_layer probe; /* ops and limits only: rkv__backend_adopt fills them */
    rkv_status st = rkv__backend_adopt(ops, ctx, what, &probe.ops, &probe.limits);
    if (st != RKV_OK) return st;
    if ((st = rkv_geometry_check(g)) != RKV_OK) return st;
    rkv_backend_storage store = {NULL, NULL, NULL};
    if (wrap) {
        if (!wrap->kv || !wrap->written)
            return rkv__fail(RKV_ERR_NULL, "%s: storage->%s is NULL", what,
                             wrap->kv ? "written" : "kv");
        const size_t a = align_of(&probe, rkv_dtype_size(g->dtype)), w = align_of(&probe, 1);
        if ((uintptr_t)wrap->kv % a || (uintptr_t)wrap->written % w)
            return rkv__fail(RKV_ERR_INVALID_ARG,
                             "%s: storage->%s %p is not %zu-byte aligned (the %s backend's "
                             "alignment, at least the element size of %s)",
                             what, (uintptr_t)wrap->kv % a ? "kv" : "written",
                             (uintptr_t)wrap->kv % a ? wrap->kv : (void *)wrap->written,
                             (uintptr_t)wrap->kv % a ? a : w, probe.ops.name,
                             rkv_dtype_name(g->dtype));
        store = *wrap;
    }
    struct rkv_layer *l = calloc(1, sizeof *l);
    if (!l) return rkv__fail(RKV_ERR_NO_MEMORY, "%s: out of memory", what);
    void *impl = NULL;
    if ((st = probe.ops.layer_create(ctx, g, &store, &impl)) != RKV_OK) {
        free(l);
        return st;
    }
    rkv__layer_borrow(l, &probe.ops, ops, &probe.limits, ctx, g, impl, &store);
    l->owns_impl = true;
    *out = l;
    return RKV_OK;
}

rkv_status rkv_layer_create(const rkv_geometry *g, rkv_layer **out) {
    return layer_new(rkv_backend_cpu(), NULL, g, NULL, "rkv_layer_create", out);
}
rkv_status rkv_layer_create_on(const rkv_backend_ops *ops, void *ctx, const rkv_geometry *g,
                               rkv_layer **out) {
    if (!ops) return rkv__fail(RKV_ERR_NULL, "rkv_layer_create_on: ops is NULL");
    return layer_new(ops, ctx, g, NULL, "rkv_layer_create_on", out);
}
rkv_status rkv_layer_wrap(const rkv_backend_ops *ops, void *ctx, const rkv_geometry *g,
                          const rkv_backend_storage *storage, rkv_layer **out) {
    RKV__REQUIRE("rkv_layer_wrap", storage);
    return layer_new(ops, ctx, g, storage, "rkv_layer_wrap", out);
}

void rkv_layer_destroy(rkv_layer *layer) {
    if (!layer || !layer->owns_impl) return;
    layer->ops.layer_destroy(layer->ctx, layer->impl);
    free(layer);
}

void *rkv_layer_backend_handle(const rkv_layer *layer, const rkv_backend_ops **ops, void **ctx) {
    if (!layer) return NULL;
    if (ops) *ops = layer->ops_id;
    if (ctx) *ctx = layer->ctx;
    return layer->impl;
}

const struct rkv__cpu_layer *rkv__cpu_layer_of(const rkv_layer *layer, const char *what) {
    if (!layer) {
        rkv__fail(RKV_ERR_NULL, "%s: layer is NULL", what);
        return NULL;
    }
    /* the CPU table's layers: made by its layer_create (a table that copies
     * the CPU one and replaces other operations keeps them) */
    if (layer->ops.layer_create != rkv_backend_cpu()->layer_create) {
        rkv__fail(RKV_ERR_INVALID_ARG, "%s: the layer is on the %s backend; this is a call of "
                                       "the CPU backend's (ringkv_cpu.h)",
                  what, layer->ops.name);
        return NULL;
    }
    return layer->impl;
}

/* Getters: NULL in, 0 or NULL out. */
const rkv_geometry *rkv_layer_geometry(const rkv_layer *layer) { return layer ? &layer->g : NULL; }
const void *rkv_layer_kv(const rkv_layer *layer) { return layer ? layer->store.kv : NULL; }
const uint8_t *rkv_layer_written(const rkv_layer *layer) {
    return layer ? layer->store.written : NULL;
}

rkv_status rkv_layer_session_span(const rkv_layer *layer, int64_t session, int64_t *lo,
                                  int64_t *hi) {
    RKV__REQUIRE("rkv_layer_session_span", layer);
    RKV__REQUIRE("rkv_layer_session_span", lo);
    RKV__REQUIRE("rkv_layer_session_span", hi);
    if (session < 0 || session >= layer->g.num_sessions)
        return rkv__fail(RKV_ERR_RANGE, "session_idx %lld out of range for %lld sessions",
                         (long long)session, (long long)layer->g.num_sessions);
    *lo = session * layer->capacity;
    *hi = *lo + layer->capacity;
    return RKV_OK;
}

rkv_status rkv_layer_reset(rkv_layer *layer, int64_t session) {
    int64_t lo, hi;
    rkv_status st = rkv_layer_session_span(layer, session, &lo, &hi);
    return st == RKV_OK ? layer->ops.reset(layer->ctx, layer->impl, session) : st;
}

rkv_status rkv_layer_check(rkv_layer *layer) {
    RKV__REQUIRE("rkv_layer_check", layer);
    if (!layer->ops.check) return RKV_OK;
    int64_t bad = -1;
    return layer->ops.check(layer->ctx, &layer->impl, 1, &bad);
}

/* ---- one session's span, piece by piece (forks, snapshots) ---------------- */

/* The piece's checks, and the host buffer against the layer's storage
 * (where that is host memory). */
static rkv_status span_check(const rkv_layer *l, const char *what, int64_t session,
                             rkv_span_part part, int64_t head, const void *host, bool write) {
    if (!l) return rkv__fail(RKV_ERR_NULL, "%s: layer is NULL", what);
    size_t offset = 0, bytes = 0;
    bool in_written = false;
    rkv_status st = rkv__span_piece(&l->g, what, session, part, head, &offset, &bytes, &in_written);
    if (st != RKV_OK) return st;
    if (!host) return rkv__fail(RKV_ERR_NULL, "%s: %s is NULL", what, write ? "src" : "dst");
    if (!l->limits.host_memory) return RKV_OK;
    const uint8_t *at = (in_written ? (const uint8_t *)l->store.written
                                    : (const uint8_t *)l->store.kv) + offset;
    if (write) {
        const rkv__buf out = {at, bytes, "the span piece written"}, in = {host, bytes, "src"};
        return rkv__check_no_overlap(what, &out, 1, &in, 1);
    }
    const rkv__buf out = {host, bytes, "dst"};
    const rkv__buf in[] = {{l->store.kv, rkv_geometry_memory_bytes(&l->g), "the layer's K/V"},
                           {l->store.written, (size_t)l->total_slots, "the layer's written bits"}};
    return rkv__check_no_overlap(what, &out, 1, in, 2);
}

rkv_status rkv_layer_read_span(const rkv_layer *layer, int64_t session, rkv_span_part part,
                               int64_t head, void *dst) {
    static const char what[] = "rkv_layer_read_span";
    rkv_status st = span_check(layer, what, session, part, head, dst, false);
    return st == RKV_OK ? layer->ops.span_read(layer->ctx, layer->impl, session, part, head, dst)
                        : st;
}

rkv_status rkv_layer_write_span(rkv_layer *layer, int64_t session, rkv_span_part part,
                                int64_t head, const void *src) {
    static const char what[] = "rkv_layer_write_span";
    rkv_status st = span_check(layer, what, session, part, head, src, true);
    if (st != RKV_OK) return st;
    if (part == RKV_SPAN_WRITTEN) {
        const uint8_t *w = src;
        const int64_t bad = rkv__written_span_check(&layer->g, w);
        char why[160];
        if (bad >= 0)
            return rkv__fail(RKV_ERR_INVALID_ARG, "%s: %s", what,
                             rkv__written_bad_what(&layer->g, w, bad, why, sizeof why));
    }
    return layer->ops.span_write(layer->ctx, layer->impl, session, part, head, src);
}

rkv_status rkv_layer_copy_span(rkv_layer *layer, int64_t src_session, int64_t dst_session) {
    static const char what[] = "rkv_layer_copy_span";
    RKV__REQUIRE(what, layer);
    const int64_t S = layer->g.num_sessions;
    if (src_session < 0 || src_session >= S || dst_session < 0 || dst_session >= S)
        return rkv__fail(RKV_ERR_RANGE, "%s: session %lld out of range; expected 0..%lld", what,
                         (long long)(src_session < 0 || src_session >= S ? src_session
                                                                         : dst_session),
                         (long long)(S - 1));
    if (src_session == dst_session) return RKV_OK;
    return layer->ops.span_copy(layer->ctx, layer->impl, src_session, dst_session);
}

/* ---- upsert, visibility row, attention (SEM 3-5) --------------------------- */

/* Rows in host memory (the CPU): sessions before clocks, since a session
 * out of range is the reference's IndexError also when a clock is negative
 * (which it lets through); B > S rows hold one out of range or a repeat. */
static rkv_status host_rows(const char *what, const int64_t *session_idx,
                            const int64_t *frame_pos, int64_t batch, int64_t S) {
    rkv_status st = rkv__check_sessions(what, session_idx, batch, S);
    for (int64_t b = 0; st == RKV_OK && b < batch; b++)
        if (frame_pos[b] < 0)
            st = rkv__fail(RKV_ERR_INVALID_ARG, "%s: frame_pos[%lld] = %lld; expected >= 0", what,
                           (long long)b, (long long)frame_pos[b]);
    return st;
}

rkv_status rkv__upsert_overlap(const struct rkv_layer *l, const char *what, const void *kv,
                               int64_t batch, const int64_t *frame_pos,
                               const int64_t *session_idx, const uint8_t *visible) {
    const size_t B = (size_t)batch, T = (size_t)l->g.tokens_per_frame, N = (size_t)l->total_slots;
    const rkv__buf out[] = {
        {l->store.kv, rkv_geometry_memory_bytes(&l->g), "the ring's K/V storage"},
        {l->store.written, N, "the ring's written bits"},
        {visible, visible ? N : 0, "visible"},
    };
    const rkv__buf in[] = {
        {kv, 2 * (size_t)l->g.n_kv_heads * B * T * (size_t)l->g.d_head * rkv_dtype_size(l->g.dtype),
         "kv"},
        {frame_pos, B * sizeof *frame_pos, "frame_pos"},
        {session_idx, B * sizeof *session_idx, "session_idx"},
    };
    return rkv__check_no_overlap(what, out, 3, in, 3);
}

rkv_status rkv_layer_upsert(rkv_layer *layer, const void *kv, rkv_dtype kv_dtype, int64_t batch,
                            const int64_t *frame_pos, const int64_t *session_idx, int commit,
                            uint8_t *visible) {
    static const char what[] = "rkv_layer_upsert";
    if (!layer) return rkv__fail(RKV_ERR_NULL, "%s: layer is NULL", what);
    const int64_t S = layer->g.num_sessions, cap = layer->limits.max_batch;
    const bool host = layer->limits.host_memory != 0;
    /* Validate everything before touching state; the batch first (an empty
     * batch's arrays may well be NULL: say what is wrong, not that). */
    if (batch < 1 || (!host && batch > S) || (cap > 0 && batch > cap))
        return rkv__fail(RKV_ERR_INVALID_ARG,
                         "%s: batch B = %lld; expected 1..%lld (one frame per distinct session%s)",
                         what, (long long)batch, (long long)(cap > 0 && cap < S ? cap : S),
                         cap > 0 && cap < S ? ", the backend's largest batch" : "");
    if (!kv) return rkv__fail(RKV_ERR_NULL, "%s: kv is NULL", what);
    if (!frame_pos) return rkv__fail(RKV_ERR_NULL, "%s: frame_pos is NULL", what);
    rkv_status dst = rkv__check_kv_dtype(what, kv_dtype, layer->g.dtype);
    if (dst != RKV_OK) return dst;
    if (visible && batch != 1)
        return rkv__fail(RKV_ERR_INVALID_ARG,
                         "%s: the visibility row only supports B == 1; got B = %lld (the engine "
                         "path passes visible = NULL)",
                         what, (long long)batch);
    const size_t a = align_of(layer, rkv_dtype_size(layer->g.dtype));
    if (rkv__misaligned(kv, a) || rkv__misaligned(visible, align_of(layer, 1)))
        return rkv__fail(RKV_ERR_INVALID_ARG, "%s: %s %p is not %zu-byte aligned", what,
                         rkv__misaligned(kv, a) ? "kv" : "visible",
                         rkv__misaligned(kv, a) ? kv : (void *)visible,
                         rkv__misaligned(kv, a) ? a : align_of(layer, 1));
    rkv_status st;
    if (!host) { /* device values: the kernels check them (rkv_layer_check) */
        if (!session_idx) return rkv__fail(RKV_ERR_NULL, "%s: session_idx is NULL", what);
        if (rkv__misaligned(frame_pos, 8) || rkv__misaligned(session_idx, 8))
            return rkv__fail(RKV_ERR_INVALID_ARG,
                             "%s: frame_pos / session_idx must be 8-byte aligned int64 arrays",
                             what);
    } else if ((st = host_rows(what, session_idx, frame_pos, batch, S)) != RKV_OK) {
        return st;
    }
    if ((st = rkv__upsert_overlap(layer, what, kv, batch, frame_pos, session_idx, visible)) !=
        RKV_OK)
        return st;
    return layer->ops.upsert(layer->ctx, layer->impl, kv, batch, frame_pos, session_idx, commit,
                             visible);
}

rkv_status rkv_layer_visible_row(const rkv_layer *layer, const int64_t *session_idx,
                                 const int64_t *frame_pos, uint8_t *row) {
    static const char what[] = "rkv_layer_visible_row";
    RKV__REQUIRE(what, layer);
    RKV__REQUIRE(what, session_idx);
    RKV__REQUIRE(what, frame_pos);
    RKV__REQUIRE(what, row);
    if (!layer->ops.visible_row)
        return rkv__fail(RKV_ERR_STATE, "%s: the %s backend has no visibility row", what,
                         layer->ops.name);
    rkv_status st;
    if (layer->limits.host_memory) {
        /* the upsert's checks and messages for its row 0: the torch route of
         * an upsert (this row, then the upsert) reports a bad row as the
         * one-call route does */
        if ((st = host_rows(what, session_idx, frame_pos, 1, layer->g.num_sessions)) != RKV_OK)
            return st;
    } else if (rkv__misaligned(row, align_of(layer, 1)) || rkv__misaligned(session_idx, 8) ||
               rkv__misaligned(frame_pos, 8)) {
        return rkv__fail(RKV_ERR_INVALID_ARG,
                         "%s: row must be %zu-byte aligned and session_idx / frame_pos 8-byte "
                         "aligned",
                         what, align_of(layer, 1));
    }
    const rkv__buf out = {row, (size_t)layer->total_slots, "row"},
                   in = {layer->store.written, (size_t)layer->total_slots, "the ring's written bits"};
    if ((st = rkv__check_no_overlap(what, &out, 1, &in, 1)) != RKV_OK) return st;
    return layer->ops.visible_row(layer->ctx, layer->impl, session_idx, frame_pos, row);
}

/* The caller's args, loaded and checked once (rkv__attend_args_check). */
static rkv_status take_args(const rkv_layer *layer, const rkv_attention_args *caller,
                            const char *what, rkv_attention_args *a) {
    if (!layer) return rkv__fail(RKV_ERR_NULL, "%s: layer is NULL", what);
    if (!caller) return rkv__fail(RKV_ERR_NULL, "%s: args is NULL", what);
    rkv_status st = rkv__attention_args_load(what, caller, a);
    if (st != RKV_OK) return st;
    if (a->workspace && rkv__misaligned(a->workspace, 16))
        return rkv__fail(RKV_ERR_INVALID_ARG, "%s: workspace is not 16-byte aligned", what);
    return rkv__attend_args_check(&layer->g, &layer->limits, &layer->store, a,
                                  layer->limits.host_memory != 0, what);
}

rkv_status rkv_layer_attend(const rkv_layer *layer, const rkv_attention_args *args) {
    static const char what[] = "rkv_layer_attend";
    rkv_attention_args a;
    rkv_status st = take_args(layer, args, what, &a);
    return st == RKV_OK ? layer->ops.attend(layer->ctx, layer->impl, &a, a.workspace,
                                            a.workspace ? a.workspace_bytes : 0)
                        : st;
}

size_t rkv_layer_attend_workspace_bytes(const rkv_layer *layer, const rkv_attention_args *args) {
    rkv_attention_args a;
    if (!layer || !layer->ops.attend_workspace_bytes ||
        take_args(layer, args, "rkv_layer_attend_workspace_bytes", &a) != RKV_OK)
        return 0;
    return layer->ops.attend_workspace_bytes(layer->ctx, layer->impl, &a);
}

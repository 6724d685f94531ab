/* Private declarations shared by the library's source files. */
#ifndef RKV_INTERNAL_H
#define RKV_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ring_rule.h" /* the ring rule: slot, write step, visibility */
#include "ringkv.h"
#include "ringkv_backend.h"

#if defined(__GNUC__)
#define RKV__PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define RKV__PRINTF(a, b)
#endif

/* Records a message for rkv_last_error() and returns status (the public
 * rkv_error_set, ringkv_backend.h: one message per thread for all libraries). */
#define rkv__fail rkv_error_set

/* Text from outside the library for a message (a string from a file, a
 * caller's path): bytes outside printable ASCII as \xNN, a backslash as
 * \\, at most `max` input bytes (then "..."), into buf[size] (size >=
 * RKV__ESC(max) holds it all); returns buf (src/snapshot_header.c). */
const char *rkv__snap_escape(char *buf, size_t size, const char *s, size_t max);
#define RKV__ESC(n) (4 * (n) + 4)
/* The longest part of a file path a message shows (messages are cut at 511
 * bytes: rkv_last_error), and a buffer for it, escaped. */
#define RKV__PATH_SHOWN 400
typedef char rkv__path_shown[RKV__ESC(RKV__PATH_SHOWN)];
#define RKV__SHOW_PATH(buf, path) rkv__snap_escape((buf), sizeof(buf), (path), RKV__PATH_SHOWN)

/* Returns RKV_ERR_NULL from the calling function, naming the argument,
 * when pointer p is NULL. */
#define RKV__REQUIRE(what, p)                                                      \
    do {                                                                           \
        if (!(p)) return rkv__fail(RKV_ERR_NULL, "%s: %s is NULL", (what), #p);    \
    } while (0)

/* a * b into *out; false when the product overflows (or a, b < 0).
 * Inline, as the helpers below the CUDA library uses: it links only the
 * core's public symbols (docs/backends.md). */
static inline bool rkv__mul_i64(int64_t a, int64_t b, int64_t *out) {
    if (a < 0 || b < 0) return false;
    return !__builtin_mul_overflow(a, b, out);
}

/* ---- structs that grow (ringkv.h, "Structs that grow"; args.c) ----
 * The first version's size of each: the end of its last version-1 member. */
#define RKV__SIZE_V1(type, last) (offsetof(type, last) + sizeof(((type *)0)->last))
#define RKV__ATTENTION_ARGS_V1 RKV__SIZE_V1(rkv_attention_args, pool)
#define RKV__MODEL_CONFIG_V1 RKV__SIZE_V1(rkv_model_config, max_offloaded)
#define RKV__SNAPSHOT_INFO_V1 RKV__SIZE_V1(rkv_snapshot_info, data_xxh3)

/* Checks the struct_size `got` of argument `arg` (C type `type`, initializer
 * `init`) of the call `what` against the first version's size and this
 * library's: 0, smaller or larger is RKV_ERR_INVALID_ARG, named. */
static inline rkv_status rkv__struct_size_check(const char *what, const char *arg,
                                                const char *type, const char *init,
                                                size_t got, size_t first, size_t mine) {
    if (got == 0)
        return rkv__fail(RKV_ERR_INVALID_ARG,
                         "%s: %s->struct_size is 0; set it to sizeof(%s) (start from %s)", what,
                         arg, type, init);
    if (got < first)
        return rkv__fail(RKV_ERR_INVALID_ARG,
                         "%s: %s->struct_size = %zu is smaller than the first version of %s "
                         "(%zu bytes); set it to sizeof(%s) (start from %s)",
                         what, arg, got, type, first, type, init);
    if (got > mine)
        return rkv__fail(RKV_ERR_INVALID_ARG,
                         "%s: %s->struct_size = %zu is larger than this library's %s (%zu "
                         "bytes): the program was built with a newer ringkv header than the "
                         "library it runs with (%s)",
                         what, arg, got, type, mine, rkv_version());
    return RKV_OK;
}
/* The caller's rkv_attention_args / rkv_model_config in this library's
 * layout: struct_size checked (in non-NULL), the members it covers copied,
 * the rest 0 (their defaults), out->struct_size = sizeof *out. */
rkv_status rkv__attention_args_load(const char *what, const rkv_attention_args *in,
                                    rkv_attention_args *out);
rkv_status rkv__model_config_load(const char *what, const rkv_model_config *in,
                                  rkv_model_config *out);
/* Checks info->struct_size (non-NULL info) before a call fills it. */
rkv_status rkv__snapshot_info_check(const char *what, const rkv_snapshot_info *info);
/* Copies a filled info into the caller's, as far as its struct_size goes. */
void rkv__snapshot_info_store(rkv_snapshot_info *dst, const rkv_snapshot_info *src);

/* RKV_OK when the input dtype `got` is the storage dtype `want`; else
 * RKV_ERR_DTYPE naming both ("<what>: kv dtype ..."): the upserts' check. */
rkv_status rkv__check_kv_dtype(const char *what, rkv_dtype got, rkv_dtype want);
/* The safetensors dtype of a snapshot tensor in dtype ("F32", "F16",
 * "BF16"; static); "?" for an unknown dtype. */
const char *rkv__dtype_safetensors(rkv_dtype dtype);
/* Element i of a buffer in dtype, widened to float. */
float rkv__load(const void *base, rkv_dtype dtype, size_t i);
/* Writes v as element i of a buffer in dtype (round to nearest even). */
void rkv__store(void *base, rkv_dtype dtype, size_t i, float v);

/* Copies `ops` into *out after checking the table (backend.c): version,
 * size, the members every table has (its list); then asks its limits
 * (ctx) into *limits and checks them (>= 0). */
rkv_status rkv__backend_adopt(const rkv_backend_ops *ops, void *ctx, const char *what,
                              rkv_backend_ops *out, rkv_backend_limits *limits);

/* A layer on any backend (the public rkv_layer, layer.c): its geometry,
 * the backend's table, context and own layer, and its storage. */
struct rkv_layer {
    rkv_geometry g;
    int64_t capacity;             /* C = (RF+1)*T                      */
    int64_t total_slots;          /* N = S*C                           */
    rkv_backend_ops ops;          /* the adopted table                 */
    const rkv_backend_ops *ops_id; /* the table passed at creation     */
    rkv_backend_limits limits;
    void *ctx;                    /* the backend's context (not owned) */
    void *impl;                   /* the backend's layer               */
    rkv_backend_storage store;    /* its storage (BACKEND memory)      */
    bool owns_impl;               /* false: a model's layer            */
};
/* Fills *l with owns_impl false: a model's layer (rkv_layer_destroy never
 * frees it; the model frees impl); layer.c's creations then set it true. */
void rkv__layer_borrow(struct rkv_layer *l, const rkv_backend_ops *ops,
                       const rkv_backend_ops *ops_id, const rkv_backend_limits *limits, void *ctx,
                       const rkv_geometry *g, void *impl, const rkv_backend_storage *store);
/* The CPU backend's layer behind `layer` (the calls of ringkv_cpu.h); NULL
 * with RKV_ERR_NULL / RKV_ERR_INVALID_ARG set (naming `what`) for a NULL
 * layer or one on another backend. */
const struct rkv__cpu_layer *rkv__cpu_layer_of(const rkv_layer *layer, const char *what);

/* The CPU backend's layer (src/cpu/backend_cpu.c): host storage. */
struct rkv__cpu_layer {
    rkv_geometry g;
    int64_t ring_len;     /* L = RF*T                      */
    int64_t capacity;     /* C = L + T                      */
    int64_t total_slots;  /* N = S*C                        */
    size_t row_bytes;     /* D * sizeof(dtype): a slot of K */
    uint8_t *kv;          /* [2][H][N][D] storage           */
    uint8_t *written;     /* [N] 0/1                        */
    bool owns_storage;    /* kv and written are its own (freed) */
};

/* Byte address of slot `slot` of head h in half c (0 = K, 1 = V). */
static inline uint8_t *rkv__slot_ptr(const struct rkv__cpu_layer *l, int c, int64_t h,
                                     int64_t slot) {
    return l->kv + ((size_t)(c * l->g.n_kv_heads + h) * (size_t)l->total_slots +
                    (size_t)slot) * l->row_bytes;
}

/* Checks one session's written bits [C] of geometry g: every byte 0 or 1,
 * every scratch slot 1, each ring frame's T bits equal (frames are written
 * whole). -1 when valid, else the first bad slot. */
static inline int64_t rkv__written_span_check(const rkv_geometry *g, const uint8_t *w) {
    const int64_t T = g->tokens_per_frame, L = g->ring_frames * T, C = L + T;
    for (int64_t j = 0; j < C; j++) {
        if (w[j] > 1 || (j >= L && w[j] != 1)) return j;
        if (j < L && j % T && w[j] != w[j - j % T]) return j;
    }
    return -1;
}

/* What is wrong at slot `bad` (rkv__written_span_check's answer) of the
 * written bits w, in words for a message: "written bit of slot J is V;
 * expected 0 or 1", "scratch slot J has written bit 0; expected 1", or
 * "ring frame R (slots A..B) is partly written (slot A is 1, slot J is 0);
 * frames are written whole". Into buf (n bytes); returns buf. */
const char *rkv__written_bad_what(const rkv_geometry *g, const uint8_t *w, int64_t bad,
                                  char *buf, size_t n);

/* One piece of a session's span (rkv_layer_read_span and friends): checks
 * session, part and head against g and gives the piece's byte offset from
 * the start of the K/V storage (*in_written = false) or of the written bits
 * (true), and its bytes. `what` names the call. */
static inline rkv_status rkv__span_piece(const rkv_geometry *g, const char *what,
                                         int64_t session, rkv_span_part part, int64_t head,
                                         size_t *offset, size_t *bytes, bool *in_written) {
    if (session < 0 || session >= g->num_sessions)
        return rkv__fail(RKV_ERR_RANGE, "%s: session %lld out of range; expected 0..%lld", what,
                         (long long)session, (long long)(g->num_sessions - 1));
    const int64_t C = rkv_geometry_capacity(g), N = rkv_geometry_total_slots(g);
    const size_t row = (size_t)g->d_head * rkv_dtype_size(g->dtype);
    if (part == RKV_SPAN_WRITTEN) {
        if (head != 0)
            return rkv__fail(RKV_ERR_INVALID_ARG,
                             "%s: head %lld with RKV_SPAN_WRITTEN; the written bits have no "
                             "head (expected 0)",
                             what, (long long)head);
        *offset = (size_t)(session * C);
        *bytes = (size_t)C;
        *in_written = true;
        return RKV_OK;
    }
    if (part != RKV_SPAN_K && part != RKV_SPAN_V)
        return rkv__fail(RKV_ERR_INVALID_ARG,
                         "%s: span part %d; expected RKV_SPAN_K (0), RKV_SPAN_V (1) or "
                         "RKV_SPAN_WRITTEN (2)",
                         what, (int)part);
    if (head < 0 || head >= g->n_kv_heads)
        return rkv__fail(RKV_ERR_RANGE, "%s: head %lld out of range; expected 0..%lld", what,
                         (long long)head, (long long)(g->n_kv_heads - 1));
    const int64_t plane = (part == RKV_SPAN_K ? 0 : g->n_kv_heads) + head;
    *offset = ((size_t)plane * (size_t)N + (size_t)(session * C)) * row;
    *bytes = (size_t)C * row;
    *in_written = false;
    return RKV_OK;
}

/* ---- host buffers that must not overlap (layer.c) ---- */
/* One host buffer a call reads or writes: [p, p + bytes), named for the
 * message. NULL or 0 bytes: none. */
typedef struct rkv__buf {
    const void *p;
    size_t bytes;
    const char *name;
} rkv__buf;
/* True when a and b share a byte. */
static inline bool rkv__shares(const rkv__buf *a, const rkv__buf *b) {
    if (!a->p || !b->p || !a->bytes || !b->bytes) return false;
    const uintptr_t a0 = (uintptr_t)a->p, b0 = (uintptr_t)b->p;
    return a0 < b0 + b->bytes && b0 < a0 + a->bytes;
}
/* RKV_ERR_INVALID_ARG "WHAT: A (..., written) overlaps B (...); expected
 * separate buffers" for the first buffer written (out[]) that shares a byte
 * with another one written or with one read (in[]); RKV_OK otherwise. */
static inline rkv_status rkv__check_no_overlap(const char *what, const rkv__buf *out,
                                               size_t n_out, const rkv__buf *in, size_t n_in) {
    for (size_t i = 0; i < n_out; i++)
        for (size_t j = i + 1; j < n_out + n_in; j++) {
            const rkv__buf *o = j < n_out ? &out[j] : &in[j - n_out];
            if (rkv__shares(&out[i], o))
                return rkv__fail(RKV_ERR_INVALID_ARG,
                                 "%s: %s (%p, %zu bytes, written) overlaps %s (%p, %zu bytes); "
                                 "expected separate buffers",
                                 what, out[i].name, out[i].p, out[i].bytes, o->name, o->p,
                                 o->bytes);
        }
    return RKV_OK;
}
/* The upsert's buffers (layer.c; arguments already checked): the layer's
 * storage and visible (written) against kv, frame_pos and session_idx
 * (read; any may be NULL). */
rkv_status rkv__upsert_overlap(const struct rkv_layer *l, const char *what, const void *kv,
                               int64_t batch, const int64_t *frame_pos,
                               const int64_t *session_idx, const uint8_t *visible);
/* Checks session indices: non-NULL, each in [0, num_sessions), distinct.
 * `what` names the call in the message. */
rkv_status rkv__check_sessions(const char *what, const int64_t *session_idx,
                               int64_t batch, int64_t num_sessions);

/* rkv_geometry_check's first part: the fields a model config sets once for
 * all its layers (num_sessions, n_kv_heads, d_head, tokens_per_frame, dtype). */
rkv_status rkv__geometry_check_shared(const rkv_geometry *g);

/* The one geometry comparison: the name of the first field, in
 * rkv_geometry's order, in which a differs from b, with the two values in
 * *va, *vb (a dtype as its rkv_dtype); NULL when equal. Snapshot loads,
 * imports and the model's calls with a caller's ring use it. */
const char *rkv__geometry_differs(const rkv_geometry *a, const rkv_geometry *b, int64_t *va,
                                  int64_t *vb);

/* Validates a model config: name, max_offloaded, its own fields (S, H, D,
 * T, dtype: named without a layer), GQA, every layer's geometry ("layer i:
 * ..."), total bytes; fills the per-session and total K/V bytes (non-NULL). */
rkv_status rkv__model_config_check(const rkv_model_config *cfg, size_t *per_session,
                                   size_t *total);

#endif

/*
 * ringkv: ring KV caches for streaming video world models (C11).
 *
 * The behaviour reproduces the reference PyTorch module LayerRingCache
 * (shared/spec/seed_ring_cache.py) as specified in shared/spec/SEMANTICS.md;
 * section numbers below ("SEM 3") refer to that text.
 *
 * Conventions (see docs/ and DESIGN.md):
 *  - Every function returning rkv_status validates all of its arguments before
 *    it changes anything: a failed call leaves every handle byte-identical.
 *    The message of the last failed call on the calling thread is returned by
 *    rkv_last_error() (thread-local, like dlerror()).
 *  - All pointers in this header are HOST pointers (CPU backend). Buffers the
 *    caller passes in stay owned by the caller; handles are owned by the caller
 *    from *_create until *_destroy (NULL is a no-op there).
 *  - Sizes are element counts unless the name ends in _bytes.
 *  - Session indices and frame clocks are int64_t, as in the reference.
 */
#ifndef RINGKV_H
#define RINGKV_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define RKV_VERSION_MAJOR 0
#define RKV_VERSION_MINOR 1
#define RKV_VERSION_PATCH 0

/* "MAJOR.MINOR.PATCH" of the linked library (static string). */
const char *rkv_version(void);

/* ------------------------------------------------------------------------ */
/* Status codes                                                              */
/* ------------------------------------------------------------------------ */

typedef enum rkv_status {
    RKV_OK = 0,
    RKV_ERR_INVALID_ARG = -1,  /* a value outside what the call accepts      */
    RKV_ERR_NULL = -2,         /* a required pointer was NULL                */
    RKV_ERR_RANGE = -3,        /* an index (session, layer) out of range     */
    RKV_ERR_OVERFLOW = -4,     /* a size whose byte count overflows size_t   */
    RKV_ERR_NO_MEMORY = -5,    /* allocation failed                          */
    RKV_ERR_DTYPE = -6,        /* dtype mismatch or unknown dtype            */
    RKV_ERR_CLOCK = -7,        /* frame clock rule violated (SEM 6)          */
    RKV_ERR_FULL = -8,         /* every session of a model is held           */
    RKV_ERR_NOT_FOUND = -9,    /* unknown preset or request id               */
    RKV_ERR_STATE = -10,       /* call not allowed in the current state      */
    RKV_ERR_FORMAT = -11,      /* malformed or mismatched serialized data    */
    RKV_ERR_IO = -12           /* file input/output failed                   */
} rkv_status;

/* Static name of a status ("RKV_ERR_CLOCK"); "unknown status" otherwise. */
const char *rkv_status_str(rkv_status status);

/* Message of the last failed call on this thread ("" when none). The string
 * is owned by the library and valid until the next failing call on this
 * thread. It names the bad value and what was expected. */
const char *rkv_last_error(void);

/* ------------------------------------------------------------------------ */
/* Element types                                                             */
/* ------------------------------------------------------------------------ */

typedef enum rkv_dtype {
    RKV_DTYPE_F32 = 0,  /* IEEE binary32                                */
    RKV_DTYPE_F16 = 1,  /* IEEE binary16                                */
    RKV_DTYPE_BF16 = 2  /* bfloat16 (upper half of binary32)            */
} rkv_dtype;

/* Bytes per element (4, 2, 2); 0 for an unknown dtype. */
size_t rkv_dtype_size(rkv_dtype dtype);
/* "f32", "f16", "bf16"; NULL for an unknown dtype. */
const char *rkv_dtype_name(rkv_dtype dtype);
/* Parses "f32"/"float32", "f16"/"float16"/"half", "bf16"/"bfloat16".
 * RKV_ERR_DTYPE for anything else; *out untouched then. */
rkv_status rkv_dtype_parse(const char *name, rkv_dtype *out);

/* Converts n elements between dtypes (round to nearest even when narrowing;
 * NaN stays NaN). src and dst are host buffers of n elements and must not
 * overlap unless src == dst and the dtypes are equal. */
rkv_status rkv_convert(const void *src, rkv_dtype src_dtype, void *dst,
                       rkv_dtype dst_dtype, size_t n);

/* ------------------------------------------------------------------------ */
/* Geometry of one layer's ring (SEM 2)                                      */
/* ------------------------------------------------------------------------ */

/* Minimum tokens per frame: the attention block size (FlexAttention's 128).
 * tokens_per_frame must be a positive multiple of it. */
#define RKV_BLOCK_TOKENS 128

typedef struct rkv_geometry {
    int64_t num_sessions;     /* S  >= 1: sessions side by side            */
    int64_t n_kv_heads;       /* H  >= 1                                   */
    int64_t ring_frames;      /* RF >= 1: frame slots allocated per session */
    int64_t ring_buckets;     /* RB in [1, RF]: frame slots addressed      */
    int64_t d_head;           /* D  >= 1                                   */
    int64_t tokens_per_frame; /* T: multiple of 128, >= 128                */
    int64_t pinned_dilation;  /* PD >= 1: keep frames with clock % PD == 0 */
    rkv_dtype dtype;          /* storage dtype                             */
} rkv_geometry;

/* Checks a geometry against SEM 2 and ringkv's extra rules (T >= 128, H >= 1,
 * D >= 1, byte counts that fit size_t). RKV_OK or the first violation, with
 * rkv_last_error() naming it. */
rkv_status rkv_geometry_check(const rkv_geometry *g);

/* Derived sizes of a (valid) geometry, in slots (tokens):
 * ring_len L = RF*T, capacity C = L + T (one session, scratch included),
 * total_slots N = S*C. memory_bytes = 2*H*N*D*sizeof(dtype) (SEM 2). */
int64_t rkv_geometry_ring_len(const rkv_geometry *g);
int64_t rkv_geometry_capacity(const rkv_geometry *g);
int64_t rkv_geometry_total_slots(const rkv_geometry *g);
size_t rkv_geometry_memory_bytes(const rkv_geometry *g);

/* Slot arithmetic of SEM 3 step 1 for clock f >= 0:
 * bucket = ceil(f / PD), ring frame slot = bucket mod RB,
 * write step = (f mod PD == 0). */
int64_t rkv_ring_slot(const rkv_geometry *g, int64_t frame_pos);
int rkv_is_write_step(const rkv_geometry *g, int64_t frame_pos);

/* ------------------------------------------------------------------------ */
/* One layer's ring (CPU backend; SEM 2, 3)                                  */
/* ------------------------------------------------------------------------ */

typedef struct rkv_layer rkv_layer;

/* Allocates a layer: K/V storage [2][H][N][D] in g->dtype, zeroed, and the
 * written bitmap [N] (ring slots 0, scratch slots 1). *out receives the
 * handle (owned by the caller; free with rkv_layer_destroy). Errors:
 * invalid geometry (see rkv_geometry_check), RKV_ERR_NULL, RKV_ERR_NO_MEMORY;
 * *out is untouched on failure. */
rkv_status rkv_layer_create(const rkv_geometry *g, rkv_layer **out);
void rkv_layer_destroy(rkv_layer *layer);

/* The layer's geometry (pointer valid for the layer's lifetime). */
const rkv_geometry *rkv_layer_geometry(const rkv_layer *layer);
int64_t rkv_layer_capacity(const rkv_layer *layer);
int64_t rkv_layer_total_slots(const rkv_layer *layer);
/* 2*H*N*D*sizeof(dtype): resident K/V bytes, all sessions (SEM 2). */
size_t rkv_layer_memory_bytes(const rkv_layer *layer);

/* Read access without copying (host pointers owned by the layer, valid until
 * rkv_layer_destroy; contents change with every upsert/reset).
 *  rkv_layer_kv:      [2][H][N][D] in the storage dtype, index 0 = K, 1 = V.
 *  rkv_layer_k / _v:  [H][N][D] (the two halves of rkv_layer_kv).
 *  rkv_layer_written: [N] bytes, 1 = written, 0 = not. */
const void *rkv_layer_kv(const rkv_layer *layer);
const void *rkv_layer_k(const rkv_layer *layer);
const void *rkv_layer_v(const rkv_layer *layer);
const uint8_t *rkv_layer_written(const rkv_layer *layer);

/* [lo, hi) slots owned by session (lo = session*C, hi = lo + C).
 * RKV_ERR_RANGE when session is not in [0, S). */
rkv_status rkv_layer_session_span(const rkv_layer *layer, int64_t session,
                                  int64_t *lo, int64_t *hi);

/* Drops one session's state: its K/V span zeroed, its ring slots marked
 * unwritten, its scratch re-armed (marked written). RKV_ERR_RANGE. */
rkv_status rkv_layer_reset(rkv_layer *layer, int64_t session);

/* One upsert of SEM 3 for B >= 1 session rows, in the reference's order:
 * scratch write, visibility, commit.
 *  kv:          [2][H][B*T][D] host buffer in kv_dtype, tokens ordered
 *               (row b, token t); kv_dtype must equal the storage dtype.
 *  frame_pos:   [B] clocks, each >= 0.
 *  session_idx: [B] sessions, each in [0, S) and distinct within the call.
 *  commit:      nonzero: write the frame into ring slot
 *               ceil(f/PD) mod RB on write steps (f mod PD == 0), else
 *               rewrite the scratch; mark the destination written.
 *  visible:     NULL, or (B == 1 only) a caller-owned [N] byte buffer that
 *               receives the reference's visibility row: written AND slot of
 *               the row's session, with the T slots of the ring frame cleared
 *               on write steps, computed before the commit. Unlike the
 *               reference (whose row aliases layer scratch), the row belongs
 *               to the caller and is never overwritten by the layer.
 * Errors (nothing written): RKV_ERR_NULL, RKV_ERR_INVALID_ARG (B < 1,
 * visible with B > 1, frame_pos < 0), RKV_ERR_RANGE (session), RKV_ERR_DTYPE,
 * RKV_ERR_OVERFLOW. */
rkv_status rkv_layer_upsert(rkv_layer *layer, const void *kv,
                            rkv_dtype kv_dtype, int64_t batch,
                            const int64_t *frame_pos,
                            const int64_t *session_idx, int commit,
                            uint8_t *visible);

/* ------------------------------------------------------------------------ */
/* Visibility (SEM 4, 5)                                                     */
/* ------------------------------------------------------------------------ */

/* Visibility is frame-granular. A "frame slot" index is a ring frame slot in
 * [0, RF) or RKV_SCRATCH_FRAME(g) == RF for the session's scratch. Lists are
 * ascending, scratch last, at most RF + 1 entries. */
#define RKV_SCRATCH_FRAME(g) ((g)->ring_frames)

/* The rule from the written bits and the clock (SEM 4, any history):
 * ring frame r of the session is visible when its slots are written and it is
 * not slot ceil(f/PD) mod RB while f mod PD == 0; the scratch always is.
 * frames: caller buffer of RF + 1 entries; *count receives the length.
 * (Frames are always written whole, so a frame's first slot stands for all.)
 * Errors: RKV_ERR_NULL, RKV_ERR_RANGE (session), RKV_ERR_INVALID_ARG (f<0). */
rkv_status rkv_layer_visible_frames(const rkv_layer *layer, int64_t session,
                                    int64_t frame_pos, int64_t *frames,
                                    int64_t *count);

/* The rule from the clock alone (SEM 4), for a session that committed frames
 * 0..f-1 in order from 0: ring slots {(g/PD) mod RB : g = 0, PD, 2PD, .. < f}
 * minus slot (f/PD) mod RB when f mod PD == 0, plus the scratch. Same output
 * convention as rkv_layer_visible_frames. Depends only on the geometry. */
rkv_status rkv_visible_frames_from_clock(const rkv_geometry *g,
                                         int64_t frame_pos, int64_t *frames,
                                         int64_t *count);

/* Expands a frame list into a per-slot row [N] (1 visible, 0 not) of the
 * given session, the reference's row format. */
rkv_status rkv_visible_row_from_frames(const rkv_geometry *g, int64_t session,
                                       const int64_t *frames, int64_t count,
                                       uint8_t *row);

/* FlexAttention BlockMask of one session row (SEM 5), from the bits-and-clock
 * rule. Query blocks QB = T/128, key blocks KB = N/128.
 *  kv_num_blocks: [QB] int32, visible key blocks per query block.
 *  kv_indices:    [QB][KB] int32, visible key block ids ascending, the rest
 *                 padded with 0. Every query block gets the same list. */
rkv_status rkv_layer_block_mask(const rkv_layer *layer, int64_t session,
                                int64_t frame_pos, int32_t *kv_num_blocks,
                                int32_t *kv_indices);

/* ------------------------------------------------------------------------ */
/* Attention over the ring (SEM 5), CPU backend                              */
/* ------------------------------------------------------------------------ */

typedef struct rkv_attention_args {
    int64_t batch;      /* B >= 1 session rows                            */
    int64_t n_q_heads;  /* Hq: a positive multiple of H; head h reads KV
                           head h / (Hq/H) (GQA)                          */
    int64_t n_queries;  /* Tq queries per row; 0 means tokens_per_frame   */
    const void *q;      /* [B][Hq][Tq][D] in q_dtype                      */
    rkv_dtype q_dtype;
    void *out;          /* [B][Hq][Tq][D] in out_dtype, written whole      */
    rkv_dtype out_dtype;
    const int64_t *session_idx; /* [B], each in [0, S)                    */
    const int64_t *frame_pos;   /* [B] row clocks (>= 0); ignored, may be
                                   NULL, when visible != NULL             */
    const uint8_t *visible;     /* NULL: the bits-and-clock rule of SEM 4
                                   per row (the engine path; no mask is
                                   built). Else [B][N] per-slot rows (the
                                   reference's fallback consumer): row b
                                   attends to every slot with a nonzero
                                   byte, whatever session owns it.        */
    float scale;        /* softmax scale; 0 means 1/sqrt(D)               */
} rkv_attention_args;

/* out[b,h,i,:] = sum_j softmax_j(scale * q[b,h,i,:] . K[kvh,j,:]) V[kvh,j,:]
 * over the visible slots j of row b; no causal mask; f32 accumulation.
 * A row with no visible slot is impossible on the bits rule (the scratch is
 * always visible); with an explicit all-zero row the output is 0.
 * The reference implementation: simple, exact, the test oracle.
 * Errors (out untouched): RKV_ERR_NULL, RKV_ERR_INVALID_ARG, RKV_ERR_RANGE,
 * RKV_ERR_DTYPE, RKV_ERR_OVERFLOW. */
rkv_status rkv_layer_attend(const rkv_layer *layer,
                            const rkv_attention_args *args);

/* ------------------------------------------------------------------------ */
/* A whole model: layers, sessions, clocks, snapshots (SEM 6, 7)             */
/* ------------------------------------------------------------------------ */

#define RKV_MAX_LAYERS 256
#define RKV_MAX_NAME 64
#define RKV_MAX_REQUEST_ID 256 /* bytes of a request id, NUL included */

typedef struct rkv_layer_spec {
    int64_t ring_frames;
    int64_t ring_buckets;
    int64_t pinned_dilation;
} rkv_layer_spec;

typedef struct rkv_model_config {
    char name[RKV_MAX_NAME];
    int64_t n_layers;                      /* 1 .. RKV_MAX_LAYERS         */
    rkv_layer_spec layers[RKV_MAX_LAYERS]; /* per layer RF / RB / PD      */
    int64_t num_sessions;
    int64_t n_q_heads;                     /* multiple of n_kv_heads      */
    int64_t n_kv_heads;
    int64_t d_head;
    int64_t tokens_per_frame;
    rkv_dtype dtype;
} rkv_model_config;

/* Fills *out with a named preset (SEM 7):
 *  "waypoint-1.5-720p": 24 layers, Hq 32, H 16, D 64, T 512, bf16; layers
 *     3,7,11,15,19,23 global (PD 8, RB 16, RF 16, or 128 with
 *     full_global_ring), the rest local (PD 1, RF = RB = 16).
 *  "waypoint-1.5-360p": the same with T 128.
 *  "demo": 2 layers, local (16/16/1) then global (RB 16, PD 8; RF 16 or
 *     128), Hq 1, H 1, D 64, T 128, f32.
 * num_sessions is set to 1; change fields after the call as needed.
 * RKV_ERR_NOT_FOUND for an unknown name. */
rkv_status rkv_model_preset(const char *name, int full_global_ring,
                            rkv_model_config *out);
/* Names of the presets, NULL-terminated static array. */
const char *const *rkv_model_preset_names(void);

/* Geometry of layer i of a config (S, H, D, T, dtype from the config). */
rkv_status rkv_model_config_layer_geometry(const rkv_model_config *cfg,
                                           int64_t layer, rkv_geometry *out);
/* Resident K/V bytes of one session over all layers, and of the model. */
rkv_status rkv_model_config_memory(const rkv_model_config *cfg,
                                   size_t *per_session_bytes,
                                   size_t *total_bytes);

typedef struct rkv_model rkv_model;

/* Creates every layer (one rkv_layer per transformer layer). Errors: invalid
 * config (each layer's geometry checked), RKV_ERR_NO_MEMORY. */
rkv_status rkv_model_create(const rkv_model_config *cfg, rkv_model **out);
void rkv_model_destroy(rkv_model *model);

const rkv_model_config *rkv_model_get_config(const rkv_model *model);
/* Layer i (owned by the model). NULL when i is out of range. Mutating it
 * directly bypasses the model's clock checks. */
rkv_layer *rkv_model_layer(rkv_model *model, int64_t layer);
size_t rkv_model_memory_bytes(const rkv_model *model);

/* Claims a free session for request_id (a NUL-terminated string of 1 to
 * RKV_MAX_REQUEST_ID-1 bytes). Claiming an id that already holds a session
 * returns that session. RKV_ERR_FULL when every session is held (no
 * eviction). The new session starts zeroed with no clock. */
rkv_status rkv_model_claim(rkv_model *model, const char *request_id,
                           int64_t *session);
/* The session held by request_id; RKV_ERR_NOT_FOUND. */
rkv_status rkv_model_lookup(const rkv_model *model, const char *request_id,
                            int64_t *session);
/* Releases a held session: zeroed in every layer, clock dropped, id freed.
 * RKV_ERR_RANGE, RKV_ERR_STATE (not held). */
rkv_status rkv_model_release(rkv_model *model, int64_t session);
/* Resets a held session in every layer and drops its clock (SEM 6): the next
 * frame may start anywhere. The session stays claimed. */
rkv_status rkv_model_reset(rkv_model *model, int64_t session);

/* Last committed frame of a held session, or -1 when it has no clock. */
rkv_status rkv_model_clock(const rkv_model *model, int64_t session,
                           int64_t *last_committed);

/* Begins a frame for B held sessions (checked on the host for every row
 * before any state changes): each frame_pos must be >= 0 and equal the
 * session's last committed frame + 1 (any clock when it has none); the
 * session must not be inside a frame already. RKV_ERR_CLOCK otherwise. */
rkv_status rkv_model_begin_frame(rkv_model *model, int64_t batch,
                                 const int64_t *session_idx,
                                 const int64_t *frame_pos);

/* One upsert on layer `layer` for B sessions inside a frame, at each
 * session's declared clock (kv as in rkv_layer_upsert). When commit is set,
 * the layer is marked committed for those sessions; once every layer has
 * committed, the frame ends and the clock advances to its frame_pos.
 * RKV_ERR_STATE when a session is not inside a frame. */
rkv_status rkv_model_upsert(rkv_model *model, int64_t layer, int64_t batch,
                            const int64_t *session_idx, const void *kv,
                            rkv_dtype kv_dtype, int commit);

/* Attention on layer `layer` for B sessions inside a frame (or whose frame
 * just ended on this layer), at their declared clocks, with the
 * bits-and-clock rule. args->session_idx/frame_pos/visible are ignored and
 * replaced by `session_idx` and the model's clocks. */
rkv_status rkv_model_attend(rkv_model *model, int64_t layer, int64_t batch,
                            const int64_t *session_idx,
                            const rkv_attention_args *args);

/* In-memory snapshot of one held session: every layer's K/V span and
 * written bits, the geometry and the clock. rkv_model_snapshot_bytes gives
 * the buffer size; the buffer is caller-owned. Not allowed inside a frame
 * (RKV_ERR_STATE). Restoring into a held session of a model with identical
 * geometry is bit-exact and restores the clock (the next frame must be the
 * saved clock + 1). Restore validates the whole buffer first (RKV_ERR_FORMAT
 * on size, magic, version or geometry mismatch) and changes nothing then. */
size_t rkv_model_snapshot_bytes(const rkv_model *model);
rkv_status rkv_model_snapshot(const rkv_model *model, int64_t session,
                              void *buf, size_t buf_bytes);
rkv_status rkv_model_restore(rkv_model *model, int64_t session,
                             const void *buf, size_t buf_bytes);

#ifdef __cplusplus
}
#endif

#endif /* RINGKV_H */

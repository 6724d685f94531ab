/*
 * ringkv: ring KV caches for streaming video world models (C11).
 *
 * The behaviour reproduces the reference PyTorch module LayerRingCache
 * (shared/spec/seed_ring_cache.py) as specified in shared/spec/SEMANTICS.md;
 * "SEM 3" below is its section 3. This header is the contract: status codes,
 * dtypes, a ring's geometry, visibility, layers, the model, snapshots. The
 * CPU backend's own calls are in ringkv_cpu.h (included at the end), the
 * CUDA backend's in ringkv_cuda.h (it has not run on a GPU yet), the
 * backend table (SPI) in ringkv_backend.h; design, measurements and what
 * has not run yet are in docs/ and bench/RESULTS.md.
 *
 * Conventions, for every declaration below:
 *  - A function returning rkv_status validates all of its arguments before
 *    it changes anything: a failed call writes no output and leaves every
 *    handle byte-identical. rkv_last_error() (thread-local, like dlerror())
 *    gives the message, naming the bad value. RKV_ERR_NULL is any required
 *    pointer that is NULL, even where "Errors:" does not list it.
 *  - Pointers are HOST pointers, except those marked BACKEND memory: the
 *    memory of the layer's or model's backend (host memory on the CPU,
 *    device memory of its GPU on CUDA). Buffers the caller passes stay the
 *    caller's; handles are the caller's from *_create until *_destroy (NULL
 *    is a no-op there).
 *  - Sizes are element counts unless the name ends in _bytes; session
 *    indices and frame clocks are int64_t, as in the reference.
 */
#ifndef RINGKV_H
#define RINGKV_H

#include <stddef.h>
#include <stdint.h>

/* RKV_API marks every public function of include/ (as SQLITE_API does):
 * the libraries are built with -fvisibility=hidden, so these are their only
 * exports (ctest exported_symbols; rkv__* cannot be linked against). GCC,
 * Clang: visibility("default"), else empty; a program may define it first
 * (say, to add a calling convention). */
#ifndef RKV_API
#if defined(__GNUC__) || defined(__clang__)
#define RKV_API __attribute__((visibility("default")))
#else
#define RKV_API
#endif
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* The version, written only here: CMakeLists.txt reads these macros (the
 * library's file name, ringkv.pc), tests/test_dtype.c checks they agree. */
#define RKV_VERSION_MAJOR 0
#define RKV_VERSION_MINOR 2
#define RKV_VERSION_PATCH 0
#define RKV__STRINGIFY_(x) #x
#define RKV__STRINGIFY(x) RKV__STRINGIFY_(x)
/* "MAJOR.MINOR.PATCH" of the header (a string literal). */
#define RKV_VERSION_STRING                                                   \
    RKV__STRINGIFY(RKV_VERSION_MAJOR) "." RKV__STRINGIFY(RKV_VERSION_MINOR) \
    "." RKV__STRINGIFY(RKV_VERSION_PATCH)

/* "MAJOR.MINOR.PATCH" of the linked library (static string): the
 * RKV_VERSION_STRING it was built with, which a program compiled against
 * another header can compare with its own. */
RKV_API const char *rkv_version(void);

/* ------------------------------------------------------------------------ */
/* Structs that grow, and structs that are frozen                           */
/* ------------------------------------------------------------------------ */

/* A struct that later versions extend ("Grows") carries its size as its
 * first member, `size_t struct_size`, as the Windows API's cbSize does:
 * rkv_attention_args, rkv_model_config and rkv_snapshot_info
 * (rkv_backend_ops has its own abi_version). The
 * caller sets it to sizeof the struct its header declares (start from
 * RKV_ATTENTION_ARGS_INIT, RKV_MODEL_CONFIG_INIT, RKV_SNAPSHOT_INFO_INIT,
 * or rkv_model_preset). Later versions only append: the library reads (for
 * rkv_snapshot_info, writes) the members the caller's size covers; the rest
 * take their defaults (0 is every member's default). RKV_ERR_INVALID_ARG,
 * saying which, for struct_size 0 (forgotten: no silent older layout), a
 * size below the first version's, or one above the library's (a newer
 * header than the library). Every other struct is frozen ("Frozen"): its
 * layout never changes; a change comes as a new *_v2 type with its own
 * calls. */
#ifdef __cplusplus
#define RKV__SIZED_INIT(type) {sizeof(type)}
#else
#define RKV__SIZED_INIT(type) {.struct_size = sizeof(type)}
#endif

/* ------------------------------------------------------------------------ */
/* Status codes                                                             */
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
RKV_API const char *rkv_status_str(rkv_status status);

/* Message of the last failed call on this thread ("" when none). The string
 * is owned by the library and valid until the next failing call on this
 * thread. It names the bad value and what was expected. */
RKV_API const char *rkv_last_error(void);

/* ------------------------------------------------------------------------ */
/* Element types                                                            */
/* ------------------------------------------------------------------------ */

/* The storage and argument dtypes, numbered from 0 without gaps. Each has
 * one row in src/dtype.c's table (size, names, safetensors name, f32
 * conversions) and one in python/ringkv/_arrays.py's; docs/backends.md lists
 * what adding one touches. */
typedef enum rkv_dtype {
    RKV_DTYPE_F32 = 0,  /* IEEE binary32                                */
    RKV_DTYPE_F16 = 1,  /* IEEE binary16                                */
    RKV_DTYPE_BF16 = 2  /* bfloat16 (upper half of binary32)            */
} rkv_dtype;
/* The dtype names in enum order, for messages and --help texts. */
#define RKV_DTYPE_NAMES "f32, f16 or bf16"

/* Bytes per element (4, 2, 2); 0 for an unknown dtype. */
RKV_API size_t rkv_dtype_size(rkv_dtype dtype);
/* "f32", "f16", "bf16" (static strings); NULL for an unknown dtype. */
RKV_API const char *rkv_dtype_name(rkv_dtype dtype);
/* Parses a name or an alias: "f32"/"float32", "f16"/"float16"/"half",
 * "bf16"/"bfloat16". RKV_ERR_DTYPE for anything else; *out untouched then. */
RKV_API rkv_status rkv_dtype_parse(const char *name, rkv_dtype *out);

/* Converts n elements from src to dst (round to nearest even when
 * narrowing; NaN stays NaN). With equal dtypes they may overlap (a move);
 * with different dtypes an overlap is refused (RKV_ERR_INVALID_ARG). */
RKV_API rkv_status rkv_convert(const void *src, rkv_dtype src_dtype, void *dst,
                               rkv_dtype dst_dtype, size_t n);

/* ------------------------------------------------------------------------ */
/* Geometry of one layer's ring (SEM 2)                                     */
/* ------------------------------------------------------------------------ */

/* Minimum tokens per frame: the attention block size (FlexAttention's 128). */
#define RKV_BLOCK_TOKENS 128

/* Frozen (a later change is rkv_geometry_v2). */
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
 * D >= 1, byte counts that fit int64_t and size_t): the first violation. */
RKV_API rkv_status rkv_geometry_check(const rkv_geometry *g);

/* Derived sizes of a (valid) geometry, in slots (tokens): capacity
 * C = RF*T + T (one session: its ring of RF*T slots, then the scratch),
 * total_slots N = S*C; memory_bytes = 2*H*N*D*sizeof(dtype) (SEM 2). */
RKV_API int64_t rkv_geometry_capacity(const rkv_geometry *g);
RKV_API int64_t rkv_geometry_total_slots(const rkv_geometry *g);
RKV_API size_t rkv_geometry_memory_bytes(const rkv_geometry *g);

/* SEM 3 step 1 for clock f >= 0 (unchecked: a valid geometry and f >= 0):
 * returns the ring frame slot bucket mod RB, bucket = ceil(f / PD), and
 * stores in *write_step (when not NULL) whether f mod PD == 0 (1 or 0).
 * The bucket is the reference's int64 (f + PD - 1) // PD: for the top
 * PD - 1 clocks the sum wraps negative, as in torch, and the slot is its
 * floor modulo RB (in [0, RB)). */
RKV_API int64_t rkv_ring_slot(const rkv_geometry *g, int64_t frame_pos, int *write_step);

/* ------------------------------------------------------------------------ */
/* Handles                                                                  */
/* ------------------------------------------------------------------------ */

/* Opaque handles: rkv_layer, one layer's ring on any backend (below);
 * rkv_model, a whole model over a backend; rkv_threadpool, CPU worker
 * threads (ringkv_cpu.h) named in the attention arguments. */
typedef struct rkv_layer rkv_layer;
typedef struct rkv_model rkv_model;
typedef struct rkv_threadpool rkv_threadpool;

/* ------------------------------------------------------------------------ */
/* Visibility (SEM 4, 5)                                                    */
/* ------------------------------------------------------------------------ */

/* Visibility is frame-granular. A "frame slot" index is a ring frame slot in
 * [0, RF) or RKV_SCRATCH_FRAME(g) == RF for the session's scratch. Lists are
 * ascending, scratch last, at most RF + 1 entries. */
#define RKV_SCRATCH_FRAME(g) ((g)->ring_frames)

/* The rule from the written bits and the clock (SEM 4, any history):
 * ring frame r of the session is visible when written (frames are written
 * whole) and not slot ceil(f/PD) mod RB while f mod PD == 0; the scratch
 * always is. frames: [RF + 1]; *count receives the length.
 * Errors: RKV_ERR_RANGE (session), RKV_ERR_INVALID_ARG (f < 0). */
RKV_API rkv_status rkv_layer_visible_frames(const rkv_layer *layer, int64_t session,
                                            int64_t frame_pos, int64_t *frames,
                                            int64_t *count);

/* The rule from the clock alone (SEM 4), for a session that committed frames
 * 0..f-1 in order from 0: ring slots {(g/PD) mod RB : g = 0, PD, 2PD, .. < f}
 * minus slot (f/PD) mod RB when f mod PD == 0, plus the scratch; output as
 * rkv_layer_visible_frames. Errors: invalid geometry, RKV_ERR_INVALID_ARG
 * (f < 0). */
RKV_API rkv_status rkv_visible_frames_from_clock(const rkv_geometry *g,
                                                 int64_t frame_pos, int64_t *frames,
                                                 int64_t *count);

/* Expands a frame list into the reference's per-slot row [N] bytes (1
 * visible, 0 not, every byte written; other sessions' slots 0). Errors:
 * invalid geometry, RKV_ERR_RANGE (session, or a frame outside [0, RF]),
 * RKV_ERR_INVALID_ARG (count outside [0, RF + 1]). */
RKV_API rkv_status rkv_visible_row_from_frames(const rkv_geometry *g, int64_t session,
                                               const int64_t *frames, int64_t count,
                                               uint8_t *row);

/* FlexAttention BlockMask of one session row (SEM 5), from the bits-and-clock
 * rule. Query blocks QB = T/128, key blocks KB = N/128.
 *  kv_num_blocks: [QB] int32, visible key blocks per query block.
 *  kv_indices:    [QB][KB] int32, visible key block ids ascending, the rest
 *                 padded with 0. Every query block gets the same list.
 * Errors: RKV_ERR_RANGE (session), RKV_ERR_INVALID_ARG (f < 0),
 * RKV_ERR_OVERFLOW (more than INT32_MAX key blocks), RKV_ERR_NO_MEMORY. */
RKV_API rkv_status rkv_layer_block_mask(const rkv_layer *layer, int64_t session,
                                        int64_t frame_pos, int32_t *kv_num_blocks,
                                        int32_t *kv_indices);

/* ------------------------------------------------------------------------ */
/* Layer storage: one layer's ring on any backend (SEM 2, 3)                */
/* ------------------------------------------------------------------------ */

/* One set of calls whatever the backend, each running the backend's
 * operation (ringkv_backend.h; on CUDA on the context's stream, with its
 * device current). Where BACKEND memory is not the host's, session ids and
 * clocks in BACKEND arrays are checked by the kernels: a bad row makes the
 * call write nothing and is reported by rkv_layer_check.
 *
 * rkv_layer_create allocates a layer on the CPU backend: K/V storage
 * [2][H][N][D] in g->dtype, zeroed, and the written bitmap [N] (ring slots
 * 0, scratch slots 1). Errors: invalid geometry (rkv_geometry_check),
 * RKV_ERR_NO_MEMORY. Other backends and caller storage: rkv_layer_create_on
 * and rkv_layer_wrap (ringkv_backend.h). rkv_layer_destroy on a model's
 * layer (rkv_model_layer) is a no-op: the model frees it. */
RKV_API rkv_status rkv_layer_create(const rkv_geometry *g, rkv_layer **out);
RKV_API void rkv_layer_destroy(rkv_layer *layer);

/* Getters; NULL for a NULL layer. The geometry (valid for the layer's
 * lifetime; its sizes are the rkv_geometry_* calls on it). */
RKV_API const rkv_geometry *rkv_layer_geometry(const rkv_layer *layer);

/* The storage without copying (BACKEND, the layer's or for a wrapped layer
 * the caller's, valid until rkv_layer_destroy; changed by upsert / reset):
 * rkv_layer_kv [2][H][N][D] in the storage dtype, 0 = K, 1 = V (V starts
 * rkv_geometry_memory_bytes / 2 bytes in); rkv_layer_written [N] 0/1. */
RKV_API const void *rkv_layer_kv(const rkv_layer *layer);
RKV_API const uint8_t *rkv_layer_written(const rkv_layer *layer);

/* [lo, hi) slots owned by session (lo = session*C, hi = lo + C).
 * RKV_ERR_RANGE when session is not in [0, S). */
RKV_API rkv_status rkv_layer_session_span(const rkv_layer *layer, int64_t session,
                                          int64_t *lo, int64_t *hi);

/* Drops one session's state: its K/V span zeroed, its ring slots marked
 * unwritten, its scratch re-armed (marked written). RKV_ERR_RANGE. */
RKV_API rkv_status rkv_layer_reset(rkv_layer *layer, int64_t session);

/* One session's span, piece by piece: what forks and snapshots copy (HOST
 * buffers on every backend; on CUDA ordered after the stream's work and
 * done when the call returns; copy_span only enqueued). The span is
 * C = (RF+1)*T slots: RKV_SPAN_K / _V of one KV head are [C][D] elements
 * in the storage dtype (its slots [session*C, session*C + C)),
 * RKV_SPAN_WRITTEN the [C] written bytes (head 0). */
typedef enum rkv_span_part {
    RKV_SPAN_K = 0,
    RKV_SPAN_V = 1,
    RKV_SPAN_WRITTEN = 2
} rkv_span_part;

/* Copies a piece (rkv_span_part) of `session`'s span into dst. Reads the
 * layer only. Errors: RKV_ERR_RANGE (session, or head outside [0, H) for
 * K/V), RKV_ERR_INVALID_ARG (unknown part, head != 0 for the written bits,
 * dst overlapping the layer's storage). */
RKV_API rkv_status rkv_layer_read_span(const rkv_layer *layer, int64_t session,
                                       rkv_span_part part, int64_t head, void *dst);
/* Overwrites a piece of `session`'s span from src (not overlapping the
 * layer's storage). Written bits must keep the layer's invariant: every
 * byte 0 or 1, every scratch slot 1, a ring frame's T bits equal (frames
 * are written whole). Errors as rkv_layer_read_span, and
 * RKV_ERR_INVALID_ARG for an overlap or naming the first bad slot. */
RKV_API rkv_status rkv_layer_write_span(rkv_layer *layer, int64_t session,
                                        rkv_span_part part, int64_t head,
                                        const void *src);
/* Copies session src_session's whole span (K, V, written bits) over
 * dst_session's, bit-exact; src == dst is a no-op. Errors: RKV_ERR_RANGE. */
RKV_API rkv_status rkv_layer_copy_span(rkv_layer *layer, int64_t src_session,
                                       int64_t dst_session);

/* One upsert of SEM 3 for B >= 1 session rows, in the reference's order:
 * scratch write, visibility, commit.
 *  kv:          BACKEND [2][H][B*T][D] in kv_dtype, tokens ordered (row b,
 *               token t); kv_dtype must equal the storage dtype; aligned
 *               as the backend needs (CUDA: 16 bytes).
 *  frame_pos:   BACKEND [B] clocks, each >= 0.
 *  session_idx: BACKEND [B] sessions, each in [0, S) and distinct within
 *               the call.
 *  commit:      nonzero: write the frame into ring slot
 *               ceil(f/PD) mod RB on write steps (f mod PD == 0), else
 *               rewrite the scratch; mark the destination written.
 *  visible:     NULL, or (B == 1 only) BACKEND [N] bytes that receive the
 *               reference's visibility row (rkv_layer_visible_row, before
 *               the commit); unlike the reference's (which aliases layer
 *               scratch), it is the caller's and never overwritten.
 * No two of kv, frame_pos, session_idx, visible and the layer's storage
 * may overlap. Errors: RKV_ERR_INVALID_ARG (B < 1 or B > S or the
 * backend's largest batch, visible with B > 1, frame_pos < 0, a session
 * repeated, an overlap ("... overlaps ...", naming both), misalignment),
 * RKV_ERR_RANGE (session), RKV_ERR_DTYPE, the backend's (CUDA: a launch
 * failure, the wrong current device). Capture-safe on CUDA. */
RKV_API rkv_status rkv_layer_upsert(rkv_layer *layer, const void *kv,
                                    rkv_dtype kv_dtype, int64_t batch,
                                    const int64_t *frame_pos,
                                    const int64_t *session_idx, int commit,
                                    uint8_t *visible);

/* The reference's visibility row of one row at its clock (rkv_layer_upsert's
 * `visible`): row[j] = written[j] for the session's slots [s*C, (s+1)*C),
 * 0 elsewhere, and 0 for the T slots of ring frame ceil(f/PD) mod RB when
 * f mod PD == 0. session_idx, frame_pos: BACKEND [1] int64; row: BACKEND
 * [N] bytes, written whole (0/1), not overlapping the written bits.
 * Errors: RKV_ERR_RANGE (session not in [0, S)), RKV_ERR_INVALID_ARG
 * (frame_pos < 0, overlap, misalignment): checked and worded as
 * rkv_layer_upsert's row 0, the session first (on CUDA device values:
 * rkv_layer_check). Capture-safe on CUDA. */
RKV_API rkv_status rkv_layer_visible_row(const rkv_layer *layer, const int64_t *session_idx,
                                         const int64_t *frame_pos, uint8_t *row);

/* Reports (and clears) what the layer's kernels found in device values
 * since the last check: RKV_OK when none (always on the CPU, which checks
 * on the host); else the first one recorded: RKV_ERR_RANGE (session out of
 * range), RKV_ERR_INVALID_ARG (a session twice in one call, clock < 0),
 * the call and row in rkv_last_error(). Waits for the layer's work (CUDA:
 * one copy and one wait; not capture-safe). */
RKV_API rkv_status rkv_layer_check(rkv_layer *layer);

/* ------------------------------------------------------------------------ */
/* The model: layers, sessions, clocks, attention, frames (SEM 6, 7)        */
/* ------------------------------------------------------------------------ */

#define RKV_MAX_LAYERS 256
#define RKV_MAX_NAME 64
#define RKV_MAX_REQUEST_ID 256 /* bytes of a request id, NUL included */

/* Frozen (a later change is rkv_layer_spec_v2). */
typedef struct rkv_layer_spec {
    int64_t ring_frames;
    int64_t ring_buckets;
    int64_t pinned_dilation;
} rkv_layer_spec;

/* Grows ("Structs that grow" above). */
typedef struct rkv_model_config {
    size_t struct_size;                    /* sizeof(rkv_model_config)   */
    char name[RKV_MAX_NAME];
    int64_t n_layers;                      /* 1 .. RKV_MAX_LAYERS         */
    rkv_layer_spec layers[RKV_MAX_LAYERS]; /* per layer RF / RB / PD      */
    int64_t num_sessions;
    int64_t n_q_heads;                     /* multiple of n_kv_heads      */
    int64_t n_kv_heads;
    int64_t d_head;
    int64_t tokens_per_frame;
    rkv_dtype dtype;
    int64_t max_offloaded;                 /* paged-out sessions whose
        request id the model keeps reserved (rkv_model_offload), 0 ..
        RKV_MAX_OFFLOADED; 0: RKV_DEFAULT_OFFLOADED(num_sessions). Not
        geometry: snapshots neither store nor compare it (0 there).        */
} rkv_model_config;
#define RKV_MODEL_CONFIG_INIT RKV__SIZED_INIT(rkv_model_config)

/* Largest max_offloaded; the default (0): four paged-out sessions per
 * resident one, at least 16 (an entry costs ~300 bytes of host memory). */
#define RKV_MAX_OFFLOADED ((int64_t)1 << 20)
#define RKV_DEFAULT_OFFLOADED(num_sessions) \
    ((num_sessions) * 4 > 16 ? (num_sessions) * 4 : 16)

/* Fills *out with a named preset (SEM 7):
 *  "waypoint-1.5-720p": 24 layers, Hq 32, H 16, D 64, T 512, bf16; layers
 *     3,7,11,15,19,23 global (PD 8, RB 16, RF 16, or 128 with
 *     full_global_ring), the rest local (PD 1, RF = RB = 16).
 *  "waypoint-1.5-360p": the same with T 128.
 *  "demo": 2 layers, local (16/16/1) then global (RB 16, PD 8; RF 16 or
 *     128), Hq 1, H 1, D 64, T 128, f32.
 * num_sessions 1, struct_size sizeof(rkv_model_config); change fields
 * after the call as needed. RKV_ERR_NOT_FOUND for an unknown name. */
RKV_API rkv_status rkv_model_preset(const char *name, int full_global_ring,
                                    rkv_model_config *out);
/* Names of the presets, NULL-terminated static array. */
RKV_API const char *const *rkv_model_preset_names(void);

/* Geometry of layer i of a config (S, H, D, T, dtype from the config; not
 * checked). Errors: RKV_ERR_INVALID_ARG (cfg->struct_size, n_layers outside
 * 1..RKV_MAX_LAYERS), RKV_ERR_RANGE (layer). */
RKV_API rkv_status rkv_model_config_layer_geometry(const rkv_model_config *cfg,
                                                   int64_t layer, rkv_geometry *out);
/* Resident K/V bytes of one session over all layers (*per_session_bytes)
 * and of the model (*total_bytes; of a model: on rkv_model_get_config);
 * either output may be NULL. Errors: the config's (RKV_ERR_INVALID_ARG,
 * RKV_ERR_OVERFLOW). */
RKV_API rkv_status rkv_model_config_memory(const rkv_model_config *cfg,
                                           size_t *per_session_bytes,
                                           size_t *total_bytes);

/* Creates a model on the CPU backend: one rkv_layer per transformer layer,
 * in host memory. Errors: invalid config (each layer's geometry checked),
 * RKV_ERR_NO_MEMORY. Other backends: rkv_model_create_cuda (ringkv_cuda.h;
 * not yet run on a GPU) or rkv_model_create_with_backend (ringkv_backend.h);
 * every rkv_model_* call works on each. The backend is not part of the
 * config nor of snapshots: a session saved from one backend loads into
 * another. */
RKV_API rkv_status rkv_model_create(const rkv_model_config *cfg, rkv_model **out);
/* Frees the layers, buffers and the backend's context (a CUDA model waits
 * for its stream first). */
RKV_API void rkv_model_destroy(rkv_model *model);

RKV_API const rkv_model_config *rkv_model_get_config(const rkv_model *model);
/* The backend's name: "cpu", "cuda", ... (static string); NULL for NULL. */
RKV_API const char *rkv_model_backend_name(const rkv_model *model);
/* Layer i of a model on any backend (owned by the model: rkv_layer_destroy
 * on it is a no-op). NULL when i is out of range. Every rkv_layer_* call
 * works on it; mutating it directly bypasses the model's clock checks. */
RKV_API rkv_layer *rkv_model_layer(rkv_model *model, int64_t layer);

/* Claims a free session for request_id (a NUL-terminated string of 1 to
 * RKV_MAX_REQUEST_ID-1 bytes), zeroed with no clock; an id that holds a
 * session gets that session. Errors: RKV_ERR_FULL (every session held; no
 * eviction), RKV_ERR_INVALID_ARG (empty or overlong id), RKV_ERR_STATE
 * (the id is paged out or being imported). */
RKV_API rkv_status rkv_model_claim(rkv_model *model, const char *request_id,
                                   int64_t *session);
/* The session held by request_id; RKV_ERR_NOT_FOUND, RKV_ERR_INVALID_ARG
 * (empty or overlong id). */
RKV_API rkv_status rkv_model_lookup(const rkv_model *model, const char *request_id,
                                    int64_t *session);
/* Releases a held session: zeroed in every layer, clock dropped, id freed.
 * Allowed at any time: a row of the current batch closes it, abandoning
 * its open frame for every row ("Frames" below). RKV_ERR_RANGE,
 * RKV_ERR_STATE (not held). */
RKV_API rkv_status rkv_model_release(rkv_model *model, int64_t session);
/* Resets a held session in every layer and drops its clock (SEM 6): the next
 * frame may start anywhere. The session stays claimed. Inside a frame: as
 * rkv_model_release. */
RKV_API rkv_status rkv_model_reset(rkv_model *model, int64_t session);

/* Last committed frame of a held session, or -1 when it has no clock. */
RKV_API rkv_status rkv_model_clock(const rkv_model *model, int64_t session,
                                   int64_t *last_committed);

/* Forks: copies held session src_session's whole state (every layer's K/V
 * span and written bits, and its clock) over held session dst_session,
 * bit-exact: a branch of the same world. Both between frames; dst keeps
 * its request id, its next frame is src's last committed + 1 (any frame
 * when src has no clock); the two then evolve independently. Errors:
 * RKV_ERR_RANGE, RKV_ERR_STATE (either not claimed, or inside a frame),
 * RKV_ERR_INVALID_ARG (src == dst). */
RKV_API rkv_status rkv_model_fork(rkv_model *model, int64_t src_session,
                                  int64_t dst_session);

/* ---- Attention arguments (every backend) ------------------------------- */

/* Grows ("Structs that grow" above): start from RKV_ATTENTION_ARGS_INIT. */
typedef struct rkv_attention_args {
    size_t struct_size; /* sizeof(rkv_attention_args)                    */
    int64_t batch;      /* B >= 1 session rows                            */
    int64_t n_q_heads;  /* Hq: a positive multiple of H; head h reads KV
                           head h / (Hq/H) (GQA)                          */
    int64_t n_queries;  /* Tq queries per row; 0 means tokens_per_frame   */
    const void *q;      /* [B][Hq][Tq][D] in q_dtype                      */
    rkv_dtype q_dtype;  /* any dtype, independent of the storage's: values
                           are widened to f32                             */
    void *out;          /* [B][Hq][Tq][D] in out_dtype, written whole      */
    rkv_dtype out_dtype; /* any dtype (rounded to nearest even)           */
    const int64_t *session_idx; /* [B], each in [0, S); a session may
                                   appear in several rows (read only)     */
    const int64_t *frame_pos;   /* [B] row clocks (>= 0); ignored, may be
                                   NULL, when visible != NULL             */
    const uint8_t *visible;     /* NULL: the bits-and-clock rule of SEM 4
                                   per row (no mask is built). Else [B][N]
                                   per-slot rows (the reference's fallback
                                   consumer): row b attends to every slot
                                   with a nonzero byte, of any session.   */
    float scale;        /* softmax scale (finite); 0 means 1/sqrt(D)      */
    rkv_threadpool *pool; /* threads to run on; NULL: a process-wide pool
                             sized to the machine's cores, made on first use */
    /* (version 2) */
    void *workspace;      /* BACKEND scratch to split a row's keys into
                             (CUDA: several blocks per row), or NULL: see
                             rkv_layer_attend_workspace_bytes; smaller only
                             means fewer splits. One call in flight at a
                             time. Ignored by the CPU and by the model's
                             calls (which use the model's own).           */
    size_t workspace_bytes;
} rkv_attention_args;
#define RKV_ATTENTION_ARGS_INIT RKV__SIZED_INIT(rkv_attention_args)

/* out[b,h,i,:] = sum_j softmax_j(scale * q[b,h,i,:] . K[kvh,j,:]) V[kvh,j,:]
 * over the visible slots j of row b; no causal mask; f32 accumulation;
 * computed so on every backend (docs/cpu.md, docs/cuda.md) by
 * rkv_layer_attend and the model's attention calls. Scores that are not
 * plain numbers, as float64 math treats them: -inf (a key holding +inf
 * against a query of the other sign, an f32 overflow such as 1e30 x -1e10)
 * weighs 0 wherever its key lies; a row whose every visible key scores
 * -inf, or (an explicit all-zero visible row) that has no visible slot,
 * gives 0 (float64 would give 0/0); a +inf or NaN score (or a NaN reaching
 * one) makes the row NaN.
 *
 * rkv_layer_attend: this attention on one layer. args: q, out, session_idx,
 * frame_pos (or visible) and workspace in BACKEND memory (q and out on
 * CUDA 16-byte aligned); out must not overlap q, the layer's storage,
 * session_idx, frame_pos or visible (RKV_ERR_INVALID_ARG "out (...)
 * overlaps ..."). Errors: RKV_ERR_INVALID_ARG (B, Hq, Tq, scale,
 * alignment, the backend's limits: CUDA d_head <= 256), RKV_ERR_RANGE (a
 * session, host memory), RKV_ERR_DTYPE, RKV_ERR_OVERFLOW, RKV_ERR_NO_MEMORY
 * (the CPU thread pool's scratch), the backend's. Capture-safe on CUDA.
 * rkv_layer_attend_workspace_bytes: the workspace bytes that let it split
 * the keys as it prefers for these arguments (0: none; invalid arguments
 * or the CPU); host only. */
RKV_API rkv_status rkv_layer_attend(const rkv_layer *layer, const rkv_attention_args *args);
RKV_API size_t rkv_layer_attend_workspace_bytes(const rkv_layer *layer,
                                                const rkv_attention_args *args);

/* ---- Frames: the batch is set once ---------------------------------------
 * A frame of B sessions is: rkv_model_begin_frame (the batch: which
 * sessions, in which rows, at which clocks), the per-pass calls on every
 * layer (rkv_model_frame_upsert / _attend / _step, on every row; Waypoint
 * runs 4 denoising passes and a commit pass), then the end of the frame.
 *
 * The model has at most one current batch. It is OPEN from begin_frame
 * until its frame ends: when upserts with commit set have gone through every
 * layer (in any order), or at rkv_model_end_frame; each row's clock is then
 * its frame_pos. It stays current, ENDED, for attention at the same clocks,
 * until it is closed: by the next begin_frame, rkv_model_abandon_frame, or a
 * call that replaces one of its sessions' state (release, reset, restore,
 * load, fork into it; all but release and reset refuse a session of an
 * open batch: RKV_ERR_STATE, as begin_frame while one is open). Release or
 * reset of a session of the open batch abandons the frame of the whole
 * batch: that session is zeroed without a clock, the other rows keep their
 * last committed clock (their next frame is the same frame again; what the
 * abandoned passes wrote into their scratch or ring slot is rewritten by
 * its commit, and that slot is hidden until then).
 *
 * Capture contract (CUDA graphs, not yet run on a GPU; ringkv_cuda.h). The
 * per-pass calls are capture-safe (ringkv_backend.h): they read the batch
 * from the model's buffers and use its own attention workspace. A whole
 * frame can thus be recorded once and replayed frame after frame, each frame
 * being rkv_model_begin_frame (host checks; an asynchronous copy of the
 * batch into the SAME buffers), a replay, rkv_model_end_frame. Between
 * replays only the clock VALUES may change: the same B sessions in the same
 * rows (the caller's rule: begin_frame cannot see a graph). Every other call
 * is not capture-safe. */

/* Begins a frame for B held sessions: stores the batch (session_idx,
 * frame_pos: read during the call only) in the model's BACKEND buffers with
 * one asynchronous copy and makes it the current batch. Each frame_pos must
 * be the session's last committed frame + 1 (any clock >= 0 when it has
 * none). Errors: RKV_ERR_CLOCK (a skipped, repeated or negative clock),
 * RKV_ERR_STATE (not claimed, inside a frame, another batch open; on CUDA a
 * stream being captured), RKV_ERR_RANGE, RKV_ERR_INVALID_ARG (B outside
 * 1..S or beyond the backend's limit, 1024 on CUDA; a repeated session).
 * Checked on the host in this order, the first failure reported: B, every
 * row's session (range, distinct, claimed), row by row its frame state and
 * clock, the open batch. Not capture-safe. */
RKV_API rkv_status rkv_model_begin_frame(rkv_model *model, int64_t batch,
                                         const int64_t *session_idx,
                                         const int64_t *frame_pos);

/* One upsert of the current batch on layer `layer`, each row at its clock
 * (rkv_layer_upsert's operation; kv, kv_dtype and commit as there, B the
 * batch's). commit also marks the layer committed for this frame: once
 * every layer has, the frame ends (the batch's clocks become committed) and
 * further upserts are refused until the next begin_frame.
 * Errors: RKV_ERR_RANGE (layer), RKV_ERR_DTYPE, RKV_ERR_STATE (no open
 * batch: never begun, abandoned, or its frame already committed -- the
 * message says which and, for a committed frame, that the next call is
 * rkv_model_begin_frame with each row's frame + 1), RKV_ERR_INVALID_ARG (a
 * misaligned kv, or one overlapping the layer's storage), the backend's.
 * Capture-safe. */
RKV_API rkv_status rkv_model_frame_upsert(rkv_model *model, int64_t layer,
                                          const void *kv, rkv_dtype kv_dtype,
                                          int commit);

/* Attention of the current batch (open or ended) on layer `layer` at its
 * clocks, with the bits-and-clock rule (rkv_layer_attend's operation).
 * args as rkv_layer_attend's, n_q_heads the model's; args->batch,
 * session_idx, frame_pos, visible and workspace are ignored: the batch's
 * rows and clocks and the model's workspace (sized at creation for
 * n_queries = tokens_per_frame; others may split less). Errors:
 * RKV_ERR_RANGE (layer), RKV_ERR_STATE (no current batch), then
 * rkv_layer_attend's for the arguments it reads (RKV_ERR_INVALID_ARG also
 * for n_q_heads other than the model's). Capture-safe. */
RKV_API rkv_status rkv_model_frame_attend(rkv_model *model, int64_t layer,
                                          const rkv_attention_args *args);

/* One pass of a batched step on layer `layer`: rkv_model_frame_upsert then
 * rkv_model_frame_attend, both checked in full before anything is enqueued.
 * Errors: the union of both. The one failure that can follow the upsert is
 * RKV_ERR_NO_MEMORY from the CPU attention's scratch (or a CUDA launch
 * failure): the upsert then stands (it is idempotent within the pass) and
 * rkv_model_frame_attend can be called again. Capture-safe. */
RKV_API rkv_status rkv_model_frame_step(rkv_model *model, int64_t layer,
                                        const void *kv, rkv_dtype kv_dtype,
                                        int commit, const rkv_attention_args *args);

/* Ends the current frame as a commit pass through every layer does (each
 * row's clock becomes its frame_pos; the batch stays current, ENDED): how a
 * frame replayed from a CUDA graph ends (the model cannot see inside a
 * replay: a commit pass that did not run is missing from the rings). Host
 * only (enqueues and waits for nothing). A frame already ended: RKV_OK,
 * nothing changes. Errors: RKV_ERR_STATE (no current batch). */
RKV_API rkv_status rkv_model_end_frame(rkv_model *model);

/* Closes the current batch; an open frame is abandoned ("Frames" above):
 * no clock changes, every row may begin the same frame again. RKV_OK also
 * when there is no current batch. Host only. */
RKV_API rkv_status rkv_model_abandon_frame(rkv_model *model);

/* Waits until everything the model enqueued has run, then reports the
 * first failure recorded on the device since the last call (CUDA: an
 * asynchronous launch failure, or a row a kernel refused; the message
 * names it). CPU: RKV_OK at once. Not capture-safe. Errors: the backend's
 * (RKV_ERR_STATE, RKV_ERR_RANGE, RKV_ERR_INVALID_ARG). */
RKV_API rkv_status rkv_model_synchronize(rkv_model *model);

/* The per-pass calls with the batch spelled out (and checked): after the
 * model, layer (RKV_ERR_RANGE), B (1..S) and every row's session (range,
 * distinct, claimed), session_idx must list the current batch exactly, in
 * its begin_frame order (RKV_ERR_STATE for a row not in it or a frame not
 * open / current; RKV_ERR_INVALID_ARG for another B or order); then they
 * are rkv_model_frame_upsert, _attend and _step, capture-safe as those.
 *
 * ring (rkv_model_upsert and rkv_model_attend): NULL, or a layer that wraps
 * the caller's copy of layer `layer`'s storage (rkv_layer_wrap, on the
 * model's backend, the layer's geometry): the same checks, bookkeeping and
 * messages, but ring's K/V and written bits are read and written instead
 * of the layer's own (ring == rkv_model_layer(model, layer) is the layer
 * itself). So a framework that runs the call on a copy of the storage
 * (PyTorch's functionalization under torch.compile writes a clone and
 * copies it back) keeps the model's clocks and writes only its buffers.
 * Errors with a ring, after the layer's: RKV_ERR_STATE (ring on another
 * backend than the model's), RKV_ERR_INVALID_ARG (a geometry other than
 * the layer's, naming the first field that differs). Writers of the model
 * (docs/thread-safety.md). */
RKV_API rkv_status rkv_model_upsert(rkv_model *model, int64_t layer, const rkv_layer *ring,
                                    int64_t batch, const int64_t *session_idx, const void *kv,
                                    rkv_dtype kv_dtype, int commit);
RKV_API rkv_status rkv_model_attend(rkv_model *model, int64_t layer, const rkv_layer *ring,
                                    int64_t batch, const int64_t *session_idx,
                                    const rkv_attention_args *args);
RKV_API rkv_status rkv_model_step(rkv_model *model, int64_t layer, int64_t batch,
                                  const int64_t *session_idx, const void *kv,
                                  rkv_dtype kv_dtype, int commit,
                                  const rkv_attention_args *args);

/* ------------------------------------------------------------------------ */
/* Snapshots: files and in-memory images (docs/snapshot-format.md)          */
/* ------------------------------------------------------------------------ */

/* Snapshot files hold one session in the safetensors layout (an 8-byte
 * little-endian header length, a JSON header, raw little-endian tensors);
 * docs/snapshot-format.md is the full description. Tensors, per layer i:
 *   "layer.{i}.k", "layer.{i}.v": [H][C][D] in the storage dtype ("F32",
 *       "F16", "BF16"), the session's K / V span (rkv_span_part);
 *   "layer.{i}.written": [C] "U8", the session's written bits.
 * "__metadata__" strings: format ("ringkv-snapshot"), format_version,
 * geometry (dtype, n_layers, n_q_heads, n_kv_heads, d_head,
 * tokens_per_frame, per-layer ring_frames / ring_buckets / pinned_dilation
 * lists), last_committed (the clock; -1 none), data_xxh3 (XXH3-64 of the
 * data section) and header_xxh3 (XXH3-64 of the length and header bytes
 * with its own 16 digits read as '0'), plus model, request_id, session,
 * ringkv_version for information. */
#define RKV_SNAPSHOT_FORMAT "ringkv-snapshot"
#define RKV_SNAPSHOT_VERSION 1

/* What a valid snapshot holds (filled by rkv_snapshot_inspect).
 * Texts: ringkv_version is printable ASCII; request_id and config.name are
 * the saved bytes (any but NUL; the file hex-codes other than printable
 * ASCII as request_id_hex and model_hex), so a program escapes them before
 * printing (`ringkv inspect` shows \xNN). A plain-text field holding other
 * bytes is refused at load (ringkv never writes one).
 * Grows ("Structs that grow" above): the caller sets struct_size
 * (RKV_SNAPSHOT_INFO_INIT); config is filled with struct_size =
 * sizeof(rkv_model_config). When the embedded config grows, the later
 * members move: the library keeps writing the older layouts it knows. */
typedef struct rkv_snapshot_info {
    size_t struct_size;                   /* sizeof(rkv_snapshot_info)   */
    int64_t format_version;               /* RKV_SNAPSHOT_VERSION        */
    char ringkv_version[16];              /* of the writer ("" unknown)  */
    char request_id[RKV_MAX_REQUEST_ID];  /* of the saved session        */
    int64_t source_session;               /* its index (-1 unknown)      */
    rkv_model_config config;   /* geometry; name = the model's name,
                                  num_sessions = 1: pass it (with any
                                  num_sessions) to rkv_model_create to get
                                  a model that can load the file          */
    int64_t last_committed;    /* the saved clock; -1: no clock           */
    uint64_t file_bytes;       /* 8 + header_bytes + data_bytes           */
    uint64_t header_bytes;     /* the JSON header, padding included       */
    uint64_t data_bytes;       /* the tensors                             */
    uint64_t header_xxh3;      /* the two checksums (verified)            */
    uint64_t data_xxh3;
} rkv_snapshot_info;
#define RKV_SNAPSHOT_INFO_INIT RKV__SIZED_INIT(rkv_snapshot_info)

/* Saves held session `session` (between frames) to the file `path`,
 * atomically: the image goes to a temporary file "PATH.tmp-XXXXXX" in the
 * same directory (".ringkv.tmp-XXXXXX" when PATH's last component is over
 * 244 bytes), fsync'ed and renamed over `path` (an existing file keeps its
 * permission bits; new files get 0644), then the directory is fsync'ed
 * (best effort, not reported). A crash or error leaves an existing `path`
 * intact; on error the temporary file is removed. A symbolic link is
 * followed to its final target, which receives the image (the link stays).
 * Reads the model only. Errors: RKV_ERR_INVALID_ARG (empty path),
 * RKV_ERR_RANGE, RKV_ERR_STATE (not claimed, or inside a frame), RKV_ERR_IO
 * (before anything is written: `path` or its target a folder or an
 * existing file that is not a regular file -- the kind named --, its
 * folder missing, a loop of links; then create, write, fsync, rename, with
 * strerror), RKV_ERR_NO_MEMORY. docs/snapshot-format.md "Atomic save". */
RKV_API rkv_status rkv_model_save_session(const rkv_model *model, int64_t session,
                                          const char *path);

/* The same image in memory: *file_bytes receives its exact size; with
 * buf == NULL only the size is computed, else buf (buf_bytes long)
 * receives the image. Errors as above, plus RKV_ERR_INVALID_ARG (buf_bytes
 * too small), RKV_ERR_OVERFLOW (an image larger than size_t). */
RKV_API rkv_status rkv_model_save_session_mem(const rkv_model *model, int64_t session,
                                              void *buf, size_t buf_bytes,
                                              size_t *file_bytes);

/* Loads the snapshot file `path` into held session `session` (not inside a
 * frame) of a model of the snapshot's geometry (dtype, n_layers,
 * n_kv_heads, d_head, tokens_per_frame, per-layer RF / RB / PD; the name,
 * num_sessions and n_q_heads may differ): bit-exact, with the saved clock
 * (the next frame is last_committed + 1, any when none); the session keeps
 * its request id. Everything is validated first; the message says which:
 *  - RKV_ERR_FORMAT "truncated" (file shorter than its header or tensors
 *    say), "corrupted header length", "corrupted header" (not strict JSON,
 *    a key twice in an object, bad metadata or tensor table, a number that
 *    is not an integer in canonical form where one belongs, header checksum
 *    mismatch; the key is named), "corrupted data" (data checksum mismatch,
 *    bad written bits), "not a ringkv snapshot", "unsupported format
 *    version", "wrong geometry" (naming the field). Bytes of the file in a
 *    message are escaped (\xNN), never echoed raw;
 *  - RKV_ERR_IO: cannot open or read, or `path` is not a regular file (a
 *    named pipe is refused at once). The file is read twice (verify, then
 *    copy); if it changes between the reads (another writer replacing it in
 *    place; ringkv's saves never do), the session is reset to empty with no
 *    clock and RKV_ERR_IO says so;
 *  - RKV_ERR_INVALID_ARG ("path is empty"), RKV_ERR_RANGE, RKV_ERR_STATE
 *    (not claimed, or inside a frame), RKV_ERR_NO_MEMORY.
 * Memory: a 1 MiB read buffer, the header, and one head's span of the
 * largest layer (C*D elements) through which the data reaches the backend. */
RKV_API rkv_status rkv_model_load_session(rkv_model *model, int64_t session,
                                          const char *path);

/* Validates a snapshot completely (everything load checks but the model's
 * geometry: both checksums, tensor table, written bits) and, when info !=
 * NULL, fills *info. The snapshot is the file `path`
 * when path != NULL (buf must then be NULL and bytes 0), else the image buf
 * of `bytes` bytes (read only). Errors as rkv_model_load_session
 * (RKV_ERR_FORMAT with the class, RKV_ERR_IO for a file, RKV_ERR_NULL:
 * neither path nor buf), RKV_ERR_INVALID_ARG (both path and buf, nonzero
 * bytes with a path, an empty path, and -- checked first, before reading
 * -- an info->struct_size that is 0 or of no version this library knows). */
RKV_API rkv_status rkv_snapshot_inspect(const char *path, const void *buf, size_t bytes,
                                        rkv_snapshot_info *info);

/* In-memory images: a session's snapshot in a buffer of one size per model
 * (undo, copies across models of one geometry). The image is the snapshot
 * file's format (what rkv_model_save_session_mem writes) with its JSON
 * header padded with spaces to the longest header any session of the model
 * can have, so every image is rkv_model_snapshot_bytes long;
 * rkv_snapshot_inspect, `ringkv inspect` (from a file) and
 * rkv_model_restore read it. A copy within one model: rkv_model_fork.
 *  rkv_model_snapshot_bytes: that size; 0 for NULL or beyond size_t.
 *  rkv_model_snapshot: writes held session `session`'s image into buf
 *    (buf_bytes >= rkv_model_snapshot_bytes). Errors: RKV_ERR_RANGE,
 *    RKV_ERR_STATE (not claimed, inside a frame), RKV_ERR_INVALID_ARG
 *    (buf_bytes too small), RKV_ERR_NO_MEMORY, the backend's copy errors.
 *  rkv_model_restore: rkv_model_load_session (its checks first, its errors
 *    but RKV_ERR_IO) from an image in memory (buf: buf_bytes bytes, read
 *    only: this model's images, a file's bytes, one received over the
 *    network) into held session `session`.
 * Heap: after a session's first image of a request id, neither call
 * allocates (an undo every frame, issue 20): the model keeps the session's
 * header, built once (JSON, Jansson), writes it with each image's clock and
 * checksums, and reads an image whose header is that one byte for byte
 * outside those digits without parsing it again (every check still made:
 * the clock canonical and >= -1, both checksums, the data's size and
 * written bits); any other header is parsed in full. Two snapshots of one
 * session at once: the second allocates. Cost: bench/RESULTS.md
 * (snapshot_us / restore_us). */
RKV_API size_t rkv_model_snapshot_bytes(const rkv_model *model);
RKV_API rkv_status rkv_model_snapshot(const rkv_model *model, int64_t session,
                                      void *buf, size_t buf_bytes);
RKV_API rkv_status rkv_model_restore(rkv_model *model, int64_t session,
                                     const void *buf, size_t buf_bytes);

/* ------------------------------------------------------------------------ */
/* Sessions that leave: offload and page-in (docs/migration.md)             */
/* ------------------------------------------------------------------------ */

/* A paged-out session's whole state (every layer's K/V span and written
 * bits, its clock and request id) was moved into a snapshot image (the
 * format of rkv_model_save_session_mem) and its slot freed. The model keeps
 * its request id reserved (rkv_model_claim refuses it) until it is paged in
 * or discarded, in a table of config.max_offloaded entries, with the
 * image's clock and data_xxh3, which the image that pages it in must match
 * (header keys a tool added, such as ringkv.ray's incarnation, do not
 * matter). Host only; not capture-safe. */

/* Entries of the table (the resolved max_offloaded) and how many are used;
 * 0 for NULL. */
RKV_API int64_t rkv_model_offload_capacity(const rkv_model *model);
RKV_API int64_t rkv_model_offloaded_count(const rkv_model *model);

/* Moves held session `session` (between frames) out of the model: its
 * image goes into buf as rkv_model_save_session_mem writes it (buf,
 * buf_bytes, *image_bytes as there; buf any host memory, fastest from
 * rkv_model_host_alloc), then the session is released and its request id
 * reserved. Errors (the session still held): RKV_ERR_RANGE, RKV_ERR_STATE
 * (not claimed, inside a frame), RKV_ERR_INVALID_ARG (buf_bytes too
 * small), RKV_ERR_FULL (the table is full: page in or discard one, or a
 * larger max_offloaded), RKV_ERR_NO_MEMORY, the backend's copy errors. A
 * backend failure while zeroing the freed slot (CUDA) is reported after
 * the offload stands, as rkv_model_release does. */
RKV_API rkv_status rkv_model_offload(rkv_model *model, int64_t session, void *buf,
                                     size_t buf_bytes, size_t *image_bytes);
/* The same into the file `path`, written as rkv_model_save_session does
 * (atomically); the session is released only once the file is renamed
 * into place. Errors as above and rkv_model_save_session's. */
RKV_API rkv_status rkv_model_offload_file(rkv_model *model, int64_t session,
                                          const char *path);

/* Brings a paged-out session back from its image (buf: `bytes` bytes,
 * read only) into the lowest free slot, bit-exact, with its request id
 * and clock; *session receives the slot and the reservation is dropped.
 * Checked before the session becomes held: header and geometry, the
 * request id (reserved here: RKV_ERR_NOT_FOUND otherwise), the image's
 * clock and data_xxh3 (RKV_ERR_STATE for an older image of the request), a
 * free slot (RKV_ERR_FULL), then, while the data is copied into that slot
 * (one pass), the data checksum and written bits: a mismatch zeroes the
 * slot again, keeps the reservation and reports RKV_ERR_FORMAT. Errors:
 * those, RKV_ERR_FORMAT (as rkv_model_restore), RKV_ERR_NO_MEMORY, the
 * backend's. */
RKV_API rkv_status rkv_model_page_in(rkv_model *model, const void *buf, size_t bytes,
                                     int64_t *session);
/* The same from the file `path` (read once); plus RKV_ERR_IO. */
RKV_API rkv_status rkv_model_page_in_file(rkv_model *model, const char *path,
                                          int64_t *session);

/* Whether request_id is paged out of this model: RKV_OK with its clock in
 * *last_committed (-1: none), else RKV_ERR_NOT_FOUND; RKV_ERR_INVALID_ARG
 * (empty or overlong id). */
RKV_API rkv_status rkv_model_offloaded_clock(const rkv_model *model,
                                             const char *request_id,
                                             int64_t *last_committed);
/* Drops the reservation of a paged-out request (its image is then of no use
 * to this model, and claim may reuse the id). RKV_ERR_NOT_FOUND when it is
 * not paged out; RKV_ERR_INVALID_ARG. */
RKV_API rkv_status rkv_model_offload_discard(rkv_model *model, const char *request_id);

/* Host memory for images: pinned (page-locked, cudaMallocHost) on a CUDA
 * model, 64-byte aligned heap memory on the CPU backend; contents
 * undefined. Free with rkv_model_host_free on the same model (NULL is a
 * no-op). Errors: RKV_ERR_INVALID_ARG (bytes 0),
 * RKV_ERR_NO_MEMORY, the backend's (CUDA: wrong current device). */
RKV_API rkv_status rkv_model_host_alloc(rkv_model *model, size_t bytes, void **ptr);
RKV_API void rkv_model_host_free(rkv_model *model, void *ptr);

/* ------------------------------------------------------------------------ */
/* Sessions that move: zero-copy regions, export and import                 */
/* ------------------------------------------------------------------------ */

/* A session lives in the model's storage as n_layers * (2H + 1) regions:
 * per layer, in this order, the rkv_span_part pieces K of heads 0..H-1, V
 * of heads 0..H-1 (each contiguous), then the written bits. The regions
 * in order, end to end, are the data section of the session's snapshot
 * image (so their XXH3-64 is its data_xxh3). A transfer engine registers
 * them as memory regions (NIXL, Mooncake: docs/migration.md) and copies
 * them; the destination reserves a slot, lists its regions, lets the engine
 * fill them, and imports the session with the source's metadata. */
/* Frozen (a later change is rkv_session_region_v2). */
typedef struct rkv_session_region {
    void *ptr;      /* BACKEND memory (which: `device`); owned by the
                       model, valid while the model lives                  */
    size_t bytes;   /* C*D*sizeof(dtype) for K/V, C for the written bits  */
    int32_t device; /* -1: host memory; else the CUDA device ordinal       */
    int32_t part;   /* rkv_span_part: RKV_SPAN_K, _V or _WRITTEN           */
    int64_t layer;
    int64_t head;   /* 0 for the written bits                              */
} rkv_session_region;

/* Regions of one session: n_layers * (2 * n_kv_heads + 1); 0 for NULL. */
RKV_API size_t rkv_model_session_region_count(const rkv_model *model);

/* Lists the regions of `session`: a held session between frames (the
 * source) or a slot reserved for import (the destination). regions:
 * caller array of max_regions (>= rkv_model_session_region_count) entries;
 * *count receives the number. Waits for the model's enqueued work first,
 * so the regions hold the committed state; they stay valid, and the
 * session unchanged, until the caller steps, releases, resets, restores or
 * imports it (keep it out of frames while an engine uses them). Errors:
 * RKV_ERR_RANGE, RKV_ERR_STATE (neither held nor reserved; inside a frame;
 * a backend that exposes no regions), RKV_ERR_INVALID_ARG (max_regions). */
RKV_API rkv_status rkv_model_session_regions(rkv_model *model, int64_t session,
                                             rkv_session_region *regions,
                                             size_t max_regions, size_t *count);

/* The session metadata: what an importer checks before a session becomes
 * live. Version 3: the session's snapshot header (docs/snapshot-format.md:
 * the 8-byte header length and the JSON header with geometry, clock,
 * request id and a tensor table whose byte ranges are the regions in
 * order), padded to rkv_model_session_meta_bytes() - 8 bytes, data_xxh3
 * 0000000000000000 (export does not hash K/V: rkv_model_session_digest
 * does), and two more keys: "session_meta_version" ("3",
 * RKV_SESSION_META_VERSION) and "written_xxh3" (XXH3-64 of the written
 * bits, every layer's written region in order: an unfilled slot is refused
 * at import). docs/migration.md. Version 2 (the binary "RKVSESS" blob) is
 * refused. rkv_model_session_meta_bytes: its size for any session of this
 * model; 0 for NULL or out of memory. */
#define RKV_SESSION_META_VERSION 3
RKV_API size_t rkv_model_session_meta_bytes(const rkv_model *model);
/* Writes held session `session`'s metadata (between frames) into the
 * first rkv_model_session_meta_bytes bytes of meta (meta_bytes >= that).
 * Reads the model only, its written bits through the backend (CUDA: waits
 * for the queued work, needs the device current; not capture-safe).
 * Errors: RKV_ERR_RANGE, RKV_ERR_STATE (not claimed, inside a frame),
 * RKV_ERR_INVALID_ARG (meta_bytes too small, or meta inside the model's
 * storage), RKV_ERR_NO_MEMORY, the backend's. */
RKV_API rkv_status rkv_model_session_export_meta(const rkv_model *model,
                                                 int64_t session, void *meta,
                                                 size_t meta_bytes);

/* XXH3-64 of a session's regions in order (= the data_xxh3 of its snapshot
 * image): of a held session between frames or of a slot reserved for
 * import (to verify what an engine wrote before importing it). Host regions
 * are hashed in place; device regions are read through a host buffer.
 * Errors as rkv_model_session_regions, plus the backend's copy errors. */
RKV_API rkv_status rkv_model_session_digest(rkv_model *model, int64_t session,
                                            uint64_t *xxh3);

/* Reserves the lowest free slot, its regions zeroed, for importing the
 * session that `meta` describes; *session receives it. Until the import
 * ends claim neither hands the slot out nor accepts the request id
 * (RKV_ERR_STATE). meta: the exporter's rkv_model_session_meta_bytes bytes
 * (its size may differ from this model's). Errors: RKV_ERR_FORMAT (not
 * metadata of version RKV_SESSION_META_VERSION, damaged -- the snapshot
 * header's checks --, or of another geometry: the field named),
 * RKV_ERR_STATE (the request id is held, paged out or being imported
 * here), RKV_ERR_FULL (no free slot: refused before the source gives
 * anything up). */
RKV_API rkv_status rkv_model_import_reserve(rkv_model *model, const void *meta,
                                            size_t meta_bytes, int64_t *session);
/* Everything rkv_model_session_import checks, without changing anything:
 * the slot is reserved, meta is valid and the one it was reserved with,
 * the written bits in its regions keep the layer's invariant
 * (RKV_ERR_FORMAT naming layer and slot) and hash to meta's written_xxh3
 * (a slot never filled, or with another written pattern, is RKV_ERR_FORMAT;
 * a session with the same bits is not told apart). K/V bytes are not
 * hashed: compare rkv_model_session_digest with the source's. */
RKV_API rkv_status rkv_model_import_check(const rkv_model *model, int64_t session,
                                          const void *meta, size_t meta_bytes);
/* Makes the reserved slot live: checked as rkv_model_import_check, then
 * held by the request id with meta's clock (next frame last_committed + 1).
 * A refused import leaves the slot reserved (fill it again, or cancel).
 * Errors: RKV_ERR_RANGE, RKV_ERR_STATE (not reserved),
 * RKV_ERR_FORMAT, the backend's (reading the written bits). */
RKV_API rkv_status rkv_model_session_import(rkv_model *model, int64_t session,
                                            const void *meta, size_t meta_bytes);
/* Cancels a reservation: the slot is zeroed and free again, the request id
 * no longer reserved. Errors: RKV_ERR_RANGE, RKV_ERR_STATE (not
 * reserved); a backend failure while zeroing is reported after the slot
 * is freed. */
RKV_API rkv_status rkv_model_import_cancel(rkv_model *model, int64_t session);

/* The plain copy an engine would do, within one process: every region of
 * held session src_session of `src` (between frames) into the regions of
 * slot dst_session of `dst`, reserved for import (models of one geometry;
 * any backends: host regions are copied with memcpy, others through a
 * host buffer by the backends' span copies). Reads src only; writes only
 * the reserved slot. Then rkv_model_session_import(dst, dst_session, meta)
 * with src's metadata makes it live. Errors: RKV_ERR_RANGE,
 * RKV_ERR_STATE (src not held or inside a frame, dst not reserved),
 * RKV_ERR_FORMAT (geometries differ), RKV_ERR_NO_MEMORY, the backends'. */
RKV_API rkv_status rkv_model_transfer_session(const rkv_model *src, int64_t src_session,
                                              rkv_model *dst, int64_t dst_session);

#ifdef __cplusplus
}
#endif

/* The CPU backend's calls (ringkv_cpu.h; either header may come first). */
#include "ringkv_cpu.h"

#endif /* RINGKV_H */

/* Host-side planning of the CUDA backend's launches: argument checks, kernel
 * choice, grid shapes, shared memory and workspace sizes. Pure C with no
 * CUDA header, so that it is unit-tested on machines without a GPU
 * (tests/test_cuda_host.c links plan.c's object library, plan.cmake) and
 * shared by the .cu files. */
#ifndef RKV_CUDA_PLAN_H
#define RKV_CUDA_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "ringkv.h"
#include "ringkv_cuda.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The arguments of one attention launch: the core's rkv_attention_args
 * (ringkv.h; pool unused). */
typedef rkv_attention_args rkv_cuda_attention_args;
#define RKV_CUDA_ATTENTION_ARGS_INIT RKV_ATTENTION_ARGS_INIT

/* The backend's limits (its table's `limits`): the kernels check rows of
 * one launch against RKV_CUDA_MAX_BATCH, the generic kernel takes D up to
 * RKV__SIMT_MAX_D, the grid's y dimension 65535 KV heads, and every
 * per-pass buffer is read in 16-byte vectors. */
#define RKV__CUDA_LIMITS {RKV_CUDA_MAX_BATCH, 256, 65535, 16, 0}
/* The most rows one launch on S sessions takes: min(S, RKV_CUDA_MAX_BATCH). */
static inline int64_t rkv__cuda_max_batch(int64_t S) {
    return S < RKV_CUDA_MAX_BATCH ? S : RKV_CUDA_MAX_BATCH;
}

/* What the planner needs to know about the GPU (cudaGetDeviceProperties,
 * read once per process and device: backend_cuda.cu's prepare). */
typedef struct rkv__cuda_device_info {
    int sm_count;          /* multiprocessors                              */
    size_t smem_optin;     /* max dynamic shared memory per block (opt-in)  */
    int cc_major;          /* compute capability major (9 = Hopper)         */
} rkv__cuda_device_info;

/* ---- fused upsert ---------------------------------------------------------
 * One 1-D grid: `data_blocks` blocks copy 16-byte vectors of the B frames
 * (row r = (c*H + h)*B + b of the input, i.e. input [2H*B][T*D]; each block
 * covers UPSERT_VECS_PER_BLOCK vectors of one row), then `bits_blocks`
 * blocks write the written bits of committed rows and the visibility row. */
#define RKV__UPSERT_THREADS 256
#define RKV__UPSERT_VECS_PER_THREAD 4
#define RKV__UPSERT_VECS_PER_BLOCK (RKV__UPSERT_THREADS * RKV__UPSERT_VECS_PER_THREAD)
#define RKV__UPSERT_MAX_BITS_BLOCKS 64

typedef struct rkv__cuda_upsert_plan {
    int64_t rows;            /* 2*H*B input rows                             */
    int64_t row_vecs;        /* 16-byte vectors per row: T*D*esz/16          */
    int64_t blocks_per_row;
    int64_t data_blocks;
    int64_t bits_vecs;       /* 16-byte vectors of bit work                  */
    int64_t bits_blocks;
    int64_t total_blocks;
    size_t smem_bytes;       /* B rows' (session, clock) staged for checks   */
} rkv__cuda_upsert_plan;

/* The plan of one fused upsert (arguments checked by the core). */
void rkv__cuda_upsert_plan_make(const rkv_geometry *g, int64_t batch, int commit, int with_visible,
                                rkv__cuda_upsert_plan *out);

/* ---- reset ------------------------------------------------------------- */
typedef struct rkv__cuda_reset_plan {
    int64_t rows;            /* 2*H spans of C*D elements                     */
    int64_t row_vecs;        /* 16-byte vectors per span                      */
    int64_t blocks_per_row;
    int64_t data_blocks;
    int64_t bits_blocks;     /* C bytes of written bits                       */
    int64_t total_blocks;
} rkv__cuda_reset_plan;
void rkv__cuda_reset_plan_make(const rkv_geometry *g, rkv__cuda_reset_plan *out);

/* ---- attention ------------------------------------------------------------
 * The tensor-core kernels' configurations (the .cu files instantiate
 * exactly these; what a block's rows and key tiles are: RingBlock,
 * attention_common.cuh). */
enum { RKV__ATTN_SIMT = 0, RKV__ATTN_MMA = 1, RKV__ATTN_WGMMA = 2 };

/* Which tensor-core kernel a layer asks for (RKV_CUDA_ATTN_KERNEL at layer
 * creation): mma.sync (sm_80+, the default) or wgmma (sm_90a, D 64 only,
 * planned only on a compute capability 9.x device; falls back to mma
 * elsewhere). */
enum { RKV__KERNEL_MMA = 0, RKV__KERNEL_WGMMA = 1 };
/* The wgmma kernel's configuration (attention_wgmma.cuh): 2 warpgroups of
 * 64 query rows per block, 64-key tiles, 3 cp.async stages, 2 blocks/SM. */
#define RKV__WGMMA_WARPGROUPS 2
#define RKV__WGMMA_BN 64
#define RKV__WGMMA_STAGES 3

#define RKV__MMA_BN 64
#define RKV__MMA_WARPS 4
#define RKV__MMA_D64_MT 2   /* m16 tiles per warp: 32 query rows per warp   */
#define RKV__MMA_D128_MT 1  /* 16 query rows per warp                       */
#define RKV__MMA_CTAS_PER_SM 2
/* Static shared memory kept aside beside a block's dynamic shared memory
 * (the runtime caps their sum at the opt-in limit): the most any tensor-core
 * kernel declares (wgmma: 1,024, its aligned dynamic array padding it). */
#define RKV__STATIC_SMEM_MAX 1024
#define RKV__MAX_SPLITS 8

#define RKV__SIMT_WARPS 4   /* generic kernel: one warp per query row        */
#define RKV__SIMT_MAX_D 256

typedef struct rkv__cuda_attn_plan {
    int kind;                /* RKV__ATTN_SIMT, _MMA or _WGMMA                */
    rkv_dtype dtype;         /* storage dtype                                 */
    int d_head;
    int out_f32;             /* mma: output written as f32 (else q dtype)     */
    int bm, bn, warps, mt, stages, threads;
    int64_t tq;              /* queries per row                               */
    int64_t group;           /* Hq / H                                        */
    int64_t rows_per_kvh;    /* group * Tq                                    */
    int64_t m_tiles;         /* ceil(rows_per_kvh / bm)                       */
    int64_t total_rows;      /* B * Hq * Tq: output rows                      */
    int64_t ctas;            /* blocks without splitting                      */
    int splits;              /* key-range splits (1 = none)                   */
    int64_t grid_x, grid_y, grid_z;
    size_t smem_bytes;       /* dynamic shared memory per block               */
    size_t workspace_bytes;  /* needed by `splits` (0 when splits == 1)       */
    int64_t max_key_tiles;   /* (RF + 1) * T / bn: an upper bound per row     */
    float scale;             /* resolved softmax scale                        */
} rkv__cuda_attn_plan;

/* The host checks of a launch's arguments (the describe calls', named
 * after `what`): the core's one attention check (attention_check.h) with
 * this backend's limits (B at most min(S, RKV_CUDA_MAX_BATCH)), then the
 * workspace's alignment and the generic kernel's grid. */
rkv_status rkv__cuda_attention_check(const char *what, const rkv_geometry *g,
                                     const rkv_cuda_attention_args *a);

/* The plan for valid args. `stages` is the cp.async pipeline depth of the
 * mma kernel (2 or 3; anything else means 2). `kernel` is RKV__KERNEL_MMA or
 * RKV__KERNEL_WGMMA (the latter where it applies: D 64, dev->cc_major 9).
 * `preferred` nonzero: ignore a->workspace and plan the preferred splits
 * (for the workspace query). */
void rkv__cuda_attention_plan_make(const rkv_geometry *g, const rkv_cuda_attention_args *a,
                                   const rkv__cuda_device_info *dev, int stages, int kernel,
                                   int preferred, rkv__cuda_attn_plan *out);
/* Bytes of the split workspace: splits * rows * (D + 2) * 4. */
size_t rkv__cuda_split_workspace_bytes(int splits, int64_t total_rows, int d_head);
/* One-line description of a plan. */
void rkv__cuda_attention_plan_describe(const rkv__cuda_attn_plan *p, char *buf, size_t n);

/* ---- the model's table (backend_cuda.cu) ------------------------------- */
/* The attention workspace of a model's layer: the largest preferred split
 * workspace over B = 1..max_batch rows of n_q_heads heads and
 * tokens_per_frame queries, q and out in the storage dtype (other dtypes
 * run the generic kernel, which never splits). */
size_t rkv__cuda_model_workspace_bytes(const rkv_geometry *g, const rkv__cuda_device_info *dev,
                                       int stages, int kernel, int64_t max_batch,
                                       int64_t n_q_heads);
/* A caller's rkv_attention_args->struct_size (ringkv.h): RKV_ERR_INVALID_ARG
 * named after `what` unless this library knows it. */
rkv_status rkv__cuda_model_args_check(const char *what, const rkv_attention_args *a);
/* The launch arguments of the core's (checked) args, with this workspace. */
void rkv__cuda_model_attention_args(const rkv_attention_args *a, void *workspace,
                                    size_t workspace_bytes, rkv_cuda_attention_args *out);

/* Device error word: op << 24 | kind << 16 | row. */
enum { RKV__OP_UPSERT = 1, RKV__OP_ATTEND = 2, RKV__OP_ROW = 3 /* rkv_layer_visible_row */ };
enum { RKV__DEVERR_SESSION_RANGE = 1, RKV__DEVERR_SESSION_DUP = 2, RKV__DEVERR_CLOCK = 3,
       RKV__DEVERR_ARCH = 4 /* a kernel ran from a build without its architecture */ };
/* Turns a nonzero device error word into a status and a message. */
rkv_status rkv__cuda_device_error_status(int word, int64_t num_sessions);

#ifdef __cplusplus
}
#endif

#endif

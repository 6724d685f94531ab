/* Host-side planning of the CUDA backend (see plan.h): no CUDA header here. */
#include "plan.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "../attention_check.h"

static int64_t ceil_div64(int64_t a, int64_t b) { return (a + b - 1) / b; }

static size_t align16(size_t x) { return (x + 15) & ~(size_t)15; }

/* ---- upsert --------------------------------------------------------------- */

void rkv__cuda_upsert_plan_make(const rkv_geometry *g, int64_t batch, int commit, int with_visible,
                                rkv__cuda_upsert_plan *p) {
    const int64_t esz = (int64_t)rkv_dtype_size(g->dtype);
    const int64_t T = g->tokens_per_frame;
    const int64_t N = rkv_geometry_total_slots(g);
    p->rows = 2 * g->n_kv_heads * batch;
    /* T is a multiple of 128, so T*D*esz is a multiple of 256 bytes. */
    p->row_vecs = T * g->d_head * esz / 16;
    p->blocks_per_row = ceil_div64(p->row_vecs, RKV__UPSERT_VECS_PER_BLOCK);
    p->data_blocks = p->rows * p->blocks_per_row;
    /* With a visibility row (B == 1) the bit blocks walk all N slots and
     * also write the committed row's bits (same thread, same bytes: the row
     * is computed from the bits as they were before the commit). Without
     * one they walk the B committed frames only. */
    if (with_visible)
        p->bits_vecs = N / 16;
    else
        p->bits_vecs = commit ? batch * T / 16 : 0;
    int64_t bb = ceil_div64(p->bits_vecs, RKV__UPSERT_THREADS);
    p->bits_blocks = bb > RKV__UPSERT_MAX_BITS_BLOCKS ? RKV__UPSERT_MAX_BITS_BLOCKS : bb;
    p->total_blocks = p->data_blocks + p->bits_blocks;
    p->smem_bytes = (size_t)batch * 2 * sizeof(int64_t);
}

void rkv__cuda_reset_plan_make(const rkv_geometry *g, rkv__cuda_reset_plan *p) {
    const int64_t esz = (int64_t)rkv_dtype_size(g->dtype);
    const int64_t C = rkv_geometry_capacity(g);
    p->rows = 2 * g->n_kv_heads;
    p->row_vecs = C * g->d_head * esz / 16;
    p->blocks_per_row = ceil_div64(p->row_vecs, RKV__UPSERT_VECS_PER_BLOCK);
    p->data_blocks = p->rows * p->blocks_per_row;
    int64_t bb = ceil_div64(C / 16, RKV__UPSERT_THREADS);
    p->bits_blocks = bb > RKV__UPSERT_MAX_BITS_BLOCKS ? RKV__UPSERT_MAX_BITS_BLOCKS : bb;
    p->total_blocks = p->data_blocks + p->bits_blocks;
}

/* ---- attention ------------------------------------------------------------ */

rkv_status rkv__cuda_attention_check(const char *what, const rkv_geometry *g,
                                     const rkv_cuda_attention_args *a) {
    if (!a) return rkv_error_set(RKV_ERR_NULL, "%s: args is NULL", what);
    /* one version so far: every member is the caller's (ringkv.h, "Structs
     * that grow") */
    rkv_status st = rkv__struct_size_check(
        what, "args", "rkv_cuda_attention_args", "RKV_CUDA_ATTENTION_ARGS_INIT", a->struct_size,
        RKV__SIZE_V1(rkv_cuda_attention_args, workspace_bytes), sizeof *a);
    if (st != RKV_OK) return st;
    rkv_backend_limits lim = RKV__CUDA_LIMITS;
    lim.max_batch = rkv__cuda_max_batch(g->num_sessions);
    if ((st = rkv__attend_args_check(g, &lim, NULL, a, false, what)) != RKV_OK) return st;
    if (a->workspace && rkv__misaligned(a->workspace, 16))
        return rkv_error_set(RKV_ERR_INVALID_ARG, "%s: workspace is not 16-byte aligned", what);
    const int64_t tq = a->n_queries ? a->n_queries : g->tokens_per_frame;
    if (a->batch * a->n_q_heads * tq / RKV__SIMT_WARPS >= INT32_MAX)
        return rkv_error_set(RKV_ERR_OVERFLOW, "%s: B*Hq*Tq = %lld*%lld*%lld is too large", what,
                             (long long)a->batch, (long long)a->n_q_heads, (long long)tq);
    return RKV_OK;
}

size_t rkv__cuda_split_workspace_bytes(int splits, int64_t total_rows, int d_head) {
    if (splits <= 1) return 0;
    return (size_t)splits * (size_t)total_rows * (size_t)(d_head + 2) * sizeof(float);
}

/* Whether the tensor-core kernels take this call (ringkv_cuda.h, rkv_cuda_attention_describe). */
static int tensor_core_call(const rkv_geometry *g, const rkv_cuda_attention_args *a) {
    return (g->dtype == RKV_DTYPE_BF16 || g->dtype == RKV_DTYPE_F16) && a->q_dtype == g->dtype &&
           (a->out_dtype == g->dtype || a->out_dtype == RKV_DTYPE_F32) && !a->visible &&
           (g->d_head == 64 || g->d_head == 128);
}

/* A tensor-core kernel's shape: `mt` m16 tiles per warp (wgmma: per
 * warpgroup), bm query rows and bn keys per tile, `stages` K/V stages. Its
 * shared memory: the Q tile, the K and V stages (2-byte elements), the
 * frame list, then `pad` bytes (wgmma: 1024, to align the tiles to the
 * 128-byte swizzle's 1024-byte pattern). 0 when that does not fit beside
 * the static reserve. */
static int plan_tensor_core(const rkv_geometry *g, const rkv__cuda_device_info *dev, int kind,
                            int mt, int warps, int bm, int bn, int stages, size_t pad,
                            rkv__cuda_attn_plan *p) {
    p->kind = kind;
    p->mt = mt;
    p->warps = warps;
    p->bm = bm;
    p->bn = bn;
    p->stages = stages;
    p->threads = 32 * warps;
    p->smem_bytes = (size_t)(bm + 2 * stages * bn) * (size_t)g->d_head * 2 +
                    align16((size_t)(g->ring_frames + 1) * sizeof(int)) + pad;
    return p->smem_bytes + RKV__STATIC_SMEM_MAX <= dev->smem_optin;
}

/* The generic kernel: one warp per row, its grid (no key tiles or stages:
 * 0, also after a tensor-core plan that did not fit). */
static void plan_simt(const rkv_cuda_attention_args *a, rkv__cuda_attn_plan *p) {
    p->kind = RKV__ATTN_SIMT;
    p->mt = p->bn = p->stages = 0;
    p->warps = RKV__SIMT_WARPS;
    p->bm = p->warps;
    p->threads = 32 * p->warps;
    p->smem_bytes = (size_t)a->batch * 2 * sizeof(int64_t);
    p->m_tiles = ceil_div64(p->total_rows, p->warps);
    p->ctas = p->m_tiles;
    p->grid_x = p->m_tiles;
    p->grid_y = 1;
    p->grid_z = 1;
}

/* A tensor-core plan's grid and key splits. Split the keys of each row when
 * one wave would leave SMs idle: the partial results (unnormalized f32
 * output, running max and sum) go to the workspace and a second kernel
 * combines them. Unless `preferred`, only as many splits as a->workspace
 * holds. */
static void plan_grid_splits(const rkv_geometry *g, const rkv_cuda_attention_args *a,
                             const rkv__cuda_device_info *dev, int preferred,
                             rkv__cuda_attn_plan *p) {
    const int64_t D = g->d_head, H = g->n_kv_heads;
    p->m_tiles = ceil_div64(p->rows_per_kvh, p->bm);
    p->ctas = p->m_tiles * H * a->batch;
    p->max_key_tiles = (g->ring_frames + 1) * (g->tokens_per_frame / p->bn);
    const int64_t target = (int64_t)dev->sm_count * RKV__MMA_CTAS_PER_SM;
    int64_t s = 1;
    if (p->ctas * 2 <= target) {
        s = target / p->ctas;
        if (s > RKV__MAX_SPLITS) s = RKV__MAX_SPLITS;
        if (s > p->max_key_tiles / 2) s = p->max_key_tiles / 2;
        if (s < 1) s = 1;
    }
    if (!preferred) {
        while (s > 1 && (!a->workspace ||
                         rkv__cuda_split_workspace_bytes((int)s, p->total_rows, (int)D) >
                             a->workspace_bytes))
            s--;
    }
    p->splits = (int)s;
    p->workspace_bytes = rkv__cuda_split_workspace_bytes(p->splits, p->total_rows, (int)D);
    p->grid_x = p->m_tiles * p->splits;
    p->grid_y = H;
    p->grid_z = a->batch;
}

void rkv__cuda_attention_plan_make(const rkv_geometry *g, const rkv_cuda_attention_args *a,
                                   const rkv__cuda_device_info *dev, int stages, int kernel,
                                   int preferred, rkv__cuda_attn_plan *p) {
    const int64_t D = g->d_head;
    memset(p, 0, sizeof *p);
    p->dtype = g->dtype;
    p->d_head = (int)D;
    p->tq = a->n_queries ? a->n_queries : g->tokens_per_frame;
    p->group = a->n_q_heads / g->n_kv_heads;
    p->rows_per_kvh = p->group * p->tq;
    p->total_rows = a->batch * a->n_q_heads * p->tq;
    p->scale = a->scale != 0.0f ? a->scale : 1.0f / sqrtf((float)D);
    p->splits = 1;
    p->out_f32 = a->out_dtype == RKV_DTYPE_F32;
    if (stages != 3) stages = 2;

    /* The Hopper kernel where asked for and it fits (D 64 on a 9.x device:
     * 2 warpgroups of 64 rows), else the mma kernel where it fits (3 stages
     * are built for D 64 only), else the generic one. */
    const int tc = tensor_core_call(g, a), mt = D == 64 ? RKV__MMA_D64_MT : RKV__MMA_D128_MT;
    if ((tc && kernel == RKV__KERNEL_WGMMA && D == 64 && dev->cc_major == 9 &&
         plan_tensor_core(g, dev, RKV__ATTN_WGMMA, 4, 4 * RKV__WGMMA_WARPGROUPS,
                          64 * RKV__WGMMA_WARPGROUPS, RKV__WGMMA_BN, RKV__WGMMA_STAGES, 1024, p)) ||
        (tc && plan_tensor_core(g, dev, RKV__ATTN_MMA, mt, RKV__MMA_WARPS, 16 * mt * RKV__MMA_WARPS,
                                RKV__MMA_BN, D == 64 ? stages : 2, 0, p)))
        plan_grid_splits(g, a, dev, preferred, p);
    else
        plan_simt(a, p);
}

void rkv__cuda_attention_plan_describe(const rkv__cuda_attn_plan *p, char *buf, size_t n) {
    if (!buf || !n) return;
    const char *dt = rkv_dtype_name(p->dtype);
    if (p->kind == RKV__ATTN_MMA || p->kind == RKV__ATTN_WGMMA)
        snprintf(buf, n,
                 "%s %s d%d out=%s bm%d bn%d warps%d mt%d stages%d grid %lldx%lldx%lld splits %d "
                 "smem %zu workspace %zu rows %lld",
                 p->kind == RKV__ATTN_WGMMA ? "wgmma" : "mma", dt, p->d_head,
                 p->out_f32 ? "f32" : dt, p->bm, p->bn, p->warps, p->mt, p->stages,
                 (long long)p->grid_x, (long long)p->grid_y, (long long)p->grid_z, p->splits,
                 p->smem_bytes, p->workspace_bytes, (long long)p->total_rows);
    else
        snprintf(buf, n, "simt %s d%d out=%s warps%d grid %lld smem %zu rows %lld", dt, p->d_head,
                 p->out_f32 ? "f32" : "q-or-storage", p->warps, (long long)p->grid_x,
                 p->smem_bytes, (long long)p->total_rows);
}

/* ---- the model's table ------------------------------------------------------ */

size_t rkv__cuda_model_workspace_bytes(const rkv_geometry *g, const rkv__cuda_device_info *dev,
                                       int stages, int kernel, int64_t max_batch,
                                       int64_t n_q_heads) {
    size_t most = 0;
    for (int64_t b = 1; b <= max_batch && b <= rkv__cuda_max_batch(g->num_sessions); b++) {
        rkv_cuda_attention_args a = RKV_CUDA_ATTENTION_ARGS_INIT;
        a.batch = b;
        a.n_q_heads = n_q_heads;
        a.q_dtype = a.out_dtype = g->dtype;
        rkv__cuda_attn_plan p;
        rkv__cuda_attention_plan_make(g, &a, dev, stages, kernel, 1, &p);
        if (p.workspace_bytes > most) most = p.workspace_bytes;
    }
    return most;
}

rkv_status rkv__cuda_model_args_check(const char *what, const rkv_attention_args *a) {
    return rkv__struct_size_check(what, "args", "rkv_attention_args", "RKV_ATTENTION_ARGS_INIT",
                                  a->struct_size, RKV__ATTENTION_ARGS_V1, sizeof *a);
}

void rkv__cuda_model_attention_args(const rkv_attention_args *a, void *workspace,
                                    size_t workspace_bytes, rkv_cuda_attention_args *out) {
    *out = *a;
    out->struct_size = sizeof *out;
    out->workspace = workspace;
    out->workspace_bytes = workspace ? workspace_bytes : 0;
}

rkv_status rkv__cuda_device_error_status(int word, int64_t num_sessions) {
    const int op = (word >> 24) & 0xff, kind = (word >> 16) & 0xff, row = word & 0xffff;
    const char *what = op == RKV__OP_UPSERT   ? "rkv_layer_upsert"
                       : op == RKV__OP_ATTEND ? "rkv_layer_attend"
                       : op == RKV__OP_ROW    ? "rkv_layer_visible_row"
                                              : "a CUDA call";
    switch (kind) {
    case RKV__DEVERR_SESSION_RANGE:
        return rkv_error_set(RKV_ERR_RANGE,
                         "%s (device check): session_idx[%d] out of range for %lld sessions; the "
                         "call wrote nothing",
                         what, row, (long long)num_sessions);
    case RKV__DEVERR_SESSION_DUP:
        return rkv_error_set(RKV_ERR_INVALID_ARG,
                         "%s (device check): session_idx[%d] repeats an earlier row's session; "
                         "sessions must be distinct within a call; the call wrote nothing",
                         what, row);
    case RKV__DEVERR_CLOCK:
        return rkv_error_set(RKV_ERR_INVALID_ARG,
                         "%s (device check): frame_pos[%d] < 0; expected >= 0; the call wrote "
                         "nothing",
                         what, row);
    case RKV__DEVERR_ARCH:
        return rkv_error_set(RKV_ERR_STATE,
                         "%s (device check): the wgmma kernel ran from code built without "
                         "sm_90a (a bug of the kernel choice; set RKV_CUDA_ATTN_KERNEL=mma); "
                         "its output is not written",
                         what);
    default:
        return rkv_error_set(RKV_ERR_STATE, "%s (device check): unknown device error word 0x%08x",
                         what, (unsigned)word);
    }
}

/* Host-side logic of the CUDA backend, tested without a GPU: the argument
 * checks of the per-pass calls and the launch planning (kernel choice, grid,
 * shared memory, key splits and their workspace), which live in
 * src/cuda/plan.c (pure C, no CUDA header; linked as the object library
 * ringkv_cuda_plan, so the test builds whether or not CUDA is found). The
 * device side is tested by tests/cuda/test_cuda_diff.c on a GPU. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <string.h>

#include "plan.h"
#include "../src/internal.h" /* rkv__written_span_check */

static const rkv__cuda_device_info H200 = {132, 227 * 1024, 9};
/* An sm_80-class GPU: the wgmma kernel must never be planned there. */
static const rkv__cuda_device_info A100 = {108, 163 * 1024, 8};

static rkv_geometry geom(int64_t S, int64_t H, int64_t RF, int64_t RB, int64_t D, int64_t T,
                         int64_t PD, rkv_dtype dt) {
    rkv_geometry g = {S, H, RF, RB, D, T, PD, dt};
    return g;
}

/* The written bits a span write would install ([C] host bytes): 0/1,
 * scratch 1, frames whole; RKV_ERR_INVALID_ARG naming the first bad slot
 * (test-only: the core checks span writes, src/layer.c). */
static rkv_status rkv__cuda_written_check(const rkv_geometry *g, const char *what,
                                          const uint8_t *w) {
    const int64_t bad = rkv__written_span_check(g, w);
    if (bad < 0) return RKV_OK;
    return rkv_error_set(RKV_ERR_INVALID_ARG,
                         "%s: written bit of slot %lld is %u; expected 0/1, scratch slots 1, "
                         "ring frames written whole",
                         what, (long long)bad, w[bad]);
}

/* What the attention checks are named after. */
#define DESCRIBE "rkv_cuda_attention_describe"

/* Fake device addresses: the planner never dereferences them. */
#define DEV(x) ((void *)(uintptr_t)(x))

static rkv_cuda_attention_args args(int64_t B, int64_t Hq, rkv_dtype dt) {
    rkv_cuda_attention_args a = RKV_CUDA_ATTENTION_ARGS_INIT;
    a.batch = B;
    a.n_q_heads = Hq;
    a.q = DEV(0x100000);
    a.q_dtype = dt;
    a.out = DEV(0x40000000);
    a.out_dtype = dt;
    a.session_idx = (const int64_t *)DEV(0x7000);
    a.frame_pos = (const int64_t *)DEV(0x7100);
    return a;
}

#define EXPECT_STATUS(expr, status, needle)                                               \
    do {                                                                                  \
        rkv_status st_ = (expr);                                                          \
        assert_int_equal(st_, status);                                                    \
        if ((needle) && !strstr(rkv_last_error(), (needle)))                              \
            fail_msg("message '%s' lacks '%s'", rkv_last_error(), (const char *)(needle)); \
    } while (0)

static void test_upsert_plan_720p(void **state) {
    (void)state;
    rkv_geometry g = geom(8, 16, 16, 16, 64, 512, 1, RKV_DTYPE_BF16);
    rkv__cuda_upsert_plan p;
    rkv__cuda_upsert_plan_make(&g, 1, 0, 0, &p);
    assert_int_equal(p.rows, 32);                      /* 2*H*B */
    assert_int_equal(p.row_vecs, 512 * 64 * 2 / 16);   /* one frame of one head */
    assert_int_equal(p.blocks_per_row, 4);
    assert_int_equal(p.data_blocks, 128);
    assert_int_equal(p.bits_vecs, 0);                  /* no commit, no row */
    assert_int_equal(p.bits_blocks, 0);
    assert_int_equal(p.total_blocks, 128);
    assert_int_equal(p.smem_bytes, 16);

    rkv__cuda_upsert_plan_make(&g, 8, 1, 0, &p);
    assert_int_equal(p.rows, 256);
    assert_int_equal(p.data_blocks, 1024);
    assert_int_equal(p.bits_vecs, 8 * 512 / 16);       /* the committed frames' bits */
    assert_int_equal(p.bits_blocks, 1);
    assert_int_equal(p.total_blocks, 1025);
    assert_int_equal(p.smem_bytes, 8 * 16);

    rkv__cuda_upsert_plan_make(&g, 1, 1, 1, &p);       /* with the visibility row */
    assert_int_equal(p.bits_vecs, 8 * 8704 / 16);      /* all N slots */
    assert_int_equal(p.bits_blocks, (8 * 8704 / 16 + 255) / 256);
}

static void test_upsert_plan_small_and_odd(void **state) {
    (void)state;
    /* D = 1, f32: a frame is 128*4 = 512 bytes = 32 vectors */
    rkv_geometry g = geom(2, 3, 2, 2, 1, 128, 1, RKV_DTYPE_F32);
    rkv__cuda_upsert_plan p;
    rkv__cuda_upsert_plan_make(&g, 2, 1, 0, &p);
    assert_int_equal(p.row_vecs, 32);
    assert_int_equal(p.blocks_per_row, 1);
    assert_int_equal(p.rows, 12);
    assert_int_equal(p.bits_vecs, 2 * 128 / 16);
    /* every row's byte count is a multiple of 16 for any D, T % 128 == 0 */
    for (int64_t D = 1; D <= 130; D++)
        for (int dt = 0; dt < 3; dt++) {
            rkv_geometry h = geom(1, 1, 1, 1, D, 128, 1, (rkv_dtype)dt);
            rkv__cuda_upsert_plan_make(&h, 1, 0, 0, &p);
            assert_int_equal(p.row_vecs * 16, 128 * D * (int64_t)rkv_dtype_size((rkv_dtype)dt));
        }
    /* bits blocks are capped */
    rkv_geometry big = geom(64, 1, 64, 64, 64, 512, 1, RKV_DTYPE_BF16);
    rkv__cuda_upsert_plan_make(&big, 1, 1, 1, &p);
    assert_int_equal(p.bits_blocks, RKV__UPSERT_MAX_BITS_BLOCKS);
}

static void test_reset_plan(void **state) {
    (void)state;
    rkv_geometry g = geom(3, 2, 4, 4, 64, 128, 1, RKV_DTYPE_BF16);
    rkv__cuda_reset_plan p;
    rkv__cuda_reset_plan_make(&g, &p);
    assert_int_equal(p.rows, 4);
    assert_int_equal(p.row_vecs, 5 * 128 * 64 * 2 / 16);
    assert_int_equal(p.blocks_per_row, 5);
    assert_int_equal(p.bits_blocks, 1);
    assert_int_equal(p.total_blocks, 21);
}

static void test_attention_plan_720p(void **state) {
    (void)state;
    rkv_geometry g = geom(8, 16, 16, 16, 64, 512, 1, RKV_DTYPE_BF16);
    rkv_cuda_attention_args a = args(1, 32, RKV_DTYPE_BF16);
    assert_int_equal(rkv__cuda_attention_check(DESCRIBE, &g, &a), RKV_OK);
    rkv__cuda_attn_plan p;
    /* no workspace: one block per 128 rows of a (b, kv head) */
    rkv__cuda_attention_plan_make(&g, &a, &H200, 2, RKV__KERNEL_MMA, 0, &p);
    assert_int_equal(p.kind, RKV__ATTN_MMA);
    assert_int_equal(p.bm, 128);
    assert_int_equal(p.bn, 64);
    assert_int_equal(p.mt, 2);
    assert_int_equal(p.threads, 128);
    assert_int_equal(p.group, 2);
    assert_int_equal(p.tq, 512);
    assert_int_equal(p.rows_per_kvh, 1024);
    assert_int_equal(p.m_tiles, 8);
    assert_int_equal(p.ctas, 128);
    assert_int_equal(p.splits, 1);
    assert_int_equal(p.workspace_bytes, 0);
    assert_int_equal(p.grid_x, 8);
    assert_int_equal(p.grid_y, 16);
    assert_int_equal(p.grid_z, 1);
    assert_int_equal(p.total_rows, 32 * 512);
    assert_int_equal(p.smem_bytes, (128 + 2 * 2 * 64) * 64 * 2 + 80); /* + 17 ints, rounded */
    assert_true(p.scale > 0.1249f && p.scale < 0.1251f);
    /* preferred: two splits fill 2 blocks on each of 132 SMs */
    rkv__cuda_attention_plan_make(&g, &a, &H200, 2, RKV__KERNEL_MMA, 1, &p);
    assert_int_equal(p.splits, 2);
    assert_int_equal(p.grid_x, 16);
    const size_t need = (size_t)2 * 32 * 512 * (64 + 2) * 4;
    assert_int_equal(p.workspace_bytes, need);
    assert_int_equal(rkv__cuda_split_workspace_bytes(2, 32 * 512, 64), need);
    /* the workspace given decides */
    a.workspace = DEV(0x80000000);
    a.workspace_bytes = need;
    rkv__cuda_attention_plan_make(&g, &a, &H200, 2, RKV__KERNEL_MMA, 0, &p);
    assert_int_equal(p.splits, 2);
    a.workspace_bytes = need - 1;
    rkv__cuda_attention_plan_make(&g, &a, &H200, 2, RKV__KERNEL_MMA, 0, &p);
    assert_int_equal(p.splits, 1);
    assert_int_equal(p.workspace_bytes, 0);
    /* three stages: more shared memory */
    rkv__cuda_attention_plan_make(&g, &a, &H200, 3, RKV__KERNEL_MMA, 0, &p);
    assert_int_equal(p.stages, 3);
    assert_int_equal(p.smem_bytes, (128 + 2 * 3 * 64) * 64 * 2 + 80);
    /* B = 8 fills the GPU without splitting */
    a = args(8, 32, RKV_DTYPE_BF16);
    rkv__cuda_attention_plan_make(&g, &a, &H200, 2, RKV__KERNEL_MMA, 1, &p);
    assert_int_equal(p.ctas, 1024);
    assert_int_equal(p.splits, 1);
    assert_int_equal(p.grid_z, 8);
    /* 360P, B = 8: 256 blocks, no split either */
    rkv_geometry g360 = geom(8, 16, 16, 16, 64, 128, 8, RKV_DTYPE_BF16);
    rkv__cuda_attention_plan_make(&g360, &a, &H200, 2, RKV__KERNEL_MMA, 1, &p);
    assert_int_equal(p.m_tiles, 2);
    assert_int_equal(p.ctas, 256);
    assert_int_equal(p.splits, 1);
}

static void test_attention_plan_kernel_choice(void **state) {
    (void)state;
    rkv__cuda_attn_plan p;
    rkv_geometry g = geom(2, 2, 4, 4, 128, 128, 1, RKV_DTYPE_F16);
    rkv_cuda_attention_args a = args(2, 4, RKV_DTYPE_F16);
    rkv__cuda_attention_plan_make(&g, &a, &H200, 3, RKV__KERNEL_MMA, 0, &p);
    assert_int_equal(p.kind, RKV__ATTN_MMA);
    assert_int_equal(p.bm, 64);     /* D 128: one m16 tile per warp */
    assert_int_equal(p.stages, 2);  /* 3 stages are built for D 64 only */
    a.out_dtype = RKV_DTYPE_F32;    /* f32 output stays on the mma kernel */
    rkv__cuda_attention_plan_make(&g, &a, &H200, 2, RKV__KERNEL_MMA, 0, &p);
    assert_int_equal(p.kind, RKV__ATTN_MMA);
    assert_int_equal(p.out_f32, 1);
    a.out_dtype = RKV_DTYPE_BF16;   /* another 16-bit output: generic */
    rkv__cuda_attention_plan_make(&g, &a, &H200, 2, RKV__KERNEL_MMA, 0, &p);
    assert_int_equal(p.kind, RKV__ATTN_SIMT);
    a = args(2, 4, RKV_DTYPE_F32);  /* q dtype != storage dtype */
    rkv__cuda_attention_plan_make(&g, &a, &H200, 2, RKV__KERNEL_MMA, 0, &p);
    assert_int_equal(p.kind, RKV__ATTN_SIMT);
    a = args(2, 4, RKV_DTYPE_F16);  /* explicit visibility rows */
    a.visible = (const uint8_t *)DEV(0x9000);
    rkv__cuda_attention_plan_make(&g, &a, &H200, 2, RKV__KERNEL_MMA, 0, &p);
    assert_int_equal(p.kind, RKV__ATTN_SIMT);
    assert_int_equal(p.grid_x, (2 * 4 * 128 + 3) / 4);
    assert_int_equal(p.smem_bytes, 2 * 16);
    /* f32 storage, other D: generic */
    rkv_geometry f = geom(2, 2, 4, 4, 64, 128, 1, RKV_DTYPE_F32);
    a = args(2, 4, RKV_DTYPE_F32);
    rkv__cuda_attention_plan_make(&f, &a, &H200, 2, RKV__KERNEL_MMA, 0, &p);
    assert_int_equal(p.kind, RKV__ATTN_SIMT);
    rkv_geometry d80 = geom(2, 2, 4, 4, 80, 128, 1, RKV_DTYPE_BF16);
    a = args(2, 4, RKV_DTYPE_BF16);
    rkv__cuda_attention_plan_make(&d80, &a, &H200, 2, RKV__KERNEL_MMA, 0, &p);
    assert_int_equal(p.kind, RKV__ATTN_SIMT);
    /* a frame list too long for shared memory: generic */
    rkv_geometry longring = geom(1, 1, 60000, 16, 64, 128, 1, RKV_DTYPE_BF16);
    rkv__cuda_attention_plan_make(&longring, &a, &H200, 2, RKV__KERNEL_MMA, 0, &p);
    assert_int_equal(p.kind, RKV__ATTN_SIMT);
    /* n_queries: partial tiles, rows spanning the GQA group */
    rkv_geometry g64 = geom(2, 2, 4, 4, 64, 128, 1, RKV_DTYPE_BF16);
    a = args(1, 8, RKV_DTYPE_BF16); /* group 4 */
    a.n_queries = 37;
    rkv__cuda_attention_plan_make(&g64, &a, &H200, 2, RKV__KERNEL_MMA, 1, &p);
    assert_int_equal(p.rows_per_kvh, 4 * 37);
    assert_int_equal(p.m_tiles, 2);
    assert_int_equal(p.ctas, 2 * 2);
    /* splits capped by RKV__MAX_SPLITS and by the key tiles (5 frames x 2) */
    assert_int_equal(p.max_key_tiles, 10);
    assert_int_equal(p.splits, 5);
}

/* The Hopper kernel: planned only when asked for, with D 64, 16-bit storage
 * and q, no explicit rows, on a compute capability 9 device; the mma kernel
 * (or the generic one) everywhere else. */
static void test_attention_plan_wgmma(void **state) {
    (void)state;
    rkv__cuda_attn_plan p;
    rkv_geometry g = geom(8, 16, 16, 16, 64, 512, 1, RKV_DTYPE_BF16);
    rkv_cuda_attention_args a = args(1, 32, RKV_DTYPE_BF16);
    rkv__cuda_attention_plan_make(&g, &a, &H200, 2, RKV__KERNEL_WGMMA, 0, &p);
    assert_int_equal(p.kind, RKV__ATTN_WGMMA);
    assert_int_equal(p.bm, 128);     /* two warpgroups of 64 rows */
    assert_int_equal(p.bn, 64);
    assert_int_equal(p.threads, 256);
    assert_int_equal(p.stages, RKV__WGMMA_STAGES);
    assert_int_equal(p.m_tiles, 8);
    assert_int_equal(p.ctas, 128);
    /* Q tile + 3 K/V stages + 17 frame ints (rounded) + the alignment slack */
    assert_int_equal(p.smem_bytes, (128 + 2 * 3 * 64) * 64 * 2 + 80 + 1024);
    /* 2 blocks of 227 KiB - a bit must fit on an SM */
    assert_true(2 * p.smem_bytes <= H200.smem_optin);
    /* the same key splits as the mma kernel (same block count) */
    rkv__cuda_attention_plan_make(&g, &a, &H200, 2, RKV__KERNEL_WGMMA, 1, &p);
    assert_int_equal(p.splits, 2);
    assert_int_equal(p.grid_x, 16);
    char buf[256];
    rkv__cuda_attention_plan_describe(&p, buf, sizeof buf);
    assert_non_null(strstr(buf, "wgmma bf16 d64"));
    /* f32 output too */
    a.out_dtype = RKV_DTYPE_F32;
    rkv__cuda_attention_plan_make(&g, &a, &H200, 2, RKV__KERNEL_WGMMA, 0, &p);
    assert_int_equal(p.kind, RKV__ATTN_WGMMA);
    assert_int_equal(p.out_f32, 1);
    /* not on an sm_80-class device */
    a = args(1, 32, RKV_DTYPE_BF16);
    rkv__cuda_attention_plan_make(&g, &a, &A100, 2, RKV__KERNEL_WGMMA, 0, &p);
    assert_int_equal(p.kind, RKV__ATTN_MMA);
    /* D 128: the mma kernel */
    rkv_geometry d128 = geom(2, 1, 4, 3, 128, 128, 3, RKV_DTYPE_BF16);
    a = args(2, 2, RKV_DTYPE_BF16);
    rkv__cuda_attention_plan_make(&d128, &a, &H200, 2, RKV__KERNEL_WGMMA, 0, &p);
    assert_int_equal(p.kind, RKV__ATTN_MMA);
    /* f16 storage: wgmma too; explicit rows or f32 q: generic */
    rkv_geometry h = geom(2, 2, 4, 4, 64, 128, 1, RKV_DTYPE_F16);
    a = args(2, 4, RKV_DTYPE_F16);
    rkv__cuda_attention_plan_make(&h, &a, &H200, 2, RKV__KERNEL_WGMMA, 0, &p);
    assert_int_equal(p.kind, RKV__ATTN_WGMMA);
    a.visible = (const uint8_t *)DEV(0x9000);
    rkv__cuda_attention_plan_make(&h, &a, &H200, 2, RKV__KERNEL_WGMMA, 0, &p);
    assert_int_equal(p.kind, RKV__ATTN_SIMT);
    a = args(2, 4, RKV_DTYPE_F32);
    rkv__cuda_attention_plan_make(&h, &a, &H200, 2, RKV__KERNEL_WGMMA, 0, &p);
    assert_int_equal(p.kind, RKV__ATTN_SIMT);
    /* a frame list too long for the wgmma tiles but not for mma's: mma
     * (both keep RKV__STATIC_SMEM_MAX aside for static shared memory) */
    const int64_t rf =
        (int64_t)(H200.smem_optin - RKV__STATIC_SMEM_MAX - (128 + 2 * 2 * 64) * 64 * 2) / 4 - 8;
    rkv_geometry lr = geom(1, 1, rf, 16, 64, 128, 1, RKV_DTYPE_BF16);
    a = args(1, 2, RKV_DTYPE_BF16);
    rkv__cuda_attention_plan_make(&lr, &a, &H200, 2, RKV__KERNEL_WGMMA, 0, &p);
    assert_int_equal(p.kind, RKV__ATTN_MMA);
    assert_true(p.smem_bytes + RKV__STATIC_SMEM_MAX <= H200.smem_optin);
    /* 16 frames more and the mma kernel's list does not fit either */
    rkv_geometry lr2 = geom(1, 1, rf + 16, 16, 64, 128, 1, RKV_DTYPE_BF16);
    rkv__cuda_attention_plan_make(&lr2, &a, &H200, 2, RKV__KERNEL_WGMMA, 0, &p);
    assert_int_equal(p.kind, RKV__ATTN_SIMT);
}

static void test_attention_checks(void **state) {
    (void)state;
    rkv_geometry g = geom(2, 2, 4, 4, 64, 128, 1, RKV_DTYPE_BF16);
    rkv_cuda_attention_args a = args(2, 4, RKV_DTYPE_BF16);
    assert_int_equal(rkv__cuda_attention_check(DESCRIBE, &g, &a), RKV_OK);
    EXPECT_STATUS(rkv__cuda_attention_check(DESCRIBE, &g, NULL), RKV_ERR_NULL, "args");
    /* a growing struct's size (ringkv.h, "Structs that grow") */
    a.struct_size = 0;
    EXPECT_STATUS(rkv__cuda_attention_check(DESCRIBE, &g, &a), RKV_ERR_INVALID_ARG,
                  "args->struct_size is 0; set it to sizeof(rkv_cuda_attention_args)");
    a.struct_size = sizeof a - 8;
    EXPECT_STATUS(rkv__cuda_attention_check(DESCRIBE, &g, &a), RKV_ERR_INVALID_ARG,
                  "smaller than the first version");
    a.struct_size = sizeof a + 8;
    EXPECT_STATUS(rkv__cuda_attention_check(DESCRIBE, &g, &a), RKV_ERR_INVALID_ARG,
                  "newer ringkv header");
    a = args(2, 4, RKV_DTYPE_BF16);
    a.batch = 0;
    EXPECT_STATUS(rkv__cuda_attention_check(DESCRIBE, &g, &a), RKV_ERR_INVALID_ARG, "batch");
    a = args(3, 4, RKV_DTYPE_BF16);
    EXPECT_STATUS(rkv__cuda_attention_check(DESCRIBE, &g, &a), RKV_ERR_INVALID_ARG, "batch");
    a = args(2, 3, RKV_DTYPE_BF16);
    EXPECT_STATUS(rkv__cuda_attention_check(DESCRIBE, &g, &a), RKV_ERR_INVALID_ARG, "GQA");
    a = args(2, 4, RKV_DTYPE_BF16);
    a.n_queries = -1;
    EXPECT_STATUS(rkv__cuda_attention_check(DESCRIBE, &g, &a), RKV_ERR_INVALID_ARG, "n_queries");
    a = args(2, 4, RKV_DTYPE_BF16);
    a.q = NULL;
    EXPECT_STATUS(rkv__cuda_attention_check(DESCRIBE, &g, &a), RKV_ERR_NULL, "q");
    a = args(2, 4, RKV_DTYPE_BF16);
    a.out = NULL;
    EXPECT_STATUS(rkv__cuda_attention_check(DESCRIBE, &g, &a), RKV_ERR_NULL, "out");
    a = args(2, 4, RKV_DTYPE_BF16);
    a.session_idx = NULL;
    EXPECT_STATUS(rkv__cuda_attention_check(DESCRIBE, &g, &a), RKV_ERR_NULL, "session_idx");
    a = args(2, 4, RKV_DTYPE_BF16);
    a.frame_pos = NULL;
    EXPECT_STATUS(rkv__cuda_attention_check(DESCRIBE, &g, &a), RKV_ERR_NULL, "frame_pos");
    a.visible = (const uint8_t *)DEV(0x9000); /* not needed with explicit rows */
    assert_int_equal(rkv__cuda_attention_check(DESCRIBE, &g, &a), RKV_OK);
    a = args(2, 4, RKV_DTYPE_BF16);
    a.out_dtype = (rkv_dtype)7;
    EXPECT_STATUS(rkv__cuda_attention_check(DESCRIBE, &g, &a), RKV_ERR_DTYPE, "dtype");
    a = args(2, 4, RKV_DTYPE_BF16);
    a.scale = INFINITY;
    EXPECT_STATUS(rkv__cuda_attention_check(DESCRIBE, &g, &a), RKV_ERR_INVALID_ARG, "scale");
    a = args(2, 4, RKV_DTYPE_BF16);
    a.q = DEV(0x100008);
    EXPECT_STATUS(rkv__cuda_attention_check(DESCRIBE, &g, &a), RKV_ERR_INVALID_ARG, "aligned");
    a = args(2, 4, RKV_DTYPE_BF16);
    a.out = DEV(0x100000 + 4096); /* inside q (2*4*128*64*2 bytes) */
    EXPECT_STATUS(rkv__cuda_attention_check(DESCRIBE, &g, &a), RKV_ERR_INVALID_ARG, "overlaps");
    a = args(2, 4, RKV_DTYPE_BF16);
    a.workspace = DEV(0x3008);
    EXPECT_STATUS(rkv__cuda_attention_check(DESCRIBE, &g, &a), RKV_ERR_INVALID_ARG, "workspace");
    rkv_geometry wide = geom(2, 2, 4, 4, 264, 128, 1, RKV_DTYPE_F32);
    a = args(2, 4, RKV_DTYPE_F32);
    EXPECT_STATUS(rkv__cuda_attention_check(DESCRIBE, &wide, &a), RKV_ERR_INVALID_ARG, "256");
}

static void test_device_error_words(void **state) {
    (void)state;
    int w = RKV__OP_UPSERT << 24 | RKV__DEVERR_SESSION_RANGE << 16 | 3;
    EXPECT_STATUS(rkv__cuda_device_error_status(w, 8), RKV_ERR_RANGE, "session_idx[3]");
    assert_non_null(strstr(rkv_last_error(), "rkv_layer_upsert"));
    assert_non_null(strstr(rkv_last_error(), "wrote nothing"));
    w = RKV__OP_ATTEND << 24 | RKV__DEVERR_SESSION_DUP << 16 | 1;
    EXPECT_STATUS(rkv__cuda_device_error_status(w, 8), RKV_ERR_INVALID_ARG, "distinct");
    assert_non_null(strstr(rkv_last_error(), "rkv_layer_attend"));
    w = RKV__OP_ATTEND << 24 | RKV__DEVERR_CLOCK << 16 | 0;
    EXPECT_STATUS(rkv__cuda_device_error_status(w, 8), RKV_ERR_INVALID_ARG, "frame_pos[0]");
    w = RKV__OP_ATTEND << 24 | RKV__DEVERR_ARCH << 16;
    EXPECT_STATUS(rkv__cuda_device_error_status(w, 8), RKV_ERR_STATE, "sm_90a");
    EXPECT_STATUS(rkv__cuda_device_error_status(0x09090000, 8), RKV_ERR_STATE, "unknown");
}

static void test_describe(void **state) {
    (void)state;
    rkv_geometry g = geom(8, 16, 16, 16, 64, 512, 1, RKV_DTYPE_BF16);
    rkv_cuda_attention_args a = args(1, 32, RKV_DTYPE_BF16);
    rkv__cuda_attn_plan p;
    rkv__cuda_attention_plan_make(&g, &a, &H200, 2, RKV__KERNEL_MMA, 1, &p);
    char buf[256];
    rkv__cuda_attention_plan_describe(&p, buf, sizeof buf);
    assert_non_null(strstr(buf, "mma bf16 d64"));
    assert_non_null(strstr(buf, "grid 16x16x1"));
    assert_non_null(strstr(buf, "splits 2 "));
    char tiny[8];
    rkv__cuda_attention_plan_describe(&p, tiny, sizeof tiny);
    assert_int_equal(strlen(tiny), 7);
}

/* ---- the model's table (backend_cuda.cu) and the layer's spans ------------- */

static void test_span_places(void **state) {
    (void)state;
    rkv_geometry g = geom(2, 2, 2, 2, 64, 128, 1, RKV_DTYPE_BF16);
    const int64_t C = 3 * 128, N = 2 * C;
    const size_t row = 64 * 2;
    size_t off = 1, bytes = 1;
    bool w = true;
    EXPECT_STATUS(rkv__span_piece(&g, "x", 1, RKV_SPAN_K, 1, &off, &bytes, &w), RKV_OK, "");
    assert_int_equal(off, ((size_t)(1 * N) + (size_t)C) * row); /* plane 1, session 1 */
    assert_int_equal(bytes, (size_t)C * row);
    assert_int_equal(w, 0);
    EXPECT_STATUS(rkv__span_piece(&g, "x", 0, RKV_SPAN_V, 0, &off, &bytes, &w), RKV_OK, "");
    assert_int_equal(off, (size_t)(2 * N) * row); /* plane H + 0 */
    EXPECT_STATUS(rkv__span_piece(&g, "x", 1, RKV_SPAN_WRITTEN, 0, &off, &bytes, &w), RKV_OK,
                  "");
    assert_int_equal(off, (size_t)C);
    assert_int_equal(bytes, (size_t)C);
    assert_int_equal(w, 1);
    EXPECT_STATUS(rkv__span_piece(&g, "x", 2, RKV_SPAN_K, 0, &off, &bytes, &w), RKV_ERR_RANGE,
                  "session 2");
    EXPECT_STATUS(rkv__span_piece(&g, "x", 0, RKV_SPAN_K, 2, &off, &bytes, &w), RKV_ERR_RANGE,
                  "head 2");
    EXPECT_STATUS(rkv__span_piece(&g, "x", 0, RKV_SPAN_WRITTEN, 1, &off, &bytes, &w),
                  RKV_ERR_INVALID_ARG, "head 1");
    EXPECT_STATUS(rkv__span_piece(&g, "x", 0, (rkv_span_part)3, 0, &off, &bytes, &w),
                  RKV_ERR_INVALID_ARG, "part 3");
    /* written bits: the invariant, checked on the host before any copy */
    uint8_t bits[3 * 128];
    memset(bits, 0, sizeof bits);
    memset(bits + 128, 1, 128);     /* ring frame 1 written */
    memset(bits + 256, 1, 128);     /* the scratch */
    EXPECT_STATUS(rkv__cuda_written_check(&g, "x", bits), RKV_OK, "");
    bits[200] = 0;                  /* half a frame */
    EXPECT_STATUS(rkv__cuda_written_check(&g, "x", bits), RKV_ERR_INVALID_ARG, "slot 200");
    bits[200] = 1;
    bits[300] = 0;                  /* scratch not armed */
    EXPECT_STATUS(rkv__cuda_written_check(&g, "x", bits), RKV_ERR_INVALID_ARG, "slot 300");
}

/* The model's workspace: the largest preferred key split over B = 1..max:
 * at 720P on an H200 only B = 1 splits (2 ways: 128 blocks for 264 slots). */
static void test_model_workspace(void **state) {
    (void)state;
    rkv_geometry g = geom(8, 16, 16, 16, 64, 512, 1, RKV_DTYPE_BF16);
    const size_t one = 2 * (size_t)(32 * 512) * (64 + 2) * 4;
    assert_int_equal(rkv__cuda_model_workspace_bytes(&g, &H200, 2, RKV__KERNEL_MMA, 1, 32), one);
    assert_int_equal(rkv__cuda_model_workspace_bytes(&g, &H200, 2, RKV__KERNEL_MMA, 8, 32), one);
    /* the same as the layer's own query for B = 1 */
    rkv_cuda_attention_args a = args(1, 32, RKV_DTYPE_BF16);
    rkv__cuda_attn_plan p;
    rkv__cuda_attention_plan_make(&g, &a, &H200, 2, RKV__KERNEL_MMA, 1, &p);
    assert_int_equal(p.workspace_bytes, one);
    /* f32 storage runs the generic kernel, which never splits */
    rkv_geometry f = geom(8, 16, 16, 16, 64, 512, 1, RKV_DTYPE_F32);
    assert_int_equal(rkv__cuda_model_workspace_bytes(&f, &H200, 2, RKV__KERNEL_MMA, 8, 32), 0);
    /* max_batch beyond S (or RKV_CUDA_MAX_BATCH) is capped, not an error */
    assert_int_equal(rkv__cuda_model_workspace_bytes(&g, &H200, 2, RKV__KERNEL_MMA, 5000, 32), one);
}

/* A model's attention call as the layer call it becomes. */
static void test_model_attention_args(void **state) {
    (void)state;
    rkv_attention_args a = RKV_ATTENTION_ARGS_INIT;
    a.batch = 3;
    a.n_q_heads = 8;
    a.n_queries = 64;
    a.q = DEV(0x1000);
    a.q_dtype = RKV_DTYPE_BF16;
    a.out = DEV(0x9000);
    a.out_dtype = RKV_DTYPE_F32;
    a.session_idx = (const int64_t *)DEV(0x100);
    a.frame_pos = (const int64_t *)DEV(0x118);
    a.visible = (const uint8_t *)DEV(0x5555); /* passed on (the layer call's rows) */
    a.scale = 0.25f;
    rkv_cuda_attention_args c;
    memset(&c, 0x5A, sizeof c);
    rkv__cuda_model_attention_args(&a, DEV(0x20000), 4096, &c);
    assert_int_equal(c.struct_size, sizeof c);
    assert_int_equal(c.batch, 3);
    assert_int_equal(c.n_q_heads, 8);
    assert_int_equal(c.n_queries, 64);
    assert_ptr_equal(c.q, a.q);
    assert_int_equal(c.q_dtype, RKV_DTYPE_BF16);
    assert_ptr_equal(c.out, a.out);
    assert_int_equal(c.out_dtype, RKV_DTYPE_F32);
    assert_ptr_equal(c.session_idx, a.session_idx);
    assert_ptr_equal(c.frame_pos, a.frame_pos);
    assert_ptr_equal(c.visible, a.visible);
    assert_true(c.scale == 0.25f);
    assert_ptr_equal(c.workspace, DEV(0x20000));
    assert_int_equal(c.workspace_bytes, 4096);
    rkv__cuda_model_attention_args(&a, NULL, 4096, &c);
    assert_null(c.workspace);
    assert_int_equal(c.workspace_bytes, 0);
    /* the model-level args' size (rkv_model_cuda_attention_describe) */
    assert_int_equal(rkv__cuda_model_args_check("describe", &a), RKV_OK);
    a.struct_size = 0;
    EXPECT_STATUS(rkv__cuda_model_args_check("describe", &a), RKV_ERR_INVALID_ARG,
                  "describe: args->struct_size is 0");
    a.struct_size = sizeof a + 8;
    EXPECT_STATUS(rkv__cuda_model_args_check("describe", &a), RKV_ERR_INVALID_ARG,
                  "newer ringkv header");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_upsert_plan_720p),
        cmocka_unit_test(test_upsert_plan_small_and_odd),
        cmocka_unit_test(test_reset_plan),
        cmocka_unit_test(test_attention_plan_720p),
        cmocka_unit_test(test_attention_plan_kernel_choice),
        cmocka_unit_test(test_attention_plan_wgmma),
        cmocka_unit_test(test_attention_checks),
        cmocka_unit_test(test_device_error_words),
        cmocka_unit_test(test_describe),
        cmocka_unit_test(test_span_places),
        cmocka_unit_test(test_model_workspace),
        cmocka_unit_test(test_model_attention_args),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

// Two readings of the PTX ISA must agree (issue 21): small kernels run the
// wrappers of src/cuda/ptx.cuh on the CPU executor (their semantics, written
// from the ISA's sections) on random inputs and print inputs and outputs as
// JSON; tests/cuda_exec/check_fragments.py computes the same from
// tests/cuda/fragment_model.py's own reading of the fragment layouts and
// compares. Built as a kernel translation unit (RKV_CUDA_EXEC).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "cuda_test_util.h"  // CK
#include "ptx.cuh"

namespace {


uint64_t g_rng = 0x9e3779b97f4a7c15ull;
uint32_t rnd() {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (uint32_t)(g_rng >> 16);
}
// A bf16 value in [-2, 2) with a few bits of mantissa (exact products).
uint16_t rnd_bf16() {
    const float v = (float)((int)(rnd() % 64) - 32) / 16.0f;
    return __float2bfloat16_rn(v).__x;
}

// ---- ldmatrix: one warp; the 16-bit element i of the tile holds i --------------------
constexpr int kTileElems = 64 * 8;  // 64 rows of 16 bytes
__global__ void ldmatrix_kernel(const uint32_t *row_of_lane, uint32_t *out, int trans) {
    RKV_EXTERN_SHARED_ALIGNED(16, uint16_t, tile);
    const int lane = threadIdx.x;
    for (int i = lane; i < kTileElems; i += 32) tile[i] = (uint16_t)i;
    __syncthreads();
    uint32_t r[4];
    const void *p = tile + row_of_lane[lane] * 8;
    if (trans)
        rkv_ptx::ldmatrix_x4_trans(r, p);
    else
        rkv_ptx::ldmatrix_x4(r, p);
    for (int i = 0; i < 4; i++) out[lane * 4 + i] = r[i];
}

void ldmatrix_case(int trans, bool comma) {
    uint32_t rows[32];
    for (int l = 0; l < 32; l++) rows[l] = rnd() % 64;  // any rows, repeats allowed
    uint32_t *d_rows, *d_out;
    CK(cudaMalloc((void **)&d_rows, sizeof rows));
    CK(cudaMalloc((void **)&d_out, 32 * 4 * 4));
    CK(cudaMemcpy(d_rows, rows, sizeof rows, cudaMemcpyHostToDevice));
    RKV_LAUNCH(1, 32, kTileElems * 2, nullptr, ldmatrix_kernel)(d_rows, d_out, trans);
    uint32_t out[128];
    CK(cudaMemcpy(out, d_out, sizeof out, cudaMemcpyDeviceToHost));
    printf("%s{\"trans\": %d, \"addrs\": [", comma ? ",\n" : "", trans);
    for (int l = 0; l < 32; l++) printf("%s%u", l ? ", " : "", rows[l] * 8);
    printf("], \"out\": [");
    for (int i = 0; i < 128; i++) printf("%s%u", i ? ", " : "", out[i]);
    printf("]}");
    CK(cudaFree(d_rows));
    CK(cudaFree(d_out));
}

// ---- mma.m16n8k16 bf16: one warp, its fragments straight from memory ---------------------
__global__ void mma_kernel(const uint32_t *a, const uint32_t *b, const float *c, float *d) {
    const int lane = threadIdx.x;
    uint32_t ar[4];
    float acc[4];
    for (int i = 0; i < 4; i++) ar[i] = a[lane * 4 + i], acc[i] = c[lane * 4 + i];
    rkv_ptx::mma_m16n8k16<__nv_bfloat16>(acc, ar, b[lane * 2], b[lane * 2 + 1]);
    for (int i = 0; i < 4; i++) d[lane * 4 + i] = acc[i];
}

void mma_case(bool comma) {
    uint32_t a[128], b[64];
    float c[128], d[128];
    for (auto &x : a) x = rnd_bf16() | (uint32_t)rnd_bf16() << 16;
    for (auto &x : b) x = rnd_bf16() | (uint32_t)rnd_bf16() << 16;
    for (auto &x : c) x = (float)((int)(rnd() % 64) - 32) / 8.0f;
    uint32_t *d_a, *d_b;
    float *d_c, *d_d;
    CK(cudaMalloc((void **)&d_a, sizeof a));
    CK(cudaMalloc((void **)&d_b, sizeof b));
    CK(cudaMalloc((void **)&d_c, sizeof c));
    CK(cudaMalloc((void **)&d_d, sizeof d));
    CK(cudaMemcpy(d_a, a, sizeof a, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d_b, b, sizeof b, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d_c, c, sizeof c, cudaMemcpyHostToDevice));
    RKV_LAUNCH(1, 32, 0, nullptr, mma_kernel)(d_a, d_b, d_c, d_d);
    CK(cudaMemcpy(d, d_d, sizeof d, cudaMemcpyDeviceToHost));
    printf("%s{\"a\": [", comma ? ",\n" : "");
    for (int i = 0; i < 128; i++) printf("%s%u", i ? ", " : "", a[i]);
    printf("], \"b\": [");
    for (int i = 0; i < 64; i++) printf("%s%u", i ? ", " : "", b[i]);
    printf("], \"c\": [");
    for (int i = 0; i < 128; i++) printf("%s%.9g", i ? ", " : "", c[i]);
    printf("], \"d\": [");
    for (int i = 0; i < 128; i++) printf("%s%.9g", i ? ", " : "", d[i]);
    printf("]}");
    CK(cudaFree(d_a));
    CK(cudaFree(d_b));
    CK(cudaFree(d_c));
    CK(cudaFree(d_d));
}

// ---- wgmma m64n64k16 bf16: one warpgroup over a random 16 KB tile ----------------------
// A (ss) at tile bytes [0, 8192), B at [8192, 16384); start addresses moved by
// the k16 step as the Hopper kernel moves them (32 bytes K-major, 2,048 MN-major).
constexpr int kWgTile = 16384;
struct WgArgs {
    const uint16_t *fill;  // kWgTile / 2 elements
    const uint32_t *a;     // rs: 4 registers per thread
    const float *c;        // 32 accumulators per thread
    float *d;
    int rs, kk, scale_d;
};
__global__ void wgmma_kernel(const WgArgs p) {
    RKV_EXTERN_SHARED_ALIGNED(1024, unsigned char, raw);
    unsigned char *base = raw + ((1024u - (rkv_ptx::smem_addr(raw) & 1023u)) & 1023u);
    uint16_t *tile = reinterpret_cast<uint16_t *>(base);
    const int t = threadIdx.x;
    for (int i = t; i < kWgTile / 2; i += 128) tile[i] = p.fill[i];
    rkv_ptx::fence_proxy_async_shared_cta();
    __syncthreads();
    float d[32];
    uint32_t a[4];
    for (int i = 0; i < 32; i++) d[i] = p.c[t * 32 + i];
    for (int i = 0; i < 4; i++) a[i] = p.rs ? p.a[t * 4 + i] : 0;
    const uint32_t b0 = rkv_ptx::smem_addr(base);
    const uint64_t mode = (uint64_t)1 << 62;  // 128-byte swizzle
    auto desc = [&](uint32_t addr, uint32_t lbo, uint32_t sbo) {
        return (uint64_t)((addr & 0x3FFFFu) >> 4) | (uint64_t)((lbo >> 4) & 0x3FFFu) << 16 |
               (uint64_t)((sbo >> 4) & 0x3FFFu) << 32 | mode;
    };
    rkv_ptx::wgmma_fence();
    if (p.rs)
        rkv_ptx::wgmma_m64n64k16_rs<__nv_bfloat16>(d, a, desc(b0 + 8192 + p.kk * 2048, 8192, 1024));
    else
        rkv_ptx::wgmma_m64n64k16_ss<__nv_bfloat16>(d, desc(b0 + p.kk * 32, 16, 1024),
                                                   desc(b0 + 8192 + p.kk * 32, 16, 1024), p.scale_d);
    rkv_ptx::wgmma_commit_group();
    rkv_ptx::wgmma_wait_group<0>();
    for (int i = 0; i < 32; i++) p.d[t * 32 + i] = d[i];
}

void wgmma_case(int rs, int kk, int scale_d, bool comma) {
    static uint16_t fill[kWgTile / 2];
    static uint32_t a[128 * 4];
    static float c[128 * 32], d[128 * 32];
    for (auto &x : fill) x = rnd_bf16();
    for (auto &x : a) x = rnd_bf16() | (uint32_t)rnd_bf16() << 16;
    for (auto &x : c) x = (float)((int)(rnd() % 64) - 32) / 8.0f;
    WgArgs p;
    uint16_t *d_fill;
    uint32_t *d_a;
    float *d_c, *d_d;
    CK(cudaMalloc((void **)&d_fill, sizeof fill));
    CK(cudaMalloc((void **)&d_a, sizeof a));
    CK(cudaMalloc((void **)&d_c, sizeof c));
    CK(cudaMalloc((void **)&d_d, sizeof d));
    CK(cudaMemcpy(d_fill, fill, sizeof fill, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d_a, a, sizeof a, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d_c, c, sizeof c, cudaMemcpyHostToDevice));
    p.fill = d_fill, p.a = d_a, p.c = d_c, p.d = d_d, p.rs = rs, p.kk = kk, p.scale_d = scale_d;
    RKV_LAUNCH(1, 128, kWgTile + 1024, nullptr, wgmma_kernel)(p);
    CK(cudaMemcpy(d, d_d, sizeof d, cudaMemcpyDeviceToHost));
    printf("%s{\"rs\": %d, \"scale_d\": %d, \"a_start\": %d, \"a_sbo\": 1024, ", comma ? ",\n" : "",
           rs, rs ? 1 : scale_d, kk * 32);
    printf("\"b_start\": %d, \"b_sbo\": 1024, \"b_lbo\": 8192, \"smem\": [",
           8192 + (rs ? kk * 2048 : kk * 32));
    for (int i = 0; i < kWgTile / 2; i++) printf("%s%u", i ? ", " : "", fill[i]);
    printf("], \"a\": [");
    for (int i = 0; i < 128 * 4; i++) printf("%s%u", i ? ", " : "", a[i]);
    printf("], \"c\": [");
    for (int i = 0; i < 128 * 32; i++) printf("%s%.9g", i ? ", " : "", c[i]);
    printf("], \"d\": [");
    for (int i = 0; i < 128 * 32; i++) printf("%s%.9g", i ? ", " : "", d[i]);
    printf("]}");
    CK(cudaFree(d_fill));
    CK(cudaFree(d_a));
    CK(cudaFree(d_c));
    CK(cudaFree(d_d));
}

}  // namespace

int main() {
    printf("{\"ldmatrix\": [\n");
    for (int k = 0; k < 4; k++) ldmatrix_case(k & 1, k > 0);
    printf("],\n\"mma\": [\n");
    for (int k = 0; k < 3; k++) mma_case(k > 0);
    printf("],\n\"wgmma\": [\n");
    // ss overwriting and accumulating, rs; each at two k16 steps
    wgmma_case(0, 0, 0, false);
    wgmma_case(0, 3, 1, true);
    wgmma_case(1, 0, 1, true);
    wgmma_case(1, 2, 1, true);
    printf("]}\n");
    return 0;
}

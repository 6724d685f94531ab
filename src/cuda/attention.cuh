// Private interface between the attention dispatcher (attention.cu) and the
// tensor-core kernels (attention_mma_*.cu, attention_wgmma_*.cu; the pieces
// both kernels share are in attention_common.cuh).
#ifndef RKV_CUDA_ATTENTION_CUH
#define RKV_CUDA_ATTENTION_CUH

#include <float.h>

#include "cuda_internal.cuh"

// The initial running maximum of every online softmax here (the generic
// kernel's, online_softmax's): -FLT_MAX, the lowest finite float, not -inf.
// Every score but -inf is >= it, so a row's maximum stays finite while all
// its scores so far are -inf: their weights are exp(-inf) = 0 and the
// rescale factor exp(-FLT_MAX - -FLT_MAX) = 1, never exp(-inf - -inf) = NaN
// (FlashAttention's "use 0 when the max is -inf" guard, at no cost per tile
// and no extra register). A row whose every score is -inf gives 0
// (ringkv.h); +inf makes the row NaN; NaN scores are skipped by fmaxf and
// give NaN weights.
#define RKV__SOFTMAX_M0 (-FLT_MAX)

struct RkvMmaParams {
    const void *kv;          // storage [2][H][N][D]
    const uint8_t *written;  // [N]
    const int64_t *sess;     // [B]
    const int64_t *fp;       // [B]
    const void *q;           // [B][Hq][Tq][D]
    void *out;               // [B][Hq][Tq][D] (splits == 1)
    float *ws_o;             // [splits][total_rows][D] (splits > 1)
    float *ws_ml;            // [splits][total_rows][2]  (max in log2 units, sum)
    int *err;
    int batch;
    int splits;
    int64_t S, H, Hq, group, Tq, M, m_tiles, N, C, T, RF, RB, PD, total_rows;
    float scale_log2;        // scale * log2(e)
};

// The tensor-core kernels' host side, templates on the storage element type
// T (__nv_bfloat16 or __half): defined beside their kernels (attention_mma.cuh,
// attention_wgmma.cuh) and instantiated once per T, the bf16 and f16 halves
// in their own files for parallel builds (attention_mma_bf16.cu, _f16.cu,
// attention_wgmma_bf16.cu, _f16.cu: instantiations only).
namespace rkv_mma {
// Launches the mma kernel of a plan (d_head, stages, out_f32 from it).
template <typename T>
void launch(const rkv__cuda_attn_plan *plan, const RkvMmaParams &p, cudaStream_t st);
// Raises the dynamic shared memory limit of every mma instantiation to what
// the device allows beside the kernel's static shared memory.
template <typename T>
cudaError_t prepare(size_t smem_optin);
}  // namespace rkv_mma
namespace rkv_wgmma {
// The same for the Hopper kernel (plan kind RKV__ATTN_WGMMA).
template <typename T>
void launch(const rkv__cuda_attn_plan *plan, const RkvMmaParams &p, cudaStream_t st);
template <typename T>
cudaError_t prepare(size_t smem_optin);
// True when the driver loaded the sm_90a code of the wgmma kernel (not the
// sm_90 / PTX stub); the dispatcher never plans it otherwise.
template <typename T>
bool loaded_is_sm90a();
}  // namespace rkv_wgmma

#endif

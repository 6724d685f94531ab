// The tensor-core ring attention, bf16 instantiations (see attention_mma.cuh).
#include "attention_mma.cuh"

void rkv__launch_mma_bf16(const rkv__cuda_attn_plan *plan, const RkvMmaParams &p,
                          cudaStream_t stream) {
    rkv_mma::launch<__nv_bfloat16>(plan, p, stream);
}

cudaError_t rkv__prepare_mma_bf16(size_t smem_optin) {
    return rkv_mma::prepare<__nv_bfloat16>(smem_optin);
}

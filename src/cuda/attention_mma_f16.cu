// The tensor-core ring attention, f16 instantiations (see attention_mma.cuh).
#include "attention_mma.cuh"

void rkv__launch_mma_f16(const rkv__cuda_attn_plan *plan, const RkvMmaParams &p,
                         cudaStream_t stream) {
    rkv_mma::launch<__half>(plan, p, stream);
}

cudaError_t rkv__prepare_mma_f16(size_t smem_optin) {
    return rkv_mma::prepare<__half>(smem_optin);
}

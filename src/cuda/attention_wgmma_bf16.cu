// The Hopper ring attention, bf16 instantiations (see attention_wgmma.cuh).
#include "attention_wgmma.cuh"

void rkv__launch_wgmma_bf16(const rkv__cuda_attn_plan *plan, const RkvMmaParams &p,
                          cudaStream_t stream) {
    rkv_wgmma::launch<__nv_bfloat16>(plan, p, stream);
}

bool rkv__wgmma_loaded_bf16(void) { return rkv_wgmma::loaded_is_sm90a<__nv_bfloat16>(); }

cudaError_t rkv__prepare_wgmma_bf16(size_t smem_optin) {
    return rkv_wgmma::prepare<__nv_bfloat16>(smem_optin);
}

// The Hopper ring attention, f16 instantiations (see attention_wgmma.cuh).
#include "attention_wgmma.cuh"

void rkv__launch_wgmma_f16(const rkv__cuda_attn_plan *plan, const RkvMmaParams &p,
                          cudaStream_t stream) {
    rkv_wgmma::launch<__half>(plan, p, stream);
}

bool rkv__wgmma_loaded_f16(void) { return rkv_wgmma::loaded_is_sm90a<__half>(); }

cudaError_t rkv__prepare_wgmma_f16(size_t smem_optin) {
    return rkv_wgmma::prepare<__half>(smem_optin);
}

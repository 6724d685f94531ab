// The Hopper ring attention's bf16 instantiations (attention_wgmma.cuh; attention.cuh).
#include "attention_wgmma.cuh"

template void rkv_wgmma::launch<__nv_bfloat16>(const rkv__cuda_attn_plan *, const RkvMmaParams &,
                                        cudaStream_t);
template cudaError_t rkv_wgmma::prepare<__nv_bfloat16>(size_t);
template bool rkv_wgmma::loaded_is_sm90a<__nv_bfloat16>();

// The Hopper ring attention's f16 instantiations (attention_wgmma.cuh; attention.cuh).
#include "attention_wgmma.cuh"

template void rkv_wgmma::launch<__half>(const rkv__cuda_attn_plan *, const RkvMmaParams &,
                                        cudaStream_t);
template cudaError_t rkv_wgmma::prepare<__half>(size_t);
template bool rkv_wgmma::loaded_is_sm90a<__half>();

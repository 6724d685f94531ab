// The tensor-core ring attention's f16 instantiations (attention_mma.cuh; attention.cuh).
#include "attention_mma.cuh"

template void rkv_mma::launch<__half>(const rkv__cuda_attn_plan *, const RkvMmaParams &,
                                      cudaStream_t);
template cudaError_t rkv_mma::prepare<__half>(size_t);

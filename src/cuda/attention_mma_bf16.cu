// The tensor-core ring attention's bf16 instantiations (attention_mma.cuh; attention.cuh).
#include "attention_mma.cuh"

template void rkv_mma::launch<__nv_bfloat16>(const rkv__cuda_attn_plan *, const RkvMmaParams &,
                                      cudaStream_t);
template cudaError_t rkv_mma::prepare<__nv_bfloat16>(size_t);

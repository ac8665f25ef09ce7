// kernels/cuda/common/type_list.cuh — the weight types with CUDA kernels, as an X-macro
// X(TYPE) with TYPE a GgmlType enumerator whose traits struct is Traits##TYPE (chunk_decode.cuh).
// kernels/cuda/gen_instances.py holds the same list and writes kernels/cuda/inst/.
#pragma once

#define DS4_CUDA_WEIGHT_TYPES(X) \
  X(Q4_0) X(Q8_0) X(Q2_K) X(Q4_K) X(Q6_K) X(IQ2_XXS) X(IQ2_XS) X(IQ2_S) X(IQ1_S) X(IQ1_M) X(MXFP4) X(NVFP4)

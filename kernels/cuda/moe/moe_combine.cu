// kernels/cuda/moe/moe_combine.cu — deterministic combination of expert outputs: for each token
// the slots are visited in ascending expert id (ties: ascending slot) and summed in FP32 from
// 0.0f by the single thread that owns the output element (DESIGN.md "Numerics contract",
// quant-formats.md §5.3). The CPU engine's routed-expert loop (engine/moe_layer.cpp) adds expert
// outputs in the same ascending order.
#include "kernels/cuda/quant_matmul.h"

namespace ds4::cuda {

namespace {

__global__ void moe_combine_kernel(const float* __restrict__ y, const int32_t* __restrict__ ids,
                                   const float* __restrict__ weights, int64_t n_tokens, int k,
                                   int n_experts, int64_t dim, float* __restrict__ out) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n_tokens * dim) return;
  const int64_t t = i / dim, d = i % dim;
  const int32_t* tid = ids + t * k;
  float acc = 0.0f;
  // Selection walk: next slot = smallest (expert, slot) greater than the previous one.
  int prev_e = -1, prev_s = -1;
  for (int step = 0; step < k; ++step) {
    int best_e = 0x7FFFFFFF, best_s = -1;
    for (int s = 0; s < k; ++s) {
      const int e = tid[s];
      if (e < 0 || e >= n_experts) continue;
      const bool after = e > prev_e || (e == prev_e && s > prev_s);
      const bool better = e < best_e || (e == best_e && s < best_s);
      if (after && better) {
        best_e = e;
        best_s = s;
      }
    }
    if (best_s < 0) break;
    const int64_t p = t * k + best_s;
    const float v = weights ? __fmul_rn(weights[p], y[p * dim + d]) : y[p * dim + d];
    acc = __fadd_rn(acc, v);
    prev_e = best_e;
    prev_s = best_s;
  }
  out[i] = acc;
}

}  // namespace

cudaError_t moe_combine(const float* y, const int32_t* ids, const float* weights, int64_t n_tokens, int k,
                        int n_experts, int64_t dim, float* out, cudaStream_t stream) {
  if (n_tokens < 0 || k <= 0 || n_experts <= 0 || dim < 0) return cudaErrorInvalidValue;
  if (n_tokens == 0 || dim == 0) return cudaSuccess;
  if (!y || !ids || !out) return cudaErrorInvalidValue;
  const int64_t total = n_tokens * dim;
  moe_combine_kernel<<<unsigned((total + 255) / 256), 256, 0, stream>>>(y, ids, weights, n_tokens, k, n_experts, dim, out);
  return cudaGetLastError();
}

}  // namespace ds4::cuda

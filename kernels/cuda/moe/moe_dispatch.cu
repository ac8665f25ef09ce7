// kernels/cuda/moe/moe_dispatch.cu — launchers of the MoE dispatch kernels (moe_kernels.cuh):
// the stable counting sort of (token, slot) pairs by expert, without atomics (one thread per
// expert counts and fills in ascending pair order; one thread does the prefix sums and the MMQ
// tile list; host mirror moe_sort_host.h), and the deterministic combination of expert outputs
// (per token, slots in ascending expert id, FP32 sum from 0.0f by the single owning thread;
// DESIGN.md "Numerics contract", quant-formats.md §5.3 — the CPU engine's routed-expert loop in
// engine/moe_layer.cpp adds expert outputs in the same ascending order).
#include "kernels/cuda/launch.h"
#include "kernels/cuda/moe/moe_kernels.cuh"
#include "kernels/cuda/quant_matmul.h"

namespace ds4::cuda {

cudaError_t moe_sort(const int32_t* ids, int64_t n_pairs, int n_experts, const MoeSorted& out, cudaStream_t stream) {
  if (n_pairs < 0 || n_pairs > INT32_MAX || n_experts <= 0) return cudaErrorInvalidValue;
  if ((n_pairs > 0 && !ids) || !out.expert_bounds || !out.sorted_pairs || !out.tiles || !out.counters)
    return cudaErrorInvalidValue;
  DS4_LAUNCH(moe_sort_kernel, 1, 256, 0, stream, ids, n_pairs, n_experts, out.expert_bounds, out.sorted_pairs,
             out.tiles, out.counters);
  return cudaGetLastError();
}

cudaError_t moe_combine(const float* y, const int32_t* ids, const float* weights, int64_t n_tokens, int k,
                        int n_experts, int64_t dim, float* out, cudaStream_t stream) {
  if (n_tokens < 0 || k <= 0 || n_experts <= 0 || dim < 0) return cudaErrorInvalidValue;
  if (n_tokens == 0 || dim == 0) return cudaSuccess;
  if (!y || !ids || !out) return cudaErrorInvalidValue;
  const int64_t total = n_tokens * dim;
  DS4_LAUNCH(moe_combine_kernel, unsigned((total + 255) / 256), 256, 0, stream, y, ids, weights, n_tokens, k, n_experts,
             dim, out);
  return cudaGetLastError();
}

}  // namespace ds4::cuda

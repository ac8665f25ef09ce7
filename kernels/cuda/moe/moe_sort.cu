// kernels/cuda/moe/moe_sort.cu — stable counting sort of (token, slot) pairs by expert, without
// atomics (one thread per expert counts and fills in ascending pair order; one thread does the
// prefix sums and the MMQ tile list). Host mirror and layout: moe_sort_host.h.
#include "kernels/cuda/quant_matmul.h"

namespace ds4::cuda {

namespace {

__global__ void moe_sort_kernel(const int32_t* __restrict__ ids, int64_t n_pairs, int n_experts,
                                int32_t* __restrict__ bounds, int32_t* __restrict__ sorted,
                                int32_t* __restrict__ tiles, int32_t* __restrict__ counters) {
  // 1. counts: bounds[e + 1] = number of pairs of expert e.
  for (int e = threadIdx.x; e < n_experts; e += blockDim.x) {
    int32_t c = 0;
    for (int64_t p = 0; p < n_pairs; ++p) c += ids[p] == e;
    bounds[e + 1] = c;
  }
  __syncthreads();
  // 2. prefix sums, invalid count and tiles (one thread, fixed order).
  if (threadIdx.x == 0) {
    bounds[0] = 0;
    for (int e = 0; e < n_experts; ++e) bounds[e + 1] += bounds[e];
    int32_t invalid = 0;
    for (int64_t p = 0; p < n_pairs; ++p) invalid += (ids[p] < 0 || ids[p] >= n_experts);
    int32_t nt = 0;
    for (int e = 0; e < n_experts; ++e)
      for (int32_t c = bounds[e]; c < bounds[e + 1]; c += kMmqTileCols) {
        tiles[3 * nt] = e;
        tiles[3 * nt + 1] = c;
        tiles[3 * nt + 2] = c + kMmqTileCols < bounds[e + 1] ? c + kMmqTileCols : bounds[e + 1];
        ++nt;
      }
    counters[0] = nt;
    counters[1] = invalid;
  }
  __syncthreads();
  // 3. stable fill: expert e writes its pairs in ascending p.
  for (int e = threadIdx.x; e < n_experts; e += blockDim.x) {
    int32_t pos = bounds[e];
    for (int64_t p = 0; p < n_pairs; ++p)
      if (ids[p] == e) sorted[pos++] = int32_t(p);
  }
}

}  // namespace

cudaError_t moe_sort(const int32_t* ids, int64_t n_pairs, int n_experts, const MoeSorted& out, cudaStream_t stream) {
  if (n_pairs < 0 || n_pairs > INT32_MAX || n_experts <= 0) return cudaErrorInvalidValue;
  if ((n_pairs > 0 && !ids) || !out.expert_bounds || !out.sorted_pairs || !out.tiles || !out.counters)
    return cudaErrorInvalidValue;
  moe_sort_kernel<<<1, 256, 0, stream>>>(ids, n_pairs, n_experts, out.expert_bounds, out.sorted_pairs,
                                         out.tiles, out.counters);
  return cudaGetLastError();
}

}  // namespace ds4::cuda

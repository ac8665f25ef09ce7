// kernels/cuda/moe/moe_kernels.cuh — the MoE dispatch kernels (stable counting sort by expert,
// ordered combine), included by moe_sort.cu / moe_combine.cu and, without nvcc, by the host
// simulation test tests/gpu/test_mmq_host_sim.cpp. Documentation of the operations:
// kernels/cuda/quant_matmul.h (moe_sort, moe_combine) and moe_sort_host.h.
#pragma once

#include <cstdint>

#include "kernels/cuda/mmq/mmq_layout.h"

namespace ds4::cuda {

/// One block: thread e (strided) counts / fills expert e in ascending pair order; thread 0 does
/// the prefix sums, the invalid count and the MMQ tile list. No atomics.
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
      for (int32_t c = bounds[e]; c < bounds[e + 1]; c += kMmqCols) {
        tiles[3 * nt] = e;
        tiles[3 * nt + 1] = c;
        tiles[3 * nt + 2] = c + kMmqCols < bounds[e + 1] ? c + kMmqCols : bounds[e + 1];
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

/// One thread per output element (t, d): slots in ascending (expert, slot), FP32 from 0.0f.
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

}  // namespace ds4::cuda

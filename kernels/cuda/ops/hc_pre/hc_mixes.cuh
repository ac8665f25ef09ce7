// kernels/cuda/ops/hc_pre/hc_mixes.cuh — the mHC mixes of one token by one block (shared by
// hc_pre.cu and hc_head.cu; CPU reference kernels/cpu/hc_pre.cpp hc_mixes): warp 0 sums X^2 in
// the dot_f32 order (ops::warp_dot_f32(X, X)), then warp w computes rows r = w, w + warps, ... as
// dot_f32(fn[r], X) (shared-spec section 1 order, ops::warp_dot_f32) times the rsqrt factor.
#pragma once

#include "kernels/cuda/ops/ops_common.cuh"
#include "kernels/quant/math.h"

namespace ds4::cuda::ops {

/// mixes[r] for r < rows (shared memory, written by lane 0 of the computing warp); rs_sh: one
/// shared float. Every thread of the block must call it (blockDim.x a multiple of 32); ends with
/// a barrier, so mixes is readable by the whole block on return.
__device__ inline void block_hc_mixes(const float* fn, uint64_t fn_nb, int rows, const float* X, int64_t len,
                                      float norm_eps, float* mixes, float* rs_sh) {
  if (threadIdx.x < 32) {
    const float ss = warp_dot_f32(X, X, len, static_cast<int>(threadIdx.x));
    if (threadIdx.x == 0) *rs_sh = 1.0f / quant::sqrt_f32(ss / static_cast<float>(len) + norm_eps);
  }
  __syncthreads();
  const float rs = *rs_sh;
  const int lane = static_cast<int>(threadIdx.x % 32), warp = static_cast<int>(threadIdx.x / 32);
  const int warps = static_cast<int>(blockDim.x / 32);
  for (int r = warp; r < rows; r += warps) {
    const float d = warp_dot_f32(at_row(fn, r, fn_nb), X, len, lane);
    if (lane == 0) mixes[r] = d * rs;
  }
  __syncthreads();
}

}  // namespace ds4::cuda::ops

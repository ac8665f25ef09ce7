// kernels/cuda/ops/hc_pre/hc_mixes.cuh — the mHC mixes of one token by one block (shared by
// hc_pre.cu and hc_head.cu; CPU reference kernels/cpu/hc_pre.cpp hc_mixes): X^2 summed in the
// dot_f32 order (ops::warp_dot_f32(X, X)) by one warp while the others compute the rows
// dot_f32(fn[r], X) (shared-spec section 1 order), then each row times the rsqrt factor.
#pragma once

#include "kernels/cuda/ops/ops_common.cuh"
#include "kernels/quant/math.h"

namespace ds4::cuda::ops {

/// mixes[r] for r < rows (shared memory, at least rows floats); rs_sh: one shared float (the sum
/// of squares, then unused). Every thread of the block must call it (blockDim.x a multiple of 32,
/// at least rows threads); ends with a barrier, so mixes is readable by the whole block on return.
/// The rows + 1 warp dot products (the rows and X.X) run on separate warps at once; thread r then
/// scales row r by the rsqrt factor (each thread computes the same factor from the same bits).
__device__ inline void block_hc_mixes(const float* fn, uint64_t fn_nb, int rows, const float* X, int64_t len,
                                      float norm_eps, float* mixes, float* rs_sh) {
  const int lane = static_cast<int>(threadIdx.x % 32), warp = static_cast<int>(threadIdx.x / 32);
  const int warps = static_cast<int>(blockDim.x / 32);
  for (int r = warp; r <= rows; r += warps) {
    const float d = warp_dot_f32(r < rows ? at_row(fn, r, fn_nb) : X, X, len, lane);
    if (lane == 0) (r < rows ? mixes[r] : *rs_sh) = d;
  }
  __syncthreads();
  if (static_cast<int>(threadIdx.x) < rows) {
    const float rs = 1.0f / quant::sqrt_f32(*rs_sh / static_cast<float>(len) + norm_eps);
    mixes[threadIdx.x] = mixes[threadIdx.x] * rs;
  }
  __syncthreads();
}

}  // namespace ds4::cuda::ops

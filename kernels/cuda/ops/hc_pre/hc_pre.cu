// kernels/cuda/ops/hc_pre/hc_pre.cu — the hc_pre op (ops_cuda.h launch_hc_pre; CPU reference
// kernels/cpu/hc_pre.cpp hc_pre_row: hc_mixes, hc_split_sinkhorn_row, hc_weighted_sum). One block
// per token: the mixes (hc_mixes.cuh: every dot product on its own warp), the Sinkhorn split
// (block_sinkhorn: one thread per element, the CPU's order per sum), then one thread per output
// element of the weighted sum.
#include "kernels/cuda/ops/hc_pre/hc_mixes.cuh"
#include "kernels/cuda/ops/ops_common.cuh"
#include "kernels/cuda/ops/ops_cuda.h"
#include "kernels/quant/math.h"

namespace ds4::cuda {
namespace {

constexpr int kThreads = 1024;  // 32 warps: the (2+hc)*hc + 1 = 25 mix dot products (hc 4) at once
constexpr int kMaxMix = 64;  // (2 + hc) * hc

/// quant::hc_split_sinkhorn_row_ref by the block, to the same bits: every element-wise step (the
/// sigmoids, exponentials, divisions) by one thread per element, every max and sum by one thread in
/// the reference's order; barriers between the steps. m: the mixes, row: the mix row, sums: hc
/// floats (all shared memory). Every thread of the block calls it (at least hc * hc threads).
/// One thread doing all of it cost ~90 us a call on an H200 (24 exponentials in double, 640 divisions).
__device__ void block_sinkhorn(const float* m, const float* scale, const float* base, int hc, int iters, float eps,
                               float* row, float* sums) {
  const int tid = static_cast<int>(threadIdx.x), cells = hc * hc;
  float* c = row + 2 * hc;
  if (tid < hc) {
    row[tid] = quant::sigmoid_f32(m[tid] * scale[0] + base[tid]) + eps;
  } else if (tid < 2 * hc) {
    row[tid] = 2.0f * quant::sigmoid_f32(m[tid] * scale[1] + base[tid]);
  }
  if (tid < cells) c[tid] = m[2 * hc + tid] * scale[2] + base[2 * hc + tid];
  __syncthreads();
  if (tid < hc) {  // row max, k ascending
    float mx = -INFINITY;
    for (int k = 0; k < hc; ++k) mx = fmaxf(mx, c[tid * hc + k]);
    sums[tid] = mx;
  }
  __syncthreads();
  if (tid < cells) c[tid] = quant::exp_f32(c[tid] - sums[tid / hc]);
  __syncthreads();
  if (tid < hc) {  // row sum of the exponentials, k ascending
    float t = 0;
    for (int k = 0; k < hc; ++k) t += c[tid * hc + k];
    sums[tid] = t;
  }
  __syncthreads();
  if (tid < cells) c[tid] = c[tid] / sums[tid / hc] + eps;
  __syncthreads();
  for (int it = 0; it < (iters > 1 ? iters : 1); ++it) {
    if (it > 0) {
      if (tid < hc) {  // row j = tid: sum k ascending, + eps
        float t = 0;
        for (int k = 0; k < hc; ++k) t += c[tid * hc + k];
        sums[tid] = t + eps;
      }
      __syncthreads();
      if (tid < cells) c[tid] /= sums[tid / hc];
      __syncthreads();
    }
    if (tid < hc) {  // column k = tid: sum j ascending, + eps
      float t = 0;
      for (int j = 0; j < hc; ++j) t += c[j * hc + tid];
      sums[tid] = t + eps;
    }
    __syncthreads();
    if (tid < cells) c[tid] /= sums[tid % hc];
    __syncthreads();
  }
}

__global__ void __launch_bounds__(kThreads) hc_pre_kernel(const float* x, uint64_t x_nb, const float* fn, uint64_t fn_nb, const float* scale,
                              const float* base, int hc, int64_t dim, int64_t n, int iters, float hc_eps,
                              float norm_eps, float* y, uint64_t y_nb, float* mix, uint64_t mix_nb) {
  __shared__ float mixes[kMaxMix];
  __shared__ float row[kMaxMix];
  __shared__ float rs_sh;
  __shared__ float sums[kMaxMix];
  const int R = (2 + hc) * hc;
  for (int64_t t = blockIdx.x; t < n; t += gridDim.x) {
    const float* X = ops::at_row(x, t, x_nb);
    ops::block_hc_mixes(fn, fn_nb, R, X, hc * dim, norm_eps, mixes, &rs_sh);
    block_sinkhorn(mixes, scale, base, hc, iters, hc_eps, row, sums);
    if (static_cast<int>(threadIdx.x) < R) ops::at_row(mix, t, mix_nb)[threadIdx.x] = row[threadIdx.x];
    float* Y = ops::at_row(y, t, y_nb);
    for (int64_t d = threadIdx.x; d < dim; d += blockDim.x) {
      float s = 0;
      for (int j = 0; j < hc; ++j) s += row[j] * X[j * dim + d];
      Y[d] = s;
    }
    __syncthreads();  // mixes / row are rewritten for the next token
  }
}

}  // namespace

cudaError_t launch_hc_pre(cudaStream_t s, const float* x, uint64_t x_nb, const float* fn, uint64_t fn_nb,
                          const float* scale, const float* base, int hc, int64_t dim, int64_t n, int iters,
                          float hc_eps, float norm_eps, float* y, uint64_t y_nb, float* mix, uint64_t mix_nb) {
  if (hc < 1 || (2 + hc) * hc > kMaxMix) return cudaErrorInvalidValue;
  if (n <= 0 || dim <= 0) return cudaSuccess;
  DS4_LAUNCH(hc_pre_kernel, ops::blocks_for(n), kThreads, 0, s, x, x_nb, fn, fn_nb, scale, base, hc, dim, n, iters,
             hc_eps, norm_eps, y, y_nb, mix, mix_nb);
  return cudaGetLastError();
}

}  // namespace ds4::cuda

// kernels/cuda/ops/hc_pre/hc_pre.cu — the hc_pre op (ops_cuda.h launch_hc_pre; CPU reference
// kernels/cpu/hc_pre.cpp hc_pre_row: hc_mixes, hc_split_sinkhorn_row, hc_weighted_sum). One block
// per token: the mixes (hc_mixes.cuh), the Sinkhorn split by thread 0 (the CPU's loops, tiny),
// then one thread per output element of the weighted sum.
#include "kernels/cuda/ops/hc_pre/hc_mixes.cuh"
#include "kernels/cuda/ops/ops_common.cuh"
#include "kernels/cuda/ops/ops_cuda.h"
#include "kernels/quant/hc_sinkhorn.h"
#include "kernels/quant/math.h"

namespace ds4::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxMix = 64;  // (2 + hc) * hc

__global__ void hc_pre_kernel(const float* x, uint64_t x_nb, const float* fn, uint64_t fn_nb, const float* scale,
                              const float* base, int hc, int64_t dim, int64_t n, int iters, float hc_eps,
                              float norm_eps, float* y, uint64_t y_nb, float* mix, uint64_t mix_nb) {
  __shared__ float mixes[kMaxMix];
  __shared__ float row[kMaxMix];
  __shared__ float rs_sh;
  const int R = (2 + hc) * hc;
  for (int64_t t = blockIdx.x; t < n; t += gridDim.x) {
    const float* X = ops::at_row(x, t, x_nb);
    ops::block_hc_mixes(fn, fn_nb, R, X, hc * dim, norm_eps, mixes, &rs_sh);
    if (threadIdx.x == 0) {
      quant::hc_split_sinkhorn_row_ref(mixes, scale, base, hc, iters, hc_eps, row);
      float* M = ops::at_row(mix, t, mix_nb);
      for (int r = 0; r < R; ++r) M[r] = row[r];
    }
    __syncthreads();
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

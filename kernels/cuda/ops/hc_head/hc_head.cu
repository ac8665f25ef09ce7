// kernels/cuda/ops/hc_head/hc_head.cu — the hc_head op (ops_cuda.h launch_hc_head; CPU reference
// kernels/cpu/hc_head.cpp hc_head_row: hc_mixes over fn's hc rows, hc_head_weights,
// hc_weighted_sum). One block per token.
#include "kernels/cuda/ops/hc_pre/hc_mixes.cuh"
#include "kernels/cuda/ops/ops_common.cuh"
#include "kernels/cuda/ops/ops_cuda.h"
#include "kernels/quant/math.h"

namespace ds4::cuda {
namespace {

constexpr int kThreads = 512;  // 16 warps: the hc + 1 mix dot products at once (hc <= 15)
constexpr int kMaxHc = 16;

__global__ void __launch_bounds__(kThreads) hc_head_kernel(const float* x, uint64_t x_nb, const float* fn, uint64_t fn_nb, const float* scale,
                               const float* base, int hc, int64_t dim, int64_t n, float hc_eps, float norm_eps,
                               float* h, uint64_t h_nb) {
  __shared__ float mixes[kMaxHc];
  __shared__ float wj[kMaxHc];
  __shared__ float rs_sh;
  for (int64_t t = blockIdx.x; t < n; t += gridDim.x) {
    const float* X = ops::at_row(x, t, x_nb);
    ops::block_hc_mixes(fn, fn_nb, hc, X, hc * dim, norm_eps, mixes, &rs_sh);
    if (threadIdx.x == 0)
      for (int j = 0; j < hc; ++j) wj[j] = quant::sigmoid_f32(mixes[j] * scale[0] + base[j]) + hc_eps;
    __syncthreads();
    float* H = ops::at_row(h, t, h_nb);
    for (int64_t d = threadIdx.x; d < dim; d += blockDim.x) {
      float s = 0;
      for (int j = 0; j < hc; ++j) s += wj[j] * X[j * dim + d];
      H[d] = s;
    }
    __syncthreads();
  }
}

}  // namespace

cudaError_t launch_hc_head(cudaStream_t s, const float* x, uint64_t x_nb, const float* fn, uint64_t fn_nb,
                           const float* scale, const float* base, int hc, int64_t dim, int64_t n, float hc_eps,
                           float norm_eps, float* h, uint64_t h_nb) {
  if (hc < 1 || hc > kMaxHc) return cudaErrorInvalidValue;
  if (n <= 0 || dim <= 0) return cudaSuccess;
  DS4_LAUNCH(hc_head_kernel, ops::blocks_for(n), kThreads, 0, s, x, x_nb, fn, fn_nb, scale, base, hc, dim, n, hc_eps,
             norm_eps, h, h_nb);
  return cudaGetLastError();
}

}  // namespace ds4::cuda

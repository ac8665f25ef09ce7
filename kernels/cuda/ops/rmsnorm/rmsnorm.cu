// kernels/cuda/ops/rmsnorm/rmsnorm.cu — the rmsnorm op (ops_cuda.h launch_rmsnorm; CPU reference
// kernels/cpu/rmsnorm.cpp rmsnorm_row). One block per row: warp 0 sums the squares in the
// contract's order (dot_f32(x, x): 32 lanes, FMA, butterfly; ops::warp_dot_f32), then every thread
// scales its elements. y may be x: each element is read and written by one thread after the sum.
// (Until 2026-12-04 thread 0 summed one serial chain: 92 us per 4096-wide row on an H200.)
#include "kernels/cuda/ops/ops_common.cuh"
#include "kernels/cuda/ops/ops_cuda.h"
#include "kernels/quant/math.h"

namespace ds4::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void rmsnorm_kernel(const float* x, uint64_t x_nb, const float* w, int64_t n, int64_t dim, float eps,
                               float* y, uint64_t y_nb) {
  __shared__ float r_sh;
  for (int64_t t = blockIdx.x; t < n; t += gridDim.x) {
    const float* X = ops::at_row(x, t, x_nb);
    float* Y = ops::at_row(y, t, y_nb);
    if (threadIdx.x < 32) {
      const float ss = ops::warp_dot_f32(X, X, dim, static_cast<int>(threadIdx.x));
      if (threadIdx.x == 0) r_sh = 1.0f / quant::sqrt_f32(ss / static_cast<float>(dim) + eps);
    }
    __syncthreads();
    const float r = r_sh;
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) Y[i] = w ? w[i] * (X[i] * r) : X[i] * r;
    __syncthreads();  // r_sh is rewritten for the next row
  }
}

}  // namespace

cudaError_t launch_rmsnorm(cudaStream_t s, const float* x, uint64_t x_nb, const float* w, int64_t n, int64_t dim,
                           float eps, float* y, uint64_t y_nb) {
  if (n <= 0 || dim <= 0) return cudaSuccess;
  DS4_LAUNCH(rmsnorm_kernel, ops::blocks_for(n), kThreads, 0, s, x, x_nb, w, n, dim, eps, y, y_nb);
  return cudaGetLastError();
}

}  // namespace ds4::cuda

// kernels/cuda/ops/hc_expand/hc_expand.cu — the hc_expand op (ops_cuda.h launch_hc_expand; CPU
// reference kernels/cpu/hc_expand.cpp): each of the hc mHC copies of a row starts as the embedding.
#include "kernels/cuda/ops/ops_common.cuh"
#include "kernels/cuda/ops/ops_cuda.h"

namespace ds4::cuda {
namespace {

__global__ void hc_expand_kernel(const float* e, uint64_t e_nb, int64_t n, int64_t dim, int hc, float* x,
                                 uint64_t x_nb) {
  const int64_t w = hc * dim;
  for (int64_t i = ops::global_thread(); i < n * w; i += ops::grid_threads()) {
    const int64_t t = i / w, c = i % w;
    ops::at_row(x, t, x_nb)[c] = ops::at_row(e, t, e_nb)[c % dim];
  }
}

}  // namespace

cudaError_t launch_hc_expand(cudaStream_t s, const float* e, uint64_t e_nb, int64_t n, int64_t dim, int hc, float* x,
                             uint64_t x_nb) {
  if (n <= 0 || dim <= 0 || hc <= 0) return cudaSuccess;
  DS4_LAUNCH(hc_expand_kernel, ops::grid_for(n * hc * dim, ops::kElemThreads), ops::kElemThreads, 0, s, e, e_nb, n,
             dim, hc, x, x_nb);
  return cudaGetLastError();
}

}  // namespace ds4::cuda

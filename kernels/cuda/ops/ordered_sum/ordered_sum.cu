// kernels/cuda/ops/ordered_sum/ordered_sum.cu — the ordered_sum op (ops_cuda.h
// launch_ordered_sum; CPU reference kernels/cpu/ordered_sum.cpp): one thread per element sums the
// parts in part order, ((p0 + p1) + p2) + ... in FP32.
#include "kernels/cuda/ops/ops_common.cuh"
#include "kernels/cuda/ops/ops_cuda.h"

namespace ds4::cuda {
namespace {

__global__ void ordered_sum_kernel(const float* src, int64_t parts, int64_t m, float* dst) {
  for (int64_t i = ops::global_thread(); i < m; i += ops::grid_threads()) {
    float s = src[i];
    for (int64_t p = 1; p < parts; ++p) s += src[p * m + i];
    dst[i] = s;
  }
}

}  // namespace

cudaError_t launch_ordered_sum(cudaStream_t s, const float* src, int64_t parts, int64_t m, float* dst) {
  if (parts < 1) return cudaErrorInvalidValue;
  if (m <= 0) return cudaSuccess;
  DS4_LAUNCH(ordered_sum_kernel, ops::grid_for(m, ops::kElemThreads), ops::kElemThreads, 0, s, src, parts, m, dst);
  return cudaGetLastError();
}

}  // namespace ds4::cuda

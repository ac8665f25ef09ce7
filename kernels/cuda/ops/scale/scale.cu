// kernels/cuda/ops/scale/scale.cu — the scale op (ops_cuda.h launch_scale; CPU reference
// kernels/cpu/scale.cpp): x *= factor, one FP32 multiply per element.
#include "kernels/cuda/ops/ops_common.cuh"
#include "kernels/cuda/ops/ops_cuda.h"

namespace ds4::cuda {
namespace {

__global__ void scale_kernel(float* x, uint64_t x_nb, int64_t rows, int64_t cols, float factor) {
  for (int64_t i = ops::global_thread(); i < rows * cols; i += ops::grid_threads()) {
    const int64_t t = i / cols, c = i % cols;
    float* d = ops::at_row(x, t, x_nb) + c;
    *d = *d * factor;
  }
}

}  // namespace

cudaError_t launch_scale(cudaStream_t s, float* x, uint64_t x_nb, int64_t rows, int64_t cols, float factor) {
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  DS4_LAUNCH(scale_kernel, ops::grid_for(rows * cols, ops::kElemThreads), ops::kElemThreads, 0, s, x, x_nb, rows,
             cols, factor);
  return cudaGetLastError();
}

}  // namespace ds4::cuda

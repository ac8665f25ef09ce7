// kernels/cuda/ops/fill/fill.cu — the fill op (ops_cuda.h launch_fill; CPU reference
// kernels/cpu/fill.cpp): every element of a strided F32 matrix = value.
#include "kernels/cuda/ops/ops_common.cuh"
#include "kernels/cuda/ops/ops_cuda.h"

namespace ds4::cuda {
namespace {

__global__ void fill_kernel(float* x, uint64_t x_nb, int64_t rows, int64_t cols, float value) {
  for (int64_t i = ops::global_thread(); i < rows * cols; i += ops::grid_threads()) {
    const int64_t t = i / cols, c = i % cols;
    ops::at_row(x, t, x_nb)[c] = value;
  }
}

}  // namespace

cudaError_t launch_fill(cudaStream_t s, float* x, uint64_t x_nb, int64_t rows, int64_t cols, float value) {
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  DS4_LAUNCH(fill_kernel, ops::grid_for(rows * cols, ops::kElemThreads), ops::kElemThreads, 0, s, x, x_nb, rows,
             cols, value);
  return cudaGetLastError();
}

}  // namespace ds4::cuda

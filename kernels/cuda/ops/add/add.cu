// kernels/cuda/ops/add/add.cu — the add op (ops_cuda.h launch_add; CPU reference
// kernels/cpu/add.cpp): dst += src, one FP32 add per element, one thread per element.
#include "kernels/cuda/ops/ops_common.cuh"
#include "kernels/cuda/ops/ops_cuda.h"

namespace ds4::cuda {
namespace {

__global__ void add_kernel(float* dst, uint64_t dst_nb, const float* src, uint64_t src_nb, int64_t rows,
                           int64_t cols) {
  for (int64_t i = ops::global_thread(); i < rows * cols; i += ops::grid_threads()) {
    const int64_t t = i / cols, c = i % cols;
    float* d = ops::at_row(dst, t, dst_nb) + c;
    *d = *d + ops::at_row(src, t, src_nb)[c];
  }
}

}  // namespace

cudaError_t launch_add(cudaStream_t s, float* dst, uint64_t dst_nb, const float* src, uint64_t src_nb, int64_t rows,
                       int64_t cols) {
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  DS4_LAUNCH(add_kernel, ops::grid_for(rows * cols, ops::kElemThreads), ops::kElemThreads, 0, s, dst, dst_nb, src,
             src_nb, rows, cols);
  return cudaGetLastError();
}

}  // namespace ds4::cuda

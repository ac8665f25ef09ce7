// kernels/cuda/ops/copy/copy.cu — the copy op (ops_cuda.h launch_copy; CPU reference
// kernels/cpu/copy.cpp): raw 4-byte words, strided rows, one thread per element (grid-stride).
#include "kernels/cuda/ops/ops_common.cuh"
#include "kernels/cuda/ops/ops_cuda.h"

namespace ds4::cuda {
namespace {

__global__ void copy_kernel(const uint32_t* src, uint64_t src_nb, uint32_t* dst, uint64_t dst_nb, int64_t rows,
                            int64_t cols) {
  for (int64_t i = ops::global_thread(); i < rows * cols; i += ops::grid_threads()) {
    const int64_t t = i / cols, c = i % cols;
    ops::at_row(dst, t, dst_nb)[c] = ops::at_row(src, t, src_nb)[c];
  }
}

}  // namespace

cudaError_t launch_copy(cudaStream_t s, const void* src, uint64_t src_nb, void* dst, uint64_t dst_nb, int64_t rows,
                        int64_t cols) {
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  DS4_LAUNCH(copy_kernel, ops::grid_for(rows * cols, ops::kElemThreads), ops::kElemThreads, 0, s,
             static_cast<const uint32_t*>(src), src_nb, static_cast<uint32_t*>(dst), dst_nb, rows, cols);
  return cudaGetLastError();
}

}  // namespace ds4::cuda

// tests/cuda_emu/test_cuda_emu_kernels.cu — kernels of cuda_emu_test written as ordinary CUDA
// (DS4_LAUNCH, __shared__, DS4_DYN_SHARED), built as host C++ by ds4_add_cuda_emu_sources.
#include <cuda_runtime.h>

#include "kernels/cuda/launch.h"
#include "tests/cuda_emu/test_cuda_emu_kernels.h"

namespace ds4::emutest {
namespace {

__global__ void axpy_kernel(const float* x, float* y, float a, int n) {
  const int i = int(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) y[i] = __fmaf_rn(a, x[i], y[i]);
}

/// One block per 256 values: tree sum in static shared memory (needs every __syncthreads).
__global__ void block_sum_kernel(const int* x, int* out) {
  __shared__ int buf[256];
  const unsigned t = threadIdx.x;
  buf[t] = x[blockIdx.x * 256 + t];
  __syncthreads();
  for (unsigned s = 128; s > 0; s >>= 1) {
    if (t < s) buf[t] += buf[t + s];
    __syncthreads();
  }
  if (t == 0) out[blockIdx.x] = buf[0];
}

/// Reverses each block's slice through dynamic shared memory.
__global__ void reverse_kernel(const float* x, float* y) {
  DS4_DYN_SHARED(float, tmp);
  const unsigned t = threadIdx.x, n = blockDim.x;
  tmp[t] = x[blockIdx.x * n + t];
  __syncthreads();
  y[blockIdx.x * n + t] = tmp[n - 1 - t];
}

}  // namespace

cudaError_t launch_axpy(cudaStream_t s, const float* x, float* y, float a, int n) {
  DS4_LAUNCH(axpy_kernel, (n + 127) / 128, 128, 0, s, x, y, a, n);
  return cudaGetLastError();
}
cudaError_t launch_block_sum(cudaStream_t s, const int* x, int nblocks, int* out) {
  DS4_LAUNCH(block_sum_kernel, nblocks, 256, 0, s, x, out);
  return cudaGetLastError();
}
cudaError_t launch_reverse(cudaStream_t s, const float* x, float* y, int nblocks, int block) {
  DS4_LAUNCH(reverse_kernel, nblocks, block, size_t(block) * sizeof(float), s, x, y);
  return cudaGetLastError();
}

}  // namespace ds4::emutest

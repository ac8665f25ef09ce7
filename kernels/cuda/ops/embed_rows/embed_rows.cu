// kernels/cuda/ops/embed_rows/embed_rows.cu — embedding rows (kernels/device.h embed_rows): one
// 32-thread block per token, each thread decodes whole units of the row (exact, the CPU's
// cpu::embed_rows bits), +0 outside [vocab0, vocab1).
#include "kernels/cuda/ops/launch_compat.h"
#include "kernels/cuda/ops/matmul/decode_unit.cuh"
#include "kernels/cuda/ops/ops_cuda_matmul.h"

namespace ds4::cuda {
namespace {

__global__ void embed_rows_kernel(GgmlType type, const uint8_t* __restrict__ w, int64_t cols, uint64_t w_nb1,
                                  const int32_t* __restrict__ ids, int64_t vocab0, int64_t vocab1,
                                  float* __restrict__ out, uint64_t out_nb1) {
  const int64_t t = blockIdx.x;
  float* o = reinterpret_cast<float*>(reinterpret_cast<uint8_t*>(out) + uint64_t(t) * out_nb1);
  const int32_t id = ids[t];
  const int U = unit_elems_of(type);
  const int64_t units = cols / U;
  if (id < vocab0 || id >= vocab1) {
    for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) o[i] = 0.0f;
    return;
  }
  const uint8_t* row = w + uint64_t(id) * w_nb1;
  for (int64_t u = threadIdx.x; u < units; u += blockDim.x) decode_unit(type, row, u, o + u * U);
}

}  // namespace

cudaError_t launch_embed_rows(cudaStream_t s, GgmlType type, const void* w, int64_t cols, uint64_t w_nb1,
                              const int32_t* ids, int64_t n, int64_t vocab0, int64_t vocab1, float* out,
                              uint64_t out_nb1) {
  const int U = unit_elems_of(type);
  if (U == 0 || cols % U != 0 || n < 0 || n > 0x7fffffff) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  DS4_LAUNCH(embed_rows_kernel, dim3(unsigned(n)), dim3(32), 0, s, type, static_cast<const uint8_t*>(w), cols, w_nb1,
             ids, vocab0, vocab1, out, out_nb1);
  return cudaGetLastError();
}

}  // namespace ds4::cuda

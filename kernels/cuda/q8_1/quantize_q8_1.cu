// kernels/cuda/q8_1/quantize_q8_1.cu — Q8_1 activation quantization on the GPU.
//
// One thread per 32-value block runs the shared DS4_HD contract function
// quant::quantize_block_q8_1 (kernels/quant/quantize_q8.h): IEEE division (no fast math),
// roundf, the same fp16 rounding code as the CPU, so the blocks equal cpu::quantize_row_q8_1's
// bit for bit, non-finite blocks included (a NaN or an infinity in a block: d = s = fp16 NaN
// 0x7E00, codes 0; the contract function handles it, so there is no second copy of the rule here).
// Tested against the CPU under the emulator: tests/cuda_ops/test_quantize_q8_1_emu.cpp.
#include "kernels/cuda/launch.h"
#include "kernels/cuda/quant_matmul.h"
#include "kernels/quant/quantize_q8.h"

namespace ds4::cuda {

namespace {

__global__ void quantize_q8_1_kernel(const float* __restrict__ x, int64_t n_blocks, quant::BlockQ8_1* __restrict__ out) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n_blocks) return;
  float v[32];
#pragma unroll
  for (int j = 0; j < 32; ++j) v[j] = x[32 * i + j];
  quant::BlockQ8_1 b;
  quant::quantize_block_q8_1(v, b);
  out[i] = b;
}

}  // namespace

cudaError_t quantize_q8_1(const float* x, int64_t n, int64_t cols, void* act, cudaStream_t stream) {
  if (n < 0 || cols <= 0 || cols % 32 != 0) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  if (!x || !act || reinterpret_cast<uintptr_t>(act) % 4 != 0)
    return cudaErrorInvalidValue;
  const int64_t n_blocks = n * (cols / 32);
  DS4_LAUNCH(quantize_q8_1_kernel, unsigned((n_blocks + 127) / 128), 128, 0, stream, x, n_blocks, static_cast<quant::BlockQ8_1*>(act));
  return cudaGetLastError();
}

}  // namespace ds4::cuda

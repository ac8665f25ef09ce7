// kernels/cuda/q8_1/quantize_q8_1.cu — Q8_1 activation quantization on the GPU.
//
// Launch shape: one warp per 32-value block, lane j owning value j (one coalesced 128-byte load
// per block), 8 blocks per 256-thread CUDA block; a 4096-wide row (128 blocks) is 16 CUDA blocks
// of 8 warps instead of the former one CUDA block of 128 threads that each read 32 floats
// (uncoalesced) and ran the whole block serially (32 divisions, roundf, fp16 rounding per thread).
//
// The result is the shared DS4_HD contract of kernels/quant/quantize_q8.h, element for element:
//   amax = max_j |x_j| with a NaN sticking: a shuffle butterfly of the same maximum (the maximum
//          is order-free; a NaN in any lane makes every lane's amax a NaN, which is all the
//          contract reads of it: the non-finite test below);
//   non-finite block (amax NaN or +inf): d = s = fp16 NaN 0x7E00, codes 0 (as the contract);
//   dh = quant::q8_1_scale_bits(amax), df = fp16_to_f32(dh), q_j = df == 0 ? 0 : quant::q8_code(x_j, df)
//          (the contract's own helpers: IEEE division, roundf, clamp);
//   s  = f32_to_fp16(df * float(sum_j q_j)): the integer sum is exact, so the shuffle tree gives
//          the serial loop's value.
// So the blocks equal cpu::quantize_row_q8_1's byte for byte, non-finite blocks included.
// Tested against the CPU under the emulator: tests/cuda_ops/test_quantize_q8_1_emu.cpp.
#include "kernels/cuda/launch.h"
#include "kernels/cuda/quant_matmul.h"
#include "kernels/quant/quantize_q8.h"

namespace ds4::cuda {

namespace {

constexpr int kWarpsPerBlock = 8;  // Q8_1 blocks per CUDA block (256 threads)

__global__ void quantize_q8_1_kernel(const float* __restrict__ x, int64_t n_blocks, quant::BlockQ8_1* __restrict__ out) {
  const int lane = int(threadIdx.x) & 31;
  const int64_t i = int64_t(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
  if (i >= n_blocks) return;  // warp-uniform: the whole warp leaves
  const float v = x[32 * i + lane];
  // amax over the warp; a NaN sticks (the contract's `a > amax || a != a` rule, order-free).
  float amax = fabsf(v);
#pragma unroll
  for (int off = 16; off >= 1; off >>= 1) {
    const float o = __shfl_xor_sync(0xffffffffu, amax, off);
    amax = (o > amax || o != o) ? o : amax;
  }
  quant::BlockQ8_1& b = out[i];
  if (!(amax <= 3.40282347e+38f)) {  // NaN or +inf anywhere in the block: the NaN-scale block
    b.qs[lane] = 0;
    if (lane == 0) {
      b.d = uint16_t(0x7E00u);
      b.s = uint16_t(0x7E00u);
    }
    return;
  }
  const uint16_t dh = quant::q8_1_scale_bits(amax);
  const float df = quant::fp16_to_f32(dh);
  const int8_t q = df == 0.0f ? int8_t(0) : quant::q8_code(v, df);
  int sum = q;
#pragma unroll
  for (int off = 16; off >= 1; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
  b.qs[lane] = q;
  if (lane == 0) {
    b.d = dh;
    b.s = quant::f32_to_fp16(df * float(sum));
  }
}

}  // namespace

cudaError_t quantize_q8_1(const float* x, int64_t n, int64_t cols, void* act, cudaStream_t stream) {
  if (n < 0 || cols <= 0 || cols % 32 != 0) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  if (!x || !act || reinterpret_cast<uintptr_t>(act) % 4 != 0)
    return cudaErrorInvalidValue;
  const int64_t n_blocks = n * (cols / 32);
  const int64_t grid = (n_blocks + kWarpsPerBlock - 1) / kWarpsPerBlock;
  if (grid > 0x7fffffff) return cudaErrorInvalidValue;
  DS4_LAUNCH(quantize_q8_1_kernel, unsigned(grid), 32 * kWarpsPerBlock, 0, stream, x, n_blocks,
             static_cast<quant::BlockQ8_1*>(act));
  return cudaGetLastError();
}

}  // namespace ds4::cuda

// kernels/cuda/ops/matmul/matmul_f32.cu — the F32-activation matmul (kernels/device.h matmul with
// ActFormat::F32 / FP8_QDQ): one warp (one 32-thread block) per (weight row, 8 tokens). Each
// round the warp decodes up to 1024 consecutive row elements exactly into shared memory (one
// unit per lane), then lane l accumulates the elements i % 32 == l of every token in ascending
// i with __fmaf_rn from +0; after the row, the butterfly 16..1 (__shfl_xor_sync) and lane 0
// stores. This is the dot_f32 order of the shared spec bit for bit, whatever n or the grid.
#include "kernels/cuda/ops/launch_compat.h"
#include "kernels/cuda/ops/matmul/decode_unit.cuh"
#include "kernels/cuda/ops/ops_cuda_matmul.h"
#include "kernels/quant/act_qdq.h"

namespace ds4::cuda {
namespace {

constexpr int kTok = 8;       // tokens per warp (decode shared by them)
constexpr int kStage = 1024;  // decoded elements per round (a multiple of every unit length)

__global__ void matmul_f32_kernel(GgmlType type, const uint8_t* __restrict__ w, int64_t cols, uint64_t w_nb1,
                                  const float* __restrict__ x, uint64_t x_nb1, int64_t n, float* __restrict__ y,
                                  uint64_t y_nb1) {
  __shared__ float buf[kStage];
  const int64_t r = blockIdx.x;
  const int64_t t0 = int64_t(blockIdx.y) * kTok;
  const int lane = int(threadIdx.x);
  const uint8_t* row = w + uint64_t(r) * w_nb1;
  const int U = unit_elems_of(type);
  const int nt = int(n - t0 < kTok ? n - t0 : kTok);
  float acc[kTok];
#pragma unroll
  for (int k = 0; k < kTok; ++k) acc[k] = 0.0f;
  for (int64_t c0 = 0; c0 < cols; c0 += kStage) {
    const int len = int(cols - c0 < kStage ? cols - c0 : kStage);
    const int units = len / U;
    __syncthreads();  // the previous round's reads are done
    for (int u = lane; u < units; u += 32) decode_unit(type, row, c0 / U + u, buf + u * U);
    __syncthreads();
#pragma unroll
    for (int k = 0; k < kTok; ++k) {
      if (k < nt) {
        const float* xr = reinterpret_cast<const float*>(reinterpret_cast<const uint8_t*>(x) + uint64_t(t0 + k) * x_nb1) + c0;
        float a = acc[k];
        for (int i = lane; i < len; i += 32) a = __fmaf_rn(buf[i], xr[i], a);
        acc[k] = a;
      }
    }
  }
  // Only the nt live tokens are reduced (nt is the same in every lane, so the collectives stay
  // warp-uniform): a decode step (n = 1) does 5 shuffles per row, not 40.
#pragma unroll
  for (int k = 0; k < kTok; ++k) {
    if (k < nt) {
      float v = acc[k];
      for (int off = 16; off >= 1; off >>= 1) v = v + __shfl_xor_sync(0xffffffffu, v, off);
      if (lane == 0) reinterpret_cast<float*>(reinterpret_cast<uint8_t*>(y) + uint64_t(t0 + k) * y_nb1)[r] = v;
    }
  }
}

__global__ void qdq_fp8_rows_kernel(const float* __restrict__ x, uint64_t x_nb1, int64_t n, int64_t cols,
                                    float* __restrict__ xq) {
  const int64_t blocks = cols / 128;
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n * blocks) return;
  const int64_t t = i / blocks, b = i % blocks;
  const float* src = reinterpret_cast<const float*>(reinterpret_cast<const uint8_t*>(x) + uint64_t(t) * x_nb1) + b * 128;
  float* dst = xq + t * cols + b * 128;
  for (int j = 0; j < 128; ++j) dst[j] = src[j];
  quant::qdq_fp8_e4m3(dst, 128, 128);
}

}  // namespace

int decode_unit_elems(GgmlType type) { return unit_elems_of(type); }

cudaError_t launch_matmul_f32(cudaStream_t s, GgmlType type, const void* w, int64_t rows, int64_t cols,
                              uint64_t w_nb1, const float* x, uint64_t x_nb1, int64_t n, float* y, uint64_t y_nb1) {
  const int U = unit_elems_of(type);
  if (U == 0 || cols % U != 0 || rows < 0 || n < 0 || rows > 0x7fffffff) return cudaErrorInvalidValue;
  if (rows == 0 || n == 0) return cudaSuccess;
  const int64_t ty = (n + kTok - 1) / kTok;
  if (ty > 65535) return cudaErrorInvalidValue;
  const dim3 grid{static_cast<unsigned>(rows), static_cast<unsigned>(ty)};
  DS4_LAUNCH(matmul_f32_kernel, grid, dim3(32), 0, s, type, static_cast<const uint8_t*>(w), cols, w_nb1, x, x_nb1,
             n, y, y_nb1);
  return cudaGetLastError();
}

cudaError_t launch_qdq_fp8_rows(cudaStream_t s, const float* x, uint64_t x_nb1, int64_t n, int64_t cols, float* xq) {
  if (cols % 128 != 0 || n < 0) return cudaErrorInvalidValue;
  const int64_t total = n * (cols / 128);
  if (total == 0) return cudaSuccess;
  DS4_LAUNCH(qdq_fp8_rows_kernel, dim3(unsigned((total + 127) / 128)), dim3(128), 0, s, x, x_nb1, n, cols, xq);
  return cudaGetLastError();
}

}  // namespace ds4::cuda

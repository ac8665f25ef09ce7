// kernels/cuda/ops/embed_rows/embed_rows.cu — embedding rows (kernels/device.h embed_rows):
// out[t, :] = the exact decode of weight row ids[t] (the CPU's cpu::embed_rows bits), +0 outside
// [vocab0, vocab1).
//
// Launch shape: 256-thread blocks, grid (ceil(items / 256), min(n, 65535)), the y blocks walking
// the tokens grid-stride. An item is one element for F32 / F16 / BF16 rows (element decode: a
// copy, quant::fp16_to_f32, a shift) and one decode unit (kernels/cuda/ops/matmul/decode_unit.cuh,
// 32..256 elements) for the block types. A 4096-wide F16 row is 16 blocks of one element per
// thread; the former one 32-thread block per token decoded 128 elements per thread with byte
// loads (21 us on an H200 for the decode step's single token).
#include "kernels/cuda/ops/launch_compat.h"
#include "kernels/cuda/ops/matmul/decode_unit.cuh"
#include "kernels/cuda/ops/ops_cuda_matmul.h"

namespace ds4::cuda {
namespace {

constexpr int kEmbedThreads = 256;

/// True for the types decoded one element per thread.
DS4_HD inline bool per_element(GgmlType t) { return t == GgmlType::F32 || t == GgmlType::F16 || t == GgmlType::BF16; }

/// Element j of an F32 / F16 / BF16 row, read and decoded as decode_unit does (F32 as floats,
/// the 16-bit types byte-wise, then quant::fp16_to_f32 / bf16_to_f32).
__device__ inline float decode_element(GgmlType t, const uint8_t* row, int64_t j) {
  if (t == GgmlType::F32) return reinterpret_cast<const float*>(row)[j];
  const uint16_t h = uint16_t(row[2 * j] | (row[2 * j + 1] << 8));
  return t == GgmlType::F16 ? quant::fp16_to_f32(h) : quant::bf16_to_f32(h);
}

__global__ void embed_rows_kernel(GgmlType type, const uint8_t* __restrict__ w, int64_t cols, uint64_t w_nb1,
                                  const int32_t* __restrict__ ids, int64_t n, int64_t vocab0, int64_t vocab1,
                                  float* __restrict__ out, uint64_t out_nb1) {
  const bool elem = per_element(type);
  const int U = elem ? 1 : unit_elems_of(type);
  const int64_t j = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;  // this thread's item
  if (j >= cols / U) return;
  for (int64_t t = blockIdx.y; t < n; t += gridDim.y) {
    float* o = reinterpret_cast<float*>(reinterpret_cast<uint8_t*>(out) + uint64_t(t) * out_nb1);
    const int32_t id = ids[t];
    if (id < vocab0 || id >= vocab1) {
      for (int e = 0; e < U; ++e) o[j * U + e] = 0.0f;
      continue;
    }
    const uint8_t* row = w + uint64_t(id) * w_nb1;
    if (elem)
      o[j] = decode_element(type, row, j);
    else
      decode_unit(type, row, j, o + j * U);
  }
}

}  // namespace

cudaError_t launch_embed_rows(cudaStream_t s, GgmlType type, const void* w, int64_t cols, uint64_t w_nb1,
                              const int32_t* ids, int64_t n, int64_t vocab0, int64_t vocab1, float* out,
                              uint64_t out_nb1) {
  // F32 / F16 / BF16 rows of any length (one element per item, as the CPU op takes them: e.g. the
  // split-staging gather of one routing weight per slot); block types whole decode units.
  const int U = per_element(type) ? 1 : unit_elems_of(type);
  if (unit_elems_of(type) == 0 || cols % U != 0 || n < 0 || n > 0x7fffffff) return cudaErrorInvalidValue;
  if (n == 0 || cols == 0) return cudaSuccess;
  const int64_t items = per_element(type) ? cols : cols / U;
  const int64_t gx = (items + kEmbedThreads - 1) / kEmbedThreads;
  if (gx > 0x7fffffff) return cudaErrorInvalidValue;
  const dim3 grid{static_cast<unsigned>(gx), static_cast<unsigned>(n < 65535 ? n : 65535)};
  DS4_LAUNCH(embed_rows_kernel, grid, dim3(kEmbedThreads), 0, s, type, static_cast<const uint8_t*>(w), cols, w_nb1,
             ids, n, vocab0, vocab1, out, out_nb1);
  return cudaGetLastError();
}

}  // namespace ds4::cuda

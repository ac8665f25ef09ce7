// kernels/cuda/ops/matmul/matmul_f32.cu — the F32-activation matmul (kernels/device.h matmul with
// ActFormat::F32 / FP8_QDQ, and the F32 / F16 / BF16 weights under any activation mode).
//
// Every output y[t, r] is one warp: lane l accumulates the elements i % 32 == l of weight row r
// times x[t, :] in ascending i with __fmaf_rn from +0, then the butterfly 16..1
// (__shfl_xor_sync) and lane 0 stores. This is the dot_f32 order of the shared spec
// (kernels/quant/dot_f32.h) bit for bit, whatever n or the grid. A warp serves one weight row and
// up to kTok = 8 tokens (the row is read once for them). Two kernels:
//
// - direct (F32, F16, BF16 rows, element-aligned): 4 warps (rows) per 128-thread block, grid
//   (ceil(rows / 4), ceil(n / 8)). Each lane loads its own elements c + 32 q + lane of the row
//   straight from global memory, kBatch = 32 of them per step, then the same 32 of x per token
//   (L1 / L2-resident), then their FMAs (each warp load is one coalesced 64- or 128-byte segment;
//   64 loads in flight per warp at n = 1), converting the weights exactly (F16: the hardware
//   conversion on the device, the shared fp16_to_f32 on the host; BF16: a shift). Whole steps
//   run without bounds tests, a last partial step with them. Serial work per lane: cols / 32
//   FMAs in ceil(cols / 1024) load steps. These are the decode-time F32-path products (the
//   compressor, indexer and router projections of DeepSeek-V4-Flash are F16 / BF16): the former
//   layout below decoded 32 elements per lane with byte loads into shared memory with a 32-way
//   bank conflict and measured 41 us per launch on an H200 (7 launches per layer, 289 us per
//   decode step).
// - staged (every other type with a decoder): one warp per block, grid (rows, ceil(n / 8)). Each
//   round the lanes decode up to kStage = 1024 consecutive row elements (one unit per lane,
//   kernels/cuda/ops/matmul/decode_unit.cuh) exactly into shared memory, unit u at u * (U + 1)
//   (the padding makes both the decode writes and the dot reads conflict-free), then the lanes
//   take the elements unit by unit in ascending order as above.
#include "kernels/cuda/ops/launch_compat.h"
#include "kernels/cuda/ops/matmul/decode_unit.cuh"
#include "kernels/cuda/ops/ops_cuda_matmul.h"
#include "kernels/quant/act_qdq.h"

#if !defined(DS4_CUDA_EMU)
#include <cuda_fp16.h>
#endif

namespace ds4::cuda {
namespace {

constexpr int kTok = 8;            // tokens per warp (the row read shared by them)
constexpr int kStage = 1024;       // staged kernel: decoded elements per round (a multiple of every unit length)
constexpr int kDirectWarps = 4;    // direct kernel: rows (warps) per CUDA block
constexpr int kBatch = 32;         // direct kernel: elements per lane loaded before their FMAs

/// fp16 bits -> float, exact. The device uses the hardware conversion (one instruction; every
/// fp16 value, subnormals included, is an fp32 value, so it equals quant::fp16_to_f32 except for
/// a NaN's payload, which the contract leaves free: kernels/NUMERICS.md); the emulated build calls
/// the shared decoder.
__device__ inline float f16_value(uint16_t h) {
#if defined(__CUDA_ARCH__)
  return __half2float(__ushort_as_half(h));
#else
  return quant::fp16_to_f32(h);
#endif
}

/// Element access of the direct kernel's weight types: raw storage and its exact float value.
struct ElemF32 {
  using S = float;
  __device__ static float value(S v) { return v; }
};
struct ElemF16 {
  using S = uint16_t;
  __device__ static float value(S v) { return f16_value(v); }
};
struct ElemBF16 {
  using S = uint16_t;
  __device__ static float value(S v) { return quant::bf16_to_f32(v); }
};

/// x row t of the F32 activations (rows x_nb1 bytes apart).
__device__ inline const float* x_row(const float* x, uint64_t x_nb1, int64_t t) {
  return reinterpret_cast<const float*>(reinterpret_cast<const uint8_t*>(x) + uint64_t(t) * x_nb1);
}

/// The butterfly 16..1 of the live tokens' lane sums and lane 0's stores (nt is the same in every
/// lane, so the collectives stay warp-uniform: a decode step (n = 1) does 5 shuffles per row, not 40).
__device__ inline void reduce_store(float (&acc)[kTok], int nt, int lane, int64_t t0, int64_t r, float* y,
                                    uint64_t y_nb1) {
#pragma unroll
  for (int k = 0; k < kTok; ++k) {
    if (k < nt) {
      float v = acc[k];
      for (int off = 16; off >= 1; off >>= 1) v = v + __shfl_xor_sync(0xffffffffu, v, off);
      if (lane == 0) reinterpret_cast<float*>(reinterpret_cast<uint8_t*>(y) + uint64_t(t0 + k) * y_nb1)[r] = v;
    }
  }
}

/// One load step of the direct kernel at column c: the lane's elements c + 32 q + lane (q <
/// kBatch; with kFull = false only those below cols, the row's tail) are loaded, then for each
/// live token its x values, then the FMAs in ascending q. cols % 32 == 0, so the tail test
/// `c + 32 q < cols` is the same in every lane.
template <class E, bool kFull>
__device__ inline void direct_step(const typename E::S* __restrict__ row, int64_t c, int64_t cols,
                                   const float* __restrict__ x, uint64_t x_nb1, int64_t t0, int nt, int lane,
                                   float (&acc)[kTok]) {
  using S = typename E::S;
  S wv[kBatch];
#pragma unroll
  for (int q = 0; q < kBatch; ++q) wv[q] = (kFull || c + 32 * q < cols) ? row[c + 32 * q + lane] : S(0);
#pragma unroll
  for (int k = 0; k < kTok; ++k) {
    if (k < nt) {
      const float* xr = x_row(x, x_nb1, t0 + k) + c + lane;
      float xv[kBatch];
#pragma unroll
      for (int q = 0; q < kBatch; ++q) xv[q] = (kFull || c + 32 * q < cols) ? xr[32 * q] : 0.0f;
      float a = acc[k];
#pragma unroll
      for (int q = 0; q < kBatch; ++q)
        if (kFull || c + 32 * q < cols) a = __fmaf_rn(E::value(wv[q]), xv[q], a);
      acc[k] = a;
    }
  }
}

template <class E>
__global__ void matmul_f32_direct_kernel(const uint8_t* __restrict__ w, int64_t rows, int64_t cols, uint64_t w_nb1,
                                         const float* __restrict__ x, uint64_t x_nb1, int64_t n,
                                         float* __restrict__ y, uint64_t y_nb1) {
  using S = typename E::S;
  const int lane = int(threadIdx.x) & 31;
  const int64_t r = int64_t(blockIdx.x) * kDirectWarps + (threadIdx.x >> 5);
  if (r >= rows) return;  // warp-uniform; no block barrier in this kernel
  const int64_t t0 = int64_t(blockIdx.y) * kTok;
  const int nt = int(n - t0 < kTok ? n - t0 : kTok);
  const S* row = reinterpret_cast<const S*>(w + uint64_t(r) * w_nb1);
  float acc[kTok];
#pragma unroll
  for (int k = 0; k < kTok; ++k) acc[k] = 0.0f;
  // Whole steps, then the tail: each lane's elements stay in ascending order.
  int64_t c = 0;
  for (; c + 32 * kBatch <= cols; c += 32 * kBatch) direct_step<E, true>(row, c, cols, x, x_nb1, t0, nt, lane, acc);
  if (c < cols) direct_step<E, false>(row, c, cols, x, x_nb1, t0, nt, lane, acc);
  reduce_store(acc, nt, lane, t0, r, y, y_nb1);
}

__global__ void matmul_f32_staged_kernel(GgmlType type, const uint8_t* __restrict__ w, int64_t cols, uint64_t w_nb1,
                                         const float* __restrict__ x, uint64_t x_nb1, int64_t n,
                                         float* __restrict__ y, uint64_t y_nb1) {
  // At most 32 units per round (U >= 32), each followed by one padding float.
  __shared__ float buf[kStage + 32];
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
    __syncwarp();  // the previous round's reads are done (the block is one warp)
    for (int u = lane; u < units; u += 32) decode_unit(type, row, c0 / U + u, buf + u * (U + 1));
    __syncwarp();
#pragma unroll
    for (int k = 0; k < kTok; ++k) {
      if (k < nt) {
        const float* xr = x_row(x, x_nb1, t0 + k) + c0;
        float a = acc[k];
        // Unit by unit, offsets ascending: lane l still takes its elements i % 32 == l in
        // ascending i (U is a multiple of 32).
        for (int u = 0; u < units; ++u) {
          const float* b = buf + u * (U + 1);
          const float* xu = xr + u * U;
          for (int o = lane; o < U; o += 32) a = __fmaf_rn(b[o], xu[o], a);
        }
        acc[k] = a;
      }
    }
  }
  reduce_store(acc, nt, lane, t0, r, y, y_nb1);
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

/// Element size of the direct kernel's types, 0 for the others.
int direct_elem_bytes(GgmlType type) {
  switch (type) {
    case GgmlType::F32: return 4;
    case GgmlType::F16: case GgmlType::BF16: return 2;
    default: return 0;
  }
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
  const auto* wb = static_cast<const uint8_t*>(w);
  const int eb = direct_elem_bytes(type);
  // The direct kernel loads whole elements: the rows must be element-aligned (device buffers
  // and views of them always are; anything else takes the byte-wise staged decode).
  if (eb != 0 && (reinterpret_cast<uintptr_t>(w) % uintptr_t(eb) == 0) && w_nb1 % uint64_t(eb) == 0) {
    const dim3 grid{static_cast<unsigned>((rows + kDirectWarps - 1) / kDirectWarps), static_cast<unsigned>(ty)};
    const dim3 block(32 * kDirectWarps);
    if (type == GgmlType::F32)
      DS4_LAUNCH((matmul_f32_direct_kernel<ElemF32>), grid, block, 0, s, wb, rows, cols, w_nb1, x, x_nb1, n, y, y_nb1);
    else if (type == GgmlType::F16)
      DS4_LAUNCH((matmul_f32_direct_kernel<ElemF16>), grid, block, 0, s, wb, rows, cols, w_nb1, x, x_nb1, n, y, y_nb1);
    else
      DS4_LAUNCH((matmul_f32_direct_kernel<ElemBF16>), grid, block, 0, s, wb, rows, cols, w_nb1, x, x_nb1, n, y, y_nb1);
    return cudaGetLastError();
  }
  const dim3 grid{static_cast<unsigned>(rows), static_cast<unsigned>(ty)};
  DS4_LAUNCH(matmul_f32_staged_kernel, grid, dim3(32), 0, s, type, wb, cols, w_nb1, x, x_nb1, n, y, y_nb1);
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

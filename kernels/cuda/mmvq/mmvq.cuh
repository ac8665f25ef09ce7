// kernels/cuda/mmvq/mmvq.cuh — MMVQ kernel templates (decode path, 1..8 token columns), included
// by the per-type instantiation files kernels/cuda/inst/mmvq_<type>.cu.
//
// Mapping onto the contract (kernels/quant/dot_q8_1.h): one warp owns weight row r; lane l walks
// chunks b = l, l+32, ... in ascending order, decodes chunk b once (chunk_decode.cuh) and, for each
// of the NC token columns, adds the DP4A chunk partial to its own accumulator (lane[l] of the
// contract, starting at 0.0f). The five __shfl_xor_sync steps (16, 8, 4, 2, 1) are the contract's
// butterfly: lane l < off receives lane l + off and computes lane[l] + lane[l+off]. Lane 0 writes.
// Nothing depends on NC, the grid or the GPU, so every column's bits equal the CPU reference.
//
// Without __CUDACC__ only the kernels are visible (no launchers): the CPU-only unit test
// tests/gpu/test_mmq_host_sim.cpp runs them on host threads with emulated intrinsics.
#pragma once

#include "kernels/cuda/launch.h"
#include "kernels/cuda/common/chunk_decode.cuh"
#if defined(__CUDACC__) || defined(DS4_CUDA_EMU)
#include <cuda_runtime.h>
#endif

namespace ds4::cuda {

/// Warps (= weight rows) per MMVQ thread block.
inline constexpr int kMmvqRowsPerBlock = 4;

/// Contract row sums of one weight row for nc <= NC columns (out[c], valid in every lane).
template <class Tr, int NC>
__device__ __forceinline__ void mmvq_row(const uint8_t* row, int64_t nchunks, const BlockQ8_1* act,
                                         int64_t act_stride, int nc, float* out) {
  const int lane = threadIdx.x & 31;
  float acc[NC];
#pragma unroll
  for (int c = 0; c < NC; ++c) acc[c] = 0.0f;
  for (int64_t b = lane; b < nchunks; b += 32) {
    int w[8];
    ChunkMeta m;
    decode_row_chunk<Tr>(row, b, w, m);
#pragma unroll
    for (int c = 0; c < NC; ++c) {
      if (c < nc) {
        ActWords a;
        load_act(act + c * act_stride + b, a);
        acc[c] = __fadd_rn(acc[c], chunk_dot_dp4a<Tr::kEpi>(w, m, a));
      }
    }
  }
#pragma unroll
  for (int c = 0; c < NC; ++c) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) acc[c] = __fadd_rn(acc[c], __shfl_xor_sync(0xFFFFFFFFu, acc[c], off));
    out[c] = acc[c];
  }
}

/// y[c * rows + r] = row r . act column c, for c < nc <= NC (act column c at act + c * act_stride).
/// NC (1, 2, 4, 8) only sizes the accumulator array; the bits do not depend on it.
template <class Tr, int NC>
__global__ void __launch_bounds__(32 * kMmvqRowsPerBlock)
    mmvq_kernel(const uint8_t* __restrict__ W, int64_t rows, int64_t row_bytes, int64_t nchunks,
                const BlockQ8_1* __restrict__ act, int64_t act_stride, int nc, float* __restrict__ y) {
  const int64_t r = int64_t(blockIdx.x) * kMmvqRowsPerBlock + threadIdx.x / 32;
  if (r >= rows) return;  // whole warp exits together
  float out[NC];
  mmvq_row<Tr, NC>(W + r * row_bytes, nchunks, act, act_stride, nc, out);
  if ((threadIdx.x & 31) == 0) {
#pragma unroll
    for (int c = 0; c < NC; ++c)
      if (c < nc) y[c * rows + r] = out[c];
  }
}

/// DSV4 clamped SwiGLU of one (gate, up) pair, FP32 (limit <= 0: no clamp). Mirrors
/// kernels/cpu/swiglu.cpp swiglu_clamped: g / (1 + exp(-g)) * u.
__device__ __forceinline__ float swiglu_clamped_dev(float g, float u, float limit) {
  if (limit > 0.0f) {  // std::min(g, limit) and std::clamp(u, -limit, limit), spelled out
    g = limit < g ? limit : g;
    u = u < -limit ? -limit : (limit < u ? limit : u);
  }
  return __fmul_rn(__fdiv_rn(g, __fadd_rn(1.0f, expf(-g))), u);
}

/// h[c * rows + r] = swiglu(Wg row r . act c, Wu row r . act c) for c < nc <= NC.
template <class Tr, int NC>
__global__ void __launch_bounds__(32 * kMmvqRowsPerBlock)
    mmvq_swiglu_kernel(const uint8_t* __restrict__ Wg, const uint8_t* __restrict__ Wu, int64_t rows,
                       int64_t row_bytes, int64_t nchunks, const BlockQ8_1* __restrict__ act,
                       int64_t act_stride, int nc, float limit, float* __restrict__ h) {
  const int64_t r = int64_t(blockIdx.x) * kMmvqRowsPerBlock + threadIdx.x / 32;
  if (r >= rows) return;
  float g[NC], u[NC];
  mmvq_row<Tr, NC>(Wg + r * row_bytes, nchunks, act, act_stride, nc, g);
  mmvq_row<Tr, NC>(Wu + r * row_bytes, nchunks, act, act_stride, nc, u);
  if ((threadIdx.x & 31) == 0) {
#pragma unroll
    for (int c = 0; c < NC; ++c)
      if (c < nc) h[c * rows + r] = swiglu_clamped_dev(g[c], u[c], limit);
  }
}

/// Test support: P[b] = contract chunk partial b of one row (one thread per chunk).
template <class Tr>
__global__ void chunk_partials_kernel(const uint8_t* __restrict__ row, int64_t nchunks,
                                      const BlockQ8_1* __restrict__ act, float* __restrict__ P) {
  const int64_t b = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (b >= nchunks) return;
  int w[8];
  ChunkMeta m;
  decode_row_chunk<Tr>(row, b, w, m);
  ActWords a;
  load_act(act + b, a);
  P[b] = chunk_dot_dp4a<Tr::kEpi>(w, m, a);
}

#if defined(__CUDACC__) || defined(DS4_CUDA_EMU)  // launchers: nvcc, or the CUDA emulation
/// Bytes of one weight row of Tr with `cols` elements.
template <class Tr>
constexpr int64_t tr_row_bytes(int64_t cols) {
  return cols / (32 * Tr::kChunks) * int64_t(sizeof(typename Tr::Block));
}

/// Launches mmvq (gate_or_w) or, when up != nullptr, the fused SwiGLU, for all n columns in
/// groups of 8. Argument checks are done by the dispatcher.
template <class Tr>
cudaError_t launch_mmvq(const void* Wg, const void* Wu, int64_t rows, int64_t cols, const void* act,
                        int64_t n, float limit, float* y, cudaStream_t stream) {
  const int64_t nchunks = cols / 32, rb = tr_row_bytes<Tr>(cols);
  const dim3 grid(unsigned((rows + kMmvqRowsPerBlock - 1) / kMmvqRowsPerBlock)), block(32 * kMmvqRowsPerBlock);
  const auto* wg = static_cast<const uint8_t*>(Wg);
  const auto* wu = static_cast<const uint8_t*>(Wu);
  for (int64_t c0 = 0; c0 < n; c0 += 8) {
    const int nc = int(n - c0 < 8 ? n - c0 : 8);
    const auto* a = static_cast<const BlockQ8_1*>(act) + c0 * nchunks;
    float* yc = y + c0 * rows;
#define DS4_MMVQ_LAUNCH(NC)                                                                          \
  if (wu) DS4_LAUNCH((mmvq_swiglu_kernel<Tr, NC>), grid, block, 0, stream, wg, wu, rows, rb, nchunks, a, nchunks, nc, limit, yc); \
  else DS4_LAUNCH((mmvq_kernel<Tr, NC>), grid, block, 0, stream, wg, rows, rb, nchunks, a, nchunks, nc, yc);
    // Accumulator arrays of 1, 2, 4 or 8 columns (fewer instantiations; bits unaffected).
    if (nc == 1) {
      DS4_MMVQ_LAUNCH(1)
    } else if (nc == 2) {
      DS4_MMVQ_LAUNCH(2)
    } else if (nc <= 4) {
      DS4_MMVQ_LAUNCH(4)
    } else {
      DS4_MMVQ_LAUNCH(8)
    }
#undef DS4_MMVQ_LAUNCH
    const cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) return err;
  }
  return cudaSuccess;
}

/// Launches chunk_partials_kernel for one row.
template <class Tr>
cudaError_t launch_chunk_partials(const void* w_row, int64_t cols, const void* act, float* P, cudaStream_t stream) {
  const int64_t nchunks = cols / 32;
  DS4_LAUNCH(chunk_partials_kernel<Tr>, unsigned((nchunks + 127) / 128), 128, 0, stream,
             static_cast<const uint8_t*>(w_row), nchunks, static_cast<const BlockQ8_1*>(act), P);
  return cudaGetLastError();
}
#endif  // __CUDACC__

}  // namespace ds4::cuda

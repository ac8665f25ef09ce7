// kernels/cuda/ops/ops_common.cuh — device helpers shared by the non-matmul op kernels of
// kernels/cuda/ops/<op>/ (declared in ops_cuda.h): byte-strided row access, grid sizing, the
// warp form of the F32 dot (shared-spec section 1 / kernels/quant/dot_f32.h order) and the
// block-wide top-k selection of the topk contract (kernels/cpu/topk.cpp). Compiled by nvcc and,
// under the test emulation (tests/cuda_emu, -DDS4_CUDA_EMU), as host C++.
#pragma once

#include <cstdint>
#include <type_traits>

#include "kernels/cuda/launch.h"

namespace ds4::cuda::ops {

/// Row `r` of a matrix whose rows are `nb` bytes apart (const or not, any element type).
template <class T>
__device__ inline T* at_row(T* base, int64_t r, uint64_t nb) {
  using B = std::conditional_t<std::is_const_v<T>, const unsigned char, unsigned char>;
  return reinterpret_cast<T*>(reinterpret_cast<B*>(base) + static_cast<uint64_t>(r) * nb);
}

/// Threads per block of the element-wise kernels.
inline constexpr int kElemThreads = 256;

/// Blocks for `items` work items at `threads` per block, capped (the kernels loop grid-stride).
inline unsigned grid_for(int64_t items, int threads, int64_t cap = 4096) {
  int64_t b = (items + threads - 1) / threads;
  if (b < 1) b = 1;
  if (b > cap) b = cap;
  return static_cast<unsigned>(b);
}

/// Blocks for `items` independent blocks of work (one block each), capped (grid-stride loop).
inline unsigned blocks_for(int64_t items, int64_t cap = 4096) {
  return static_cast<unsigned>(items < 1 ? 1 : (items > cap ? cap : items));
}

/// Index of this thread in a 1-D grid and the grid's thread count.
__device__ inline int64_t global_thread() { return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; }
__device__ inline int64_t grid_threads() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }

/// dot_f32 of shared-spec section 1 computed by one warp (all 32 lanes must call it, `lane` =
/// threadIdx.x % 32): lane l accumulates, ascending, a[i]*b[i] for i % 32 == l with one fused
/// multiply-add each from +0, then the butterfly off = 16, 8, 4, 2, 1. Every lane returns the same
/// bits (IEEE addition is commutative, so the XOR butterfly gives each lane lane 0's tree).
/// The loads of 16 consecutive strides are issued before their FMAs (the same FMAs in the same
/// order; past n a load is skipped and so is its FMA): a rolled loop waited for each load in turn,
/// which made one 16384-long dot cost ~100 us on an H200.
__device__ inline float warp_dot_f32(const float* a, const float* b, int64_t n, int lane) {
  constexpr int kU = 16;
  float acc = 0.0f;
  for (int64_t i0 = lane; i0 < n; i0 += kU * 32) {
    float va[kU], vb[kU];
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int64_t i = i0 + u * 32;
      va[u] = i < n ? a[i] : 0.0f;
      vb[u] = i < n ? b[i] : 0.0f;
    }
#pragma unroll
    for (int u = 0; u < kU; ++u)
      if (i0 + u * 32 < n) acc = fmaf(va[u], vb[u], acc);
  }
  for (int off = 16; off > 0; off >>= 1) acc = acc + __shfl_xor_sync(0xffffffffu, acc, off);
  return acc;
}

/// The topk contract's total order: true when (va, index a) ranks before (vb, index b): larger
/// value first, equal values (also -0 == +0) by the lower index, NaN after every number.
__device__ inline bool topk_before(float va, int32_t a, float vb, int32_t b) {
  const bool na = va != va, nb = vb != vb;
  if (na != nb) return nb;
  if (!na && va != vb) return va > vb;
  return a < b;
}

/// Block-wide selection of the min(k, n) first indices of v[0..n) in the topk order into out[]
/// (written by thread 0); returns min(k, n). Round r picks the best index ranking after round
/// r-1's pick (the order is total, so the result is the unique sorted prefix, whatever the
/// reduction tree). Every thread of the block must call it; blockDim.x a power of two;
/// red_v / red_i: shared scratch of blockDim.x entries.
__device__ inline int64_t block_topk(const float* v, int64_t n, int64_t k, int32_t* out, float* red_v,
                                     int32_t* red_i) {
  const int64_t m = k < n ? k : n;
  const unsigned tid = threadIdx.x;
  int32_t prev = -1;
  float pv = 0.0f;
  for (int64_t r = 0; r < m; ++r) {
    float bv = 0.0f;
    int32_t bi = -1;
    for (int64_t i = tid; i < n; i += blockDim.x) {
      const float x = v[i];
      const int32_t ii = static_cast<int32_t>(i);
      if (prev >= 0 && !topk_before(pv, prev, x, ii)) continue;  // ranks at or before the last pick
      if (bi < 0 || topk_before(x, ii, bv, bi)) {
        bv = x;
        bi = ii;
      }
    }
    red_v[tid] = bv;
    red_i[tid] = bi;
    __syncthreads();
    for (unsigned off = blockDim.x / 2; off > 0; off >>= 1) {
      if (tid < off) {
        const float ov = red_v[tid + off];
        const int32_t oi = red_i[tid + off];
        if (oi >= 0 && (red_i[tid] < 0 || topk_before(ov, oi, red_v[tid], red_i[tid]))) {
          red_v[tid] = ov;
          red_i[tid] = oi;
        }
      }
      __syncthreads();
    }
    prev = red_i[0];
    pv = red_v[0];
    if (tid == 0) out[r] = prev;
    __syncthreads();  // everyone has read red_[0] before the next round overwrites it
  }
  return m;
}

}  // namespace ds4::cuda::ops

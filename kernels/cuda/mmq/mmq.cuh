// kernels/cuda/mmq/mmq.cuh — MMQ kernel template (prefill and grouped MoE), included by the
// per-type instantiation files kernels/cuda/inst/mmq_<type>.cu.
//
// Tile: 64 weight rows x 16 token columns per 128-thread block; warp w owns rows 16w..16w+15 of
// the tile and all 16 columns, i.e. 2 x 2 int8 MMA tiles of 8 x 8 per 16-element K half. Each
// thread owns 8 outputs (row, column) for the whole K loop and writes them once.
//
// K order (the contract, kernels/quant/dot_q8_1.h): contract lane l = sum over chunks l, l+32, ...
// in ascending order starting from 0.0f; the row result is the 16-8-4-2-1 butterfly over the 32
// lanes. The block follows the LaneWalk of lane_tree.h (leaves in bit-reversed lane order, each
// leaf's chunks ascending, finished leaves folded into a 5-entry stack), which reproduces the
// butterfly's additions exactly with 6 floats per output instead of 32 (host-tested in
// tests/gpu/test_cuda_host_helpers.cpp). Chunks are staged kKs at a time: decoded once
// per block into shared memory (int8 lanes + ChunkMeta) and shared by the 16 columns.
//
// Integer sums: mma.sync.aligned.m8n8k16.row.col.s32.s8.s8.s32 (sm_75+) or DP4A (kMma = false
// or pre-Turing); both give the same exact int32 S_h, so the float results are identical.
//
// Without __CUDACC__ only the kernel body is visible (no launcher): the CPU-only unit test
// tests/gpu/test_mmq_host_sim.cpp runs it on 128 host threads with emulated intrinsics.
#pragma once

#include "kernels/cuda/launch.h"
#include "kernels/cuda/common/chunk_decode.cuh"
#include "kernels/cuda/common/mma.cuh"
#include "kernels/cuda/mmq/lane_tree.h"
#include "kernels/cuda/mmq/mmq_layout.h"
#if defined(__CUDACC__) || defined(DS4_CUDA_EMU)
#include <cuda_runtime.h>

#include "kernels/cuda/quant_matmul.h"
#endif

namespace ds4::cuda {

inline constexpr int kMmqKs = 4;                 ///< chunks staged per __syncthreads
inline constexpr int kMmqWordStride = 12;        ///< 8 int8x4 words + 4 pad (no bank conflicts)

/// Where the columns of one tile come from and go to.
struct MmqColumns {
  const int32_t* sorted_pairs;  ///< null: dense (column j = token j); else pair ids (MoE)
  int k;                        ///< slots per token (MoE): token = pair / k
};

/// Shared-memory staging of kMmqKs chunks.
struct MmqSmem {
  int w[kMmqKs][kMmqRows][kMmqWordStride];
  ChunkMeta meta[kMmqKs][kMmqRows];
  int a[kMmqKs][kMmqCols][kMmqWordStride];
  float da[kMmqKs][kMmqCols];
  int asum[kMmqKs][kMmqCols][2];
};

/// Exact 8x8x16 int8 product: (d0, d1) = S for (row lane/4, cols 2*(lane%4) + {0, 1}).
template <bool kMma>
__device__ __forceinline__ void tile_dot(const int* wrow_base, const int* acol_base, int h, int& d0, int& d1) {
  const int lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
#if (defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 750) || defined(DS4_CUDA_EMU)
  if constexpr (kMma) {
    const int a = wrow_base[g * kMmqWordStride + 4 * h + q];
    const int b = acol_base[g * kMmqWordStride + 4 * h + q];
    mma_m8n8k16_s8(d0, d1, a, b, 0, 0);
    return;
  }
#endif
  const int* wr = wrow_base + g * kMmqWordStride + 4 * h;
  const int* a0 = acol_base + (2 * q) * kMmqWordStride + 4 * h;
  const int* a1 = acol_base + (2 * q + 1) * kMmqWordStride + 4 * h;
  d0 = 0;
  d1 = 0;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    d0 = __dp4a(wr[i], a0[i], d0);
    d1 = __dp4a(wr[i], a1[i], d1);
  }
}

/// One MMQ tile. W: weight matrix (dense) or w_experts (MoE, via tiles); y [*, rows].
template <class Tr, bool kMma>
__global__ void __launch_bounds__(kMmqThreads)
    mmq_kernel(const uint8_t* __restrict__ W_dense, const void* const* __restrict__ w_experts,
               int64_t rows, int64_t row_bytes, int64_t nchunks, const BlockQ8_1* __restrict__ act,
               int64_t n_cols, MmqColumns cols, const int32_t* __restrict__ tiles,
               const int32_t* __restrict__ counters, float* __restrict__ y) {
  __shared__ MmqSmem sm;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid & 31;
  const int64_t row0 = int64_t(blockIdx.x) * kMmqRows;

  // Columns of this tile: [c_begin, c_end) of the dense / sorted column list.
  const uint8_t* W = W_dense;
  int64_t c_begin, c_end;
  if (tiles) {
    if (int(blockIdx.y) >= counters[0]) return;
    const int32_t* tl = tiles + 3 * blockIdx.y;
    W = static_cast<const uint8_t*>(w_experts[tl[0]]);
    c_begin = tl[1];
    c_end = tl[2];
  } else {
    c_begin = int64_t(blockIdx.y) * kMmqCols;
    c_end = c_begin + kMmqCols < n_cols ? c_begin + kMmqCols : n_cols;
  }
  auto src_row = [&](int64_t c) -> int64_t { return cols.sorted_pairs ? cols.sorted_pairs[c] / cols.k : c; };
  auto dst_row = [&](int64_t c) -> int64_t { return cols.sorted_pairs ? cols.sorted_pairs[c] : c; };

  // Output o = (rt * 2 + ct) * 2 + i: row 16*warp + 8*rt + lane/4, column 8*ct + 2*(lane%4) + i.
  float cur[8], st[8][5];
#pragma unroll
  for (int o = 0; o < 8; ++o) {
    cur[o] = 0.0f;
#pragma unroll
    for (int s = 0; s < 5; ++s) st[o][s] = 0.0f;
  }

  LaneWalk walk;
  while (lane_walk_event(walk, nchunks) != WalkEvent::End) {
    // The next kMmqKs chunks of the walk (all threads compute the same list).
    int64_t gb[kMmqKs];
    const int n = lane_walk_peek(walk, nchunks, gb, kMmqKs);
    // Stage: decode weight chunks (one task = one row of one slot) ...
    for (int task = tid; task < kMmqKs * kMmqRows; task += kMmqThreads) {
      const int slot = task / kMmqRows, r = task % kMmqRows;
      if (slot >= n) continue;
      int w[8];
      ChunkMeta m;
      if (row0 + r < rows) {
        decode_row_chunk<Tr>(W + (row0 + r) * row_bytes, gb[slot], w, m);
      } else {
#pragma unroll
        for (int i = 0; i < 8; ++i) w[i] = 0;
        m = {0.0f, 0.0f, 0, 0, 0, 0};
      }
#pragma unroll
      for (int i = 0; i < 8; ++i) sm.w[slot][r][i] = w[i];
      sm.meta[slot][r] = m;
    }
    // ... and activation blocks (one task = one column of one slot).
    for (int task = tid; task < kMmqKs * kMmqCols; task += kMmqThreads) {
      const int slot = task / kMmqCols, j = task % kMmqCols;
      if (slot >= n) continue;
      ActWords a;
      if (c_begin + j < c_end) {
        load_act(act + src_row(c_begin + j) * nchunks + gb[slot], a);
      } else {
        a.da = 0.0f;
#pragma unroll
        for (int i = 0; i < 8; ++i) a.q[i] = 0;
      }
      int s0 = 0, s1 = 0;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        s0 = __dp4a(0x01010101, a.q[i], s0);
        s1 = __dp4a(0x01010101, a.q[i + 4], s1);
      }
#pragma unroll
      for (int i = 0; i < 8; ++i) sm.a[slot][j][i] = a.q[i];
      sm.da[slot][j] = a.da;
      sm.asum[slot][j][0] = s0;
      sm.asum[slot][j][1] = s1;
    }
    __syncthreads();

    // Replay the walk: process the staged chunks in order, fold finished leaves.
    int i = 0;
    for (;;) {
      const WalkEvent ev = lane_walk_event(walk, nchunks);
      if (ev == WalkEvent::End) break;
      if (ev == WalkEvent::LeafDone) {
#pragma unroll
        for (int o = 0; o < 8; ++o) {
          const float x = lane_tree_fold(st[o], cur[o], walk.t);
          cur[o] = walk.t == 31 ? x : 0.0f;
        }
        lane_walk_advance(walk, nchunks);
        continue;
      }
      if (i == n) break;  // next chunk not staged yet
#pragma unroll
      for (int rt = 0; rt < 2; ++rt) {
        const int rloc = 16 * warp + 8 * rt;
#pragma unroll
        for (int ct = 0; ct < 2; ++ct) {
          int s[2][2];
#pragma unroll
          for (int h = 0; h < 2; ++h)
            tile_dot<kMma>(&sm.w[i][rloc][0], &sm.a[i][8 * ct][0], h, s[h][0], s[h][1]);
          const ChunkMeta& m = sm.meta[i][mmq_out_row(warp, lane, (rt * 2 + ct) * 2)];
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int o = (rt * 2 + ct) * 2 + e, j = mmq_out_col(lane, o);
            const float p = chunk_epilogue<Tr::kEpi>(m, sm.da[i][j], s[0][e], s[1][e], sm.asum[i][j][0], sm.asum[i][j][1]);
            cur[o] = __fadd_rn(cur[o], p);
          }
        }
      }
      ++i;
      lane_walk_advance(walk, nchunks);
    }
    __syncthreads();
  }

  // Write back: each output has exactly this one owner (mmq_layout.h).
#pragma unroll
  for (int o = 0; o < kMmqOutPerThread; ++o) {
    const int64_t r = row0 + mmq_out_row(warp, lane, o), c = c_begin + mmq_out_col(lane, o);
    if (r < rows && c < c_end) y[dst_row(c) * rows + r] = cur[o];
  }
}

#if defined(__CUDACC__) || defined(DS4_CUDA_EMU)  // launchers: nvcc, or the CUDA emulation
static_assert(kMmqCols == kMmqTileCols, "quant_matmul.h tile width and the kernel's must agree");

/// Launches mmq_kernel. Dense: W != null, tiles == null, grid.y = ceil(n_cols / 16).
/// MoE: w_experts, tiles, counters != null, grid.y = max_tiles. Argument checks by the dispatcher.
template <class Tr>
cudaError_t launch_mmq(const void* W, const void* const* w_experts, int64_t rows, int64_t cols,
                       const void* act, int64_t n_cols, MmqColumns colmap, const int32_t* tiles,
                       const int32_t* counters, int64_t grid_y, bool use_mma, float* y, cudaStream_t stream) {
  const int64_t nchunks = cols / 32;
  const int64_t rb = cols / (32 * Tr::kChunks) * int64_t(sizeof(typename Tr::Block));
  const dim3 grid(unsigned((rows + kMmqRows - 1) / kMmqRows), unsigned(grid_y)), block(kMmqThreads);
  if (grid_y <= 0) return cudaSuccess;
  const auto* a = static_cast<const BlockQ8_1*>(act);
  const auto* w = static_cast<const uint8_t*>(W);
  if (use_mma)
    DS4_LAUNCH((mmq_kernel<Tr, true>), grid, block, 0, stream, w, w_experts, rows, rb, nchunks, a, n_cols, colmap, tiles, counters, y);
  else
    DS4_LAUNCH((mmq_kernel<Tr, false>), grid, block, 0, stream, w, w_experts, rows, rb, nchunks, a, n_cols, colmap, tiles, counters, y);
  return cudaGetLastError();
}
#endif  // __CUDACC__

}  // namespace ds4::cuda

// kernels/cpu/vec_dot.cpp — vec_dot_q8_1 / vec_dot_f32 / matvec_* following kernels/quant/dot_q8_1.h.
#include <algorithm>
#include <cstring>
#include <thread>
#include <vector>

#include "ds4/result.h"
#include "kernels/cpu/dot_dispatch.h"
#include "kernels/cpu/quant_ref.h"
#include "kernels/cpu/row_pool.h"
#include "kernels/quant/dot_q8_1.h"

namespace ds4::cpu {

using namespace ds4::quant;

namespace {

/// Per-row dot for one weight block type: chunk b of the row is chunk b % kChunks of block
/// b / kChunks; partials are accumulated per the contract.
template <class Block, float (*Chunk)(const Block&, int, const BlockQ8_1&), int kChunks>
float dot_row(const void* w_row, const void* act, int64_t n) {
  const auto* wp = static_cast<const uint8_t*>(w_row);
  const auto* ap = static_cast<const uint8_t*>(act);
  float lane[kDotLanes] = {};
  Block blk;
  for (int64_t b = 0; b < n / 32; ++b) {
    if (b % kChunks == 0) std::memcpy(&blk, wp + (b / kChunks) * int64_t(sizeof(Block)), sizeof(Block));
    BlockQ8_1 a;
    std::memcpy(&a, ap + b * int64_t(sizeof(BlockQ8_1)), sizeof(BlockQ8_1));
    const float p = Chunk(blk, int(b % kChunks), a);
    lane[b % kDotLanes] = lane[b % kDotLanes] + p;
  }
  return lane_reduce32(lane);
}

using RowDot = float (*)(const void*, const void*, int64_t);

RowDot row_dot_for(GgmlType type) {
  // Run-time selected SIMD kernel with the same result bits (kernels/cpu/dot_dispatch.h); the
  // scalar code below stays the definition and the fallback.
  if (const RowDot simd = simd_row_dot(type)) return simd;
  switch (type) {
    case GgmlType::Q4_0: return dot_row<BlockQ4_0, dot_chunk_q4_0, 1>;
    case GgmlType::Q8_0: return dot_row<BlockQ8_0, dot_chunk_q8_0, 1>;
    case GgmlType::MXFP4: return dot_row<BlockMXFP4, dot_chunk_mxfp4, 1>;
    case GgmlType::NVFP4: return dot_row<BlockNVFP4, dot_chunk_nvfp4, 2>;
    case GgmlType::NVFP4_S2: return dot_row<BlockNVFP4S2, dot_chunk_nvfp4_s2, 2>;
    case GgmlType::Q2_K: return dot_row<BlockQ2_K, dot_chunk_q2_k, 8>;
    case GgmlType::Q4_K: return dot_row<BlockQ4_K, dot_chunk_q4_k, 8>;
    case GgmlType::Q6_K: return dot_row<BlockQ6_K, dot_chunk_q6_k, 8>;
    case GgmlType::IQ2_XXS: return dot_row<BlockIQ2_XXS, dot_chunk_iq2_xxs, 8>;
    case GgmlType::IQ2_XS: return dot_row<BlockIQ2_XS, dot_chunk_iq2_xs, 8>;
    case GgmlType::IQ2_S: return dot_row<BlockIQ2_S, dot_chunk_iq2_s, 8>;
    case GgmlType::IQ1_S: return dot_row<BlockIQ1_S, dot_chunk_iq1_s, 8>;
    case GgmlType::IQ1_M: return dot_row<BlockIQ1_M, dot_chunk_iq1_m, 8>;
    default: return nullptr;
  }
}

/// Runs body(r) for r in [0, rows) on up to n_threads threads (contiguous row ranges).
template <class F>
void parallel_rows(int64_t rows, int n_threads, F&& body) {
  const int64_t nt = std::max<int64_t>(1, std::min<int64_t>(n_threads, rows));
  if (nt <= 1) {
    for (int64_t r = 0; r < rows; ++r) body(r);
    return;
  }
  std::vector<std::thread> pool;
  pool.reserve(size_t(nt));
  for (int64_t t = 0; t < nt; ++t) {
    const int64_t r0 = rows * t / nt, r1 = rows * (t + 1) / nt;
    pool.emplace_back([r0, r1, &body] {
      for (int64_t r = r0; r < r1; ++r) body(r);
    });
  }
  for (auto& th : pool) th.join();
}

}  // namespace

int64_t row_bytes(GgmlType type, int64_t n) {
  const auto* geo = ggml_type_geometry(uint32_t(type));
  DS4_CHECK(geo != nullptr && n >= 0 && n % geo->block_elems == 0);
  return n / geo->block_elems * geo->block_bytes;
}

bool can_dot_q8_1(GgmlType type) { return row_dot_for(type) != nullptr; }

float vec_dot_q8_1(GgmlType type, const void* w_row, const void* act, int64_t n) {
  const RowDot f = row_dot_for(type);
  DS4_CHECK(f != nullptr);
  DS4_CHECK(n >= 0 && n % ggml_type_geometry(uint32_t(type))->block_elems == 0);
  return f(w_row, act, n);
}

void matvec_q8_1(GgmlType type, const void* W, int64_t rows, int64_t cols, const void* act_q8_1,
                 float* out, int n_threads) {
  const RowDot f = row_dot_for(type);
  DS4_CHECK(f != nullptr && rows >= 0);
  const int64_t rb = row_bytes(type, cols);
  const auto* wp = static_cast<const uint8_t*>(W);
  // Persistent workers claiming row chunks (kernels/cpu/row_pool.h). About 16 chunks per thread
  // (a multiple of 4 rows): small enough that a late or descheduled thread costs at most one short
  // chunk at the end, long enough for the multi-row kernels' 4 sequential streams per chunk
  // (MXFP4 2-thread cold 19-20 -> 20-22 GB/s against 32 per thread; bench/README.md, issue 8). A
  // chunk goes through the multi-row SIMD kernel when there is one (same bits as f per row), else
  // one call of f per row.
  const int64_t nt = std::max(1, n_threads);
  const int64_t chunk = std::max<int64_t>(16, (rows / (nt * 16) + 3) / 4 * 4);
  const RowsDotFn multi = simd_rows_dot(type);
  parallel_chunks(rows, chunk, n_threads, [&](int64_t r0, int64_t r1) {
    if (multi != nullptr) {
      multi(wp + r0 * rb, rb, r1 - r0, act_q8_1, cols, out + r0);
      return;
    }
    for (int64_t r = r0; r < r1; ++r) out[r] = f(wp + r * rb, act_q8_1, cols);
  });
}

namespace {
float dot_f32_decoded(const float* w, const float* x, int64_t n) {
  float lane[kDotLanes] = {};
  for (int64_t c = 0; c * 32 < n; ++c) {
    float p = 0.0f;
    const int64_t end = std::min<int64_t>(n, c * 32 + 32);
    for (int64_t j = c * 32; j < end; ++j) {
      const float prod = w[j] * x[j];
      p = p + prod;
    }
    lane[c % kDotLanes] = lane[c % kDotLanes] + p;
  }
  return lane_reduce32(lane);
}
}  // namespace

float vec_dot_f32(GgmlType type, const void* w_row, const float* x, int64_t n) {
  std::vector<float> w(size_t(n > 0 ? n : 0));
  dequantize_row(type, w_row, w.data(), n);
  return dot_f32_decoded(w.data(), x, n);
}

void matvec_f32(GgmlType type, const void* W, int64_t rows, int64_t cols, const float* x,
                float* out, int n_threads) {
  DS4_CHECK(can_dequantize(type) && rows >= 0);
  const int64_t rb = row_bytes(type, cols);
  const auto* wp = static_cast<const uint8_t*>(W);
  parallel_rows(rows, n_threads, [&](int64_t r) {
    thread_local std::vector<float> w;
    w.resize(size_t(cols));
    dequantize_row(type, wp + r * rb, w.data(), cols);
    out[r] = dot_f32_decoded(w.data(), x, cols);
  });
}

}  // namespace ds4::cpu

// bench/op_cases.h — the one table of CPU matrix-product op cases shared by the kernel tests
// (tests/cpu_simd) and the micro-benchmarks (bench/bench_cpu_kernels.cpp).
// An op is out[batch, rows] = W[rows, cols] (ggml order: ne0 = cols, ne1 = rows) x act[batch, cols]
// with Q8_1 activations (kernels/cpu/quant_ref.h matvec_q8_1 per batch row).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/quant/ggml_type.h"

namespace ds4::bench {

/// Weight types with an AVX2 kernel (kernels/cpu/dot_dispatch.h) — the DSV4 expert quant mixes.
inline const std::vector<GgmlType>& expert_types() {
  static const std::vector<GgmlType> t = {GgmlType::Q8_0,    GgmlType::Q2_K,  GgmlType::IQ2_XXS,
                                          GgmlType::IQ2_XS,  GgmlType::IQ1_S, GgmlType::IQ1_M,
                                          GgmlType::MXFP4};
  return t;
}

/// One op case: weight type and shape, activation batch (tokens), and a short tag.
struct OpCase {
  GgmlType type;
  int64_t rows;   ///< output features (ne1 of W)
  int64_t cols;   ///< input features (ne0 of W, the dot length)
  int64_t batch;  ///< activation rows
  std::string tag;
};

/// Benchmark cases: DeepSeek-V4-Flash expert shapes at batch 1 (hidden 4096, expert FFN 2048):
/// gate/up = 2048 rows x 4096 cols ("w13"), down = 4096 rows x 2048 cols ("w2"), every type.
inline std::vector<OpCase> bench_op_cases() {
  std::vector<OpCase> v;
  for (GgmlType t : expert_types()) {
    v.push_back({t, 4096, 2048, 1, "expert_down_4096x2048"});
    v.push_back({t, 2048, 4096, 1, "expert_up_2048x4096"});
  }
  return v;
}

/// Test cases: every type with a variety of small shapes (row counts that do not divide evenly
/// by the thread counts, dot lengths of 1..17 super-blocks, 32-element types also with chunk
/// counts that are not a multiple of 8), plus one expert-shaped row block.
inline std::vector<OpCase> test_op_cases() {
  std::vector<OpCase> v;
  for (GgmlType t : expert_types()) {
    const bool b32 = t == GgmlType::Q8_0 || t == GgmlType::MXFP4;
    const std::vector<int64_t> cols = b32 ? std::vector<int64_t>{32, 64, 96, 224, 256, 288, 416, 2048, 4096 + 160}
                                          : std::vector<int64_t>{256, 512, 768, 1280, 2048, 4352};
    const std::vector<int64_t> rows = {1, 3, 7, 17};
    for (size_t i = 0; i < cols.size(); ++i)
      v.push_back({t, rows[i % rows.size()], cols[i], 1, "small"});
    v.push_back({t, 64, 2048, 1, "expert_rows_64x2048"});
    v.push_back({t, 33, 4096, 1, "expert_rows_33x4096"});
  }
  return v;
}

}  // namespace ds4::bench

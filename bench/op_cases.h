// bench/op_cases.h — the one table of CPU matrix-product op cases shared by the kernel tests
// (tests/cpu_simd) and the micro-benchmarks (bench/bench_cpu_kernels.cpp).
// An op is out[batch, rows] = W[rows, cols] (ggml order: ne0 = cols, ne1 = rows) x act[batch, cols]
// with Q8_1 activations (kernels/cpu/quant_ref.h matvec_q8_1 per batch row).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/quant_ref.h"
#include "kernels/quant/blocks.h"
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
/// counts that are not a multiple of 8), expert-shaped row blocks, and for the 256-element types
/// one row length above the kernels' 16384-element stack limit.
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
    // Longer than the 512 chunks whose activation data the 256-element kernels keep on the stack
    // (their per-super-block path).
    if (!b32) v.push_back({t, 5, 16640, 1, "long_rows_5x16640"});
  }
  return v;
}

/// Random fp16 scale bits: a normal with |x| in [2^-12, 2^-2], one in eight negative.
inline uint16_t sane_fp16(std::mt19937_64& rng) {
  std::uniform_int_distribution<int> e(15 - 12, 15 - 3), m(0, 1023), s(0, 7);
  // Mostly positive normals; one in eight negative (scales are signed fp16 in every format).
  return uint16_t((s(rng) == 0 ? 0x8000 : 0) | (e(rng) << 10) | m(rng));
}

/// Random weight bytes for `rows` x `cols` of `type`. sane: fp16 / E8M0 scale fields are replaced
/// by ordinary finite scales; otherwise every byte is random (inf/NaN/subnormal scales included).
inline std::vector<uint8_t> random_weights(GgmlType type, int64_t rows, int64_t cols, std::mt19937_64& rng, bool sane) {
  const int64_t rb = ds4::cpu::row_bytes(type, cols);
  std::vector<uint8_t> w(size_t(rows * rb));
  for (auto& b : w) b = uint8_t(rng());
  if (!sane) return w;
  const auto* geo = ggml_type_geometry(uint32_t(type));
  const int64_t nblocks = rows * cols / geo->block_elems, bb = geo->block_bytes;
  auto put16 = [&](int64_t off, uint16_t v) { std::memcpy(w.data() + off, &v, 2); };
  for (int64_t i = 0; i < nblocks; ++i) {
    const int64_t o = i * bb;
    switch (type) {
      case GgmlType::Q8_0:
      case GgmlType::IQ2_XXS:
      case GgmlType::IQ2_XS:
      case GgmlType::IQ1_S: put16(o, sane_fp16(rng)); break;
      case GgmlType::Q2_K:
        put16(o + offsetof(ds4::quant::BlockQ2_K, d), sane_fp16(rng));
        put16(o + offsetof(ds4::quant::BlockQ2_K, dmin), sane_fp16(rng));
        break;
      case GgmlType::MXFP4: w[size_t(o)] = uint8_t(110 + rng() % 30); break;
      case GgmlType::IQ1_M: {
        const uint16_t d = sane_fp16(rng);
        uint8_t* sc = w.data() + o + offsetof(ds4::quant::BlockIQ1_M, scales);
        for (int k = 0; k < 4; ++k) sc[2 * k + 1] = uint8_t((sc[2 * k + 1] & 0x0F) | (((d >> (4 * k)) & 0xF) << 4));
        break;
      }
      default: break;  // types without a rule keep random bytes
    }
  }
  return w;
}

}  // namespace ds4::bench

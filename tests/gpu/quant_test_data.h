// tests/gpu/quant_test_data.h — host-only helpers of the CUDA kernel tests (no CUDA headers, so
// the CPU-only unit tests use them too): the supported type list, random weight rows per type with
// finite scales, random activations, the CPU reference's Q8_1 blocks, matmul and per-chunk
// partials (kernels/quant/dot_q8_1.h), and bit comparisons.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "kernels/cpu/quant_ref.h"
#include "kernels/quant/dot_q8_1.h"

namespace ds4::gputest {

/// Every weight type the CUDA kernels support (== cpu::can_dot_q8_1's set).
inline const std::vector<GgmlType>& all_types() {
  static const std::vector<GgmlType> t = {GgmlType::Q4_0,   GgmlType::Q8_0,    GgmlType::Q2_K,  GgmlType::Q4_K,
                                          GgmlType::Q6_K,   GgmlType::IQ2_XXS, GgmlType::IQ2_XS, GgmlType::IQ2_S,
                                          GgmlType::IQ1_S,  GgmlType::IQ1_M,   GgmlType::MXFP4, GgmlType::NVFP4};
  return t;
}

inline std::string type_name(GgmlType t) { return std::string(ggml_type_name(uint32_t(t))); }

inline void put_u16(uint8_t* p, uint16_t v) {
  p[0] = uint8_t(v & 0xFF);
  p[1] = uint8_t(v >> 8);
}

/// A finite fp16 scale: mostly normal values of magnitude 2^-12..2^-3 with random sign, sometimes
/// 0 or a subnormal (edge cases of quant-formats.md §5.2).
inline uint16_t random_scale(std::mt19937& rng) {
  const uint32_t r = rng() % 64;
  if (r == 0) return 0;                            // d = 0
  if (r == 1) return uint16_t(1 + rng() % 0x3FF);  // subnormal
  const float mag = std::ldexp(1.0f + float(rng() % 1024) / 1024.0f, -12 + int(rng() % 10));
  const uint16_t h = quant::f32_to_fp16(mag);
  return uint16_t(h | ((rng() & 1) ? 0x8000 : 0));
}

/// rows x cols weights of `type`: random bytes (every code, grid index and sign pattern occurs)
/// with the float scale fields replaced by finite values.
inline std::vector<uint8_t> random_weights(GgmlType type, int64_t rows, int64_t cols, std::mt19937& rng) {
  const int64_t rb = cpu::row_bytes(type, cols);
  std::vector<uint8_t> w(size_t(rows * rb));
  for (auto& b : w) b = uint8_t(rng());
  const auto* geo = ggml_type_geometry(uint32_t(type));
  const int64_t nblk = rows * cols / geo->block_elems;
  for (int64_t i = 0; i < nblk; ++i) {
    uint8_t* blk = w.data() + i * geo->block_bytes;
    switch (type) {
      case GgmlType::Q4_0: case GgmlType::Q8_0: case GgmlType::IQ2_XXS: case GgmlType::IQ2_XS:
      case GgmlType::IQ2_S: case GgmlType::IQ1_S:
        put_u16(blk, random_scale(rng));
        break;
      case GgmlType::Q4_K:
        put_u16(blk, random_scale(rng));
        put_u16(blk + 2, random_scale(rng));
        break;
      case GgmlType::Q2_K:
        put_u16(blk + 80, random_scale(rng));
        put_u16(blk + 82, random_scale(rng));
        break;
      case GgmlType::Q6_K:
        put_u16(blk + 208, random_scale(rng));
        break;
      case GgmlType::IQ1_M: {  // fp16 super-scale in the top nibbles of the 4 u16 scale words
        const uint16_t h = random_scale(rng);
        for (int k = 0; k < 4; ++k) blk[48 + 2 * k + 1] = uint8_t((blk[48 + 2 * k + 1] & 0x0F) | (((h >> (4 * k)) & 0xF) << 4));
        break;
      }
      case GgmlType::MXFP4:
        blk[0] = uint8_t(rng() % 16 == 0 ? rng() % 2 : 112 + rng() % 24);  // incl. e = 0, 1 (subnormal)
        break;
      case GgmlType::NVFP4:
        break;  // every UE4M3 byte is finite (0x7F and bit 7 decode to 0 / are ignored)
      default:
        ADD_FAILURE() << "random_weights: no generator for " << type_name(type);
    }
  }
  return w;
}

/// n x cols finite activations: normal values, some all-zero blocks, some outliers.
inline std::vector<float> random_acts(int64_t n, int64_t cols, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> nd(0.0f, scale);
  std::vector<float> x(size_t(n * cols));
  for (auto& v : x) v = nd(rng);
  for (int64_t b = 0; b < n * cols / 32; ++b) {
    const uint32_t r = rng() % 32;
    if (r == 0) std::fill_n(x.begin() + b * 32, 32, 0.0f);
    if (r == 1) x[size_t(b * 32 + rng() % 32)] *= 1000.0f;
    if (r == 2) x[size_t(b * 32 + rng() % 32)] = -0.0f;
  }
  return x;
}

/// CPU Q8_1 blocks of x [n, cols].
inline std::vector<uint8_t> cpu_q8_1(const std::vector<float>& x, int64_t n, int64_t cols) {
  const int64_t rb = cols / 32 * int64_t(sizeof(quant::BlockQ8_1));
  std::vector<uint8_t> a(size_t(n * rb));
  for (int64_t t = 0; t < n; ++t) cpu::quantize_row_q8_1(x.data() + t * cols, a.data() + t * rb, cols);
  return a;
}

/// CPU reference y [n, rows] = W act (cpu::matvec_q8_1 per token, all hardware threads).
inline std::vector<float> cpu_matmul(GgmlType type, const std::vector<uint8_t>& W, int64_t rows, int64_t cols,
                                     const std::vector<uint8_t>& act, int64_t n) {
  std::vector<float> y(size_t(n * rows));
  const int64_t arb = cols / 32 * int64_t(sizeof(quant::BlockQ8_1));
  const int threads = int(std::max(1u, std::thread::hardware_concurrency()));
  for (int64_t t = 0; t < n; ++t)
    cpu::matvec_q8_1(type, W.data(), rows, cols, act.data() + t * arb, y.data() + t * rows, threads);
  return y;
}

/// The CPU reference's chunk partial P_b (dot_q8_1.h step 1) of chunk b of one weight row.
inline float cpu_chunk_partial(GgmlType type, const uint8_t* row, const quant::BlockQ8_1& a, int64_t b) {
  using namespace ds4::quant;
  auto run = [&](auto fn, auto blk_tag, int chunks) {
    using Block = decltype(blk_tag);
    Block blk;
    std::memcpy(&blk, row + (b / chunks) * int64_t(sizeof(Block)), sizeof(Block));
    return fn(blk, int(b % chunks), a);
  };
  switch (type) {
    case GgmlType::Q4_0: return run(dot_chunk_q4_0, BlockQ4_0{}, 1);
    case GgmlType::Q8_0: return run(dot_chunk_q8_0, BlockQ8_0{}, 1);
    case GgmlType::MXFP4: return run(dot_chunk_mxfp4, BlockMXFP4{}, 1);
    case GgmlType::NVFP4: return run(dot_chunk_nvfp4, BlockNVFP4{}, 2);
    case GgmlType::Q2_K: return run(dot_chunk_q2_k, BlockQ2_K{}, 8);
    case GgmlType::Q4_K: return run(dot_chunk_q4_k, BlockQ4_K{}, 8);
    case GgmlType::Q6_K: return run(dot_chunk_q6_k, BlockQ6_K{}, 8);
    case GgmlType::IQ2_XXS: return run(dot_chunk_iq2_xxs, BlockIQ2_XXS{}, 8);
    case GgmlType::IQ2_XS: return run(dot_chunk_iq2_xs, BlockIQ2_XS{}, 8);
    case GgmlType::IQ2_S: return run(dot_chunk_iq2_s, BlockIQ2_S{}, 8);
    case GgmlType::IQ1_S: return run(dot_chunk_iq1_s, BlockIQ1_S{}, 8);
    case GgmlType::IQ1_M: return run(dot_chunk_iq1_m, BlockIQ1_M{}, 8);
    default: ADD_FAILURE() << "no chunk partial for " << type_name(type); return 0.0f;
  }
}

/// Float bits, for bit-exact comparisons (NaN payloads and -0 included).
inline uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

/// Counts positions where a and b differ in bits; reports the first few via ADD_FAILURE.
inline int64_t count_bit_mismatches(const std::vector<float>& got, const std::vector<float>& want,
                                    const std::string& what, int max_report = 5) {
  int64_t bad = 0;
  for (size_t i = 0; i < want.size() && i < got.size(); ++i)
    if (bits(got[i]) != bits(want[i])) {
      if (bad++ < max_report)
        ADD_FAILURE() << what << ": index " << i << " got " << got[i] << " (0x" << std::hex << bits(got[i])
                      << ") want " << want[i] << " (0x" << bits(want[i]) << std::dec << ")";
    }
  if (got.size() != want.size()) ++bad;
  return bad;
}

}  // namespace ds4::gputest

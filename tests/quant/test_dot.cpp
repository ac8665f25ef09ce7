// tests/quant/test_dot.cpp — vec_dot_q8_1 / matvec_q8_1 / matvec_f32 against double-precision
// references with derived tolerances, bit-identical results across runs and thread counts, and the
// documented accumulation order (kernels/quant/dot_q8_1.h) re-implemented independently.
//
// Tolerances (eps = 2^-24, L = ceil(nchunks/32) partials per lane):
//  * Integer path / epilogue: |dot - sum_j w_j * (da_b*q_j)| <= (R_type + L + 5) * eps * M, where
//    w = exactly decoded weights, M = sum_j mag_j*|da_b*q_j| (mag_j = |w_j|, or |d*sc*q|+|dmin*m|
//    for Q2_K/Q4_K whose epilogue subtracts two terms), R_type = fp32 roundings in the chunk
//    epilogue (kEpilogueRoundings below), L + 5 = sequential lane adds + 5 butterfly levels.
//  * Against unquantized activations: add sum_b e_b * sum_{j in b} |w_j|, the Q8_1 rounding bound
//    per element e_b = df/2 + amax*2^-11 (the clamp case, dh rounded below amax/127), or amax when
//    the fp16 scale underflowed to 0 (quantize_q8.h).
#include <gtest/gtest.h>

#include <cmath>

#include "kernels/cpu/quant_ref.h"
#include "kernels/quant/dot_q8_1.h"
#include "tests/quant/quant_test_util.h"

namespace ds4 {
namespace {

using namespace ds4::quant;

constexpr double kEps = 1.0 / 16777216.0;

/// fp32 roundings in each type's chunk epilogue (dot_q8_1.h table).
int epilogue_roundings(GgmlType t) {
  switch (t) {
    case GgmlType::Q2_K: case GgmlType::Q4_K: return 4;  // d*I1, dmin*I2, subtract, *da
    case GgmlType::NVFP4: return 4;                      // s0*I0, s1*I1, add, *da
    default: return 2;                                   // scale*da, *float(I)
  }
}

/// Random weight row of n elements with finite, moderate scales.
std::vector<uint8_t> random_row(GgmlType t, int64_t n, std::mt19937_64& rng) {
  const auto* g = ggml_type_geometry(uint32_t(t));
  const int64_t nb = n / g->block_elems;
  std::vector<uint8_t> v(size_t(nb * g->block_bytes));
  for (auto& b : v) b = uint8_t(rng());
  auto put = [](uint8_t* p, uint16_t h) {
    p[0] = uint8_t(h & 0xFF);
    p[1] = uint8_t(h >> 8);
  };
  for (int64_t i = 0; i < nb; ++i) {
    uint8_t* b = v.data() + i * g->block_bytes;
    switch (t) {
      case GgmlType::Q2_K: put(b + 80, test::random_scale_fp16(rng)); put(b + 82, test::random_scale_fp16(rng)); break;
      case GgmlType::Q4_K: put(b, test::random_scale_fp16(rng)); put(b + 2, test::random_scale_fp16(rng)); break;
      case GgmlType::Q6_K: put(b + 208, test::random_scale_fp16(rng)); break;
      case GgmlType::MXFP4: b[0] = uint8_t(110 + rng() % 30); break;
      case GgmlType::NVFP4: for (int k = 0; k < 4; ++k) b[k] = uint8_t(1 + rng() % 0x7E); break;
      case GgmlType::IQ1_M: {
        const uint16_t d = test::random_scale_fp16(rng);
        for (int k = 0; k < 4; ++k) b[48 + 2 * k + 1] = uint8_t((b[48 + 2 * k + 1] & 0x0F) | (((d >> (4 * k)) & 0xF) << 4));
        break;
      }
      default: put(b, test::random_scale_fp16(rng)); break;  // d at offset 0
    }
    if (i % 17 == 5 && t != GgmlType::MXFP4 && t != GgmlType::NVFP4 && t != GgmlType::IQ1_M)
      put(b + (t == GgmlType::Q2_K ? 80 : t == GgmlType::Q6_K ? 208 : 0), 0);  // a zero-scale block
  }
  return v;
}

/// Per-element "magnitude" of the terms the epilogue combines (see file comment).
std::vector<double> magnitudes(GgmlType t, const std::vector<uint8_t>& row, const std::vector<float>& w) {
  std::vector<double> m(w.size());
  for (size_t j = 0; j < w.size(); ++j) m[j] = std::fabs(double(w[j]));
  if (t == GgmlType::Q2_K) {
    for (size_t j = 0; j < w.size(); ++j) {
      BlockQ2_K b;
      std::memcpy(&b, row.data() + (j / 256) * sizeof(BlockQ2_K), sizeof b);
      const int e = int(j % 256);
      const uint8_t sc = q2_k_scale(b, e);
      m[j] = std::fabs(double(fp16_to_f32(b.d)) * (sc & 15) * q2_k_code(b, e)) + std::fabs(double(fp16_to_f32(b.dmin)) * (sc >> 4));
    }
  } else if (t == GgmlType::Q4_K) {
    for (size_t j = 0; j < w.size(); ++j) {
      BlockQ4_K b;
      std::memcpy(&b, row.data() + (j / 256) * sizeof(BlockQ4_K), sizeof b);
      int sc, mn;
      const int g = int(j % 256) / 32;
      q4_k_scale_min(b, g, &sc, &mn);
      m[j] = std::fabs(double(fp16_to_f32(b.d)) * sc * q4_k_code(b, g, int(j % 32))) + std::fabs(double(fp16_to_f32(b.dmin)) * mn);
    }
  }
  return m;
}

std::vector<float> activations(int64_t n, std::mt19937_64& rng) {
  auto x = test::gaussian(rng, size_t(n), 1.0f);
  for (int64_t b = 0; b < n / 32; b += 7)
    for (int j = 0; j < 32; ++j) x[size_t(32 * b + j)] *= 40.0f;  // outlier blocks
  if (n >= 64)
    for (int j = 0; j < 32; ++j) x[size_t(32 + j)] = 1e-32f * float(j);  // scale underflows to 0
  return x;
}

struct DotCase {
  GgmlType type;
};

class DotQ8_1 : public ::testing::TestWithParam<DotCase> {};

TEST_P(DotQ8_1, WithinDerivedTolerances) {
  const GgmlType t = GetParam().type;
  const auto* g = ggml_type_geometry(uint32_t(t));
  std::mt19937_64 rng(101 + uint64_t(t));
  double worst_q = 0, worst_x = 0;
  for (int64_t n : {g->block_elems == 32 ? int64_t(96) : int64_t(256), int64_t(256 * 5), int64_t(256 * 24)}) {
    for (int rep = 0; rep < 20; ++rep) {
      const auto row = random_row(t, n, rng);
      const auto x = activations(n, rng);
      std::vector<BlockQ8_1> act(size_t(n / 32));
      cpu::quantize_row_q8_1(x.data(), act.data(), n);
      std::vector<float> w(static_cast<size_t>(n));
      cpu::dequantize_row(t, row.data(), w.data(), n);
      const auto mag = magnitudes(t, row, w);
      double ref_q = 0, ref_x = 0, big_m = 0, qerr = 0;
      for (int64_t b = 0; b < n / 32; ++b) {
        const double da = fp16_to_f32(act[size_t(b)].d);
        double amax = 0, wabs = 0;
        for (int j = 0; j < 32; ++j) {
          const size_t k = size_t(32 * b + j);
          const double a = da * act[size_t(b)].qs[j];
          ref_q += double(w[k]) * a;
          ref_x += double(w[k]) * x[k];
          big_m += mag[k] * std::fabs(a);
          amax = std::max(amax, std::fabs(double(x[k])));
          wabs += std::fabs(double(w[k]));
        }
        const double e_b = da == 0 ? amax : da / 2 + amax * std::ldexp(1.0, -11);
        qerr += e_b * wabs;
      }
      const double lanes = std::ceil(double(n / 32) / 32.0);
      const double tol_exact = (epilogue_roundings(t) + lanes + 5) * kEps * big_m;
      const float r = cpu::vec_dot_q8_1(t, row.data(), act.data(), n);
      ASSERT_TRUE(std::isfinite(r));
      EXPECT_LE(std::fabs(double(r) - ref_q), tol_exact) << g->name << " n=" << n << " rep " << rep;
      EXPECT_LE(std::fabs(double(r) - ref_x), tol_exact + qerr) << g->name << " n=" << n << " rep " << rep;
      if (tol_exact > 0) worst_q = std::max(worst_q, std::fabs(double(r) - ref_q) / tol_exact);
      if (qerr > 0) worst_x = std::max(worst_x, std::fabs(double(r) - ref_x) / (tol_exact + qerr));
    }
  }
  std::printf("  %s: worst |dot - exact(q8_1)| / tol_exact = %.3f, worst |dot - exact(x)| / tol_q = %.3f\n",
              std::string(g->name).c_str(), worst_q, worst_x);
}

TEST_P(DotQ8_1, BitIdenticalAcrossRunsAndThreads) {
  const GgmlType t = GetParam().type;
  std::mt19937_64 rng(202 + uint64_t(t));
  const int64_t rows = 37, cols = 256 * 12;
  const int64_t rb = cpu::row_bytes(t, cols);
  std::vector<uint8_t> W;
  for (int64_t r = 0; r < rows; ++r) {
    const auto row = random_row(t, cols, rng);
    W.insert(W.end(), row.begin(), row.end());
  }
  ASSERT_EQ(int64_t(W.size()), rows * rb);
  const auto x = activations(cols, rng);
  std::vector<BlockQ8_1> act(size_t(cols / 32));
  cpu::quantize_row_q8_1(x.data(), act.data(), cols);
  std::vector<float> base(static_cast<size_t>(rows));
  cpu::matvec_q8_1(t, W.data(), rows, cols, act.data(), base.data(), 1);
  for (int64_t r = 0; r < rows; ++r) {
    const float v = cpu::vec_dot_q8_1(t, W.data() + r * rb, act.data(), cols);
    ASSERT_EQ(f32_bits(v), f32_bits(base[size_t(r)])) << r;
  }
  for (int threads : {1, 2, 3, 8, 64}) {
    std::vector<float> out(static_cast<size_t>(rows), -1.0f);
    cpu::matvec_q8_1(t, W.data(), rows, cols, act.data(), out.data(), threads);
    ASSERT_EQ(std::memcmp(out.data(), base.data(), out.size() * 4), 0) << "threads " << threads;
  }
}

INSTANTIATE_TEST_SUITE_P(
    WeightTypes, DotQ8_1,
    ::testing::Values(DotCase{GgmlType::Q4_0}, DotCase{GgmlType::Q8_0}, DotCase{GgmlType::Q2_K},
                      DotCase{GgmlType::Q4_K}, DotCase{GgmlType::Q6_K}, DotCase{GgmlType::IQ2_XXS},
                      DotCase{GgmlType::IQ2_XS}, DotCase{GgmlType::IQ2_S}, DotCase{GgmlType::IQ1_S},
                      DotCase{GgmlType::IQ1_M}, DotCase{GgmlType::MXFP4}, DotCase{GgmlType::NVFP4}),
    [](const auto& info) { return std::string(ggml_type_name(uint32_t(info.param.type))); });

TEST(DotContract, LaneOrderReimplemented) {
  // Independent re-implementation of dot_q8_1.h for Q8_0, Q4_K and NVFP4 from raw bytes: chunk
  // partials per the table, lanes b % 32, butterfly 16..1. Must match bit for bit.
  std::mt19937_64 rng(303);
  auto h2f = [](const uint8_t* p) { return fp16_to_f32(uint16_t(p[0] | (p[1] << 8))); };
  for (int rep = 0; rep < 50; ++rep) {
    const int64_t n = 256 * (1 + rep % 9) * 3;
    const auto x = activations(n, rng);
    std::vector<BlockQ8_1> act(size_t(n / 32));
    cpu::quantize_row_q8_1(x.data(), act.data(), n);
    auto finish = [](float* lane) {
      for (int off = 16; off >= 1; off /= 2)
        for (int l = 0; l < off; ++l) lane[l] = lane[l] + lane[l + off];
      return lane[0];
    };
    {  // Q8_0
      const auto row = random_row(GgmlType::Q8_0, n, rng);
      float lane[32] = {};
      for (int64_t b = 0; b < n / 32; ++b) {
        const uint8_t* blk = row.data() + 34 * b;
        int32_t s = 0;
        for (int j = 0; j < 32; ++j) s += int8_t(blk[2 + j]) * act[size_t(b)].qs[j];
        const float p = (h2f(blk) * fp16_to_f32(act[size_t(b)].d)) * float(s);
        lane[b % 32] += p;
      }
      ASSERT_EQ(f32_bits(finish(lane)), f32_bits(cpu::vec_dot_q8_1(GgmlType::Q8_0, row.data(), act.data(), n)));
    }
    {  // Q4_K: d, dmin, 12 scale bytes, 128 qs; sub-block g uses nibble g%2 of qs[32*(g/2) + i]
      const auto row = random_row(GgmlType::Q4_K, n, rng);
      float lane[32] = {};
      for (int64_t b = 0; b < n / 32; ++b) {
        const uint8_t* blk = row.data() + 144 * (b / 8);
        const int g = int(b % 8);
        const uint8_t* sc = blk + 4;
        const int s = g < 4 ? sc[g] & 63 : (sc[g + 4] & 0xF) | ((sc[g - 4] >> 6) << 4);
        const int m = g < 4 ? sc[g + 4] & 63 : (sc[g + 4] >> 4) | ((sc[g] >> 6) << 4);
        int32_t dot = 0, sum = 0;
        for (int i = 0; i < 32; ++i) {
          const uint8_t byte = blk[16 + 32 * (g / 2) + i];
          dot += ((g & 1) ? byte >> 4 : byte & 0xF) * act[size_t(b)].qs[i];
          sum += act[size_t(b)].qs[i];
        }
        const float p = fp16_to_f32(act[size_t(b)].d) * ((h2f(blk) * float(s * dot)) - (h2f(blk + 2) * float(m * sum)));
        lane[b % 32] += p;
      }
      ASSERT_EQ(f32_bits(finish(lane)), f32_bits(cpu::vec_dot_q8_1(GgmlType::Q4_K, row.data(), act.data(), n)));
    }
    {  // NVFP4: 4 UE4M3 bytes, 32 qs; sub-block s: byte j low = element j, high = element j+8
      const auto row = random_row(GgmlType::NVFP4, n, rng);
      const int kv[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
      float lane[32] = {};
      for (int64_t b = 0; b < n / 32; ++b) {
        const uint8_t* blk = row.data() + 36 * (b / 2);
        int32_t is[2] = {0, 0};
        for (int k = 0; k < 2; ++k) {
          const int s = int(2 * (b % 2) + k);
          for (int j = 0; j < 16; ++j) {
            const uint8_t byte = blk[4 + 8 * s + (j & 7)];
            is[k] += kv[j < 8 ? byte & 0xF : byte >> 4] * act[size_t(b)].qs[16 * k + j];
          }
        }
        const float s0 = ue4m3_to_f32_half(blk[2 * (b % 2)]), s1 = ue4m3_to_f32_half(blk[2 * (b % 2) + 1]);
        const float p = fp16_to_f32(act[size_t(b)].d) * ((s0 * float(is[0])) + (s1 * float(is[1])));
        lane[b % 32] += p;
      }
      ASSERT_EQ(f32_bits(finish(lane)), f32_bits(cpu::vec_dot_q8_1(GgmlType::NVFP4, row.data(), act.data(), n)));
    }
  }
}

TEST(MatvecF32, ToleranceOrderAndThreads) {
  std::mt19937_64 rng(404);
  for (GgmlType t : {GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0, GgmlType::Q2_K,
                     GgmlType::IQ2_XXS, GgmlType::MXFP4, GgmlType::IQ1_M}) {
    const int64_t rows = 19, cols = 256 * 9;
    const int64_t rb = cpu::row_bytes(t, cols);
    std::vector<uint8_t> W(size_t(rows * rb));
    if (t == GgmlType::F32 || t == GgmlType::F16 || t == GgmlType::BF16) {
      const auto wf = test::gaussian(rng, size_t(rows * cols), 0.05f);
      cpu::quantize_row(t, wf.data(), W.data(), rows * cols);
    } else {
      for (int64_t r = 0; r < rows; ++r) {
        const auto row = random_row(t, cols, rng);
        std::memcpy(W.data() + r * rb, row.data(), row.size());
      }
    }
    const auto x = test::gaussian(rng, size_t(cols), 1.0f);
    std::vector<float> out1(static_cast<size_t>(rows)), out5(static_cast<size_t>(rows));
    cpu::matvec_f32(t, W.data(), rows, cols, x.data(), out1.data(), 1);
    cpu::matvec_f32(t, W.data(), rows, cols, x.data(), out5.data(), 5);
    ASSERT_EQ(std::memcmp(out1.data(), out5.data(), out1.size() * 4), 0) << ggml_type_name(uint32_t(t));
    std::vector<float> w(static_cast<size_t>(cols));
    for (int64_t r = 0; r < rows; ++r) {
      cpu::dequantize_row(t, W.data() + r * rb, w.data(), cols);
      double ref = 0, mag = 0;
      float lane[32] = {};
      for (int64_t c = 0; c < cols / 32; ++c) {
        float p = 0.0f;
        for (int j = 0; j < 32; ++j) {
          const size_t k = size_t(32 * c + j);
          ref += double(w[k]) * x[k];
          mag += std::fabs(double(w[k]) * x[k]);
          const float prod = w[k] * x[k];
          p = p + prod;
        }
        lane[c % 32] = lane[c % 32] + p;
      }
      for (int off = 16; off >= 1; off /= 2)
        for (int l = 0; l < off; ++l) lane[l] = lane[l] + lane[l + off];
      EXPECT_EQ(f32_bits(lane[0]), f32_bits(out1[size_t(r)])) << ggml_type_name(uint32_t(t)) << " row " << r;
      EXPECT_EQ(f32_bits(cpu::vec_dot_f32(t, W.data() + r * rb, x.data(), cols)), f32_bits(out1[size_t(r)]));
      // 1 rounding per product + 32 per chunk + L per lane + 5 butterfly levels.
      const double tol = (1 + 32 + std::ceil(cols / 32.0 / 32.0) + 5) * kEps * mag;
      EXPECT_LE(std::fabs(double(out1[size_t(r)]) - ref), tol) << ggml_type_name(uint32_t(t)) << " row " << r;
    }
  }
}

}  // namespace
}  // namespace ds4

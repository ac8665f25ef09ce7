// tests/frontend/random_blocks_test.cpp — engine/random_blocks: for every type make-tiny emits,
// the random blocks decode with the project's CPU reference decoder (cpu::dequantize_row, tested
// bit-exact against gguf-py) to finite values whose RMS per row is within a factor 2 of the target
// 1/sqrt(ne0); fp16 scales are finite and non-zero, grid indices in range (checked on the raw
// fields); the same seed gives the same bytes for any split into rows / threads, another seed not.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "engine/random_blocks.h"
#include "kernels/cpu/quant_ref.h"
#include "kernels/quant/blocks.h"
#include "kernels/quant/scalar_formats.h"

namespace ds4 {
namespace {

const GgmlType kTypes[] = {GgmlType::F32, GgmlType::F16, GgmlType::Q8_0, GgmlType::Q2_K, GgmlType::IQ2_XXS,
                           GgmlType::IQ2_XS, GgmlType::IQ1_S, GgmlType::IQ1_M, GgmlType::MXFP4};

std::vector<uint8_t> make(GgmlType t, int64_t ne0, int64_t rows, double rms, uint64_t seed, int threads = 1) {
  std::vector<uint8_t> b(size_t(cpu::row_bytes(t, ne0) * rows));
  random_block_tensor(t, ne0, rows, rms, seed, b.data(), threads);
  return b;
}

std::string name(GgmlType t) { return std::string(ggml_type_name(uint32_t(t))); }

// Every row decodes to finite values with RMS in [target/2, 2*target]; the RMS over all rows is
// closer (the per-type constant is exact in expectation): within 15%.
TEST(RandomBlocks, DecodeFiniteWithRmsNearOneOverSqrtNe0) {
  for (GgmlType t : kTypes) {
    for (int64_t ne0 : {256, 2048, 4096}) {
      const int64_t rows = 64;
      const double target = 1.0 / std::sqrt(double(ne0));
      const auto b = make(t, ne0, rows, target, 7);
      const int64_t rb = cpu::row_bytes(t, ne0);
      std::vector<float> y(static_cast<size_t>(ne0));
      double all = 0;
      for (int64_t r = 0; r < rows; ++r) {
        cpu::dequantize_row(t, b.data() + r * rb, y.data(), ne0);
        double ss = 0;
        for (float v : y) {
          ASSERT_TRUE(std::isfinite(v)) << name(t) << " ne0 " << ne0 << " row " << r;
          ss += double(v) * v;
        }
        all += ss;
        const double rms = std::sqrt(ss / double(ne0));
        EXPECT_GT(rms, target / 2) << name(t) << " ne0 " << ne0 << " row " << r;
        EXPECT_LT(rms, target * 2) << name(t) << " ne0 " << ne0 << " row " << r;
      }
      const double rms_all = std::sqrt(all / double(ne0 * rows));
      EXPECT_NEAR(rms_all / target, 1.0, 0.15) << name(t) << " ne0 " << ne0;
    }
  }
}

// The same holds for a target far from 1/sqrt(ne0) (the expert down projection's 0.25/sqrt(2048)
// and a large 3.0): the scale follows the request.
TEST(RandomBlocks, RmsFollowsTheRequest) {
  for (GgmlType t : kTypes) {
    for (double target : {0.25 / std::sqrt(2048.0), 3.0}) {
      const int64_t ne0 = 2048, rows = 32;
      const auto b = make(t, ne0, rows, target, 3);
      std::vector<float> y(size_t(ne0 * rows));
      cpu::dequantize_row(t, b.data(), y.data(), ne0 * rows);
      double ss = 0;
      for (float v : y) ss += double(v) * v;
      EXPECT_NEAR(std::sqrt(ss / double(y.size())) / target, 1.0, 0.15) << name(t) << " target " << target;
    }
  }
}

// The raw scale fields: fp16 d (and Q2_K dmin, IQ1_M's spread super-scale) finite and > 0; Q8_0
// has no -128 code; MXFP4's E8M0 exponent is one of two adjacent values. (Grid index fields are
// full width: IQ2_XXS 8 bits for 256 entries, IQ2_XS 9 for 512, IQ1 11 for 2048, so every value is
// in range by construction; nothing to check beyond the decode above.)
TEST(RandomBlocks, ScaleFieldsFiniteAndPositive) {
  auto ok16 = [](uint16_t h) { const float f = quant::fp16_to_f32(h); return std::isfinite(f) && f > 0; };
  const int64_t ne0 = 4096, rows = 8;
  for (GgmlType t : kTypes) {
    const auto b = make(t, ne0, rows, 1.0 / 64, 11);
    const auto* g = ggml_type_geometry(uint32_t(t));
    const int64_t nblk = ne0 * rows / g->block_elems;
    int e_lo = 256, e_hi = -1;
    for (int64_t k = 0; k < nblk; ++k) {
      const uint8_t* p = b.data() + k * g->block_bytes;
      switch (t) {
        case GgmlType::Q8_0: {
          quant::BlockQ8_0 q;
          std::memcpy(&q, p, sizeof q);
          ASSERT_TRUE(ok16(q.d));
          for (int8_t c : q.qs) ASSERT_NE(c, -128);
          break;
        }
        case GgmlType::Q2_K: {
          quant::BlockQ2_K q;
          std::memcpy(&q, p, sizeof q);
          ASSERT_TRUE(ok16(q.d) && ok16(q.dmin));
          break;
        }
        case GgmlType::IQ2_XXS: case GgmlType::IQ2_XS: case GgmlType::IQ1_S: {
          uint16_t d;
          std::memcpy(&d, p, 2);  // d is the first field of these three layouts
          ASSERT_TRUE(ok16(d)) << name(t);
          break;
        }
        case GgmlType::IQ1_M: {
          quant::BlockIQ1_M q;
          std::memcpy(&q, p, sizeof q);
          ASSERT_TRUE(ok16(quant::iq1m_scale_bits(q)));
          break;
        }
        case GgmlType::MXFP4:
          e_lo = std::min<int>(e_lo, p[0]);
          e_hi = std::max<int>(e_hi, p[0]);
          break;
        default: break;
      }
    }
    if (t == GgmlType::MXFP4) {
      // target 1/64, unit RMS sqrt(34.25): 2^(e-128) in {2^-9, 2^-8}, e in {119, 120}.
      EXPECT_EQ(e_lo, 119);
      EXPECT_EQ(e_hi, 120);
    }
  }
}

TEST(RandomBlocks, SameSeedSameBytesForAnySplit) {
  for (GgmlType t : kTypes) {
    const int64_t ne0 = 512, rows = 100;
    const auto a = make(t, ne0, rows, 0.05, 42, 1);
    EXPECT_EQ(a, make(t, ne0, rows, 0.05, 42, 1)) << name(t);
    EXPECT_EQ(a, make(t, ne0, rows, 0.05, 42, 3)) << name(t) << ": the thread count changed the bytes";
    // Rows 37.. written on their own equal the same rows of the whole tensor.
    const int64_t rb = cpu::row_bytes(t, ne0);
    std::vector<uint8_t> part(size_t(rb * 10));
    random_block_rows(t, ne0, 37, 10, 0.05, 42, part.data());
    EXPECT_EQ(0, std::memcmp(part.data(), a.data() + 37 * rb, part.size())) << name(t);
    EXPECT_NE(a, make(t, ne0, rows, 0.05, 43, 1)) << name(t) << ": another seed gave the same bytes";
  }
}

TEST(RandomBlocks, SupportedTypes) {
  for (GgmlType t : kTypes) EXPECT_TRUE(can_random_blocks(t)) << name(t);
  EXPECT_FALSE(can_random_blocks(GgmlType::Q4_K));
  EXPECT_FALSE(can_random_blocks(GgmlType::I32));
}

}  // namespace
}  // namespace ds4

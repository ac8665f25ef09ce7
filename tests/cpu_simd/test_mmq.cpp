// tests/cpu_simd/test_mmq.cpp — the multi-token kernels (kernels/cpu/mmq.h: each weight row
// decoded once, then dotted with a tile of tokens) through matmul_rows, for every type with a
// decoded form and every x86 family this CPU can run, against the scalar reference vec_dot_q8_1 of
// each (row, token): bit-identical for row ranges that do not start at 0 and are not multiples of
// the 16-row block, token counts that are not multiples of the 16-token tile, dot lengths with and
// without a partial 8-chunk tail, sane and fully random weight bytes, and output rows with padding
// that must stay untouched.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "bench/op_cases.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/mmq.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/quant_ref.h"
#include "kernels/quant/blocks.h"

namespace ds4 {
namespace {

struct AutoModeGuard {
  ~AutoModeGuard() { cpu::set_simd_mode(cpu::SimdMode::Auto); }
};

uint32_t canonical_bits(float f) {
  if (std::isnan(f)) return 0x7FC00000u;  // F16C quiets signalling-NaN scales: compare NaN as NaN
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

const std::vector<GgmlType>& mmq_types() {
  static const std::vector<GgmlType> t = {GgmlType::Q8_0,   GgmlType::Q4_0,    GgmlType::MXFP4,  GgmlType::Q2_K,
                                          GgmlType::Q4_K,   GgmlType::Q6_K,    GgmlType::IQ2_XXS, GgmlType::IQ2_XS,
                                          GgmlType::IQ2_S,  GgmlType::IQ1_S,   GgmlType::IQ1_M};
  return t;
}

bool is_32_block(GgmlType t) { return t == GgmlType::Q8_0 || t == GgmlType::Q4_0 || t == GgmlType::MXFP4; }

/// Weights with finite scales for the types bench::random_weights leaves random (sane only).
void sanitize_scales(GgmlType type, std::vector<uint8_t>& w, int64_t blocks, std::mt19937_64& rng) {
  const auto* geo = ggml_type_geometry(uint32_t(type));
  auto put16 = [&](int64_t off) {
    const uint16_t v = uint16_t(0x2C00 + rng() % 0x1000);  // 2^-4 .. ~2^0
    std::memcpy(w.data() + off, &v, 2);
  };
  for (int64_t i = 0; i < blocks; ++i) {
    const int64_t o = i * geo->block_bytes;
    switch (type) {
      case GgmlType::Q4_0: put16(o); break;
      case GgmlType::Q4_K:
        put16(o + offsetof(quant::BlockQ4_K, d));
        put16(o + offsetof(quant::BlockQ4_K, dmin));
        break;
      case GgmlType::Q6_K: put16(o + offsetof(quant::BlockQ6_K, d)); break;
      case GgmlType::IQ2_S: put16(o + offsetof(quant::BlockIQ2_S, d)); break;
      default: break;
    }
  }
}

void check(GgmlType type, int64_t cols, int64_t r0, int64_t r1, int64_t n, bool sane, uint64_t seed) {
  AutoModeGuard guard;
  const std::string what = std::string(ggml_type_name(uint32_t(type))) + " cols " + std::to_string(cols) + " rows [" +
                           std::to_string(r0) + "," + std::to_string(r1) + ") tokens " + std::to_string(n) +
                           (sane ? " sane" : " random bytes");
  std::mt19937_64 rng(seed);
  const int64_t rows = r1 + 2, rb = cpu::row_bytes(type, cols);
  auto w = bench::random_weights(type, rows, cols, rng, sane);
  if (sane) sanitize_scales(type, w, rows * rb / ggml_type_geometry(uint32_t(type))->block_bytes, rng);
  // Activations: Gaussian with per-block magnitudes 2^-6..2^6, every fifth block zero.
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_int_distribution<int> mag(-6, 6);
  std::vector<float> x(size_t(n * cols));
  for (int64_t t = 0; t < n; ++t)
    for (int64_t b = 0; b < cols / 32; ++b) {
      const float s = std::ldexp(1.0f, mag(rng));
      for (int j = 0; j < 32; ++j) x[size_t(t * cols + 32 * b + j)] = (b % 5 == 3) ? 0.0f : nd(rng) * s;
    }
  cpu::MatmulScratch s;
  cpu::matmul_quantize_prepare(n, cols, true, s);
  // Two ranges, as two workers would quantize them.
  cpu::matmul_quantize_rows(cpu::F32Rows{x.data(), cols}, cols, s, 0, n / 2);
  cpu::matmul_quantize_rows(cpu::F32Rows{x.data(), cols}, cols, s, n / 2, n);
  const int64_t qb = cols / 32 * 36;

  cpu::set_simd_mode(cpu::SimdMode::ForceScalar);
  std::vector<float> ref(size_t(n * rows));
  for (int64_t t = 0; t < n; ++t)
    for (int64_t r = r0; r < r1; ++r)
      ref[size_t(t * rows + r)] = cpu::vec_dot_q8_1(type, w.data() + r * rb, s.xq.data() + t * qb, cols);

  const cpu::WRows wr{type, w.data(), cols, rows, uint64_t(rb)};
  const cpu::MmqTokens tok = cpu::matmul_tokens(s, cols);
  int families = 0, nonzero = 0;
  const std::pair<cpu::DotBackend, cpu::SimdMode> fams[] = {{cpu::DotBackend::Avx2, cpu::SimdMode::Avx2},
                                                            {cpu::DotBackend::AvxVnni, cpu::SimdMode::AvxVnni},
                                                            {cpu::DotBackend::Avx512Vnni, cpu::SimdMode::Avx512Vnni}};
  for (const auto& [b, mode] : fams) {
    if (!cpu::backend_usable(b)) continue;
    cpu::set_simd_mode(mode);
    if (cpu::selected_backend() != b) continue;
    // Below the type's threshold matmul_rows takes the per-token path: compared all the same.
    (void)cpu::matmul_uses_mmq(type, n);
    ++families;
    // The family's kernel and decoder directly, every row against all n tokens (whatever the
    // threshold of matmul_rows).
    {
      const cpu::MmqFn fn = cpu::family_mmq(b, type);
      const cpu::MmqDecodeFn dec = cpu::family_mmq_decoder(b, type);
      ASSERT_TRUE(fn != nullptr && dec != nullptr) << what;
      std::vector<cpu::MmqGroup> g(size_t((cols + 255) / 256));
      std::vector<float> o(static_cast<size_t>(n));
      for (int64_t r = r0; r < r1; ++r) {
        dec(w.data() + r * rb, cols, g.data());
        fn(g.data(), cols / 32, tok, 0, n, o.data(), 1);
        for (int64_t t = 0; t < n; ++t)
          ASSERT_EQ(canonical_bits(o[size_t(t)]), canonical_bits(ref[size_t(t * rows + r)]))
              << what << " " << cpu::dot_backend_name(b) << " (kernel): token " << t << " row " << r;
      }
    }
    const int64_t ld = rows + 3;
    std::vector<float> y(size_t(n * ld), -777.0f);
    cpu::matmul_rows(wr, cpu::F32Rows{x.data(), cols}, s.xq.data(), n, true, cpu::F32Rows{y.data(), ld}, r0, r1, &tok);
    for (int64_t t = 0; t < n; ++t)
      for (int64_t r = 0; r < ld; ++r) {
        const float got = y[size_t(t * ld + r)];
        if (r < r0 || r >= r1) {
          ASSERT_EQ(got, -777.0f) << what << " " << cpu::dot_backend_name(b) << ": wrote outside [r0, r1) at t " << t
                                  << " r " << r;
          continue;
        }
        const float want = ref[size_t(t * rows + r)];
        ASSERT_EQ(canonical_bits(got), canonical_bits(want))
            << what << " " << cpu::dot_backend_name(b) << ": token " << t << " row " << r << " mmq " << got
            << " scalar " << want;
        nonzero += want != 0.0f;
      }
  }
  if (!cpu::cpu_avx2_usable()) return;
  EXPECT_GT(families, 0) << what;
  if (sane) {
    EXPECT_GT(nonzero, 0) << what << ": all-zero results test nothing";
  }
}

TEST(CpuMmq, BitIdenticalToScalarForEveryTypeShapeAndTokenCount) {
  if (!cpu::cpu_avx2_usable()) GTEST_SKIP() << "CPU lacks AVX2/FMA/F16C: the multi-token kernels cannot run here";
  uint64_t seed = 1901;
  const std::pair<int64_t, int64_t> rows_tokens[] = {{1, 2}, {5, 3}, {17, 17}, {33, 7}, {20, 33}};
  for (GgmlType t : mmq_types()) {
    ASSERT_TRUE(cpu::mmq_has_decode(t)) << ggml_type_name(uint32_t(t));
    const std::vector<int64_t> cols = is_32_block(t) ? std::vector<int64_t>{32, 96, 288, 2048 + 160}
                                                     : std::vector<int64_t>{256, 768, 2304};
    for (int64_t c : cols)
      for (const auto& [nr, n] : rows_tokens)
        for (bool sane : {true, false}) check(t, c, 3, 3 + nr, n, sane, seed++);
  }
}

// The AVX2 Q8_1 quantizer (quantize_q8_avx2.cpp) writes the scalar contract's bytes: blocks of
// magnitudes 2^-40 .. 2^40 (fp16-subnormal and overflowing scales, s overflowing to inf), exact
// half-way ties (x / df = k + 0.5 with df = 1), zeros and -0, and non-finite blocks (scalar path).
TEST(CpuMmq, SimdQuantizerWritesTheScalarBytes) {
  if (!cpu::cpu_avx2_usable()) GTEST_SKIP() << "CPU lacks AVX2/FMA/F16C";
  AutoModeGuard guard;
  std::mt19937_64 rng(1902);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_int_distribution<int> mag(-40, 40);
  const int64_t blocks = 4000;
  std::vector<float> x(size_t(blocks * 32));
  for (int64_t b = 0; b < blocks; ++b) {
    float* xb = x.data() + 32 * b;
    const int kind = int(b % 8);
    const float s = std::ldexp(1.0f, mag(rng));
    for (int j = 0; j < 32; ++j) xb[j] = nd(rng) * s;
    if (kind == 1) {  // ties: amax 127 -> df 1, x = k + 0.5
      for (int j = 0; j < 32; ++j) xb[j] = float(int(rng() % 200) - 100) + 0.5f;
      xb[0] = 127.0f;
    } else if (kind == 2) {
      for (int j = 0; j < 32; ++j) xb[j] = (j % 2) ? 0.0f : -0.0f;
    } else if (kind == 3 && b % 24 == 3) {
      xb[rng() % 32] = (b % 48 == 3) ? NAN : -INFINITY;
    }
  }
  std::vector<uint8_t> ref(size_t(blocks * 36)), got(size_t(blocks * 36), 0xAB);
  cpu::set_simd_mode(cpu::SimdMode::ForceScalar);
  cpu::quantize_row_q8_1(x.data(), ref.data(), blocks * 32);
  cpu::set_simd_mode(cpu::SimdMode::Auto);
  ASSERT_TRUE(cpu::avx2_selected());
  cpu::quantize_row_q8_1(x.data(), got.data(), blocks * 32);
  for (int64_t b = 0; b < blocks; ++b)
    ASSERT_EQ(std::memcmp(ref.data() + 36 * b, got.data() + 36 * b, 36), 0) << "block " << b << " kind " << b % 8;
}

TEST(CpuMmq, KernelsExistWhereExpectedAndNotUnderTheScalarPolicy) {
  if (!cpu::cpu_avx2_usable()) GTEST_SKIP() << "CPU lacks AVX2/FMA/F16C";
  AutoModeGuard guard;
  for (GgmlType t : mmq_types()) EXPECT_NE(cpu::simd_mmq(t), nullptr) << ggml_type_name(uint32_t(t));
  EXPECT_EQ(cpu::simd_mmq(GgmlType::NVFP4), nullptr);
  EXPECT_FALSE(cpu::matmul_uses_mmq(GgmlType::Q8_0, 1));
  cpu::set_simd_mode(cpu::SimdMode::ForceScalar);
  for (GgmlType t : mmq_types()) EXPECT_EQ(cpu::simd_mmq(t), nullptr) << ggml_type_name(uint32_t(t));
}

}  // namespace
}  // namespace ds4

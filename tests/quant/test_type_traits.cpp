// tests/quant/test_type_traits.cpp — the traits table agrees with ggml geometry (ggml_type.h, cross-
// checked by gguf/ against gguf-py) and with the can_* predicates; DeepSeek format traits decode.
#include <gtest/gtest.h>

#include <set>

#include "kernels/cpu/quant_ref.h"
#include "kernels/quant/type_traits.h"
#include "tests/quant/quant_test_util.h"

namespace ds4 {
namespace {

using namespace ds4::quant;

TEST(TypeTraits, TableMatchesGeometryAndPredicates) {
  const std::set<std::string_view> want = {"F32",  "F16",  "BF16",    "I32",    "Q4_0",  "Q8_0",
                                           "Q8_1", "Q8_K", "Q2_K",    "Q4_K",   "Q6_K",  "IQ2_XXS",
                                           "IQ2_XS", "IQ2_S", "IQ1_S", "IQ1_M", "MXFP4", "NVFP4"};
  std::set<std::string_view> have;
  for (const auto& t : all_quant_type_traits()) {
    have.insert(t.name);
    const auto* g = ggml_type_geometry(t.ggml_id);
    ASSERT_NE(g, nullptr) << t.name;
    EXPECT_EQ(g->name, t.name);
    EXPECT_EQ(uint32_t(t.type), t.ggml_id);
    EXPECT_EQ(g->block_elems, t.block_elems) << t.name;
    EXPECT_EQ(g->block_bytes, t.block_bytes) << t.name;
    EXPECT_NE(t.decode, nullptr);
    EXPECT_EQ(t.quantize != nullptr, cpu::can_quantize(t.type)) << t.name;
    EXPECT_EQ(t.dot_q8_1 != nullptr, cpu::can_dot_q8_1(t.type)) << t.name;
    if (t.type != GgmlType::I32) {
      EXPECT_TRUE(cpu::can_dequantize(t.type)) << t.name;
    }
    EXPECT_EQ(quant_type_traits(t.type), &t);
  }
  EXPECT_EQ(have, want);
  EXPECT_EQ(quant_type_traits(GgmlType::Q5_K), nullptr);
  EXPECT_EQ(quant_type_traits(GgmlType::MXFP4)->ggml_id, 39u);
  EXPECT_EQ(quant_type_traits(GgmlType::NVFP4)->ggml_id, 40u);
}

TEST(TypeTraits, DecodeOneBlockMatchesRow) {
  std::mt19937_64 rng(3);
  for (const auto& t : all_quant_type_traits()) {
    if (t.type == GgmlType::I32) continue;
    std::vector<uint8_t> blk(size_t(t.block_bytes));
    for (auto& b : blk) b = uint8_t(rng());
    std::vector<float> a(size_t(t.block_elems)), b(size_t(t.block_elems));
    t.decode(blk.data(), a.data());
    cpu::dequantize_row(t.type, blk.data(), b.data(), t.block_elems);
    for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(test::canonical_bits(a[i]), test::canonical_bits(b[i]));
  }
  const int32_t v = -123456;
  float f;
  quant_type_traits(GgmlType::I32)->decode(&v, &f);
  EXPECT_EQ(f, -123456.0f);
}

TEST(TypeTraits, DeepSeekFormats) {
  const auto* fp8 = ds_format_traits(DsFormat::FP8_E4M3_B128);
  const auto* fp4 = ds_format_traits(DsFormat::FP4_E2M1_B32);
  ASSERT_NE(fp8, nullptr);
  ASSERT_NE(fp4, nullptr);
  EXPECT_EQ(fp8->info.scale_block_cols, 128);
  EXPECT_EQ(fp8->info.scale_block_rows, 128);
  EXPECT_EQ(fp4->info.scale_block_cols, 32);
  EXPECT_EQ(fp4->info.elems_per_byte, 2);
  // FP8: 0x38 = 1.0 (exp 7, man 0), 0xC4 = -(1.5 * 2^1) = -3; scale e = 130 -> 2^3.
  const uint8_t w[256] = {0x38, 0xC4};
  const uint8_t sc[2] = {130, 0};
  float y[256];
  fp8->decode_row(w, sc, y, 256);
  EXPECT_EQ(y[0], 8.0f);
  EXPECT_EQ(y[1], -24.0f);
  EXPECT_EQ(y[128], 0.0f);
  // FP4: byte 0x72 -> element 0 = code 2 (1.0), element 1 = code 7 (6.0); scale e = 126 -> 0.5.
  uint8_t w4[16] = {0x72, 0x0F};
  const uint8_t s4[1] = {126};
  float y4[32];
  fp4->decode_row(w4, s4, y4, 32);
  EXPECT_EQ(y4[0], 0.5f);
  EXPECT_EQ(y4[1], 3.0f);
  EXPECT_EQ(y4[2], -3.0f);  // code 15 = -6
  EXPECT_EQ(y4[3], 0.0f);
}

}  // namespace
}  // namespace ds4

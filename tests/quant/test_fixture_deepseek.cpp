// tests/quant/test_fixture_deepseek.cpp — DeepSeek FP8/FP4 decoding against the dsv4-tiny fixture:
// the fixture's GGUF holds the same weights dequantized to F32 (FP8) and repacked to MXFP4 (FP4)
// by the fixture's author (shared/fixtures/dsv4-tiny/README.md). gguf_oracle.py extracts both
// sides; our dequantize_row_ds_fp8 must equal the F32 tensors bit for bit, and
// repack_ds_fp4_to_mxfp4 must reproduce the MXFP4 bytes. Skipped without the fixture.
#include <gtest/gtest.h>

#include <sstream>

#include "kernels/cpu/quant_ref.h"
#include "tests/quant/quant_test_util.h"

namespace ds4 {
namespace {

TEST(DeepSeekFixture, Fp8AndFp4MatchTinyGguf) {
  const auto fx = test::fixtures_dir() / "dsv4-tiny";
  if (!std::filesystem::exists(fx / "dsv4-tiny-mxfp4.gguf")) GTEST_SKIP() << "no dsv4-tiny fixture at " << fx;
  const auto dir = test::scratch_dir("quant_fixture_deepseek");
  ASSERT_EQ(test::run_oracle("fixture \"" + fx.string() + "\" \"" + dir.string() + "\""), 0);
  std::ifstream manifest(dir / "manifest.txt");
  std::string kind, name;
  int64_t rows, cols;
  int checked = 0;
  while (manifest >> kind >> name >> rows >> cols) {
    const auto w = test::read_file(dir / (name + ".w"));
    const auto s = test::read_file(dir / (name + ".s"));
    const auto g = test::read_file(dir / (name + ".g"));
    std::vector<float> y(static_cast<size_t>(cols));
    if (kind == "fp8") {
      const int64_t scols = (cols + 127) / 128;
      ASSERT_EQ(int64_t(w.size()), rows * cols) << name;
      ASSERT_EQ(int64_t(s.size()), (rows + 127) / 128 * scols) << name;
      ASSERT_EQ(int64_t(g.size()), rows * cols * 4) << name;
      int64_t bad = 0;
      for (int64_t r = 0; r < rows; ++r) {
        cpu::dequantize_row_ds_fp8(w.data() + r * cols, s.data() + (r / 128) * scols, y.data(), cols);
        for (int64_t k = 0; k < cols; ++k) {
          float want;
          std::memcpy(&want, g.data() + 4 * (r * cols + k), 4);
          if (test::canonical_bits(want) != test::canonical_bits(y[size_t(k)]) && ++bad <= 3)
            ADD_FAILURE() << name << " [" << r << "][" << k << "]: ours " << y[size_t(k)] << " gguf " << want;
        }
      }
      EXPECT_EQ(bad, 0) << name;
    } else {
      ASSERT_EQ(kind, "fp4");
      const int64_t rb = cpu::row_bytes(GgmlType::MXFP4, cols);
      ASSERT_EQ(int64_t(w.size()), rows * cols / 2) << name;
      ASSERT_EQ(int64_t(s.size()), rows * cols / 32) << name;
      ASSERT_EQ(int64_t(g.size()), rows * rb) << name;
      std::vector<uint8_t> mx(static_cast<size_t>(rb));
      std::vector<float> z(static_cast<size_t>(cols));
      int64_t bad = 0;
      for (int64_t r = 0; r < rows; ++r) {
        cpu::repack_ds_fp4_to_mxfp4(w.data() + r * cols / 2, s.data() + r * cols / 32, mx.data(), cols);
        if (std::memcmp(mx.data(), g.data() + r * rb, size_t(rb)) != 0 && ++bad <= 3)
          ADD_FAILURE() << name << " row " << r << ": MXFP4 repack differs from the fixture GGUF";
        cpu::dequantize_row_ds_fp4(w.data() + r * cols / 2, s.data() + r * cols / 32, y.data(), cols);
        cpu::dequantize_row(GgmlType::MXFP4, g.data() + r * rb, z.data(), cols);
        for (int64_t k = 0; k < cols; ++k)
          if (test::canonical_bits(y[size_t(k)]) != test::canonical_bits(z[size_t(k)]) && ++bad <= 3)
            ADD_FAILURE() << name << " [" << r << "][" << k << "]: " << y[size_t(k)] << " vs " << z[size_t(k)];
      }
      EXPECT_EQ(bad, 0) << name;
    }
    ++checked;
  }
  EXPECT_EQ(checked, 10);
}

}  // namespace
}  // namespace ds4

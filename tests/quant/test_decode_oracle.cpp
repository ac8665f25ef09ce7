// tests/quant/test_decode_oracle.cpp — every decoder bit-exact (after canonicalising -0 and NaN)
// against gguf-py's gguf.quants.dequantize on >= 10,000 random blocks per type, including edge
// scales; the ggml-reference quantizers (Q8_0, MXFP4, F16, BF16) bit-exact against gguf-py's
// quantize. Blocks are generated here, written to scratch files, decoded by
// tests/quant/gguf_oracle.py, and compared. (Q8_1 is not checked here: gguf-py's Q8_1 block
// size is wrong; Q8_1/Q8_K decoding is covered in test_quantize.cpp.)
#include <gtest/gtest.h>

#include "kernels/cpu/quant_ref.h"
#include "tests/quant/quant_test_util.h"

namespace ds4 {
namespace {

struct OracleCase {
  GgmlType type;
  int d_offset;    ///< byte offset of the fp16 scale (-1: none / special)
  int dmin_offset; ///< byte offset of a second fp16 scale (-1: none)
};

void put_fp16(uint8_t* b, int off, uint16_t v) {
  b[off] = uint8_t(v & 0xFF);
  b[off + 1] = uint8_t(v >> 8);
}

/// Edge-scale bits for block i: 0, subnormal, +inf, NaN, small normal, or leave random.
bool edge_fp16(std::mt19937_64& rng, int64_t i, uint16_t* out) {
  switch (i % 12) {
    case 0: *out = 0; return true;
    case 1: *out = uint16_t(1 + rng() % 0x3FF); return true;     // subnormal
    case 2: *out = uint16_t(0x8000 | (1 + rng() % 0x3FF)); return true;
    case 3: *out = 0x7C00; return true;                          // +inf
    case 4: *out = uint16_t(0x7C01 + rng() % 0x3FE); return true; // NaN
    case 5: case 6: case 7: *out = test::random_scale_fp16(rng); return true;
    default: return false;                                       // random bytes
  }
}

std::vector<uint8_t> random_blocks(const OracleCase& c, int64_t nblocks, std::mt19937_64& rng) {
  const auto* g = ggml_type_geometry(uint32_t(c.type));
  std::vector<uint8_t> buf(size_t(nblocks * g->block_bytes));
  for (auto& b : buf) b = uint8_t(rng());
  for (int64_t i = 0; i < nblocks; ++i) {
    uint8_t* b = buf.data() + i * g->block_bytes;
    uint16_t h;
    if (c.d_offset >= 0 && edge_fp16(rng, i, &h)) put_fp16(b, c.d_offset, h);
    if (c.dmin_offset >= 0 && edge_fp16(rng, i / 12, &h)) put_fp16(b, c.dmin_offset, h);
    if (c.type == GgmlType::IQ1_M && edge_fp16(rng, i, &h)) {
      // The super-scale lives in the top nibble of each u16 scale word (scales at byte 48).
      for (int k = 0; k < 4; ++k) b[48 + 2 * k + 1] = uint8_t((b[48 + 2 * k + 1] & 0x0F) | (((h >> (4 * k)) & 0xF) << 4));
    }
    if (c.type == GgmlType::MXFP4) {
      const uint8_t edge[] = {0, 1, 2, 127, 128, 253, 254, 255};
      if (i % 3 == 0) b[0] = edge[(i / 3) % 8];
    }
    if (c.type == GgmlType::NVFP4 && i % 4 == 0) {
      const uint8_t edge[] = {0x00, 0x7F, 0x01, 0x07, 0x08, 0x7E, 0x80, 0xFF};
      for (int k = 0; k < 4; ++k) b[k] = edge[(i / 4 + k) % 8];
    }
  }
  return buf;
}

class DecodeOracle : public ::testing::TestWithParam<OracleCase> {};

TEST_P(DecodeOracle, BitExactVsGgufPy) {
  const OracleCase c = GetParam();
  const auto* g = ggml_type_geometry(uint32_t(c.type));
  std::mt19937_64 rng(0xD5EC0DE0ull + uint64_t(c.type));
  int64_t nblocks = 10000;
  std::vector<uint8_t> blocks;
  if (c.type == GgmlType::F16 || c.type == GgmlType::BF16) {
    nblocks = 65536;  // every bit pattern
    blocks.resize(2 * 65536);
    for (int v = 0; v < 65536; ++v) put_fp16(blocks.data(), 2 * v, uint16_t(v));
  } else {
    blocks = random_blocks(c, nblocks, rng);
  }
  const int64_t n = nblocks * g->block_elems;
  std::vector<float> ours(static_cast<size_t>(n));
  cpu::dequantize_row(c.type, blocks.data(), ours.data(), n);

  const auto dir = test::scratch_dir(std::string("quant_decode_") + std::string(g->name));
  test::write_file(dir / "blocks.bin", blocks.data(), blocks.size());
  ASSERT_EQ(test::run_oracle("dequant " + std::string(g->name) + " \"" + (dir / "blocks.bin").string() +
                             "\" \"" + (dir / "out.f32").string() + "\""), 0);
  const auto theirs_raw = test::read_file(dir / "out.f32");
  ASSERT_EQ(theirs_raw.size(), size_t(n) * 4);
  int64_t mismatches = 0;
  for (int64_t i = 0; i < n; ++i) {
    float t;
    std::memcpy(&t, theirs_raw.data() + 4 * i, 4);
    if (test::canonical_bits(t) != test::canonical_bits(ours[size_t(i)])) {
      if (++mismatches <= 5)
        ADD_FAILURE() << g->name << " block " << i / g->block_elems << " element " << i % g->block_elems
                      << ": ours " << ours[size_t(i)] << " gguf-py " << t;
    }
  }
  EXPECT_EQ(mismatches, 0) << g->name << ": " << mismatches << " of " << n << " elements differ";
}

INSTANTIATE_TEST_SUITE_P(
    AllTypes, DecodeOracle,
    ::testing::Values(OracleCase{GgmlType::F16, -1, -1}, OracleCase{GgmlType::BF16, -1, -1},
                      OracleCase{GgmlType::Q4_0, 0, -1}, OracleCase{GgmlType::Q8_0, 0, -1},
                      OracleCase{GgmlType::Q2_K, 80, 82}, OracleCase{GgmlType::Q4_K, 0, 2},
                      OracleCase{GgmlType::Q6_K, 208, -1}, OracleCase{GgmlType::IQ2_XXS, 0, -1},
                      OracleCase{GgmlType::IQ2_XS, 0, -1}, OracleCase{GgmlType::IQ2_S, 0, -1},
                      OracleCase{GgmlType::IQ1_S, 0, -1}, OracleCase{GgmlType::IQ1_M, -1, -1},
                      OracleCase{GgmlType::MXFP4, -1, -1}, OracleCase{GgmlType::NVFP4, -1, -1}),
    [](const auto& info) { return std::string(ggml_type_name(uint32_t(info.param.type))); });

/// Inputs for the quantizer comparison: Gaussian blocks at several scales, plus MXFP4 ties.
std::vector<float> quantizer_inputs(GgmlType type, std::mt19937_64& rng) {
  std::vector<float> x;
  const float sigmas[] = {1.0f, 1e-3f, 37.0f, 1e-5f};
  for (float s : sigmas) {
    auto v = test::gaussian(rng, 32 * 2500, s);
    x.insert(x.end(), v.begin(), v.end());
  }
  x.insert(x.end(), 32, 0.0f);  // all-zero block
  if (type == GgmlType::MXFP4) {
    // Exact midpoints between adjacent representable values (tie-breaking: first index wins).
    const int kv[8] = {0, 1, 2, 3, 4, 6, 8, 12};
    for (int b = 0; b < 64; ++b) {
      const float d = std::ldexp(1.0f, b % 20 - 10);
      float blk[32];
      for (int j = 0; j < 32; ++j) {
        const int k = (b + j) % 7;
        const float mid = d * 0.5f * float(kv[k] + kv[k + 1]) * 0.5f;
        blk[j] = (j & 1) ? -mid : mid;
      }
      blk[0] = d * 6.0f;  // amax = 12 * d/2 fixes e
      x.insert(x.end(), blk, blk + 32);
    }
  }
  return x;
}

class QuantizeOracle : public ::testing::TestWithParam<GgmlType> {};

TEST_P(QuantizeOracle, BitExactVsGgufPy) {
  const GgmlType type = GetParam();
  const auto* g = ggml_type_geometry(uint32_t(type));
  std::mt19937_64 rng(0x0A11CE5Eull + uint64_t(type));
  const auto x = quantizer_inputs(type, rng);
  const int64_t n = int64_t(x.size());
  std::vector<uint8_t> ours(size_t(cpu::row_bytes(type, n)));
  cpu::quantize_row(type, x.data(), ours.data(), n);
  const auto dir = test::scratch_dir(std::string("quant_quantize_") + std::string(g->name));
  test::write_file(dir / "x.f32", x.data(), x.size() * 4);
  ASSERT_EQ(test::run_oracle("quant " + std::string(g->name) + " \"" + (dir / "x.f32").string() + "\" \"" +
                             (dir / "q.bin").string() + "\""), 0);
  const auto theirs = test::read_file(dir / "q.bin");
  ASSERT_EQ(theirs.size(), ours.size());
  int64_t bad = 0;
  for (size_t i = 0; i < ours.size(); i += size_t(g->block_bytes))
    if (std::memcmp(&ours[i], &theirs[i], size_t(g->block_bytes)) != 0 && ++bad <= 5)
      ADD_FAILURE() << g->name << " block " << i / size_t(g->block_bytes) << " differs";
  EXPECT_EQ(bad, 0);
}

INSTANTIATE_TEST_SUITE_P(ReferenceQuantizers, QuantizeOracle,
                         ::testing::Values(GgmlType::Q8_0, GgmlType::MXFP4, GgmlType::F16, GgmlType::BF16),
                         [](const auto& info) { return std::string(ggml_type_name(uint32_t(info.param))); });

}  // namespace
}  // namespace ds4

// tests/gguf/gguf_validate_test.cpp — deep data checks (check_tensor_data): a NaN/inf scale or
// value placed in one block is found at that block, and clean data passes. Scale positions are
// written out here from ggml-org/ggml src/ggml-common.h (block_q8_0 {d, qs[32]}, block_q2_K
// {scales[16], qs[64], d, dmin}, block_q6_K {ql[128], qh[64], scales[16], d}, block_mxfp4 {e, qs[16]}, ...).
#include <gtest/gtest.h>

#include <cstddef>
#include <cstring>
#include <vector>

#include "gguf/gguf_validate.h"
#include "kernels/quant/ggml_type.h"

namespace ds4::gguf {
namespace {

struct Tensor {
  std::vector<uint8_t> bytes;
  TensorInfo info;
};

/// `n_blocks` blocks of type `t`, filled with a finite pattern (all scale bytes 0x11 = small finite).
Tensor make(GgmlType t, int64_t n_blocks) {
  const auto* g = ggml_type_geometry(uint32_t(t));
  Tensor r;
  r.bytes.assign(size_t(g->block_bytes * n_blocks), 0x11);
  r.info.name = "t";
  r.info.type = uint32_t(t);
  r.info.n_dims = 1;
  r.info.ne = {g->block_elems * n_blocks, 1, 1, 1};
  r.info.nbytes = r.bytes.size();
  return r;
}

DataCheck check(Tensor& t) {
  t.info.data = t.bytes.data();
  return check_tensor_data(t.info);
}

void put16(Tensor& t, size_t at, uint16_t v) { std::memcpy(t.bytes.data() + at, &v, 2); }

struct ScaleCase {
  GgmlType type;
  size_t offset;  // byte offset of an fp16 scale in the block
};

TEST(GgufValidate, NonFiniteFp16ScaleFoundInItsBlock) {
  const ScaleCase cases[] = {
      {GgmlType::Q8_0, 0},
      {GgmlType::Q8_1, 2},      // s
      {GgmlType::Q4_0, 0},
      {GgmlType::Q2_K, 16 + 64},       // d
      {GgmlType::Q2_K, 16 + 64 + 2},   // dmin
      {GgmlType::Q3_K, 32 + 64 + 12},  // d after hmask, qs, scales
      {GgmlType::Q4_K, 2},             // dmin
      {GgmlType::Q6_K, 128 + 64 + 16}, // d
      {GgmlType::IQ2_XXS, 0},
      {GgmlType::IQ2_XS, 0},
      {GgmlType::IQ1_S, 0},
      {GgmlType::TQ2_0, 64},           // d after qs[64]
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(std::string(ggml_type_name(uint32_t(c.type))) + " scale at " + std::to_string(c.offset));
    Tensor t = make(c.type, 3);
    auto ok = check(t);
    EXPECT_TRUE(ok.checked);
    EXPECT_EQ(ok.bad, 0u);
    const size_t bb = size_t(ggml_type_geometry(uint32_t(c.type))->block_bytes);
    put16(t, bb * 2 + c.offset, 0x7E00);  // NaN in block 2
    auto bad = check(t);
    EXPECT_EQ(bad.bad, 1u);
    EXPECT_EQ(bad.first_bad, 2u);
    EXPECT_NE(bad.problem.find("non-finite"), std::string::npos);
    put16(t, bb * 2 + c.offset, 0xFC00);  // -inf
    EXPECT_EQ(check(t).bad, 1u);
  }
}

TEST(GgufValidate, Mxfp4E8M0Nan) {
  Tensor t = make(GgmlType::MXFP4, 4);
  for (int b = 0; b < 4; ++b) t.bytes[size_t(b) * 17] = 0xFE;  // e is byte 0 of each 17-byte block
  EXPECT_EQ(check(t).bad, 0u);  // 0xFE = 2^127 is finite
  t.bytes[1 * 17] = 0xFF;
  t.bytes[3 * 17] = 0xFF;
  auto r = check(t);
  EXPECT_EQ(r.bad, 2u);
  EXPECT_EQ(r.first_bad, 1u);
  EXPECT_NE(r.problem.find("E8M0 scale 0xFF"), std::string::npos);
}

TEST(GgufValidate, FloatTensors) {
  Tensor h = make(GgmlType::F16, 8);
  EXPECT_EQ(check(h).bad, 0u);
  put16(h, 2 * 5, 0x7C00);  // +inf at element 5
  auto r = check(h);
  EXPECT_EQ(r.bad, 1u);
  EXPECT_EQ(r.first_bad, 5u);
  Tensor f = make(GgmlType::F32, 4);
  const float nan = __builtin_nanf("");
  std::memcpy(f.bytes.data() + 4 * 3, &nan, 4);
  EXPECT_EQ(check(f).first_bad, 3u);
  Tensor b = make(GgmlType::BF16, 4);
  put16(b, 0, 0x7F80);  // bf16 +inf
  EXPECT_EQ(check(b).bad, 1u);
}

TEST(GgufValidate, IntegerTypesHaveNoDeepCheck) {
  Tensor t = make(GgmlType::I32, 4);
  EXPECT_FALSE(check(t).checked);
}

}  // namespace
}  // namespace ds4::gguf

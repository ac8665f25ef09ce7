// tests/quant/test_grids.cpp — the generated lookup tables (kernels/quant/grids.inc) equal the
// tables gguf-py unpacks itself (hashes computed in Python at test time), plus structural checks.
#include <gtest/gtest.h>

#include <map>
#include <sstream>

#include "kernels/quant/grids.h"
#include "tests/quant/quant_test_util.h"

namespace ds4 {
namespace {

using namespace ds4::quant;

template <class T, size_t N>
std::pair<size_t, uint64_t> table_hash(const T (&t)[N]) {
  // Little-endian bytes of each entry, independent of host byte order.
  std::vector<uint8_t> bytes;
  for (size_t i = 0; i < N; ++i)
    for (size_t k = 0; k < sizeof(T); ++k) bytes.push_back(uint8_t((uint64_t(t[i]) >> (8 * k)) & 0xFF));
  return {N, test::fnv1a64(bytes.data(), bytes.size())};
}

TEST(Grids, HashesMatchGgufPy) {
  const auto dir = test::scratch_dir("quant_grids");
  ASSERT_EQ(test::run_oracle("gridhash \"" + (dir / "hash.txt").string() + "\""), 0);
  std::ifstream f(dir / "hash.txt");
  std::map<std::string, std::pair<size_t, uint64_t>> want;
  std::string name, hex;
  size_t count;
  while (f >> name >> count >> hex) want[name] = {count, std::stoull(hex, nullptr, 16)};
  ASSERT_EQ(want.size(), 7u);
  const std::map<std::string, std::pair<size_t, uint64_t>> have = {
      {"ksigns_iq2xs", table_hash(host_tables::ksigns_iq2xs)},
      {"kvalues_mxfp4_u8", table_hash(host_tables::kvalues_mxfp4_u8)},
      {"iq2xxs_grid", table_hash(host_tables::iq2xxs_grid)},
      {"iq2xs_grid", table_hash(host_tables::iq2xs_grid)},
      {"iq2s_grid", table_hash(host_tables::iq2s_grid)},
      {"iq1s_grid", table_hash(host_tables::iq1s_grid)},
      {"iq1s_grid_gpu", table_hash(host_tables::iq1s_grid_gpu)},
  };
  for (const auto& [n, h] : have) {
    ASSERT_TRUE(want.count(n)) << n;
    EXPECT_EQ(h.first, want[n].first) << n;
    EXPECT_EQ(h.second, want[n].second) << n << ": grids.inc differs from gguf-py";
  }
}

TEST(Grids, Structure) {
  // ksigns: low 7 bits = index, bit 7 = parity (ggml-common.h comment; quant-formats.md §2.1).
  for (int i = 0; i < 128; ++i) {
    const int parity = __builtin_popcount(unsigned(i)) & 1;
    EXPECT_EQ(ksigns_iq2xs(i), uint8_t(i | (parity << 7))) << i;
  }
  const int kv[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
  for (int i = 0; i < 16; ++i) EXPECT_EQ(kvalues_mxfp4(i), kv[i]);
  // kvalues = 2 * e2m1 (OCP table).
  for (int i = 0; i < 16; ++i) EXPECT_EQ(float(kvalues_mxfp4(i)), 2.0f * e2m1_to_f32(uint8_t(i)));
  for (int i = 0; i < 256; ++i)
    for (int j = 0; j < 8; ++j) {
      const int v = grid_u8(iq2xxs_grid(i), j);
      EXPECT_TRUE(v == 8 || v == 25 || v == 43);
    }
  for (int i = 0; i < 2048; ++i) {
    const uint32_t gpu = iq1s_grid_gpu(i);
    for (int j = 0; j < 8; ++j) {
      const int v = grid_i8(iq1s_grid(i), j);
      ASSERT_TRUE(v >= -1 && v <= 1);
      const int nib = int((gpu >> (8 * (j % 4) + 4 * (j / 4))) & 0xF);
      EXPECT_EQ(nib, v + 1) << "entry " << i << " element " << j;
    }
  }
  // Entries of each grid are distinct.
  for (int i = 1; i < 1024; ++i) EXPECT_NE(iq2s_grid(i), iq2s_grid(i - 1));
}

}  // namespace
}  // namespace ds4

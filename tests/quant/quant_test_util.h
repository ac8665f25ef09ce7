// tests/quant/quant_test_util.h — helpers shared by the quant tests: random blocks with edge
// scales, float canonicalisation, file I/O, FNV-1a, the gguf-py oracle runner.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "kernels/quant/ggml_type.h"
#include "kernels/quant/scalar_formats.h"
#include "tests/support/test_env.h"

namespace ds4::test {

/// FNV-1a 64-bit hash of bytes.
inline uint64_t fnv1a64(const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  uint64_t h = 0xCBF29CE484222325ull;
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 0x100000001B3ull;
  }
  return h;
}

/// Float bits with -0 -> +0 and every NaN -> 0x7FC00000 (for bit-exact comparisons).
inline uint32_t canonical_bits(float f) {
  if (std::isnan(f)) return 0x7FC00000u;
  if (f == 0.0f) return 0;
  return ds4::quant::f32_bits(f);
}

inline void write_file(const std::filesystem::path& p, const void* data, size_t n) {
  std::ofstream f(p, std::ios::binary);
  f.write(static_cast<const char*>(data), std::streamsize(n));
}

inline std::vector<uint8_t> read_file(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

/// True when the oracle interpreter exists and imports gguf + numpy.
inline bool oracle_available() {
  const std::string py = python();
  if (!std::filesystem::exists(py)) return false;
  const std::string cmd = "\"" + py + "\" -c \"import gguf, numpy\" >/dev/null 2>&1";
  return std::system(cmd.c_str()) == 0;
}

/// Runs tests/quant/gguf_oracle.py with `args`; returns the exit status (0 = success).
inline int run_oracle(const std::string& args) {
  std::string cmd;  // appended piecewise (GCC 12 -Wrestrict false positive on chained operator+)
  cmd.append("\"").append(python()).append("\" \"");
  cmd.append((source_dir() / "tests/quant/gguf_oracle.py").string()).append("\" ").append(args);
  return std::system(cmd.c_str());
}

/// Random fp16 bits of a "sane" scale: positive normal in [2^lo, 2^hi), -14 <= lo < hi <= 16.
inline uint16_t random_scale_fp16(std::mt19937_64& rng, int lo = -12, int hi = -2) {
  std::uniform_int_distribution<int> e(lo + 15, hi + 15 - 1), m(0, 1023);
  return uint16_t((e(rng) << 10) | m(rng));
}

/// Gaussian floats N(0, sigma^2).
inline std::vector<float> gaussian(std::mt19937_64& rng, size_t n, float sigma = 1.0f) {
  std::normal_distribution<float> nd(0.0f, sigma);
  std::vector<float> v(n);
  for (auto& x : v) x = nd(rng);
  return v;
}

}  // namespace ds4::test

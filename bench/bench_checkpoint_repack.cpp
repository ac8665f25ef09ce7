// bench/bench_checkpoint_repack.cpp — load-time repack cost of an official DeepSeek-V4 checkpoint
// (engine/official_checkpoint.h): one routed-expert matrix of DeepSeek-V4-Flash's shape (w1/w3:
// 2048 rows x 4096 inputs) per iteration, FP4 (I8 nibbles + E8M0 per 32) -> ggml MXFP4, ModelOpt
// NVFP4 -> NVFP4_S2, and one FP8 row block copy into F8_E4M3_R128 (memcpy per 128 bytes).
// Reported: source bytes read per second (`bytes_per_second`); the full checkpoint's expert bytes
// (141.7 GB I8 + 4.4 GB E8M0) divided by the rate and the core count estimates the load repack.
#include <benchmark/benchmark.h>

#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu/quant_ref.h"

namespace {

constexpr int64_t kRows = 2048, kIn = 4096;

std::vector<uint8_t> random_bytes(size_t n, uint32_t seed, uint8_t mask = 0xFF) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = uint8_t(rng() & mask);
  return v;
}

void BM_Fp4ToMxfp4(benchmark::State& st) {
  const auto w = random_bytes(size_t(kRows * kIn / 2), 1);
  auto s = random_bytes(size_t(kRows * kIn / 32), 2, 0x7F);
  std::vector<uint8_t> out(size_t(kRows * kIn / 32 * 17));
  for (auto _ : st) {
    for (int64_t r = 0; r < kRows; ++r)
      ds4::cpu::repack_ds_fp4_to_mxfp4(w.data() + r * kIn / 2, s.data() + r * kIn / 32, out.data() + r * kIn / 32 * 17, kIn);
    benchmark::DoNotOptimize(out.data());
  }
  st.SetBytesProcessed(int64_t(st.iterations()) * int64_t(w.size() + s.size()));
}

void BM_Nvfp4ToNvfp4S2(benchmark::State& st) {
  const auto w = random_bytes(size_t(kRows * kIn / 2), 3);
  const auto s = random_bytes(size_t(kRows * kIn / 16), 4, 0x77);
  std::vector<uint8_t> out(size_t(kRows * kIn / 64 * 40));
  for (auto _ : st) {
    for (int64_t r = 0; r < kRows; ++r)
      benchmark::DoNotOptimize(ds4::cpu::repack_modelopt_nvfp4_row(w.data() + r * kIn / 2, s.data() + r * kIn / 16, 0.001f,
                                                                   out.data() + r * kIn / 64 * 40, kIn));
  }
  st.SetBytesProcessed(int64_t(st.iterations()) * int64_t(w.size() + s.size()));
}

void BM_Fp8ToF8R128(benchmark::State& st) {
  const auto w = random_bytes(size_t(kRows * kIn), 5, 0x7E);
  const auto s = random_bytes(size_t(kRows / 128 * kIn / 128), 6, 0x7F);
  std::vector<uint8_t> out(size_t(kRows * kIn / 128 * 129));
  for (auto _ : st) {
    for (int64_t r = 0; r < kRows; ++r)
      for (int64_t b = 0; b < kIn / 128; ++b) {
        uint8_t* d = out.data() + (r * kIn / 128 + b) * 129;
        d[0] = s[size_t(r / 128 * kIn / 128 + b)];
        std::memcpy(d + 1, w.data() + r * kIn + b * 128, 128);
      }
    benchmark::DoNotOptimize(out.data());
  }
  st.SetBytesProcessed(int64_t(st.iterations()) * int64_t(w.size() + s.size()));
}

BENCHMARK(BM_Fp4ToMxfp4)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Nvfp4ToNvfp4S2)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Fp8ToF8R128)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();

// bench/bench_cpu_kernels.cpp — Google Benchmark micro-benchmarks of the CPU matrix-vector
// kernels (weights x Q8_1 activations, kernels/cpu/quant_ref.h matvec_q8_1) on the op cases of
// bench/op_cases.h (DeepSeek-V4-Flash expert shapes, batch 1), scalar reference vs each x86 kernel
// family this CPU can run (avx2, avxvnni, avx512vnni: cpu_features.h), one thread and all threads.
//
// Reported per case: GB/s of weight bytes read (1 GB = 1e9 B) and frac_mem_bw = that rate divided
// by the host's streaming-read bandwidth measured at start-up in this binary (all threads, buffer
// much larger than the LLC; kernels/cpu/mem_bandwidth.h).
//  * "cold": each iteration reads the next of many copies of the weight matrix (pool >= 3 x LLC,
//    at least 1 GiB), so weights come from DRAM as for experts streamed from host memory;
//  * "hot": one matrix read again and again (stays in cache): the compute ceiling of the kernel.
//    hot ~ cold, both below the memory bandwidth => the kernel is compute-bound on this machine.
// Cold cases also report stream_GBps, a streaming read of the same pool with the same thread
// count right after the timed loop, and frac_stream = GBps / stream_GBps: on a machine shared with
// other work (CPU contention) this same-conditions ratio is steadier than the start-up figure.
// The activation quantization (once per token, shared by all experts) is not timed.
//
// Environment: DS4_BENCH_POOL_MIB (cold pool size), DS4_BENCH_PROBE_MIB (probe buffer).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "bench/op_cases.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/dot_dispatch.h"
#include "kernels/cpu/mem_bandwidth.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/quant_ref.h"

namespace {

using ds4::GgmlType;
using ds4::bench::OpCase;

double g_read_bps = 0.0;          // measured streaming-read bandwidth (B/s)
// The policy DS4_CPU_KERNELS / DS4_CPU_SCALAR name (read at start, before any case sets its own):
// the mmq/ and mmq_vs_rows/ cases run that family (default auto).
ds4::cpu::SimdMode g_env_mode = ds4::cpu::SimdMode::Auto;
std::vector<uint8_t> g_pool;      // cold pool (copies of one case's weight matrix)
const OpCase* g_pool_case = nullptr;

int64_t env_mib(const char* name, int64_t dflt) {
  const char* e = std::getenv(name);
  if (e == nullptr || *e == '\0') return dflt;
  char* end = nullptr;
  const long long v = std::strtoll(e, &end, 10);
  if (*end != '\0' || v < 1) {
    std::fprintf(stderr, "bench_cpu_kernels: %s: expected a positive integer (MiB), found '%s'\n", name, e);
    std::exit(2);
  }
  return int64_t(v) << 20;
}

int64_t pool_bytes() {
  static const int64_t b = env_mib("DS4_BENCH_POOL_MIB", std::max<int64_t>(int64_t(1) << 30, 3 * ds4::cpu::llc_bytes()));
  return b;
}

/// Fills the pool with copies of one random matrix of case `c`; returns the number of copies.
int64_t fill_pool(const OpCase& c, int64_t mat_bytes) {
  const int64_t copies = std::max<int64_t>(1, pool_bytes() / mat_bytes);
  if (g_pool_case != &c) {
    std::mt19937_64 rng(42);
    const auto w = ds4::bench::random_weights(c.type, c.rows, c.cols, rng, true);
    g_pool.resize(size_t(copies * mat_bytes));
    for (int64_t i = 0; i < copies; ++i) std::memcpy(g_pool.data() + i * mat_bytes, w.data(), size_t(mat_bytes));
    g_pool_case = &c;
  }
  return copies;
}

void run_case(benchmark::State& state, const OpCase& c, ds4::cpu::SimdMode mode, int threads, bool cold) {
  const int64_t mat_bytes = ds4::cpu::row_bytes(c.type, c.cols) * c.rows;
  const int64_t copies = cold ? fill_pool(c, mat_bytes) : 1;
  std::vector<uint8_t> hot;
  if (!cold) {
    std::mt19937_64 rng(42);
    hot = ds4::bench::random_weights(c.type, c.rows, c.cols, rng, true);
  }
  std::mt19937_64 rng(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(size_t(c.cols * c.batch));
  for (auto& v : x) v = nd(rng);
  std::vector<uint8_t> act(size_t(c.cols / 32 * 36 * c.batch));
  for (int64_t b = 0; b < c.batch; ++b)
    ds4::cpu::quantize_row_q8_1(x.data() + b * c.cols, act.data() + b * (c.cols / 32 * 36), c.cols);
  std::vector<float> out(size_t(c.rows * c.batch));

  ds4::cpu::set_simd_mode(mode);
  int64_t i = 0;
  for (auto _ : state) {
    const uint8_t* w = cold ? g_pool.data() + (i % copies) * mat_bytes : hot.data();
    for (int64_t b = 0; b < c.batch; ++b)
      ds4::cpu::matvec_q8_1(c.type, w, c.rows, c.cols, act.data() + b * (c.cols / 32 * 36), out.data() + b * c.rows,
                            threads);
    benchmark::DoNotOptimize(out.data());
    ++i;
  }
  ds4::cpu::set_simd_mode(ds4::cpu::SimdMode::Auto);
  using benchmark::Counter;
  if (cold) {
    // Same-conditions reference: one streaming read of the whole pool right after the timed loop,
    // with the same thread count (other processes load the cores as they did during the loop).
    uint64_t sink = 0;
    const int64_t pool = copies * mat_bytes;
    const double sec = ds4::cpu::timed_stream_read(g_pool.data(), pool, threads, &sink);
    benchmark::DoNotOptimize(sink);
    const double stream_bps = double(pool) / sec;
    state.counters["stream_GBps"] = stream_bps * 1e-9;
    state.counters["frac_stream"] = Counter(double(mat_bytes) / stream_bps, Counter::kIsIterationInvariantRate);
  }
  state.counters["GBps"] = Counter(double(mat_bytes) * 1e-9, Counter::kIsIterationInvariantRate);
  state.counters["frac_mem_bw"] = Counter(double(mat_bytes) / g_read_bps, Counter::kIsIterationInvariantRate);
  state.counters["weight_MB"] = double(mat_bytes) * 1e-6;
}


/// Random valid 256-element blocks of `type` (Q2_K, IQ2_XXS, IQ2_XS, IQ1_S, IQ1_M; layouts in
/// kernels/quant/blocks.h) in `w`: every byte random (all grid indices, signs and sub-scales are
/// full-width fields, so any bits are valid), then the fp16 super-scales set to 1/16 (Q2_K: d and
/// dmin; IQ1_M: its fp16 bits spread over the scales' top nibbles) so every value is finite.
/// Written directly: the IQ encoders would take tens of seconds for a 1024 x 4096 matrix.
void fill_superblocks(GgmlType type, std::vector<uint8_t>& w, std::mt19937_64& rng) {
  for (auto& b : w) b = uint8_t(rng());
  const uint16_t d = 0x2C00;  // fp16 1/16
  const size_t bs = size_t(ds4::cpu::row_bytes(type, 256));
  auto put16 = [&](size_t o, uint16_t v) { std::memcpy(&w[o], &v, 2); };
  for (size_t o = 0; o + bs <= w.size(); o += bs) {
    if (type == GgmlType::Q2_K) {
      put16(o + 80, d), put16(o + 82, d);
    } else if (type == GgmlType::IQ1_M) {
      for (int k = 0; k < 4; ++k) {
        uint16_t s;
        std::memcpy(&s, &w[o + 48 + 2 * size_t(k)], 2);
        put16(o + 48 + 2 * size_t(k), uint16_t((s & 0x0FFF) | (((d >> (4 * k)) & 0xF) << 12)));
      }
    } else {
      put16(o, d);
    }
  }
}

/// F32-activation path (issue 19): `rows` x `cols` weights of `type` (F32 / F16 / BF16 / Q8_0 /
/// MXFP4 / F8_E4M3_R128 random finite values; Q2_K / IQ2_XXS / IQ2_XS / IQ1_S / IQ1_M random valid
/// blocks, fill_superblocks; NVFP4 / NVFP4_S2 random bytes, s2 = 1) times `ntok` FP32 tokens, one thread, hot (one matrix reused). fused = matmul_rows
/// (in-place decode + dot_f32 order, dot_f32_wide.cpp) on the family `mode` picks (Auto, or
/// Avx2 for the fused_avx2 cases); decode = the pre-issue-19 way, each row dequantize_row'd to a
/// buffer and then dot_f32 (same result bits). GBps = weight bytes / time.
void run_f32act(benchmark::State& state, GgmlType type, int64_t rows, int64_t cols, int64_t ntok, bool fused,
                ds4::cpu::SimdMode mode = ds4::cpu::SimdMode::Auto) {
  ds4::cpu::set_simd_mode(mode);
  const int64_t rb = int64_t(ds4::cpu::row_bytes(type, cols));
  std::vector<uint8_t> w(size_t(rb * rows));
  std::mt19937_64 rng(7);
  std::vector<float> tmp(static_cast<size_t>(cols));
  std::normal_distribution<float> nd(0, 1);
  if (type == GgmlType::F8_E4M3_R128) {  // random E4M3 codes (no NaN), block scale 2^0
    std::uniform_int_distribution<int> byte(0, 0x7E);
    for (size_t o = 0; o < w.size(); o += 129) {
      w[o] = 127;
      for (size_t j = 1; j <= 128; ++j) w[o + j] = uint8_t(byte(rng) | (byte(rng) & 1) << 7);
    }
  } else if (ds4::ggml_type_geometry(uint32_t(type))->block_elems == 256) {
    fill_superblocks(type, w, rng);
  } else if (type == GgmlType::NVFP4 || type == GgmlType::NVFP4_S2) {  // any bytes are valid; s2 = 1
    for (auto& b : w) b = uint8_t(rng());
    if (type == GgmlType::NVFP4_S2)
      for (size_t o = 0; o < w.size(); o += 40) {
        const float one = 1.0f;
        std::memcpy(&w[o], &one, 4);
      }
  } else {
    for (int64_t r = 0; r < rows; ++r) {
      for (auto& v : tmp) v = nd(rng);
      ds4::cpu::quantize_row(type, tmp.data(), w.data() + r * rb, cols);
    }
  }
  std::vector<float> x(static_cast<size_t>(ntok * cols)), y(static_cast<size_t>(ntok * rows)), dec(static_cast<size_t>(cols));
  for (auto& v : x) v = nd(rng);
  const ds4::cpu::WRows wr{type, w.data(), cols, rows, uint64_t(rb)};
  for (auto _ : state) {
    if (fused) {
      ds4::cpu::matmul_rows(wr, ds4::cpu::F32Rows{x.data(), cols}, nullptr, ntok, false,
                            ds4::cpu::F32Rows{y.data(), rows}, 0, rows);
    } else {
      for (int64_t r = 0; r < rows; ++r) {
        ds4::cpu::dequantize_row(type, wr.row(r), dec.data(), cols);
        for (int64_t t = 0; t < ntok; ++t) y[size_t(t * rows + r)] = ds4::cpu::dot_f32(dec.data(), x.data() + t * cols, cols);
      }
    }
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  ds4::cpu::set_simd_mode(ds4::cpu::SimdMode::Auto);
  state.counters["GBps"] = benchmark::Counter(double(rb * rows) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

/// Multi-token Q8_1 path (issue 19 prefill): `rows` x `cols` weights of `type` (quantize_row of
/// random normal values) times `ntok` tokens whose Q8_1 codes and per-token sums are made once
/// outside the loop; each iteration is matmul_rows on the multi-token kernel (decode of every row
/// included, as in a prefill matmul), one thread, hot. ns_per_row_token = time / (rows * ntok).
/// `path`: 0 = what matmul_rows picks (the mmq/ cases: skipped unless that is the multi-token
/// kernel), 1 = the multi-token kernel, 2 = the per-token kernels, whatever ntok.
void run_mmq(benchmark::State& state, GgmlType type, int64_t rows, int64_t cols, int64_t ntok, int path = 0) {
  ds4::cpu::set_simd_mode(g_env_mode);
  const int64_t rb = int64_t(ds4::cpu::row_bytes(type, cols));
  std::vector<uint8_t> w(size_t(rb * rows));
  std::mt19937_64 rng(7);
  std::normal_distribution<float> nd(0, 1);
  std::vector<float> tmp(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    for (auto& v : tmp) v = nd(rng);
    ds4::cpu::quantize_row(type, tmp.data(), w.data() + r * rb, cols);
  }
  std::vector<float> x(static_cast<size_t>(ntok * cols)), y(static_cast<size_t>(ntok * rows));
  for (auto& v : x) v = nd(rng);
  ds4::cpu::MatmulScratch s;
  ds4::cpu::matmul_quantize_prepare(ntok, cols, true, s);
  ds4::cpu::matmul_quantize_rows(ds4::cpu::F32Rows{x.data(), cols}, cols, s, 0, ntok);
  const ds4::cpu::MmqTokens tok = ds4::cpu::matmul_tokens(s, cols);
  if (path == 0 && !ds4::cpu::matmul_uses_mmq(type, ntok)) {
    state.SkipWithError("no multi-token kernel for this type / token count on this CPU");
    return;
  }
  const ds4::cpu::WRows wr{type, w.data(), cols, rows, uint64_t(rb)};
  if (!ds4::cpu::matmul_rows_q8_path(wr, s.xq.data(), ntok, ds4::cpu::F32Rows{y.data(), rows}, 0, rows, &tok, path != 2)) {
    state.SkipWithError("no multi-token kernel for this type on this CPU");
    return;
  }
  for (auto _ : state) {
    ds4::cpu::matmul_rows_q8_path(wr, s.xq.data(), ntok, ds4::cpu::F32Rows{y.data(), rows}, 0, rows, &tok, path != 2);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  state.counters["ns_per_row_token"] =
      benchmark::Counter(double(rows * ntok) * 1e-9, benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}

}  // namespace

int main(int argc, char** argv) {
  bool list_only = false;  // --benchmark_list_tests: names only, no 2 GB probe first
  for (int i = 1; i < argc; ++i)
    list_only = list_only || std::strncmp(argv[i], "--benchmark_list_tests", 22) == 0;
  g_env_mode = ds4::cpu::simd_mode();
  benchmark::Initialize(&argc, argv);
  const int hw = int(std::max(1u, std::thread::hardware_concurrency()));
  ds4::cpu::MemProbeOptions po;
  po.bytes = env_mib("DS4_BENCH_PROBE_MIB", 0);
  if (list_only) po.bytes = int64_t(1) << 20;  // the names do not depend on the probe
  po.threads = hw;
  auto probe = ds4::cpu::probe_memory_bandwidth(po);
  if (!probe) {
    std::fprintf(stderr, "bench_cpu_kernels: %s\n", probe.error().message.c_str());
    return 1;
  }
  g_read_bps = probe->read_bps;
  char buf[256];
  std::snprintf(buf, sizeof buf, "%.2f GB/s read, %.2f GB/s memcpy (%d threads, %lld MiB buffer, LLC %lld MiB)",
                probe->read_bps * 1e-9, probe->copy_bps * 1e-9, probe->threads, (long long)(probe->bytes >> 20),
                (long long)(probe->llc_bytes >> 20));
  benchmark::AddCustomContext("host_memory_bandwidth", buf);
  benchmark::AddCustomContext("cold_pool_MiB", std::to_string(pool_bytes() >> 20));
  benchmark::AddCustomContext("avx2_usable", ds4::cpu::cpu_avx2_usable() ? "yes" : "no");
  benchmark::AddCustomContext("auto_kernels", ds4::cpu::dot_backend_name(ds4::cpu::selected_backend()));
  std::fprintf(stderr, "host memory bandwidth: %s\n", buf);

  static const std::vector<OpCase> cases = ds4::bench::bench_op_cases();
  for (const OpCase& c : cases) {
    const std::string base = std::string(ds4::ggml_type_name(uint32_t(c.type))) + "/" + c.tag + "/b" +
                             std::to_string(c.batch);
    struct Variant {
      ds4::cpu::SimdMode mode;
      const char* name;
      int threads;
      bool cold;
    };
    std::vector<Variant> vs = {{ds4::cpu::SimdMode::ForceScalar, "scalar", 1, true},
                               {ds4::cpu::SimdMode::ForceScalar, "scalar", hw, true}};
    const struct {
      ds4::cpu::DotBackend backend;
      ds4::cpu::SimdMode mode;
      const char* name;
    } families[] = {{ds4::cpu::DotBackend::Avx2, ds4::cpu::SimdMode::Avx2, "avx2"},
                    {ds4::cpu::DotBackend::AvxVnni, ds4::cpu::SimdMode::AvxVnni, "avxvnni"},
                    {ds4::cpu::DotBackend::Avx512Vnni, ds4::cpu::SimdMode::Avx512Vnni, "avx512vnni"}};
    for (const auto& f : families) {
      if (!ds4::cpu::backend_usable(f.backend)) continue;
      vs.push_back({f.mode, f.name, 1, true});
      vs.push_back({f.mode, f.name, hw, true});
      vs.push_back({f.mode, f.name, 1, false});
      vs.push_back({f.mode, f.name, hw, false});
    }
    for (const Variant& v : vs) {
      const std::string name = base + "/" + v.name + "/t" + std::to_string(v.threads) + (v.cold ? "/cold" : "/hot");
      benchmark::RegisterBenchmark(name.c_str(), [&c, v](benchmark::State& st) { run_case(st, c, v.mode, v.threads, v.cold); })
          ->UseRealTime()
          ->Unit(benchmark::kMillisecond);
    }
  }
  for (GgmlType type : {GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0, GgmlType::MXFP4, GgmlType::F8_E4M3_R128,
                        GgmlType::Q2_K, GgmlType::IQ2_XXS, GgmlType::IQ2_XS, GgmlType::IQ1_S, GgmlType::IQ1_M,
                        GgmlType::NVFP4, GgmlType::NVFP4_S2})
    for (int64_t ntok : {1, 4})
      for (bool fused : {false, true}) {
        const std::string name = "f32act/" + std::string(ds4::ggml_type_name(uint32_t(type))) + "/1024x4096/n" +
                                 std::to_string(ntok) + (fused ? "/fused" : "/decode") + "/t1/hot";
        benchmark::RegisterBenchmark(name.c_str(), [=](benchmark::State& st) { run_f32act(st, type, 1024, 4096, ntok, fused); })
            ->UseRealTime()
            ->Unit(benchmark::kMillisecond);
        // The AVX2 family's fused kernels on a CPU whose Auto choice is a wider one.
        if (fused && ds4::cpu::backend_usable(ds4::cpu::DotBackend::Avx512Vnni)) {
          const std::string n2 = "f32act/" + std::string(ds4::ggml_type_name(uint32_t(type))) + "/1024x4096/n" +
                                 std::to_string(ntok) + "/fused_avx2/t1/hot";
          benchmark::RegisterBenchmark(n2.c_str(), [=](benchmark::State& st) {
            run_f32act(st, type, 1024, 4096, ntok, true, ds4::cpu::SimdMode::Avx2);
          })->UseRealTime()->Unit(benchmark::kMillisecond);
        }
      }
  for (GgmlType type : {GgmlType::Q8_0, GgmlType::IQ2_XXS, GgmlType::Q2_K})
    for (int64_t cols : {256, 2048, 4096}) {
      const std::string name = "mmq/" + std::string(ds4::ggml_type_name(uint32_t(type))) + "/512x" + std::to_string(cols) +
                               "/n64/t1/hot";
      benchmark::RegisterBenchmark(name.c_str(), [=](benchmark::State& st) { run_mmq(st, type, 512, cols, 64); })
          ->UseRealTime()
          ->Unit(benchmark::kMicrosecond);
    }
  // The crossover of mmq_min_tokens: the multi-token kernel against the per-token kernels at a few
  // token counts (512 x 2048 hot, one thread; compare cpu_time of mmq and rows at equal n).
  for (GgmlType type : {GgmlType::Q8_0, GgmlType::MXFP4, GgmlType::Q2_K, GgmlType::IQ2_XXS, GgmlType::IQ2_XS,
                        GgmlType::IQ1_S, GgmlType::IQ1_M})
    for (int64_t ntok : {2, 4, 8, 16, 32})
      for (bool mmq : {true, false}) {
        const std::string name = "mmq_vs_rows/" + std::string(ds4::ggml_type_name(uint32_t(type))) + "/512x2048/n" +
                                 std::to_string(ntok) + (mmq ? "/mmq" : "/rows") + "/t1/hot";
        benchmark::RegisterBenchmark(name.c_str(), [=](benchmark::State& st) { run_mmq(st, type, 512, 2048, ntok, mmq ? 1 : 2); })
            ->UseRealTime()
            ->Unit(benchmark::kMicrosecond);
      }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

// placement/cpu_rate_probe.cpp — see cpu_rate_probe.h.
#include "placement/cpu_rate_probe.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>

#include "kernels/cpu/mem_bandwidth.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/quant_ref.h"
#include "kernels/device.h"
#include "kernels/quant/ggml_type.h"

namespace ds4::placement {
namespace {

using Clock = std::chrono::steady_clock;

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};

/// Wall seconds of `passes` matmuls over the rows of `w`, split over `threads` threads started
/// once (thread t takes 16-row blocks t, t + T, ...; no barrier between passes, so the figure is
/// the kernels' throughput: the engine's dispatch costs are fitted separately), activations
/// quantized once first when `q8`.
double run_passes(const cpu::WRows& w, const float* x, bool q8, float* y, int threads, int passes) {
  const auto t0 = Clock::now();
  cpu::MatmulScratch scratch;
  const cpu::F32Rows X{const_cast<float*>(x), w.in}, Y{y, w.out};
  if (q8) cpu::matmul_quantize(X, 1, w.in, scratch);
  const uint8_t* xq = scratch.xq.data();
  const int64_t blocks = (w.out + 15) / 16;
  auto body = [&](int t) {
    for (int p = 0; p < passes; ++p)
      for (int64_t b = t; b < blocks; b += threads)
        cpu::matmul_rows(w, X, xq, 1, q8, Y, b * 16, std::min(w.out, b * 16 + 16));
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(body, t);
  body(0);
  for (auto& th : pool) th.join();
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

Result<CpuRates> probe_cpu_matvec_rates(const CpuRateProbeOptions& o) {
  if (o.threads < 1 || o.threads > 1024) return Error{"rate probe: threads must be in 1..1024"};
  if (o.cols < 256 || o.cols % 256 != 0) return Error{"rate probe: cols must be a positive multiple of 256"};
  if (o.hot_bytes < (int64_t(64) << 10) || o.cold_bytes < 0 || o.repeats < 1)
    return Error{"rate probe: hot_bytes >= 64 KiB, cold_bytes >= 0 and repeats >= 1 expected"};
  const auto t_start = Clock::now();
  CpuRates out;
  std::vector<float> x(static_cast<size_t>(o.cols)), row(static_cast<size_t>(o.cols));
  for (int64_t i = 0; i < o.cols; ++i) x[size_t(i)] = std::sin(0.37f * float(i)) * 0.5f;
  const size_t cold = size_t(o.cold_bytes) & ~size_t(4095);
  std::unique_ptr<uint8_t, FreeDeleter> cold_buf;
  if (cold > 0) {
    cold_buf.reset(static_cast<uint8_t*>(std::aligned_alloc(4096, cold)));
    if (!cold_buf) return Error{"rate probe: cannot allocate " + std::to_string(cold >> 20) + " MiB"};
  }
  for (const std::string& name : o.types) {
    GgmlType type{};
    bool known = false;
    for (uint32_t id = 0; id < 64 && !known; ++id)
      if (ggml_type_name(id) == name) { type = GgmlType(id); known = true; }
    if (!known || !cpu::can_quantize(type) || !cpu::can_dequantize(type)) continue;
    const bool q8 = o.q8 && dev::uses_q8_1(type);
    const int64_t rb = cpu::row_bytes(type, o.cols);
    constexpr int64_t kDistinct = 16;
    std::vector<uint8_t> q(size_t(rb * kDistinct));
    for (int64_t r = 0; r < kDistinct; ++r) {
      for (int64_t i = 0; i < o.cols; ++i) row[size_t(i)] = std::cos(0.011f * float(i * (r + 3))) * 0.02f;
      cpu::quantize_row(type, row.data(), q.data() + r * rb, o.cols);
    }
    auto fill = [&](uint8_t* dst, int64_t rows) {
      for (int64_t r = 0; r < rows; ++r) std::memcpy(dst + r * rb, q.data() + (r % kDistinct) * rb, size_t(rb));
    };
    // Hot: one matrix passed until min_hot_seconds, best pass rate of `repeats` such runs.
    {
      const int64_t rows = std::max<int64_t>(16, o.hot_bytes / rb);
      std::vector<uint8_t> w(size_t(rows * rb));
      fill(w.data(), rows);
      std::vector<float> y(static_cast<size_t>(rows));
      const cpu::WRows wr{type, w.data(), o.cols, rows, uint64_t(rb)};
      // Warm the cache and size the runs: passes such that one run takes about min_hot_seconds.
      const double t1 = run_passes(wr, x.data(), q8, y.data(), o.threads, 2) / 2;
      const int passes = int(std::clamp(o.min_hot_seconds / std::max(t1, 1e-9), 2.0, 100000.0));
      double best = 0;
      for (int rep = 0; rep < 2 * o.repeats; ++rep)
        best = std::max(best, double(rows * rb) * passes / run_passes(wr, x.data(), q8, y.data(), o.threads, passes) / 1e9);
      if (!std::isfinite(y[0])) return Error{"rate probe: non-finite matmul output for " + name};
      out.hot_gbps[name] = best;
    }
    if (cold > 0) {
      const int64_t rows = int64_t(cold) / rb;
      fill(cold_buf.get(), rows);
      std::vector<float> y(static_cast<size_t>(rows));
      const cpu::WRows wr{type, cold_buf.get(), o.cols, rows, uint64_t(rb)};
      double best = 0;
      for (int rep = 0; rep < o.repeats; ++rep)
        best = std::max(best, double(rows * rb) / run_passes(wr, x.data(), q8, y.data(), o.threads, 1) / 1e9);
      if (!std::isfinite(y[size_t(rows - 1)])) return Error{"rate probe: non-finite matmul output for " + name};
      out.cold_gbps[name] = best;
    }
  }
  for (auto* m : {&out.hot_gbps, &out.cold_gbps}) {
    double slowest = 0;
    for (const auto& [k, v] : *m) slowest = slowest == 0 ? v : std::min(slowest, v);
    if (slowest > 0) (*m)["default"] = slowest;
  }
  out.seconds = std::chrono::duration<double>(Clock::now() - t_start).count();
  return out;
}

Result<std::vector<ReusePoint>> probe_reuse_curve(int threads, int64_t from_bytes, int64_t to_bytes,
                                                  double min_seconds, int sweeps) {
  if (threads < 1 || from_bytes < (int64_t(1) << 20) || to_bytes <= from_bytes || sweeps < 1)
    return Error{"reuse curve probe: expected threads >= 1, from >= 1 MiB, to > from and sweeps >= 1, found " +
                 std::to_string(threads) + ", " + std::to_string(from_bytes) + ", " + std::to_string(to_bytes) + ", " + std::to_string(sweeps)};
  const size_t total = size_t(to_bytes + 4095) & ~size_t(4095);
  std::unique_ptr<uint8_t, FreeDeleter> buf(static_cast<uint8_t*>(std::aligned_alloc(4096, total)));
  if (!buf) return Error{"reuse curve probe: cannot allocate " + std::to_string(total >> 20) + " MiB"};
  for (size_t i = 0; i < total; i += 64) buf.get()[i] = uint8_t(i >> 6);  // touch every line
  std::vector<int64_t> sizes;
  for (int k = 0;; ++k) {
    const int64_t s = int64_t(double(from_bytes) * std::pow(2.0, 0.5 * k)) & ~int64_t(4095);
    if (s >= to_bytes) break;
    sizes.push_back(s);
  }
  sizes.push_back(int64_t(total));
  std::vector<ReusePoint> out;
  for (const int64_t s : sizes) out.push_back({double(s), 0.0});
  uint64_t sink = 0;
  for (int sweep = 0; sweep < sweeps; ++sweep)
    for (ReusePoint& pt : out) {
      const int64_t s = int64_t(pt.bytes);
      cpu::timed_stream_read(buf.get(), s, threads, &sink);  // warm-up: bring the buffer in
      double elapsed = 0;
      for (int pass = 0; pass < 3 || elapsed < min_seconds; ++pass) {
        const double t = cpu::timed_stream_read(buf.get(), s, threads, &sink);
        elapsed += t;
        pt.gbps = std::max(pt.gbps, double(s) / std::max(t, 1e-9) / 1e9);
        if (pass >= 1000) break;
      }
    }
  if (sink == 0x5eed5eed5eed5eedull) out.back().gbps *= 1.0;  // keep the checksum observable
  return out;
}

}  // namespace ds4::placement

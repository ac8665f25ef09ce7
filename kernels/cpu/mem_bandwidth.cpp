// kernels/cpu/mem_bandwidth.cpp — multi-threaded streaming-read and memcpy bandwidth probe.
#include "kernels/cpu/mem_bandwidth.h"

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/row_pool.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>

namespace ds4::cpu {

namespace {

using Clock = std::chrono::steady_clock;

/// Work unit of the probe: 4 MiB (threads claim units dynamically, kernels/cpu/row_pool.h).
constexpr int64_t kChunkWords = int64_t(1) << 19;

/// Sum of 64-bit words of [p, p+n) with 8 independent accumulators (keeps many loads in flight;
/// the compiler vectorizes it with the baseline SSE2, far above DRAM speed per core).
uint64_t sum_words(const uint64_t* p, int64_t n) {
  uint64_t a[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) a[k] += p[i + k];
  for (; i < n; ++i) a[0] += p[i];
  uint64_t s = 0;
  for (uint64_t v : a) s ^= v;
  return s;
}

}  // namespace

namespace avx2 {
uint64_t sum_lines(const void* p, int64_t bytes);  // mem_read_avx2.cpp (-mavx2)
}  // namespace avx2

namespace {

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};

}  // namespace

int64_t llc_bytes() {
  long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
  if (l3 > 0) return l3;
  long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
  return l2 > 0 ? l2 : 0;
}

int64_t default_probe_bytes() {
  const int64_t gib = int64_t(1) << 30;
  return std::min<int64_t>(4 * gib, std::max<int64_t>(gib, 4 * llc_bytes()));
}

double timed_stream_read(const void* p, int64_t bytes, int threads, uint64_t* sink) {
  const int64_t words = bytes / 8;
  std::atomic<uint64_t> acc{0};
  // The AVX2 line reader when the CPU has it (the faster of the two readers measured here).
  const bool wide = cpu_avx2_usable();
  const auto t0 = Clock::now();
  parallel_chunks(words, kChunkWords, threads, [&](int64_t w0, int64_t w1) {
    const uint64_t* q = static_cast<const uint64_t*>(p) + w0;
    acc.fetch_xor(wide ? avx2::sum_lines(q, 8 * (w1 - w0)) : sum_words(q, w1 - w0), std::memory_order_relaxed);
  });
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  *sink ^= acc.load();
  return s;
}

Result<MemProbeResult> probe_memory_bandwidth(const MemProbeOptions& opts) {
  MemProbeResult r;
  r.bytes = opts.bytes > 0 ? opts.bytes : default_probe_bytes();
  r.threads = opts.threads > 0 ? opts.threads : int(std::max(1u, std::thread::hardware_concurrency()));
  r.llc_bytes = llc_bytes();
  if (opts.bytes != 0 && opts.bytes < (int64_t(1) << 20))
    return Error("memory probe: buffer size must be >= 1 MiB, found " + std::to_string(opts.bytes) + " bytes");
  if (opts.threads < 0) return Error("memory probe: threads must be >= 0, found " + std::to_string(opts.threads));
  if (opts.repeats < 1) return Error("memory probe: repeats must be >= 1, found " + std::to_string(opts.repeats));
  r.bytes = r.bytes / 128 * 128;
  std::unique_ptr<void, FreeDeleter> buf(std::aligned_alloc(64, size_t(r.bytes)));
  if (!buf) return Error("memory probe: cannot allocate " + std::to_string(r.bytes >> 20) + " MiB");
  auto* b = static_cast<uint8_t*>(buf.get());
  // First touch from the worker threads (pages land near the threads that read them).
  parallel_chunks(r.bytes, 8 * kChunkWords, r.threads,
                  [&](int64_t o0, int64_t o1) { std::memset(b + o0, int(o0 >> 20) | 1, size_t(o1 - o0)); });
  uint64_t sink = 0;
  double best_read = 1e30, best_copy = 1e30;
  for (int i = 0; i < opts.repeats; ++i) best_read = std::min(best_read, timed_stream_read(b, r.bytes, r.threads, &sink));
  const int64_t half = r.bytes / 2;
  for (int i = 0; i < opts.repeats; ++i) {
    uint8_t* src = (i % 2) ? b + half : b;
    uint8_t* dst = (i % 2) ? b : b + half;
    const auto t0 = Clock::now();
    parallel_chunks(half, 8 * kChunkWords, r.threads,
                    [&](int64_t o0, int64_t o1) { std::memcpy(dst + o0, src + o0, size_t(o1 - o0)); });
    best_copy = std::min(best_copy, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  r.read_bps = double(r.bytes) / best_read;
  r.copy_bps = double(half) / best_copy;
  if (sink == 0x5eed) r.read_bps += 0.0;  // keeps `sink` observable
  return r;
}

}  // namespace ds4::cpu

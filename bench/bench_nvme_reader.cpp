// bench/bench_nvme_reader.cpp — NvmeReader throughput (GB/s) on expert-sized random reads, next
// to a plain sequential read of the same file measured in the same run (dd-style: 4 MiB read()
// calls, once buffered and once with O_DIRECT), and the ratio reader / sequential O_DIRECT.
//
// File: $DS4_BENCH_FILE (e.g. a real GGUF on the NVMe under test), else a 1 GiB file written to
// $DS4_BENCH_DIR (default /tmp). Page cache: buffered numbers of a file that is cached measure
// memory, not the drive; O_DIRECT numbers bypass the cache. Counters: GBps (this benchmark),
// seq_direct_GBps / seq_buffered_GBps (baselines), ratio_vs_seq_direct.
#include <benchmark/benchmark.h>

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "staging/nvme_reader.h"

namespace {

constexpr uint64_t kMiB = uint64_t(1) << 20;

const std::string& bench_file() {
  static std::string path = [] {
    if (const char* f = std::getenv("DS4_BENCH_FILE"); f && *f) return std::string(f);
    const char* d = std::getenv("DS4_BENCH_DIR");
    std::string p = std::string(d && *d ? d : "/tmp") + "/ds4_bench_nvme_reader.bin";
    const uint64_t size = 1024 * kMiB;
    const int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) {
      std::perror(p.c_str());
      std::exit(1);
    }
    std::vector<uint8_t> buf(4 * kMiB);
    std::mt19937_64 rng(1);
    for (uint64_t o = 0; o < size; o += buf.size()) {
      for (size_t i = 0; i < buf.size(); i += 8) {
        const uint64_t v = rng();
        std::memcpy(buf.data() + i, &v, 8);
      }
      if (::write(fd, buf.data(), buf.size()) != static_cast<ssize_t>(buf.size())) std::exit(1);
    }
    ::fsync(fd);
    ::close(fd);
    return p;
  }();
  return path;
}

uint64_t file_size() {
  const int fd = ::open(bench_file().c_str(), O_RDONLY);
  const off_t s = ::lseek(fd, 0, SEEK_END);
  ::close(fd);
  return static_cast<uint64_t>(s);
}

/// dd-style sequential read of the whole file in 4 MiB calls; returns GB/s (1e9 bytes/s).
double sequential_gbps(bool direct) {
  const int fd = ::open(bench_file().c_str(), O_RDONLY | (direct ? O_DIRECT : 0));
  if (fd < 0) return 0.0;
  void* buf = std::aligned_alloc(4096, 4 * kMiB);
  uint64_t total = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (;;) {
    const ssize_t r = ::read(fd, buf, 4 * kMiB);
    if (r <= 0) break;
    total += static_cast<uint64_t>(r);
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::free(buf);
  ::close(fd);
  return s > 0 ? static_cast<double>(total) / s / 1e9 : 0.0;
}

struct Baseline {
  double direct = 0, buffered = 0;
};
const Baseline& baseline() {
  static Baseline b = [] {
    Baseline x;
    x.buffered = sequential_gbps(false);
    x.direct = sequential_gbps(true);
    std::fprintf(stderr, "sequential read of %s: O_DIRECT %.2f GB/s, buffered %.2f GB/s\n", bench_file().c_str(),
                 x.direct, x.buffered);
    return x;
  }();
  return b;
}

void BM_SequentialRead(benchmark::State& st) {
  const bool direct = st.range(0) != 0;
  double gbps = 0;
  for (auto _ : st) gbps = sequential_gbps(direct);
  st.counters["GBps"] = gbps;
  st.SetLabel(direct ? "dd O_DIRECT 4MiB" : "dd buffered 4MiB");
}
BENCHMARK(BM_SequentialRead)->Arg(1)->Arg(0)->Iterations(1)->Unit(benchmark::kMillisecond);

/// Args: backend (0 io_uring+fixed, 1 plain io_uring, 2 pread pool), request MiB, queue depth.
void BM_NvmeReader(benchmark::State& st) {
  const Baseline& base = baseline();
  ds4::staging::ReaderOptions o;
  o.disable_fixed_buffers = st.range(0) == 1;
  o.disable_uring = st.range(0) == 2;
  o.queue_depth = static_cast<int>(st.range(2));
  o.buffer_bytes = 2 * kMiB;
  auto rd = ds4::staging::NvmeReader::open({bench_file()}, o);
  if (!rd.ok()) {
    st.SkipWithError(rd.error().message.c_str());
    return;
  }
  const uint64_t req = static_cast<uint64_t>(st.range(1)) * kMiB + 12345;  // odd size and offset
  const uint64_t size = file_size();
  const int n_req = static_cast<int>(std::min<uint64_t>(256, size / req));
  std::mt19937_64 rng(7);
  std::vector<ds4::staging::ReadRequest> reqs;
  for (int i = 0; i < n_req; ++i) reqs.push_back({0, rng() % (size - req), req});
  uint64_t sink = 0, bytes = 0;
  double secs = 0;
  for (auto _ : st) {
    const auto t0 = std::chrono::steady_clock::now();
    auto r = (*rd)->read(reqs, [&](size_t, uint64_t, const uint8_t* d, uint64_t n) { sink += d[n - 1]; });
    secs += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!r.ok()) {
      st.SkipWithError(r.error().message.c_str());
      return;
    }
    bytes += req * static_cast<uint64_t>(n_req);
  }
  benchmark::DoNotOptimize(sink);
  const double gbps = secs > 0 ? static_cast<double>(bytes) / secs / 1e9 : 0.0;
  const auto c = (*rd)->counters();
  st.counters["GBps"] = gbps;
  st.counters["seq_direct_GBps"] = base.direct;
  st.counters["seq_buffered_GBps"] = base.buffered;
  st.counters["ratio_vs_seq_direct"] = base.direct > 0 ? gbps / base.direct : 0.0;
  st.counters["p99_us"] = c.lat_p99_us;
  st.counters["direct_frac"] = c.reads ? static_cast<double>(c.direct_reads) / static_cast<double>(c.reads) : 0.0;
  st.SetLabel(c.backend);
}
BENCHMARK(BM_NvmeReader)
    ->ArgNames({"backend", "req_MiB", "qd"})
    ->Args({0, 3, 32})
    ->Args({1, 3, 32})
    ->Args({2, 3, 32})
    ->Args({0, 3, 4})
    ->Args({0, 1, 32})
    ->Iterations(3)
    ->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();

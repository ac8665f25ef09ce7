// bench/bench_kernels_cuda.cpp — Google Benchmark of the CUDA quantized kernels on the
// DeepSeek-V4-Flash routed-expert shapes (dsv4-architecture.md: hidden 4096, expert FFN 2048):
// gate/up W [4096 in, 2048 out] and down W [2048 in, 4096 out], batch 1 (MMVQ) and 512 (MMQ),
// every weight type. Reported: GB/s of weight bytes read (kernel time from CUDA events) and that
// figure as a fraction of the device's measured copy bandwidth (cudaMemcpy device-to-device,
// read + write bytes). Expert matrices rotate over a ring larger than 4x the L2 cache so weights
// come from device memory, as with distinct experts. Without a CUDA device (or without the CUDA
// backend) it prints a line saying so and exits 0.
#include <benchmark/benchmark.h>

#include <cstdio>

#if defined(DS4_HAVE_CUDA)

#include <cuda_runtime_api.h>

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/quant_ref.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/quant_matmul.h"

namespace ds4::bench {
namespace {

double g_copy_gbps = 0.0;  // measured device copy bandwidth, GB/s (1e9 bytes)

/// Device-to-device copy bandwidth: 1 GiB copied 10 times, (read + write) bytes / time.
double measure_copy_gbps() {
  const size_t bytes = size_t(1) << 30;
  void *a = nullptr, *b = nullptr;
  DS4_CUDA_CHECK(cudaMalloc(&a, bytes));
  DS4_CUDA_CHECK(cudaMalloc(&b, bytes));
  DS4_CUDA_CHECK(cudaMemset(a, 1, bytes));
  DS4_CUDA_CHECK(cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice));  // warm-up
  cudaEvent_t e0, e1;
  DS4_CUDA_CHECK(cudaEventCreate(&e0));
  DS4_CUDA_CHECK(cudaEventCreate(&e1));
  const int reps = 10;
  DS4_CUDA_CHECK(cudaEventRecord(e0));
  for (int i = 0; i < reps; ++i) DS4_CUDA_CHECK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice));
  DS4_CUDA_CHECK(cudaEventRecord(e1));
  DS4_CUDA_CHECK(cudaEventSynchronize(e1));
  float ms = 0;
  DS4_CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
  DS4_CUDA_CHECK(cudaEventDestroy(e0));
  DS4_CUDA_CHECK(cudaEventDestroy(e1));
  DS4_CUDA_CHECK(cudaFree(a));
  DS4_CUDA_CHECK(cudaFree(b));
  return 2.0 * double(bytes) * reps / (double(ms) * 1e-3) / 1e9;
}

/// A ring of expert matrices of one type and shape, plus Q8_1 activations for `n` tokens.
struct Fixture {
  GgmlType type;
  int64_t rows, cols, n;
  int64_t mat_bytes = 0;
  std::vector<void*> mats;
  void* act = nullptr;
  float* y = nullptr;

  Fixture(GgmlType t, int64_t rows_, int64_t cols_, int64_t n_) : type(t), rows(rows_), cols(cols_), n(n_) {
    mat_bytes = rows * cpu::row_bytes(type, cols);
    int l2 = 0;
    DS4_CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0));
    const int64_t ring = std::max<int64_t>(2, (4 * int64_t(l2) + mat_bytes - 1) / mat_bytes);
    // Random bytes: the kernels have no value-dependent branches (inf/NaN scales cost the same),
    // so timing does not depend on the values.
    std::vector<uint8_t> host(static_cast<size_t>(mat_bytes));
    std::mt19937 rng(1);
    for (auto& b : host) b = uint8_t(rng());
    for (int64_t i = 0; i < ring; ++i) {
      void* p = nullptr;
      DS4_CUDA_CHECK(cudaMalloc(&p, size_t(mat_bytes)));
      DS4_CUDA_CHECK(cudaMemcpy(p, host.data(), size_t(mat_bytes), cudaMemcpyHostToDevice));
      mats.push_back(p);
    }
    std::vector<float> x(size_t(n * cols));
    std::normal_distribution<float> nd;
    for (auto& v : x) v = nd(rng);
    float* dx = nullptr;
    DS4_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&dx), x.size() * 4));
    DS4_CUDA_CHECK(cudaMemcpy(dx, x.data(), x.size() * 4, cudaMemcpyHostToDevice));
    DS4_CUDA_CHECK(cudaMalloc(&act, size_t(n * cols / 32 * 36)));
    DS4_CUDA_CHECK(cuda::quantize_q8_1(dx, n, cols, act, nullptr));
    DS4_CUDA_CHECK(cudaFree(dx));
    DS4_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&y), size_t(n * rows) * 4));
  }
  ~Fixture() {
    for (void* p : mats) cudaFree(p);
    cudaFree(act);
    cudaFree(y);
  }
};

/// One benchmark: the matrix product of `fx` (MMVQ for n <= 8, else MMQ on `path`).
void run_matmul(benchmark::State& state, GgmlType type, int64_t rows, int64_t cols, int64_t n, cuda::MmqPath path) {
  Fixture fx(type, rows, cols, n);
  cudaEvent_t e0, e1;
  DS4_CUDA_CHECK(cudaEventCreate(&e0));
  DS4_CUDA_CHECK(cudaEventCreate(&e1));
  size_t i = 0;
  double total_s = 0.0;
  int64_t iters = 0;
  for (auto _ : state) {
    const void* W = fx.mats[i++ % fx.mats.size()];
    DS4_CUDA_CHECK(cudaEventRecord(e0));
    if (n <= 8) DS4_CUDA_CHECK(cuda::mmvq(type, W, rows, cols, fx.act, n, fx.y, nullptr));
    else DS4_CUDA_CHECK(cuda::mmq(type, W, rows, cols, fx.act, n, fx.y, path, nullptr));
    DS4_CUDA_CHECK(cudaEventRecord(e1));
    DS4_CUDA_CHECK(cudaEventSynchronize(e1));
    float ms = 0;
    DS4_CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
    state.SetIterationTime(double(ms) * 1e-3);
    total_s += double(ms) * 1e-3;
    ++iters;
  }
  DS4_CUDA_CHECK(cudaEventDestroy(e0));
  DS4_CUDA_CHECK(cudaEventDestroy(e1));
  const double gbps = total_s > 0 ? double(fx.mat_bytes) * double(iters) / total_s / 1e9 : 0.0;
  state.counters["weights_GBps"] = gbps;
  state.counters["frac_of_copy_bw"] = g_copy_gbps > 0 ? gbps / g_copy_gbps : 0.0;
  state.counters["copy_GBps"] = g_copy_gbps;
  state.counters["weight_MB"] = double(fx.mat_bytes) / 1e6;
}

void register_all() {
  const GgmlType types[] = {GgmlType::IQ2_XXS, GgmlType::Q2_K,  GgmlType::Q4_K,  GgmlType::Q8_0,
                            GgmlType::IQ2_XS,  GgmlType::IQ2_S, GgmlType::IQ1_S, GgmlType::IQ1_M,
                            GgmlType::MXFP4,   GgmlType::NVFP4, GgmlType::Q6_K,  GgmlType::Q4_0};
  struct Shape { const char* name; int64_t rows, cols; };
  const Shape shapes[] = {{"gate_up_2048x4096", 2048, 4096}, {"down_4096x2048", 4096, 2048}};
  for (GgmlType t : types)
    for (const Shape& s : shapes)
      for (int64_t n : {int64_t(1), int64_t(512)}) {
        const std::string name = std::string(n == 1 ? "mmvq/" : "mmq/") + std::string(ggml_type_name(uint32_t(t))) +
                                 "/" + s.name + "/n" + std::to_string(n);
        benchmark::RegisterBenchmark(name.c_str(), [=](benchmark::State& st) {
          run_matmul(st, t, s.rows, s.cols, n, cuda::MmqPath::Auto);
        })->UseManualTime()->Unit(benchmark::kMicrosecond);
        if (n == 512 && (t == GgmlType::IQ2_XXS || t == GgmlType::Q2_K)) {
          benchmark::RegisterBenchmark(("mmq_dp4a/" + name.substr(4)).c_str(), [=](benchmark::State& st) {
            run_matmul(st, t, s.rows, s.cols, n, cuda::MmqPath::Dp4a);
          })->UseManualTime()->Unit(benchmark::kMicrosecond);
        }
      }
}

}  // namespace
}  // namespace ds4::bench

int main(int argc, char** argv) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    std::printf("bench_kernels_cuda: skipped, no CUDA device\n");
    return 0;
  }
  cudaDeviceProp prop{};
  DS4_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  ds4::bench::g_copy_gbps = ds4::bench::measure_copy_gbps();
  std::printf("device 0: %s (sm_%d%d), measured device copy bandwidth %.1f GB/s\n", prop.name, prop.major,
              prop.minor, ds4::bench::g_copy_gbps);
  benchmark::AddCustomContext("device", prop.name);
  benchmark::AddCustomContext("copy_GBps", std::to_string(ds4::bench::g_copy_gbps));
  ds4::bench::register_all();
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

#else  // no CUDA backend in this build

int main() {
  std::printf("bench_kernels_cuda: skipped, built without the CUDA backend (DS4_CUDA=OFF)\n");
  return 0;
}

#endif

// staging/cuda/h2d_probe_cuda.cpp — probe_h2d with the CUDA runtime (compiled only when the build
// has CUDA). Method per (GPU, source): one untimed copy, then `reps` copies of `bytes` from the
// same host buffer into one device buffer, each timed with CUDA events on a private stream; the
// median is reported in 1e9 bytes/s. Pinned sources are HostRegion buffers bound to the NUMA node
// and page-locked with cudaHostRegister; pageable sources are the same memory before pinning.
// The all-GPU figure launches one pinned copy per GPU at once (each from its own buffer) and
// divides the total bytes by the wall time of the slowest.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "staging/h2d_probe.h"
#include "staging/host_memory.h"
#include "staging/memory_limits.h"

namespace ds4::staging {
namespace {

std::string cuda_error(int gpu, const char* what, cudaError_t e) {
  cudaGetLastError();
  return "H2D probe: GPU " + std::to_string(gpu) + ": " + what + ": " + cudaGetErrorString(e);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

/// RAII device buffer + stream + events on one GPU.
struct GpuSide {
  int gpu = -1;  // -1: not opened
  void* dst = nullptr;
  cudaStream_t stream = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  GpuSide() = default;
  GpuSide(const GpuSide&) = delete;
  GpuSide& operator=(const GpuSide&) = delete;
  ~GpuSide() {
    if (gpu < 0) return;
    cudaSetDevice(gpu);
    if (start) cudaEventDestroy(start);
    if (stop) cudaEventDestroy(stop);
    if (stream) cudaStreamDestroy(stream);
    if (dst) cudaFree(dst);
  }
};

Result<void> open_gpu(GpuSide& g, int gpu, uint64_t bytes) {
  g.gpu = gpu;
  cudaError_t e = cudaSetDevice(gpu);
  if (e != cudaSuccess) return Error{cuda_error(gpu, "cudaSetDevice", e)};
  if ((e = cudaMalloc(&g.dst, bytes)) != cudaSuccess)
    return Error{cuda_error(gpu, ("cudaMalloc of " + format_bytes(bytes)).c_str(), e)};
  if ((e = cudaStreamCreateWithFlags(&g.stream, cudaStreamNonBlocking)) != cudaSuccess)
    return Error{cuda_error(gpu, "cudaStreamCreate", e)};
  if ((e = cudaEventCreate(&g.start)) != cudaSuccess || (e = cudaEventCreate(&g.stop)) != cudaSuccess)
    return Error{cuda_error(gpu, "cudaEventCreate", e)};
  return ok();
}

/// Median GB/s of `reps` timed copies src -> g.dst (after one warm-up).
Result<double> time_copies(GpuSide& g, const void* src, uint64_t bytes, int reps) {
  cudaSetDevice(g.gpu);
  std::vector<double> gbps;
  for (int r = -1; r < reps; ++r) {
    cudaError_t e = cudaEventRecord(g.start, g.stream);
    if (e == cudaSuccess) e = cudaMemcpyAsync(g.dst, src, bytes, cudaMemcpyHostToDevice, g.stream);
    if (e == cudaSuccess) e = cudaEventRecord(g.stop, g.stream);
    if (e == cudaSuccess) e = cudaEventSynchronize(g.stop);
    if (e != cudaSuccess) return Error{cuda_error(g.gpu, ("copy of " + format_bytes(bytes)).c_str(), e)};
    float ms = 0;
    if ((e = cudaEventElapsedTime(&ms, g.start, g.stop)) != cudaSuccess)
      return Error{cuda_error(g.gpu, "cudaEventElapsedTime", e)};
    if (r >= 0 && ms > 0) gbps.push_back(double(bytes) / (double(ms) * 1e-3) * 1e-9);
  }
  return median(gbps);
}

}  // namespace

bool h2d_probe_available() { return h2d_probe_unavailable_reason().empty(); }

std::string h2d_probe_unavailable_reason() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return std::string("CUDA build, no device visible (cudaGetDeviceCount: ") + cudaGetErrorString(e) + ")";
  }
  if (n == 0) return "CUDA build, no device visible (cudaGetDeviceCount: 0 devices)";
  return "";
}

Result<H2dProbeResult> probe_h2d(const H2dProbeOptions& opts) {
  if (opts.bytes == 0 || opts.reps < 1)
    return Error{"H2D probe: expected bytes > 0 and reps >= 1, found bytes " + std::to_string(opts.bytes) +
                 ", reps " + std::to_string(opts.reps)};
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    cudaGetLastError();
    return Error{"H2D probe: expected a CUDA GPU, found none (cudaGetDeviceCount)"};
  }
  std::vector<int> nodes = opts.numa_nodes;
  if (nodes.empty()) nodes.push_back(-1);
  H2dProbeResult out;
  std::vector<GpuSide> gpus(static_cast<size_t>(n));
  for (int g = 0; g < n; ++g) DS4_TRY_VOID(open_gpu(gpus[size_t(g)], g, opts.bytes));
  // One source buffer per node, pinned after the pageable measurement.
  for (int node : nodes) {
    DS4_TRY(HostRegion src, HostRegion::allocate(opts.bytes, node));
    std::memset(src.data(), 0x5a, opts.bytes);
    std::vector<double> pageable(size_t(n), 0.0);
    if (opts.pageable)
      for (int g = 0; g < n; ++g) {
        DS4_TRY(pageable[size_t(g)], time_copies(gpus[size_t(g)], src.data(), opts.bytes, opts.reps));
      }
    const uint64_t off0 = 0;
    DS4_TRY_VOID(src.pin(std::span<const uint64_t>(&off0, 1), src.bytes(), default_pin_ops()));
    for (int g = 0; g < n; ++g) {
      H2dLink l;
      l.gpu = g;
      cudaDeviceProp p{};
      if (cudaGetDeviceProperties(&p, g) == cudaSuccess) {
        l.name = p.name;
        l.vram_bytes = int64_t(p.totalGlobalMem);
      }
      char bus[32] = {};
      if (cudaDeviceGetPCIBusId(bus, sizeof bus, g) == cudaSuccess) l.pci_bus_id = bus;
      cudaGetLastError();
      l.numa_node = node;
      DS4_TRY(l.pinned_gbps, time_copies(gpus[size_t(g)], src.data(), opts.bytes, opts.reps));
      l.pageable_gbps = pageable[size_t(g)];
      out.links.push_back(l);
    }
  }
  // All GPUs at once, each from its own pinned buffer (unbound: the OS places it).
  std::vector<HostRegion> bufs;
  for (int g = 0; g < n; ++g) {
    DS4_TRY(HostRegion b, HostRegion::allocate(opts.bytes, -1));
    std::memset(b.data(), 0x3c, opts.bytes);
    const uint64_t off0 = 0;
    DS4_TRY_VOID(b.pin(std::span<const uint64_t>(&off0, 1), b.bytes(), default_pin_ops()));
    bufs.push_back(std::move(b));
  }
  std::vector<double> agg;
  for (int r = -1; r < opts.reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int g = 0; g < n; ++g) {
      cudaSetDevice(g);
      const cudaError_t e =
          cudaMemcpyAsync(gpus[size_t(g)].dst, bufs[size_t(g)].data(), opts.bytes, cudaMemcpyHostToDevice, gpus[size_t(g)].stream);
      if (e != cudaSuccess) return Error{cuda_error(g, "concurrent copy", e)};
    }
    for (int g = 0; g < n; ++g) {
      cudaSetDevice(g);
      const cudaError_t e = cudaStreamSynchronize(gpus[size_t(g)].stream);
      if (e != cudaSuccess) return Error{cuda_error(g, "concurrent copy", e)};
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (r >= 0 && s > 0) agg.push_back(double(opts.bytes) * n / s * 1e-9);
  }
  out.all_gpus_gbps = median(agg);
  return out;
}

}  // namespace ds4::staging

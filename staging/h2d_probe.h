// staging/h2d_probe.h — host-to-device copy bandwidth per GPU (pinned and pageable, from each
// NUMA node), and all GPUs at once: the link figures of a hardware profile (placement/) and of
// `ds4-offload bench --probe`. The CUDA implementation is staging/cuda/h2d_probe_cuda.cpp; a build
// without CUDA reports that no GPU can be probed (h2d_probe_available() is false).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ds4/result.h"

namespace ds4::staging {

/// What to measure.
struct H2dProbeOptions {
  uint64_t bytes = 256ull << 20;  ///< bytes per timed copy (one contiguous cudaMemcpyAsync)
  int reps = 5;                   ///< timed copies per figure (after one warm-up); the median is kept
  std::vector<int> numa_nodes;    ///< host NUMA nodes to copy from; empty = unbound memory only
  bool pageable = true;           ///< also time copies from pageable (malloc'ed, unpinned) memory
};

/// One GPU from one host source.
struct H2dLink {
  int gpu = 0;                ///< CUDA device ordinal
  std::string name;           ///< e.g. "NVIDIA GeForce RTX 2080 Ti"
  std::string pci_bus_id;     ///< "0000:3B:00.0" (cudaDeviceGetPCIBusId; hex case as CUDA writes it)
  int64_t vram_bytes = 0;     ///< total device memory (cudaDeviceProp::totalGlobalMem), bytes
  int numa_node = -1;         ///< host node the source buffer is bound to (-1 = unbound)
  double pinned_gbps = 0;     ///< median of reps, 1e9 bytes/s, cudaHostRegister'ed source
  double pageable_gbps = 0;   ///< median of reps from pageable memory (0 when not measured)
};

/// Result of probe_h2d.
struct H2dProbeResult {
  std::vector<H2dLink> links;   ///< [gpu x source node], gpu-major
  double all_gpus_gbps = 0;     ///< every GPU copying pinned memory at once (sum of bytes / wall time)
};

/// True when this build has CUDA and at least one device is visible.
bool h2d_probe_available();

/// Why probe_h2d cannot run here, or "" when h2d_probe_available(): "this build has no CUDA
/// backend" (CPU-only build) or "CUDA build, no device visible (...)" naming the CUDA error.
std::string h2d_probe_unavailable_reason();

/// Times host->device copies. Errors: no CUDA in this build or no device ("expected a CUDA GPU,
/// found none"), an allocation or copy failure (naming the GPU, the bytes and the CUDA error).
Result<H2dProbeResult> probe_h2d(const H2dProbeOptions& opts);

}  // namespace ds4::staging

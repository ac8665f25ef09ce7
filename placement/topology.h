// placement/topology.h — machine discovery with hwloc, for planning without a profile file.
//
// hwloc gives NUMA nodes (memory, cores) and PCI devices with their locality (the NUMA node of
// the closest non-I/O ancestor) and link speed. It cannot know VRAM sizes or copy bandwidths:
// the CUDA build measures them (gpu_link_probe.h: name/VRAM from cudaGetDeviceProperties, node
// from the hwloc device with the same PCI bus id); without CUDA a machine with NVIDIA/AMD GPUs is
// an error asking for a profile.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ds4/result.h"
#include "placement/hw_profile.h"

namespace ds4::placement {

/// A PCI device of interest.
struct PciDevice {
  enum class Kind { Gpu, Nvme };
  Kind kind;
  std::string bus_id;      ///< "dddd:bb:dd.f"
  uint16_t vendor_id = 0;
  uint16_t device_id = 0;
  int numa_node = -1;      ///< os index of the local NUMA node, -1 if unknown
  double link_gbps = 0;    ///< hwloc's PCI link speed (GB/s), 0 if unknown
};

/// One NUMA node as discovered.
struct NumaNodeInfo {
  int os_index = 0;
  int64_t memory_bytes = 0;
  int cores = 0;
};

/// The discovered machine.
struct Topology {
  std::vector<NumaNodeInfo> nodes;
  std::vector<PciDevice> devices;  ///< GPUs (display/3D class, NVIDIA/AMD vendor) and NVMe
};

/// Runs hwloc discovery (I/O devices included). Error if hwloc fails to load the topology.
Result<Topology> discover_topology();

/// Streaming read bandwidth of `bytes` of host memory with `threads` threads, GB/s (best of 3).
double probe_memory_read_gbps(int64_t bytes, int threads);

/// The host part of a profile of `t` (nodes, NVMe, host/runtime estimates; no GPU, whatever `t`
/// holds) plus a short memory-read probe. CPU expert throughput is estimated as 50% of the probed
/// read bandwidth; the description lists every estimate. Error: `t` has no node.
Result<HwProfile> discover_host_profile(const Topology& t);

/// A profile of this machine: discover_topology(), discover_host_profile(), and the GPUs measured
/// by probe_gpu_links() with `h2d_bytes` per copy (0 = no GPU in the profile). Error when NVIDIA/AMD
/// GPUs are present but cannot be probed (CPU-only build, or no CUDA device visible: pass --hw);
/// the description says what was measured and lists every estimate.
Result<HwProfile> discover_hw_profile(uint64_t h2d_bytes = uint64_t(64) << 20);

}  // namespace ds4::placement

// placement/topology.h — machine discovery with hwloc, for planning without a profile file.
//
// hwloc gives NUMA nodes (memory, cores) and PCI devices with their locality (the NUMA node of
// the closest non-I/O ancestor) and link speed. It cannot know VRAM sizes or measured copy
// bandwidths: without CUDA, a machine with NVIDIA GPUs is an error asking for a profile; the
// CUDA build (later) fills GPU fields from cudaGetDeviceProperties matched by PCI bus id.
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

/// A profile of this machine from discover_topology() plus a short memory-read probe. Error when
/// NVIDIA/AMD GPUs are present (their VRAM and copy bandwidth are unknown without the CUDA
/// backend: pass --hw). CPU expert throughput is estimated as 50% of the probed read bandwidth;
/// the profile's description lists every estimate.
Result<HwProfile> discover_hw_profile();

}  // namespace ds4::placement

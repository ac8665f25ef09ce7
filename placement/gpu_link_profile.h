// placement/gpu_link_profile.h — turns measured H2D copy rates (staging/h2d_probe.h) and hwloc's
// PCI locality (topology.h) into the GPU part of a hardware profile. Pure: no device is touched,
// so the logic is tested on a CPU with synthetic probe results.
//
// Per CUDA device (ordinal order): name, PCI bus id and VRAM from the probe; numa_node = the node
// of the hwloc PCI device whose bus id equals the CUDA one (compared as numbers: CUDA writes
// "0000:3B:00.0", hwloc "0000:3b:00.0"); when there is no match or hwloc does not know the
// locality, the first discovered node, and a note says so. h2d_gbps = the pinned rate from that
// node (or from unbound memory when the probe did not bind sources to nodes). Links: aggregate =
// the all-GPUs-at-once figure; pageable = the slowest pageable figure; inter-socket = the slowest
// pinned figure from a node other than the GPU's own (only when sources were bound to 2+ nodes).
// vram_gbps, kernel_efficiency, tflops come from gpu_estimates.h.
#pragma once

#include <string>
#include <vector>

#include "ds4/result.h"
#include "placement/hw_profile.h"
#include "placement/topology.h"
#include "staging/h2d_probe.h"

namespace ds4::placement {

/// The GPU part of a profile built from a probe.
struct GpuLinkProfile {
  std::vector<GpuProfile> gpus;     ///< one per CUDA device, ordinal order
  double h2d_aggregate_gbps = 0;    ///< all GPUs copying pinned memory at once
  double pageable_h2d_gbps = 0;     ///< slowest pageable figure; 0 = none measured
  double inter_socket_gbps = 0;     ///< slowest remote-node pinned figure; 0 = not measured
  // Estimates a copy probe cannot measure (the values of the shipped PCIe profiles, configs/hw):
  int64_t vram_reserved_bytes = int64_t(700) << 20;  ///< per GPU: CUDA context, buffers
  double copy_latency_us = 8;       ///< fixed cost of one H2D copy
  double allreduce_latency_us = 35; ///< one small TP all-reduce
  double allreduce_gbps = 6;        ///< large all-reduce bus bandwidth
  std::vector<std::string> notes;   ///< fallbacks taken (locality unknown, unbound sources)
  std::vector<std::string> estimated;  ///< every estimated field with its value and source
};

/// Builds the GPU profiles from `h2d` (links gpu-major or in any order) and `topo`. Errors (the
/// message names the GPU and field): no links, a negative ordinal, ordinals with gaps, a GPU
/// without a pinned figure > 0 or without VRAM size, a (GPU, node) pair twice, all-GPU figure <= 0,
/// a topology without nodes.
Result<GpuLinkProfile> gpu_profiles_from_h2d(const staging::H2dProbeResult& h2d, const Topology& topo);

/// Puts `g` into `p`: replaces p.gpus; sets h2d_aggregate_gbps, the runtime/all-reduce estimates
/// above, and pageable_h2d_gbps / inter_socket_gbps where measured (else keeps p's values).
void apply_gpu_link_profile(const GpuLinkProfile& g, HwProfile* p);

/// Parses a PCI bus id "dddd:bb:dd.f" (hex, any case, domain of any width) into one number
/// (domain << 16 | bus << 8 | device << 3 | function); -1 when malformed.
int64_t parse_pci_bus_id(const std::string& s);

}  // namespace ds4::placement

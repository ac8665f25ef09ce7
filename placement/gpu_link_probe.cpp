// placement/gpu_link_probe.cpp — see gpu_link_probe.h.
#include "placement/gpu_link_probe.h"

#include <cstdio>

#include "staging/memory_limits.h"

namespace ds4::placement {

Result<GpuLinkProbe> probe_gpu_links(const Topology& topo, uint64_t bytes, int reps) {
  GpuLinkProbe g;
  g.bytes = bytes;
  g.reps = reps;
  for (const auto& d : topo.devices) g.hwloc_gpus += d.kind == PciDevice::Kind::Gpu;
  if (bytes == 0) {
    g.why_not = "skipped (H2D probe size 0)";
    return g;
  }
  const std::string reason = staging::h2d_probe_unavailable_reason();
  if (!reason.empty()) {
    if (g.hwloc_gpus > 0)
      return Error{"hwloc found " + std::to_string(g.hwloc_gpus) +
                   " GPU(s) but their VRAM and copy bandwidth cannot be measured: " + reason +
                   " (pass --hw PROFILE, or plan without them with --probe-h2d-mib 0)"};
    g.why_not = reason;
    return g;
  }
  staging::H2dProbeOptions ho;
  ho.bytes = bytes;
  ho.reps = reps;
  if (topo.nodes.size() > 1)
    for (const auto& n : topo.nodes) ho.numa_nodes.push_back(n.os_index);
  DS4_TRY(g.raw, staging::probe_h2d(ho));
  DS4_TRY(g.profile, gpu_profiles_from_h2d(g.raw, topo));
  g.probed = true;
  return g;
}

std::string describe_gpu_links(const GpuLinkProbe& g) {
  if (!g.probed) return "No GPU probed: " + g.why_not + ".";
  const GpuLinkProfile& p = g.profile;
  char head[512];
  std::snprintf(head, sizeof head,
                "%zu GPU(s) probed with CUDA (%s per copy, median of %d timed copies): measured h2d_gbps (pinned, "
                "local node), h2d_aggregate_gbps (all GPUs at once), pageable_h2d_gbps (slowest pageable)%s; name, "
                "VRAM and PCI bus id from CUDA, numa_node from hwloc PCI locality. Estimated:",
                p.gpus.size(), staging::format_bytes(g.bytes).c_str(), g.reps,
                p.inter_socket_gbps > 0 ? ", inter_socket_gbps (slowest remote-node pinned)" : "");
  std::string s = head;
  for (size_t i = 0; i < p.estimated.size(); ++i) s += (i ? "; " : " ") + p.estimated[i];
  s += ".";
  for (const auto& n : p.notes) s += " Note: " + n + ".";
  return s;
}

}  // namespace ds4::placement

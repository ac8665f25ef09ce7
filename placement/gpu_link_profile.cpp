// placement/gpu_link_profile.cpp — see gpu_link_profile.h.
#include "placement/gpu_link_profile.h"
#include "ds4/format_number.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <map>
#include <set>

#include "placement/gpu_estimates.h"

namespace ds4::placement {

int64_t parse_pci_bus_id(const std::string& s) {
  // Four hex fields separated by ':', ':', '.'; nothing else (no "0x", signs or spaces).
  uint64_t f[4] = {0, 0, 0, 0};
  const char seps[3] = {':', ':', '.'};
  size_t pos = 0;
  for (int i = 0; i < 4; ++i) {
    size_t digits = 0;
    for (; pos < s.size() && std::isxdigit(static_cast<unsigned char>(s[pos])); ++pos, ++digits) {
      if (digits >= 8) return -1;
      const char c = char(std::tolower(static_cast<unsigned char>(s[pos])));
      f[i] = f[i] * 16 + uint64_t(c <= '9' ? c - '0' : c - 'a' + 10);
    }
    if (digits == 0) return -1;
    if (i < 3) {
      if (pos >= s.size() || s[pos] != seps[i]) return -1;
      ++pos;
    }
  }
  if (pos != s.size() || f[1] > 0xff || f[2] > 0x1f || f[3] > 0x7) return -1;
  return int64_t((f[0] << 16) | (f[1] << 8) | (f[2] << 3) | f[3]);
}

Result<GpuLinkProfile> gpu_profiles_from_h2d(const staging::H2dProbeResult& h2d, const Topology& topo) {
  if (topo.nodes.empty()) return Error{"GPU profile: expected a topology with NUMA nodes, found none"};
  if (h2d.links.empty()) return Error{"GPU profile: expected H2D links from the probe, found none"};
  if (!(h2d.all_gpus_gbps > 0))
    return Error{"GPU profile: expected an all-GPUs H2D figure > 0, found " + format_number(h2d.all_gpus_gbps)};
  std::map<int, std::vector<const staging::H2dLink*>> by_gpu;
  std::set<std::pair<int, int>> seen;
  for (const auto& l : h2d.links) {
    if (l.gpu < 0) return Error{"GPU profile: expected CUDA ordinals >= 0, found " + std::to_string(l.gpu)};
    if (!seen.insert({l.gpu, l.numa_node}).second)
      return Error{"GPU profile: GPU " + std::to_string(l.gpu) + " from node " + std::to_string(l.numa_node) +
                   " measured twice"};
    by_gpu[l.gpu].push_back(&l);
  }
  if (by_gpu.rbegin()->first != int(by_gpu.size()) - 1)
    return Error{"GPU profile: expected CUDA ordinals 0.." + std::to_string(by_gpu.size() - 1) + ", found up to " +
                 std::to_string(by_gpu.rbegin()->first)};
  std::map<int64_t, int> locality;  // bus id -> node, from hwloc
  for (const auto& d : topo.devices)
    if (const int64_t id = parse_pci_bus_id(d.bus_id); id >= 0 && d.numa_node >= 0) locality[id] = d.numa_node;
  auto known_node = [&](int n) {
    return std::any_of(topo.nodes.begin(), topo.nodes.end(), [&](const NumaNodeInfo& x) { return x.os_index == n; });
  };
  GpuLinkProfile out;
  out.h2d_aggregate_gbps = h2d.all_gpus_gbps;
  for (const auto& [gpu, links] : by_gpu) {
    const staging::H2dLink& first = *links.front();
    const std::string who = "GPU " + std::to_string(gpu) + " (" + first.name + ")";
    GpuProfile g;
    g.name = first.name;
    g.pci_bus_id = first.pci_bus_id;
    g.vram_bytes = first.vram_bytes;
    if (g.vram_bytes <= 0) return Error{"GPU profile: " + who + ": expected a VRAM size > 0, found none"};
    const auto loc = locality.find(parse_pci_bus_id(g.pci_bus_id));
    if (loc != locality.end() && known_node(loc->second)) {
      g.numa_node = loc->second;
    } else {
      g.numa_node = topo.nodes.front().os_index;
      out.notes.push_back(who + ": PCI bus id '" + g.pci_bus_id + "' has no NUMA locality in hwloc; assumed node " +
                          std::to_string(g.numa_node));
    }
    const staging::H2dLink* local = nullptr;
    const staging::H2dLink* unbound = nullptr;
    for (const auto* l : links) {
      if (!(l->pinned_gbps > 0))
        return Error{"GPU profile: " + who + " from node " + std::to_string(l->numa_node) +
                     ": expected a pinned rate > 0, found " + format_number(l->pinned_gbps)};
      if (l->numa_node == g.numa_node) local = l;
      if (l->numa_node < 0) unbound = l;
      if (l->pageable_gbps > 0)
        out.pageable_h2d_gbps = out.pageable_h2d_gbps > 0 ? std::min(out.pageable_h2d_gbps, l->pageable_gbps)
                                                          : l->pageable_gbps;
      if (l->numa_node >= 0 && l->numa_node != g.numa_node)
        out.inter_socket_gbps = out.inter_socket_gbps > 0 ? std::min(out.inter_socket_gbps, l->pinned_gbps)
                                                          : l->pinned_gbps;
    }
    if (local) {
      g.h2d_gbps = local->pinned_gbps;
    } else if (unbound) {
      g.h2d_gbps = unbound->pinned_gbps;
      if (topo.nodes.size() > 1)
        out.notes.push_back(who + ": h2d_gbps from unbound host memory (sources were not bound to nodes)");
    } else {
      // Sources were bound, but not to the GPU's node (locality outside the probed nodes): the
      // best figure measured is the closest thing to a local one.
      for (const auto* l : links) g.h2d_gbps = std::max(g.h2d_gbps, l->pinned_gbps);
      out.notes.push_back(who + ": no source on node " + std::to_string(g.numa_node) +
                          " was measured; h2d_gbps = the fastest node's figure");
    }
    const GpuEstimate e = gpu_estimate_for_name(g.name);
    g.vram_gbps = e.vram_gbps;
    g.kernel_efficiency = e.kernel_efficiency;
    g.tflops = e.tflops;
    char est[384];
    std::snprintf(est, sizeof est, "GPU %d %s: vram_gbps %.0f, kernel_efficiency %.2f, tflops %.1f (%s)", gpu,
                  g.name.c_str(), e.vram_gbps, e.kernel_efficiency, e.tflops, e.source.c_str());
    out.estimated.push_back(est);
    out.gpus.push_back(std::move(g));
  }
  char est[256];
  std::snprintf(est, sizeof est,
                "runtime.vram_reserved %lld MiB, copy_latency_us %.0f, allreduce_latency_us %.0f, allreduce_gbps %.0f "
                "(as the shipped PCIe profiles)",
                (long long)(out.vram_reserved_bytes >> 20), out.copy_latency_us, out.allreduce_latency_us,
                out.allreduce_gbps);
  out.estimated.push_back(est);
  if (out.inter_socket_gbps <= 0) out.estimated.push_back("inter_socket_gbps (no source bound to a remote node)");
  return out;
}

void apply_gpu_link_profile(const GpuLinkProfile& g, HwProfile* p) {
  p->gpus = g.gpus;
  p->h2d_aggregate_gbps = g.h2d_aggregate_gbps;
  p->vram_reserved_bytes = g.vram_reserved_bytes;
  p->copy_latency_us = g.copy_latency_us;
  p->allreduce_latency_us = g.allreduce_latency_us;
  p->allreduce_gbps = g.allreduce_gbps;
  if (g.pageable_h2d_gbps > 0) p->pageable_h2d_gbps = g.pageable_h2d_gbps;
  if (g.inter_socket_gbps > 0) p->inter_socket_gbps = g.inter_socket_gbps;
}

}  // namespace ds4::placement

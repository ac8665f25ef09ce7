// placement/topology.cpp — hwloc discovery and the memory-read probe.
#include "placement/topology.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

#include <hwloc.h>

#include "placement/gpu_link_probe.h"

namespace ds4::placement {

Result<Topology> discover_topology() {
  hwloc_topology_t topo;
  if (hwloc_topology_init(&topo) != 0) return Error{"hwloc: topology init failed"};
  hwloc_topology_set_io_types_filter(topo, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
  if (hwloc_topology_load(topo) != 0) {
    hwloc_topology_destroy(topo);
    return Error{"hwloc: topology load failed"};
  }
  Topology t;
  const int n_nodes = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE);
  for (int i = 0; i < n_nodes; ++i) {
    hwloc_obj_t node = hwloc_get_obj_by_type(topo, HWLOC_OBJ_NUMANODE, unsigned(i));
    NumaNodeInfo info;
    info.os_index = int(node->os_index);
    info.memory_bytes = int64_t(node->attr->numanode.local_memory);
    info.cores = hwloc_get_nbobjs_inside_cpuset_by_type(topo, node->cpuset, HWLOC_OBJ_CORE);
    t.nodes.push_back(info);
  }
  for (hwloc_obj_t d = hwloc_get_next_pcidev(topo, nullptr); d; d = hwloc_get_next_pcidev(topo, d)) {
    const auto& pa = d->attr->pcidev;
    const unsigned cls = pa.class_id;
    PciDevice dev;
    if ((cls >> 8) == 0x03 && (pa.vendor_id == 0x10de || pa.vendor_id == 0x1002)) dev.kind = PciDevice::Kind::Gpu;
    else if (cls == 0x0108) dev.kind = PciDevice::Kind::Nvme;
    else continue;
    char bus[32];
    std::snprintf(bus, sizeof bus, "%04x:%02x:%02x.%01x", pa.domain, pa.bus, pa.dev, pa.func);
    dev.bus_id = bus;
    dev.vendor_id = pa.vendor_id;
    dev.device_id = pa.device_id;
    dev.link_gbps = pa.linkspeed;
    hwloc_obj_t anc = hwloc_get_non_io_ancestor_obj(topo, d);
    if (anc && anc->nodeset) dev.numa_node = hwloc_bitmap_first(anc->nodeset);
    t.devices.push_back(dev);
  }
  // Some VMs expose memory outside every NUMA node (hot-plugged/movable ranges; this development
  // VM: node0 7.3 GiB, MemTotal 23.5 GiB): when hwloc's root total or the kernel's physical page
  // count exceeds the sum of the nodes, the rest is attributed to the nodes by their share.
  const int64_t root_total = std::max<int64_t>(int64_t(hwloc_get_root_obj(topo)->total_memory),
                                               int64_t(sysconf(_SC_PHYS_PAGES)) * int64_t(sysconf(_SC_PAGESIZE)));
  int64_t nodes_total = 0;
  for (const auto& n : t.nodes) nodes_total += n.memory_bytes;
  if (nodes_total > 0 && root_total > nodes_total)
    for (auto& n : t.nodes) n.memory_bytes = int64_t(double(n.memory_bytes) * double(root_total) / double(nodes_total));
  hwloc_topology_destroy(topo);
  if (t.nodes.empty()) return Error{"hwloc: no NUMA node found"};
  return t;
}

double probe_memory_read_gbps(int64_t bytes, int threads) {
  DS4_CHECK(bytes > 0 && threads > 0);
  const size_t n = size_t(bytes) / sizeof(uint64_t);
  std::vector<uint64_t> buf(n, 1);
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    std::vector<uint64_t> sums(size_t(threads), 0);
    auto t0 = std::chrono::steady_clock::now();
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t)
      pool.emplace_back([&, t] {
        const size_t lo = n * size_t(t) / size_t(threads), hi = n * size_t(t + 1) / size_t(threads);
        uint64_t s = 0;
        for (size_t i = lo; i < hi; ++i) s += buf[i];
        sums[size_t(t)] = s;
      });
    for (auto& th : pool) th.join();
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    uint64_t total = 0;
    for (auto s : sums) total += s;
    DS4_CHECK(total == n);  // keeps the reads from being optimised away
    best = std::max(best, double(bytes) / dt / 1e9);
  }
  return best;
}

Result<HwProfile> discover_host_profile(const Topology& t) {
  if (t.nodes.empty()) return Error{"hwloc: no NUMA node found"};
  HwProfile p;
  int cores = 0;
  int64_t mem = 0;
  for (const auto& n : t.nodes) { cores += n.cores; mem += n.memory_bytes; }
  const double read = probe_memory_read_gbps(int64_t(256) << 20, std::max(1, std::min(cores, 8)));
  char desc[512];
  std::snprintf(desc, sizeof desc,
                "Discovered with hwloc: %zu NUMA node(s), %d cores. Probed streaming read %.1f GB/s "
                "(256 MiB, all nodes together, split per node by cores). Estimated: CPU expert rate 50%% of read, "
                "%d GFLOP/s per core for prefill, host reserve 10%% (>= 2 GiB).",
                t.nodes.size(), cores, read, 16);
  p.name = "discovered machine";
  p.description = desc;
  for (const auto& n : t.nodes) {
    NumaNodeProfile np;
    np.id = n.os_index;
    np.memory_bytes = n.memory_bytes;
    np.cores = std::max(1, n.cores);
    np.mem_read_gbps = read * np.cores / std::max(1, cores);
    np.cpu_expert_gbps["default"] = 0.5 * np.mem_read_gbps;
    np.cpu_gflops = 16.0 * np.cores;
    p.nodes.push_back(np);
  }
  for (const auto& d : t.devices)
    if (d.kind == PciDevice::Kind::Nvme) {
      NvmeProfile nv;
      nv.name = "nvme " + d.bus_id;
      nv.numa_node = d.numa_node >= 0 ? d.numa_node : p.nodes[0].id;
      if (p.node_index(nv.numa_node) < 0) nv.numa_node = p.nodes[0].id;
      nv.read_gbps = d.link_gbps > 0 ? 0.8 * d.link_gbps : 2.0;  // estimate from the PCIe link
      p.nvme.push_back(nv);
    }
  p.inter_socket_gbps = 16;
  p.pageable_h2d_gbps = 0.5 * read;  // without a GPU probe; a pageable copy is a CPU memcpy at best
  p.allreduce_gbps = 1;
  rlimit rl{};
  if (getrlimit(RLIMIT_MEMLOCK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) p.memlock_bytes = int64_t(rl.rlim_cur);
  p.host_reserved_bytes = std::max<int64_t>(int64_t(2) << 30, mem / 10);
  p.layer_overhead_us = 20;
  p.cpu_expert_latency_us = 5;
  DS4_TRY_VOID(validate_hw_profile(p, "discovered profile"));
  return p;
}

Result<HwProfile> discover_hw_profile(uint64_t h2d_bytes) {
  DS4_TRY(Topology t, discover_topology());
  DS4_TRY(GpuLinkProbe g, probe_gpu_links(t, h2d_bytes, 3));
  DS4_TRY(HwProfile p, discover_host_profile(t));
  if (g.probed) apply_gpu_link_profile(g.profile, &p);
  p.description += ' ';
  p.description += describe_gpu_links(g);
  DS4_TRY_VOID(validate_hw_profile(p, "discovered profile"));
  return p;
}

}  // namespace ds4::placement

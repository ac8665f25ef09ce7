// placement/hw_probe.cpp — see hw_probe.h.
#include "placement/hw_probe.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <thread>

#include <hwloc.h>

#include "kernels/cpu/quant_ref.h"
#include "kernels/quant/ggml_type.h"
#include "placement/topology.h"
#include "staging/nvme_reader.h"

namespace ds4::placement {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

/// Runs fn(t) on `threads` threads bound to `cpuset` (when non-null); returns whether every bind
/// succeeded and the wall time in seconds.
std::pair<bool, double> run_bound(hwloc_topology_t topo, hwloc_const_cpuset_t cpuset, int threads,
                                  const std::function<void(int)>& fn) {
  std::vector<int> bound(size_t(threads), 0);
  std::vector<std::thread> pool;
  const auto t0 = Clock::now();
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      if (cpuset) bound[size_t(t)] = hwloc_set_cpubind(topo, cpuset, HWLOC_CPUBIND_THREAD) == 0;
      fn(t);
    });
  for (auto& th : pool) th.join();
  const double dt = seconds_since(t0);
  return {std::all_of(bound.begin(), bound.end(), [](int b) { return b != 0; }), dt};
}

Result<NodeProbe> probe_node(hwloc_topology_t topo, hwloc_obj_t node, const HwProbeOptions& o) {
  NodeProbe r;
  r.node = int(node->os_index);
  const int cores = std::max(1, hwloc_get_nbobjs_inside_cpuset_by_type(topo, node->cpuset, HWLOC_OBJ_CORE));
  r.threads = o.threads > 0 ? o.threads : cores;
  const size_t bytes = size_t(o.mem_bytes) & ~size_t(4095);
  bool mem_bound = true;
  void* buf = hwloc_alloc_membind(topo, bytes, node->nodeset, HWLOC_MEMBIND_BIND, HWLOC_MEMBIND_BYNODESET);
  bool hw_alloc = buf != nullptr;
  if (!buf) {
    mem_bound = false;
    buf = std::aligned_alloc(4096, bytes);
    if (!buf) return Error{"probe: cannot allocate " + std::to_string(bytes >> 20) + " MiB for node " + std::to_string(r.node)};
  }
  const int T = r.threads;
  const size_t n = bytes / sizeof(uint64_t);
  auto* w = static_cast<uint64_t*>(buf);
  // First touch from bound threads (places pages on the node even where membind is advisory).
  auto [cpu_bound, t_init] = run_bound(topo, node->cpuset, T, [&](int t) {
    for (size_t i = n * size_t(t) / size_t(T); i < n * size_t(t + 1) / size_t(T); ++i) w[i] = 1;
  });
  (void)t_init;
  std::vector<uint64_t> sums(static_cast<size_t>(T), 0);
  for (int rep = 0; rep < o.repeats; ++rep) {
    auto [b, dt] = run_bound(topo, node->cpuset, T, [&](int t) {
      uint64_t s = 0;
      for (size_t i = n * size_t(t) / size_t(T); i < n * size_t(t + 1) / size_t(T); ++i) s += w[i];
      sums[size_t(t)] = s;
    });
    uint64_t total = 0;
    for (auto s : sums) total += s;
    DS4_CHECK(total == n);  // the sums are used, so the reads cannot be removed
    r.read_gbps = std::max(r.read_gbps, double(bytes) / dt / 1e9);
    cpu_bound = cpu_bound && b;
  }
  const size_t half = bytes / 2;
  auto* src = static_cast<uint8_t*>(buf);
  uint8_t* dst = src + half;
  for (int rep = 0; rep < o.repeats; ++rep) {
    auto [b, dt] = run_bound(topo, node->cpuset, T, [&](int t) {
      const size_t lo = half * size_t(t) / size_t(T), hi = half * size_t(t + 1) / size_t(T);
      std::memcpy(dst + lo, src + lo, hi - lo);
    });
    r.copy_gbps = std::max(r.copy_gbps, double(half) / dt / 1e9);
    cpu_bound = cpu_bound && b;
  }
  // Expert matvec: each bound thread runs matvec_q8_1 on its own rows (single-threaded call), so
  // the whole node buffer is read once per pass, as experts spread over the node's memory would be.
  const int64_t cols = 4096;
  std::vector<float> x(static_cast<size_t>(cols));
  for (int64_t i = 0; i < cols; ++i) x[size_t(i)] = std::sin(0.37f * float(i)) * 0.5f;
  std::vector<uint8_t> act(size_t(cpu::row_bytes(GgmlType::Q8_1, cols)));
  cpu::quantize_row_q8_1(x.data(), act.data(), cols);
  for (const std::string& name : o.expert_types) {
    GgmlType type{};
    bool known = false;
    for (uint32_t id = 0; id < 64; ++id)
      if (ggml_type_name(id) == name) { type = GgmlType(id); known = true; }
    if (!known || !cpu::can_quantize(type) || !cpu::can_dot_q8_1(type)) continue;
    const int64_t rb = cpu::row_bytes(type, cols);
    const int64_t rows = int64_t(bytes) / rb;
    if (rows < T) continue;
    // 16 distinct quantized rows tiled over the buffer (quantizing every row would take seconds).
    const int64_t distinct = 16;
    std::vector<uint8_t> q(size_t(rb * distinct));
    std::vector<float> row(static_cast<size_t>(cols));
    for (int64_t r = 0; r < distinct; ++r) {
      for (int64_t i = 0; i < cols; ++i) row[size_t(i)] = std::cos(0.011f * float(i * (r + 3))) * 0.02f;
      cpu::quantize_row(type, row.data(), q.data() + r * rb, cols);
    }
    auto* wb = static_cast<uint8_t*>(buf);
    for (int64_t r = 0; r < rows; ++r) std::memcpy(wb + r * rb, q.data() + (r % distinct) * rb, size_t(rb));
    std::vector<float> out(static_cast<size_t>(rows));
    double best = 0;
    for (int rep = 0; rep < o.repeats; ++rep) {
      auto [b, dt] = run_bound(topo, node->cpuset, T, [&](int t) {
        const int64_t r0 = rows * t / T, r1 = rows * (t + 1) / T;
        cpu::matvec_q8_1(type, wb + r0 * rb, r1 - r0, cols, act.data(), out.data() + r0, 1);
      });
      cpu_bound = cpu_bound && b;
      best = std::max(best, double(rows * rb) / dt / 1e9);
    }
    DS4_CHECK(std::isfinite(out[0]) && std::isfinite(out[size_t(rows - 1)]));
    r.expert_gbps[name] = best;
  }
  if (hw_alloc) hwloc_free(topo, buf, bytes);
  else std::free(buf);
  r.bound = mem_bound && cpu_bound;
  return r;
}

Result<NvmeProbe> probe_nvme(const HwProbeOptions& o) {
  NvmeProbe r;
  r.ran = true;
  r.dir = o.nvme_dir;
  std::string path = o.nvme_dir + "/ds4-probe-XXXXXX";
  std::vector<char> tmpl(path.begin(), path.end());
  tmpl.push_back('\0');
  const int fd = mkstemp(tmpl.data());
  if (fd < 0) return Error{"probe: cannot create a temporary file in " + o.nvme_dir + ": " + std::strerror(errno) + " (choose a writable folder with plan --probe-dir DIR)"};
  path = tmpl.data();
  struct Remove {
    std::string p;
    const std::function<void(const std::string&, bool)>& hook;
    ~Remove() {
      if (hook) hook(p, false);
      ::unlink(p.c_str());
    }
  } remove_file{path, o.on_temp_file};
  if (o.on_temp_file) o.on_temp_file(path, true);
  const size_t chunk = size_t(4) << 20;
  const uint64_t bytes = (uint64_t(o.nvme_bytes) / chunk) * chunk;
  std::vector<uint8_t> data(chunk);
  for (size_t i = 0; i < chunk; ++i) data[i] = uint8_t(i * 131 + 7);
  for (uint64_t off = 0; off < bytes; off += chunk)
    if (::pwrite(fd, data.data(), chunk, off_t(off)) != ssize_t(chunk)) {
      const std::string e = std::strerror(errno);
      ::close(fd);
      return Error{"probe: writing " + path + " failed: " + e};
    }
  ::fsync(fd);
  ::posix_fadvise(fd, 0, off_t(bytes), POSIX_FADV_DONTNEED);  // buffered fallback must not read the page cache
  ::close(fd);
  staging::ReaderOptions ro;
  staging::apply_reader_env(&ro);
  DS4_TRY(auto reader, staging::NvmeReader::open({path}, ro));
  r.backend = staging::reader_backend_name(reader->backend());
  r.reason = reader->backend_reason();
  std::vector<staging::ReadRequest> reqs;
  for (uint64_t off = 0; off < bytes; off += chunk) reqs.push_back({0, off, chunk});
  uint64_t got = 0, sum = 0;
  const auto t0 = Clock::now();
  DS4_TRY_VOID(reader->read(reqs, [&](size_t, uint64_t, const uint8_t* d, uint64_t n) {
    got += n;
    sum += d[0];
  }));
  const double dt = seconds_since(t0);
  if (got != bytes) return Error{"probe: read " + std::to_string(got) + " of " + std::to_string(bytes) + " bytes of " + path};
  (void)sum;
  r.direct = reader->file_direct(0);
  r.bytes = int64_t(bytes);
  r.read_gbps = double(bytes) / dt / 1e9;
  return r;
}

}  // namespace

Result<HwProbeResult> probe_hw_profile(const HwProbeOptions& o) {
  if (o.mem_bytes < (int64_t(16) << 20)) return Error{"probe: memory buffer must be >= 16 MiB"};
  if (o.threads < 0 || o.repeats < 1) return Error{"probe: threads must be >= 0 and repeats >= 1"};
  if (o.nvme_bytes != 0 && o.nvme_bytes < (int64_t(8) << 20)) return Error{"probe: NVMe file must be >= 8 MiB (or 0 to skip)"};
  if (o.h2d_bytes < 0) return Error{"probe: H2D copy size must be >= 0 (0 = skip GPUs)"};
  // Starts from the discovered host profile (capacities, NVMe locality, estimates), replaces rates.
  DS4_TRY(Topology topo_info, discover_topology());
  HwProbeResult r;
  DS4_TRY(r.gpu, probe_gpu_links(topo_info, uint64_t(o.h2d_bytes), std::max(3, o.repeats)));
  DS4_TRY(HwProfile p, discover_host_profile(topo_info));
  hwloc_topology_t topo;
  if (hwloc_topology_init(&topo) != 0 || hwloc_topology_load(topo) != 0) return Error{"hwloc: topology load failed"};
  const int n_nodes = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE);
  for (int i = 0; i < n_nodes; ++i) {
    auto np = probe_node(topo, hwloc_get_obj_by_type(topo, HWLOC_OBJ_NUMANODE, unsigned(i)), o);
    if (!np) {
      hwloc_topology_destroy(topo);
      return np.error();
    }
    r.nodes.push_back(*np);
  }
  hwloc_topology_destroy(topo);
  double min_copy = 0;
  for (const auto& m : r.nodes) {
    const int idx = p.node_index(m.node);
    if (idx < 0) continue;
    auto& n = p.nodes[size_t(idx)];
    n.mem_read_gbps = m.read_gbps;
    n.cpu_expert_gbps.clear();
    double slowest = 0;
    for (const auto& [name, g] : m.expert_gbps) {
      n.cpu_expert_gbps[name] = g;
      slowest = slowest == 0 ? g : std::min(slowest, g);
    }
    n.cpu_expert_gbps["default"] = slowest > 0 ? slowest : 0.5 * m.read_gbps;
    min_copy = min_copy == 0 ? m.copy_gbps : std::min(min_copy, m.copy_gbps);
  }
  p.pageable_h2d_gbps = min_copy;  // without a GPU figure: a pageable copy is at best a host memcpy
  if (r.gpu.probed) apply_gpu_link_profile(r.gpu.profile, &p);  // measured pageable H2D replaces it
  if (o.nvme_bytes > 0) {
    DS4_TRY(r.nvme, probe_nvme(o));
    NvmeProfile nv;
    nv.name = "probed file read in " + r.nvme.dir + " (" + r.nvme.backend + (r.nvme.direct ? ", O_DIRECT)" : ", buffered)");
    nv.numa_node = p.nvme.empty() ? p.nodes[0].id : p.nvme[0].numa_node;
    nv.read_gbps = r.nvme.read_gbps;
    p.nvme = {nv};
  }
  char desc[768];
  std::snprintf(desc, sizeof desc,
                "Probed by `ds4-offload plan --probe`: per-node streaming read and memcpy (%lld MiB, %s), NVMe %s. "
                "CPU expert rate: %s. Estimated: 16 GFLOP/s per core for prefill, latencies, all-reduce%s%s.",
                (long long)(o.mem_bytes >> 20),
                std::all_of(r.nodes.begin(), r.nodes.end(), [](const NodeProbe& m) { return m.bound; })
                    ? "threads+memory bound per node" : "binding refused on some node",
                o.nvme_bytes > 0 ? "file read measured through the staging reader" : "not probed (estimate)",
                r.nodes.empty() || r.nodes[0].expert_gbps.empty()
                    ? "estimated as 50% of read"
                    : "measured matvec_q8_1 per type (4096 columns, bound threads), default = slowest type",
                r.gpu.probed && r.gpu.profile.inter_socket_gbps > 0 ? "" : ", inter-socket cap",
                r.gpu.probed ? "" : "; pageable_h2d = host memcpy (no GPU probed)");
  p.name = "probed machine";
  p.description = std::string(desc) + " " + describe_gpu_links(r.gpu);
  DS4_TRY_VOID(validate_hw_profile(p, "probed profile"));
  r.profile = std::move(p);
  return r;
}

std::string format_probe(const HwProbeResult& r) {
  std::string s;
  char line[512];
  for (const auto& m : r.nodes) {
    std::snprintf(line, sizeof line, "node %d: %d threads%s  read %.2f GB/s  memcpy %.2f GB/s\n", m.node, m.threads,
                  m.bound ? " (bound)" : " (unbound)", m.read_gbps, m.copy_gbps);
    s += line;
    if (!m.expert_gbps.empty()) {
      s += "  expert matvec GB/s:";
      for (const auto& [name, g] : m.expert_gbps) {
        std::snprintf(line, sizeof line, " %s %.2f", name.c_str(), g);
        s += line;
      }
      s += "\n";
    }
  }
  if (r.nvme.ran) {
    std::snprintf(line, sizeof line, "nvme: %s, %lld MiB, backend %s%s: %.2f GB/s (%s)\n", r.nvme.dir.c_str(),
                  (long long)(r.nvme.bytes >> 20), r.nvme.backend.c_str(), r.nvme.direct ? " O_DIRECT" : " buffered",
                  r.nvme.read_gbps, r.nvme.reason.c_str());
    s += line;
  } else {
    s += "nvme: not probed\n";
  }
  if (!r.gpu.probed) {
    s += "gpu: none probed: " + r.gpu.why_not + (r.gpu.hwloc_gpus ? "" : " (hwloc sees no GPU)") + "\n";
    return s;
  }
  for (const auto& l : r.gpu.raw.links) {
    const std::string from = l.numa_node >= 0 ? "node " + std::to_string(l.numa_node) : "unbound memory";
    std::snprintf(line, sizeof line, "gpu %d %s (%s, %.1f GiB) from %s: pinned %.2f GB/s  pageable %.2f GB/s\n", l.gpu,
                  l.name.c_str(), l.pci_bus_id.c_str(), double(l.vram_bytes) / double(int64_t(1) << 30), from.c_str(),
                  l.pinned_gbps, l.pageable_gbps);
    s += line;
  }
  std::snprintf(line, sizeof line, "gpu: all %zu GPU(s) at once (pinned): %.2f GB/s\n", r.gpu.profile.gpus.size(),
                r.gpu.raw.all_gpus_gbps);
  s += line;
  for (const auto& g : r.gpu.profile.gpus) {
    std::snprintf(line, sizeof line, "gpu %s: node %d, h2d %.2f GB/s (local pinned)\n", g.pci_bus_id.c_str(),
                  g.numa_node, g.h2d_gbps);
    s += line;
  }
  for (const auto& n : r.gpu.profile.notes) s += "gpu note: " + n + "\n";
  return s;
}

}  // namespace ds4::placement

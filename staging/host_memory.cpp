// staging/host_memory.cpp — see host_memory.h.
#include "staging/host_memory.h"

#include <hwloc.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>

namespace ds4::staging {

PinOps mlock_pin_ops() {
  PinOps o;
  o.name = "mlock";
  o.kind = PinKind::Mlock;
  o.pin = [](void* p, uint64_t n) -> Result<void> {
    if (mlock(p, n) != 0)
      return Error{"mlock of " + format_bytes(n) + " failed: " + std::strerror(errno)};
    return ok();
  };
  o.unpin = [](void* p, uint64_t n) { munlock(p, n); };
  return o;
}

#ifndef DS4_HAVE_CUDA
PinOps default_pin_ops() { return mlock_pin_ops(); }
bool have_cuda_pinning() { return false; }
bool pin_error_pending() { return false; }
#endif

Result<std::vector<PinnedChunk>> pin_in_chunks(uint8_t* base, std::span<const uint64_t> slab_offsets,
                                               uint64_t total, uint64_t max_chunk, const PinOps& ops,
                                               PinStats* stats) {
  DS4_CHECK(max_chunk > 0);
  DS4_CHECK(slab_offsets.empty() || slab_offsets.front() == 0);
  PinStats local;
  PinStats& st = stats ? *stats : local;
  std::vector<PinnedChunk> done;
  auto rollback = [&]() {
    for (auto it = done.rbegin(); it != done.rend(); ++it) ops.unpin(base + it->offset, it->bytes);
    done.clear();
  };
  // Boundaries: slab starts plus the end.
  std::vector<uint64_t> bounds(slab_offsets.begin(), slab_offsets.end());
  if (bounds.empty()) bounds.push_back(0);
  bounds.push_back(total);
  uint64_t limit = max_chunk;
  size_t i = 0;  // index of the slab where the next chunk starts
  while (i + 1 < bounds.size()) {
    // Extend over whole slabs while within the limit; always at least one slab.
    size_t j = i + 1;
    while (j + 1 < bounds.size() && bounds[j + 1] - bounds[i] <= limit) ++j;
    const uint64_t off = bounds[i], n = bounds[j] - bounds[i];
    ++st.attempts;
    Result<void> r = ops.pin(base + off, n);
    if (r) {
      done.push_back({off, n});
      i = j;
      continue;
    }
    ++st.failures;
    if (ops.clear_error) ops.clear_error();
    if (j == i + 1) {  // a single slab cannot be pinned: give up, undo everything
      rollback();
      st.final_chunk_limit = limit;
      return Error{ops.name + ": pinning bytes [" + std::to_string(off) + ", " + std::to_string(off + n) +
                   ") failed even as a single slab (" + r.error().message + "); rolled back " +
                   "all chunks"};
    }
    limit = std::max<uint64_t>(1, std::min(limit, n) / 2);
    ++st.halvings;
  }
  st.final_chunk_limit = limit;
  return done;
}

namespace {

std::mutex g_topo_mutex;
hwloc_topology_t g_topo = nullptr;

hwloc_topology_t topology() {
  std::lock_guard<std::mutex> lk(g_topo_mutex);
  if (!g_topo) {
    hwloc_topology_t t;
    if (hwloc_topology_init(&t) != 0) return nullptr;
    if (hwloc_topology_load(t) != 0) {
      hwloc_topology_destroy(t);
      return nullptr;
    }
    g_topo = t;
  }
  return g_topo;
}

uint64_t page_size() { return static_cast<uint64_t>(sysconf(_SC_PAGESIZE)); }

}  // namespace

int numa_node_count() {
  hwloc_topology_t t = topology();
  if (!t) return 1;
  const int n = hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_NUMANODE);
  return n > 0 ? n : 1;
}

Result<HostRegion> HostRegion::allocate(uint64_t bytes, int numa_node) {
  HostRegion r;
  const uint64_t pg = page_size();
  r.bytes_ = (std::max<uint64_t>(bytes, 1) + pg - 1) / pg * pg;
  r.node_ = numa_node;
  hwloc_topology_t t = numa_node >= 0 ? topology() : nullptr;
  hwloc_obj_t node = t ? hwloc_get_obj_by_type(t, HWLOC_OBJ_NUMANODE, static_cast<unsigned>(numa_node)) : nullptr;
  if (numa_node >= 0 && t && !node)
    return Error{"host region: NUMA node " + std::to_string(numa_node) + " does not exist (hwloc sees " +
                 std::to_string(numa_node_count()) + ")"};
  if (node) {
    void* p = hwloc_alloc_membind(t, r.bytes_, node->nodeset, HWLOC_MEMBIND_BIND,
                                  HWLOC_MEMBIND_BYNODESET | HWLOC_MEMBIND_NOCPUBIND);
    if (p) {
      r.data_ = static_cast<uint8_t*>(p);
      r.hwloc_owned_ = true;
      r.placement_ = "bind";
      std::memset(r.data_, 0, r.bytes_);
      return r;
    }
  }
  void* p = mmap(nullptr, r.bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    return Error{"host region: mmap of " + format_bytes(r.bytes_) + " failed: " + std::strerror(errno)};
  r.data_ = static_cast<uint8_t*>(p);
  if (node) {
    // First touch from a thread running on the node's CPUs puts the pages there.
    hwloc_cpuset_t old = hwloc_bitmap_alloc();
    const bool have_old = hwloc_get_cpubind(t, old, HWLOC_CPUBIND_THREAD) == 0;
    const bool bound = hwloc_set_cpubind(t, node->cpuset, HWLOC_CPUBIND_THREAD) == 0;
    for (uint64_t o = 0; o < r.bytes_; o += pg) r.data_[o] = 0;
    if (bound && have_old) hwloc_set_cpubind(t, old, HWLOC_CPUBIND_THREAD);
    hwloc_bitmap_free(old);
    r.placement_ = bound ? "first-touch" : "none";
  }
  return r;
}

HostRegion::HostRegion(HostRegion&& o) noexcept { *this = std::move(o); }

HostRegion& HostRegion::operator=(HostRegion&& o) noexcept {
  if (this != &o) {
    release();
    data_ = std::exchange(o.data_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
    node_ = o.node_;
    placement_ = o.placement_;
    hwloc_owned_ = o.hwloc_owned_;
    chunks_ = std::move(o.chunks_);
    o.chunks_.clear();
    ops_ = std::move(o.ops_);
  }
  return *this;
}

HostRegion::~HostRegion() { release(); }

void HostRegion::release() {
  if (!data_) return;
  for (auto it = chunks_.rbegin(); it != chunks_.rend(); ++it) ops_.unpin(data_ + it->offset, it->bytes);
  chunks_.clear();
  if (hwloc_owned_)
    hwloc_free(topology(), data_, bytes_);
  else
    munmap(data_, bytes_);
  data_ = nullptr;
  bytes_ = 0;
}

Result<void> HostRegion::pin(std::span<const uint64_t> slab_offsets, uint64_t max_chunk, const PinOps& ops,
                             PinStats* stats) {
  DS4_CHECK(chunks_.empty());
  DS4_TRY(chunks_, pin_in_chunks(data_, slab_offsets, bytes_, max_chunk, ops, stats));
  ops_ = ops;
  return ok();
}

}  // namespace ds4::staging

// staging/host_memory.h — host memory for expert slabs: a region bound to a NUMA node (hwloc,
// first-touch where binding is unavailable), pinned in chunks that are cut only on slab
// boundaries (<= 64 GiB each; halve and retry on failure; roll back on final failure).
//
// Why chunks: one huge cudaHostRegister is known to fail above about 512 GiB, and intermittently
// at 32 GiB, leaving a sticky CUDA error (issue 5); mlock is bounded by RLIMIT_MEMLOCK.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "ds4/result.h"
#include "staging/memory_limits.h"

namespace ds4::staging {

/// Pinning primitives, injectable so tests can make one fail. `pin` registers [p, p+bytes);
/// `unpin` undoes one successful pin of exactly that range; `clear_error` resets any sticky error
/// state after a failed pin (CUDA: cudaGetLastError), may be empty.
struct PinOps {
  std::string name;  // "mlock", "cudaHostRegister"
  PinKind kind = PinKind::Mlock;
  std::function<Result<void>(void* p, uint64_t bytes)> pin;
  std::function<void(void* p, uint64_t bytes)> unpin;
  std::function<void()> clear_error;
};

/// mlock/munlock.
PinOps mlock_pin_ops();
/// cudaHostRegister/cudaHostUnregister when built with CUDA and a device is present; otherwise
/// mlock_pin_ops().
PinOps default_pin_ops();
/// True when this build has the CUDA pinning path (staging/cuda/host_pin_cuda.cpp) and a device.
bool have_cuda_pinning();
/// True when a CUDA error is pending (cudaPeekAtLastError); always false without CUDA. Used to
/// check that a failed registration left no sticky error behind.
bool pin_error_pending();

/// One pinned chunk: [offset, offset+bytes) of the region.
struct PinnedChunk {
  uint64_t offset = 0, bytes = 0;
};

/// Statistics of one pin_in_chunks call.
struct PinStats {
  int attempts = 0;   // pin calls made
  int failures = 0;   // pin calls that failed
  int halvings = 0;   // times the chunk limit was halved
  uint64_t final_chunk_limit = 0;
};

/// Pins [base, base+total) in chunks. `slab_offsets` are the ascending start offsets of the slabs
/// in the region (first is 0); a chunk always ends on a slab boundary or at `total`, and holds at
/// most `max_chunk` bytes unless a single slab is larger (then it is one chunk). When a pin fails
/// the limit is halved and the same position retried; when even a single slab cannot be pinned,
/// every chunk pinned so far is unpinned (rollback), clear_error is called, and the error returned.
Result<std::vector<PinnedChunk>> pin_in_chunks(uint8_t* base, std::span<const uint64_t> slab_offsets,
                                               uint64_t total, uint64_t max_chunk, const PinOps& ops,
                                               PinStats* stats = nullptr);

/// Number of NUMA nodes hwloc sees (>= 1).
int numa_node_count();

/// A page-aligned host allocation, optionally bound to a NUMA node and pinned. Move-only.
class HostRegion {
 public:
  /// Allocates `bytes` (rounded up to the page size) zero-filled. `numa_node` >= 0 binds it to
  /// that node with hwloc_alloc_membind; where that is refused the memory is mmap'ed and touched
  /// by this thread while it is bound to the node's CPUs (first-touch); numa_node < 0: plain mmap.
  /// Error when the memory cannot be allocated.
  static Result<HostRegion> allocate(uint64_t bytes, int numa_node);
  HostRegion() = default;
  HostRegion(HostRegion&& o) noexcept;
  HostRegion& operator=(HostRegion&& o) noexcept;
  ~HostRegion();

  uint8_t* data() const { return data_; }
  uint64_t bytes() const { return bytes_; }
  int numa_node() const { return node_; }
  /// "bind" (hwloc membind), "first-touch", or "none".
  const char* placement() const { return placement_; }
  bool pinned() const { return !chunks_.empty(); }
  /// Pins the region with pin_in_chunks (slab boundaries as there). On error nothing stays pinned.
  Result<void> pin(std::span<const uint64_t> slab_offsets, uint64_t max_chunk, const PinOps& ops,
                   PinStats* stats = nullptr);

 private:
  void release();
  uint8_t* data_ = nullptr;
  uint64_t bytes_ = 0;
  int node_ = -1;
  const char* placement_ = "none";
  bool hwloc_owned_ = false;
  std::vector<PinnedChunk> chunks_;
  PinOps ops_;
};

/// 64 GiB: the largest chunk registered in one call.
inline constexpr uint64_t kMaxPinChunk = uint64_t(64) << 30;

}  // namespace ds4::staging

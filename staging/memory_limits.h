// staging/memory_limits.h — the limits that decide how host expert slabs may be allocated:
// RLIMIT_MEMLOCK (mlock and io_uring fixed buffers count against it), the cgroup memory limit
// (v2 /sys/fs/cgroup/memory.max, v1 memory/memory.limit_in_bytes) and MemAvailable
// (/proc/meminfo), and the per-range pinned/pageable decision made from them.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ds4/result.h"

namespace ds4::staging {

/// "No limit" for the byte limits below.
inline constexpr uint64_t kNoLimit = UINT64_MAX;

/// System limits read at store creation (bytes).
struct MemoryLimits {
  uint64_t memlock_soft = kNoLimit;   // RLIMIT_MEMLOCK soft limit
  uint64_t memlock_hard = kNoLimit;   // RLIMIT_MEMLOCK hard limit
  uint64_t cgroup_limit = kNoLimit;   // cgroup memory limit ("max" -> kNoLimit)
  uint64_t cgroup_usage = 0;          // cgroup current usage (0 when unknown)
  uint64_t mem_available = kNoLimit;  // MemAvailable
  std::string cgroup_source;          // file the limit came from, or "none"
  /// Bytes that may still be allocated: min(MemAvailable, cgroup limit - usage).
  uint64_t allocatable() const;
};

/// Reads the limits of this process now. Never fails: an unreadable source stays kNoLimit and
/// cgroup_source says "none".
MemoryLimits read_memory_limits();

/// Parses the MemAvailable line of /proc/meminfo text ("MemAvailable:  123 kB") into bytes.
Result<uint64_t> parse_meminfo_available(std::string_view meminfo);
/// Parses a cgroup limit file's content: "max" -> kNoLimit, else a decimal byte count. cgroup v1
/// reports "no limit" as a huge page-rounded number (>= 2^62), which also maps to kNoLimit.
Result<uint64_t> parse_cgroup_limit(std::string_view text);

/// "1.50 GiB", "64.0 KiB", "unlimited" for kNoLimit.
std::string format_bytes(uint64_t bytes);

/// Host placement of one range (a group of slabs).
enum class HostPolicy { Pinned, Pageable };

/// The decision for a list of ranges.
struct HostPlan {
  std::vector<HostPolicy> policy;  // one per input range
  uint64_t pinned_bytes = 0, pageable_bytes = 0;
  /// One line with the numbers when any range falls back to pageable (empty otherwise).
  std::string fallback_line;
};

/// How pinning is done: mlock counts against RLIMIT_MEMLOCK; CUDA pinning (cudaHostRegister /
/// cudaHostAlloc) is not limited by it in the NVIDIA driver but by physical memory.
enum class PinKind { None, Mlock, Cuda };

/// Chooses pinned or pageable per range, in order, so that pinned bytes stay within the pin
/// budget: for Mlock the RLIMIT_MEMLOCK soft limit, and for both kinds at most `max_pinned_fraction`
/// of allocatable() (pinned pages cannot be reclaimed). Error when the sum of all ranges exceeds
/// allocatable() (the message gives needed bytes, MemAvailable and the cgroup limit).
Result<HostPlan> plan_host_ranges(const std::vector<uint64_t>& range_bytes, const MemoryLimits& lim,
                                  PinKind pin, double max_pinned_fraction = 0.9);

}  // namespace ds4::staging

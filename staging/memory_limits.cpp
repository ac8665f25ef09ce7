// staging/memory_limits.cpp — see memory_limits.h.
#include "staging/memory_limits.h"

#include <sys/resource.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <fstream>
#include <sstream>

namespace ds4::staging {
namespace {

bool read_text(const std::string& path, std::string* out) {
  std::ifstream f(path);
  if (!f) return false;
  std::stringstream ss;
  ss << f.rdbuf();
  *out = ss.str();
  return true;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\n')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\n')) s.remove_suffix(1);
  return s;
}

uint64_t rlim_bytes(rlim_t v) { return v == RLIM_INFINITY ? kNoLimit : static_cast<uint64_t>(v); }

}  // namespace

uint64_t MemoryLimits::allocatable() const {
  uint64_t a = mem_available;
  if (cgroup_limit != kNoLimit) {
    const uint64_t head = cgroup_limit > cgroup_usage ? cgroup_limit - cgroup_usage : 0;
    a = std::min(a, head);
  }
  return a;
}

Result<uint64_t> parse_meminfo_available(std::string_view meminfo) {
  const size_t p = meminfo.find("MemAvailable:");
  if (p == std::string_view::npos) return Error{"/proc/meminfo: expected a MemAvailable line, found none"};
  std::string_view rest = trim(meminfo.substr(p + 13));
  uint64_t kb = 0;
  auto [end, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), kb);
  if (ec != std::errc())
    return Error{"/proc/meminfo: MemAvailable: expected a number of kB, found '" +
                 std::string(rest.substr(0, rest.find('\n'))) + "'"};
  (void)end;
  return kb * 1024;
}

Result<uint64_t> parse_cgroup_limit(std::string_view text) {
  std::string_view t = trim(text);
  if (t == "max") return kNoLimit;
  uint64_t v = 0;
  auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
  if (ec != std::errc() || end != t.data() + t.size())
    return Error{"cgroup memory limit: expected 'max' or a byte count, found '" + std::string(t) + "'"};
  if (v >= (uint64_t(1) << 62)) return kNoLimit;  // cgroup v1 "unlimited" (PAGE_COUNTER_MAX * page)
  return v;
}

MemoryLimits read_memory_limits() {
  MemoryLimits m;
  rlimit rl{};
  if (getrlimit(RLIMIT_MEMLOCK, &rl) == 0) {
    m.memlock_soft = rlim_bytes(rl.rlim_cur);
    m.memlock_hard = rlim_bytes(rl.rlim_max);
  }
  std::string text;
  m.cgroup_source = "none";
  // cgroup v2 (unified), then v1. The path of this process's own cgroup is not resolved: inside a
  // container the namespace root is the container's cgroup, which is the common case.
  const char* limit_files[] = {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"};
  const char* usage_files[] = {"/sys/fs/cgroup/memory.current", "/sys/fs/cgroup/memory/memory.usage_in_bytes"};
  for (int i = 0; i < 2; ++i) {
    if (!read_text(limit_files[i], &text)) continue;
    Result<uint64_t> v = parse_cgroup_limit(text);
    if (!v) continue;
    m.cgroup_limit = *v;
    m.cgroup_source = limit_files[i];
    if (read_text(usage_files[i], &text)) {
      Result<uint64_t> u = parse_cgroup_limit(text);
      if (u && *u != kNoLimit) m.cgroup_usage = *u;
    }
    break;
  }
  if (read_text("/proc/meminfo", &text)) {
    Result<uint64_t> a = parse_meminfo_available(text);
    if (a) m.mem_available = *a;
  }
  return m;
}

std::string format_bytes(uint64_t b) {
  if (b == kNoLimit) return "unlimited";
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(b);
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  char buf[64];
  if (u == 0)
    std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(b));
  else
    std::snprintf(buf, sizeof buf, "%.2f %s", v, units[u]);
  return buf;
}

Result<HostPlan> plan_host_ranges(const std::vector<uint64_t>& range_bytes, const MemoryLimits& lim,
                                  PinKind pin, double max_pinned_fraction) {
  HostPlan plan;
  uint64_t total = 0;
  for (uint64_t b : range_bytes) total += b;
  const uint64_t avail = lim.allocatable();
  const std::string numbers = "RLIMIT_MEMLOCK " + format_bytes(lim.memlock_soft) + ", cgroup limit " +
                              format_bytes(lim.cgroup_limit) + " (" + lim.cgroup_source + "), MemAvailable " +
                              format_bytes(lim.mem_available);
  if (total > avail)
    return Error{"host expert tier: needs " + format_bytes(total) + " of host memory, only " +
                 format_bytes(avail) + " can be allocated (" + numbers + "); use the nvme tier"};
  uint64_t budget = 0;
  std::string why;
  if (pin == PinKind::None) {
    why = "pinning not requested";
  } else {
    budget = avail == kNoLimit ? kNoLimit : static_cast<uint64_t>(static_cast<double>(avail) * max_pinned_fraction);
    if (pin == PinKind::Mlock && lim.memlock_soft < budget) {
      budget = lim.memlock_soft;
      why = "RLIMIT_MEMLOCK";
    } else {
      why = "available memory";
    }
  }
  uint64_t pinned = 0;
  size_t n_pageable = 0;
  for (uint64_t b : range_bytes) {
    if (pin != PinKind::None && pinned + b <= budget) {
      plan.policy.push_back(HostPolicy::Pinned);
      pinned += b;
    } else {
      plan.policy.push_back(HostPolicy::Pageable);
      plan.pageable_bytes += b;
      ++n_pageable;
    }
  }
  plan.pinned_bytes = pinned;
  if (n_pageable > 0 && pin != PinKind::None)
    plan.fallback_line = "ds4 staging: host experts: " + std::to_string(n_pageable) + " of " +
                         std::to_string(range_bytes.size()) + " ranges pageable (" +
                         format_bytes(plan.pageable_bytes) + " of " + format_bytes(total) + "), limited by " +
                         why + ": " + numbers + ", pin budget " + format_bytes(budget);
  return plan;
}

}  // namespace ds4::staging

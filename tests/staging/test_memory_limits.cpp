// tests/staging/test_memory_limits.cpp — parsing of /proc/meminfo and cgroup limit files, and the
// pinned/pageable decision per range.
#include <gtest/gtest.h>

#include "staging/memory_limits.h"

namespace ds4::staging {
namespace {

constexpr uint64_t KiB = 1024, MiB = KiB * 1024, GiB = MiB * 1024;

TEST(MemoryLimits, ParsesMeminfo) {
  auto a = parse_meminfo_available("MemTotal:       32000 kB\nMemFree:  100 kB\nMemAvailable:   1000 kB\n");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(*a, 1000 * KiB);
  EXPECT_FALSE(parse_meminfo_available("MemTotal: 5 kB\n").ok());
  EXPECT_FALSE(parse_meminfo_available("MemAvailable: lots\n").ok());
}

TEST(MemoryLimits, ParsesCgroupLimit) {
  EXPECT_EQ(*parse_cgroup_limit("max\n"), kNoLimit);
  EXPECT_EQ(*parse_cgroup_limit("1073741824\n"), GiB);
  EXPECT_EQ(*parse_cgroup_limit("9223372036854771712\n"), kNoLimit);  // cgroup v1 "unlimited"
  auto bad = parse_cgroup_limit("12G");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("12G"), std::string::npos);
}

TEST(MemoryLimits, ReadsThisProcess) {
  const MemoryLimits m = read_memory_limits();
  EXPECT_LE(m.memlock_soft, m.memlock_hard);
  EXPECT_GT(m.mem_available, 0u);
  EXPECT_FALSE(m.cgroup_source.empty());
  std::printf("memlock %s / %s, cgroup %s (%s), MemAvailable %s\n", format_bytes(m.memlock_soft).c_str(),
              format_bytes(m.memlock_hard).c_str(), format_bytes(m.cgroup_limit).c_str(), m.cgroup_source.c_str(),
              format_bytes(m.mem_available).c_str());
}

TEST(MemoryLimits, AllocatableIsMinOfCgroupHeadroomAndAvailable) {
  MemoryLimits m;
  m.mem_available = 10 * GiB;
  m.cgroup_limit = 8 * GiB;
  m.cgroup_usage = 3 * GiB;
  EXPECT_EQ(m.allocatable(), 5 * GiB);
  m.cgroup_limit = kNoLimit;
  EXPECT_EQ(m.allocatable(), 10 * GiB);
}

TEST(HostPlan, MemlockLimitsPinnedRangesInOrder) {
  MemoryLimits m;
  m.memlock_soft = m.memlock_hard = 64 * KiB;
  m.mem_available = 1 * GiB;
  auto p = plan_host_ranges({32 * KiB, 32 * KiB, 100 * KiB, 16 * KiB}, m, PinKind::Mlock);
  ASSERT_TRUE(p.ok()) << p.error().message;
  ASSERT_EQ(p->policy.size(), 4u);
  EXPECT_EQ(p->policy[0], HostPolicy::Pinned);
  EXPECT_EQ(p->policy[1], HostPolicy::Pinned);
  EXPECT_EQ(p->policy[2], HostPolicy::Pageable);
  EXPECT_EQ(p->policy[3], HostPolicy::Pageable);  // budget exhausted: 64 KiB used
  EXPECT_EQ(p->pinned_bytes, 64 * KiB);
  EXPECT_EQ(p->pageable_bytes, 116 * KiB);
  EXPECT_NE(p->fallback_line.find("RLIMIT_MEMLOCK 64.00 KiB"), std::string::npos) << p->fallback_line;
  EXPECT_NE(p->fallback_line.find("MemAvailable 1.00 GiB"), std::string::npos) << p->fallback_line;
  EXPECT_EQ(p->fallback_line.find('\n'), std::string::npos);
}

TEST(HostPlan, CudaPinningIgnoresMemlockButNotAvailableMemory) {
  MemoryLimits m;
  m.memlock_soft = 64 * KiB;
  m.mem_available = 100 * MiB;
  auto p = plan_host_ranges({40 * MiB, 40 * MiB, 15 * MiB}, m, PinKind::Cuda, 0.9);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->policy[0], HostPolicy::Pinned);
  EXPECT_EQ(p->policy[1], HostPolicy::Pinned);
  EXPECT_EQ(p->policy[2], HostPolicy::Pageable);  // 95 MiB > 90% of 100 MiB
  EXPECT_NE(p->fallback_line.find("available memory"), std::string::npos) << p->fallback_line;
}

TEST(HostPlan, NoFallbackLineWhenEverythingFits) {
  MemoryLimits m;
  m.mem_available = 1 * GiB;
  auto p = plan_host_ranges({1 * MiB, 2 * MiB}, m, PinKind::Mlock);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->pinned_bytes, 3 * MiB);
  EXPECT_TRUE(p->fallback_line.empty());
}

TEST(HostPlan, TooLittleMemoryIsAnError) {
  MemoryLimits m;
  m.mem_available = 10 * GiB;
  m.cgroup_limit = 4 * GiB;
  auto p = plan_host_ranges({3 * GiB, 2 * GiB}, m, PinKind::Mlock);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.error().message.find("5.00 GiB"), std::string::npos) << p.error().message;
  EXPECT_NE(p.error().message.find("4.00 GiB"), std::string::npos) << p.error().message;
}

}  // namespace
}  // namespace ds4::staging

// tests/staging/test_host_memory.cpp — chunked pinning against injected pin functions (chunk
// limits on slab boundaries, halving after failure, rollback after final failure with the sticky
// error cleared), real mlock of a region, NUMA-bound allocation.
#include <gtest/gtest.h>

#include <linux/capability.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <map>
#include <numeric>

#include "staging/host_memory.h"

namespace ds4::staging {
namespace {

/// Fake pin backend: records pinned ranges, fails by rule, models a sticky error flag.
struct FakePinner {
  std::map<uint64_t, uint64_t> pinned;  // offset -> bytes
  uint8_t* base = nullptr;
  uint64_t fail_above = UINT64_MAX;     // pins larger than this fail
  uint64_t bad_offset = UINT64_MAX;     // pins covering this byte fail
  int pins = 0, unpins = 0, clears = 0;
  bool sticky = false;
  PinOps ops() {
    PinOps o;
    o.name = "fake";
    o.pin = [this](void* p, uint64_t n) -> Result<void> {
      EXPECT_FALSE(sticky) << "pin called while a previous error is still sticky";
      const uint64_t off = static_cast<uint64_t>(static_cast<uint8_t*>(p) - base);
      if (n > fail_above || (bad_offset >= off && bad_offset < off + n)) {
        sticky = true;
        return Error{"fake pin failure"};
      }
      ++pins;
      EXPECT_TRUE(pinned.emplace(off, n).second);
      return ok();
    };
    o.unpin = [this](void* p, uint64_t n) {
      const uint64_t off = static_cast<uint64_t>(static_cast<uint8_t*>(p) - base);
      auto it = pinned.find(off);
      ASSERT_NE(it, pinned.end());
      EXPECT_EQ(it->second, n);
      pinned.erase(it);
      ++unpins;
    };
    o.clear_error = [this] {
      sticky = false;
      ++clears;
    };
    return o;
  }
};

/// Slabs of sizes 4, 8, 4, 12, 4, 4, 8 KiB.
std::vector<uint64_t> slab_offsets(uint64_t* total) {
  const uint64_t sizes[] = {4, 8, 4, 12, 4, 4, 8};
  std::vector<uint64_t> offs;
  uint64_t o = 0;
  for (uint64_t s : sizes) {
    offs.push_back(o);
    o += s * 1024;
  }
  *total = o;
  return offs;
}

void expect_cover(const std::vector<PinnedChunk>& chunks, const std::vector<uint64_t>& offs, uint64_t total,
                  uint64_t limit) {
  uint64_t pos = 0;
  for (const PinnedChunk& c : chunks) {
    EXPECT_EQ(c.offset, pos);
    pos += c.bytes;
    const bool on_boundary = pos == total || std::find(offs.begin(), offs.end(), pos) != offs.end();
    EXPECT_TRUE(on_boundary) << "chunk ends inside a slab at " << pos;
    // Over the limit only when it is a single slab.
    if (c.bytes > limit) {
      auto it = std::find(offs.begin(), offs.end(), c.offset);
      ASSERT_NE(it, offs.end());
      const uint64_t next = (it + 1 == offs.end()) ? total : *(it + 1);
      EXPECT_EQ(next, c.offset + c.bytes);
    }
  }
  EXPECT_EQ(pos, total);
}

TEST(PinChunks, ChunksEndOnSlabBoundariesWithinTheLimit) {
  uint64_t total = 0;
  auto offs = slab_offsets(&total);
  std::vector<uint8_t> mem(total);
  FakePinner f;
  f.base = mem.data();
  PinStats st;
  auto r = pin_in_chunks(mem.data(), offs, total, 16 * 1024, f.ops(), &st);
  ASSERT_TRUE(r.ok()) << r.error().message;
  expect_cover(*r, offs, total, 16 * 1024);
  EXPECT_EQ(f.pinned.size(), r->size());
  EXPECT_EQ(st.failures, 0);
  // Greedy by whole slabs: {4+8+4}, {12+4}, {4+8} KiB.
  ASSERT_EQ(r->size(), 3u);
  EXPECT_EQ((*r)[0].bytes, 16u * 1024);
  EXPECT_EQ((*r)[1].bytes, 16u * 1024);
  EXPECT_EQ((*r)[2].bytes, 12u * 1024);
}

TEST(PinChunks, FailureHalvesAndRetries) {
  uint64_t total = 0;
  auto offs = slab_offsets(&total);
  std::vector<uint8_t> mem(total);
  FakePinner f;
  f.base = mem.data();
  f.fail_above = 12 * 1024;  // anything larger than 12 KiB fails
  PinStats st;
  auto r = pin_in_chunks(mem.data(), offs, total, 64 * 1024, f.ops(), &st);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_GT(st.halvings, 0);
  EXPECT_GT(st.failures, 0);
  EXPECT_EQ(f.clears, st.failures);  // every failure cleared the sticky error
  EXPECT_FALSE(f.sticky);
  for (const auto& c : *r) EXPECT_LE(c.bytes, 12u * 1024);
  expect_cover(*r, offs, total, 12 * 1024);
}

TEST(PinChunks, InjectedFailureMidRegistrationRollsBack) {
  uint64_t total = 0;
  auto offs = slab_offsets(&total);
  std::vector<uint8_t> mem(total);
  FakePinner f;
  f.base = mem.data();
  f.bad_offset = offs[4] + 100;  // slab 4 can never be pinned
  PinStats st;
  auto r = pin_in_chunks(mem.data(), offs, total, 8 * 1024, f.ops(), &st);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("rolled back"), std::string::npos) << r.error().message;
  EXPECT_GT(f.pins, 0);                 // some chunks were pinned before the failure ...
  EXPECT_EQ(f.unpins, f.pins);          // ... and all of them were undone
  EXPECT_TRUE(f.pinned.empty());
  EXPECT_FALSE(f.sticky);               // no sticky error left behind
  // The same region pins afterwards once the fault is gone.
  f.bad_offset = UINT64_MAX;
  auto again = pin_in_chunks(mem.data(), offs, total, 8 * 1024, f.ops(), &st);
  ASSERT_TRUE(again.ok());
  expect_cover(*again, offs, total, 8 * 1024);
}

TEST(PinChunks, SingleSlabLargerThanLimitIsOneChunk) {
  const uint64_t offs[] = {0, 4096, 4096 + 65536};
  const uint64_t total = 4096 + 65536 + 4096;
  std::vector<uint8_t> mem(total);
  FakePinner f;
  f.base = mem.data();
  auto r = pin_in_chunks(mem.data(), offs, total, 8192, f.ops());
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->size(), 3u);
  EXPECT_EQ((*r)[1].bytes, 65536u);
}

TEST(HostRegion, MlockPinsAndUnpins) {
  rlimit rl{};
  ASSERT_EQ(getrlimit(RLIMIT_MEMLOCK, &rl), 0);
  if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < (1u << 20)) GTEST_SKIP() << "RLIMIT_MEMLOCK below 1 MiB";
  auto r = HostRegion::allocate(1 << 20, -1);
  ASSERT_TRUE(r.ok()) << r.error().message;
  std::vector<uint64_t> offs;
  for (uint64_t o = 0; o < (1u << 20); o += 64 * 1024) offs.push_back(o);
  PinStats st;
  auto p = r->pin(offs, 256 * 1024, mlock_pin_ops(), &st);
  ASSERT_TRUE(p.ok()) << p.error().message;
  EXPECT_TRUE(r->pinned());
  EXPECT_EQ(st.attempts, 4);
  std::memset(r->data(), 0x5a, r->bytes());
  EXPECT_EQ(r->data()[r->bytes() - 1], 0x5a);
}

/// Drops CAP_IPC_LOCK from this process's effective set (root ignores RLIMIT_MEMLOCK otherwise).
bool drop_ipc_lock() {
  __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2] = {};
  if (syscall(SYS_capget, &hdr, data) != 0) return false;
  data[CAP_IPC_LOCK / 32].effective &= ~(1u << (CAP_IPC_LOCK % 32));
  return syscall(SYS_capset, &hdr, data) == 0;
}

TEST(HostRegion, RealMlockFailsUnder64KiBLimitAndRollsBack) {
  // In a child: lowered limit and dropped capability must not leak into other tests.
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    if (!drop_ipc_lock()) _exit(2);
    rlimit rl{64 * 1024, 64 * 1024};
    if (setrlimit(RLIMIT_MEMLOCK, &rl) != 0) _exit(3);
    // 48 KiB locked first, leaving 16 KiB of the limit.
    const uint64_t one[] = {0};
    auto small = HostRegion::allocate(48 * 1024, -1);
    if (!small.ok() || !small->pin(one, kMaxPinChunk, mlock_pin_ops()).ok()) _exit(4);
    // 1 MiB of 8 KiB slabs in 8 KiB chunks: two chunks lock, the third fails -> rollback.
    auto r = HostRegion::allocate(1 << 20, -1);
    if (!r.ok()) _exit(5);
    std::vector<uint64_t> offs;
    for (uint64_t o = 0; o < (1u << 20); o += 8 * 1024) offs.push_back(o);
    PinStats st;
    auto p = r->pin(offs, 8 * 1024, mlock_pin_ops(), &st);
    if (p.ok() || r->pinned()) _exit(6);
    if (p.error().message.find("mlock") == std::string::npos) _exit(7);
    if (st.attempts != 3 || st.failures != 1) _exit(8);
    // The rollback unlocked the two chunks: the remaining 16 KiB can be locked again.
    auto again = HostRegion::allocate(16 * 1024, -1);
    if (!again.ok() || !again->pin(one, kMaxPinChunk, mlock_pin_ops()).ok()) _exit(9);
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  if (WEXITSTATUS(status) == 2) GTEST_SKIP() << "cannot drop CAP_IPC_LOCK here";
  EXPECT_EQ(WEXITSTATUS(status), 0) << "child failed at check " << WEXITSTATUS(status);
}

TEST(HostRegion, NumaBoundAllocation) {
  const int nodes = numa_node_count();
  ASSERT_GE(nodes, 1);
  auto r = HostRegion::allocate(3 * 4096 + 5, 0);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->bytes(), 4u * 4096);
  EXPECT_EQ(r->numa_node(), 0);
  std::printf("NUMA nodes %d, node-0 region placement: %s\n", nodes, r->placement());
  EXPECT_TRUE(std::strcmp(r->placement(), "bind") == 0 || std::strcmp(r->placement(), "first-touch") == 0)
      << r->placement();
  for (uint64_t i = 0; i < r->bytes(); ++i) ASSERT_EQ(r->data()[i], 0);
  auto bad = HostRegion::allocate(4096, nodes + 3);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("does not exist"), std::string::npos);
}

}  // namespace
}  // namespace ds4::staging

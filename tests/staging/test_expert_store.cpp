// tests/staging/test_expert_store.cpp — make_expert_store for every tier returns, for every
// (layer, expert, projection), the same matrix as the zero-copy mmap store (type, shape, bytes);
// rank slices concatenate to the full matrix; a 64 KiB RLIMIT_MEMLOCK (forked child) yields the
// pageable host path with the fallback line and correct data; counters report bytes per tier.
#include <gtest/gtest.h>

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "gguf/gguf_file.h"
#include "gguf/gguf_writer.h"
#include "staging/expert_slabs.h"
#include "staging/expert_store.h"
#include "staging/store_options.h"
#include "staging_fixture.h"
#include "tests/support/test_env.h"

namespace ds4::staging {
namespace {

/// The reference: rows [e*out, (e+1)*out) of the merged tensor in the mmap.
dev::WeightMatrix reference(const gguf::GgufModel& m, int l, int e, ExpertProj p) {
  const char* names[3] = {"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"};
  const gguf::TensorInfo* t = m.find("blk." + std::to_string(l) + "." + names[static_cast<int>(p)] + ".weight");
  dev::WeightMatrix w;
  w.type = static_cast<GgmlType>(t->type);
  w.in = t->ne[0];
  w.out = t->ne[1];
  w.row_bytes = t->row_bytes();
  w.data = t->data + static_cast<uint64_t>(e) * static_cast<uint64_t>(w.out) * w.row_bytes;
  return w;
}

/// Empty string when equal, else what differs.
std::string compare(const dev::WeightMatrix& a, const dev::WeightMatrix& b) {
  if (a.type != b.type || a.in != b.in || a.out != b.out || a.row_bytes != b.row_bytes) return "shape/type differ";
  if (std::memcmp(a.data, b.data, static_cast<size_t>(a.out) * a.row_bytes) != 0) return "bytes differ";
  return "";
}

class StoreTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const auto dir = test::scratch_dir("staging_store");
    small_ = new std::string((dir / "experts.gguf").string());
    big_ = new std::string((dir / "experts_above_4g.gguf").string());
    ASSERT_EQ(test::write_expert_gguf(*small_, 0, 21), "");
    ASSERT_EQ(test::write_expert_gguf(*big_, 5, 22), "");
  }
  static void TearDownTestSuite() {
    delete small_;
    delete big_;
  }
  static std::string* small_;
  static std::string* big_;
};
std::string* StoreTest::small_ = nullptr;
std::string* StoreTest::big_ = nullptr;

/// MoE-like access: per layer a step of experts announced, then gate/up/down of each.
void check_all(ExpertStore& s, const gguf::GgufModel& m, bool announce) {
  ASSERT_EQ(s.expert_count(), test::kFxExperts);
  for (int round = 0; round < 3; ++round)
    for (int l = 0; l < test::kFxLayers; ++l) {
      std::vector<int> step;
      for (int k = 0; k < 6; ++k) step.push_back((k * 3 + round * 5 + l) % test::kFxExperts);
      std::sort(step.begin(), step.end());
      step.erase(std::unique(step.begin(), step.end()), step.end());
      if (announce) { ASSERT_TRUE(s.begin_step(l, step).ok()); }
      for (int e : step)
        for (int p = 0; p < 3; ++p) {
          auto w = s.get(l, e, static_cast<ExpertProj>(p));
          ASSERT_TRUE(w.ok()) << w.error().message;
          ASSERT_EQ(compare(*w, reference(m, l, e, static_cast<ExpertProj>(p))), "")
              << "layer " << l << " expert " << e << " proj " << p;
        }
      if (announce) s.end_step(l);
    }
}

TEST_F(StoreTest, EveryTierMatchesTheMmapSlices) {
  for (const std::string* path : {small_, big_}) {
    auto m = gguf::GgufModel::open(*path);
    ASSERT_TRUE(m.ok()) << m.error().message;
    for (ExpertTier t : {ExpertTier::Resident, ExpertTier::Host, ExpertTier::Nvme}) {
      for (bool announce : {false, true}) {
        StoreOptions o;
        o.cache_slots_per_layer = 3;  // smaller than a step: exercises eviction and bypass
        o.hot_experts = {{0}, {}};
        auto s = make_expert_store(t, *m, o);
        ASSERT_TRUE(s.ok()) << s.error().message;
        check_all(**s, *m, announce);
        const StagingCounters c = (*s)->counters();
        EXPECT_EQ(c.tier, expert_tier_name(t));
        if (t == ExpertTier::Resident) { EXPECT_GT(c.bytes_resident_reads, 0u); }
        if (t == ExpertTier::Host) { EXPECT_GT(c.bytes_host_to_device, 0u); }
        if (t == ExpertTier::Nvme) {
          EXPECT_GT(c.bytes_nvme_to_device, 0u);
          ASSERT_TRUE(c.has_reader);
          EXPECT_EQ(c.reader.bytes, c.bytes_nvme_to_device);
        }
        if (t != ExpertTier::Resident) { EXPECT_GT(c.cache_misses + c.cache_bypass, 0u); }
        if (path == big_ && announce) std::printf("%s\n", c.summary().c_str());
      }
    }
  }
}

TEST_F(StoreTest, RankSlicesConcatenateToTheFullMatrix) {
  auto m = gguf::GgufModel::open(*small_);
  ASSERT_TRUE(m.ok());
  for (ExpertTier t : {ExpertTier::Resident, ExpertTier::Host, ExpertTier::Nvme}) {
    StoreOptions o;
    o.ranks = 3;  // 96 and 64 rows: uneven split (32/32/32 and 21/21/22)
    auto s = make_expert_store(t, *m, o);
    ASSERT_TRUE(s.ok()) << s.error().message;
    EXPECT_FALSE((*s)->get(0, 0, ExpertProj::Gate).ok());
    for (int l = 0; l < test::kFxLayers; ++l)
      for (int e = 0; e < test::kFxExperts; ++e)
        for (int p = 0; p < 3; ++p) {
          const dev::WeightMatrix ref = reference(*m, l, e, static_cast<ExpertProj>(p));
          int64_t row = 0;
          for (int r = 0; r < 3; ++r) {
            auto w = (*s)->get_rank_slice(l, e, static_cast<ExpertProj>(p), r);
            ASSERT_TRUE(w.ok()) << w.error().message;
            EXPECT_EQ(w->out, ref.out * (r + 1) / 3 - ref.out * r / 3);
            ASSERT_EQ(std::memcmp(w->data, ref.row(row), static_cast<size_t>(w->out) * w->row_bytes), 0);
            row += w->out;
          }
          EXPECT_EQ(row, ref.out);
        }
    EXPECT_FALSE((*s)->get_rank_slice(0, 0, ExpertProj::Gate, 3).ok());
  }
}

TEST_F(StoreTest, RankSlicesAreContiguousPerRank) {
  auto m = gguf::GgufModel::open(*small_);
  ASSERT_TRUE(m.ok());
  auto L = ExpertLayout::from_gguf(*m, 2);
  ASSERT_TRUE(L.ok());
  for (int l = 0; l < L->n_layer(); ++l) {
    // Rank r's three pieces lie inside [rank_offset, rank_offset + rank_bytes).
    for (int r = 0; r < 2; ++r)
      for (int p = 0; p < 3; ++p) {
        int64_t r0 = 0, n = 0;
        L->rank_rows(l, static_cast<ExpertProj>(p), r, &r0, &n);
        const uint64_t off = L->piece_offset(l, r, static_cast<ExpertProj>(p));
        EXPECT_GE(off, L->rank_offset(l, r));
        EXPECT_LE(off + static_cast<uint64_t>(n) * L->tensor(l, static_cast<ExpertProj>(p)).row_bytes,
                  L->rank_offset(l, r) + L->rank_bytes(l, r));
      }
    EXPECT_EQ(L->slab_bytes(l) % 4096, 0u);
  }
}

TEST_F(StoreTest, MissingExpertTensorIsAnError) {
  const auto dir = test::scratch_dir("staging_store_bad");
  gguf::GgufWriter w;
  std::vector<uint8_t> b(64 * 96 * 2 * 2);
  ASSERT_TRUE(w.add_tensor("blk.0.ffn_gate_exps.weight", uint32_t(GgmlType::F16), {64, 96, 2}, b.data(), 64 * 96 * 2 * 2).ok());
  ASSERT_TRUE(w.add_tensor("blk.0.ffn_up_exps.weight", uint32_t(GgmlType::F16), {64, 96, 2}, b.data(), 64 * 96 * 2 * 2).ok());
  ASSERT_TRUE(w.write((dir / "bad.gguf").string()).ok());
  auto m = gguf::GgufModel::open((dir / "bad.gguf").string());
  ASSERT_TRUE(m.ok());
  auto s = make_expert_store(ExpertTier::Host, *m, StoreOptions{});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("blk.0.ffn_down_exps.weight"), std::string::npos) << s.error().message;
  EXPECT_FALSE(parse_expert_tier("gpu").ok());
  EXPECT_EQ(*parse_expert_tier("nvme"), ExpertTier::Nvme);
}

TEST_F(StoreTest, DefaultLimitsPinTheHostTier) {
  rlimit rl{};
  ASSERT_EQ(getrlimit(RLIMIT_MEMLOCK, &rl), 0);
  if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < (4u << 20)) GTEST_SKIP() << "RLIMIT_MEMLOCK below 4 MiB";
  auto m = gguf::GgufModel::open(*small_);
  ASSERT_TRUE(m.ok());
  StoreOptions o;
  o.pin_ops = mlock_pin_ops();
  auto s = make_expert_store(ExpertTier::Host, *m, o);
  ASSERT_TRUE(s.ok());
  const StagingCounters c = (*s)->counters();
  EXPECT_GT(c.pinned_bytes, 0u);
  EXPECT_EQ(c.pageable_bytes, 0u);
  EXPECT_TRUE(c.host_policy.empty()) << c.host_policy;
}

TEST_F(StoreTest, PinFailureAtLoadLeavesHostTierPageableWithCorrectData) {
  auto m = gguf::GgufModel::open(*small_);
  ASSERT_TRUE(m.ok());
  int pins = 0, unpins = 0;
  StoreOptions o;
  o.print_fallback = false;
  o.max_pin_chunk = 2 * 20480;  // two slabs per chunk
  o.pin_ops.name = "injected";
  o.pin_ops.kind = PinKind::Cuda;  // not bounded by RLIMIT_MEMLOCK in the plan
  o.pin_ops.pin = [&](void*, uint64_t n) -> Result<void> {
    if (pins == 3) return Error{"injected pin failure"};  // fails from the 4th chunk on
    ++pins;
    return ok();
  };
  o.pin_ops.unpin = [&](void*, uint64_t) { ++unpins; };
  auto s = make_expert_store(ExpertTier::Host, *m, o);
  ASSERT_TRUE(s.ok()) << s.error().message;
  const StagingCounters c = (*s)->counters();
  EXPECT_EQ(pins, 3);
  EXPECT_EQ(unpins, 3);  // layer 0: 3 chunks pinned, the 4th failed -> all rolled back
  EXPECT_EQ(c.pinned_bytes, 0u);
  EXPECT_EQ(c.pageable_bytes, c.slab_bytes);
  EXPECT_NE(c.host_policy.find("injected pin failure"), std::string::npos) << c.host_policy;
  EXPECT_NE(c.host_policy.find("rolled back"), std::string::npos) << c.host_policy;
  check_all(**s, *m, true);
}

TEST_F(StoreTest, MemlockOf64KiBGivesPageableHostTierWithCorrectData) {
  // In a child so the lowered limit does not leak into other tests.
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    rlimit rl{64 * 1024, 64 * 1024};
    if (setrlimit(RLIMIT_MEMLOCK, &rl) != 0) _exit(2);
    auto m = gguf::GgufModel::open(*small_);
    if (!m.ok()) _exit(3);
    StoreOptions o;
    o.pin_ops = mlock_pin_ops();
    o.print_fallback = true;
    auto s = make_expert_store(ExpertTier::Host, *m, o);
    if (!s.ok()) {
      std::fprintf(stderr, "%s\n", s.error().message.c_str());
      _exit(4);
    }
    const StagingCounters c = (*s)->counters();
    if (c.pinned_bytes != 0 || c.pageable_bytes == 0) _exit(5);
    if (c.host_policy.find("RLIMIT_MEMLOCK 64.00 KiB") == std::string::npos) _exit(6);
    for (int l = 0; l < test::kFxLayers; ++l)
      for (int e = 0; e < test::kFxExperts; ++e)
        for (int p = 0; p < 3; ++p) {
          auto w = (*s)->get(l, e, static_cast<ExpertProj>(p));
          if (!w.ok() || !compare(*w, reference(*m, l, e, static_cast<ExpertProj>(p))).empty()) _exit(7);
        }
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "child failed at check " << WEXITSTATUS(status);
}

}  // namespace
}  // namespace ds4::staging

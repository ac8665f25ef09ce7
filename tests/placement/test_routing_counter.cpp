// RoutingCounter (calibrate's accumulator), the co-activation extension of the statistics file,
// and the `plan --probe` profile round trip.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "placement/hw_probe.h"
#include "placement/hw_profile.h"
#include "placement/routing_counter.h"
#include "placement/routing_stats.h"
#include "tests/support/test_env.h"

namespace ds4::placement {
namespace {

std::vector<int32_t> v(std::initializer_list<int32_t> x) { return x; }

TEST(RoutingCounter, CountsAndPairsByHand) {
  RoutingCounter c(2, 5, 3);
  for (int l = 0; l < 2; ++l) {
    ASSERT_TRUE(c.add(l, v({4, 0, 2})).ok());
    ASSERT_TRUE(c.add(l, v({2, 1, 0})).ok());
  }
  ASSERT_TRUE(c.tokens().ok());
  EXPECT_EQ(c.tokens().value(), 2);
  EXPECT_EQ(c.counts()[0], (std::vector<int64_t>{2, 1, 2, 0, 1}));
  auto co = c.coactivation();
  // Token 1 pairs: (0,4) (2,4) (0,2); token 2: (1,2) (0,2) (0,1).
  std::vector<std::tuple<int, int, int64_t>> got;
  for (auto& p : co[1]) got.emplace_back(p.a, p.b, p.n);
  EXPECT_EQ(got, (std::vector<std::tuple<int, int, int64_t>>{{0, 1, 1}, {0, 2, 2}, {0, 4, 1}, {1, 2, 1}, {2, 4, 1}}));
}

TEST(RoutingCounter, RejectsBadRecords) {
  RoutingCounter c(2, 5, 3);
  EXPECT_FALSE(c.add(2, v({0, 1, 2})).ok());
  EXPECT_FALSE(c.add(0, v({0, 1})).ok());
  EXPECT_FALSE(c.add(0, v({0, 1, 5})).ok());
  EXPECT_FALSE(c.add(0, v({0, 1, 1})).ok());
  ASSERT_TRUE(c.add(0, v({0, 1, 2})).ok());
  EXPECT_FALSE(c.tokens().ok());  // layer 1 saw no token
}

TEST(RoutingCounter, CoactivationRoundTripsThroughTheFile) {
  RoutingCounter c(3, 8, 2);
  for (int t = 0; t < 20; ++t)
    for (int l = 0; l < 3; ++l) ASSERT_TRUE(c.add(l, v({t % 8, (t + 1 + l) % 8})).ok());
  auto dir = test::scratch_dir("routing_counter");
  const std::string path = (dir / "stats.json").string();
  ASSERT_TRUE(write_routing_stats(path, "m", 2, 20, c.counts(), c.coactivation()).ok());
  auto st = load_routing_stats(path, 3, 8, 2);
  ASSERT_TRUE(st.ok()) << st.error().message;
  ASSERT_EQ(st->coactivation.size(), 3u);
  const auto co = c.coactivation();
  for (int l = 0; l < 3; ++l) {
    ASSERT_EQ(st->coactivation[size_t(l)].size(), co[size_t(l)].size());
    int64_t sum = 0;
    for (size_t i = 0; i < co[size_t(l)].size(); ++i) {
      EXPECT_EQ(st->coactivation[size_t(l)][i].a, co[size_t(l)][i].a);
      EXPECT_EQ(st->coactivation[size_t(l)][i].b, co[size_t(l)][i].b);
      EXPECT_EQ(st->coactivation[size_t(l)][i].n, co[size_t(l)][i].n);
      sum += co[size_t(l)][i].n;
    }
    EXPECT_EQ(sum, 20);  // one pair per token with top_k = 2
  }
  // A corrupted pair count breaks the tokens * C(top_k, 2) invariant and is rejected.
  auto bad = co;
  bad[1][0].n += 1;
  ASSERT_TRUE(write_routing_stats(path, "m", 2, 20, c.counts(), bad).ok());
  auto e = load_routing_stats(path, 3, 8, 2);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.error().message.find("coactivation[1]"), std::string::npos) << e.error().message;
}

TEST(HwProbe, ProfileRoundTripsThroughTheLoader) {
  HwProbeOptions o;
  o.mem_bytes = int64_t(32) << 20;
  o.repeats = 1;
  o.nvme_bytes = int64_t(16) << 20;
  o.nvme_dir = test::scratch_dir("hw_probe").string();
  auto r = probe_hw_profile(o);
  if (!r.ok() && r.error().message.find("GPU") != std::string::npos) GTEST_SKIP() << r.error().message;
  ASSERT_TRUE(r.ok()) << r.error().message;
  ASSERT_FALSE(r->nodes.empty());
  for (const auto& n : r->nodes) {
    EXPECT_GT(n.read_gbps, 0);
    EXPECT_GT(n.copy_gbps, 0);
  }
  EXPECT_TRUE(r->nvme.ran);
  EXPECT_EQ(r->nvme.bytes, int64_t(16) << 20);
  EXPECT_GT(r->nvme.read_gbps, 0);
  EXPECT_TRUE(r->profile.gpus.empty());
  // The temporary file is gone.
  EXPECT_TRUE(std::filesystem::is_empty(o.nvme_dir));
  const std::string js = hw_profile_to_json(r->profile);
  auto back = parse_hw_profile(js, "probe");
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(hw_profile_to_json(back.value()), js);
  ASSERT_EQ(back->nodes.size(), r->nodes.size());
  EXPECT_DOUBLE_EQ(back->nodes[0].mem_read_gbps, r->nodes[0].read_gbps);
  // The CPU kernels can quantize and dot these; each gets a measured rate carried into the profile.
  for (const char* t : {"IQ2_XXS", "Q2_K", "MXFP4", "Q8_0"}) {
    ASSERT_TRUE(r->nodes[0].expert_gbps.count(t)) << t;
    EXPECT_GT(r->nodes[0].expert_gbps.at(t), 0) << t;
    EXPECT_DOUBLE_EQ(back->nodes[0].cpu_gbps_for(t), r->nodes[0].expert_gbps.at(t)) << t;
  }
  ASSERT_EQ(back->nvme.size(), 1u);
  EXPECT_DOUBLE_EQ(back->nvme[0].read_gbps, r->nvme.read_gbps);
}

}  // namespace
}  // namespace ds4::placement

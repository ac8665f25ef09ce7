// Routing priors, the statistics file, and the routing samples used by the cost model.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <numeric>
#include <set>

#include "placement/cost_model.h"
#include "placement/routing_stats.h"
#include "tests/support/test_env.h"

namespace ds4::placement {
namespace {

TEST(RoutingStats, ZipfRowsAreProbabilities) {
  for (double s : {0.0, 0.5, 1.0, 2.0, 4.0}) {
    RoutingStats z = zipf_routing(5, 64, 6, s);
    for (const auto& row : z.p) {
      double sum = 0;
      for (double v : row) {
        EXPECT_GE(v, 0);
        EXPECT_LE(v, 1.0 + 1e-12);
        sum += v;
      }
      EXPECT_NEAR(sum, 6.0, 1e-9);
    }
  }
  RoutingStats u = zipf_routing(2, 64, 6, 0.0);
  for (double v : u.p[0]) EXPECT_NEAR(v, 6.0 / 64, 1e-12);
  // Steep exponent: the hottest experts saturate at 1 (selected by every token).
  RoutingStats steep = zipf_routing(1, 64, 6, 4.0);
  EXPECT_NEAR(*std::max_element(steep.p[0].begin(), steep.p[0].end()), 1.0, 1e-12);
  // Different layers have different hot experts.
  RoutingStats z = zipf_routing(2, 64, 6, 1.0);
  EXPECT_NE(std::max_element(z.p[0].begin(), z.p[0].end()) - z.p[0].begin(),
            std::max_element(z.p[1].begin(), z.p[1].end()) - z.p[1].begin());
}

TEST(RoutingStats, FileRoundTripAndErrors) {
  auto dir = test::scratch_dir("placement_stats");
  std::vector<std::vector<int64_t>> counts = {{10, 0, 5, 5}, {4, 6, 3, 7}};  // 10 tokens, top-2
  ASSERT_TRUE(write_routing_stats((dir / "s.json").string(), "tiny", 2, 10, counts).ok());
  auto st = load_routing_stats((dir / "s.json").string(), 2, 4, 2);
  ASSERT_TRUE(st.ok()) << st.error().message;
  EXPECT_DOUBLE_EQ(st->p[0][0], 1.0);
  EXPECT_DOUBLE_EQ(st->p[1][3], 0.7);
  auto dims = load_routing_stats((dir / "s.json").string(), 3, 4, 2);
  ASSERT_FALSE(dims.ok());
  EXPECT_NE(dims.error().message.find("'n_layers': expected 3 (the model), found 2"), std::string::npos)
      << dims.error().message;
  ASSERT_TRUE(write_routing_stats((dir / "bad.json").string(), "tiny", 2, 10, {{10, 0, 5, 4}, {4, 6, 3, 7}}).ok());
  auto sum = load_routing_stats((dir / "bad.json").string(), 2, 4, 2);
  ASSERT_FALSE(sum.ok());
  EXPECT_NE(sum.error().message.find("counts[0]: expected counts summing to tokens * top_k = 20, found 19"),
            std::string::npos)
      << sum.error().message;
  std::ofstream(dir / "fmt.json") << R"({"format": "other", "version": 1})";
  EXPECT_FALSE(load_routing_stats((dir / "fmt.json").string(), 2, 4, 2).ok());
}

TEST(RoutingSamples, DistinctExpertsAndExactInclusion) {
  RoutingStats z = zipf_routing(2, 32, 4, 1.2);
  RoutingSamples s = draw_routing_samples(z, 20000, 7);
  ASSERT_EQ(s.ids.size(), 2u);
  std::vector<double> freq(32, 0);
  for (int t = 0; t < s.n; ++t) {
    std::set<int> seen;
    for (int i = 0; i < 4; ++i) {
      const int e = s.ids[0][size_t(t * 4 + i)];
      EXPECT_TRUE(seen.insert(e).second) << "expert drawn twice in one token";
      freq[size_t(e)] += 1.0 / s.n;
    }
  }
  // Madow sampling: inclusion frequency converges to p (binomial standard error <= 0.0036).
  for (int e = 0; e < 32; ++e) EXPECT_NEAR(freq[size_t(e)], z.p[0][size_t(e)], 0.02) << "expert " << e;
  // Deterministic for a seed, different for another.
  EXPECT_EQ(draw_routing_samples(z, 100, 7).ids, draw_routing_samples(z, 100, 7).ids);
  EXPECT_NE(draw_routing_samples(z, 100, 7).ids, draw_routing_samples(z, 100, 8).ids);
}

TEST(RoutingSamples, ContiguousSplitImbalanceMatchesAnalyticValue) {
  // 6 of 256 experts drawn uniformly without replacement, 4 ranks of 64 contiguous ids: the
  // busiest rank carries E[max] = 2.80 experts (reference/offload-anchors.md §6, 1.87x the mean).
  RoutingSamples s = draw_routing_samples(uniform_routing(1, 256, 6), 40000, 3);
  double mean_max = 0;
  for (int t = 0; t < s.n; ++t) {
    int c[4] = {};
    for (int i = 0; i < 6; ++i) c[s.ids[0][size_t(t * 6 + i)] / 64]++;
    mean_max += double(*std::max_element(c, c + 4)) / s.n;
  }
  EXPECT_NEAR(mean_max, 2.80, 0.02);
}

}  // namespace
}  // namespace ds4::placement

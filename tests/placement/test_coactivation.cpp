// Co-activation in the statistics and the planner: the version-2 statistics file (recorded token
// routes) round trip and its errors, version-1 files still read, the counter's route reservoir,
// routing samples taken from routes (independent draws unchanged without them), and the planner's
// step 2b on synthetic statistics whose co-firing pairs snake ownership puts on one GPU.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <set>

#include "placement/cost_model.h"
#include "placement/hw_profile.h"
#include "placement/planner.h"
#include "placement/routing_counter.h"
#include "placement/routing_stats.h"
#include "tests/placement/small_shape.h"
#include "tests/support/test_env.h"

namespace ds4::placement {
namespace {

// Writes the counter's statistics (counts, pairs, routes) and reads them back.
RoutingStats through_file(const RoutingCounter& c, const std::string& path) {
  auto tokens = c.tokens();
  EXPECT_TRUE(tokens.ok());
  EXPECT_TRUE(write_routing_stats(path, "synthetic", c.top_k(), tokens.value(), c.counts(), c.coactivation(),
                                  c.routes())
                  .ok());
  auto st = load_routing_stats(path, c.n_layers(), c.n_experts(), c.top_k());
  EXPECT_TRUE(st.ok()) << st.error().message;
  return st.ok() ? std::move(st).value() : RoutingStats{};
}

/// The planner's plan with co-activation (step 2b) switched off, everything else as in `opt`.
Result<Plan> plan_without_coactivation(const CostModel& cm, PlanOptions opt) {
  opt.coactivation = false;
  return make_plan(cm, opt, Policy::Planner);
}

TEST(RoutingStatsV2, RoutesRoundTripAndVersion) {
  const auto dir = test::scratch_dir("coact_stats");
  RoutingCounter c(2, 6, 2, /*max_routes=*/100);
  const std::vector<std::vector<int32_t>> toks = {{0, 1}, {2, 5}, {4, 3}};
  for (const auto& t : toks) {
    ASSERT_TRUE(c.add(0, t).ok());
    ASSERT_TRUE(c.add(1, std::vector<int32_t>{t[1], t[0]}).ok());
  }
  const std::string path = (dir / "v2.json").string();
  RoutingStats st = through_file(c, path);
  ASSERT_EQ(st.n_routes(), 3);
  EXPECT_EQ(st.routes[0], (std::vector<uint16_t>{0, 1, 2, 5, 4, 3}));
  EXPECT_EQ(st.routes[1], (std::vector<uint16_t>{1, 0, 5, 2, 3, 4}));
  EXPECT_TRUE(st.has_coactivation());
  std::ifstream in(path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("\"version\":2"), std::string::npos) << text;
  // Without routes the writer keeps version 1 (readable by version-1 readers).
  ASSERT_TRUE(write_routing_stats((dir / "v1.json").string(), "m", 2, 3, c.counts(), c.coactivation()).ok());
  std::ifstream in1(dir / "v1.json");
  std::string text1((std::istreambuf_iterator<char>(in1)), std::istreambuf_iterator<char>());
  EXPECT_NE(text1.find("\"version\":1"), std::string::npos) << text1;
  EXPECT_EQ(text1.find("routes"), std::string::npos);
}

TEST(RoutingStatsV2, OldVersionOneFileStillReads) {
  // A version-1 file as calibrate wrote it before routes existed (hand-written here).
  const auto dir = test::scratch_dir("coact_v1");
  std::ofstream(dir / "old.json") << R"({"format": "ds4-routing-stats", "version": 1, "model": "m",
    "n_layers": 1, "n_experts": 4, "top_k": 2, "tokens": 3, "counts": [[2, 1, 2, 1]],
    "coactivation": [[[0, 1, 1], [0, 2, 1], [2, 3, 1]]]})";
  auto st = load_routing_stats((dir / "old.json").string(), 1, 4, 2);
  ASSERT_TRUE(st.ok()) << st.error().message;
  EXPECT_EQ(st->n_routes(), 0);
  EXPECT_TRUE(st->has_coactivation());
  const auto c = coactivation_rates(st.value(), 0);
  ASSERT_EQ(c.size(), 16u);
  EXPECT_DOUBLE_EQ(c[0 * 4 + 2], 1.0 / 3);
  EXPECT_DOUBLE_EQ(c[2 * 4 + 0], 1.0 / 3);
  EXPECT_DOUBLE_EQ(c[1 * 4 + 2], 0.0);
  // "routes" needs version 2.
  std::ofstream(dir / "v1routes.json") << R"({"format": "ds4-routing-stats", "version": 1, "model": "m",
    "n_layers": 1, "n_experts": 4, "top_k": 2, "tokens": 1, "counts": [[1, 1, 0, 0]], "routes": [[[0, 1]]]})";
  auto e = load_routing_stats((dir / "v1routes.json").string(), 1, 4, 2);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.error().message.find("'routes' needs \"version\": 2"), std::string::npos) << e.error().message;
  std::ofstream(dir / "v3.json") << R"({"format": "ds4-routing-stats", "version": 3})";
  auto v3 = load_routing_stats((dir / "v3.json").string(), 1, 4, 2);
  ASSERT_FALSE(v3.ok());
  EXPECT_NE(v3.error().message.find("expected \"version\": 1 or 2, found 3"), std::string::npos) << v3.error().message;
}

TEST(RoutingStatsV2, BadRoutesAreRefused) {
  const auto dir = test::scratch_dir("coact_bad");
  const std::string head = R"({"format": "ds4-routing-stats", "version": 2, "model": "m", "n_layers": 2,
    "n_experts": 4, "top_k": 2, "tokens": 2, "counts": [[1, 1, 1, 1], [1, 1, 1, 1]], "routes": )";
  const std::pair<const char*, const char*> cases[] = {
      {"[[[0, 1], [2, 3]], [[0, 1]]]", "routes[1]: expected 2 routes (as layer 0), found 1"},
      {"[[[0, 1], [2, 3]], [[0, 1], [2]]]", "routes[1][1]: expected 2 expert ids, found [2]"},
      {"[[[0, 1], [2, 4]], [[0, 1], [2, 3]]]", "routes[0][1]: expected ids in [0, 4), found [2,4]"},
      {"[[[0, 0], [2, 3]], [[0, 1], [2, 3]]]", "routes[0][0]: expected distinct ids, found [0,0]"},
      {"[[[0, 1], [2, 3], [0, 2]], [[0, 1], [2, 3], [1, 3]]]", "expected at most tokens (2) routes, found 3"},
      {"[[[0, 1]]]", "key 'routes': expected an array of 2 layers"},
  };
  for (const auto& [routes, msg] : cases) {
    std::ofstream(dir / "b.json") << head << routes << "}";
    auto e = load_routing_stats((dir / "b.json").string(), 2, 4, 2);
    ASSERT_FALSE(e.ok()) << routes;
    EXPECT_NE(e.error().message.find(msg), std::string::npos) << e.error().message;
  }
  std::ofstream(dir / "g.json") << head << "[[[0, 1], [2, 3]], [[3, 1], [2, 0]]]}";
  auto good = load_routing_stats((dir / "g.json").string(), 2, 4, 2);
  ASSERT_TRUE(good.ok()) << good.error().message;
  EXPECT_EQ(good->routes[1], (std::vector<uint16_t>{3, 1, 2, 0}));
  // The writer refuses ragged routes.
  EXPECT_FALSE(write_routing_stats((dir / "w.json").string(), "m", 2, 2, {{1, 1, 1, 1}, {1, 1, 1, 1}}, {},
                                   {{0, 1, 2, 3}, {0, 1}})
                   .ok());
}

TEST(RoutingCounterRoutes, ReservoirKeepsTheSameTokensInEveryLayer) {
  // Token t selects {t % 16, (t + 1) % 16} in layer 0 and {(t + 2) % 16, (t + 3) % 16} in layer 1;
  // 1000 tokens, 64 kept.
  RoutingCounter c(2, 16, 2, 64);
  for (int t = 0; t < 1000; ++t) {
    ASSERT_TRUE(c.add(0, std::vector<int32_t>{t % 16, (t + 1) % 16}).ok());
    ASSERT_TRUE(c.add(1, std::vector<int32_t>{(t + 2) % 16, (t + 3) % 16}).ok());
  }
  const auto r = c.routes();
  ASSERT_EQ(r.size(), 2u);
  ASSERT_EQ(r[0].size(), 128u);
  ASSERT_EQ(r[1].size(), 128u);
  int beyond_first = 0;
  for (size_t i = 0; i < 64; ++i) {
    const int a = r[0][2 * i];
    EXPECT_EQ(r[0][2 * i + 1], (a + 1) % 16);
    EXPECT_EQ(r[1][2 * i], (a + 2) % 16) << "route " << i << " is not the same token in both layers";
    EXPECT_EQ(r[1][2 * i + 1], (a + 3) % 16);
  }
  // A uniform sample of 1000 tokens: most kept tokens come after the first 64. Tokens are only
  // known mod 16 here, so count kept routes in a second counter that encodes the token itself.
  RoutingCounter d(1, 1024, 1, 64);
  for (int t = 0; t < 1000; ++t) ASSERT_TRUE(d.add(0, std::vector<int32_t>{t}).ok());
  const auto rd = d.routes();
  ASSERT_EQ(rd[0].size(), 64u);
  for (size_t i = 0; i < rd[0].size(); ++i) {
    beyond_first += rd[0][i] >= 64;
    if (i > 0) {
      EXPECT_LT(rd[0][i - 1], rd[0][i]) << "routes are in token order";
    }
  }
  EXPECT_GT(beyond_first, 40);
  // Deterministic.
  RoutingCounter d2(1, 1024, 1, 64);
  for (int t = 0; t < 1000; ++t) ASSERT_TRUE(d2.add(0, std::vector<int32_t>{t}).ok());
  EXPECT_EQ(d2.routes(), rd);
  // max_routes 0: no routes.
  RoutingCounter none(1, 4, 1);
  ASSERT_TRUE(none.add(0, std::vector<int32_t>{1}).ok());
  EXPECT_TRUE(none.routes().empty());
}

TEST(RoutingSamplesFromRoutes, RoutesInOrderAndIndependentDrawsUnchangedWithout) {
  RoutingStats st = uniform_routing(2, 8, 2);
  st.routes = {{0, 1, 2, 3, 4, 5}, {7, 6, 5, 4, 3, 2}};  // 3 routes
  RoutingSamples s = draw_routing_samples(st, 6, 1);
  EXPECT_TRUE(s.from_routes);
  EXPECT_EQ(s.ids[0], (std::vector<uint16_t>{0, 1, 0, 1, 2, 3, 2, 3, 4, 5, 4, 5}));
  EXPECT_EQ(s.ids[1], (std::vector<uint16_t>{7, 6, 7, 6, 5, 4, 5, 4, 3, 2, 3, 2}));
  RoutingSamples two = draw_routing_samples(st, 2, 1);  // evenly spaced: routes 0 and 1 (floor(s*3/2))
  EXPECT_EQ(two.ids[0], (std::vector<uint16_t>{0, 1, 2, 3}));
  // Pair counts alone do not change the independent draws.
  RoutingStats z = zipf_routing(3, 32, 4, 1.0);
  RoutingStats zp = z;
  zp.coactivation.assign(3, {{0, 1, 5}});
  zp.tokens = 10;
  const RoutingSamples a = draw_routing_samples(z, 64, 9), b = draw_routing_samples(zp, 64, 9);
  EXPECT_FALSE(a.from_routes);
  EXPECT_FALSE(b.from_routes);
  EXPECT_EQ(a.ids, b.ids);
}

// ---------------------------------------------------------------------------------------------
// Planner step 2b.

ModelShape small_shape(int n_layers, int n_experts, int top_k) {
  return small_test_shape("coact", n_layers, n_experts, top_k);
}

// Two GPUs on one node, slow CPU (staging wins), a per-copy latency large next to one expert's
// transfer (55 KiB at 10 GB/s = 5.5 us) so that whole-expert staging beats split when the owners
// are balanced (split: 4 copies per rank per token, whole: 2).
HwProfile two_gpu_profile() {
  HwProfile hw;
  hw.name = "coact";
  NumaNodeProfile n;
  n.memory_bytes = int64_t(8) << 30;
  n.cores = 4;
  n.mem_read_gbps = 5;
  n.cpu_expert_gbps = {{"default", 0.5}};
  n.cpu_gflops = 10;
  hw.nodes = {n};
  for (int g = 0; g < 2; ++g) hw.gpus.push_back({"g", 0, int64_t(2) << 30, 10.0, 500.0, 0.5, 5.0, ""});
  hw.h2d_aggregate_gbps = 1000;
  hw.inter_socket_gbps = 10;
  hw.pageable_h2d_gbps = 1000;
  hw.copy_latency_us = 20;
  hw.allreduce_latency_us = 20;
  hw.allreduce_gbps = 5;
  hw.host_reserved_bytes = int64_t(1) << 30;
  hw.layer_overhead_us = 7;
  hw.cpu_expert_latency_us = 50;
  return hw;
}

// Co-firing pairs that snake ownership puts on ONE GPU. With equal p, the hot order is the id
// order and snake deals ids 4m, 4m+1, 4m+2, 4m+3 to GPUs 0, 1, 1, 0 (R = 2), so the pairs
// {4m, 4m+3} and {4m+1, 4m+2} share an owner. (Pairs {2m, 2m+1} would already be split by snake:
// the step would have nothing to do.) Every token selects two distinct pairs; all C(E/2, 2) pair
// combinations appear `reps` times, so every expert has p = 4/E exactly.
std::vector<std::pair<int, int>> snake_mate_pairs(int E) {
  std::vector<std::pair<int, int>> v;
  for (int m = 0; m < E / 4; ++m) {
    v.push_back({4 * m, 4 * m + 3});
    v.push_back({4 * m + 1, 4 * m + 2});
  }
  return v;
}

RoutingStats cofiring_stats(int L, int E, int reps, int max_routes, const std::string& path) {
  const auto pairs = snake_mate_pairs(E);
  RoutingCounter c(L, E, 4, max_routes);
  // Combinations in an interleaved order so that evenly spaced samples of the routes see them all.
  std::vector<std::pair<size_t, size_t>> combos;
  for (size_t a = 0; a < pairs.size(); ++a)
    for (size_t b = a + 1; b < pairs.size(); ++b) combos.push_back({a, b});
  for (int r = 0; r < reps; ++r)
    for (const auto& [a, b] : combos) {
      const std::vector<int32_t> t = {pairs[a].first, pairs[a].second, pairs[b].first, pairs[b].second};
      for (int l = 0; l < L; ++l) EXPECT_TRUE(c.add(l, t).ok());
    }
  return through_file(c, path);
}

struct CoactCase {
  ModelShape shape;
  QuantMix mix = quant_mix_by_name("ds4-q2").value();
  ModelSizes sizes;
  HwProfile hw = two_gpu_profile();
  RoutingStats stats;
  RoutingSamples samples;
  PlanOptions opt;

  CoactCase(RoutingStats st, int L, int E) : shape(small_shape(L, E, 4)), stats(std::move(st)) {
    sizes = compute_model_sizes(shape, mix).value();
    opt.ctx = 256;
    opt.prefill_chunk = 16;
    opt.samples = 256;
    samples = draw_routing_samples(stats, opt.samples, opt.seed);
    // Leave room for no resident expert: every expert is staged.
    auto b = plan_budgets(CostModel(inputs()), opt);
    EXPECT_TRUE(b.ok());
    for (size_t g = 0; g < hw.gpus.size(); ++g) hw.gpus[g].vram_bytes -= b->gpus[g].expert_capacity;
  }
  CostInputs inputs() const { return {&shape, &sizes, &mix, &hw, &stats, &samples, 16, 8}; }
};

TEST(PlannerCoactivation, SplitsCoFiringPairsAndPredictsAFasterStep) {
  const int L = 2, E = 16;
  const auto dir = test::scratch_dir("coact_planner");
  CoactCase s(cofiring_stats(L, E, 4, 4096, (dir / "s.json").string()), L, E);
  ASSERT_EQ(s.stats.n_routes(), 4 * 28);
  ASSERT_TRUE(s.samples.from_routes);
  CostModel cm(s.inputs());
  auto co = make_plan(cm, s.opt, Policy::Planner);
  ASSERT_TRUE(co.ok()) << co.error().message;
  auto snake = plan_without_coactivation(cm, s.opt);
  ASSERT_TRUE(snake.ok()) << snake.error().message;
  for (int l = 0; l < L; ++l)
    for (const auto& [a, b] : snake_mate_pairs(E)) {
      // Snake puts both on one GPU (the setup above); step 2b splits every pair.
      EXPECT_EQ(snake->experts[size_t(l)][size_t(a)].owner, snake->experts[size_t(l)][size_t(b)].owner);
      EXPECT_NE(co->experts[size_t(l)][size_t(a)].owner, co->experts[size_t(l)][size_t(b)].owner)
          << "layer " << l << " pair " << a << "," << b;
    }
  for (int l = 0; l < L; ++l) {
    int per_gpu[2] = {0, 0};
    for (const auto& e : co->experts[size_t(l)]) {
      EXPECT_NE(e.tier, Tier::Vram);
      ++per_gpu[e.owner];
    }
    EXPECT_EQ(per_gpu[0], E / 2);  // swaps keep each GPU's expert count
    // Balanced owners make whole-expert staging the faster mode here (see two_gpu_profile).
    EXPECT_EQ(co->mode[size_t(l)], StageMode::Whole) << "layer " << l;
  }
  const double t_co = cm.predict(co.value()).decode_step_s, t_snake = cm.predict(snake.value()).decode_step_s;
  // Per layer and token, whole staging by owner: each GPU copies 2 experts after step 2b; with
  // snake owners both pairs share a GPU in 12 of the 28 combinations (4 copies), so E[max] = 80/28.
  // Lower bound on the gain: (80/28 - 2) * (5.5 us + 20 us) per layer, minus nothing else changing.
  const double one = double(s.sizes.expert_bytes[0]) / 10e9 + 20e-6;
  EXPECT_LT(t_co, t_snake - L * (80.0 / 28 - 2) * one * 0.99) << t_co << " vs " << t_snake;
  bool noted = false;
  for (const auto& n : co->notes) noted = noted || n.find("co-activation ownership kept") != std::string::npos;
  EXPECT_TRUE(noted);
  // Deterministic.
  auto again = make_plan(cm, s.opt, Policy::Planner);
  ASSERT_TRUE(again.ok());
  for (int l = 0; l < L; ++l)
    for (int e = 0; e < E; ++e)
      EXPECT_EQ(again->experts[size_t(l)][size_t(e)].owner, co->experts[size_t(l)][size_t(e)].owner);
}

TEST(PlannerCoactivation, WithoutCoactivationDataOwnershipIsSnake) {
  const int L = 2, E = 16;
  CoactCase s(zipf_routing(L, E, 4, 0.7), L, E);
  ASSERT_FALSE(s.samples.from_routes);
  CostModel cm(s.inputs());
  auto a = make_plan(cm, s.opt, Policy::Planner);
  auto b = plan_without_coactivation(cm, s.opt);
  ASSERT_TRUE(a.ok() && b.ok());
  for (int l = 0; l < L; ++l)
    for (int e = 0; e < E; ++e) EXPECT_EQ(a->experts[size_t(l)][size_t(e)].owner, b->experts[size_t(l)][size_t(e)].owner);
  EXPECT_EQ(cm.predict(a.value()).decode_step_s, cm.predict(b.value()).decode_step_s);
  for (const auto& n : a->notes) EXPECT_EQ(n.find("co-activation"), std::string::npos) << n;
}

TEST(PlannerCoactivation, PairCountsOnlyStillSearchButKeepTheFasterPrediction) {
  // Pair counts without routes: samples are independent draws (they cannot value the split), so
  // make_plan keeps whichever ownership predicts faster and says so.
  const int L = 2, E = 16;
  const auto dir = test::scratch_dir("coact_pairs_only");
  RoutingStats st = cofiring_stats(L, E, 4, 4096, (dir / "s.json").string());
  st.routes.clear();
  CoactCase s(std::move(st), L, E);
  ASSERT_FALSE(s.samples.from_routes);
  CostModel cm(s.inputs());
  auto co = make_plan(cm, s.opt, Policy::Planner);
  ASSERT_TRUE(co.ok()) << co.error().message;
  auto snake = plan_without_coactivation(cm, s.opt);
  ASSERT_TRUE(snake.ok());
  EXPECT_LE(cm.predict(co.value()).decode_step_s, cm.predict(snake.value()).decode_step_s);
  bool noted = false;
  for (const auto& n : co->notes) noted = noted || n.find("with snake ownership only") != std::string::npos;
  EXPECT_TRUE(noted);
}

// Real model shapes (DeepSeek-V4-Flash, 4 x 2080 Ti profile): predicted decode tok/s with and
// without step 2b on synthetic co-activation-heavy statistics (printed; a figure, not a bound).
// Each layer pairs its 256 experts into 128 fixed pairs and every token selects 3 distinct pairs
// (6 experts, always both members of a pair); p is exactly uniform (construction below).
// "random pairs": a fixed random matching per layer; "snake-mate pairs": the pairs of
// snake_mate_pairs generalised to R = 4 (positions j and 2R-1-j of each block of 2R ids).
// The statistics file is left in the scratch dir for `plan --stats F --dry-run`.
TEST(PlannerCoactivation, RealShapesPrintPredictedTokS) {
  const ModelShape shape = dsv4_flash_shape();
  auto hw = load_hw_profile((test::source_dir() / "configs/hw/4x2080ti-22g-pcie3-2s.json").string());
  ASSERT_TRUE(hw.ok()) << hw.error().message;
  const int R = int(hw->gpus.size()), L = shape.n_layers, E = shape.n_experts;
  ASSERT_EQ(shape.top_k, 6);
  const auto dir = test::scratch_dir("coact_real");
  for (const char* kind : {"random", "snake-mate"}) {
    uint64_t state = 12345;
    auto next = [&]() {
      uint64_t z = (state += 0x9E3779B97F4A7C15ull);
      z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
      z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
      return z ^ (z >> 31);
    };
    std::vector<std::vector<std::pair<int, int>>> pairs(static_cast<size_t>(L));
    for (int l = 0; l < L; ++l) {
      std::vector<int> ids(static_cast<size_t>(E));
      for (int e = 0; e < E; ++e) ids[size_t(e)] = e;
      if (std::string(kind) == "random") {
        for (int i = E - 1; i > 0; --i) std::swap(ids[size_t(i)], ids[size_t(next() % uint64_t(i + 1))]);
        for (int m = 0; m < E / 2; ++m) pairs[size_t(l)].push_back({ids[size_t(2 * m)], ids[size_t(2 * m + 1)]});
      } else {
        for (int b = 0; b < E; b += 2 * R)
          for (int j = 0; j < R; ++j) pairs[size_t(l)].push_back({b + j, b + 2 * R - 1 - j});
      }
    }
    // 64 rounds of E/2 tokens; per round and layer a random order sigma of the pairs, token i
    // selecting pairs sigma(i), sigma(i+1), sigma(i+2) (cyclic): every pair is in exactly 3
    // tokens per round, so p = 6/E exactly and the hot order is the id order.
    RoutingCounter c(L, E, 6, 4096);
    const int P = E / 2;
    for (int round = 0; round < 64; ++round) {
      std::vector<std::vector<int>> sigma(size_t(L), std::vector<int>(static_cast<size_t>(P)));
      for (int l = 0; l < L; ++l) {
        auto& sg = sigma[size_t(l)];
        for (int m = 0; m < P; ++m) sg[size_t(m)] = m;
        for (int i = P - 1; i > 0; --i) std::swap(sg[size_t(i)], sg[size_t(next() % uint64_t(i + 1))]);
      }
      for (int i = 0; i < P; ++i)
        for (int l = 0; l < L; ++l) {
          std::vector<int32_t> sel;
          for (int d = 0; d < 3; ++d) {
            const auto& pr = pairs[size_t(l)][size_t(sigma[size_t(l)][size_t((i + d) % P)])];
            sel.push_back(pr.first);
            sel.push_back(pr.second);
          }
          ASSERT_TRUE(c.add(l, sel).ok());
        }
    }
    const std::string path = (dir / (std::string(kind) + "-pairs.json")).string();
    const RoutingStats st = through_file(c, path);
    ASSERT_EQ(st.n_routes(), 4096);
    for (const char* mix_name : {"ds4-q2", "mxfp4"}) {
      const QuantMix mix = quant_mix_by_name(mix_name).value();
      const ModelSizes sizes = compute_model_sizes(shape, mix).value();
      PlanOptions opt;  // plan's defaults: ctx 32768, chunk 2048, 512 samples, seed 1
      const RoutingSamples smp = draw_routing_samples(st, opt.samples, opt.seed);
      CostInputs in{&shape, &sizes, &mix, &hw.value(), &st, &smp, opt.prefill_chunk,
                    std::min<int64_t>(opt.ctx, 2048) / 2};
      CostModel cm(in);
      auto co = make_plan(cm, opt, Policy::Planner);
      ASSERT_TRUE(co.ok()) << co.error().message;
      auto snake = plan_without_coactivation(cm, opt);
      ASSERT_TRUE(snake.ok()) << snake.error().message;
      const double t_co = cm.predict(co.value()).decode_step_s, t_snake = cm.predict(snake.value()).decode_step_s;
      EXPECT_LE(t_co, t_snake);
      int split_pairs_snake = 0, split_pairs_co = 0;
      for (int l = 0; l < L; ++l)
        for (const auto& [a, b] : pairs[size_t(l)]) {
          split_pairs_snake += snake->experts[size_t(l)][size_t(a)].owner != snake->experts[size_t(l)][size_t(b)].owner;
          split_pairs_co += co->experts[size_t(l)][size_t(a)].owner != co->experts[size_t(l)][size_t(b)].owner;
        }
      std::printf("%s pairs, %s: decode %.2f tok/s with co-activation ownership (%s), %.2f tok/s snake only; "
                  "pairs on two GPUs %d vs %d of %d\n",
                  kind, mix_name, 1.0 / t_co, co->rule.c_str(), 1.0 / t_snake, split_pairs_co, split_pairs_snake,
                  L * E / 2);
      std::printf("  stats file: %s\n", path.c_str());
    }
  }
}

}  // namespace
}  // namespace ds4::placement

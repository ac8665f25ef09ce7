// Tensor parallelism on the dsv4-tiny fixture (label golden): --tp 1, 2 and 4 (CPU ranks) give
// bit-identical logits on the golden prompts — prefill of every position and 32 greedy decode
// steps — for F32 and Q8 activations, each meets the engine's golden tolerance against DeepSeek's
// reference `exact` logits, and the greedy continuation is the same for every R. Also: the shard
// validation refuses rank counts the shapes do not allow, and per-rank memory adds up. A --plan
// with split staging (Host experts of Split layers computed by every rank from its row slices):
// tp 2 and 4 give tp 1's tokens and logits bits, and each rank takes exactly the plan's link bytes
// (1/R of every split expert).
// Exits 77 (skipped) when the fixture is absent.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>

#include "cuda_engine/emu_greedy.h"
#include "cuda_engine/emu_plan.h"
#include "engine/dsv4_model.h"
#include "engine/golden_data.h"
#include "placement/plan_file.h"
#include "support/test_env.h"

namespace ds4 {
namespace {

constexpr int64_t kVocab = 512;

struct Run {
  std::vector<float> prefill, decode;
  std::vector<int32_t> greedy;
};

std::shared_ptr<Dsv4Model> open(int tp, Activations act) {
  ModelOptions o;
  o.tp = tp;
  o.activations = act;
  o.threads = 2;
  auto m = Dsv4Model::open(test::tiny_gguf().string(), o);
  EXPECT_TRUE(m.ok()) << (m.ok() ? "" : m.error().message);
  return m.ok() ? *m : nullptr;
}

Run run(const std::shared_ptr<Dsv4Model>& m, const test::GoldenPrompt& p, int steps) {
  Run r;
  Dsv4Session s(m);
  auto e = s.eval(p.ids, &r.prefill, nullptr);
  EXPECT_TRUE(e.ok()) << (e.ok() ? "" : e.error().message);
  int32_t tok = test::argmax_row(r.prefill, static_cast<int64_t>(p.ids.size()) - 1, kVocab);
  std::vector<float> row;
  for (int k = 0; k < steps; ++k) {
    r.greedy.push_back(tok);
    EXPECT_TRUE(s.eval(std::span<const int32_t>(&tok, 1), nullptr, &row).ok());
    r.decode.insert(r.decode.end(), row.begin(), row.end());
    tok = test::argmax_row(row, 0, kVocab);
  }
  return r;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

void check_prompts(Activations act, const std::vector<size_t>& which) {
  if (test::tiny_dir().empty()) GTEST_SKIP() << "fixture absent";
  auto prompts = test::load_goldens();
  std::vector<std::shared_ptr<Dsv4Model>> models;
  for (int tp : {1, 2, 4}) models.push_back(open(tp, act));
  for (auto& m : models) ASSERT_TRUE(m);
  for (size_t i : which) {
    const auto& p = prompts.at(i);
    const int steps = static_cast<int>(p.greedy_exact.size());
    Run base = run(models[0], p, steps);
    for (size_t k = 0; k < models.size(); ++k) {
      const int tp = models[k]->tp();
      Run r = k == 0 ? base : run(models[k], p, steps);
      auto pre = test::compare_logprobs(r.prefill, test::read_f32(p.exact_prefill), kVocab);
      auto dec = test::compare_logprobs(r.decode, test::read_f32(p.exact_decode), kVocab);
      std::printf("prompt %zu %s tp=%d: prefill %s | decode %s | bits == tp1: %s\n", i,
                  act == Activations::F32 ? "f32" : "q8", tp, test::describe(pre).c_str(),
                  test::describe(dec).c_str(),
                  same_bits(r.prefill, base.prefill) && same_bits(r.decode, base.decode) ? "yes" : "NO");
      EXPECT_TRUE(same_bits(r.prefill, base.prefill)) << "prompt " << i << " tp=" << tp << " prefill logits";
      EXPECT_TRUE(same_bits(r.decode, base.decode)) << "prompt " << i << " tp=" << tp << " decode logits";
      EXPECT_EQ(r.greedy, base.greedy) << "tp=" << tp;
      if (act == Activations::F32) {
        test::expect_exact_gate(pre, dec, "prompt " + std::to_string(i) + " tp=" + std::to_string(tp));
        EXPECT_EQ(r.greedy, p.greedy_exact) << "tp=" << tp << ": greedy differs from the reference's";
      }
    }
  }
}

TEST(TensorParallel, F32LogitsBitIdenticalForTp124AndWithinGoldenTolerance) {
  check_prompts(Activations::F32, {1, 0});
}

TEST(TensorParallel, Q8LogitsBitIdenticalForTp124) { check_prompts(Activations::Q8, {1}); }

TEST(TensorParallel, ChunkedPrefillAtTp4EqualsTp1) {
  if (test::tiny_dir().empty()) GTEST_SKIP() << "fixture absent";
  const auto p = test::load_goldens().at(1);
  auto m1 = open(1, Activations::F32), m4 = open(4, Activations::F32);
  ASSERT_TRUE(m1 && m4);
  std::vector<float> a, b, part;
  {
    Dsv4Session s(m1);
    ASSERT_TRUE(s.eval(p.ids, &a, nullptr).ok());
  }
  Dsv4Session s(m4);
  size_t pos = 0;
  for (size_t c : {5ul, 60ul, 1ul, 120ul}) {
    ASSERT_TRUE(s.eval(std::span<const int32_t>(p.ids.data() + pos, c), &part, nullptr).ok());
    b.insert(b.end(), part.begin(), part.end());
    pos += c;
  }
  ASSERT_TRUE(s.eval(std::span<const int32_t>(p.ids.data() + pos, p.ids.size() - pos), &part, nullptr).ok());
  b.insert(b.end(), part.begin(), part.end());
  EXPECT_TRUE(same_bits(a, b));
}

// The canonical MoE sum does not depend on which rank owns which expert: a round-robin map and
// a map that puts every expert of odd layers on rank 3 give the tp=1 bits.
TEST(TensorParallel, AnyExpertPlacementGivesTheSameBits) {
  if (test::tiny_dir().empty()) GTEST_SKIP() << "fixture absent";
  const auto p = test::load_goldens().at(1);
  auto m1 = open(1, Activations::F32);
  ASSERT_TRUE(m1);
  std::vector<float> want;
  {
    Dsv4Session s(m1);
    ASSERT_TRUE(s.eval(p.ids, &want, nullptr).ok());
  }
  const ModelConfig& c = m1->config();
  ExpertPlacement round_robin(c.n_layer, std::vector<int32_t>(c.n_expert)), skewed = round_robin;
  for (int l = 0; l < c.n_layer; ++l)
    for (int e = 0; e < c.n_expert; ++e) {
      round_robin[l][e] = e % 4;
      skewed[l][e] = l % 2 ? 3 : e / 8;
    }
  for (const auto& map : {round_robin, skewed}) {
    ModelOptions o;
    o.tp = 4;
    o.threads = 2;
    o.expert_placement = map;
    auto m = Dsv4Model::open(test::tiny_gguf().string(), o);
    ASSERT_TRUE(m.ok()) << m.error().message;
    Dsv4Session s(*m);
    std::vector<float> got;
    ASSERT_TRUE(s.eval(p.ids, &got, nullptr).ok());
    EXPECT_TRUE(same_bits(got, want));
  }
  ModelOptions bad;
  bad.tp = 2;
  bad.expert_placement = round_robin;  // owners up to 3 with 2 ranks
  auto m = Dsv4Model::open(test::tiny_gguf().string(), bad);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.error().message.find("expected an owner rank 0..1, found 2"), std::string::npos) << m.error().message;
}

/// Layers of the split-staging plans: 1, 3, 4, 5 split, 0 and 2 whole.
bool split_layer(int l) { return l % 2 == 1 || l == 4; }

/// A plan for `tp` ranks: tiers V / H / P in turn (emu_plan.h), owners interleaved, split_layer.
std::string split_plan(const ModelConfig& c, int tp) {
  return emu_test::write_plan(c, emu_test::expert_bytes_from_header(test::tiny_gguf().string(), c.n_layer), tp,
                              [tp](int l, int e) { return (l + e / 2) % tp; }, "tp_split_" + std::to_string(tp),
                              nullptr, nullptr, 0, 0, 0, split_layer);
}

// Split staging on CPU ranks: the second golden prompt and 8 greedy tokens at tp 1 (no plan) and
// at tp 2 and 4 with a split plan (F32; Q8 at tp 4): same tokens, routing and logits bits; over
// the decode steps each rank's bytes from staged homes (WeightTraffic::staged_by_rank) and the
// store's host -> device bytes equal the plan's bookkeeping for the routing, which differs from
// what the same plan in whole mode would give (the split path really ran).
TEST(TensorParallel, SplitStagingPlanGivesTp1BitsAndThePlansLinkBytesPerRank) {
  if (test::tiny_dir().empty()) GTEST_SKIP() << "fixture absent";
  const std::vector<int32_t> prompt = test::load_goldens().at(1).ids;
  constexpr int kGen = 8;
  for (Activations act : {Activations::F32, Activations::Q8}) {
    const auto base = emu_test::open_tiny("cpu", 1, "", act);
    ASSERT_TRUE(base);
    ForwardTrace bt;
    std::vector<int32_t> btok;
    std::vector<std::vector<float>> blog;
    {
      Dsv4Session s(base);
      emu_test::greedy(s, prompt, kGen, &bt, btok, blog);
    }
    for (int tp : {2, 4}) {
      if (act == Activations::Q8 && tp == 2) continue;
      const std::string what = std::string(act == Activations::F32 ? "f32" : "q8") + " tp " + std::to_string(tp);
      const ModelConfig& c = base->config();
      const std::string plan = split_plan(c, tp);
      const auto m = emu_test::open_tiny("cpu", tp, plan, act);
      ASSERT_TRUE(m);
      ASSERT_NE(m->expert_plan(), nullptr);
      ForwardTrace tr;
      std::vector<int32_t> tok;
      std::vector<std::vector<float>> lg;
      WeightTraffic w0;
      uint64_t h0 = 0;
      Dsv4Session s(m);
      emu_test::greedy(s, prompt, kGen, &tr, tok, lg, [&] {
        w0 = s.weight_traffic();
        h0 = m->expert_counters().bytes_host_to_device;
      });
      const WeightTraffic w1 = s.weight_traffic();
      const uint64_t h1 = m->expert_counters().bytes_host_to_device;
      EXPECT_EQ(tok, btok) << what;
      EXPECT_EQ(tr.router, bt.router) << what;
      ASSERT_EQ(lg.size(), blog.size()) << what;
      for (size_t i = 0; i < lg.size(); ++i) EXPECT_TRUE(same_bits(lg[i], blog[i])) << what << " step " << i;
      // The plan's bookkeeping for the decode steps' routing (one token per step).
      const auto routes = emu_test::decode_routes(tr, prompt.size(), kGen);
      ASSERT_FALSE(routes.empty());
      auto pf = placement::read_plan_file(plan, c.n_layer, c.n_expert, c.n_expert_used);
      ASSERT_TRUE(pf.ok()) << pf.error().message;
      const std::vector<int64_t> eb = emu_test::expert_bytes_from_header(test::tiny_gguf().string(), c.n_layer);
      const std::vector<int> nodes(size_t(tp), 0);
      const placement::TierBytes b = placement::plan_bytes_for_routing(pf->plan, eb, 1, nodes, routes);
      placement::Plan whole = pf->plan;
      whole.mode.assign(whole.mode.size(), placement::StageMode::Whole);
      const placement::TierBytes bw = placement::plan_bytes_for_routing(whole, eb, 1, nodes, routes);
      EXPECT_GT(b.link_total(), 0) << what;
      EXPECT_NE(b.link, bw.link) << what << ": expected the routing to reach split experts";
      EXPECT_EQ(double(w1.routed_experts - w0.routed_experts), b.vram_total() + b.link_total()) << what;
      EXPECT_EQ(double(h1 - h0), b.link_total()) << what << ": the store's host -> device bytes";
      ASSERT_EQ(w1.staged_by_rank.size(), size_t(tp));
      ASSERT_EQ(w0.staged_by_rank.size(), size_t(tp));
      for (int k = 0; k < tp; ++k)
        EXPECT_EQ(double(w1.staged_by_rank[size_t(k)] - w0.staged_by_rank[size_t(k)]), b.link[size_t(k)])
            << what << " rank " << k;
      // CPU ranks bind by aliasing host memory: the hash-layer prefetch (a split layer's slices bound
      // at the step's start) runs only where bind copies (cuda_emu_tp_test checks it there).
      ASSERT_EQ(w1.prefetched_slices_by_rank.size(), size_t(tp));
      for (uint64_t v : w1.prefetched_slices_by_rank) EXPECT_EQ(v, 0u) << what;
      std::printf("split plan %s: logits bits == tp 1: %s; decode link bytes/token per rank:", what.c_str(),
                  std::equal(lg.begin(), lg.end(), blog.begin(), same_bits) ? "yes" : "NO");
      for (int k = 0; k < tp; ++k) std::printf(" %.0f", b.link[size_t(k)] / (kGen - 1));
      std::printf(" (whole mode:");
      for (int k = 0; k < tp; ++k) std::printf(" %.0f", bw.link[size_t(k)] / (kGen - 1));
      std::printf(")\n");
    }
  }
}

TEST(TensorParallel, RankCountsTheShapesDoNotAllowAreRefused) {
  if (test::tiny_dir().empty()) GTEST_SKIP() << "fixture absent";
  for (int tp : {3, 8, 0}) {
    ModelOptions o;
    o.tp = tp;
    auto m = Dsv4Model::open(test::tiny_gguf().string(), o);
    ASSERT_FALSE(m.ok()) << "tp=" << tp;
    EXPECT_NE(m.error().message.find("tp=" + std::to_string(tp)), std::string::npos) << m.error().message;
  }
}

TEST(TensorParallel, PerRankMemoryAddsUp) {
  if (test::tiny_dir().empty()) GTEST_SKIP() << "fixture absent";
  auto m1 = open(1, Activations::F32), m4 = open(4, Activations::F32);
  ASSERT_TRUE(m1 && m4);
  const RankMemory whole = m1->rank_memory(0);
  EXPECT_EQ(whole.weights(), m1->weight_bytes());
  Dsv4Session s(m4);
  const auto p = test::load_goldens().at(1);
  ASSERT_TRUE(s.eval(p.ids, nullptr, nullptr).ok());
  uint64_t sharded = 0, experts = 0;
  for (int r = 0; r < 4; ++r) {
    const RankMemory rm = s.rank_memory(r);
    std::printf("tp=4 rank %d: weights %llu B (replicated %llu, sharded %llu, experts %llu), state %llu B\n", r,
                static_cast<unsigned long long>(rm.weights()), static_cast<unsigned long long>(rm.weights_replicated),
                static_cast<unsigned long long>(rm.weights_sharded), static_cast<unsigned long long>(rm.weights_experts),
                static_cast<unsigned long long>(rm.state));
    EXPECT_EQ(rm.weights_replicated, whole.weights_replicated);
    EXPECT_EQ(rm.state, s.state_bytes());
    EXPECT_GT(rm.state, 0u);
    sharded += rm.weights_sharded;
    experts += rm.weights_experts;
    EXPECT_LT(rm.weights(), whole.weights());
  }
  EXPECT_EQ(sharded, whole.weights_sharded);  // slices are multiples of rows here: exact split
  EXPECT_EQ(experts, whole.weights_experts);
}

}  // namespace
}  // namespace ds4

// Cost model formulas on hand-computable cases (expected values computed here, not by the model).
#include <gtest/gtest.h>

#include "placement/cost_model.h"
#include "placement/planner.h"

namespace ds4::placement {
namespace {

// One expert of dim 256 x inter 256 in ds4-q2: gate+up IQ2_XXS (66 B / 256), down Q2_K (84 B / 256).
constexpr double kGateUpBytes = 2.0 * 256 * 256 / 256 * 66;
constexpr double kDownBytes = 256.0 * 256 / 256 * 84;
constexpr double kExpert = kGateUpBytes + kDownBytes;

struct Fixture {
  ModelShape shape;
  QuantMix mix = quant_mix_by_name("ds4-q2").value();
  ModelSizes sizes;
  HwProfile hw;
  RoutingStats stats;
  RoutingSamples samples;
  PlanOptions opt;

  Fixture(int gpus, int top_k, int n_samples) {
    shape.name = "hand";
    shape.n_layers = 1;
    shape.dim = 256;
    shape.vocab = 256;
    shape.n_heads = 4;
    shape.head_dim = 64;
    shape.q_lora_rank = 64;
    shape.o_groups = 2;
    shape.o_lora_rank = 64;
    shape.window = 16;
    shape.compress_ratios = {0};
    shape.index_n_heads = 2;
    shape.index_head_dim = 32;
    shape.n_experts = 4;
    shape.top_k = top_k;
    shape.n_shared_experts = 1;
    shape.moe_inter = 256;
    shape.hc_mult = 4;
    sizes = compute_model_sizes(shape, mix).value();
    NumaNodeProfile n;
    n.memory_bytes = int64_t(8) << 30;
    n.cores = 4;
    n.mem_read_gbps = 20;
    n.cpu_expert_gbps = {{"default", 8.0}, {"IQ2_XXS", 2.0}};
    n.cpu_gflops = 100;
    hw.name = "hand";
    hw.nodes = {n};
    for (int g = 0; g < gpus; ++g) hw.gpus.push_back({"g", 0, int64_t(2) << 30, 10.0, 500.0, 0.5, 5.0, ""});
    hw.h2d_aggregate_gbps = 1000;  // not binding
    hw.inter_socket_gbps = 10;
    hw.pageable_h2d_gbps = 1000;  // not binding unless a test says so
    hw.copy_latency_us = 5;
    hw.allreduce_latency_us = 20;
    hw.allreduce_gbps = 5;
    hw.host_reserved_bytes = int64_t(1) << 30;
    hw.layer_overhead_us = 7;
    hw.cpu_expert_latency_us = 3;
    stats = uniform_routing(1, 4, top_k);
    samples = draw_routing_samples(stats, n_samples, 11);
    opt.ctx = 256;
    opt.prefill_chunk = 16;
  }
  CostInputs inputs() const { return {&shape, &sizes, &mix, &hw, &stats, &samples, 16, 8}; }
};

TEST(CostModel, ExpertBytesAsExpected) {
  Fixture f(1, 1, 8);
  EXPECT_EQ(double(f.sizes.expert_bytes[0]), kExpert);
}

TEST(CostModel, WholeStagingOneGpu) {
  Fixture f(1, 1, 64);
  CostModel cm(f.inputs());
  auto plan = make_plan(cm, f.opt, Policy::PocketLlm);
  ASSERT_TRUE(plan.ok()) << plan.error().message;
  const Prediction p = cm.predict(plan.value());
  // One expert per token, staged whole at 10 GB/s + 5 us copy + compute at 500 * 0.5 GB/s.
  EXPECT_NEAR(p.moe_s, kExpert / 10e9 + 5e-6 + kExpert / 250e9, 1e-12);
  EXPECT_NEAR(p.sync_s, 7e-6, 1e-15);  // one rank: no all-reduce
  EXPECT_NEAR(p.link_bytes_per_token[0], kExpert, 1e-6);
}

TEST(CostModel, AllCpuUsesPerTypeRates) {
  Fixture f(1, 1, 16);
  CostModel cm(f.inputs());
  auto plan = make_plan(cm, f.opt, Policy::AllCpu);
  ASSERT_TRUE(plan.ok());
  EXPECT_NEAR(cm.predict(plan.value()).moe_s, kGateUpBytes / 2e9 + kDownBytes / 8e9 + 3e-6, 1e-12);
}

TEST(CostModel, SplitStagingHalvesEachLink) {
  Fixture f(2, 1, 16);
  CostModel cm(f.inputs());
  auto plan = make_plan(cm, f.opt, Policy::PocketLlm);
  ASSERT_TRUE(plan.ok());
  plan->mode[0] = StageMode::Split;
  const Prediction p = cm.predict(plan.value());
  EXPECT_NEAR(p.moe_s, kExpert / 2 / 10e9 + 5e-6 + kExpert / 2 / 250e9, 1e-12);
  EXPECT_NEAR(p.sync_s, 2 * 20e-6 + 7e-6, 1e-15);
}

TEST(CostModel, ExpectedMaxOverRanks) {
  // 2 of 4 experts per token, contiguous owners {0,1} -> GPU0, {2,3} -> GPU1, whole staging:
  // both on one rank with probability 2/6, so E[time] = t * (1 + 1/3).
  Fixture f(2, 2, 30000);
  CostModel cm(f.inputs());
  auto plan = make_plan(cm, f.opt, Policy::PocketLlm);
  ASSERT_TRUE(plan.ok());
  const double t = kExpert / 10e9 + 5e-6 + kExpert / 250e9;
  EXPECT_NEAR(cm.predict(plan.value()).moe_s / t, 4.0 / 3.0, 0.01);
  // The planner's split staging has no imbalance: 2 halves per rank every token.
  plan->mode[0] = StageMode::Split;
  EXPECT_NEAR(cm.predict(plan.value()).moe_s, 2 * (kExpert / 2 / 10e9 + 5e-6 + kExpert / 2 / 250e9), 1e-12);
}

TEST(CostModel, UnpinnableExpertsCopyAtThePageableRate) {
  Fixture f(1, 1, 16);
  f.hw.memlock_bytes = 0;  // nothing can be pinned
  f.hw.pageable_h2d_gbps = 4;
  {  // leave no VRAM for experts, so they are staged or CPU-computed
    CostModel probe(f.inputs());
    auto b = plan_budgets(probe, f.opt);
    ASSERT_TRUE(b.ok());
    f.hw.gpus[0].vram_bytes -= b->gpus[0].expert_capacity - 1000;
  }
  CostModel cm(f.inputs());
  auto plan = make_plan(cm, f.opt, Policy::Planner);
  ASSERT_TRUE(plan.ok()) << plan.error().message;
  int host = 0;
  for (const auto& e : plan->experts[0]) host += e.tier == Tier::Host;
  EXPECT_GT(host, 0);  // 4 GB/s pageable staging still beats 2 GB/s IQ2_XXS CPU compute
  for (const auto& e : plan->experts[0]) {
    ASSERT_FALSE(e.pinned);
    if (e.tier == Tier::Host) {
      // A staged expert is charged at 4 GB/s, not the 10 GB/s pinned rate.
      Plan one = plan.value();
      for (auto& x : one.experts[0]) x = e;
      EXPECT_NEAR(cm.predict(one).moe_s, kExpert / 4e9 + 5e-6 + kExpert / 250e9, 1e-12);
    }
  }
  EXPECT_EQ(plan->pinned_bytes, 0);
}

}  // namespace
}  // namespace ds4::placement

// Planner invariants on many generated inputs (random models, machines, budgets, routing; every
// third case has co-firing statistics with recorded routes, so planner step 2b runs):
// every expert placed exactly once, no capacity exceeded (re-accounted here, independently of
// planner.cpp), identical plans across runs, and a larger VRAM budget never predicts a slower
// decode step. Plus the clear errors for inputs that cannot be planned.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "placement/cost_model.h"
#include "placement/plan_report.h"
#include "placement/planner.h"
#include "placement/routing_counter.h"
#include "tests/placement/small_shape.h"
#include "tests/support/test_env.h"

namespace ds4::placement {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

struct Case {
  ModelShape shape;
  QuantMix mix;
  ModelSizes sizes;
  HwProfile hw;
  RoutingStats stats;
  RoutingSamples samples;
  PlanOptions opt;
  std::string label;
};

ModelShape tiny_shape(std::mt19937_64& rng) {
  const int n_layers = 2 + int(rng() % 6);
  ModelShape s = small_test_shape("generated", n_layers, 8, 1);
  s.dim = 256 * (1 + int64_t(rng() % 2));
  s.vocab = 512;
  s.compress_ratios.clear();
  for (int l = 0; l < s.n_layers; ++l) s.compress_ratios.push_back(std::array<int, 3>{0, 4, 128}[rng() % 3]);
  s.n_experts = std::array<int, 4>{8, 16, 32, 64}[rng() % 4];
  s.top_k = 1 + int(rng() % uint64_t(std::min(6, s.n_experts / 2)));
  s.moe_inter = 256 * (1 + int64_t(rng() % 2));
  s.n_hash_layers = int(rng() % 2);
  return s;
}

HwProfile random_profile(std::mt19937_64& rng, int64_t routed_bytes) {
  std::uniform_real_distribution<double> u(0.0, 1.0);
  HwProfile p;
  p.name = "generated";
  const int n_nodes = 1 + int(rng() % 2);
  for (int n = 0; n < n_nodes; ++n) {
    NumaNodeProfile np;
    np.id = n * 2;  // non-contiguous ids on purpose
    // From a third to twice the routed bytes per node: sometimes host memory runs out.
    np.memory_bytes = int64_t(double(routed_bytes) * (0.2 + 1.3 * u(rng))) + (int64_t(2) << 20);
    np.cores = 1 + int(rng() % 32);
    np.mem_read_gbps = 5 + 60 * u(rng);
    np.cpu_expert_gbps["default"] = 1 + 30 * u(rng);
    np.cpu_expert_gbps["IQ2_XXS"] = 1 + 15 * u(rng);
    np.cpu_gflops = 20 + 500 * u(rng);
    p.nodes.push_back(np);
  }
  const int n_gpus = int(rng() % 5);
  for (int g = 0; g < n_gpus; ++g) {
    GpuProfile gp;
    gp.name = "gpu" + std::to_string(g);
    gp.numa_node = p.nodes[rng() % p.nodes.size()].id;
    gp.vram_bytes = int64_t((0.6 + 0.12 * u(rng)) * kGiB);
    gp.h2d_gbps = 2 + 25 * u(rng);
    gp.vram_gbps = 200 + 800 * u(rng);
    gp.kernel_efficiency = 0.2 + 0.8 * u(rng);
    gp.tflops = 2 + 30 * u(rng);
    p.gpus.push_back(gp);
  }
  if (rng() % 10 < 7) p.nvme.push_back({"nvme", p.nodes[0].id, 1 + 6 * u(rng)});
  // Pageable copies no slower than NVMe reads (the condition of the monotonicity argument).
  p.pageable_h2d_gbps = 7 + 20 * u(rng);
  p.h2d_aggregate_gbps = 5 + 40 * u(rng);
  p.inter_socket_gbps = 5 + 30 * u(rng);
  p.copy_latency_us = 20 * u(rng);
  p.allreduce_latency_us = 60 * u(rng);
  p.allreduce_gbps = 1 + 10 * u(rng);
  p.memlock_bytes = (rng() % 2) ? -1 : int64_t(double(routed_bytes) * u(rng));
  p.host_reserved_bytes = int64_t(1) << 20;
  p.vram_reserved_bytes = int64_t(64 * u(rng) * 1024 * 1024);
  p.layer_overhead_us = 100 * u(rng);
  p.cpu_expert_latency_us = 30 * u(rng);
  return p;
}

// Statistics with co-activation (a statistics file with recorded routes, read back): per layer a
// random order of the experts, each of 200 tokens selecting top_k consecutive ones in that order
// from a random start; 64 routes kept (reservoir). Exercises planner step 2b and route samples.
RoutingStats cofiring_routes_stats(const ModelShape& shape, uint64_t seed) {
  std::mt19937_64 rng(seed * 31 + 7);
  const int L = shape.n_layers, E = shape.n_experts, k = shape.top_k;
  std::vector<std::vector<int>> order(static_cast<size_t>(L), std::vector<int>(static_cast<size_t>(E)));
  for (auto& o : order) {
    for (int e = 0; e < E; ++e) o[size_t(e)] = e;
    std::shuffle(o.begin(), o.end(), rng);
  }
  RoutingCounter counter(L, E, k, 64);
  for (int t = 0; t < 200; ++t)
    for (int l = 0; l < L; ++l) {
      const int start = int(rng() % uint64_t(E));
      std::vector<int32_t> sel;
      for (int i = 0; i < k; ++i) sel.push_back(order[size_t(l)][size_t((start + i) % E)]);
      EXPECT_TRUE(counter.add(l, sel).ok());
    }
  const auto path = (test::scratch_dir("invariants_routes_" + std::to_string(seed)) / "s.json").string();
  EXPECT_TRUE(write_routing_stats(path, "generated", k, 200, counter.counts(), counter.coactivation(), counter.routes())
                  .ok());
  auto st = load_routing_stats(path, L, E, k);
  EXPECT_TRUE(st.ok()) << st.error().message;
  RoutingStats out = std::move(st).value();
  out.source = "co-firing routes";
  return out;
}

std::unique_ptr<Case> make_case(uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto c = std::make_unique<Case>();
  c->shape = tiny_shape(rng);
  c->mix = quant_mix_by_name(quant_mix_names()[rng() % 4]).value();
  c->sizes = compute_model_sizes(c->shape, c->mix).value();
  c->hw = random_profile(rng, c->sizes.routed_bytes);
  EXPECT_TRUE(validate_hw_profile(c->hw, "generated").ok());
  const double s = (rng() % 3 == 0) ? 0.0 : 2.0 * double(rng() % 1000) / 1000;
  c->stats = s == 0 ? uniform_routing(c->shape.n_layers, c->shape.n_experts, c->shape.top_k)
                    : zipf_routing(c->shape.n_layers, c->shape.n_experts, c->shape.top_k, s);
  if (seed % 3 == 0) c->stats = cofiring_routes_stats(c->shape, seed);
  c->opt.ctx = 256 + int64_t(rng() % 4096);
  c->opt.prefill_chunk = 64;
  c->opt.samples = 48;
  c->opt.seed = seed;
  c->samples = draw_routing_samples(c->stats, c->opt.samples, c->opt.seed);
  c->label = "seed " + std::to_string(seed) + ": " + std::to_string(c->hw.gpus.size()) + " GPUs, " +
             std::to_string(c->hw.nodes.size()) + " nodes, mix " + c->mix.name + ", " + c->stats.source +
             ", memlock " + std::to_string(c->hw.memlock_bytes) + ", nvme " + std::to_string(c->hw.nvme.size());
  return c;
}

CostInputs inputs(const Case& c, const HwProfile& hw) {
  CostInputs in;
  in.shape = &c.shape;
  in.sizes = &c.sizes;
  in.mix = &c.mix;
  in.hw = &hw;
  in.stats = &c.stats;
  in.samples = &c.samples;
  in.prefill_chunk = c.opt.prefill_chunk;
  in.prefill_position = 128;
  return in;
}

// Capacity accounting written independently of planner.cpp.
void expect_within_capacity(const Case& c, const HwProfile& hw, const Plan& p) {
  const int R = int(hw.gpus.size());
  ASSERT_EQ(int(p.experts.size()), c.shape.n_layers);
  std::vector<int64_t> vram(size_t(R), 0), host(hw.nodes.size(), 0);
  int64_t pinned = 0, total = 0;
  for (int l = 0; l < c.shape.n_layers; ++l) {
    ASSERT_EQ(int(p.experts[size_t(l)].size()), c.shape.n_experts);
    const int64_t b = c.sizes.expert_bytes[size_t(l)];
    for (const ExpertPlacement& e : p.experts[size_t(l)]) {
      ++total;
      if (R == 0) {
        EXPECT_EQ(e.owner, -1);
        EXPECT_TRUE(e.tier == Tier::Cpu || e.tier == Tier::Nvme);
      } else {
        ASSERT_GE(e.owner, 0);
        ASSERT_LT(e.owner, R);
      }
      if (e.tier == Tier::Vram) vram[size_t(e.owner)] += b;
      if (e.tier == Tier::Nvme) {
        EXPECT_FALSE(hw.nvme.empty());
      }
      if (e.tier == Tier::Host || e.tier == Tier::Cpu) {
        ASSERT_GE(e.node, 0);
        ASSERT_LT(e.node, int(hw.nodes.size()));
        if (e.tier == Tier::Host && p.mode[size_t(l)] == StageMode::Split) {
          for (const auto& g : hw.gpus) host[size_t(hw.node_index(g.numa_node))] += (b + R - 1) / R;
        } else {
          host[size_t(e.node)] += b;
        }
        if (e.tier == Tier::Host && e.pinned) pinned += b;
      }
    }
  }
  EXPECT_EQ(total, int64_t(c.shape.n_layers) * c.shape.n_experts);
  const int64_t dense = c.sizes.dense_bytes_per_rank(std::max(R, 1));
  const int64_t kv = sequence_state_bytes(c.shape, c.opt.ctx, c.opt.kv_elem_bytes);
  int64_t max_expert = 0;
  for (int64_t b : c.sizes.expert_bytes) max_expert = std::max(max_expert, b);
  for (int g = 0; g < R; ++g) {
    const int64_t room = hw.gpus[size_t(g)].vram_bytes - hw.vram_reserved_bytes - dense - kv -
                         (int64_t(512) << 20) - c.opt.prefill_chunk * 256 * 1024 - 2 * c.shape.top_k * max_expert;
    EXPECT_LE(vram[size_t(g)], room) << "GPU " << g;
  }
  int64_t mem = 0;
  for (const auto& n : hw.nodes) mem += n.memory_bytes;
  for (size_t n = 0; n < hw.nodes.size(); ++n) {
    const int64_t cap = hw.nodes[n].memory_bytes -
                        int64_t(double(hw.host_reserved_bytes) * double(hw.nodes[n].memory_bytes) / double(mem));
    EXPECT_LE(host[n], cap) << "node " << n;
  }
  if (hw.memlock_bytes >= 0) {
    EXPECT_LE(pinned, hw.memlock_bytes);
  }
}

const Policy kPolicies[] = {Policy::Planner, Policy::PocketLlm, Policy::FrequencyGreedy, Policy::AllCpu};

TEST(PlannerInvariants, GeneratedInputs) {
  int planned = 0, no_room = 0, checked_monotone = 0, coact_changed = 0, coact_compared = 0, unsplittable = 0;
  for (uint64_t seed = 1; seed <= 120; ++seed) {
    auto c = make_case(seed);
    SCOPED_TRACE(c->label);
    CostModel cm(inputs(*c, c->hw));
    for (Policy pol : kPolicies) {
      auto plan = make_plan(cm, c->opt, pol);
      if (!plan.ok()) {
        // The only acceptable failure: host memory too small and no NVMe to stream from.
        EXPECT_TRUE(c->hw.nvme.empty()) << plan.error().message;
        EXPECT_NE(plan.error().message.find("no NVMe device"), std::string::npos) << plan.error().message;
        ++no_room;
        continue;
      }
      ++planned;
      for (const auto& n : plan->notes) {
        coact_changed += n.find("(step 2b)") != std::string::npos;
        coact_compared += n.find("with snake ownership only") != std::string::npos;
      }
      expect_within_capacity(*c, c->hw, plan.value());
      EXPECT_TRUE(check_plan(cm, plan.value()).ok());
      // Split layers only where the engine can slice the experts' rows over the R ranks.
      if (const int R = int(c->hw.gpus.size()); R > 1 && (c->shape.moe_inter % R != 0 || c->shape.dim % R != 0)) {
        ++unsplittable;
        for (StageMode m : plan->mode) EXPECT_NE(int(m), int(StageMode::Split)) << "R = " << R;
      }
      // Identical across runs (placements, modes and predictions, via the plan file).
      auto again = make_plan(cm, c->opt, pol);
      ASSERT_TRUE(again.ok());
      const Prediction p1 = cm.predict(plan.value()), p2 = cm.predict(again.value());
      EXPECT_EQ(plan_to_json(cm, c->opt, {plan.value(), p1}, {}), plan_to_json(cm, c->opt, {again.value(), p2}, {}));
      EXPECT_GT(p1.decode_tok_s, 0);
      EXPECT_GT(p1.prefill_tok_s, 0);
    }
    // A larger VRAM budget (some or all GPUs grow) never predicts a slower decode step.
    if (c->hw.gpus.empty()) continue;
    auto base = make_plan(cm, c->opt, Policy::Planner);
    if (!base.ok()) continue;
    const double t0 = cm.predict(base.value()).decode_step_s;
    std::mt19937_64 rng(seed * 7919);
    HwProfile bigger = c->hw;
    for (auto& g : bigger.gpus)
      if (rng() % 3) g.vram_bytes += int64_t(rng() % (int64_t(96) << 20));
    CostModel cm2(inputs(*c, bigger));
    auto grown = make_plan(cm2, c->opt, Policy::Planner);
    ASSERT_TRUE(grown.ok()) << grown.error().message;
    expect_within_capacity(*c, bigger, grown.value());
    EXPECT_LE(cm2.predict(grown.value()).decode_step_s, t0 * (1 + 1e-12));
    ++checked_monotone;
  }
  EXPECT_GT(planned, 300);
  EXPECT_GT(unsplittable, 0);  // 3-GPU cases (rows 256 or 512 are not multiples of 3)
  EXPECT_GT(checked_monotone, 50);
  EXPECT_GT(coact_compared, 5);   // co-firing cases with >= 2 GPUs: step 2b ran and was compared
  EXPECT_GT(coact_changed, 0);    // and its owners were kept on some
  std::printf("planned %d, host too small without NVMe %d, monotonicity checks %d, step 2b compared %d, kept %d\n",
              planned, no_room, checked_monotone, coact_compared, coact_changed);
}

TEST(PlannerInvariants, VramSweepIsMonotone) {
  // One machine, VRAM grown in small steps from "dense barely fits" to "everything resident".
  auto c = make_case(4242);
  std::mt19937_64 rng(5);
  c->hw = random_profile(rng, c->sizes.routed_bytes);
  GpuProfile g;
  g.name = "g";
  g.numa_node = c->hw.nodes[0].id;
  g.h2d_gbps = 11.5;
  g.vram_gbps = 616;
  g.kernel_efficiency = 0.6;
  g.tflops = 10;
  c->hw.gpus = {g, g, g};
  c->hw.gpus[2].numa_node = c->hw.nodes.back().id;
  c->hw.h2d_aggregate_gbps = 30;
  c->hw.memlock_bytes = -1;
  c->hw.nvme = {{"nvme", c->hw.nodes[0].id, 3.0}};
  double prev = 1e30;
  int resident_prev = -1;
  for (int step = 0; step < 40; ++step) {
    HwProfile hw = c->hw;
    for (auto& g : hw.gpus) g.vram_bytes = int64_t(0.6 * kGiB) + int64_t(step) * (int64_t(4) << 20);
    CostModel cm(inputs(*c, hw));
    auto plan = make_plan(cm, c->opt, Policy::Planner);
    ASSERT_TRUE(plan.ok()) << plan.error().message;
    const double t = cm.predict(plan.value()).decode_step_s;
    EXPECT_LE(t, prev * (1 + 1e-12)) << "step " << step;
    int resident = 0;
    for (const auto& g : plan->gpus) resident += g.resident_experts;
    EXPECT_GE(resident, resident_prev);
    prev = t;
    resident_prev = resident;
  }
}

TEST(PlannerInvariants, NeverSlowerThanABaseline) {
  // On every generated machine the planner's predicted decode step is <= each baseline's, and
  // when it keeps a baseline's placement the plan names that rule.
  int compared = 0, kept_baseline = 0;
  for (uint64_t seed = 1; seed <= 120; ++seed) {
    auto c = make_case(seed);
    SCOPED_TRACE(c->label);
    CostModel cm(inputs(*c, c->hw));
    auto planner = make_plan(cm, c->opt, Policy::Planner);
    if (!planner.ok()) continue;
    const double t = cm.predict(planner.value()).decode_step_s;
    EXPECT_EQ(planner->policy, "planner");
    for (Policy b : {Policy::PocketLlm, Policy::FrequencyGreedy, Policy::AllCpu}) {
      auto base = make_plan(cm, c->opt, b);
      ASSERT_TRUE(base.ok()) << base.error().message;
      const double tb = cm.predict(base.value()).decode_step_s;
      EXPECT_LE(t, tb) << policy_name(b);
      if (planner->rule == policy_name(b)) {
        EXPECT_EQ(t, tb) << policy_name(b);
      }
      ++compared;
    }
    kept_baseline += planner->rule != "planner";
  }
  EXPECT_GT(compared, 200);
  std::printf("planner vs baselines: %d comparisons, baseline placement kept on %d machines\n", compared,
              kept_baseline);
}

TEST(PlannerErrors, DenseDoesNotFitNamesTheGpu) {
  auto c = make_case(99);
  HwProfile hw = c->hw;
  if (hw.gpus.empty()) hw.gpus.push_back({"small", hw.nodes[0].id, 0, 11.5, 616, 0.6, 10, ""});
  hw.gpus[0].vram_bytes = int64_t(256) << 20;
  hw.vram_reserved_bytes = 0;
  CostModel cm(inputs(*c, hw));
  auto plan = make_plan(cm, c->opt, Policy::Planner);
  ASSERT_FALSE(plan.ok());
  EXPECT_NE(plan.error().message.find("GPU 0"), std::string::npos) << plan.error().message;
  EXPECT_NE(plan.error().message.find("exceed its VRAM"), std::string::npos) << plan.error().message;
}

TEST(PlannerErrors, HostTooSmallWithoutNvme) {
  auto c = make_case(17);
  HwProfile hw = c->hw;
  hw.gpus.clear();
  hw.nvme.clear();
  for (auto& n : hw.nodes) n.memory_bytes = (int64_t(1) << 20) + c->sizes.routed_bytes / 4 / int64_t(hw.nodes.size());
  hw.host_reserved_bytes = int64_t(1) << 20;
  CostModel cm(inputs(*c, hw));
  auto plan = make_plan(cm, c->opt, Policy::Planner);
  ASSERT_FALSE(plan.ok());
  EXPECT_NE(plan.error().message.find("no NVMe device"), std::string::npos) << plan.error().message;
}

}  // namespace
}  // namespace ds4::placement

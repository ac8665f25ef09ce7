// The plan file: what `plan --json` writes is what load_plan reads back; bad files are errors.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "placement/plan_file.h"
#include "placement/plan_report.h"
#include "tests/support/test_env.h"

namespace ds4::placement {
namespace {

struct Real {
  ModelShape shape = dsv4_flash_shape();
  QuantMix mix = quant_mix_by_name("mxfp4").value();
  ModelSizes sizes = compute_model_sizes(shape, mix).value();
  HwProfile hw = load_hw_profile((test::source_dir() / "configs/hw/4x2080ti-22g-pcie3-2s.json").string()).value();
  RoutingStats stats = zipf_routing(43, 256, 6, 0.8);
  RoutingSamples samples = draw_routing_samples(stats, 64, 1);
  CostInputs in() const { return {&shape, &sizes, &mix, &hw, &stats, &samples, 2048, 1024}; }
};

TEST(PlanFile, RoundTripOnTheRealModel) {
  Real r;
  CostModel cm(r.in());
  PlanOptions opt;
  auto plan = make_plan(cm, opt, Policy::Planner);
  ASSERT_TRUE(plan.ok()) << plan.error().message;
  // FP4 does not fit in 4 x 22 GB: the plan must use several tiers.
  int tiers[4] = {};
  for (const auto& row : plan->experts)
    for (const auto& e : row) tiers[int(e.tier)]++;
  EXPECT_GT(tiers[int(Tier::Vram)], 0);
  EXPECT_GT(tiers[int(Tier::Host)] + tiers[int(Tier::Cpu)], 0);
  auto dir = test::scratch_dir("placement_plan_file");
  const auto path = (dir / "plan.json").string();
  std::ofstream(path) << plan_to_json(cm, opt, {plan.value(), cm.predict(plan.value())}, {});
  auto back = load_plan(path, 43, 256, 4, 2);
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(back->policy, "planner");
  for (int l = 0; l < 43; ++l) {
    EXPECT_EQ(back->mode[size_t(l)], plan->mode[size_t(l)]);
    for (int e = 0; e < 256; ++e) {
      const auto &a = plan->experts[size_t(l)][size_t(e)], &b = back->experts[size_t(l)][size_t(e)];
      ASSERT_EQ(a.tier, b.tier) << l << "," << e;
      ASSERT_EQ(a.owner, b.owner);
      ASSERT_EQ(a.node, b.node);
      ASSERT_EQ(a.pinned, b.pinned);
      ASSERT_EQ(a.cpu_compute, b.cpu_compute);
    }
  }
  // The same prediction from the reloaded placements (budgets are not part of the prediction).
  EXPECT_EQ(cm.predict(back.value()).decode_step_s, cm.predict(plan.value()).decode_step_s);

  // Errors: other machine, bad tier character, owner out of range.
  auto ranks = load_plan(path, 43, 256, 2, 2);
  ASSERT_FALSE(ranks.ok());
  EXPECT_NE(ranks.error().message.find("ranks: expected 2"), std::string::npos) << ranks.error().message;
  nlohmann::json j = nlohmann::json::parse(std::ifstream(path));
  std::string t = j["layers"][3]["tier"];
  t[7] = 'X';
  j["layers"][3]["tier"] = t;
  std::ofstream(dir / "bad.json") << j.dump();
  auto bad = load_plan((dir / "bad.json").string(), 43, 256, 4, 2);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("layers[3] expert 7: unknown tier 'X'"), std::string::npos) << bad.error().message;
  // A NUL byte (JSON "\u0000") is shown as \x00, the message not cut there (fresh tester).
  t[7] = '\0';
  j["layers"][3]["tier"] = t;
  std::ofstream(dir / "nul.json") << j.dump();
  auto nul = load_plan((dir / "nul.json").string(), 43, 256, 4, 2);
  ASSERT_FALSE(nul.ok());
  EXPECT_NE(nul.error().message.find("unknown tier '\\x00' (expected V H P C N M)"), std::string::npos)
      << nul.error().message;
  j = nlohmann::json::parse(std::ifstream(path));
  j["layers"][0]["owner"][0] = 9;
  std::ofstream(dir / "owner.json") << j.dump();
  auto own = load_plan((dir / "owner.json").string(), 43, 256, 4, 2);
  ASSERT_FALSE(own.ok());
  EXPECT_NE(own.error().message.find("owner: expected 0..3, found 9"), std::string::npos) << own.error().message;
  // Entries out of order: layers[4] says it is layer 3 (its placements went to layer 4 silently).
  j = nlohmann::json::parse(std::ifstream(path));
  j["layers"][4]["layer"] = 3;
  std::ofstream(dir / "order.json") << j.dump();
  auto order = load_plan((dir / "order.json").string(), 43, 256, 4, 2);
  ASSERT_FALSE(order.ok()) << "expected an error for layers[4].layer 3, found none";
  EXPECT_NE(order.error().message.find("layers[4].layer: expected 4"), std::string::npos) << order.error().message;
  EXPECT_NE(order.error().message.find("found 3"), std::string::npos) << order.error().message;
  j["layers"][4]["layer"] = "4";
  std::ofstream(dir / "order.json") << j.dump();
  auto str = load_plan((dir / "order.json").string(), 43, 256, 4, 2);
  ASSERT_FALSE(str.ok()) << "expected an error for layers[4].layer \"4\", found none";
  EXPECT_NE(str.error().message.find("layers[4].layer: expected 4"), std::string::npos) << str.error().message;
}

TEST(PlanFile, EngineReaderChecksTheModelAndCarriesThePrediction) {
  Real r;
  CostModel cm(r.in());
  PlanOptions opt;
  auto plan = make_plan(cm, opt, Policy::Planner);
  ASSERT_TRUE(plan.ok()) << plan.error().message;
  const Prediction pr = cm.predict(plan.value());
  auto dir = test::scratch_dir("placement_plan_file_reader");
  const auto path = (dir / "plan.json").string();
  std::ofstream(path) << plan_to_json(cm, opt, {plan.value(), pr}, {});
  auto f = read_plan_file(path, 43, 256, 6);
  ASSERT_TRUE(f.ok()) << f.error().message;
  EXPECT_EQ(f->plan.ranks, 4);
  ASSERT_EQ(f->expert_bytes.size(), 43u);
  EXPECT_EQ(f->expert_bytes[0], r.sizes.expert_bytes[0]);
  ASSERT_EQ(f->predicted.vram.size(), 4u);
  EXPECT_DOUBLE_EQ(f->predicted.vram[1], pr.vram_bytes_per_token[1]);
  EXPECT_DOUBLE_EQ(f->predicted.nvme, pr.nvme_bytes_per_token);
  // Predicted bytes add up to one token's expected expert bytes over all tiers.
  double expect = 0;
  for (int l = 0; l < 43; ++l) expect += 6.0 * double(r.sizes.expert_bytes[size_t(l)]);
  const double vram = f->predicted.vram_total(), link = f->predicted.link_total(), cpu = f->predicted.cpu_total();
  // Every activation lands in exactly one of vram, link, cpu (NVMe is counted in addition).
  EXPECT_NEAR(vram + link + cpu, expect, 1e-6 * expect);
  // Exact bookkeeping of a routing by hand: one token, layer 0, the first three experts.
  std::vector<std::vector<std::vector<int32_t>>> routes(43);
  routes[0] = {{0, 1, 2}};
  const TierBytes tb = plan_bytes_for_routing(f->plan, f->expert_bytes, 2, {0, 0, 1, 1}, routes);
  double nvme = 0;
  for (int e = 0; e < 3; ++e)
    if (f->plan.experts[0][size_t(e)].tier == Tier::Nvme) nvme += double(f->expert_bytes[0]);
  EXPECT_DOUBLE_EQ(tb.nvme, nvme);
  EXPECT_NEAR(tb.vram_total() + tb.cpu_total() + tb.link_total(), 3.0 * double(f->expert_bytes[0]), 1e-6);
  // A plan for another model is refused with both shapes in the message.
  auto bad = read_plan_file(path, 6, 16, 4);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("43 layers x 256 experts"), std::string::npos) << bad.error().message;
  EXPECT_NE(bad.error().message.find("6 x 16"), std::string::npos) << bad.error().message;
  // A tier string of the wrong length names the layer, expected and found.
  nlohmann::json j = nlohmann::json::parse(std::ifstream(path));
  j["layers"][5]["tier"] = "VV";
  const auto path2 = (dir / "short.json").string();
  std::ofstream(path2) << j.dump();
  auto bad2 = read_plan_file(path2, 43, 256, 6);
  ASSERT_FALSE(bad2.ok());
  EXPECT_NE(bad2.error().message.find("layers[5].tier: expected 256 tier letters (one per expert), found 2"),
            std::string::npos)
      << bad2.error().message;
}

// Hand-edited plans: wrong JSON types and out-of-range integers are named (not a JSON library
// type error, not truncated to int), and a plan whose expert sizes differ from the model's is
// refused by check_plan_expert_bytes.
TEST(PlanFile, HandEditedPlansAreRefusedWithTheKey) {
  Real r;
  CostModel cm(r.in());
  PlanOptions opt;
  auto plan = make_plan(cm, opt, Policy::Planner);
  ASSERT_TRUE(plan.ok()) << plan.error().message;
  auto dir = test::scratch_dir("placement_plan_file_edits");
  const auto path = (dir / "plan.json").string();
  std::ofstream(path) << plan_to_json(cm, opt, {plan.value(), cm.predict(plan.value())}, {});
  auto edited = [&](const char* name, auto edit) {
    nlohmann::json j = nlohmann::json::parse(std::ifstream(path));
    edit(j);
    const auto p = (dir / name).string();
    std::ofstream(p) << j.dump();
    auto f = read_plan_file(p, 43, 256, 6);
    return f.ok() ? std::string("accepted") : f.error().message;
  };
  using J = nlohmann::json;
  EXPECT_NE(edited("rule.json", [](J& j) { j["rule"] = 5; }).find("rule.json.rule: expected a string, found 5"),
            std::string::npos);
  EXPECT_NE(edited("routing.json", [](J& j) { j["routing"] = J::array({1}); }).find(".routing: expected a string"),
            std::string::npos);
  EXPECT_NE(edited("policy.json", [](J& j) { j["policy"] = nullptr; }).find(".policy: expected a string, found null"),
            std::string::npos);
  EXPECT_NE(edited("format.json", [](J& j) { j["format"] = 1; }).find(".format: expected a string, found 1"),
            std::string::npos);
  // 2^32 + 1 would read as 1 through a 32-bit int.
  EXPECT_NE(edited("version.json", [](J& j) { j["version"] = 4294967297LL; }).find("version: expected 1, found 4294967297"),
            std::string::npos);
  EXPECT_NE(edited("owner.json", [](J& j) { j["layers"][0]["owner"][0] = 4294967296LL; })
                .find("layers[0] expert 0: owner: expected 0..3, found 4294967296"),
            std::string::npos);
  EXPECT_NE(edited("nvme.json", [](J& j) { j["prediction"]["nvme_bytes_per_token"] = -5; })
                .find("nvme_bytes_per_token: expected a non-negative number, found -5"),
            std::string::npos);
  EXPECT_NE(edited("vram.json", [](J& j) { j["prediction"]["vram_bytes_per_token"][1] = -1.5; })
                .find("vram_bytes_per_token[1]: expected a non-negative number, found -1.5"),
            std::string::npos);
  // 2^63 reads as a negative int64 through get<int64_t>: named as written.
  EXPECT_NE(edited("bytes.json", [](J& j) { j["layers"][0]["expert_bytes"] = 9223372036854775808ULL; })
                .find("layers[0].expert_bytes: expected an integer up to 9223372036854775807, found 9223372036854775808"),
            std::string::npos);
  EXPECT_NE(edited("layer.json", [](J& j) { j["layers"][0] = 5; }).find("layers[0]: expected an object, found 5"),
            std::string::npos);
  auto d = read_plan_file(dir.string(), 43, 256, 6);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.error().message.find("expected a plan file, found a directory"), std::string::npos) << d.error().message;
  // Expert sizes: equal passes; one layer off names it with both sizes.
  auto f = read_plan_file(path, 43, 256, 6);
  ASSERT_TRUE(f.ok()) << f.error().message;
  EXPECT_TRUE(check_plan_expert_bytes(f.value(), r.sizes.expert_bytes, path).ok());
  std::vector<int64_t> other = r.sizes.expert_bytes;
  other[7] += 64;
  auto c = check_plan_expert_bytes(f.value(), other, path);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().message.find("layers[7].expert_bytes: expected " + std::to_string(other[7]) +
                                   " (one routed expert of this model), found " +
                                   std::to_string(r.sizes.expert_bytes[7])),
            std::string::npos)
      << c.error().message;
  other.pop_back();
  EXPECT_FALSE(check_plan_expert_bytes(f.value(), other, path).ok());
}

}  // namespace
}  // namespace ds4::placement

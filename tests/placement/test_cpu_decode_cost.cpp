// All-CPU decode terms of the cost model (cost_model.h) and the "cpu_decode" profile key, on
// hand-computed cases: every expected value below is worked out in the comment next to it.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "kernels/quant/ggml_type.h"
#include "placement/cost_model.h"
#include "placement/planner.h"
#include "tests/placement/small_shape.h"

namespace ds4::placement {
namespace {

using nlohmann::json;

// H = 4 heads x D = 64, window 16, indexer 2 heads x 32, top-8; layers of ratio 0, 4, 128.
ModelShape three_layer_shape() {
  ModelShape s = small_test_shape("hand", 3, 4, 4);
  s.compress_ratios = {0, 4, 128};
  s.index_topk = 8;
  return s;
}

TEST(CpuDecodeCost, AttentionFlopsByLayerKindAndPosition) {
  const ModelShape s = three_layer_shape();
  // ratio 0, pos 5: 6 visible raw entries -> 4 * 4 * 64 * 6.
  EXPECT_DOUBLE_EQ(decode_attention_flops(s, 0, 5), 6144.0);
  // ratio 0, pos 100: the window caps at 16 -> 4 * 256 * 16.
  EXPECT_DOUBLE_EQ(decode_attention_flops(s, 0, 100), 16384.0);
  // ratio 4, pos 99: 100 visible, 25 compressed; 16 + min(8, 25) = 24 selected -> 1024 * 24 = 24576,
  // indexer 2 * 2 * 32 * 25 = 3200.
  EXPECT_DOUBLE_EQ(decode_attention_flops(s, 1, 99), 27776.0);
  // ratio 4, pos 10: 11 visible, 2 compressed; 11 + 2 = 13 -> 13312, indexer 128 * 2 = 256.
  EXPECT_DOUBLE_EQ(decode_attention_flops(s, 1, 10), 13568.0);
  // ratio 128, pos 299: 300 visible -> 16 + 2 -> 1024 * 18.
  EXPECT_DOUBLE_EQ(decode_attention_flops(s, 2, 299), 18432.0);
}

TEST(CpuDecodeCost, CacheFractionAndBlendedRate) {
  EXPECT_DOUBLE_EQ(cache_resident_fraction(100, 400), 0.25);
  EXPECT_DOUBLE_EQ(cache_resident_fraction(500, 400), 1.0);
  EXPECT_DOUBLE_EQ(cache_resident_fraction(0, 400), 0.0);
  EXPECT_DOUBLE_EQ(cache_resident_fraction(100, 0), 0.0);
  CpuDecodeMode m;
  m.hot_gbps = {{"default", 10}, {"Q8_0", 20}};
  m.cold_gbps = {{"default", 2}};
  // 1e9 B of Q8_0, a quarter from cache: 0.25 / 20 + 0.75 / 2 = 0.3875 s.
  EXPECT_NEAR(cpu_matvec_seconds(m, "Q8_0", 1e9, 0.25), 0.3875, 1e-15);
  // An unlisted type takes "default": 0.25 / 10 + 0.75 / 2 = 0.4 s.
  EXPECT_NEAR(cpu_matvec_seconds(m, "IQ1_M", 1e9, 0.25), 0.4, 1e-15);
  // All cold: 5e8 B / 2 GB/s = 0.25 s.
  EXPECT_NEAR(cpu_matvec_seconds(m, "Q8_0", 5e8, 0.0), 0.25, 1e-15);
  // Without a cold map the hot rate stands in: 1e9 / 20e9.
  CpuDecodeMode h;
  h.hot_gbps = {{"default", 20}};
  EXPECT_NEAR(cpu_matvec_seconds(h, "F16", 1e9, 0.0), 0.05, 1e-15);
}

TEST(CpuDecodeCost, FitRecoversExactCosts) {
  // token 1 ms, layer 0.5 ms, attention 2 GFLOP/s (0.5 ms per MFLOP).
  std::vector<DecodeProbeSample> xs = {
      {6, 0.002, 0, 0.002 + 0.001 + 0.003},
      {6, 0.002, 1e7, 0.002 + 0.001 + 0.003 + 0.005},
      {3, 0.001, 0, 0.001 + 0.001 + 0.0015},
      {3, 0.001, 5e6, 0.001 + 0.001 + 0.0015 + 0.0025},
  };
  auto f = fit_decode_fixed_costs(xs);
  ASSERT_TRUE(f.ok()) << f.error().message;
  EXPECT_NEAR(f->token_s, 0.001, 1e-12);
  EXPECT_NEAR(f->layer_s, 0.0005, 1e-12);
  EXPECT_NEAR(f->attn_gflops, 2.0, 1e-8);
  EXPECT_NEAR(f->rms_residual_s, 0.0, 1e-12);
}

TEST(CpuDecodeCost, FitKeepsCoefficientsNonNegative) {
  // Residuals 1 ms at 6 layers, 2 ms at 3 layers, 2.5 ms at 6 layers + 1 MFLOP: the exact fit has
  // a negative per-layer cost. Feasible subsets: {token, attention} gives token = 1.5 ms (the mean
  // of the two F = 0 residuals), attention 1 ms per MFLOP (1 GFLOP/s), SSE 2 * 0.5^2 ms^2 = 5e-7;
  // {token} alone 1.17e-6, {layer, attention} 1.8e-6: the first wins.
  std::vector<DecodeProbeSample> xs = {{6, 0, 0, 0.001}, {3, 0, 0, 0.002}, {6, 0, 1e6, 0.0025}};
  auto f = fit_decode_fixed_costs(xs);
  ASSERT_TRUE(f.ok()) << f.error().message;
  EXPECT_NEAR(f->token_s, 0.0015, 1e-12);
  EXPECT_EQ(f->layer_s, 0.0);
  EXPECT_NEAR(f->attn_gflops, 1.0, 1e-8);
  EXPECT_NEAR(f->rms_residual_s, std::sqrt(5e-7 / 3), 1e-12);
  // Depth-independent residuals: no attention term (reported as unmeasured), token cost = mean.
  auto g = fit_decode_fixed_costs({{6, 0, 0, 0.002}, {6, 0, 1e6, 0.002}, {6, 0, 2e6, 0.002}});
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->attn_gflops, kUnmeasuredAttnGflops);
  EXPECT_NEAR(g->token_s + 6 * g->layer_s, 0.002, 1e-12);
}

TEST(CpuDecodeCost, FitRejectsTooFewOrBadSamples) {
  EXPECT_FALSE(fit_decode_fixed_costs({{6, 0, 0, 0.001}, {3, 0, 0, 0.002}}).ok());
  EXPECT_FALSE(fit_decode_fixed_costs({{6, 0, 0, 0.001}, {3, 0, 0, NAN}, {3, 0, 1, 0.001}}).ok());
}

struct AllCpu {
  ModelShape shape = three_layer_shape();
  QuantMix mix = quant_mix_by_name("ds4-q2").value();
  ModelSizes sizes = compute_model_sizes(shape, mix).value();
  HwProfile hw;
  RoutingStats stats;
  RoutingSamples samples;
  PlanOptions opt;

  AllCpu() {
    NumaNodeProfile n;
    n.memory_bytes = int64_t(8) << 30;
    n.cores = 2;
    n.mem_read_gbps = 20;
    n.cpu_expert_gbps = {{"default", 8.0}};
    n.cpu_gflops = 100;
    hw.name = "hand";
    hw.nodes = {n};
    hw.inter_socket_gbps = 10;
    hw.pageable_h2d_gbps = 10;
    hw.allreduce_gbps = 5;
    hw.host_reserved_bytes = int64_t(1) << 30;
    hw.layer_overhead_us = 7;
    hw.cpu_expert_latency_us = 3;
    // top_k = n_experts = 4: every token computes every expert, so the expectation is exact.
    stats = uniform_routing(3, 4, 4);
    samples = draw_routing_samples(stats, 8, 1);
    opt.ctx = 256;
    opt.prefill_chunk = 16;
  }
  CostInputs inputs(int64_t pos) const {
    CostInputs in{&shape, &sizes, &mix, &hw, &stats, &samples, 16, 8};
    in.decode_position = pos;
    return in;
  }
};

/// Weight bytes of `sizes` by kind: the non-routed tensors read every decode token (not the
/// embedding nor tid2eid) and all routed-expert tensors (gate/up and down).
struct WeightBytes {
  double non_routed = 0;
  double routed = 0;
};
WeightBytes weight_bytes(const ModelSizes& sizes) {
  WeightBytes b;
  for (const auto& t : sizes.tensors) {
    if (t.cls == TensorClass::ExpertGateUp || t.cls == TensorClass::ExpertDown) b.routed += double(t.bytes);
    else if (t.read_per_token) b.non_routed += double(t.bytes);
  }
  return b;
}

/// Weight bytes one decode token reads when it computes all 4 experts of each of the 3 layers
/// (AllCpu's routing: top_k = n_experts = 4): the non-routed bytes plus 4 experts per layer.
double all_experts_token_bytes(const ModelSizes& sizes) {
  double bytes = weight_bytes(sizes).non_routed;
  for (int l = 0; l < 3; ++l) bytes += 4.0 * double(sizes.expert_bytes[size_t(l)]);
  return bytes;
}

TEST(CpuDecodeCost, CalibratedAllCpuStepIsTheSumOfItsTerms) {
  AllCpu f;
  CpuDecodeMode m;
  m.hot_gbps = {{"default", 4.0}};
  m.cold_gbps = {{"default", 4.0}};  // one rate: the cache fraction does not matter
  m.token_us = 100;
  m.layer_us = 300;
  m.attn_gflops = 2;
  f.hw.cpu_decode.threads = 2;
  f.hw.cpu_decode.llc_bytes = 1 << 20;
  f.hw.cpu_decode.modes["q8"] = m;
  // Weight bytes per token, summed from the size table here: non-routed tensors read per token
  // (not the embedding nor tid2eid) plus all 4 experts of each of the 3 layers.
  const double bytes = all_experts_token_bytes(f.sizes);
  // Attention at pos 99: 16384 (ratio 0) + 27776 (ratio 4) + 1024 * (16 + 0) (ratio 128, 100 / 128 = 0).
  const double flops = 16384.0 + 27776.0 + 16384.0;
  CostModel cm(f.inputs(99));
  ASSERT_NE(cm.cpu_calibration(), nullptr);
  auto plan = make_plan(cm, f.opt, Policy::AllCpu);
  ASSERT_TRUE(plan.ok()) << plan.error().message;
  const Prediction p = cm.predict(plan.value());
  EXPECT_TRUE(p.cpu_calibrated);
  EXPECT_NEAR(p.fixed_s, 100e-6 + 3 * 300e-6, 1e-15);
  EXPECT_NEAR(p.attn_s, flops / 2e9, 1e-15);
  EXPECT_NEAR(p.dense_s + p.moe_s, bytes / 4e9, 1e-12);
  EXPECT_EQ(p.sync_s, 0.0);  // layer_overhead_us and the expert latency are replaced by the fit
  EXPECT_NEAR(p.decode_step_s, 100e-6 + 900e-6 + flops / 2e9 + bytes / 4e9, 1e-12);
  EXPECT_NEAR(cpu_decode_matvec_seconds(f.shape, f.sizes, m, CpuHotShares{}), bytes / 4e9, 1e-12);
  // A mode the profile lacks falls back to the uncalibrated model.
  CostInputs in = f.inputs(99);
  in.activations = "f32";
  CostModel old(in);
  EXPECT_EQ(old.cpu_calibration(), nullptr);
  EXPECT_FALSE(old.predict(plan.value()).cpu_calibrated);
}

TEST(CpuDecodeCost, HotAndColdBlendByWorkingSet) {
  AllCpu f;
  CpuDecodeMode m;
  m.hot_gbps = {{"default", 8.0}};
  m.cold_gbps = {{"default", 2.0}};
  m.attn_gflops = 1e6;
  const int64_t ws = cpu_working_set_bytes(f.sizes);
  // Working set = every tensor except the embedding and tid2eid (none: ds4-q2 has no hash layers here).
  int64_t expect_ws = 0;
  for (const auto& t : f.sizes.tensors)
    if (t.cls != TensorClass::Embedding && t.cls != TensorClass::Tid2Eid) expect_ws += t.bytes;
  EXPECT_EQ(ws, expect_ws);
  f.hw.cpu_decode.llc_bytes = ws / 2;  // half of it cached: 0.5 / 8 + 0.5 / 2 = 0.3125 s per GB
  f.hw.cpu_decode.modes["q8"] = m;
  CostModel cm(f.inputs(0));
  // No reuse curve in the profile: the reported LLC decides, one share for every weight.
  EXPECT_DOUBLE_EQ(cm.hot_shares().non_routed, double(ws / 2) / double(ws));
  EXPECT_DOUBLE_EQ(cm.hot_shares().routed, double(ws / 2) / double(ws));
  const double bytes = all_experts_token_bytes(f.sizes);
  auto plan = make_plan(cm, f.opt, Policy::AllCpu);
  ASSERT_TRUE(plan.ok());
  const Prediction p = cm.predict(plan.value());
  const double hf = cm.hot_shares().non_routed;
  EXPECT_NEAR(p.dense_s + p.moe_s, bytes * (hf / 8e9 + (1 - hf) / 2e9), 1e-12);
}

TEST(CpuDecodeCost, CacheHitShareFromAMeasuredCurve) {
  // 1 MiB at 40 GB/s (all hits), 4 MiB at 20, 16 MiB at 10 (DRAM): t = 0.025, 0.05, 0.1 ns/B.
  const double M = 1024.0 * 1024.0;
  const std::vector<ReusePoint> c = {{1 * M, 40}, {4 * M, 20}, {16 * M, 10}};
  EXPECT_DOUBLE_EQ(cache_hit_share(c, 0.5 * M), 1.0);  // below the first point: all hits
  EXPECT_DOUBLE_EQ(cache_hit_share(c, 1 * M), 1.0);
  EXPECT_DOUBLE_EQ(cache_hit_share(c, 16 * M), 0.0);   // the last point: all DRAM
  EXPECT_DOUBLE_EQ(cache_hit_share(c, 64 * M), 0.0);   // beyond it
  // 4 MiB: t = 0.05 = h * 0.025 + (1 - h) * 0.1 -> h = 0.05 / 0.075 = 2/3.
  EXPECT_NEAR(cache_hit_share(c, 4 * M), 2.0 / 3.0, 1e-12);
  // 2 MiB: halfway in log(size) between 1 and 4 MiB: t = (0.025 + 0.05) / 2 = 0.0375 -> h = 0.0625 / 0.075.
  EXPECT_NEAR(cache_hit_share(c, 2 * M), 0.0625 / 0.075, 1e-12);
  // 8 MiB: t = (0.05 + 0.1) / 2 = 0.075 -> h = 0.025 / 0.075 = 1/3.
  EXPECT_NEAR(cache_hit_share(c, 8 * M), 1.0 / 3.0, 1e-12);
  // A flat curve: the caches do not help, the hot rates stand.
  EXPECT_DOUBLE_EQ(cache_hit_share({{1 * M, 10}, {16 * M, 10}}, 8 * M), 1.0);
  EXPECT_DOUBLE_EQ(cache_hit_share({{1 * M, 10}}, 8 * M), 0.0);  // no curve
}

TEST(CpuDecodeCost, ReuseBytesOfNonRoutedAndRoutedWeights) {
  // 100 B non-routed, 800 B of experts, p = 1/8. Non-routed (q = 1): 100 + 800 * (1 - 7/8) = 200.
  EXPECT_NEAR(decode_reuse_bytes(100, 800, 0.125, 1.0), 200.0, 1e-12);
  // An expert (q = p, n = 8 tokens): 100 + 800 * (1 - (7/8)^8) = 100 + 800 * 0.656391... = 625.1129...
  EXPECT_NEAR(decode_reuse_bytes(100, 800, 0.125, 0.125), 100 + 800 * (1 - 5764801.0 / 16777216.0), 1e-9);
  // Every expert every token (p = 1): everything in between, at any q.
  EXPECT_NEAR(decode_reuse_bytes(100, 800, 1.0, 1.0), 900.0, 1e-12);
}

TEST(CpuDecodeCost, ReuseCurveDecidesTheSharesNotTheReportedLlc) {
  // A profile whose OS-reported LLC holds the whole model (the old blend: all hot), but whose
  // measured curve falls to DRAM rates below the model's reuse distances.
  AllCpu f;
  CpuDecodeMode m;
  m.hot_gbps = {{"default", 8.0}};
  m.cold_gbps = {{"default", 2.0}};
  m.attn_gflops = 1e6;
  const int64_t ws = cpu_working_set_bytes(f.sizes);
  f.hw.cpu_decode.llc_bytes = 4 * ws;
  f.hw.cpu_decode.modes["q8"] = m;
  const auto [non_routed, routed] = weight_bytes(f.sizes);
  // top_k = n_experts = 4 here: p = 1, every weight's reuse distance is the whole working set.
  ASSERT_DOUBLE_EQ(non_routed + routed, double(ws));
  {
    CostModel cm(f.inputs(0));
    EXPECT_DOUBLE_EQ(cm.hot_shares().non_routed, 1.0);  // no curve: llc >= working set
  }
  // Curve: hits up to ws / 4, DRAM from ws / 2 on.
  f.hw.cpu_decode.reuse_curve = {{double(ws) / 4, 16.0}, {double(ws) / 2, 2.0}, {double(ws), 2.0}};
  CostModel cm(f.inputs(0));
  EXPECT_DOUBLE_EQ(cm.hot_shares().non_routed, 0.0);
  EXPECT_DOUBLE_EQ(cm.hot_shares().routed, 0.0);
  auto plan = make_plan(cm, f.opt, Policy::AllCpu);
  ASSERT_TRUE(plan.ok());
  const Prediction p = cm.predict(plan.value());
  EXPECT_NEAR(p.dense_s + p.moe_s, all_experts_token_bytes(f.sizes) / 2e9, 1e-12);  // all at the cold rate
  // Non-routed and routed shares differ when experts are sparse: 8 experts top-2 (p = 1/4).
  {
    ModelShape s = f.shape;
    s.n_experts = 8;
    s.top_k = 2;
    const ModelSizes sz = compute_model_sizes(s, f.mix).value();
    const auto [nr, ro] = weight_bytes(sz);
    CpuDecodeProfile prof;
    // t_first = 1/16, t_last = 1/2, a point exactly at each reuse distance (expected shares 0.8, 0.2).
    const double d_nr = nr + ro * 0.25, d_ro = nr + ro * (1 - std::pow(0.75, 4.0));
    const double t_nr = 0.8 / 16 + 0.2 / 2, t_ro = 0.2 / 16 + 0.8 / 2;
    prof.reuse_curve = {{d_nr / 2, 16.0}, {d_nr, 1 / t_nr}, {d_ro, 1 / t_ro}, {d_ro * 2, 2.0}};
    const CpuHotShares h = cpu_hot_shares(prof, s, sz);
    EXPECT_NEAR(h.non_routed, 0.8, 1e-9);
    EXPECT_NEAR(h.routed, 0.2, 1e-9);
  }
}

json profile_with(const json& cpu_decode) {
  json j = json::parse(R"({
    "name": "t",
    "numa_nodes": [{"id": 0, "memory_gib": 64, "cores": 2, "mem_read_gbps": 40,
                    "cpu_expert_gbps": {"default": 10}, "cpu_gflops": 100}],
    "gpus": [],
    "links": {"h2d_aggregate_gbps": 0, "inter_socket_gbps": 16, "pageable_h2d_gbps": 11, "copy_latency_us": 8,
              "allreduce_latency_us": 0, "allreduce_gbps": 6},
    "host": {"memlock_gib": "unlimited", "reserved_gib": 4},
    "runtime": {"vram_reserved_mib": 700, "layer_overhead_us": 60, "cpu_expert_latency_us": 15}
  })");
  if (!cpu_decode.is_null()) j["cpu_decode"] = cpu_decode;
  return j;
}

json good_cpu_decode() {
  return json::parse(R"({"threads": 2, "llc_mib": 32, "modes": {
    "q8": {"token_us": 120, "layer_us": 300, "attn_gflops": 4,
           "hot_gbps": {"default": 20, "Q8_0": 30}, "cold_gbps": {"default": 8}}}})");
}

TEST(CpuDecodeProfile, OldProfilesHaveNoneAndNewOnesRoundTrip) {
  auto old = parse_hw_profile(profile_with(nullptr).dump(), "old.json");
  ASSERT_TRUE(old.ok()) << old.error().message;
  EXPECT_TRUE(old->cpu_decode.empty());
  EXPECT_EQ(hw_profile_to_json(old.value()).find("cpu_decode"), std::string::npos);
  auto p = parse_hw_profile(profile_with(good_cpu_decode()).dump(), "new.json");
  ASSERT_TRUE(p.ok()) << p.error().message;
  EXPECT_EQ(p->cpu_decode.threads, 2);
  EXPECT_EQ(p->cpu_decode.llc_bytes, int64_t(32) << 20);
  const CpuDecodeMode& m = p->cpu_decode.modes.at("q8");
  EXPECT_DOUBLE_EQ(m.token_us, 120);
  EXPECT_DOUBLE_EQ(m.hot_for("Q8_0"), 30);
  EXPECT_DOUBLE_EQ(m.hot_for("IQ2_XXS"), 20);
  EXPECT_DOUBLE_EQ(m.cold_for("Q8_0"), 8);
  auto q = parse_hw_profile(hw_profile_to_json(p.value()), "again.json");
  ASSERT_TRUE(q.ok()) << q.error().message;
  EXPECT_DOUBLE_EQ(q->cpu_decode.modes.at("q8").layer_us, 300);
  EXPECT_EQ(q->cpu_decode.llc_bytes, p->cpu_decode.llc_bytes);
}

TEST(CpuDecodeProfile, ReuseCurveRoundTripsInMiB) {
  json j = good_cpu_decode();
  j["reuse_curve"] = json::parse("[[16, 40.5], [32, 30], [1024, 9.5]]");
  auto p = parse_hw_profile(profile_with(j).dump(), "curve.json");
  ASSERT_TRUE(p.ok()) << p.error().message;
  ASSERT_EQ(p->cpu_decode.reuse_curve.size(), 3u);
  EXPECT_DOUBLE_EQ(p->cpu_decode.reuse_curve[1].bytes, 32.0 * 1024 * 1024);
  EXPECT_DOUBLE_EQ(p->cpu_decode.reuse_curve[2].gbps, 9.5);
  auto q = parse_hw_profile(hw_profile_to_json(p.value()), "again.json");
  ASSERT_TRUE(q.ok()) << q.error().message;
  ASSERT_EQ(q->cpu_decode.reuse_curve.size(), 3u);
  EXPECT_DOUBLE_EQ(q->cpu_decode.reuse_curve[0].bytes, 16.0 * 1024 * 1024);
  EXPECT_DOUBLE_EQ(q->cpu_decode.reuse_curve[0].gbps, 40.5);
}

TEST(CpuDecodeProfile, BadCalibrationsNamed) {
  auto err = [](json cd) {
    auto r = parse_hw_profile(profile_with(cd).dump(), "p.json");
    return r.ok() ? std::string("(no error)") : r.error().message;
  };
  json j = good_cpu_decode();
  j["modes"]["q8"]["hot_gbps"].erase("default");
  EXPECT_NE(err(j).find("hot_gbps: missing key 'default'"), std::string::npos) << err(j);
  j = good_cpu_decode();
  j["modes"]["q4"] = j["modes"]["q8"];
  EXPECT_NE(err(j).find("expected mode q8 or f32"), std::string::npos) << err(j);
  j = good_cpu_decode();
  j["modes"]["q8"]["attn_gflops"] = 0;
  EXPECT_NE(err(j).find("attn_gflops"), std::string::npos) << err(j);
  j = good_cpu_decode();
  j["modes"]["q8"]["token_us"] = -1;
  EXPECT_NE(err(j).find("token_us"), std::string::npos) << err(j);
  j = good_cpu_decode();
  j["modes"]["q8"]["extra"] = 1;
  EXPECT_NE(err(j).find("unknown key 'extra'"), std::string::npos) << err(j);
  j = good_cpu_decode();
  j["modes"] = json::object();
  EXPECT_NE(err(j).find("at least one"), std::string::npos) << err(j);
  j = good_cpu_decode();
  j["reuse_curve"] = json::parse("[[32, 10], [16, 20]]");
  EXPECT_NE(err(j).find("reuse_curve[1]: expected sizes strictly ascending"), std::string::npos) << err(j);
  j["reuse_curve"] = json::parse("[[16, 10]]");
  EXPECT_NE(err(j).find("reuse_curve: expected at least 2 points, found 1"), std::string::npos) << err(j);
  j["reuse_curve"] = json::parse("[[16, 10], [32, 0]]");
  EXPECT_NE(err(j).find("reuse_curve[1]: expected a positive size and a positive rate"), std::string::npos) << err(j);
  j["reuse_curve"] = json::parse("[[16, 10], 32]");
  EXPECT_NE(err(j).find("reuse_curve[1]: expected a pair [MiB, GB/s]"), std::string::npos) << err(j);
}

}  // namespace
}  // namespace ds4::placement

// cuda_emu_bench_test (label emu): `bench --backend cuda --plan F` on the dsv4-tiny fixture, with
// the CUDA backend compiled against the CUDA emulation (tests/cuda_emu). The model is loaded as
// bench loads it (cli::load_model, activations "auto" = q8 for bench) with a plan file written
// here that keeps a third of each layer's experts in VRAM and stages the rest from pinned or
// pageable host memory; the test then runs bench's own measurement (cli::bench_measure, what
// cmd_bench.cpp prints) and checks the bytes per decoded token per tier that bench reports from
// the backend's counters (Model::device_tier_traffic) against the plan's bookkeeping
// (placement::plan_bytes_for_routing) for the routing the decode steps took.
// Independent of the counters under test: the routing (the CPU backend's run of the same tokens,
// its router trace), one routed expert's bytes per layer (the GGUF header's expert tensors over
// expert_count), the non-expert weight bytes per step (the CPU run's engine counters). The
// tokens of every repetition must equal the CPU backend's.
// The per-link figures (bench_links.h): the one rank's tiers are the totals, its copy engine
// (staging/cuda/copy_engine_cuda.cpp) timed every staged byte (its own byte count equals the
// plan's link bytes), the overlap is defined and in [0, 1], and bench's JSON carries the plan's
// prediction (the plan file is written with the bookkeeping for this routing per decoded token,
// so the measured staged bytes per token must equal the prediction printed beside them).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "engine/cli/bench_links.h"
#include "engine/cli/bench_measure.h"
#include "engine/cli/cli_common.h"
#include "engine/model_config.h"
#include "golden_data.h"
#include "kernels/cuda/device_cuda.h"
#include "kernels/device.h"
#include "placement/plan_file.h"
#include "support/test_env.h"
#include "tests/cuda_engine/emu_cuda_factory.h"
#include "tests/cuda_engine/emu_plan.h"

namespace ds4 {
namespace {

constexpr int kPrompt = 4;  // prompt tokens (the emulator is slow)
constexpr int kGen = 3;     // bench -n: the first token from the prefill, then 2 timed decode steps
constexpr int kReps = 2;    // bench -r

/// The CPU backend's greedy run of `prompt` (its own loop, not bench's): tokens, the router trace
/// and the engine's weight bytes over the decode steps.
struct CpuRun {
  ModelConfig config;
  std::vector<int32_t> tokens;
  ForwardTrace trace;
  WeightTraffic decode;  // differences over the n_gen - 1 decode evals
};

CpuRun cpu_run(const std::vector<int32_t>& prompt, int n_gen) {
  CpuRun r;
  cli::ModelArgs a;
  a.model = test::tiny_gguf().string();
  a.backend = "cpu";
  a.threads = 1;
  auto m = cli::load_model(a, "bench");
  EXPECT_TRUE(m.ok()) << (m.ok() ? "" : m.error().message);
  if (!m.ok()) return r;
  r.config = (*m)->config();
  EXPECT_EQ((*m)->backend_name(), "CPU");
  EXPECT_TRUE((*m)->gpu_names().empty());
  auto s = Session::create(*m);
  EXPECT_TRUE(s.ok());
  if (!s.ok()) return r;
  (*s)->set_trace(&r.trace);
  std::vector<float> last;
  EXPECT_TRUE((*s)->eval(prompt, nullptr, &last).ok());
  const WeightTraffic w0 = (*s)->weight_traffic();
  for (int i = 0; i < n_gen; ++i) {
    r.tokens.push_back(int32_t(std::max_element(last.begin(), last.end()) - last.begin()));
    if (i + 1 < n_gen) {
      EXPECT_TRUE((*s)->eval(std::span<const int32_t>(&r.tokens.back(), 1), nullptr, &last).ok());
    }
  }
  const WeightTraffic w1 = (*s)->weight_traffic();
  r.decode.total = w1.total - w0.total;
  r.decode.routed_experts = w1.routed_experts - w0.routed_experts;
  (*s)->set_trace(nullptr);
  return r;
}

TEST(CudaEmuBench, TierBytesPerTokenAreThePlansForTheRouting) {
  if (test::tiny_dir().empty()) GTEST_SKIP() << "fixture absent";
  const auto t0 = std::chrono::steady_clock::now();
  const std::string model = test::tiny_gguf().string();
  const std::vector<int32_t> ids = test::load_goldens()[0].ids;
  ASSERT_GE(ids.size(), size_t(kPrompt));
  const std::vector<int32_t> prompt(ids.begin(), ids.begin() + kPrompt);
  const CpuRun cpu = cpu_run(prompt, kGen);
  ASSERT_EQ(cpu.tokens.size(), size_t(kGen));

  // bench --backend cuda --plan F (activations auto), as cmd_bench.cpp loads and measures.
  cli::ModelArgs a;
  a.model = model;
  a.backend = "cuda";
  a.threads = 1;
  const ModelConfig& c = cpu.config;
  const std::vector<int64_t> eb = emu_test::expert_bytes_from_header(model, c.n_layer);
  a.plan = emu_test::write_plan(c, eb, 1, [](int, int) { return 0; }, "cuda_emu_bench");
  // The plan's bookkeeping for the decode steps' routing (positions kPrompt .. kPrompt+kGen-2),
  // read back from the file by the placement reader; every repetition routes the same.
  auto pf = placement::read_plan_file(a.plan, c.n_layer, c.n_expert, c.n_expert_used);
  ASSERT_TRUE(pf.ok()) << pf.error().message;
  std::vector<std::vector<std::vector<int32_t>>> routes(size_t(c.n_layer));
  ASSERT_EQ(cpu.trace.router.size(), size_t(c.n_layer));
  for (int l = 0; l < c.n_layer; ++l) {
    ASSERT_EQ(cpu.trace.router[size_t(l)].size(), size_t(kPrompt + kGen - 1)) << "layer " << l;
    routes[size_t(l)].assign(cpu.trace.router[size_t(l)].begin() + kPrompt, cpu.trace.router[size_t(l)].end());
  }
  const placement::TierBytes plan = placement::plan_bytes_for_routing(pf->plan, eb, 1, {0}, routes);
  // The same plan again, now predicting this routing per decoded token (and a made-up tok/s).
  const std::vector<double> pred_vram{plan.vram_total() / (kGen - 1)}, pred_link{plan.link_total() / (kGen - 1)};
  a.plan = emu_test::write_plan(c, eb, 1, [](int, int) { return 0; }, "cuda_emu_bench", &pred_vram, &pred_link, 0, 0,
                                12.5);
  auto m = cli::load_model(a, "bench");
  ASSERT_TRUE(m.ok()) << m.error().message;
  ASSERT_NE((*m)->expert_plan(), nullptr) << "expected the model to carry the --plan file";
  // What bench prints in its backend and gpu_info columns.
  EXPECT_EQ((*m)->backend_name(), "CUDA");
  ASSERT_EQ((*m)->gpu_names().size(), 1u);
  EXPECT_EQ((*m)->gpu_names()[0].rfind("cuda:0 (", 0), 0u) << (*m)->gpu_names()[0];
  auto s = Session::create(*m);
  ASSERT_TRUE(s.ok()) << s.error().message;
  auto t = cli::bench_measure(**s, m->get(), prompt, kGen, kReps, model);
  ASSERT_TRUE(t.ok()) << t.error().message;
  ASSERT_EQ(t->reps.size(), size_t(kReps));
  for (const cli::BenchRep& r : t->reps) EXPECT_EQ(r.tokens, cpu.tokens);

  const double routed_per_rep = plan.vram_total() + plan.link_total();
  EXPECT_GT(plan.vram_total(), 0) << "expected the routing to use resident experts";
  EXPECT_GT(plan.link_total(), 0) << "expected the routing to use staged experts";
  EXPECT_EQ(double(cpu.decode.routed_experts), routed_per_rep) << "the CPU run's routed bytes vs its routing";
  const double dense_per_rep = double(cpu.decode.total - cpu.decode.routed_experts);

  // Totals over the repetitions, then per decoded token as bench reports them.
  EXPECT_EQ(t->decode_tokens, double(kReps * (kGen - 1)));
  EXPECT_EQ(double(t->tiers.staged), kReps * plan.link_total());
  EXPECT_EQ(double(t->tiers.h2d_staged), kReps * plan.link_total());
  EXPECT_EQ(double(t->tiers.device_resident), kReps * (dense_per_rep + plan.vram_total()));
  EXPECT_EQ(t->tiers.host, 0u);
  const cli::TierBytesPerToken bpt = cli::tier_bytes_per_token(*t);
  const double toks = kReps * (kGen - 1);
  EXPECT_DOUBLE_EQ(bpt.staged, kReps * plan.link_total() / toks);
  EXPECT_DOUBLE_EQ(bpt.h2d_staged, kReps * plan.link_total() / toks);
  EXPECT_DOUBLE_EQ(bpt.device_resident, kReps * (dense_per_rep + plan.vram_total()) / toks);
  EXPECT_EQ(bpt.host, 0.0);
  // The engine's counters agree: every weight byte read in one of the device's tiers.
  EXPECT_EQ(double(t->decode_bytes), kReps * (dense_per_rep + routed_per_rep));
  EXPECT_EQ(t->tiers.device_resident + t->tiers.staged, t->decode_bytes);

  // Per link: one rank, its tiers are the totals; its copy engine timed every staged byte.
  ASSERT_EQ(t->ranks.size(), 1u);
  EXPECT_EQ(t->ranks[0].tiers.device_resident, t->tiers.device_resident);
  EXPECT_EQ(t->ranks[0].tiers.staged, t->tiers.staged);
  EXPECT_EQ(t->ranks[0].tiers.h2d_staged, t->tiers.h2d_staged);
  const dev::LinkTiming& link = t->ranks[0].link;
  EXPECT_TRUE(link.measured);
  EXPECT_EQ(double(link.bytes), kReps * plan.link_total()) << "the copy engine's own byte count vs the plan";
  EXPECT_GT(link.copies, 0u);
  EXPECT_GT(link.copy_s, 0.0);
  EXPECT_GE(link.stall_s, 0.0);
  // Every staged copy is waited for, by the host (pinned source) or by the compute stream (the
  // bounce-buffer path: a stall probe per wait on a copy still in flight, at most one per copy).
  EXPECT_TRUE(link.stream_waits > 0 || link.host_wait_s > 0) << "no wait on any copy was timed";
  EXPECT_LE(link.stream_waits, link.copies);
  ASSERT_TRUE(link.has_overlap());
  EXPECT_GE(link.overlap(), 0.0);
  EXPECT_LE(link.overlap(), 1.0);
  // What bench prints: the JSON link fields beside the plan's prediction.
  const cli::PlanPrediction pp = cli::plan_prediction((*m)->expert_plan());
  ASSERT_TRUE(pp.present);
  const double dense_bpt = dense_per_rep / (kGen - 1);
  const cli::LinkRow lr = cli::link_row(*t, "tg", 1.0, dense_bpt, true, 0);
  const nlohmann::json j = cli::links_json(lr, pp);
  ASSERT_EQ(j.at("ranks").size(), 1u) << j.dump();
  const nlohmann::json& r0 = j["ranks"][0];
  EXPECT_DOUBLE_EQ(r0.at("bytes_per_token_h2d_staged").get<double>(), r0.at("plan_link_bytes_per_token").get<double>())
      << j.dump();
  EXPECT_DOUBLE_EQ(r0.at("bytes_per_token_device_staged").get<double>(), plan.link_total() / (kGen - 1));
  EXPECT_DOUBLE_EQ(j.at("bytes_per_token_experts_resident").get<double>(),
                   j.at("plan").at("vram_bytes_per_token_total").get<double>());
  EXPECT_DOUBLE_EQ(j.at("plan").at("decode_tok_s").get<double>(), 12.5);
  ASSERT_FALSE(j.at("overlap").is_null());
  EXPECT_DOUBLE_EQ(j.at("overlap").get<double>(), link.overlap());
  EXPECT_EQ(r0.at("copies").get<uint64_t>(), link.copies);
  const std::string md = cli::links_markdown({lr}, pp);
  EXPECT_NE(md.find("| tg | GPU 0 |"), std::string::npos) << md;
  EXPECT_NE(md.find("| tg | plan all |"), std::string::npos) << md;
  std::printf("%s", md.c_str());
  std::printf("  bench tiers (B/tok): device-resident %.0f (routed %.0f), staged %.0f; %.1f s\n", bpt.device_resident,
              kReps * plan.vram_total() / toks, bpt.staged,
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}

}  // namespace
}  // namespace ds4

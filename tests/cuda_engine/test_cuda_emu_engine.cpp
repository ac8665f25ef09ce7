// cuda_emu_engine_test (label emu): the CUDA backend (kernels/cuda, compiled as host C++ against
// the CUDA emulation of tests/cuda_emu) runs the dsv4-tiny fixture end to end: a short prompt's
// prefill + 32 greedy tokens must equal the CPU backend's tokens, with the routed experts
// resident in device memory and with them staged from host memory (--experts-tier host: the
// store's copy into its slot, then the device's pinned staging ring). The backend's per-tier
// weight counters (Device::weight_tier_bytes) are checked against the bytes the run's routing
// implies (the router trace: each step reads each expert it routes to once; the planner's model
// of staged experts: each copied once per step that uses it) and against the engine's and the
// store's own counts. The emulator runs streams in a seeded random interleaving
// (DS4_CUDA_EMU_SEED, default 1): run with several seeds by hand to hunt ordering bugs.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <vector>

#include "engine/dsv4_model.h"
#include "golden_data.h"
#include "kernels/cuda/device_cuda.h"
#include "kernels/device.h"
#include "placement/plan_file.h"
#include "support/test_env.h"
#include "tests/cuda_engine/emu_cuda_factory.h"

namespace ds4 {
namespace {

constexpr int kPrompt = 6;    // prompt tokens (the emulator is slow)
constexpr int kGenerate = 32;  // greedy tokens (issue 18)

struct GenRun {
  std::vector<int32_t> tokens;
  dev::WeightTierBytes tiers;
  uint64_t total = 0, routed = 0;
  staging::StagingCounters store;
  ForwardTrace trace;                    // router[layer][pos]
  std::vector<uint64_t> expert_bytes;    // [layer] gate + up + down bytes of one routed expert
  double seconds = 0;
  int n_prompt = 0;                      // prompt tokens (one step)
  std::vector<std::vector<bool>> staged;  // [layer][expert] staged by the plan the model loaded by
  placement::TierBytes predicted;         // that plan's prediction (bytes per decode token)
  double predicted_tok_s = 0;
  int top_k = 0;
};

int32_t argmax(const std::vector<float>& v) {
  return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

GenRun generate(const std::string& backend, const std::string& tier, Activations acts = Activations::F32,
                int n_gen = kGenerate, int n_prompt = kPrompt) {
  GenRun r;
  const auto t0 = std::chrono::steady_clock::now();
  ModelOptions o;
  o.backend = backend;
  o.experts_tier = tier;
  o.threads = 1;
  o.activations = acts;
  auto m = Dsv4Model::open(test::tiny_gguf().string(), o);
  EXPECT_TRUE(m.ok()) << (m.ok() ? "" : m.error().message);
  if (!m.ok()) return r;
  auto g = test::load_goldens();
  std::vector<int32_t> prompt(g[0].ids.begin(), g[0].ids.begin() + std::min<size_t>(n_prompt, g[0].ids.size()));
  r.n_prompt = static_cast<int>(prompt.size());
  Dsv4Session s(*m);
  s.set_trace(&r.trace);
  std::vector<float> last;
  EXPECT_TRUE(s.eval(prompt, nullptr, &last).ok());
  for (int i = 0; i < n_gen; ++i) {
    const int32_t t = argmax(last);
    r.tokens.push_back(t);
    EXPECT_TRUE(s.eval(std::span<const int32_t>(&t, 1), nullptr, &last).ok());
  }
  s.set_trace(nullptr);
  if (const placement::PlanFile* pf = (*m)->expert_plan()) {
    for (const auto& layer : pf->plan.experts) {
      r.staged.emplace_back();
      for (const auto& e : layer) r.staged.back().push_back(e.tier != placement::Tier::Vram);
    }
    r.predicted = pf->predicted;
    r.predicted_tok_s = pf->predicted_tok_s;
  }
  r.top_k = (*m)->config().n_expert_used;
  r.tiers = (*m)->device(0).weight_tier_bytes();
  // The same counters as bench reads them (Model::device_tier_traffic, summed over ranks).
  const DeviceTierTraffic dt = (*m)->device_tier_traffic();
  EXPECT_EQ(dt.device_resident, r.tiers.device_resident);
  EXPECT_EQ(dt.staged, r.tiers.staged);
  EXPECT_EQ(dt.host, r.tiers.host);
  EXPECT_EQ(dt.h2d_staged, r.tiers.h2d_staged);
  const WeightTraffic wt = s.weight_traffic();
  r.total = wt.total;
  r.routed = wt.routed_experts;
  r.store = (*m)->weights().experts->counters();
  // Matrix sizes of one expert per layer (every expert of a layer has the same shapes), read
  // after the counters were taken.
  staging::ExpertStore& st = *(*m)->weights().experts;
  for (int l = 0; l < (*m)->config().n_layer; ++l) {
    uint64_t b = 0;
    for (auto p : {staging::ExpertProj::Gate, staging::ExpertProj::Up, staging::ExpertProj::Down}) {
      auto w = st.get(l, 0, p);
      EXPECT_TRUE(w.ok());
      if (w.ok()) b += static_cast<uint64_t>(w->out) * w->row_bytes;
    }
    r.expert_bytes.push_back(b);
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

/// Routed-expert bytes the run's routing implies: per layer and step (the prompt is one step,
/// then one step per decoded token), each distinct routed expert's three matrices once; with
/// `staged_only` 1 only the experts r.staged marks, with 0 only the others (-1: all).
uint64_t routed_bytes_of_trace(const GenRun& r, int staged_only = -1) {
  uint64_t total = 0;
  EXPECT_EQ(r.trace.router.size(), r.expert_bytes.size());
  for (size_t l = 0; l < r.trace.router.size() && l < r.expert_bytes.size(); ++l) {
    const auto& pos = r.trace.router[l];
    const size_t np = static_cast<size_t>(r.n_prompt);
    EXPECT_EQ(pos.size(), np + r.tokens.size()) << "layer " << l;
    std::vector<std::pair<size_t, size_t>> steps = {{0, np}};
    for (size_t p = np; p < pos.size(); ++p) steps.emplace_back(p, p + 1);
    for (auto [a, b] : steps) {
      std::set<int32_t> used;
      for (size_t p = a; p < b && p < pos.size(); ++p) used.insert(pos[p].begin(), pos[p].end());
      for (int32_t e : used) {
        const bool st = l < r.staged.size() && size_t(e) < r.staged[l].size() && r.staged[l][size_t(e)];
        if (staged_only < 0 || st == (staged_only == 1)) total += r.expert_bytes[l];
      }
    }
  }
  return total;
}

/// The CPU backend's run (the reference tokens), made once for both tests.
const GenRun& cpu_run() {
  static const GenRun r = generate("cpu", "");
  return r;
}

TEST(CudaEmuEngine, ResidentExpertsGiveTheCpuTokens) {
  if (test::tiny_dir().empty()) GTEST_SKIP() << "fixture absent";
  const GenRun& cpu = cpu_run();
  const GenRun res = generate("cuda", "");
  ASSERT_EQ(cpu.tokens.size(), size_t(kGenerate));
  EXPECT_EQ(res.tokens, cpu.tokens);
  // Resident: every weight byte read from device memory, nothing staged; the routed experts'
  // reads are what the routing implies, as the engine counted them (the default in-memory store
  // keeps no byte counters).
  const uint64_t expected = routed_bytes_of_trace(res);
  EXPECT_GT(expected, 0u);
  EXPECT_EQ(res.routed, expected);
  EXPECT_EQ(res.tiers.staged, 0u);
  EXPECT_EQ(res.tiers.h2d_staged, 0u);
  EXPECT_EQ(res.tiers.device_resident, res.total);
  EXPECT_GT(res.tiers.h2d_persistent, 0u);
  EXPECT_EQ(res.trace.router, cpu.trace.router);  // same routing as the CPU (follows from equal logits)
  std::printf("  resident: %.1f s; bytes/token %.0f from device memory (routed experts %.0f)\n", res.seconds,
              res.tiers.device_resident * (1.0 / (kPrompt + kGenerate)), expected * (1.0 / (kPrompt + kGenerate)));
}

TEST(CudaEmuEngine, StagedExpertsGiveTheCpuTokens) {
  if (test::tiny_dir().empty()) GTEST_SKIP() << "fixture absent";
  const GenRun& cpu = cpu_run();
  const GenRun stg = generate("cuda", "host");
  ASSERT_EQ(cpu.tokens.size(), size_t(kGenerate));
  EXPECT_EQ(stg.tokens, cpu.tokens);
  // Staged: the routed experts' bytes the routing implies are exactly the staged reads, each
  // copied once to the device (the planner's model: once per step that uses the expert); the
  // rest is read from device memory. The store's host->slot copies are at most that (its host
  // cache keeps experts across steps; the device copies a staged expert at every use).
  const uint64_t expected = routed_bytes_of_trace(stg);
  EXPECT_GT(expected, 0u);
  EXPECT_EQ(stg.routed, expected);
  EXPECT_EQ(stg.tiers.staged, expected);
  EXPECT_EQ(stg.tiers.h2d_staged, expected);
  EXPECT_LE(stg.store.bytes_host_to_device, expected);
  EXPECT_GT(stg.store.bytes_host_to_device, 0u);
  EXPECT_EQ(stg.tiers.device_resident + stg.tiers.staged, stg.total);
  const double per_tok = 1.0 / (kPrompt + kGenerate);
  std::printf("  staged: %.1f s; bytes/token %.0f device + %.0f staged (h2d %.0f; store host->slot %.0f)\n",
              stg.seconds, stg.tiers.device_resident * per_tok, stg.tiers.staged * per_tok,
              stg.tiers.h2d_staged * per_tok, stg.store.bytes_host_to_device * per_tok);
}

// Q8_1 activations (the run command's default): quantize_q8_1, then MMQ for a prefill of more
// than 8 tokens and MMVQ at decode; resident experts, fewer decode tokens (time).
TEST(CudaEmuEngine, Q8ActivationsGiveTheCpuTokens) {
  if (test::tiny_dir().empty()) GTEST_SKIP() << "fixture absent";
  constexpr int kQ8Prompt = 12, kQ8Tokens = 8;
  const GenRun cpu = generate("cpu", "", Activations::Q8, kQ8Tokens, kQ8Prompt);
  const GenRun q8 = generate("cuda", "", Activations::Q8, kQ8Tokens, kQ8Prompt);
  ASSERT_EQ(cpu.tokens.size(), size_t(kQ8Tokens));
  EXPECT_GT(q8.n_prompt, 8);  // the prefill takes the MMQ path
  EXPECT_EQ(q8.tokens, cpu.tokens);
  EXPECT_EQ(q8.routed, routed_bytes_of_trace(q8));
  std::printf("  q8: %.1f s for %d + %d tokens\n", q8.seconds, q8.n_prompt, kQ8Tokens);
}

// No --plan, no --experts-tier: the model is loaded by a plan made from the emulated card's free
// memory (engine/device_plan.h). Run by cuda_emu_engine_small_vram_test with a small emulated
// card (DS4_CUDA_EMU_VRAM_MB): the plan keeps some experts resident and stages the rest; the
// tokens are the CPU backend's and the backend's per-tier counters are the bytes the run's
// routing implies under the plan's placement (computed here from the trace and the plan).
TEST(CudaEmuEngine, PlanMadeAtLoadForASmallCard) {
  if (test::tiny_dir().empty()) GTEST_SKIP() << "fixture absent";
  if (!std::getenv("DS4_CUDA_EMU_VRAM_MB")) GTEST_SKIP() << "run by cuda_emu_engine_small_vram_test (DS4_CUDA_EMU_VRAM_MB)";
  constexpr int kTokens = 8;
  const GenRun& cpu = cpu_run();
  const GenRun r = generate("cuda", "", Activations::F32, kTokens);
  ASSERT_EQ(r.staged.size(), r.expert_bytes.size()) << "expected the model to carry the plan made at load";
  int n_staged = 0, n_resident = 0;
  for (const auto& l : r.staged)
    for (bool s : l) (s ? n_staged : n_resident) += 1;
  EXPECT_GT(n_staged, 0) << "a small card: expected some experts staged";
  EXPECT_GT(n_resident, 0) << "expected some experts resident";
  ASSERT_GE(cpu.tokens.size(), size_t(kTokens));
  EXPECT_EQ(r.tokens, std::vector<int32_t>(cpu.tokens.begin(), cpu.tokens.begin() + kTokens));
  const uint64_t staged = routed_bytes_of_trace(r, 1), resident = routed_bytes_of_trace(r, 0);
  EXPECT_GT(staged, 0u);
  EXPECT_EQ(r.tiers.staged, staged);
  EXPECT_EQ(r.tiers.h2d_staged, staged);
  EXPECT_EQ(r.routed, staged + resident);
  EXPECT_EQ(r.tiers.device_resident + r.tiers.staged, r.total);
  EXPECT_EQ(r.tiers.device_resident, r.total - staged);
  // The plan made at load carries its cost-model prediction (what bench prints beside the
  // measurement), for the plan as loaded: under its uniform routing prior, top_k x
  // (staged share of the layer) x expert bytes per layer on the link, the rest resident (the
  // expectation, exact: the sampled routings drive only the times).
  EXPECT_GT(r.predicted_tok_s, 0.0);
  ASSERT_EQ(r.predicted.link.size(), 1u);
  ASSERT_EQ(r.predicted.vram.size(), 1u);
  double want_link = 0, want_vram = 0;
  for (size_t l = 0; l < r.staged.size(); ++l) {
    const double ns = double(std::count(r.staged[l].begin(), r.staged[l].end(), true));
    const double E = double(r.staged[l].size());
    want_link += r.top_k * ns / E * double(r.expert_bytes[l]);
    want_vram += r.top_k * (E - ns) / E * double(r.expert_bytes[l]);
  }
  EXPECT_NEAR(r.predicted.link[0], want_link, 1e-6 * want_link) << "predicted link bytes/token";
  EXPECT_NEAR(r.predicted.vram[0], want_vram, 1e-6 * want_vram) << "predicted resident bytes/token";
  EXPECT_EQ(r.predicted.nvme, 0.0);
  std::printf("  plan at load predicts %.1f tok/s, link %.0f B/tok (uniform expectation %.0f), vram %.0f (%.0f)\n",
              r.predicted_tok_s, r.predicted.link[0], want_link, r.predicted.vram[0], want_vram);
  std::printf("  plan at load: %d resident, %d staged experts; %.1f s; staged bytes/token %.0f, resident routed %.0f\n",
              n_resident, n_staged, r.seconds, staged * (1.0 / (kPrompt + kTokens)),
              resident * (1.0 / (kPrompt + kTokens)));
}

}  // namespace
}  // namespace ds4

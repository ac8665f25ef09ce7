// cuda_emu_moe_grouped_test (label emu): the grouped routed-expert path of the CUDA backend's
// moe_experts (kernels/cuda/moe_grouped.h; issue 20 item 3, second half) on the backend compiled
// against the emulation (tests/cuda_emu). The dsv4-tiny fixture with Q8_1 activations evaluates a
// kPrompt-token prompt (one prefill chunk: kPrompt x top-4 pairs per layer, so the grouped path
// applies) and takes kGen greedy tokens (decode: one token, the per-expert path). Checked:
// - tokens, router choices and every step's logits bits equal the CPU backend's with the grouped
//   path on (the default) and off (DS4_CUDA_GROUPED_MOE=0), at tp 1 and tp 2, and with a --plan
//   that stages two thirds of the experts through a ring of 6 slots (so a layer's experts come in
//   batches, each a moe_experts call over a subset of them);
// - the counters (cuda::grouped_moe_stats): every (token, expert) pair of every layer is computed
//   exactly once, by the grouped path in the prefill and the per-expert path at decode (the sums
//   over ranks equal n_layer x tokens x top_k as the model config gives them); with the switch
//   off no call is grouped.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "engine/dsv4_model.h"
#include "golden_data.h"
#include "kernels/cuda/device_cuda.h"
#include "kernels/device.h"
#include "support/test_env.h"
#include "tests/cuda_engine/emu_greedy.h"
#include "tests/cuda_engine/emu_plan.h"
#include "tests/cuda_engine/emu_slots_factory.h"

namespace ds4 {
namespace {

constexpr int kPrompt = 32;  // prompt tokens: 128 pairs per layer at top-4
constexpr int kGen = 2;      // greedy tokens: the first from the prefill, then one decode step

// Staging slots of the engine's --backend cuda devices (emu_slots_factory.h) (the grouped path
// on, as by default; DS4_CUDA_GROUPED_MOE=0 turns it off at device creation).
int& g_slots = emu_test::g_emu_slots;

struct GenRun {
  std::vector<int32_t> tokens;
  std::vector<std::vector<float>> logits;
  ForwardTrace trace;
  std::vector<cuda::GroupedMoeStats> moe;      // [rank]
  std::vector<dev::StagedBindStats> staged;    // [rank]
  int n_layer = 0, top_k = 0;
};

GenRun generate(const std::string& backend, int tp, const std::string& plan, bool grouped) {
  GenRun r;
  if (!grouped) setenv("DS4_CUDA_GROUPED_MOE", "0", 1);
  const std::shared_ptr<Dsv4Model> m = emu_test::open_tiny(backend, tp, plan, Activations::Q8);
  unsetenv("DS4_CUDA_GROUPED_MOE");
  if (!m) return r;
  r.n_layer = m->config().n_layer;
  r.top_k = m->config().n_expert_used;
  {
    Dsv4Session s(m);
    emu_test::greedy(s, emu_test::golden_prompt(kPrompt), kGen, &r.trace, r.tokens, r.logits);
  }
  for (int k = 0; k < tp; ++k) {
    r.moe.push_back(cuda::grouped_moe_stats(m->device(k)));
    r.staged.push_back(m->device(k).staged_bind_stats());
  }
  return r;
}

const GenRun& cpu_run() {
  static const GenRun r = generate("cpu", 1, "", true);
  return r;
}

void expect_cpu_bits(const GenRun& r, const std::string& what) {
  const GenRun& cpu = cpu_run();
  ASSERT_EQ(cpu.tokens.size(), size_t(kGen));
  EXPECT_EQ(r.tokens, cpu.tokens) << what;
  EXPECT_EQ(r.trace.router, cpu.trace.router) << what;
  ASSERT_EQ(r.logits.size(), cpu.logits.size()) << what;
  for (size_t i = 0; i < r.logits.size(); ++i)
    EXPECT_TRUE(r.logits[i].size() == cpu.logits[i].size() &&
                std::memcmp(r.logits[i].data(), cpu.logits[i].data(), r.logits[i].size() * 4) == 0)
        << what << ": logits of step " << i << " differ from the CPU backend's";
}

/// The counters summed over ranks, checked against the pair counts the config implies.
void expect_pairs(const GenRun& r, bool grouped, const std::string& what) {
  cuda::GroupedMoeStats sum;
  for (const cuda::GroupedMoeStats& s : r.moe) {
    sum.grouped_calls += s.grouped_calls;
    sum.grouped_pairs += s.grouped_pairs;
    sum.grouped_experts += s.grouped_experts;
    sum.per_expert_calls += s.per_expert_calls;
    sum.per_expert_pairs += s.per_expert_pairs;
  }
  const uint64_t L = uint64_t(r.n_layer), K = uint64_t(r.top_k);
  ASSERT_GT(L, 0u) << what;
  const uint64_t prefill = L * kPrompt * K, decode = L * (kGen - 1) * K;
  EXPECT_EQ(sum.grouped_pairs + sum.per_expert_pairs, prefill + decode) << what << ": every pair computed once";
  if (grouped) {
    EXPECT_GT(sum.grouped_calls, 0u) << what << ": the grouped path did not run";
    EXPECT_GE(sum.grouped_experts, sum.grouped_calls) << what;
    // Decode steps (one token) always take the per-expert path; the prefill's calls hold at
    // least kGroupedMoeMinPairs pairs unless a staged batch or a rank's share is smaller.
    EXPECT_GE(sum.per_expert_pairs, decode) << what;
    EXPECT_GE(sum.grouped_pairs, prefill / 2) << what << ": most of the prefill's pairs expected grouped";
  } else {
    EXPECT_EQ(sum.grouped_calls, 0u) << what << ": DS4_CUDA_GROUPED_MOE=0 but a call was grouped";
    EXPECT_EQ(sum.per_expert_pairs, prefill + decode) << what;
  }
  std::printf("  %s: grouped %llu calls / %llu pairs / %llu experts, per-expert %llu calls / %llu pairs\n",
              what.c_str(), static_cast<unsigned long long>(sum.grouped_calls),
              static_cast<unsigned long long>(sum.grouped_pairs), static_cast<unsigned long long>(sum.grouped_experts),
              static_cast<unsigned long long>(sum.per_expert_calls),
              static_cast<unsigned long long>(sum.per_expert_pairs));
}

TEST(CudaEmuMoeGrouped, Tp1PrefillGroupedAndPerExpertGiveTheCpuBits) {
  if (test::tiny_dir().empty()) GTEST_SKIP() << "fixture absent";
  const GenRun on = generate("cuda", 1, "", true);
  expect_cpu_bits(on, "tp 1, grouped");
  expect_pairs(on, true, "tp 1, grouped");
  // tp 1, every expert resident: each layer's prefill is one call over all its pairs.
  ASSERT_EQ(on.moe.size(), 1u);
  EXPECT_EQ(on.moe[0].grouped_calls, uint64_t(on.n_layer));
  EXPECT_EQ(on.moe[0].grouped_pairs, uint64_t(on.n_layer) * kPrompt * uint64_t(on.top_k));
  const GenRun off = generate("cuda", 1, "", false);
  expect_cpu_bits(off, "tp 1, DS4_CUDA_GROUPED_MOE=0");
  expect_pairs(off, false, "tp 1, DS4_CUDA_GROUPED_MOE=0");
}

TEST(CudaEmuMoeGrouped, Tp2PrefillGroupedAndPerExpertGiveTheCpuBits) {
  if (test::tiny_dir().empty()) GTEST_SKIP() << "fixture absent";
  ASSERT_GE(cuda::cuda_device_count(), 2) << "expected DS4_CUDA_EMU_DEVICES=2 (CMake sets it)";
  emu::set_seed(7);
  const GenRun r = generate("cuda", 2, "", true);
  emu::set_seed(1);
  expect_cpu_bits(r, "tp 2, grouped");
  expect_pairs(r, true, "tp 2, grouped");
  ASSERT_EQ(r.moe.size(), 2u);
  EXPECT_GT(r.moe[0].grouped_calls, 0u) << "rank 0";
  EXPECT_GT(r.moe[1].grouped_calls, 0u) << "rank 1";
  const GenRun off = generate("cuda", 2, "", false);
  expect_cpu_bits(off, "tp 2, DS4_CUDA_GROUPED_MOE=0");
  expect_pairs(off, false, "tp 2, DS4_CUDA_GROUPED_MOE=0");
}

// Two thirds of the experts staged (pinned and pageable host), a ring of 6 slots: a layer's
// experts are bound and launched in batches of at most two staged experts (engine/moe_layer.cpp),
// each batch one moe_experts call; batches with enough pairs are grouped over their subset.
TEST(CudaEmuMoeGrouped, StagedExpertsInBatchesGiveTheCpuBits) {
  if (test::tiny_dir().empty()) GTEST_SKIP() << "fixture absent";
  const std::string model = test::tiny_gguf().string();
  ModelOptions o;
  o.backend = "cpu";
  auto cm = Dsv4Model::open(model, o);
  ASSERT_TRUE(cm.ok());
  const ModelConfig& c = (*cm)->config();
  const std::string plan = emu_test::write_plan(c, emu_test::expert_bytes_from_header(model, c.n_layer), 1,
                                                [](int, int) { return 0; }, "cuda_emu_moe_grouped");
  emu::set_seed(11);
  g_slots = 6;
  const GenRun r = generate("cuda", 1, plan, true);
  g_slots = 24;
  emu::set_seed(1);
  expect_cpu_bits(r, "staged, 6 slots, grouped");
  expect_pairs(r, true, "staged, 6 slots, grouped");
  ASSERT_EQ(r.staged.size(), 1u);
  EXPECT_GT(r.staged[0].copies, 0u) << "expected staged experts";
  EXPECT_EQ(r.staged[0].direct_waits, 0u);
  EXPECT_EQ(r.staged[0].overwritten_unread, 0u) << "a slot refilled before its reader was queued";
  EXPECT_GT(r.moe[0].grouped_calls, uint64_t(r.n_layer)) << "expected several grouped batches per layer";
}

}  // namespace
}  // namespace ds4

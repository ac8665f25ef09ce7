// cuda_emu_pipeline_test (label emu): the staged-expert pipeline of issue 20 item 2 on the CUDA
// backend compiled against the emulation (tests/cuda_emu). The dsv4-tiny fixture runs with a
// --plan whose experts cycle VRAM / pinned host / pageable host (emu_plan.h): the store hands out
// host slabs directly (StoreOptions::host_direct, WeightMatrix::source_persists), and each MoE
// binds all of a step's experts (their copies queued on the copy stream) before the shared expert
// and the routed launches (engine/moe_layer.cpp). Checked, under the emulator's seeded random
// stream interleavings:
// - prefill + greedy tokens and every step's logits bits equal the CPU backend's (tp 1 and tp 2;
//   the canonical definition makes every tp give the tp 1 bits), with a ring that holds a whole
//   step and with one that holds two staged experts (batches);
// - structurally: no host wait for any staged copy (StagedBindStats::direct_waits == 0), one copy
//   per staged matrix the routing uses, and at the first expert launch of each MoE every other
//   staged expert's copies are already submitted (max_ahead equals the value the CPU run's
//   routing and the plan's tiers give; 0 if each expert were still bound right before its launch).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "engine/dsv4_model.h"
#include "golden_data.h"
#include "kernels/cuda/device_cuda.h"
#include "kernels/device.h"
#include "staging/host_memory.h"
#include "support/test_env.h"
#include "tests/cuda_engine/emu_greedy.h"
#include "tests/cuda_engine/emu_plan.h"
#include "tests/cuda_engine/emu_slots_factory.h"

namespace ds4 {
namespace {

constexpr int kPrompt = 4;  // prompt tokens (the emulator is slow)
constexpr int kGen = 4;     // greedy tokens: the first from the prefill, then kGen - 1 decode steps

// Staging slots of the engine's --backend cuda devices (emu_slots_factory.h).
int& g_slots = emu_test::g_emu_slots;

struct GenRun {
  std::vector<int32_t> tokens;
  std::vector<std::vector<float>> logits;  // [step] last-position logits
  ForwardTrace trace;                      // router[layer][pos]
  std::vector<dev::StagedBindStats> stats;  // [rank]
  bool has_plan = false;
  int n_hash = 0;  // hash-routed layers of the model
  double seconds = 0;
};

const std::vector<int32_t>& prompt() {
  static const std::vector<int32_t> p = emu_test::golden_prompt(kPrompt);
  return p;
}

GenRun generate(const std::string& backend, int tp, const std::string& plan) {
  GenRun r;
  const auto t0 = std::chrono::steady_clock::now();
  const std::shared_ptr<Dsv4Model> m = emu_test::open_tiny(backend, tp, plan);
  if (!m) return r;
  r.has_plan = m->expert_plan() != nullptr;
  r.n_hash = m->config().n_hash_layers;
  {
    Dsv4Session s(m);
    emu_test::greedy(s, prompt(), kGen, &r.trace, r.tokens, r.logits);
  }
  for (int k = 0; k < tp; ++k) r.stats.push_back(m->device(k).staged_bind_stats());
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

const GenRun& cpu_run() {
  static const GenRun r = generate("cpu", 1, "");
  return r;
}

std::string plan_for(int tp) {
  const std::string model = test::tiny_gguf().string();
  ModelOptions o;
  o.backend = "cpu";
  auto m = Dsv4Model::open(model, o);
  EXPECT_TRUE(m.ok());
  if (!m.ok()) return "";
  const ModelConfig& c = (*m)->config();
  return emu_test::write_plan(c, emu_test::expert_bytes_from_header(model, c.n_layer), tp,
                              [tp](int l, int e) { return (l + e / 2) % tp; }, "cuda_emu_pipeline_" + std::to_string(tp));
}

/// What the routing of the CPU run and the plan's tiers imply for one rank `rank` of `tp` (owner
/// (l + e / 2) % tp, as plan_for) with a ring of `ring` slots: the staged copies (3 per staged
/// expert a step of a layer uses), those from pageable memory, and the copies queued ahead of the
/// first expert launch of a MoE, at most over the steps. The hash-routed layers (l < `hash`) are
/// bound at the step's start, in order while their copies fit the ring (a prefix); at the first
/// launch of such a layer the copies of it and of the later prefetched layers are queued; at
/// another layer's, its own step's. Less the launched expert's own copies when it is staged.
struct Expect {
  uint64_t copies = 0, bounced = 0, max_ahead = 0;
  uint64_t max_step_copies = 0;  // the most staged copies of one step of one layer
};
Expect expected(const ForwardTrace& t, int rank, int tp, int ring, int hash) {
  Expect x;
  // Steps: the prefill (positions 0 .. kPrompt-1), then one position each.
  std::vector<std::pair<size_t, size_t>> steps{{0, kPrompt}};
  for (size_t p = kPrompt; p < size_t(kPrompt + kGen - 1); ++p) steps.push_back({p, p + 1});
  const size_t L = t.router.size();
  for (const auto& [p0, p1] : steps) {
    std::vector<std::set<int32_t>> used(L);
    std::vector<uint64_t> staged(L, 0);
    for (size_t l = 0; l < L; ++l) {
      for (size_t p = p0; p < p1 && p < t.router[l].size(); ++p)
        for (int32_t e : t.router[l][p])
          if ((int(l) + e / 2) % tp == rank) used[l].insert(e);
      for (int32_t e : used[l]) {
        const char tier = emu_test::tier_of(int(l), e);
        staged[l] += tier != 'V';
        x.bounced += tier == 'P' ? 3 : 0;
      }
      x.copies += 3 * staged[l];
      x.max_step_copies = std::max<uint64_t>(x.max_step_copies, 3 * staged[l]);
    }
    size_t pre = 0;  // layers [0, pre) prefetched
    for (uint64_t binds = 0; pre < std::min(L, size_t(hash)); ++pre) {
      if (binds + 3 * staged[pre] > uint64_t(ring)) break;
      binds += 3 * staged[pre];
    }
    for (size_t l = 0; l < L; ++l) {
      if (used[l].empty()) continue;
      uint64_t queued = 3 * staged[l];
      if (l < pre)
        for (size_t j = l + 1; j < pre; ++j) queued += 3 * staged[j];
      const bool first_staged = emu_test::tier_of(int(l), *used[l].begin()) != 'V';
      x.max_ahead = std::max<uint64_t>(x.max_ahead, queued - (first_staged ? 3 : 0));
    }
  }
  return x;
}

/// Copies expected through the bounce ring: the pageable experts', and the pinned ones' too when
/// the store's pinning is mlock (a build without CUDA: the emulated runtime does not see mlock'ed
/// memory as pinned, so every host expert is bounced there).
uint64_t bounced(const Expect& x) { return staging::have_cuda_pinning() ? x.bounced : x.copies; }

void expect_cpu_bits(const GenRun& r, const char* what) {
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

// tp 1, a ring of 64 slots (a whole step's staged binds), seeds 1 and 977.
TEST(CudaEmuPipeline, Tp1StepBoundAheadGivesTheCpuBitsWithoutHostWaits) {
  if (test::tiny_dir().empty()) GTEST_SKIP() << "fixture absent";
  const std::string plan = plan_for(1);
  for (uint64_t seed : {uint64_t{1}, uint64_t{977}}) {
    emu::set_seed(seed);
    g_slots = 64;
    const GenRun r = generate("cuda", 1, plan);
    g_slots = 24;
    ASSERT_TRUE(r.has_plan);
    expect_cpu_bits(r, seed == 1 ? "tp 1, seed 1" : "tp 1, seed 977");
    const Expect x = expected(cpu_run().trace, 0, 1, 64, r.n_hash);
    ASSERT_EQ(r.stats.size(), 1u);
    const dev::StagedBindStats& s = r.stats[0];
    EXPECT_GT(x.copies, 0u) << "expected the routing to use staged experts";
    EXPECT_GT(x.max_ahead, 0u) << "expected a step with two staged experts";
    EXPECT_EQ(r.n_hash, 3) << "the fixture routes its first 3 layers by hash";
    EXPECT_EQ(s.copies, x.copies);
    EXPECT_EQ(s.bounced, bounced(x));
    EXPECT_EQ(s.direct_waits, 0u) << "a host wait per staged copy from a host slab";
    EXPECT_EQ(s.bounce_waits, 0u) << "a host wait for a bounce buffer (one per slot, reused a ring later)";
    EXPECT_EQ(s.max_ahead, x.max_ahead) << "copies submitted before the first expert launch of a MoE";
    EXPECT_EQ(s.overwritten_unread, 0u);
    std::printf("  tp 1, 64 slots, seed %llu: %.1f s; %llu staged copies (%llu bounced, %llu bounce waits), "
                "0 host waits expected, %llu found; up to %llu copies queued ahead of a launch\n",
                static_cast<unsigned long long>(seed), r.seconds, static_cast<unsigned long long>(s.copies),
                static_cast<unsigned long long>(s.bounced), static_cast<unsigned long long>(s.bounce_waits),
                static_cast<unsigned long long>(s.direct_waits), static_cast<unsigned long long>(s.max_ahead));
  }
  emu::set_seed(1);
}

// tp 1, a ring of 6 slots: two staged experts per batch, so a MoE with more binds in batches
// (each batch's launches queued before the next batch refills the ring).
TEST(CudaEmuPipeline, Tp1SmallRingStagesInBatchesAndGivesTheCpuBits) {
  if (test::tiny_dir().empty()) GTEST_SKIP() << "fixture absent";
  emu::set_seed(5);
  g_slots = 6;
  const GenRun r = generate("cuda", 1, plan_for(1));
  g_slots = 24;
  emu::set_seed(1);
  ASSERT_TRUE(r.has_plan);
  expect_cpu_bits(r, "tp 1, 6 slots");
  const Expect x = expected(cpu_run().trace, 0, 1, 6, r.n_hash);
  ASSERT_EQ(r.stats.size(), 1u);
  const dev::StagedBindStats& s = r.stats[0];
  EXPECT_EQ(s.copies, x.copies);
  EXPECT_EQ(s.direct_waits, 0u);
  EXPECT_EQ(s.overwritten_unread, 0u) << "a slot refilled before its reader was queued";
  // A batch holds two staged experts (and any resident ones between them): at most the ring's 6
  // copies are ahead of a launch, though a step's MoE stages more.
  EXPECT_GT(s.max_ahead, 0u);
  EXPECT_LE(s.max_ahead, 6u) << "more copies ahead of a launch than the ring holds";
  EXPECT_GT(x.max_step_copies, 6u) << "expected a step with more staged experts than one batch holds";
  std::printf("  tp 1, 6 slots: %.1f s; %llu staged copies, up to %llu ahead of a launch\n", r.seconds,
              static_cast<unsigned long long>(s.copies), static_cast<unsigned long long>(s.max_ahead));
}

// tp 2 (2 emulated GPUs, NCCL in process; owners interleaved), the default ring of 24 slots.
TEST(CudaEmuPipeline, Tp2StepBoundAheadGivesTheCpuBitsWithoutHostWaits) {
  if (test::tiny_dir().empty()) GTEST_SKIP() << "fixture absent";
  ASSERT_GE(cuda::cuda_device_count(), 2) << "expected DS4_CUDA_EMU_DEVICES=2 (CMake sets it)";
  emu::set_seed(3);
  const GenRun r = generate("cuda", 2, plan_for(2));
  emu::set_seed(1);
  ASSERT_TRUE(r.has_plan);
  expect_cpu_bits(r, "tp 2");
  ASSERT_EQ(r.stats.size(), 2u);
  for (int k = 0; k < 2; ++k) {
    const Expect x = expected(cpu_run().trace, k, 2, 24, r.n_hash);
    const dev::StagedBindStats& s = r.stats[size_t(k)];
    EXPECT_EQ(s.copies, x.copies) << "rank " << k;
    EXPECT_EQ(s.bounced, bounced(x)) << "rank " << k;
    EXPECT_EQ(s.direct_waits, 0u) << "rank " << k;
    EXPECT_EQ(s.overwritten_unread, 0u) << "rank " << k;
    if (x.max_step_copies <= 24) {  // every step fits the ring
      EXPECT_EQ(s.max_ahead, x.max_ahead) << "rank " << k;
    }
  }
  std::printf("  tp 2: %.1f s; staged copies rank 0 %llu, rank 1 %llu\n", r.seconds,
              static_cast<unsigned long long>(r.stats[0].copies), static_cast<unsigned long long>(r.stats[1].copies));
}

}  // namespace
}  // namespace ds4

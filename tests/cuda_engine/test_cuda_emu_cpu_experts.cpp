// cuda_emu_cpu_experts_test (label emu): experts a --plan computes on the CPU (tiers C: host slab
// read in place, M: read from the GGUF then computed by the CPU) on the CUDA backend (emulated,
// tests/cuda_emu), beside VRAM-resident (V) and host-staged (H) experts, at tp 1 and tp 2 (owners
// interleaved over the ranks; F32 activations at tp 1, Q8_1 at tp 2). Each rank's CPU experts are computed by its CPU device while its
// GPU computes the rest (engine/moe_cpu_experts.cpp). Checked against quantities the code under
// test does not produce:
// - tokens, router ids and every step's logits bits equal the CPU backend's run (no plan);
// - the decode steps' bytes: the store's bytes_cpu_reads and bytes_nvme_to_cpu, each rank's host
//   bytes (Model::rank_device_counters: its CPU device), staged and resident bytes equal the
//   plan's bookkeeping for the CPU run's routing (placement::plan_bytes_for_routing; per rank:
//   the CPU experts it owns, summed here from the routing and the GGUF header's expert bytes);
// - bench's measurement (cli::bench_measure) counts the same CPU-computed bytes and reports each
//   rank's host time per token on them (and a defined GPU idle time);
// - nothing of a CPU expert is uploaded at load: each rank's load-time device bytes equal those
//   of the same plan with its C and M experts host-staged instead (never uploaded either).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "engine/cli/bench_measure.h"
#include "engine/dsv4_model.h"
#include "golden_data.h"
#include "placement/plan_file.h"
#include "support/test_env.h"
#include "tests/cuda_engine/emu_cuda_factory.h"
#include "tests/cuda_engine/emu_greedy.h"
#include "tests/cuda_engine/emu_plan.h"

namespace ds4 {
namespace {

constexpr int kPrompt = 4;  // prompt tokens (the emulator is slow)
constexpr int kGen = 4;     // greedy tokens: the first from the prefill, then kGen - 1 decode steps

/// Tiers of the plans here: V (VRAM), C (CPU), H (pinned host, staged), M (NVMe, then CPU) in turn.
char cpu_tier(int l, int e) { return "VCHM"[(l + e) % 4]; }
/// The same with the CPU experts host-staged (the load-time comparison).
char staged_tier(int l, int e) { return cpu_tier(l, e) == 'C' || cpu_tier(l, e) == 'M' ? 'H' : cpu_tier(l, e); }
int owner_of(int l, int e, int R) { return (l + e / 2) % R; }

struct Run {
  std::vector<int32_t> tokens;
  std::vector<std::vector<float>> logits;
  ForwardTrace trace;
  std::vector<uint64_t> load_bytes;       // [rank] h2d_persistent after load
  std::vector<DeviceTierTraffic> ranks;   // [rank] decode-step differences
  WeightTraffic traffic;                  // decode-step differences
  uint64_t cpu_reads = 0, nvme_to_cpu = 0;  // the store's, decode steps
  std::vector<double> cpu_s, idle_s;        // [rank] WeightTraffic::cpu_expert_s / idle_s, decode steps
  ModelConfig config;
};

Run generate(const std::string& backend, int tp, const std::string& plan, Activations act) {
  Run r;
  const std::shared_ptr<Dsv4Model> m = emu_test::open_tiny(backend, tp, plan, act);
  if (!m) return r;
  r.config = m->config();
  for (int k = 0; k < tp; ++k) r.load_bytes.push_back(m->device(k).weight_tier_bytes().h2d_persistent);
  Dsv4Session s(m);
  std::vector<RankDeviceCounters> k0;
  WeightTraffic w0;
  staging::StagingCounters c0;
  emu_test::greedy(s, emu_test::golden_prompt(kPrompt), kGen, &r.trace, r.tokens, r.logits, [&] {
    k0 = m->rank_device_counters();
    w0 = s.weight_traffic();
    c0 = m->expert_counters();
  });
  const std::vector<RankDeviceCounters> k1 = m->rank_device_counters();
  for (size_t k = 0; k < k1.size() && k < k0.size(); ++k) {
    const DeviceTierTraffic &a = k0[k].tiers, &b = k1[k].tiers;
    r.ranks.push_back({b.device_resident - a.device_resident, b.staged - a.staged, b.host - a.host,
                       b.h2d_staged - a.h2d_staged});
  }
  const WeightTraffic w1 = s.weight_traffic();
  r.traffic.total = w1.total - w0.total;
  r.traffic.routed_experts = w1.routed_experts - w0.routed_experts;
  EXPECT_EQ(w1.cpu_expert_s_by_rank.size(), w0.cpu_expert_s_by_rank.size());
  for (size_t k = 0; k < w1.cpu_expert_s_by_rank.size() && k < w0.cpu_expert_s_by_rank.size(); ++k) {
    r.cpu_s.push_back(w1.cpu_expert_s_by_rank[k] - w0.cpu_expert_s_by_rank[k]);
    r.idle_s.push_back(w1.cpu_expert_idle_s_by_rank[k] < 0 ? -1.0
                                                             : w1.cpu_expert_idle_s_by_rank[k] -
                                                                   std::max(0.0, w0.cpu_expert_idle_s_by_rank[k]));
  }
  const staging::StagingCounters c1 = m->expert_counters();
  r.cpu_reads = c1.bytes_cpu_reads - c0.bytes_cpu_reads;
  r.nvme_to_cpu = c1.bytes_nvme_to_cpu - c0.bytes_nvme_to_cpu;
  return r;
}

std::string write_plan(int tp, char (*tier)(int, int), const std::string& scratch) {
  ModelOptions o;
  o.backend = "cpu";
  auto m = Dsv4Model::open(test::tiny_gguf().string(), o);
  EXPECT_TRUE(m.ok());
  if (!m.ok()) return "";
  const ModelConfig& c = (*m)->config();
  return emu_test::write_plan(c, emu_test::expert_bytes_from_header(test::tiny_gguf().string(), c.n_layer), tp,
                              [tp](int l, int e) { return owner_of(l, e, tp); }, scratch, nullptr, nullptr, 0, 0, 0,
                              {}, tier);
}

void check(int tp, Activations act) {
  const Run cpu = generate("cpu", tp, "", act);
  ASSERT_EQ(cpu.tokens.size(), size_t(kGen));
  const std::string plan = write_plan(tp, cpu_tier, "cuda_emu_cpu_experts_" + std::to_string(tp));
  const Run r = generate("cuda", tp, plan, act);
  EXPECT_EQ(r.tokens, cpu.tokens) << "tp " << tp;
  EXPECT_EQ(r.trace.router, cpu.trace.router) << "tp " << tp;
  ASSERT_EQ(r.logits.size(), cpu.logits.size());
  for (size_t i = 0; i < r.logits.size(); ++i)
    EXPECT_TRUE(r.logits[i].size() == cpu.logits[i].size() &&
                std::memcmp(r.logits[i].data(), cpu.logits[i].data(), r.logits[i].size() * 4) == 0)
        << "tp " << tp << " step " << i << ": logits bits";

  // The plan's bookkeeping for the CPU run's decode routing.
  const ModelConfig& c = cpu.config;
  auto pf = placement::read_plan_file(plan, c.n_layer, c.n_expert, c.n_expert_used);
  ASSERT_TRUE(pf.ok()) << pf.error().message;
  const std::vector<int64_t> eb = emu_test::expert_bytes_from_header(test::tiny_gguf().string(), c.n_layer);
  const auto routes = emu_test::decode_routes(cpu.trace, kPrompt, kGen);
  ASSERT_EQ(routes.size(), size_t(c.n_layer));
  const placement::TierBytes b = placement::plan_bytes_for_routing(pf->plan, eb, 1, std::vector<int>(size_t(tp), 0), routes);
  std::vector<double> host(size_t(tp), 0.0), nvme_cpu(1, 0.0);  // [rank] CPU experts' bytes; M's
  for (int l = 0; l < c.n_layer; ++l)
    for (const auto& tok : routes[size_t(l)])
      for (int32_t e : tok) {
        const char t = cpu_tier(l, e);
        if (t == 'C' || t == 'M') host[size_t(owner_of(l, e, tp))] += double(eb[size_t(l)]);
        if (t == 'M') nvme_cpu[0] += double(eb[size_t(l)]);
      }
  EXPECT_GT(nvme_cpu[0], 0) << "expected the routing to reach NVMe-then-CPU experts";
  EXPECT_GT(b.cpu_total(), nvme_cpu[0]) << "expected the routing to reach CPU experts in host memory";
  EXPECT_GT(b.link_total(), 0);
  EXPECT_GT(b.vram_total(), 0);
  EXPECT_EQ(double(r.cpu_reads), b.cpu_total()) << "tp " << tp << ": bytes_cpu_reads";
  EXPECT_EQ(double(r.nvme_to_cpu), b.nvme) << "tp " << tp << ": bytes_nvme_to_cpu";
  EXPECT_EQ(b.nvme, nvme_cpu[0]);
  const double dense = double(cpu.traffic.total - cpu.traffic.routed_experts);
  EXPECT_EQ(double(r.traffic.routed_experts), b.vram_total() + b.link_total() + b.cpu_total()) << "tp " << tp;
  EXPECT_EQ(r.traffic.total, cpu.traffic.total) << "tp " << tp;
  ASSERT_EQ(r.ranks.size(), size_t(tp));
  double resident = 0;
  for (int k = 0; k < tp; ++k) {
    EXPECT_EQ(double(r.ranks[size_t(k)].host), host[size_t(k)]) << "tp " << tp << " rank " << k << ": host bytes";
    EXPECT_EQ(double(r.ranks[size_t(k)].staged), b.link[size_t(k)]) << "tp " << tp << " rank " << k;
    EXPECT_EQ(double(r.ranks[size_t(k)].h2d_staged), b.link[size_t(k)]) << "tp " << tp << " rank " << k;
    resident += double(r.ranks[size_t(k)].device_resident);
  }
  EXPECT_EQ(resident, dense + b.vram_total()) << "tp " << tp;
  // Timing: each rank with CPU experts in the decode steps spent host time on them, and its GPU's
  // idle wait was timed (>= 0; under the emulator events carry host time, so only that it is
  // defined is checked). The CPU backend has no such figures.
  EXPECT_TRUE(cpu.cpu_s.empty());
  ASSERT_EQ(r.cpu_s.size(), size_t(tp));
  ASSERT_EQ(r.idle_s.size(), size_t(tp));
  for (int k = 0; k < tp; ++k) {
    if (host[size_t(k)] > 0) {
      EXPECT_GT(r.cpu_s[size_t(k)], 0.0) << "tp " << tp << " rank " << k;
    }
    EXPECT_GE(r.idle_s[size_t(k)], 0.0) << "tp " << tp << " rank " << k << ": GPU idle time not measured";
  }

  // Load: the CPU experts take no device memory (as host-staged ones).
  const std::string staged = write_plan(tp, staged_tier, "cuda_emu_cpu_experts_staged_" + std::to_string(tp));
  auto ms = emu_test::open_tiny("cuda", tp, staged, act);
  ASSERT_TRUE(ms);
  ASSERT_EQ(r.load_bytes.size(), size_t(tp));
  for (int k = 0; k < tp; ++k)
    EXPECT_EQ(r.load_bytes[size_t(k)], ms->device(k).weight_tier_bytes().h2d_persistent) << "tp " << tp << " rank " << k;
  std::printf("  tp %d: decode bytes/token: CPU experts %.0f (of which read from the file %.0f), staged %.0f, "
              "resident routed %.0f\n",
              tp, b.cpu_total() / (kGen - 1), b.nvme / (kGen - 1), b.link_total() / (kGen - 1),
              b.vram_total() / (kGen - 1));
  // bench's measurement of the same prompt and length (cli::bench_measure, what bench prints):
  // the CPU-computed experts' bytes per repetition are the plan's, and each rank's host time per
  // token is reported (the idle time is defined).
  {
    auto m = emu_test::open_tiny("cuda", tp, plan, act);
    ASSERT_TRUE(m);
    Dsv4Session s(m);
    auto bt = cli::bench_measure(s, m.get(), emu_test::golden_prompt(kPrompt), kGen, 1, test::tiny_gguf().string());
    ASSERT_TRUE(bt.ok()) << bt.error().message;
    ASSERT_EQ(bt->reps.size(), 1u);
    EXPECT_EQ(bt->reps[0].tokens, cpu.tokens);
    EXPECT_EQ(double(bt->cpu_read_bytes), b.cpu_total()) << "tp " << tp << ": bench's CPU-computed expert bytes";
    const std::vector<cli::RankPerToken> pr = cli::rank_per_token(*bt);
    ASSERT_EQ(pr.size(), size_t(tp));
    for (int k = 0; k < tp; ++k) {
      if (host[size_t(k)] > 0) {
        EXPECT_GT(pr[size_t(k)].cpu_expert_ms, 0.0) << "tp " << tp << " rank " << k;
        EXPECT_GE(pr[size_t(k)].cpu_idle_ms, 0.0) << "tp " << tp << " rank " << k;
      }
    }
  }
  for (int k = 0; k < tp; ++k)
    std::printf("  tp %d rank %d: CPU experts %.3f ms/token on the host, GPU idle waiting %.3f ms/token (emulator)\n", tp, k,
                r.cpu_s[size_t(k)] * 1e3 / (kGen - 1), r.idle_s[size_t(k)] * 1e3 / (kGen - 1));
}

TEST(CudaEmuCpuExperts, Tp1CpuExpertsBesideTheGpuGiveTheCpuBitsAndThePlansBytes) {
  if (test::tiny_dir().empty()) GTEST_SKIP() << "fixture absent";
  check(1, Activations::F32);
}

TEST(CudaEmuCpuExperts, Tp2Q8CpuExpertsBesideTheGpuGiveTheCpuBitsAndThePlansBytes) {
  if (test::tiny_dir().empty()) GTEST_SKIP() << "fixture absent";
  check(2, Activations::Q8);
}

}  // namespace
}  // namespace ds4

// tp_nvme_test (label golden): a --plan with NVMe experts at --tp 2 and 4 on CPU ranks (issue 20
// item 2). The plan's tiers cycle V H N M N C over (layer + expert) (N: read from the GGUF into a
// staging buffer, M: read, then computed by the CPU), owners interleaved, layers 1, 3, 4, 5 Split
// (their N experts computed by every rank from its own row slices, each rank reading its slices
// with its own NVMe reader), 0 and 2 Whole (N and M experts read whole by their owner).
// The second golden prompt + 8 greedy tokens give tp 1's (no plan) tokens, routing and logits
// bits; over the decode steps the store's bytes_nvme_to_device / bytes_nvme_to_cpu /
// bytes_host_to_device and each rank's staged bytes equal the plan's bookkeeping
// (placement::plan_bytes_for_routing) for the routing, and the rank readers delivered exactly the
// NVMe bytes. Exits 77 (skipped) when the fixture is absent.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <future>

#include "cuda_engine/emu_greedy.h"
#include "cuda_engine/emu_plan.h"
#include "engine/dsv4_model.h"
#include "engine/golden_data.h"
#include "gguf/gguf_file.h"
#include "placement/plan_file.h"
#include "support/expert_cut.h"
#include "support/test_env.h"

namespace ds4 {
namespace {

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

/// Tier of expert e of layer l in this test's plans.
char nvme_tier(int l, int e) { return "VHNMNC"[(l + e) % 6]; }
/// Layers 1, 3, 4, 5 split, 0 and 2 whole.
bool split_layer(int l) { return l % 2 == 1 || l == 4; }

/// `p` with every expert whose plan tier character is not `keep` moved to VRAM (no link, NVMe or
/// CPU bytes): the plan's bookkeeping for one tier alone.
placement::Plan only_tier(placement::Plan p, char keep) {
  for (int l = 0; l < p.n_layers; ++l)
    for (int e = 0; e < int(p.experts[size_t(l)].size()); ++e)
      if (nvme_tier(l, e) != keep) p.experts[size_t(l)][size_t(e)].tier = placement::Tier::Vram;
  return p;
}

struct Counts {
  uint64_t nvme_dev = 0, nvme_cpu = 0, host_dev = 0, reader_bytes = 0;
};
Counts counts(const Dsv4Model& m) {
  const staging::StagingCounters c = m.expert_counters();
  return {c.bytes_nvme_to_device, c.bytes_nvme_to_cpu, c.bytes_host_to_device, c.reader.bytes};
}

TEST(TensorParallelNvme, NvmeExpertsAtTp2And4GiveTp1BitsAndThePlansNvmeBytes) {
  if (test::tiny_dir().empty()) GTEST_SKIP() << "fixture absent";
  const std::vector<int32_t> prompt = test::load_goldens().at(1).ids;
  constexpr int kGen = 8;
  const std::string model = test::tiny_gguf().string();
  for (Activations act : {Activations::F32, Activations::Q8}) {
    const auto base = emu_test::open_tiny("cpu", 1, "", act);
    ASSERT_TRUE(base);
    const ModelConfig& c = base->config();
    ForwardTrace bt;
    std::vector<int32_t> btok;
    std::vector<std::vector<float>> blog;
    {
      Dsv4Session s(base);
      emu_test::greedy(s, prompt, kGen, &bt, btok, blog);
    }
    for (int tp : {2, 4}) {
      if (act == Activations::Q8 && tp == 4) continue;
      const std::string what = std::string(act == Activations::F32 ? "f32" : "q8") + " tp " + std::to_string(tp);
      const std::vector<int64_t> eb = emu_test::expert_bytes_from_header(model, c.n_layer);
      const std::string plan = emu_test::write_plan(
          c, eb, tp, [tp](int l, int e) { return (l + e / 2) % tp; }, "tp_nvme_" + std::to_string(tp), nullptr,
          nullptr, 0, 0, 0, split_layer, nvme_tier);
      const auto m = emu_test::open_tiny("cpu", tp, plan, act);
      ASSERT_TRUE(m) << what;
      ASSERT_NE(m->expert_plan(), nullptr);
      ForwardTrace tr;
      std::vector<int32_t> tok;
      std::vector<std::vector<float>> lg;
      WeightTraffic w0;
      Counts k0;
      Dsv4Session s(m);
      emu_test::greedy(s, prompt, kGen, &tr, tok, lg, [&] {
        w0 = s.weight_traffic();
        k0 = counts(*m);
      });
      const WeightTraffic w1 = s.weight_traffic();
      const Counts k1 = counts(*m);
      // CPU ranks bind by aliasing host memory: the hash-layer prefetch (a split layer's slices bound
      // at the step's start) runs only where bind copies (cuda_emu_tp_test checks it there).
      ASSERT_EQ(w1.prefetched_slices_by_rank.size(), size_t(tp));
      for (uint64_t v : w1.prefetched_slices_by_rank) EXPECT_EQ(v, 0u) << what;
      EXPECT_EQ(tok, btok) << what;
      EXPECT_EQ(tr.router, bt.router) << what;
      ASSERT_EQ(lg.size(), blog.size()) << what;
      for (size_t i = 0; i < lg.size(); ++i) EXPECT_TRUE(same_bits(lg[i], blog[i])) << what << " step " << i;

      // The plan's bookkeeping for the decode steps' routing (one token per step).
      const auto routes = emu_test::decode_routes(tr, prompt.size(), kGen);
      ASSERT_FALSE(routes.empty());
      auto pf = placement::read_plan_file(plan, c.n_layer, c.n_expert, c.n_expert_used);
      ASSERT_TRUE(pf.ok()) << pf.error().message;
      const std::vector<int> nodes(size_t(tp), 0);
      auto bytes = [&](const placement::Plan& p) { return placement::plan_bytes_for_routing(p, eb, 1, nodes, routes); };
      const placement::TierBytes b = bytes(pf->plan);
      const placement::TierBytes bn = bytes(only_tier(pf->plan, 'N'));  // NVMe -> device (staged)
      const placement::TierBytes bm = bytes(only_tier(pf->plan, 'M'));  // NVMe -> CPU
      placement::Plan whole_n = only_tier(pf->plan, 'N');
      whole_n.mode.assign(whole_n.mode.size(), placement::StageMode::Whole);
      EXPECT_GT(bn.nvme, 0) << what << ": expected the routing to reach NVMe experts";
      EXPECT_GT(bm.nvme, 0) << what << ": expected the routing to reach NVMe-then-CPU experts";
      EXPECT_NE(bn.link, bytes(whole_n).link) << what << ": expected the routing to reach split NVMe experts";
      EXPECT_EQ(double(k1.nvme_dev - k0.nvme_dev), bn.link_total()) << what << ": bytes_nvme_to_device";
      EXPECT_EQ(double(k1.nvme_dev - k0.nvme_dev), bn.nvme) << what;
      EXPECT_EQ(double(k1.nvme_cpu - k0.nvme_cpu), bm.nvme) << what << ": bytes_nvme_to_cpu";
      EXPECT_EQ(double(k1.nvme_dev - k0.nvme_dev + k1.nvme_cpu - k0.nvme_cpu), b.nvme) << what;
      EXPECT_EQ(double(k1.reader_bytes - k0.reader_bytes), b.nvme) << what << ": the rank readers' bytes";
      EXPECT_EQ(double(k1.host_dev - k0.host_dev), b.link_total() - bn.link_total()) << what << ": host -> device";
      // Each rank's bytes from staged homes: its plan link bytes (host and NVMe staged, 1/R of
      // every split expert) plus the NVMe-then-CPU experts it owns (read whole by their owner).
      ASSERT_EQ(w1.staged_by_rank.size(), size_t(tp));
      ASSERT_EQ(w0.staged_by_rank.size(), size_t(tp));
      std::vector<double> m_owned(size_t(tp), 0.0);
      for (size_t l = 0; l < routes.size(); ++l)
        for (const auto& t : routes[l])
          for (int32_t e : t)
            if (nvme_tier(int(l), e) == 'M') m_owned[size_t(pf->plan.experts[l][size_t(e)].owner)] += double(eb[l]);
      for (int k = 0; k < tp; ++k)
        EXPECT_EQ(double(w1.staged_by_rank[size_t(k)] - w0.staged_by_rank[size_t(k)]), b.link[size_t(k)] + m_owned[size_t(k)])
            << what << " rank " << k;
      std::printf("nvme plan %s: logits bits == tp 1: %s; decode bytes/token: nvme->device %.0f, nvme->cpu %.0f, "
                  "host->device %.0f\n",
                  what.c_str(), std::equal(lg.begin(), lg.end(), blog.begin(), same_bits) ? "yes" : "NO",
                  double(k1.nvme_dev - k0.nvme_dev) / (kGen - 1), double(k1.nvme_cpu - k0.nvme_cpu) / (kGen - 1),
                  double(k1.host_dev - k0.host_dev) / (kGen - 1));
    }
  }
}

// One rank's NVMe read fails (the model file was cut after load) while the other rank's reads
// succeed: eval returns that rank's read error on every call instead of hanging in the next
// collective (the other rank waited in all_gather forever; fresh tester). All experts are on
// NVMe, whole, rank 0 owns every layer but the one whose expert tensors end the file, owned by
// rank 1; the cut removes that layer's expert tensors only.
TEST(TensorParallelNvme, OneRanksReadErrorFailsTheEvalInsteadOfHanging) {
  if (test::tiny_dir().empty()) GTEST_SKIP() << "fixture absent";
  const std::filesystem::path dir = test::scratch_dir("tp_nvme_read_error");
  const std::filesystem::path copy = dir / "tiny.gguf";
  std::filesystem::copy_file(test::tiny_gguf(), copy, std::filesystem::copy_options::overwrite_existing);
  // The layer whose expert tensors start last; every tensor at or after the cut must be one of them.
  const test::ExpertCut ec = test::last_layer_expert_cut(copy.string());
  ASSERT_GE(ec.layer, 0);
  const int last_layer = ec.layer;
  const uint64_t cut = ec.offset;
  const ModelConfig cfg = [&] {
    const auto b = emu_test::open_tiny("cpu", 1, "");
    return b->config();
  }();
  const std::vector<int64_t> eb = emu_test::expert_bytes_from_header(copy.string(), cfg.n_layer);
  const std::string plan = emu_test::write_plan(
      cfg, eb, 2, [last_layer](int l, int) { return l == last_layer ? 1 : 0; }, "tp_nvme_read_error_plan", nullptr,
      nullptr, 0, 0, 0, {}, [](int, int) { return 'N'; });
  ModelOptions o;
  o.backend = "cpu";
  o.tp = 2;
  o.threads = 1;
  o.expert_plan = plan;
  auto m = Dsv4Model::open(copy.string(), o);
  ASSERT_TRUE(m.ok()) << m.error().message;
  std::filesystem::resize_file(copy, cut);
  const std::vector<int32_t> prompt = test::load_goldens().at(1).ids;
  Dsv4Session s(*m);
  for (int call = 0; call < 2; ++call) {  // the group is usable (and fails the same way) again
    auto f = std::async(std::launch::async, [&] {
      std::vector<float> last;
      auto r = s.eval(prompt, nullptr, &last);
      return r.ok() ? std::string("ok") : r.error().message;
    });
    ASSERT_EQ(f.wait_for(std::chrono::seconds(120)), std::future_status::ready) << "eval hangs (call " << call << ")";
    const std::string msg = f.get();
    EXPECT_NE(msg, "ok");
    EXPECT_EQ(msg.find(comm::kAbortedMessage), std::string::npos) << msg;  // the failing rank's own error
    EXPECT_NE(msg.find("tiny.gguf"), std::string::npos) << msg;             // names the file
    EXPECT_EQ(s.position(), 0) << "a failed eval must not move the session (rank 0 may pass the last layer)";
  }
}

}  // namespace
}  // namespace ds4

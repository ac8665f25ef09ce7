// tp_tier_test (label golden): `--experts-tier resident|host|nvme` at --tp 2 and 4 on CPU ranks
// (issue 20): the rank threads share the plan-driven store with every expert at the tier's home
// (staging::make_rank_tier_store). The second golden prompt + 8 greedy tokens give tp 1's
// (default store) tokens, routing and logits bits; over the decode steps the store's bytes of the
// tier (bytes_host_to_device, bytes_nvme_to_device and the rank readers' bytes, or
// bytes_resident_reads) equal one routed expert's bytes (from the GGUF header) per routed
// (token, layer, expert), the other tiers' bytes stay zero, and each rank's staged bytes are
// those of the routed experts it owns (default ownership: expert e on rank e*tp/n_expert).
// Exits 77 (skipped) when the fixture is absent.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>

#include "cuda_engine/emu_greedy.h"
#include "cuda_engine/emu_plan.h"
#include "engine/dsv4_model.h"
#include "engine/golden_data.h"
#include "support/test_env.h"

namespace ds4 {
namespace {

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

/// The fixture at `tp` with every routed expert forced into `tier`, activations `act`, one thread
/// per rank; null (and a test failure) when it does not open.
std::shared_ptr<Dsv4Model> open_tier(int tp, const std::string& tier, Activations act) {
  ModelOptions o;
  o.activations = act;
  o.backend = "cpu";
  o.tp = tp;
  o.threads = tp;
  o.experts_tier = tier;
  auto m = Dsv4Model::open(test::tiny_gguf().string(), o);
  EXPECT_TRUE(m.ok()) << tier << " tp " << tp << ": " << (m.ok() ? "" : m.error().message);
  return m.ok() ? *m : nullptr;
}

/// The counters this test compares, summed as the store reports them.
struct Counts {
  uint64_t resident = 0, host_dev = 0, nvme_dev = 0, nvme_cpu = 0, cpu = 0, reader = 0;
};
Counts counts(const staging::StagingCounters& c) {
  return {c.bytes_resident_reads, c.bytes_host_to_device, c.bytes_nvme_to_device, c.bytes_nvme_to_cpu,
          c.bytes_cpu_reads, c.reader.bytes};
}

/// One greedy run of tp 1 with the default store (the experts read from the GGUF mapping).
struct Baseline {
  ForwardTrace trace;
  std::vector<int32_t> tokens;
  std::vector<std::vector<float>> logits;
  ModelConfig config;
};

constexpr int kGen = 8;

Baseline baseline(const std::vector<int32_t>& prompt, Activations act) {
  Baseline b;
  const auto m = emu_test::open_tiny("cpu", 1, "", act);
  EXPECT_TRUE(m);
  if (!m) return b;
  b.config = m->config();
  Dsv4Session s(m);
  emu_test::greedy(s, prompt, kGen, &b.trace, b.tokens, b.logits);
  return b;
}

/// Runs `tier` at `tp` and checks bits and bytes against `base` (see the file comment).
void check_tier(const Baseline& base, const std::vector<int32_t>& prompt, const std::string& tier, int tp,
                Activations act) {
  const std::string what = tier + " tp " + std::to_string(tp) + (act == Activations::Q8 ? " q8" : " f32");
  const auto m = open_tier(tp, tier, act);
  ASSERT_TRUE(m) << what;
  EXPECT_EQ(m->expert_plan(), nullptr) << what << ": --experts-tier is no plan";
  EXPECT_EQ(m->expert_counters().tier, tier) << what;
  ForwardTrace tr;
  std::vector<int32_t> tok;
  std::vector<std::vector<float>> lg;
  WeightTraffic w0;
  Counts k0;
  Dsv4Session s(m);
  emu_test::greedy(s, prompt, kGen, &tr, tok, lg, [&] {
    w0 = s.weight_traffic();
    k0 = counts(m->expert_counters());
  });
  const WeightTraffic w1 = s.weight_traffic();
  const Counts k1 = counts(m->expert_counters());
  EXPECT_EQ(tok, base.tokens) << what;
  EXPECT_EQ(tr.router, base.trace.router) << what;
  ASSERT_EQ(lg.size(), base.logits.size()) << what;
  for (size_t i = 0; i < lg.size(); ++i) EXPECT_TRUE(same_bits(lg[i], base.logits[i])) << what << " step " << i;

  // Expected bytes of the decode steps (one token each): every routed expert's bytes, once, by its
  // owner (whole experts; contiguous default ownership).
  const ModelConfig& c = base.config;
  const std::vector<int64_t> eb = emu_test::expert_bytes_from_header(test::tiny_gguf().string(), c.n_layer);
  const auto routes = emu_test::decode_routes(tr, prompt.size(), kGen);
  ASSERT_FALSE(routes.empty()) << what;
  uint64_t all = 0;
  std::vector<uint64_t> by_rank(size_t(tp), 0);
  for (size_t l = 0; l < routes.size(); ++l)
    for (const auto& t : routes[l])
      for (int32_t e : t) {
        all += uint64_t(eb[l]);
        by_rank[size_t(e) * size_t(tp) / size_t(c.n_expert)] += uint64_t(eb[l]);
      }
  ASSERT_GT(all, 0u) << what;
  const uint64_t host = k1.host_dev - k0.host_dev, nvme = k1.nvme_dev - k0.nvme_dev,
                 resident = k1.resident - k0.resident, reader = k1.reader - k0.reader;
  EXPECT_EQ(host, tier == "host" ? all : 0u) << what << ": bytes_host_to_device";
  EXPECT_EQ(nvme, tier == "nvme" ? all : 0u) << what << ": bytes_nvme_to_device";
  EXPECT_EQ(reader, tier == "nvme" ? all : 0u) << what << ": the rank readers' bytes";
  EXPECT_EQ(resident, tier == "resident" ? all : 0u) << what << ": bytes_resident_reads";
  EXPECT_EQ(k1.nvme_cpu - k0.nvme_cpu, 0u) << what << ": bytes_nvme_to_cpu";
  EXPECT_EQ(k1.cpu - k0.cpu, 0u) << what << ": bytes_cpu_reads";
  // Each rank's bytes from staged homes (host, NVMe): the routed experts it owns.
  ASSERT_EQ(w1.staged_by_rank.size(), size_t(tp)) << what;
  ASSERT_EQ(w0.staged_by_rank.size(), size_t(tp)) << what;
  for (int k = 0; k < tp; ++k)
    EXPECT_EQ(w1.staged_by_rank[size_t(k)] - w0.staged_by_rank[size_t(k)], tier == "resident" ? 0u : by_rank[size_t(k)])
        << what << " rank " << k;
  std::printf("experts tier %s: logits bits == tp 1: %s; decode bytes/token: host->device %.0f, nvme->device %.0f, "
              "resident %.0f\n",
              what.c_str(), std::equal(lg.begin(), lg.end(), base.logits.begin(), same_bits) ? "yes" : "NO",
              double(host) / (kGen - 1), double(nvme) / (kGen - 1), double(resident) / (kGen - 1));
}

TEST(TensorParallelTier, HostAndNvmeTiersAtTp2And4GiveTp1BitsAndTheTiersBytes) {
  if (test::tiny_dir().empty()) GTEST_SKIP() << "fixture absent";
  const std::vector<int32_t> prompt = test::load_goldens().at(1).ids;
  const Baseline f32 = baseline(prompt, Activations::F32);
  for (int tp : {2, 4})
    for (const char* tier : {"host", "nvme"}) check_tier(f32, prompt, tier, tp, Activations::F32);
  check_tier(f32, prompt, "resident", 2, Activations::F32);
  const Baseline q8 = baseline(prompt, Activations::Q8);
  check_tier(q8, prompt, "nvme", 2, Activations::Q8);
}

// The tier's checks that do not depend on tp: a misspelt tier is named as such, and a --plan with
// a tier is refused, at tp 1 and > 1 alike.
TEST(TensorParallelTier, BadTierAndTierWithPlanAreRefusedAtAnyTp) {
  if (test::tiny_dir().empty()) GTEST_SKIP() << "fixture absent";
  for (int tp : {1, 2, 4}) {
    ModelOptions o;
    o.backend = "cpu";
    o.tp = tp;
    o.experts_tier = "gpu";
    auto m = Dsv4Model::open(test::tiny_gguf().string(), o);
    ASSERT_FALSE(m.ok()) << "tp " << tp;
    EXPECT_NE(m.error().message.find("experts tier: expected resident, host or nvme, found 'gpu'"), std::string::npos)
        << m.error().message;
    o.experts_tier = "host";
    o.expert_plan = "plan.json";
    m = Dsv4Model::open(test::tiny_gguf().string(), o);
    ASSERT_FALSE(m.ok()) << "tp " << tp;
    EXPECT_NE(m.error().message.find("and --experts-tier host: expected one of them"), std::string::npos)
        << m.error().message;
  }
}

}  // namespace
}  // namespace ds4

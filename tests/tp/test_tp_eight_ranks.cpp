// Eight ranks where the shapes allow (label unit): a make-tiny model (engine/tiny_model.h) with
// o_groups = 8 — 8 canonical shards, one query head and two indexer heads per shard, quantized
// attention projections (Q8_0) and MXFP4 experts — gives bit-identical logits for tp 1, 2, 4 and 8,
// with F32 and with Q8_1 activations, over a prefill that crosses ratio-4 and window boundaries
// and greedy decode steps; --experts-tier host and nvme at tp 8 too. No reference exists for this
// random model: the check is bit-identity.
#include <gtest/gtest.h>

#include <cstring>

#include "engine/dsv4_model.h"
#include "engine/tiny_model.h"
#include "support/test_env.h"

namespace ds4 {
namespace {

std::string make_model() {
  static std::string path;
  if (!path.empty()) return path;
  TinyModelOptions o;
  o.config.o_groups = 8;
  o.config.n_layers = 5;
  o.config.compress_ratios = {0, 4, 128, 4, 0};
  o.config.n_hash_layers = 2;
  o.gate_up_type = GgmlType::MXFP4;
  o.down_type = GgmlType::MXFP4;
  o.threads = 2;
  const auto p = test::scratch_dir("tp_eight_ranks") / "tiny-g8.gguf";
  auto w = write_tiny_model(p.string(), o);
  EXPECT_TRUE(w.ok()) << (w.ok() ? "" : w.error().message);
  path = p.string();
  return path;
}

/// Prefill + 6 greedy steps at `tp` (experts tier `tier`, "" = the GGUF mapping): every logit row;
/// the greedy tokens in `greedy`, the store's counters after the run in `counters` when given.
std::vector<float> run(int tp, Activations act, std::vector<int32_t>* greedy, const std::string& tier = "",
                       staging::StagingCounters* counters = nullptr) {
  ModelOptions o;
  o.tp = tp;
  o.activations = act;
  o.threads = 2;
  o.experts_tier = tier;
  auto m = Dsv4Model::open(make_model(), o);
  EXPECT_TRUE(m.ok()) << (m.ok() ? "" : m.error().message);
  if (!m.ok()) return {};
  EXPECT_EQ(tp_canonical_shards((*m)->config(), (*m)->weights()), 8);
  Dsv4Session s(*m);
  std::vector<int32_t> ids(70);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = i == 0 ? 0 : static_cast<int32_t>(3 + (i * 131) % 509);
  std::vector<float> all, row;
  EXPECT_TRUE(s.eval(ids, &all, nullptr).ok());
  int32_t tok = 0;
  for (int64_t v = 1; v < 512; ++v)
    if (all[(ids.size() - 1) * 512 + v] > all[(ids.size() - 1) * 512 + tok]) tok = static_cast<int32_t>(v);
  for (int k = 0; k < 6; ++k) {
    greedy->push_back(tok);
    EXPECT_TRUE(s.eval(std::span<const int32_t>(&tok, 1), nullptr, &row).ok());
    all.insert(all.end(), row.begin(), row.end());
    tok = 0;
    for (int32_t v = 1; v < 512; ++v)
      if (row[v] > row[tok]) tok = v;
  }
  if (counters) *counters = (*m)->expert_counters();
  return all;
}

TEST(TensorParallelEight, Tp1248BitIdenticalOnAnEightGroupModel) {
  for (Activations act : {Activations::F32, Activations::Q8}) {
    std::vector<int32_t> g1;
    const auto base = run(1, act, &g1);
    ASSERT_FALSE(base.empty());
    for (int tp : {2, 4, 8}) {
      std::vector<int32_t> g;
      const auto got = run(tp, act, &g);
      ASSERT_EQ(got.size(), base.size());
      EXPECT_EQ(std::memcmp(got.data(), base.data(), base.size() * sizeof(float)), 0)
          << "tp=" << tp << (act == Activations::F32 ? " f32" : " q8");
      EXPECT_EQ(g, g1) << "tp=" << tp;
    }
  }
}

// --experts-tier host and nvme at tp 8 (the rank threads' tier store): tp 1's bits (default
// store); the tier's bytes are counted and no other tier's.
TEST(TensorParallelEight, ExpertsTierHostAndNvmeAtTp8GiveTp1Bits) {
  std::vector<int32_t> g1;
  const auto base = run(1, Activations::F32, &g1);
  ASSERT_FALSE(base.empty());
  for (const char* tier : {"host", "nvme"}) {
    std::vector<int32_t> g;
    staging::StagingCounters c;
    const auto got = run(8, Activations::F32, &g, tier, &c);
    ASSERT_EQ(got.size(), base.size()) << tier;
    EXPECT_EQ(std::memcmp(got.data(), base.data(), base.size() * sizeof(float)), 0) << tier;
    EXPECT_EQ(g, g1) << tier;
    EXPECT_EQ(c.tier, tier);
    const bool host = std::string(tier) == "host";
    EXPECT_EQ(c.bytes_host_to_device > 0, host) << tier;
    EXPECT_EQ(c.bytes_nvme_to_device > 0, !host) << tier;
    EXPECT_EQ(c.reader.bytes, c.bytes_nvme_to_device) << tier;
  }
}

}  // namespace
}  // namespace ds4

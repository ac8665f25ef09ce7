// tests/staging/test_tiers_tiny.cpp — the dsv4-tiny fixture gives bit-identical logits and the same
// greedy tokens whether its routed experts come from the mmap store, or from make_expert_store
// with every expert resident, staged from host slabs, or streamed from the file (label golden;
// skipped when the fixture is absent). The store is swapped into the loaded model's weights here
// because the engine's --experts-tier wiring belongs to the engine (see staging/expert_store.h).
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "engine/dsv4_model.h"
#include "staging/expert_store.h"
#include "staging/store_options.h"
#include "tests/support/test_env.h"

namespace ds4 {
namespace {

std::filesystem::path tiny_gguf() { return test::fixtures_dir() / "dsv4-tiny" / "dsv4-tiny-mxfp4.gguf"; }

/// Logits of a prompt prefill plus `gen` greedy decode steps; returns the generated tokens.
std::vector<int32_t> run(std::shared_ptr<Dsv4Model> m, std::vector<float>* logits, int gen) {
  std::vector<int32_t> prompt;
  for (int i = 0; i < 24; ++i) prompt.push_back((i * 37 + 11) % static_cast<int>(m->config().vocab));
  Dsv4Session s(m);
  std::vector<float> last;
  EXPECT_TRUE(s.eval(prompt, logits, &last).ok());
  std::vector<int32_t> out;
  for (int g = 0; g < gen; ++g) {
    const int32_t t = static_cast<int32_t>(std::max_element(last.begin(), last.end()) - last.begin());
    out.push_back(t);
    logits->insert(logits->end(), last.begin(), last.end());
    const int32_t one[1] = {t};
    EXPECT_TRUE(s.eval(one, nullptr, &last).ok());
  }
  return out;
}

TEST(StagingTiersTiny, SameLogitsAndTokensInEveryTier) {
  if (!std::filesystem::exists(tiny_gguf())) GTEST_SKIP() << "dsv4-tiny fixture absent";
  ModelOptions mo;
  mo.threads = 2;
  auto m = Dsv4Model::open(tiny_gguf().string(), mo);
  ASSERT_TRUE(m.ok()) << m.error().message;
  std::vector<float> ref;
  const auto ref_tokens = run(*m, &ref, 8);
  ASSERT_FALSE(ref.empty());
  auto file = gguf::GgufModel::open(tiny_gguf().string());
  ASSERT_TRUE(file.ok());
  for (staging::ExpertTier t : {staging::ExpertTier::Resident, staging::ExpertTier::Host, staging::ExpertTier::Nvme}) {
    staging::StoreOptions o;
    o.cache_slots_per_layer = 4;  // smaller than the experts a prefill uses: evictions and bypass
    o.hot_experts = {{0, 1}};
    auto store = staging::make_expert_store(t, *file, o);
    ASSERT_TRUE(store.ok()) << store.error().message;
    staging::ExpertStore* sp = store->get();
    // Test-only: replace the model's expert store (the engine owns the real wiring).
    const_cast<ModelWeights&>((*m)->weights()).experts = std::move(*store);
    std::vector<float> got;
    const auto tokens = run(*m, &got, 8);
    ASSERT_EQ(got.size(), ref.size());
    EXPECT_EQ(std::memcmp(got.data(), ref.data(), ref.size() * sizeof(float)), 0)
        << "logits differ for tier " << staging::expert_tier_name(t);
    EXPECT_EQ(tokens, ref_tokens);
    const staging::StagingCounters c = sp->counters();
    std::printf("tier %s:\n%s\n", staging::expert_tier_name(t), c.summary().c_str());
    if (t == staging::ExpertTier::Nvme) { EXPECT_GT(c.bytes_nvme_to_device, 0u); }
    if (t == staging::ExpertTier::Host) { EXPECT_GT(c.bytes_host_to_device, 0u); }
  }
}

// Opening a model moves no expert bytes: the per-rank weight accounting at load reads the
// store's layout (matrix_bytes), not get(), which counts traffic and fills a caching store (it
// reported every host expert once per rank as moved before the first token).
TEST(StagingTiersTiny, LoadingMovesNoExpertBytes) {
  if (!std::filesystem::exists(tiny_gguf())) GTEST_SKIP() << "dsv4-tiny fixture absent";
  for (const char* tier : {"host", "nvme"}) {  // caching stores (they need tp 1)
    ModelOptions mo;
    mo.threads = 2;
    mo.experts_tier = tier;
    auto m = Dsv4Model::open(tiny_gguf().string(), mo);
    ASSERT_TRUE(m.ok()) << m.error().message;
    const staging::StagingCounters c = (*m)->expert_counters();
    EXPECT_EQ(c.bytes_host_to_device, 0u) << tier;
    EXPECT_EQ(c.bytes_nvme_to_device, 0u) << tier;
    EXPECT_EQ(c.cache_misses, 0u) << tier;
  }
}

}  // namespace
}  // namespace ds4

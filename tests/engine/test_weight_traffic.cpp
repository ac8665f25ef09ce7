// Session::weight_traffic on the dsv4-tiny fixture (label golden): one decode step multiplies
// exactly top_k routed experts per layer, so its routed-expert bytes equal
// n_layer * top_k * (bytes of one expert's gate + up + down), computed here from the GGUF
// tensor sizes, not from the engine; the rest of a step is every other matrix the forward
// multiplies once per token, at its GGUF size (the list below is written from the architecture:
// attention projections, both compressors, the indexer, the router, the shared expert, the head);
// in particular wo_b, multiplied as o_groups column slices, counts its own bytes once, not once
// per slice at the full row stride. The total per step is the same for every decode step.
#include <gtest/gtest.h>

#include "engine/dsv4_model.h"
#include "engine/model_config.h"
#include "gguf/gguf_file.h"
#include "golden_data.h"

namespace ds4 {
namespace {

TEST(WeightTraffic, DecodeStepReadsTopKExpertsPerLayer) {
  if (test::tiny_dir().empty()) GTEST_SKIP() << "fixture absent";
  auto g = gguf::GgufModel::open(test::tiny_gguf().string());
  ASSERT_TRUE(g.ok()) << g.error().message;
  ModelOptions o;
  o.activations = Activations::Q8;
  auto m = Dsv4Model::open(test::tiny_gguf().string(), o);
  ASSERT_TRUE(m.ok()) << m.error().message;
  const ModelConfig& c = (*m)->config();
  uint64_t per_token = 0;
  for (int l = 0; l < c.n_layer; ++l)
    for (const char* p : {"gate", "up", "down"}) {
      const auto* t = g->find("blk." + std::to_string(l) + ".ffn_" + p + "_exps.weight");
      ASSERT_NE(t, nullptr);
      per_token += t->nbytes / uint64_t(c.n_expert) * uint64_t(c.n_expert_used);
    }
  // The non-expert matrices one decode token multiplies (not token_embd: one row is gathered;
  // not the mHC hc_*_fn mixes, norms, ape, sinks or tid2eid: they are inputs of other ops).
  uint64_t dense = g->find("output.weight")->nbytes;
  for (int l = 0; l < c.n_layer; ++l)
    for (const char* p : {"attn_q_a", "attn_q_b", "attn_kv", "attn_output_a", "attn_output_b", "attn_compressor_kv",
                          "attn_compressor_gate", "indexer.attn_q_b", "indexer.proj", "indexer_compressor_kv",
                          "indexer_compressor_gate", "ffn_gate_inp", "ffn_gate_shexp", "ffn_up_shexp", "ffn_down_shexp"})
      if (const auto* t = g->find("blk." + std::to_string(l) + "." + p + ".weight")) dense += t->nbytes;
  Dsv4Session s(*m);
  const std::vector<int32_t> prompt = {0, 17, 42, 99, 3, 250, 7};
  std::vector<float> logits;
  ASSERT_TRUE(s.eval(prompt, nullptr, &logits).ok());
  uint64_t step_total[3] = {0, 0, 0};
  for (int i = 0; i < 3; ++i) {
    const WeightTraffic a = s.weight_traffic();
    const int32_t tok[1] = {int32_t(10 + 31 * i)};
    ASSERT_TRUE(s.eval(tok, nullptr, &logits).ok());
    const WeightTraffic b = s.weight_traffic();
    EXPECT_EQ(b.routed_experts - a.routed_experts, per_token) << "decode step " << i;
    step_total[i] = b.total - a.total;
    EXPECT_EQ(step_total[i], per_token + dense) << "decode step " << i << ": expected " << per_token
                                                << " routed + " << dense << " other matrix bytes";
  }
  EXPECT_EQ(step_total[0], step_total[1]);
  EXPECT_EQ(step_total[1], step_total[2]);
}

}  // namespace
}  // namespace ds4

// tests/frontend/tiny_model_slow_test.cpp — make-tiny with the slow IQ encoders (label slow): the
// public quant mix on a reduced config, and every --experts type.
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "engine/tiny_model.h"
#include "gguf/gguf_file.h"
#include "kernels/cpu/quant_ref.h"
#include "tests/frontend/tiny_expect.h"

namespace ds4 {
namespace {

using test::expected_type;
using test::small_config;

class TinyModelFile : public ::testing::Test {
 protected:
  static std::filesystem::path make(const std::string& name, const TinyModelOptions& o) { return test::make_tiny(name, o); }
};

TEST_F(TinyModelFile, PublicQuantMixTypesAndSaneValues) {
  TinyModelOptions o;
  o.config = small_config();  // default expert types: IQ2_XXS gate/up, Q2_K down
  auto path = make("mix", o);
  auto m = gguf::GgufModel::open(path.string());
  ASSERT_TRUE(m.ok()) << m.error().message;
  // Expected names for the small config: 6 global + per layer 24 (window) / 28 (HCA) / 34 (CSA).
  EXPECT_EQ(m->tensors().size(), 6u + 24 + 34 + 28 + 24);
  std::set<std::string> names;
  for (const auto& t : m->tensors()) {
    names.insert(t.name);
    EXPECT_EQ(GgmlType(t.type), expected_type(t.name, GgmlType::IQ2_XXS, GgmlType::Q2_K)) << t.name;
  }
  for (const char* n : {"blk.0.ffn_gate_tid2eid.weight", "blk.1.ffn_gate_tid2eid.weight", "blk.2.exp_probs_b.bias",
                        "blk.3.exp_probs_b.bias", "blk.1.indexer.proj.weight", "blk.1.indexer_compressor_ape.weight",
                        "blk.2.attn_compressor_kv.weight", "blk.1.ffn_down_exps.weight"})
    EXPECT_TRUE(names.count(n)) << n;
  EXPECT_FALSE(names.count("blk.2.indexer.proj.weight"));  // ratio 128: no indexer
  EXPECT_FALSE(names.count("blk.0.attn_compressor_kv.weight"));

  // tid2eid rows: n_activated distinct experts in range.
  const auto* h = m->find("blk.1.ffn_gate_tid2eid.weight");
  ASSERT_NE(h, nullptr);
  ASSERT_EQ(h->ne[0], 2);
  const auto* ids = reinterpret_cast<const int32_t*>(h->data);
  for (int64_t t = 0; t < h->ne[1]; ++t) {
    EXPECT_NE(ids[2 * t], ids[2 * t + 1]);
    for (int k = 0; k < 2; ++k) EXPECT_TRUE(ids[2 * t + k] >= 0 && ids[2 * t + k] < 2);
  }
  // Decoded expert weights have the documented scale (std 0.25 for gate, 0.25/16 for down).
  auto stats = [&](const char* name) {
    const auto* t = m->find(name);
    std::vector<float> row(size_t(t->ne[0]));
    double s = 0, s2 = 0;
    int64_t n = 0;
    for (int64_t r = 0; r < t->nrows(); ++r) {
      cpu::dequantize_row(GgmlType(t->type), t->data + r * t->row_bytes(), row.data(), t->ne[0]);
      for (float x : row) {
        EXPECT_TRUE(std::isfinite(x));
        s += x;
        s2 += double(x) * x;
        ++n;
      }
    }
    return std::sqrt(s2 / double(n) - (s / double(n)) * (s / double(n)));
  };
  EXPECT_NEAR(stats("blk.2.ffn_gate_exps.weight"), 0.25, 0.05);
  EXPECT_NEAR(stats("blk.2.ffn_down_exps.weight"), 0.25 / 16, 0.004);
  EXPECT_NEAR(stats("blk.2.attn_kv.weight"), 1.0 / 16, 0.005);
}

TEST_F(TinyModelFile, EveryExpertType) {
  for (const char* name : {"q8_0", "q2_k", "iq2_xxs", "iq2_xs", "iq1_s", "iq1_m", "mxfp4"}) {
    TinyModelOptions o;
    o.config = small_config();
    o.config.n_layers = 1;
    o.config.compress_ratios = {4};
    o.config.n_hash_layers = 0;
    o.config.n_routed_experts = o.config.n_activated_experts = 1;
    o.gate_up_type = o.down_type = parse_expert_type(name).value();
    auto path = make(std::string("t_") + name, o);
    auto m = gguf::GgufModel::open(path.string());
    ASSERT_TRUE(m.ok()) << name << ": " << m.error().message;
    for (const char* t : {"blk.0.ffn_gate_exps.weight", "blk.0.ffn_up_exps.weight", "blk.0.ffn_down_exps.weight"})
      EXPECT_EQ(GgmlType(m->find(t)->type), o.gate_up_type) << name << " " << t;
  }
}

}  // namespace
}  // namespace ds4

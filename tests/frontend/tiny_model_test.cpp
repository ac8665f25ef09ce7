// tests/frontend/tiny_model_test.cpp — make-tiny output: opens with gguf/, has every tensor of the
// fixture's layout (names, shapes, metadata keys and their types compared with the independently
// produced fixture GGUF), the public quant mix, a working tokenizer, and deterministic bytes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "engine/tiny_model.h"
#include "engine/tiny_vocab.h"
#include "engine/tokenizer.h"
#include "gguf/gguf_file.h"
#include "kernels/cpu/quant_ref.h"
#include "tests/frontend/tiny_expect.h"
#include "tests/support/test_env.h"

namespace ds4 {
namespace {

namespace fs = std::filesystem;
using test::expected_type;
using test::slurp;
using test::small_config;


TEST(TinyConfig, JsonFileEqualsBuiltInDefault) {
  auto c = load_tiny_config((test::source_dir() / "configs/models/dsv4-tiny.json").string());
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_TRUE(c.value() == TinyModelConfig{});
  auto f = load_tiny_config((test::source_dir() / "configs/models/dsv4-flash.json").string());
  ASSERT_TRUE(f.ok()) << f.error().message;
  // Values from reference/dsv4-architecture.md §1.
  EXPECT_EQ(f->n_layers, 43);
  EXPECT_EQ(f->dim, 4096);
  EXPECT_EQ(f->n_routed_experts, 256);
  EXPECT_EQ(f->n_activated_experts, 6);
  EXPECT_EQ(f->moe_inter_dim, 2048);
  ASSERT_EQ(f->compress_ratios.size(), 44u);
  EXPECT_EQ(f->compress_ratios[2], 4);
  EXPECT_EQ(f->compress_ratios[41], 128);
  EXPECT_EQ(f->compress_ratios[42], 4);
  EXPECT_EQ(f->compress_ratios[43], 0);
}

TEST(TinyConfig, ErrorsNameTheKey) {
  const std::string good = slurp(test::source_dir() / "configs/models/dsv4-tiny.json");
  auto replace = [&](const std::string& from, const std::string& to) {
    std::string s = good;
    auto p = s.find(from);
    EXPECT_NE(p, std::string::npos);
    return s.replace(p, from.size(), to);
  };
  auto r1 = parse_tiny_config(replace("\"dim\": 256", "\"dim\": \"x\""), "cfg.json");
  ASSERT_FALSE(r1.ok());
  EXPECT_NE(r1.error().message.find("cfg.json: key 'dim'"), std::string::npos) << r1.error().message;
  auto r2 = parse_tiny_config(replace("\"dim\": 256,", "\"dim\": 256, \"dimm\": 3,"), "cfg.json");
  ASSERT_FALSE(r2.ok());
  EXPECT_NE(r2.error().message.find("'dimm'"), std::string::npos) << r2.error().message;
  auto r3 = parse_tiny_config(replace("[0, 0, 4, 128, 4, 128, 0]", "[0, 0, 4, 64, 4, 128, 0]"), "cfg.json");
  ASSERT_FALSE(r3.ok());
  EXPECT_NE(r3.error().message.find("compress_ratios"), std::string::npos);
  auto r4 = parse_tiny_config(replace("\"dim\": 256,", ""), "cfg.json");
  ASSERT_FALSE(r4.ok());
  EXPECT_NE(r4.error().message.find("'dim': missing"), std::string::npos) << r4.error().message;
  EXPECT_FALSE(parse_tiny_config("{", "cfg.json").ok());
  EXPECT_FALSE(parse_expert_type("q4_k").ok());
  EXPECT_EQ(parse_expert_type("IQ2_XS").value(), GgmlType::IQ2_XS);
}

TEST(TinyVocab, LearnsMergesAndEncodesEnglishCompactly) {
  auto v = build_tiny_vocab(512);
  ASSERT_TRUE(v.ok()) << v.error().message;
  ASSERT_EQ(v->tokens.size(), 512u);
  EXPECT_EQ(v->merges.size(), 512u - 263u);
  EXPECT_EQ(v->tokens[3 + 'a'], "a");
  EXPECT_EQ(v->tokens[508], "<｜User｜>");
  EXPECT_EQ(v->token_types[511], int32_t(TokenType::UserDefined));
  auto t = Tokenizer::create(v.value());
  ASSERT_TRUE(t.ok()) << t.error().message;
  const std::string s = "The river town wakes early, and the children remember.";
  auto ids = t.value()->encode(s, false);
  EXPECT_EQ(t.value()->decode(ids), s);
  EXPECT_LT(ids.size(), s.size() / 2) << "learned merges should compress the training language";
  EXPECT_FALSE(build_tiny_vocab(100).ok());
}

class TinyModelFile : public ::testing::Test {
 protected:
  static fs::path make(const std::string& name, const TinyModelOptions& o) { return test::make_tiny(name, o); }
};

TEST_F(TinyModelFile, MatchesTheFixtureLayout) {
  const fs::path fixture = test::fixtures_dir() / "dsv4-tiny" / "dsv4-tiny-mxfp4.gguf";
  if (!fs::exists(fixture)) GTEST_SKIP() << "fixture not found: " << fixture;
  TinyModelOptions o;
  o.gate_up_type = o.down_type = GgmlType::Q8_0;  // fast encoder; the layout is what is compared
  auto path = make("layout", o);
  auto mine = gguf::GgufModel::open(path.string());
  ASSERT_TRUE(mine.ok()) << mine.error().message;
  auto ref = gguf::GgufModel::open(fixture.string());
  ASSERT_TRUE(ref.ok()) << ref.error().message;

  // Same metadata keys with the same value types.
  std::map<std::string, std::pair<gguf::ValueType, gguf::ValueType>> keys;
  for (const auto& [k, v] : ref->metadata().entries()) keys[k].first = v.type == gguf::ValueType::ARRAY ? v.array_type : v.type;
  for (const auto& [k, v] : mine->metadata().entries()) {
    ASSERT_TRUE(keys.count(k)) << "unexpected key " << k;
    keys[k].second = v.type == gguf::ValueType::ARRAY ? v.array_type : v.type;
  }
  for (const auto& [k, t] : keys) EXPECT_EQ(t.first, t.second) << "key " << k;
  EXPECT_EQ(ref->metadata().entries().size(), mine->metadata().entries().size());

  // Same tensor names; same shapes except the moe_inter_dim axis (fixture 128, ours 256).
  ASSERT_EQ(mine->tensors().size(), ref->tensors().size());
  for (const auto& rt : ref->tensors()) {
    const auto* mt = mine->find(rt.name);
    ASSERT_NE(mt, nullptr) << "missing tensor " << rt.name;
    auto ne = rt.ne;
    if (rt.name.find("_exps.") != std::string::npos || rt.name.find("_shexp.") != std::string::npos)
      for (auto& d : ne)
        if (d == 128) d = 256;
    EXPECT_EQ(mt->ne, ne) << rt.name;
    EXPECT_EQ(GgmlType(mt->type), expected_type(rt.name, GgmlType::Q8_0, GgmlType::Q8_0)) << rt.name;
  }
  // The tokenizer in the file works and has the chat tokens.
  const auto& md = mine->metadata();
  TokenizerVocab v;
  v.tokens = md.get_string_array("tokenizer.ggml.tokens").value();
  for (auto x : md.get_int_array("tokenizer.ggml.token_type").value()) v.token_types.push_back(int32_t(x));
  v.merges = md.get_string_array("tokenizer.ggml.merges").value();
  v.bos_id = 0;
  auto tok = Tokenizer::create(v);
  ASSERT_TRUE(tok.ok()) << tok.error().message;
  EXPECT_EQ(tok.value()->vocab_size(), 512);
  EXPECT_GE(tok.value()->find_token("<｜Assistant｜>"), 0);
  EXPECT_EQ(md.get_string("general.architecture").value(), "deepseek4");
  EXPECT_EQ(md.get_int("deepseek4.expert_feed_forward_length").value(), 256);
}

TEST_F(TinyModelFile, DeterministicForASeedAndAnyThreadCount) {
  TinyModelOptions o;
  o.config = small_config();
  o.gate_up_type = o.down_type = GgmlType::Q8_0;
  o.threads = 1;
  auto a = slurp(make("det_a", o));
  o.threads = 2;
  auto b = slurp(make("det_b", o));
  EXPECT_EQ(a, b) << "same seed must give the same file for any thread count";
  o.seed = 2;
  auto c = slurp(make("det_c", o));
  EXPECT_NE(a, c);
}

// --random-blocks with the public mix (IQ2_XXS / Q2_K experts, Q8_0 attention): deterministic for
// a seed and any thread count, says it is for benchmarks, every quantized tensor decodes to finite
// values of RMS within a factor 2 of 1/sqrt(ne0), and the F32 / F16 tensors are the ones the
// quantizing path writes for the same seed.
TEST_F(TinyModelFile, RandomBlocksDeterministicFiniteAndLabelled) {
  TinyModelOptions o;
  o.config = small_config();
  o.random_blocks = true;
  o.threads = 1;
  auto pa = make("rb_a", o);
  o.threads = 2;
  auto pb = make("rb_b", o);
  EXPECT_EQ(slurp(pa), slurp(pb)) << "same seed must give the same file for any thread count";
  o.seed = 2;
  EXPECT_NE(slurp(pa), slurp(make("rb_c", o)));
  o.seed = 1;
  TinyModelOptions q = o;
  q.random_blocks = false;
  q.gate_up_type = q.down_type = GgmlType::Q8_0;
  auto pq = make("rb_quantized", q);

  auto m = gguf::GgufModel::open(pa.string());
  ASSERT_TRUE(m.ok()) << m.error().message;
  auto mq = gguf::GgufModel::open(pq.string());
  ASSERT_TRUE(mq.ok()) << mq.error().message;
  auto desc = m->metadata().get_string("general.description");
  ASSERT_TRUE(desc.ok());
  EXPECT_NE(desc.value().find("for benchmarks only"), std::string::npos) << desc.value();
  EXPECT_FALSE(mq->metadata().get_string("general.description").ok());
  int quantized = 0;
  for (const auto& t : m->tensors()) {
    const GgmlType ty = GgmlType(t.type);
    EXPECT_EQ(ty, expected_type(t.name, GgmlType::IQ2_XXS, GgmlType::Q2_K)) << t.name;
    if (ty == GgmlType::F32 || ty == GgmlType::F16 || ty == GgmlType::I32) {
      const auto* tq = mq->find(t.name);
      ASSERT_NE(tq, nullptr);
      EXPECT_EQ(0, std::memcmp(t.data, tq->data, t.nbytes)) << t.name << ": expected the quantizing path's values";
      continue;
    }
    ++quantized;
    const int64_t ne0 = t.ne[0], rows = t.nelements() / ne0, rb = cpu::row_bytes(ty, ne0);
    std::vector<float> y(static_cast<size_t>(ne0));
    double ss = 0;
    for (int64_t r = 0; r < rows; ++r) {
      cpu::dequantize_row(ty, t.data + r * rb, y.data(), ne0);
      for (float v : y) {
        ASSERT_TRUE(std::isfinite(v)) << t.name;
        ss += double(v) * v;
      }
    }
    const double rms = std::sqrt(ss / double(t.nelements())), target = 1.0 / std::sqrt(double(ne0));
    EXPECT_GT(rms, target / 2) << t.name;
    EXPECT_LT(rms, target * 2) << t.name;
  }
  EXPECT_GT(quantized, 20);
}

TEST_F(TinyModelFile, RefusesRowsTheTypeCannotEncode) {
  TinyModelOptions o;
  o.config = small_config();
  o.config.moe_inter_dim = 128;  // Q2_K down needs ne0 = moe_inter_dim % 256 == 0
  auto r = write_tiny_model((test::scratch_dir("tiny_bad") / "x.gguf").string(), o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("ffn_down_exps"), std::string::npos) << r.error().message;
  EXPECT_NE(r.error().message.find("Q2_K"), std::string::npos) << r.error().message;
}

}  // namespace
}  // namespace ds4

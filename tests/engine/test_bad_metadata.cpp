// A model file with wrong metadata or tensors is refused with ONE message listing every problem.
// The files are built with gguf/gguf_writer.h from the dsv4-tiny fixture's own tensors.
#include <gtest/gtest.h>

#include <cstring>
#include <cmath>
#include <functional>
#include <set>

#include "engine/session.h"
#include "gguf/gguf_file.h"
#include "gguf/gguf_writer.h"
#include "golden_data.h"
#include "support/test_env.h"

namespace ds4 {
namespace {

/// Copies the fixture into `path`, letting `edit` change metadata and `skip` drop tensors.
void write_variant(const std::string& path, const std::function<void(gguf::Metadata&)>& edit,
                   const std::set<std::string>& skip, bool add_extra = false,
                   const std::function<void(const std::string&, std::vector<uint8_t>&)>& patch = {}) {
  auto src = gguf::GgufModel::open(test::tiny_gguf().string());
  ASSERT_TRUE(src.ok()) << src.error().message;
  gguf::GgufWriter w;
  for (const auto& [k, v] : src->metadata().entries()) w.metadata().set(k, v);
  edit(w.metadata());
  for (const auto& t : src->tensors()) {
    if (skip.count(t.name)) continue;
    std::vector<int64_t> ne(t.ne.begin(), t.ne.begin() + t.n_dims);
    std::vector<uint8_t> bytes(t.data, t.data + t.nbytes);
    if (patch) patch(t.name, bytes);
    auto r = w.add_tensor(t.name, t.type, ne, bytes.data(), bytes.size());
    ASSERT_TRUE(r.ok()) << r.error().message;
  }
  if (add_extra) {
    const float v[4] = {1, 2, 3, 4};
    auto e = w.add_tensor("blk.1.attn_bogus.weight", 0, {4}, v, sizeof v);
    ASSERT_TRUE(e.ok()) << e.error().message;
  }
  auto r = w.write(path);
  ASSERT_TRUE(r.ok()) << r.error().message;
}

std::string load_error(const std::string& path) {
  auto m = Model::load(path, ModelOptions{});
  if (m.ok()) return "";
  return m.error().message;
}

TEST(BadMetadata, UnchangedCopyLoads) {
  if (test::tiny_dir().empty()) GTEST_SKIP() << "fixture absent";
  auto dir = test::scratch_dir("engine_bad_metadata_ok");
  write_variant((dir / "ok.gguf").string(), [](gguf::Metadata&) {}, {});
  EXPECT_EQ(load_error((dir / "ok.gguf").string()), "");
}

TEST(BadMetadata, AllProblemsListedInOneMessage) {
  if (test::tiny_dir().empty()) GTEST_SKIP() << "fixture absent";
  auto dir = test::scratch_dir("engine_bad_metadata");
  const std::string path = (dir / "bad.gguf").string();
  write_variant(
      path,
      [](gguf::Metadata& m) {
        m.set("deepseek4.expert_count", gguf::Value::make_u32(8));                       // really 16
        m.set("deepseek4.attention.compress_ratios",
              gguf::Value::make_array_u32({0, 0, 4, 128, 4}));                           // 5 entries
      },
      {"blk.3.attn_kv.weight"}, true);
  const std::string e = load_error(path);
  std::printf("refusal message:\n%s\n", e.c_str());
  ASSERT_FALSE(e.empty());
  EXPECT_NE(e.find("bad.gguf"), std::string::npos);
  EXPECT_NE(e.find("attention.compress_ratios"), std::string::npos);  // array length
  EXPECT_NE(e.find("found 5"), std::string::npos);
  EXPECT_NE(e.find("blk.3.attn_kv.weight"), std::string::npos);       // missing tensor
  EXPECT_NE(e.find("missing"), std::string::npos);
  EXPECT_NE(e.find("'blk.2.ffn_gate_exps.weight': expected ne[2] = expert_count 8"), std::string::npos);
  EXPECT_NE(e.find("'blk.1.attn_bogus.weight': unexpected"), std::string::npos);
}

TEST(BadMetadata, EachProblemAloneIsRefused) {
  if (test::tiny_dir().empty()) GTEST_SKIP() << "fixture absent";
  auto dir = test::scratch_dir("engine_bad_metadata_each");
  const std::string a = (dir / "experts.gguf").string(), b = (dir / "arrays.gguf").string(),
                    c = (dir / "tensor.gguf").string(), d = (dir / "nokey.gguf").string();
  write_variant(a, [](gguf::Metadata& m) { m.set("deepseek4.expert_count", gguf::Value::make_u32(32)); }, {});
  write_variant(b, [](gguf::Metadata& m) {
    m.set("deepseek4.swiglu_clamp_exp", gguf::Value::make_array_f32({10, 10, 10}));
  }, {});
  write_variant(c, [](gguf::Metadata&) {}, {"blk.4.indexer.proj.weight"});
  write_variant(d, [](gguf::Metadata& m) {
    gguf::Metadata copy;
    for (const auto& [k, v] : m.entries())
      if (k != "deepseek4.attention.sliding_window") copy.set(k, v);
    m = copy;
  }, {});
  std::string ea = load_error(a), eb = load_error(b), ec = load_error(c), ed = load_error(d);
  EXPECT_NE(ea.find("expert_count 32"), std::string::npos) << ea;
  EXPECT_NE(ea.find("'deepseek4.expert_count': 32 disagrees with the expert tensors, whose ne[2] is 16"), std::string::npos) << ea;
  EXPECT_NE(eb.find("swiglu_clamp_exp"), std::string::npos) << eb;
  EXPECT_NE(ec.find("blk.4.indexer.proj.weight"), std::string::npos) << ec;
  EXPECT_NE(ed.find("sliding_window"), std::string::npos) << ed;
}

// NaN, negative or zero float settings would silently give NaN logits; each is refused by name.
TEST(BadMetadata, NonFiniteOrNonPositiveFloatsAreRefused) {
  if (test::tiny_dir().empty()) GTEST_SKIP() << "fixture absent";
  auto dir = test::scratch_dir("engine_bad_metadata_floats");
  const std::string a = (dir / "nan_eps.gguf").string(), b = (dir / "neg_theta.gguf").string(),
                    c = (dir / "neg_clamp.gguf").string();
  write_variant(a, [](gguf::Metadata& m) {
    m.set("deepseek4.attention.layer_norm_rms_epsilon", gguf::Value::make_f32(std::nanf("")));
  }, {});
  write_variant(b, [](gguf::Metadata& m) { m.set("deepseek4.rope.freq_base", gguf::Value::make_f32(-1.0f)); }, {});
  write_variant(c, [](gguf::Metadata& m) {
    m.set("deepseek4.swiglu_clamp_exp", gguf::Value::make_array_f32({10, 10, -1, 10, 10, 10}));
  }, {});
  std::string ea = load_error(a), eb = load_error(b), ec = load_error(c);
  EXPECT_NE(ea.find("'deepseek4.attention.layer_norm_rms_epsilon': expected a finite value > 0, found nan"),
            std::string::npos) << ea;
  EXPECT_NE(eb.find("'deepseek4.rope.freq_base': expected a finite value > 0, found -1"), std::string::npos) << eb;
  EXPECT_NE(ec.find("'deepseek4.swiglu_clamp_exp'[2]: expected a finite value >= 0"), std::string::npos) << ec;
}

TEST(BadMetadata, HashTableWithAnOutOfRangeExpertIsRefused) {
  if (test::tiny_dir().empty()) GTEST_SKIP() << "fixture absent";
  auto dir = test::scratch_dir("engine_bad_tid2eid");
  const std::string path = (dir / "tid2eid.gguf").string();
  write_variant(path, [](gguf::Metadata&) {}, {}, false, [](const std::string& name, std::vector<uint8_t>& b) {
    if (name != "blk.1.ffn_gate_tid2eid.weight") return;
    const int32_t bad = 99;
    std::memcpy(b.data() + 5 * sizeof(int32_t), &bad, sizeof bad);
  });
  const std::string e = load_error(path);
  EXPECT_NE(e.find("'blk.1.ffn_gate_tid2eid.weight'"), std::string::npos) << e;
  EXPECT_NE(e.find("found 99"), std::string::npos) << e;
}

}  // namespace
}  // namespace ds4

// tests/frontend/validate_agrees_test.cpp — `inspect --validate` and `run` agree: a make-tiny model
// is corrupted in many ways (keys out of range, NaN values, renamed tensors, another architecture,
// broken tokenizer ids, non-finite weights, counts that would size unbounded work) and both
// commands are run on each copy under a time and memory limit. Each copy must be refused by both
// with an exit code of 1 and a "ds4-offload CMD: error:" line (never a crash, hang or
// std::bad_alloc), and the clean copy must pass both.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "gguf/gguf_file.h"
#include "gguf/gguf_writer.h"
#include "kernels/quant/ggml_type.h"
#include "tests/support/cli_run.h"
#include "tests/support/test_env.h"

namespace ds4 {
namespace {

namespace fs = std::filesystem;
using gguf::Value;

/// An editable copy of a GGUF: metadata and tensors (bytes owned).
struct Copy {
  std::vector<std::pair<std::string, Value>> kv;
  struct T {
    std::string name;
    uint32_t type;
    std::vector<int64_t> ne;
    std::vector<uint8_t> bytes;
  };
  std::vector<T> tensors;

  Value* key(const std::string& k) {
    for (auto& [n, v] : kv)
      if (n == k) return &v;
    return nullptr;
  }
  void set(const std::string& k, Value v) {
    if (Value* p = key(k)) *p = std::move(v);
    else kv.emplace_back(k, std::move(v));
  }
  void erase(const std::string& k) {
    std::erase_if(kv, [&](const auto& e) { return e.first == k; });
  }
  T* tensor(const std::string& n) {
    for (auto& t : tensors)
      if (t.name == n) return &t;
    return nullptr;
  }
  void write(const fs::path& p) const {
    gguf::GgufWriter w;
    for (const auto& [k, v] : kv) w.metadata().set(k, v);
    for (const auto& t : tensors) ASSERT_TRUE(w.add_tensor(t.name, t.type, t.ne, t.bytes.data(), t.bytes.size()).ok()) << t.name;
    ASSERT_TRUE(w.write(p.string()).ok());
  }
};

Copy load_copy(const fs::path& p) {
  auto m = gguf::GgufModel::open(p.string());
  EXPECT_TRUE(m.ok()) << m.error().message;
  Copy c;
  for (const auto& [k, v] : m->metadata().entries())
    if (k != "general.alignment") c.kv.emplace_back(k, v);
  for (const auto& t : m->tensors())
    c.tensors.push_back({t.name, t.type, std::vector<int64_t>(t.ne.begin(), t.ne.begin() + std::max(1, t.n_dims)),
                         std::vector<uint8_t>(t.data, t.data + t.nbytes)});
  return c;
}

void fill_f32(Copy::T* t, float v) {
  ASSERT_NE(t, nullptr);
  ASSERT_EQ(t->type, uint32_t(GgmlType::F32)) << t->name;
  for (size_t i = 0; i + 4 <= t->bytes.size(); i += 4) std::memcpy(t->bytes.data() + i, &v, 4);
}

struct Case {
  const char* name;
  std::function<void(Copy&)> corrupt;
  const char* needle;  // in validate's output
};

test::CliOut sh(const std::string& args) {
  // 20 s and 2 GiB of address space per command (not under the sanitizers, which reserve more).
#if defined(DS4_SANITIZE_BUILD)
  const std::string limits = "timeout 120 ";
#else
  const std::string limits = "ulimit -v 2097152; timeout 20 ";
#endif
  return test::run_cli("/bin/sh", "-c \"" + limits + "'" + std::string(DS4_OFFLOAD_EXE) + "' " + args + "\"",
                       /*merge_stderr=*/true);
}

TEST(ValidateAgreesWithRun, CorruptedTinyModels) {
  const fs::path dir = test::scratch_dir("validate_agrees");
  const fs::path base = dir / "base.gguf";
  auto mk = sh("make-tiny -o '" + base.string() + "' --experts q8_0 --seed 5");
  ASSERT_EQ(mk.code, 0) << mk.text;
  const std::string a = "deepseek4.";
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<Case> cases = {
      {"clean", [](Copy&) {}, "validate: OK"},
      {"block_count_u32_max", [&](Copy& c) { c.set(a + "block_count", Value::make_u32(0xFFFFFFFFu)); },
       "block_count': expected 1.."},
      {"sliding_window_huge", [&](Copy& c) { c.set(a + "attention.sliding_window", Value::make_u32(0x7FFFFFFFu)); },
       "sliding_window': expected 1.."},
      {"sinkhorn_iterations_huge",
       [&](Copy& c) { c.set(a + "hyper_connection.sinkhorn_iterations", Value::make_u32(0xFFFFFFFFu)); },
       "sinkhorn_iterations': expected 1..1000"},
      {"context_length_u64", [&](Copy& c) { c.set(a + "context_length", Value::make_u64(uint64_t(1) << 40)); },
       "context_length': expected 1..2147483647"},
      {"hash_layer_count_wraps", [&](Copy& c) { c.set(a + "hash_layer_count", Value::make_u64((uint64_t(1) << 32) + 1)); },
       "hash_layer_count': expected 0..6"},
      {"expert_shared_count_wraps",
       [&](Copy& c) { c.set(a + "expert_shared_count", Value::make_u64((uint64_t(1) << 32) + 1)); },
       "expert_shared_count': expected 1"},
      {"expert_count_above_int_max", [&](Copy& c) { c.set(a + "expert_count", Value::make_u32(0x80000010u)); },
       "expert_count': expected 1..2147483647, found 2147483664"},
      {"eps_nan", [&](Copy& c) { c.set(a + "attention.layer_norm_rms_epsilon", Value::make_f32(nan)); },
       "layer_norm_rms_epsilon': expected a finite value > 0"},
      {"gating_unknown", [&](Copy& c) { c.set(a + "expert_gating_func", Value::make_u32(3)); },
       "expert_gating_func': expected 4"},
      {"indexer_top_k_zero", [&](Copy& c) { c.set(a + "attention.indexer.top_k", Value::make_u32(0)); },
       "top_k': expected 1.."},
      {"expert_used_zero", [&](Copy& c) { c.set(a + "expert_used_count", Value::make_u32(0)); },
       "expert_used_count': expected 1.."},
      {"architecture_llama", [](Copy& c) { c.set("general.architecture", Value::make_string("llama")); },
       "expected 'deepseek4', found 'llama'"},
      {"tensor_renamed",
       [](Copy& c) { c.tensor("blk.0.attn_norm.weight")->name = "blk.0.attn_norm.weigth"; },
       "'blk.0.attn_norm.weigth': unexpected"},
      {"tid2eid_out_of_range",
       [](Copy& c) {
         auto* t = c.tensor("blk.0.ffn_gate_tid2eid.weight");
         ASSERT_NE(t, nullptr);
         const int32_t bad = 999;
         std::memcpy(t->bytes.data() + 40, &bad, 4);
       },
       "expected an expert id 0..15, found 999"},
      {"output_norm_nan", [&](Copy& c) { fill_f32(c.tensor("output_norm.weight"), nan); }, "non-finite F32 value"},
      {"attn_sinks_inf",
       [](Copy& c) { fill_f32(c.tensor("blk.2.attn_sinks.weight"), std::numeric_limits<float>::infinity()); },
       "non-finite F32 value"},
      {"q8_scale_inf",
       [](Copy& c) {
         auto* t = c.tensor("output.weight");
         ASSERT_NE(t, nullptr);
         ASSERT_EQ(t->type, uint32_t(GgmlType::Q8_0));
         t->bytes[34 * 7] = 0x00;
         t->bytes[34 * 7 + 1] = 0x7C;  // FP16 +Inf scale of block 7
       },
       "non-finite FP16 scale"},
      {"output_norm_huge",  // finite weights whose product overflows: only the forward check sees it
       [](Copy& c) { fill_f32(c.tensor("output_norm.weight"), 3e38f); }, "non-finite logit"},
      {"vocab_size_mismatch", [&](Copy& c) { c.set(a + "vocab_size", Value::make_u32(513)); }, "vocab_size"},
      {"bos_id_out_of_range", [](Copy& c) { c.set("tokenizer.ggml.bos_token_id", Value::make_u32(70000)); },
       "bos_token_id: expected an id in [0, 512)"},
      {"bos_id_wraps", [](Copy& c) { c.set("tokenizer.ggml.bos_token_id", Value::make_u64((uint64_t(1) << 32) + 1)); },
       "bos_token_id': expected a token id"},
      {"no_tokenizer", [](Copy& c) { c.erase("tokenizer.ggml.tokens"); }, "no tokenizer.ggml.* metadata"},
      {"block_count_string", [&](Copy& c) { c.set(a + "block_count", Value::make_string("six")); },
       "block_count': expected an integer type"},
      {"token_type_short",
       [](Copy& c) {
         Value* v = c.key("tokenizer.ggml.token_type");
         ASSERT_NE(v, nullptr);
         if (!v->arr_i.empty()) v->arr_i.pop_back();
         if (!v->arr_u.empty()) v->arr_u.pop_back();
       },
       "tokenizer.ggml.token_type: expected 512 entries"},
      {"merges_garbage",
       [](Copy& c) {
         Value* v = c.key("tokenizer.ggml.merges");
         ASSERT_NE(v, nullptr);
         for (auto& m : v->arr_s) m = "nospace";
       },
       "merge"},
      {"expert_tensor_missing",
       [](Copy& c) { std::erase_if(c.tensors, [](const Copy::T& t) { return t.name == "blk.1.ffn_down_exps.weight"; }); },
       "tensor 'blk.1.ffn_down_exps.weight': expected shape {256, 256, 16}, found missing"},
      {"compress_ratio_bad",
       [&](Copy& c) {
         Value* v = c.key(a + "attention.compress_ratios");
         ASSERT_NE(v, nullptr);
         if (!v->arr_u.empty()) v->arr_u[1] = 5;
         if (!v->arr_i.empty()) v->arr_i[1] = 5;
       },
       "expected 0, 4 or 128, found 5"},
  };
  const Copy clean = load_copy(base);
  for (const Case& k : cases) {
    SCOPED_TRACE(k.name);
    Copy c = clean;
    k.corrupt(c);
    if (::testing::Test::HasFatalFailure()) return;
    const fs::path p = dir / (std::string(k.name) + ".gguf");
    c.write(p);
    auto v = sh("inspect --validate '" + p.string() + "'");
    auto r = sh("run -m '" + p.string() + "' -p 'the baker' -n 4 --temp 0");
    const bool clean_case = std::string(k.name) == "clean";
    EXPECT_EQ(v.code, clean_case ? 0 : 1) << "validate:\n" << v.text;
    EXPECT_EQ(r.code, v.code) << "validate and run disagree; run:\n" << r.text << "\nvalidate:\n" << v.text;
    EXPECT_NE(v.text.find(k.needle), std::string::npos) << "expected '" << k.needle << "' in:\n" << v.text;
    // plan reads the same counts (placement/gguf_sizes.cpp): it may accept what it does not use,
    // but never crashes, hangs or exhausts memory.
    auto pl = sh("plan -m '" + p.string() + "' --dry-run");
    EXPECT_TRUE(pl.code == 0 || pl.code == 1) << "plan:\n" << pl.text;
    EXPECT_EQ(pl.text.find("vector::"), std::string::npos) << pl.text;
    for (const auto* t : {&v.text, &r.text, &pl.text}) {
      EXPECT_EQ(t->find("bad_alloc"), std::string::npos) << *t;
      EXPECT_EQ(t->find("Aborted"), std::string::npos) << *t;
      if (!clean_case && t != &pl.text) {
        EXPECT_NE(t->find(": error: "), std::string::npos) << *t;
      }
    }
    EXPECT_LT(v.text.size(), 20000u) << "validate output is not capped";
  }
}

// A model whose output norm is NaN loads (the loader does not read weight values) but its logits
// are NaN: run, score, perplexity, bench and chat stop with one error naming `inspect --validate`
// instead of "generating" tokens with exit 0.
TEST(ValidateAgreesWithRun, NonFiniteLogitsStopEveryCommand) {
  const fs::path dir = test::scratch_dir("validate_nonfinite");
  const fs::path base = dir / "base.gguf", bad = dir / "nan.gguf";
  auto mk = sh("make-tiny -o '" + base.string() + "' --experts q8_0 --seed 6");
  ASSERT_EQ(mk.code, 0) << mk.text;
  Copy c = load_copy(base);
  fill_f32(c.tensor("output_norm.weight"), std::numeric_limits<float>::quiet_NaN());
  c.write(bad);
  const std::string m = "-m '" + bad.string() + "' ";
  std::ofstream(dir / "ids.txt") << "0 5 7 9";
  std::ofstream(dir / "t.txt") << "the baker sells bread and the fisher sells fish";
  std::ofstream(dir / "in.txt") << "hello\n";
  for (const std::string& args :
       {"run " + m + "-p hello -n 4", "score " + m + "--token-ids '" + (dir / "ids.txt").string() + "' --logits-out '" +
                                          (dir / "l.f32").string() + "'",
        "perplexity " + m + "-f '" + (dir / "t.txt").string() + "' --ctx 16", "bench " + m + "-p 8 -n 2 -r 1",
        "chat " + m + "-n 2 < '" + (dir / "in.txt").string() + "'"}) {
    auto r = sh(args);
    EXPECT_EQ(r.code, 1) << args << "\n" << r.text;
    EXPECT_NE(r.text.find("non-finite logit (NaN)"), std::string::npos) << args << "\n" << r.text;
    EXPECT_NE(r.text.find("inspect --validate"), std::string::npos) << args << "\n" << r.text;
  }
  EXPECT_FALSE(fs::exists(dir / "l.f32")) << "score left a partial logits file";
}

}  // namespace
}  // namespace ds4

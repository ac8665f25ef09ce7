// tests/frontend/tiny_expect.h — helpers shared by the make-tiny tests: a reduced config and the
// public quant mix written from its description (not from the code under test).
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "engine/tiny_model.h"
#include "tests/support/test_env.h"

namespace ds4::test {

inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

/// Writes a model under scratch_dir(name) and returns its path (test failure on error).
inline std::filesystem::path make_tiny(const std::string& name, const TinyModelOptions& o) {
  auto path = scratch_dir("tiny_model_" + name) / "m.gguf";
  auto r = write_tiny_model(path.string(), o);
  EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().message);
  return path;
}

// A reduced config (4 layers: window, CSA, HCA, window; 2 experts) so the slow IQ encoders finish
// quickly; every layer kind is still present.
inline TinyModelConfig small_config() {
  TinyModelConfig c;
  c.name = "dsv4-micro";
  c.n_layers = 4;
  c.compress_ratios = {0, 4, 128, 0, 0};
  c.n_hash_layers = 2;
  c.n_routed_experts = 2;
  c.n_activated_experts = 2;
  return c;
}

// The public Q2 mix, written from the description in reference/dsv4-architecture.md §6.
inline GgmlType expected_type(const std::string& n, GgmlType gate_up, GgmlType down) {
  auto ends = [&](const char* s) { return n.size() >= strlen(s) && n.compare(n.size() - strlen(s), strlen(s), s) == 0; };
  auto has = [&](const char* s) { return n.find(s) != std::string::npos; };
  if (ends("ffn_gate_exps.weight") || ends("ffn_up_exps.weight")) return gate_up;
  if (ends("ffn_down_exps.weight")) return down;
  if (ends("tid2eid.weight")) return GgmlType::I32;
  if (has("_shexp.") || has("attn_q_a.") || has("attn_q_b.") || has("attn_kv.") || has("attn_output_") ||
      n == "output.weight")
    return n.find("indexer.") != std::string::npos ? GgmlType::F16 : GgmlType::Q8_0;
  if (has("norm") || has("attn_sinks") || has("_base.") || has("_scale.") || has("exp_probs_b")) return GgmlType::F32;
  return GgmlType::F16;  // embedding, router, indexer, compressor kv/gate/ape, HC fn
}

}  // namespace ds4::test

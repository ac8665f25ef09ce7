// engine/tiny_model.cpp — see tiny_model.h.
#include "engine/tiny_model.h"
#include "ds4/json_depth.h"
#include "ds4/format_number.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "ds4/file_io.h"
#include "engine/random_blocks.h"
#include "engine/sampler.h"
#include "engine/tiny_vocab.h"
#include "gguf/gguf_writer.h"
#include "kernels/cpu/quant_ref.h"

namespace ds4 {

// ---- config JSON ------------------------------------------------------------------------------

Result<TinyModelConfig> parse_tiny_config(const std::string& json_text, const std::string& source) {
  if (auto e = json_depth_error(json_text, kMaxJsonFileDepth, source); !e.empty()) return Error{e};
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(json_text);
  } catch (const nlohmann::json::parse_error& e) {
    return Error{source + ": not valid JSON: " + e.what()};
  }
  if (!j.is_object()) return Error{source + ": expected a JSON object at the top level"};
  TinyModelConfig c;
  std::set<std::string> known;
  std::string err;
  auto fail = [&](const std::string& key, const std::string& what) {
    if (err.empty()) err = source + ": key '" + key + "': " + what;
  };
  auto get_int = [&](const char* key, auto& out, int64_t lo, int64_t hi) {
    known.insert(key);
    if (!j.contains(key)) return fail(key, "missing (expected an integer)");
    const auto& v = j[key];
    if (!v.is_number_integer()) return fail(key, "expected an integer, found " + v.dump());
    int64_t x = v.get<int64_t>();
    if (x < lo || x > hi)
      return fail(key, "expected an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], found " +
                           std::to_string(x));
    out = static_cast<std::remove_reference_t<decltype(out)>>(x);
  };
  auto get_num = [&](const char* key, double& out, double lo, double hi) {
    known.insert(key);
    if (!j.contains(key)) return fail(key, "missing (expected a number)");
    const auto& v = j[key];
    if (!v.is_number()) return fail(key, "expected a number, found " + v.dump());
    double x = v.get<double>();
    if (!(x >= lo && x <= hi))
      return fail(key, "expected a number in [" + format_number(lo) + ", " + format_number(hi) + "], found " +
                           v.dump());
    out = x;
  };
  known.insert("name");
  if (!j.contains("name") || !j["name"].is_string()) fail("name", "expected a string");
  else c.name = j["name"].get<std::string>();
  get_int("vocab_size", c.vocab_size, 263, 1 << 20);
  get_int("dim", c.dim, 32, 1 << 16);
  get_int("moe_inter_dim", c.moe_inter_dim, 32, 1 << 16);
  get_int("n_layers", c.n_layers, 1, 256);
  get_int("n_hash_layers", c.n_hash_layers, 0, 256);
  get_int("n_heads", c.n_heads, 1, 1024);
  get_int("head_dim", c.head_dim, 32, 4096);
  get_int("rope_head_dim", c.rope_head_dim, 2, 4096);
  get_int("q_lora_rank", c.q_lora_rank, 32, 1 << 16);
  get_int("o_groups", c.o_groups, 1, 1024);
  get_int("o_lora_rank", c.o_lora_rank, 32, 1 << 16);
  get_int("window_size", c.window_size, 1, 1 << 20);
  get_int("n_routed_experts", c.n_routed_experts, 1, 4096);
  get_int("n_shared_experts", c.n_shared_experts, 1, 1);
  get_int("n_activated_experts", c.n_activated_experts, 1, 4096);
  get_num("route_scale", c.route_scale, 0, 1e6);
  get_num("swiglu_limit", c.swiglu_limit, 0, 1e6);
  get_num("swiglu_limit_shared", c.swiglu_limit_shared, 0, 1e6);
  get_int("index_n_heads", c.index_n_heads, 1, 1024);
  get_int("index_head_dim", c.index_head_dim, 32, 4096);
  get_int("index_topk", c.index_topk, 1, 1 << 20);
  get_int("hc_mult", c.hc_mult, 1, 64);
  get_int("hc_sinkhorn_iters", c.hc_sinkhorn_iters, 1, 1000);
  get_num("hc_eps", c.hc_eps, 0, 1);
  get_num("norm_eps", c.norm_eps, 0, 1);
  get_num("rope_theta", c.rope_theta, 1, 1e12);
  get_num("compress_rope_theta", c.compress_rope_theta, 1, 1e12);
  get_num("rope_factor", c.rope_factor, 1, 1e6);
  get_int("original_seq_len", c.original_seq_len, 1, int64_t(1) << 40);
  get_num("beta_fast", c.beta_fast, 0, 1e6);
  get_num("beta_slow", c.beta_slow, 0, 1e6);
  get_int("context_length", c.context_length, 1, int64_t(1) << 40);
  known.insert("compress_ratios");
  if (!j.contains("compress_ratios") || !j["compress_ratios"].is_array()) {
    fail("compress_ratios", "expected an array of integers");
  } else {
    c.compress_ratios.clear();
    for (const auto& v : j["compress_ratios"]) {
      if (!v.is_number_integer() || (v.get<int64_t>() != 0 && v.get<int64_t>() != 4 && v.get<int64_t>() != 128)) {
        fail("compress_ratios", "expected entries 0, 4 or 128, found " + v.dump());
        break;
      }
      c.compress_ratios.push_back(v.get<int>());
    }
  }
  for (auto it = j.begin(); it != j.end(); ++it)
    if (!known.count(it.key())) fail(it.key(), "unknown key (expected one of the TinyModelConfig keys)");
  if (!err.empty()) return Error{err};
  auto bad = [&](const std::string& what) { return Error{source + ": " + what}; };
  if (c.compress_ratios.size() != size_t(c.n_layers) && c.compress_ratios.size() != size_t(c.n_layers) + 1)
    return bad("compress_ratios: expected n_layers (" + std::to_string(c.n_layers) + ") or n_layers + 1 entries, found " +
               std::to_string(c.compress_ratios.size()));
  if (c.n_hash_layers > c.n_layers)
    return bad("n_hash_layers " + std::to_string(c.n_hash_layers) + " exceeds n_layers " + std::to_string(c.n_layers));
  if (c.n_activated_experts > c.n_routed_experts)
    return bad("n_activated_experts " + std::to_string(c.n_activated_experts) + " exceeds n_routed_experts " +
               std::to_string(c.n_routed_experts));
  if ((int64_t(c.n_heads) * c.head_dim) % c.o_groups != 0)
    return bad("n_heads * head_dim must be divisible by o_groups");
  if (c.rope_head_dim > c.head_dim || c.rope_head_dim % 2 != 0)
    return bad("rope_head_dim must be even and <= head_dim, found " + std::to_string(c.rope_head_dim));
  return c;
}

Result<TinyModelConfig> load_tiny_config(const std::string& path) {
  DS4_TRY(const std::string text, read_file_bounded(path, kMaxJsonBytes, "make-tiny model config"));
  return parse_tiny_config(text, path);
}

Result<GgmlType> parse_expert_type(const std::string& s) {
  static const GgmlType allowed[] = {GgmlType::Q8_0, GgmlType::Q2_K, GgmlType::IQ2_XXS, GgmlType::IQ2_XS,
                                     GgmlType::IQ1_S, GgmlType::IQ1_M, GgmlType::MXFP4};
  const auto* g = ggml_type_by_name(s);
  if (g)
    for (GgmlType t : allowed)
      if (uint32_t(t) == g->id) return t;
  return Error{"--experts: expected one of q8_0, q2_k, iq2_xxs, iq2_xs, iq1_s, iq1_m, mxfp4, found \"" + s + "\""};
}

// ---- weights ----------------------------------------------------------------------------------

namespace {

uint64_t fnv1a64(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

// The seed of tensor `name`: FNV-1a64(name) ^ (seed * golden ratio constant).
uint64_t tensor_seed(uint64_t seed, const std::string& name) { return fnv1a64(name) ^ (seed * 0x9E3779B97F4A7C15ull); }

// True for the block-quantized types (not F32 / F16 / I32).
bool is_quantized(GgmlType t) { return t != GgmlType::F32 && t != GgmlType::F16 && t != GgmlType::I32; }

// Deterministic generator per tensor: Gaussian by Box-Muller on the 53-bit uniform.
struct Rng {
  std::mt19937_64 eng;
  Rng(uint64_t seed, const std::string& name) : eng(tensor_seed(seed, name)) {}
  double uniform() { return uniform01(eng); }
  double normal() {
    double u1 = 1.0 - uniform();  // (0, 1]
    double u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }
};

enum class Init { Normal, OnePlusNormal, Uniform };

struct Spec {
  std::string name;
  GgmlType type;
  std::vector<int64_t> ne;  // ggml order
  Init init;
  double a, b;  // Normal: mean a, std b; OnePlusNormal: 1 + N(0, b); Uniform: U(a, b)
  bool tid2eid = false;
};

uint64_t nelem(const std::vector<int64_t>& ne) {
  uint64_t n = 1;
  for (auto d : ne) n *= uint64_t(d);
  return n;
}

std::vector<Spec> tensor_plan(const TinyModelConfig& c, GgmlType gate_up, GgmlType down) {
  const GgmlType F32 = GgmlType::F32, F16 = GgmlType::F16, Q8 = GgmlType::Q8_0;
  const int64_t D = c.dim, hc = c.hc_mult, E = c.n_routed_experts, F = c.moe_inter_dim, V = c.vocab_size;
  const int64_t H = c.n_heads, hd = c.head_dim, hc_mix = (2 + hc) * hc;
  auto dense = [](int64_t fan_in) { return 1.0 / std::sqrt(double(fan_in)); };
  std::vector<Spec> s;
  auto add = [&](std::string name, GgmlType t, std::vector<int64_t> ne, Init init, double a, double b) {
    s.push_back({std::move(name), t, std::move(ne), init, a, b});
  };
  add("token_embd.weight", F16, {D, V}, Init::Normal, 0, 1.0);
  add("output_norm.weight", F32, {D}, Init::OnePlusNormal, 0, 0.1);
  add("output.weight", Q8, {D, V}, Init::Normal, 0, 3.2 / std::sqrt(double(D)));
  add("output_hc_fn.weight", F16, {hc * D, hc}, Init::Normal, 0, dense(hc * D));
  add("output_hc_base.weight", F32, {hc}, Init::Normal, 0, 0.5);
  add("output_hc_scale.weight", F32, {1}, Init::Uniform, 0.5, 1.4);
  for (int l = 0; l < c.n_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    const int r = c.compress_ratios[size_t(l)];
    for (const char* which : {"attn", "ffn"}) {
      add(p + "hc_" + which + "_fn.weight", F16, {hc * D, hc_mix}, Init::Normal, 0, dense(hc * D));
      add(p + "hc_" + which + "_base.weight", F32, {hc_mix}, Init::Normal, 0, 0.5);
      add(p + "hc_" + which + "_scale.weight", F32, {3}, Init::Uniform, 0.5, 1.4);
    }
    add(p + "attn_sinks.weight", F32, {H}, Init::Normal, 0, 1.0);
    add(p + "attn_q_a.weight", Q8, {D, c.q_lora_rank}, Init::Normal, 0, dense(D));
    add(p + "attn_q_b.weight", Q8, {c.q_lora_rank, H * hd}, Init::Normal, 0, dense(c.q_lora_rank));
    add(p + "attn_q_a_norm.weight", F32, {c.q_lora_rank}, Init::OnePlusNormal, 0, 0.1);
    add(p + "attn_kv.weight", Q8, {D, hd}, Init::Normal, 0, dense(D));
    add(p + "attn_kv_a_norm.weight", F32, {hd}, Init::OnePlusNormal, 0, 0.1);
    const int64_t oa_in = H * hd / c.o_groups, oa_out = c.o_groups * c.o_lora_rank;
    add(p + "attn_output_a.weight", Q8, {oa_in, oa_out}, Init::Normal, 0, dense(oa_in));
    add(p + "attn_output_b.weight", Q8, {oa_out, D}, Init::Normal, 0, dense(oa_out));
    if (r != 0) {
      const int64_t coff = r == 4 ? 2 : 1;  // ratio 4 compresses overlapping windows: 2x channels
      add(p + "attn_compressor_ape.weight", F16, {coff * hd, r}, Init::Normal, 0, 0.5);
      add(p + "attn_compressor_kv.weight", F16, {D, coff * hd}, Init::Normal, 0, dense(D));
      add(p + "attn_compressor_gate.weight", F16, {D, coff * hd}, Init::Normal, 0, dense(D));
      add(p + "attn_compressor_norm.weight", F32, {hd}, Init::OnePlusNormal, 0, 0.1);
      if (r == 4) {
        const int64_t ih = c.index_n_heads, ihd = c.index_head_dim;
        add(p + "indexer.attn_q_b.weight", F16, {c.q_lora_rank, ih * ihd}, Init::Normal, 0, dense(c.q_lora_rank));
        add(p + "indexer.proj.weight", F16, {D, ih}, Init::Normal, 0, dense(D));
        add(p + "indexer_compressor_ape.weight", F16, {coff * ihd, r}, Init::Normal, 0, 0.5);
        add(p + "indexer_compressor_kv.weight", F16, {D, coff * ihd}, Init::Normal, 0, dense(D));
        add(p + "indexer_compressor_gate.weight", F16, {D, coff * ihd}, Init::Normal, 0, dense(D));
        add(p + "indexer_compressor_norm.weight", F32, {ihd}, Init::OnePlusNormal, 0, 0.1);
      }
    }
    add(p + "attn_norm.weight", F32, {D}, Init::OnePlusNormal, 0, 0.1);
    add(p + "ffn_norm.weight", F32, {D}, Init::OnePlusNormal, 0, 0.1);
    add(p + "ffn_gate_inp.weight", F16, {D, E}, Init::Normal, 0, 0.1);
    add(p + "ffn_gate_shexp.weight", Q8, {D, F}, Init::Normal, 0, 0.25);
    add(p + "ffn_down_shexp.weight", Q8, {F, D}, Init::Normal, 0, 0.25 / std::sqrt(double(F)));
    add(p + "ffn_up_shexp.weight", Q8, {D, F}, Init::Normal, 0, 0.25);
    if (l < c.n_hash_layers) {
      add(p + "ffn_gate_tid2eid.weight", GgmlType::I32, {c.n_activated_experts, V}, Init::Uniform, 0, 0);
      s.back().tid2eid = true;
    } else {
      add(p + "exp_probs_b.bias", F32, {E}, Init::Normal, 0, 0.07);
    }
    add(p + "ffn_gate_exps.weight", gate_up, {D, F, E}, Init::Normal, 0, 0.25);
    add(p + "ffn_down_exps.weight", down, {F, D, E}, Init::Normal, 0, 0.25 / std::sqrt(double(F)));
    add(p + "ffn_up_exps.weight", gate_up, {D, F, E}, Init::Normal, 0, 0.25);
  }
  return s;
}

// llama.cpp llama_ftype of the expert type (general.file_type): MOSTLY_Q8_0 7, MOSTLY_Q2_K 10,
// MOSTLY_IQ2_XXS 19, MOSTLY_IQ2_XS 20, MOSTLY_IQ1_S 24, MOSTLY_IQ1_M 31, MOSTLY_MXFP4_MOE 38.
uint32_t file_type_of(GgmlType gate_up) {
  switch (gate_up) {
    case GgmlType::Q8_0: return 7;
    case GgmlType::Q2_K: return 10;
    case GgmlType::IQ2_XXS: return 19;
    case GgmlType::IQ2_XS: return 20;
    case GgmlType::IQ1_S: return 24;
    case GgmlType::IQ1_M: return 31;
    case GgmlType::MXFP4: return 38;
    default: return 0;
  }
}

void set_metadata(gguf::Metadata& md, const TinyModelConfig& c, uint32_t file_type, const TokenizerVocab& v) {
  using gguf::Value;
  const std::string a = "deepseek4.";
  md.set("general.architecture", Value::make_string("deepseek4"));
  md.set("general.name", Value::make_string(c.name));
  md.set(a + "block_count", Value::make_u32(uint32_t(c.n_layers)));
  md.set(a + "context_length", Value::make_u32(uint32_t(c.context_length)));
  md.set(a + "embedding_length", Value::make_u32(uint32_t(c.dim)));
  md.set(a + "attention.head_count", Value::make_u32(uint32_t(c.n_heads)));
  md.set(a + "attention.head_count_kv", Value::make_u32(1));
  md.set(a + "attention.key_length", Value::make_u32(uint32_t(c.head_dim)));
  md.set(a + "attention.value_length", Value::make_u32(uint32_t(c.head_dim)));
  md.set(a + "rope.freq_base", Value::make_f32(float(c.rope_theta)));
  md.set(a + "rope.dimension_count", Value::make_u32(uint32_t(c.rope_head_dim)));
  md.set(a + "rope.scaling.type", Value::make_string("yarn"));
  md.set(a + "rope.scaling.factor", Value::make_f32(float(c.rope_factor)));
  md.set(a + "rope.scaling.original_context_length", Value::make_u32(uint32_t(c.original_seq_len)));
  md.set(a + "rope.scaling.yarn_beta_fast", Value::make_f32(float(c.beta_fast)));
  md.set(a + "rope.scaling.yarn_beta_slow", Value::make_f32(float(c.beta_slow)));
  md.set(a + "attention.layer_norm_rms_epsilon", Value::make_f32(float(c.norm_eps)));
  md.set(a + "expert_count", Value::make_u32(uint32_t(c.n_routed_experts)));
  md.set(a + "expert_used_count", Value::make_u32(uint32_t(c.n_activated_experts)));
  md.set(a + "expert_gating_func", Value::make_u32(4));  // llama.cpp's value for sqrtsoftplus
  md.set(a + "attention.q_lora_rank", Value::make_u32(uint32_t(c.q_lora_rank)));
  md.set(a + "attention.sliding_window", Value::make_u32(uint32_t(c.window_size)));
  md.set(a + "expert_feed_forward_length", Value::make_u32(uint32_t(c.moe_inter_dim)));
  md.set(a + "expert_shared_count", Value::make_u32(uint32_t(c.n_shared_experts)));
  md.set(a + "expert_weights_scale", Value::make_f32(float(c.route_scale)));
  md.set(a + "expert_weights_norm", Value::make_bool(true));
  md.set(a + "swiglu_clamp_exp", Value::make_array_f32(std::vector<float>(size_t(c.n_layers), float(c.swiglu_limit))));
  md.set(a + "swiglu_clamp_shexp",
         Value::make_array_f32(std::vector<float>(size_t(c.n_layers), float(c.swiglu_limit_shared))));
  md.set(a + "attention.indexer.head_count", Value::make_u32(uint32_t(c.index_n_heads)));
  md.set(a + "attention.indexer.key_length", Value::make_u32(uint32_t(c.index_head_dim)));
  md.set(a + "attention.indexer.top_k", Value::make_u32(uint32_t(c.index_topk)));
  md.set(a + "attention.output_group_count", Value::make_u32(uint32_t(c.o_groups)));
  md.set(a + "attention.output_lora_rank", Value::make_u32(uint32_t(c.o_lora_rank)));
  md.set(a + "attention.compress_ratios",
         Value::make_array_i32(std::vector<int32_t>(c.compress_ratios.begin(), c.compress_ratios.end())));
  md.set(a + "attention.compress_rope_freq_base", Value::make_f32(float(c.compress_rope_theta)));
  md.set(a + "hyper_connection.count", Value::make_u32(uint32_t(c.hc_mult)));
  md.set(a + "hyper_connection.sinkhorn_iterations", Value::make_u32(uint32_t(c.hc_sinkhorn_iters)));
  md.set(a + "hyper_connection.epsilon", Value::make_f32(float(c.hc_eps)));
  md.set(a + "hash_layer_count", Value::make_u32(uint32_t(c.n_hash_layers)));
  md.set(a + "vocab_size", Value::make_u32(uint32_t(c.vocab_size)));
  md.set("general.file_type", Value::make_u32(file_type));
  md.set("tokenizer.ggml.model", Value::make_string(v.model));
  md.set("tokenizer.ggml.pre", Value::make_string(v.pre));
  md.set("tokenizer.ggml.tokens", Value::make_array_string(v.tokens));
  md.set("tokenizer.ggml.token_type", Value::make_array_i32(v.token_types));
  md.set("tokenizer.ggml.merges", Value::make_array_string(v.merges));
  md.set("tokenizer.ggml.bos_token_id", Value::make_u32(uint32_t(v.bos_id)));
  md.set("tokenizer.ggml.eos_token_id", Value::make_u32(uint32_t(v.eos_id)));
  md.set("tokenizer.ggml.padding_token_id", Value::make_u32(uint32_t(v.pad_id)));
  md.set("tokenizer.ggml.add_bos_token", Value::make_bool(v.add_bos));
}

// Produces tensor `s`'s bytes into dst (nbytes(s.type, s.ne)): tid2eid expert ids; with
// --random-blocks, random blocks of RMS 1/sqrt(ne0) for the quantized types (engine/random_blocks.h);
// otherwise the values of s.init, quantized (rows on `threads` threads, same bytes for any count).
void fill_tensor(const Spec& s, const TinyModelConfig& c, const TinyModelOptions& opts, uint64_t n, int threads,
                 uint8_t* dst) {
  Rng rng(opts.seed, s.name);
  if (s.tid2eid) {
    // [n_activated, vocab] I32: for each token, distinct experts drawn by a partial Fisher-Yates.
    const int64_t k = s.ne[0], vocab_n = s.ne[1];
    std::vector<int32_t> ids(size_t(k * vocab_n));
    std::vector<int32_t> pool(size_t(c.n_routed_experts));
    for (int64_t t = 0; t < vocab_n; ++t) {
      for (size_t e = 0; e < pool.size(); ++e) pool[e] = int32_t(e);
      for (int64_t i = 0; i < k; ++i) {
        size_t j = size_t(i) + size_t(rng.uniform() * double(pool.size() - size_t(i)));
        std::swap(pool[size_t(i)], pool[j]);
        ids[size_t(t * k + i)] = pool[size_t(i)];
      }
    }
    std::memcpy(dst, ids.data(), ids.size() * 4);
    return;
  }
  const int64_t ne0 = s.ne[0], rows = int64_t(n) / ne0;
  if (opts.random_blocks && is_quantized(s.type)) {
    random_block_tensor(s.type, ne0, rows, 1.0 / std::sqrt(double(ne0)), tensor_seed(opts.seed, s.name), dst, threads);
    return;
  }
  std::vector<float> vals(n);
  for (auto& x : vals) {
    switch (s.init) {
      case Init::Normal: x = float(s.a + s.b * rng.normal()); break;
      case Init::OnePlusNormal: x = float(1.0 + s.b * rng.normal()); break;
      case Init::Uniform: x = float(s.a + (s.b - s.a) * rng.uniform()); break;
    }
  }
  const int64_t rb = cpu::row_bytes(s.type, ne0);
  auto work = [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) cpu::quantize_row(s.type, vals.data() + r * ne0, dst + r * rb, ne0);
  };
  const int64_t nt = std::min<int64_t>(threads, std::max<int64_t>(1, rows / 64));
  std::vector<std::thread> pool;
  for (int64_t t = 1; t < nt; ++t) pool.emplace_back(work, rows * t / nt, rows * (t + 1) / nt);
  work(0, rows / nt);
  for (auto& th : pool) th.join();
}

}  // namespace

Result<TinyModelSummary> write_tiny_model(const std::string& path, const TinyModelOptions& opts) {
  const TinyModelConfig& c = opts.config;
  if (c.compress_ratios.size() < size_t(c.n_layers))
    return Error{"make-tiny: compress_ratios has " + std::to_string(c.compress_ratios.size()) + " entries, expected >= n_layers " +
                 std::to_string(c.n_layers)};
  auto plan = tensor_plan(c, opts.gate_up_type, opts.down_type);
  // Every row must be encodable by its type (block sizes: Q8_0/MXFP4 32, K/IQ types 256).
  for (const auto& s : plan) {
    const auto* g = ggml_type_geometry(uint32_t(s.type));
    DS4_CHECK(g != nullptr);
    if (s.ne[0] % g->block_elems != 0)
      return Error{"make-tiny: tensor '" + s.name + "' has rows of ne0 = " + std::to_string(s.ne[0]) + " elements, not a multiple of the " +
                   std::string(g->name) + " block of " + std::to_string(g->block_elems) +
                   (s.name.find("down_exps") != std::string::npos ? " (set moe_inter_dim to a multiple of 256 or pick --experts q8_0/mxfp4)" : "")};
    if (s.type != GgmlType::I32 && !(opts.random_blocks && is_quantized(s.type) ? can_random_blocks(s.type) : cpu::can_quantize(s.type)))
      return Error{"make-tiny: tensor '" + s.name + "': no " + (opts.random_blocks ? "random-block generator" : "encoder") +
                   " for type " + std::string(g->name)};
  }
  DS4_TRY(TokenizerVocab vocab, build_tiny_vocab(int(c.vocab_size)));

  const int threads = opts.threads > 0 ? opts.threads : int(std::max(1u, std::thread::hardware_concurrency()));
  gguf::GgufWriter w;
  set_metadata(w.metadata(), c, file_type_of(opts.gate_up_type), vocab);
  if (opts.random_blocks)
    w.metadata().set("general.description",
                     gguf::Value::make_string("ds4-offload make-tiny --random-blocks: the quantized weights are random "
                                              "blocks (not trained, not quantized from anything); for benchmarks only"));
  TinyModelSummary sum;
  // Every tensor is produced while the file is written, one at a time (the writer reuses one
  // buffer): the model is never held in memory.
  for (const auto& s : plan) {
    const uint64_t n = nelem(s.ne);
    auto fill = [&c, &s, &opts, n, threads](uint8_t* dst) -> Result<void> {
      fill_tensor(s, c, opts, n, threads, dst);
      return ok();
    };
    DS4_TRY_VOID(w.add_tensor_deferred(s.name, uint32_t(s.type), s.ne, fill));
    sum.n_params += n;
    ++sum.n_tensors;
  }
  DS4_TRY_VOID(w.write(path));
  std::error_code ec;
  sum.file_bytes = std::filesystem::file_size(path, ec);
  return sum;
}

}  // namespace ds4

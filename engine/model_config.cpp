// engine/model_config.cpp — ModelConfig from GGUF metadata and the tensor cross-check.
#include "engine/model_config.h"
#include "ds4/format_number.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "kernels/device.h"

namespace ds4 {
namespace {

constexpr const char* kArch = "deepseek4";
constexpr int kSqrtSoftplusGating = 4;
constexpr int64_t kMaxWindow = int64_t{1} << 20;   // sliding window (DeepSeek-V4: 128)
constexpr int64_t kMaxSinkhornIters = 1000;        // mHC Sinkhorn iterations (DeepSeek-V4: 20)  // llama.cpp LLAMA_EXPERT_GATING_FUNC_TYPE_SQRT_SOFTPLUS

/// Reads keys and collects every error message instead of stopping at the first.
class KeyReader {
 public:
  KeyReader(const gguf::Metadata& m, std::vector<std::string>* errs) : m_(m), errs_(errs) {}
  static std::string key(const char* k) { return std::string(kArch) + "." + k; }

  template <class T>
  T take(Result<T> r, T fallback) {
    if (r.ok()) return std::move(r).value();
    errs_->push_back(r.error().message);
    return fallback;
  }
  int64_t i(const char* k) { return take(m_.get_int(key(k)), int64_t{0}); }
  /// Every float key of a deepseek4 model (theta, YaRN, eps, scales) must be finite and > 0.
  double f(const char* k) {
    const double v = take(m_.get_float(key(k)), 0.0);
    if (m_.has(key(k)) && !(std::isfinite(v) && v > 0))
      errs_->push_back("key '" + key(k) + "': expected a finite value > 0, found " + format_number(v));
    return v;
  }
  bool b(const char* k) { return take(m_.get_bool(key(k)), false); }
  std::vector<int64_t> ia(const char* k) { return take(m_.get_int_array(key(k)), std::vector<int64_t>{}); }
  /// Float arrays (SwiGLU clamps): every entry finite and >= 0 (0 = no clamp).
  std::vector<double> fa(const char* k) {
    auto v = take(m_.get_float_array(key(k)), std::vector<double>{});
    for (size_t j = 0; j < v.size(); ++j)
      if (!(std::isfinite(v[j]) && v[j] >= 0))
        errs_->push_back("key '" + key(k) + "'[" + std::to_string(j) + "]: expected a finite value >= 0, found " +
                         format_number(v[j]));
    return v;
  }
  /// `attention.indexer.X` as llama.cpp writes it, or `indexer.X` as another converter lineage
  /// does (../shared/reference/dsv4-architecture.md §6); an error names the first spelling.
  int64_t indexer_key(const char* leaf) {
    const std::string alt = std::string("indexer.") + leaf;
    if (!m_.has(key(("attention." + alt).c_str())) && m_.has(key(alt.c_str()))) return positive(alt.c_str());
    return positive(("attention." + alt).c_str());
  }
  /// A count or dimension: 1 <= v <= `max` (default INT32_MAX, so that products of two fit in
  /// int64 and int fields are never narrowed). Out of range: an error naming the limit and `why`,
  /// and 0 is returned so that nothing is sized from the value.
  int64_t positive(const char* k, int64_t max = INT32_MAX, const std::string& why = "") {
    if (!m_.has(key(k))) return i(k);  // reports the missing key
    auto r = m_.get_int(key(k));
    if (!r) {
      errs_->push_back(r.error().message);
      return 0;
    }
    if (*r <= 0 || *r > max) {
      errs_->push_back("key '" + key(k) + "': expected 1.." + std::to_string(max) + why + ", found " + std::to_string(*r));
      return 0;
    }
    return *r;
  }
  /// A non-negative count 0 <= v <= max (same rules as positive()); out of range returns -1.
  int64_t count(const char* k, int64_t max, const std::string& why = "") {
    if (!m_.has(key(k))) return i(k);
    auto r = m_.get_int(key(k));
    if (!r) {
      errs_->push_back(r.error().message);
      return -1;
    }
    if (*r < 0 || *r > max) {
      errs_->push_back("key '" + key(k) + "': expected 0.." + std::to_string(max) + why + ", found " + std::to_string(*r));
      return -1;
    }
    return *r;
  }

 private:
  const gguf::Metadata& m_;
  std::vector<std::string>* errs_;
};

std::string shape_str(const std::vector<int64_t>& ne) {
  std::string s = "{";
  for (size_t i = 0; i < ne.size(); ++i) s += (i ? ", " : "") + std::to_string(ne[i]);
  return s + "}";
}

}  // namespace

RopeTable ModelConfig::rope_table(int l) const {
  if (ratio(l) == 0) return RopeTable(static_cast<int>(rope_dim), rope_theta, YarnParams{});
  return RopeTable(static_cast<int>(rope_dim), compress_rope_theta, yarn);
}

std::vector<ExpectedTensor> expected_tensors(const ModelConfig& c) {
  std::vector<ExpectedTensor> v;
  // Float tensors may be any decodable type (public GGUFs store HC/norm tensors as F16 or F32);
  // the engine decodes small ones to FP32 once at load. tid2eid must be I32.
  const int F32 = -1, I32 = static_cast<int>(GgmlType::I32);
  const int64_t mix = (2 + c.hc) * c.hc, hcd = c.hc * c.dim;
  v.push_back({"token_embd.weight", {c.dim, c.vocab}, -1});
  v.push_back({"output_norm.weight", {c.dim}, F32});
  v.push_back({"output.weight", {c.dim, c.vocab}, -1});
  v.push_back({"output_hc_fn.weight", {hcd, c.hc}, F32});
  v.push_back({"output_hc_base.weight", {c.hc}, F32});
  v.push_back({"output_hc_scale.weight", {1}, F32});
  for (int l = 0; l < c.n_layer; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    auto add = [&](const std::string& n, std::vector<int64_t> ne, int type) {
      v.push_back({p + n, std::move(ne), type});
    };
    for (const char* s : {"attn", "ffn"}) {
      add(std::string("hc_") + s + "_fn.weight", {hcd, mix}, F32);
      add(std::string("hc_") + s + "_base.weight", {mix}, F32);
      add(std::string("hc_") + s + "_scale.weight", {3}, F32);
    }
    add("attn_norm.weight", {c.dim}, F32);
    add("ffn_norm.weight", {c.dim}, F32);
    add("attn_sinks.weight", {c.n_head}, F32);
    add("attn_q_a.weight", {c.dim, c.q_lora_rank}, -1);
    add("attn_q_a_norm.weight", {c.q_lora_rank}, F32);
    add("attn_q_b.weight", {c.q_lora_rank, c.n_head * c.head_dim}, -1);
    add("attn_kv.weight", {c.dim, c.head_dim}, -1);
    add("attn_kv_a_norm.weight", {c.head_dim}, F32);
    add("attn_output_a.weight", {c.n_head * c.head_dim / std::max(c.o_groups, 1), c.o_groups * c.o_lora_rank}, -1);
    add("attn_output_b.weight", {c.o_groups * c.o_lora_rank, c.dim}, -1);
    const int r = c.ratio(l);
    if (r > 0) {
      const int64_t w = (r == 4 ? 2 : 1) * c.head_dim;
      add("attn_compressor_ape.weight", {w, r}, F32);
      add("attn_compressor_kv.weight", {c.dim, w}, -1);
      add("attn_compressor_gate.weight", {c.dim, w}, -1);
      add("attn_compressor_norm.weight", {c.head_dim}, F32);
    }
    if (r == 4) {
      const int64_t w = 2 * c.idx_head_dim;
      add("indexer.attn_q_b.weight", {c.q_lora_rank, c.idx_heads * c.idx_head_dim}, -1);
      add("indexer.proj.weight", {c.dim, c.idx_heads}, -1);
      add("indexer_compressor_ape.weight", {w, 4}, F32);
      add("indexer_compressor_kv.weight", {c.dim, w}, -1);
      add("indexer_compressor_gate.weight", {c.dim, w}, -1);
      add("indexer_compressor_norm.weight", {c.idx_head_dim}, F32);
    }
    add("ffn_gate_inp.weight", {c.dim, c.n_expert}, -1);
    if (l < c.n_hash_layers)
      add("ffn_gate_tid2eid.weight", {c.n_expert_used, c.vocab}, I32);
    else
      add("exp_probs_b.bias", {c.n_expert}, F32);
    const int64_t sff = c.expert_ff * c.n_expert_shared;
    add("ffn_gate_shexp.weight", {c.dim, sff}, -1);
    add("ffn_up_shexp.weight", {c.dim, sff}, -1);
    add("ffn_down_shexp.weight", {sff, c.dim}, -1);
    add("ffn_gate_exps.weight", {c.dim, c.expert_ff, c.n_expert}, -1);
    add("ffn_up_exps.weight", {c.dim, c.expert_ff, c.n_expert}, -1);
    add("ffn_down_exps.weight", {c.expert_ff, c.dim, c.n_expert}, -1);
  }
  return v;
}

Result<ModelConfig> model_config_from_gguf(const gguf::Metadata& meta,
                                           const std::vector<gguf::TensorInfo>& tensors,
                                           const std::string& source) {
  std::vector<std::string> errs;
  auto arch = meta.get_string("general.architecture");
  if (!arch.ok()) {
    errs.push_back(arch.error().message);
  } else if (*arch != kArch) {
    errs.push_back("key 'general.architecture': expected 'deepseek4', found '" + *arch + "'");
  }
  KeyReader k(meta, &errs);
  ModelConfig c;
  // Counts that size work are bounded by what the file can hold: a layer needs at least 20
  // tensors, so block_count cannot exceed the tensor count.
  const int64_t max_layers = std::max<int64_t>(1, static_cast<int64_t>(tensors.size()) / 20);
  c.n_layer = static_cast<int>(
      k.positive("block_count", max_layers, " (the file has " + std::to_string(tensors.size()) + " tensors, 20+ per layer)"));
  c.n_ctx = k.positive("context_length");
  c.dim = k.positive("embedding_length");
  c.vocab = k.positive("vocab_size");
  c.n_head = static_cast<int>(k.positive("attention.head_count"));
  const int64_t n_head_kv = k.i("attention.head_count_kv");
  if (meta.has(KeyReader::key("attention.head_count_kv")) && n_head_kv != 1)
    errs.push_back("key 'deepseek4.attention.head_count_kv': expected 1 (single shared latent KV), found " + std::to_string(n_head_kv));
  c.head_dim = k.positive("attention.key_length");
  const int64_t vlen = k.i("attention.value_length");
  if (meta.has(KeyReader::key("attention.value_length")) && vlen != c.head_dim)
    errs.push_back("key 'deepseek4.attention.value_length': expected " + std::to_string(c.head_dim) + " (= key_length, K = V), found " + std::to_string(vlen));
  c.rope_dim = k.positive("rope.dimension_count");
  c.rope_theta = k.f("rope.freq_base");
  c.compress_rope_theta = k.f("attention.compress_rope_freq_base");
  c.yarn.factor = k.f("rope.scaling.factor");
  c.yarn.original_len = k.positive("rope.scaling.original_context_length");
  c.yarn.beta_fast = k.f("rope.scaling.yarn_beta_fast");
  c.yarn.beta_slow = k.f("rope.scaling.yarn_beta_slow");
  if (const auto* t = meta.find(KeyReader::key("rope.scaling.type")); t) {
    auto s = meta.get_string(KeyReader::key("rope.scaling.type"));
    if (!s.ok()) errs.push_back(s.error().message);
    else if (*s != "yarn") errs.push_back("key 'deepseek4.rope.scaling.type': expected 'yarn', found '" + *s + "'");
  }
  c.norm_eps = static_cast<float>(k.f("attention.layer_norm_rms_epsilon"));
  c.q_lora_rank = k.positive("attention.q_lora_rank");
  c.o_lora_rank = k.positive("attention.output_lora_rank");
  c.o_groups = static_cast<int>(k.positive("attention.output_group_count"));
  // The window sizes one [window, head_dim] ring per layer, allocated up front.
  c.window = k.positive("attention.sliding_window", c.n_ctx > 0 ? std::min(kMaxWindow, c.n_ctx) : kMaxWindow,
                        " (at most context_length and " + std::to_string(kMaxWindow) + ")");
  c.idx_heads = static_cast<int>(k.indexer_key("head_count"));
  c.idx_head_dim = k.indexer_key("key_length");
  c.idx_topk = static_cast<int>(k.indexer_key("top_k"));
  c.n_expert = static_cast<int>(k.positive("expert_count"));
  c.n_expert_used = static_cast<int>(k.positive("expert_used_count"));
  {
    const int64_t shared = k.i("expert_shared_count");
    if (meta.has(KeyReader::key("expert_shared_count")) && shared != 1)
      errs.push_back("key 'deepseek4.expert_shared_count': expected 1, found " + std::to_string(shared));
    c.n_expert_shared = shared == 1 ? 1 : 0;
  }
  c.expert_ff = k.positive("expert_feed_forward_length");
  c.route_scale = static_cast<float>(k.f("expert_weights_scale"));
  c.route_norm = k.b("expert_weights_norm");
  const int64_t gating = k.i("expert_gating_func");
  if (meta.has(KeyReader::key("expert_gating_func")) && gating != kSqrtSoftplusGating)
    errs.push_back("key 'deepseek4.expert_gating_func': expected 4 (sqrtsoftplus), found " + std::to_string(gating));
  // Checked against block_count only when that is usable (else it was reported already).
  c.n_hash_layers = static_cast<int>(k.count("hash_layer_count", c.n_layer > 0 ? c.n_layer : INT32_MAX));
  c.hc = static_cast<int>(k.positive("hyper_connection.count"));
  // Iterations run per token and layer: an absurd count would hang every forward pass.
  c.hc_iters = static_cast<int>(k.positive("hyper_connection.sinkhorn_iterations", kMaxSinkhornIters,
                                           " (DeepSeek-V4 uses 20)"));
  c.hc_eps = static_cast<float>(k.f("hyper_connection.epsilon"));

  // Per-layer arrays: block_count entries, optionally followed by the MTP blocks' entries (their
  // number is nextn_predict_layers when that key is present, else at most 1). Files differ: the
  // dsv4-tiny fixture has 7 compress_ratios but 6 swiglu_clamp_exp entries for 6 layers.
  auto ratios = k.ia("attention.compress_ratios");
  auto clamp = k.fa("swiglu_clamp_exp");
  std::vector<double> clamp_sh;
  c.shexp_clamp_from_file = meta.has(KeyReader::key("swiglu_clamp_shexp"));
  if (c.shexp_clamp_from_file) clamp_sh = k.fa("swiglu_clamp_shexp");
  int64_t want_len = -1;
  if (meta.has(KeyReader::key("nextn_predict_layers"))) want_len = c.n_layer + k.count("nextn_predict_layers", 64);
  auto check_len = [&](const char* name, size_t n) {
    if (!meta.has(KeyReader::key(name)) || c.n_layer <= 0) return;
    if (want_len >= 0) {
      if (static_cast<int64_t>(n) != want_len && static_cast<int64_t>(n) != c.n_layer)
        errs.push_back("key 'deepseek4." + std::string(name) + "': expected " + std::to_string(c.n_layer) + " or " +
                       std::to_string(want_len) + " entries (block_count " + std::to_string(c.n_layer) +
                       " [+ nextn_predict_layers]), found " + std::to_string(n));
    } else if (static_cast<int64_t>(n) < c.n_layer || static_cast<int64_t>(n) > c.n_layer + 1) {
      errs.push_back("key 'deepseek4." + std::string(name) + "': expected " + std::to_string(c.n_layer) + " or " +
                     std::to_string(c.n_layer + 1) + " entries (block_count " + std::to_string(c.n_layer) +
                     " [+ 1 MTP block]), found " + std::to_string(n));
    }
  };
  check_len("attention.compress_ratios", ratios.size());
  check_len("swiglu_clamp_exp", clamp.size());
  if (c.shexp_clamp_from_file) check_len("swiglu_clamp_shexp", clamp_sh.size());
  c.n_mtp = static_cast<int>(std::max<int64_t>(0, static_cast<int64_t>(ratios.size()) - c.n_layer));
  for (size_t l = 0; l < ratios.size(); ++l) {
    if (ratios[l] != 0 && ratios[l] != 4 && ratios[l] != 128)
      errs.push_back("key 'deepseek4.attention.compress_ratios'[" + std::to_string(l) + "]: expected 0, 4 or 128, found " + std::to_string(ratios[l]));
    c.compress_ratios.push_back(static_cast<int>(ratios[l]));
  }
  for (double v : clamp) c.swiglu_limit.push_back(static_cast<float>(v));
  if (c.shexp_clamp_from_file) {
    for (double v : clamp_sh) c.swiglu_limit_shexp.push_back(static_cast<float>(v));
  } else {
    c.swiglu_limit_shexp.assign(c.swiglu_limit.size(), 0.0f);  // REF: shared expert unclamped
  }
  if (c.n_hash_layers < 0) c.n_hash_layers = 0;  // reported by count()
  if (c.n_expert_used > c.n_expert)
    errs.push_back("key 'deepseek4.expert_used_count': expected <= expert_count " + std::to_string(c.n_expert) + ", found " + std::to_string(c.n_expert_used));
  if (c.o_groups > 0 && c.n_head % c.o_groups != 0)
    errs.push_back("key 'deepseek4.attention.output_group_count': expected a divisor of head_count " + std::to_string(c.n_head) + ", found " + std::to_string(c.o_groups));
  if (c.rope_dim > c.head_dim || c.rope_dim > c.idx_head_dim || c.rope_dim % 2)
    errs.push_back("key 'deepseek4.rope.dimension_count': expected an even value <= key_length and indexer key_length, found " + std::to_string(c.rope_dim));

  // Tensors (only when the keys were usable: shapes derive from them).
  // Skipped when a dimension key is unusable (already reported); layers whose compress ratio is
  // unknown (array too short) get only their ratio-independent tensors checked.
  const bool dims_ok = c.n_layer > 0 && c.dim > 0 && c.vocab > 0 && c.n_head > 0 && c.head_dim > 0 &&
                       c.q_lora_rank > 0 && c.o_lora_rank > 0 && c.o_groups > 0 && c.hc > 0 &&
                       c.n_expert > 0 && c.n_expert_used > 0 && c.expert_ff > 0 && c.idx_heads > 0 &&
                       c.idx_head_dim > 0 && c.n_expert_shared > 0;
  if (dims_ok) {
    ModelConfig cc = c;
    while (static_cast<int64_t>(cc.compress_ratios.size()) < cc.n_layer) cc.compress_ratios.push_back(-1);
    std::unordered_map<std::string, const gguf::TensorInfo*> by_name;
    for (const auto& t : tensors) by_name[t.name] = &t;
    std::unordered_set<std::string> expected_names;
    std::set<int64_t> expert_ne2;  // ne[2] values of expert tensors that disagree with expert_count
    for (const auto& e : expected_tensors(cc)) {
      expected_names.insert(e.name);
      auto it = by_name.find(e.name);
      if (it == by_name.end()) {
        errs.push_back("tensor '" + e.name + "': expected shape " + shape_str(e.ne) + ", found missing");
        continue;
      }
      const gguf::TensorInfo& t = *it->second;
      std::vector<int64_t> found(t.ne.begin(), t.ne.begin() + std::max(1, t.n_dims));
      std::vector<int64_t> want = e.ne;
      while (want.size() < found.size()) want.push_back(1);
      while (found.size() < want.size()) found.push_back(1);
      if (found != want) {
        std::string what = "shape " + shape_str(e.ne);
        if (e.ne.size() == 3 && found.size() >= 3 && found[2] != e.ne[2] && found[0] == e.ne[0] && found[1] == e.ne[1]) {
          what = "ne[2] = expert_count " + std::to_string(c.n_expert) + " (shape " + shape_str(e.ne) + ")";
          expert_ne2.insert(found[2]);
        }
        errs.push_back("tensor '" + e.name + "': expected " + what + ", found " + shape_str(found));
      }
      if (e.required_type >= 0 && static_cast<int>(t.type) != e.required_type) {
        errs.push_back("tensor '" + e.name + "': expected type " + std::string(ggml_type_name(e.required_type)) +
                       ", found " + std::string(ggml_type_name(t.type)));
      } else if (e.required_type < 0 && static_cast<GgmlType>(t.type) != GgmlType::F32 &&
                 !dev::can_bind_type(static_cast<GgmlType>(t.type))) {
        errs.push_back("tensor '" + e.name + "': expected a weight type the device kernels decode, found " +
                       std::string(ggml_type_name(t.type)));
      }
    }
    // MTP block tensors (blk.{n_layer}.. blk.{n_layer+n_mtp-1}.*) are allowed and not used.
    for (const auto& t : tensors) {
      if (expected_names.count(t.name)) continue;
      bool mtp = false, unknown_ratio = false;
      for (int m = 0; m < c.n_mtp; ++m)
        if (t.name.rfind("blk." + std::to_string(c.n_layer + m) + ".", 0) == 0) mtp = true;
      for (int l = 0; l < c.n_layer; ++l)
        if (cc.ratio(l) < 0 && t.name.rfind("blk." + std::to_string(l) + ".", 0) == 0 &&
            (t.name.find("compressor") != std::string::npos || t.name.find("indexer") != std::string::npos))
          unknown_ratio = true;
      if (!mtp && !unknown_ratio) errs.push_back("tensor '" + t.name + "': unexpected (not part of a deepseek4 model with this config)");
    }
    if (!expert_ne2.empty()) {
      std::string found;
      for (int64_t v : expert_ne2) found += (found.empty() ? "" : ", ") + std::to_string(v);
      errs.insert(errs.begin(), "key 'deepseek4.expert_count': " + std::to_string(c.n_expert) +
                                    " disagrees with the expert tensors, whose ne[2] is " + found);
    }
  }
  if (errs.size() == 1) return Error{source + ": not a valid deepseek4 model: " + errs[0]};
  if (!errs.empty()) {
    std::string msg = source + ": not a valid deepseek4 model (" + std::to_string(errs.size()) + " problem" +
                      (errs.size() > 1 ? "s" : "") + "):";
    // The first problems tell what is wrong; a file of another shape can have thousands.
    constexpr size_t kShown = 40;
    for (size_t i = 0; i < errs.size() && i < kShown; ++i) msg += "\n  " + errs[i];
    if (errs.size() > kShown) msg += "\n  ... and " + std::to_string(errs.size() - kShown) + " more";
    return Error{msg};
  }
  return c;
}

}  // namespace ds4

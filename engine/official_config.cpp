// engine/official_config.cpp — see official_config.h.
#include "engine/official_config.h"
#include "ds4/json_depth.h"

#include <filesystem>

#include <nlohmann/json.hpp>

#include "ds4/file_io.h"

namespace ds4 {

namespace fs = std::filesystem;
using nlohmann::json;
using gguf::Value;

const ConfigKeyMap kConfigKeyMap[] = {
    {"num_hidden_layers", "block_count"},
    {"max_position_embeddings", "context_length"},
    {"hidden_size", "embedding_length"},
    {"vocab_size", "vocab_size"},
    {"num_attention_heads", "attention.head_count"},
    {"num_key_value_heads", "attention.head_count_kv"},
    {"head_dim", "attention.key_length"},
    {"head_dim", "attention.value_length"},
    {"qk_rope_head_dim", "rope.dimension_count"},
    {"q_lora_rank", "attention.q_lora_rank"},
    {"o_lora_rank", "attention.output_lora_rank"},
    {"o_groups", "attention.output_group_count"},
    {"sliding_window", "attention.sliding_window"},
    {"index_n_heads", "attention.indexer.head_count"},
    {"index_head_dim", "attention.indexer.key_length"},
    {"index_topk", "attention.indexer.top_k"},
    {"n_routed_experts", "expert_count"},
    {"num_experts_per_tok", "expert_used_count"},
    {"n_shared_experts", "expert_shared_count"},
    {"moe_intermediate_size", "expert_feed_forward_length"},
    {"num_hash_layers", "hash_layer_count"},
    {"hc_mult", "hyper_connection.count"},
    {"hc_sinkhorn_iters", "hyper_connection.sinkhorn_iterations"},
};
const int kConfigKeyMapSize = static_cast<int>(sizeof(kConfigKeyMap) / sizeof(kConfigKeyMap[0]));

namespace {

/// Float keys (written as FLOAT32, as llama.cpp's converter does).
constexpr ConfigKeyMap kFloatKeys[] = {
    {"rope_theta", "rope.freq_base"},
    {"compress_rope_theta", "attention.compress_rope_freq_base"},
    {"rms_norm_eps", "attention.layer_norm_rms_epsilon"},
    {"routed_scaling_factor", "expert_weights_scale"},
    {"hc_eps", "hyper_connection.epsilon"},
};

/// Reads and parses one JSON file of a checkpoint folder: a regular file of at most kMaxJsonBytes
/// (DeepSeek-V4-Flash's largest, tokenizer.json, is ~8 MB), checked before it is opened.
Result<json> read_json(const std::string& path, const char* what) {
  DS4_TRY(const std::string s, read_file_bounded(path, kMaxJsonBytes, what));
  if (auto e = json_depth_error(s, kMaxJsonFileDepth, path); !e.empty()) return Error{e};
  try {
    return json::parse(s);
  } catch (const json::exception& e) {
    return Error{path + ": " + what + " JSON malformed: " + e.what()};
  }
}

/// tokenizer.json (HF tokenizers: model.type BPE, model.vocab {token: id}, model.merges "a b" or
/// ["a", "b"], added_tokens [{id, content, special}]) -> tokenizer.ggml.* keys (gguf-py's
/// SpecialVocab / llama.cpp convert_hf_to_gguf conventions: token_type 1 normal, 3 control,
/// 4 user-defined, 5 unused padding up to vocab_size).
Result<void> add_tokenizer(const std::string& path, int64_t vocab_size, int64_t bos, int64_t eos, gguf::Metadata* md) {
  DS4_TRY(json t, read_json(path, "tokenizer"));
  const json* model = t.is_object() && t.contains("model") ? &t["model"] : nullptr;
  if (!model || !model->is_object() || model->value("type", "") != "BPE" || !model->contains("vocab") ||
      !(*model)["vocab"].is_object() || !model->contains("merges") || !(*model)["merges"].is_array())
    return Error{path + ": expected a BPE tokenizer (model.type \"BPE\", model.vocab object, model.merges array)"};
  std::vector<std::string> tokens(size_t(std::max<int64_t>(vocab_size, 0)));
  std::vector<int32_t> types(tokens.size(), 5);
  auto put = [&](const std::string& s, const json& id, int32_t type) -> Result<void> {
    if (!id.is_number_unsigned() || id.get<uint64_t>() >= tokens.size())
      return Error{path + ": token '" + s + "' id " + id.dump() + "; expected 0.." + std::to_string(int64_t(tokens.size()) - 1) +
                   " (config.json vocab_size " + std::to_string(vocab_size) + ")"};
    tokens[id.get<size_t>()] = s;
    types[id.get<size_t>()] = type;
    return ok();
  };
  for (auto it = (*model)["vocab"].begin(); it != (*model)["vocab"].end(); ++it) DS4_TRY_VOID(put(it.key(), it.value(), 1));
  if (t.contains("added_tokens") && t["added_tokens"].is_array())
    for (const json& a : t["added_tokens"]) {
      if (!a.is_object() || !a.contains("id") || !a.contains("content") || !a["content"].is_string())
        return Error{path + ": added_tokens entry " + a.dump() + "; expected {id, content, special}"};
      DS4_TRY_VOID(put(a["content"].get<std::string>(), a["id"], a.value("special", false) ? 3 : 4));
    }
  for (size_t i = 0; i < tokens.size(); ++i)
    if (types[i] == 5) tokens[i] = "[PAD" + std::to_string(i) + "]";
  std::vector<std::string> merges;
  for (const json& m : (*model)["merges"]) {
    if (m.is_string()) merges.push_back(m.get<std::string>());
    else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string())
      merges.push_back(m[0].get<std::string>() + " " + m[1].get<std::string>());
    else return Error{path + ": merge " + m.dump() + "; expected \"a b\" or [\"a\", \"b\"]"};
  }
  md->set("tokenizer.ggml.model", Value::make_string("gpt2"));
  md->set("tokenizer.ggml.pre", Value::make_string("deepseek-v3"));
  md->set("tokenizer.ggml.tokens", Value::make_array_string(std::move(tokens)));
  md->set("tokenizer.ggml.token_type", Value::make_array_i32(types));
  md->set("tokenizer.ggml.merges", Value::make_array_string(std::move(merges)));
  if (bos >= 0) md->set("tokenizer.ggml.bos_token_id", Value::make_u32(uint32_t(bos)));
  if (eos >= 0) md->set("tokenizer.ggml.eos_token_id", Value::make_u32(uint32_t(eos)));
  md->set("tokenizer.ggml.add_bos_token", Value::make_bool(bos >= 0));
  return ok();
}

}  // namespace

std::string OfficialConfig::declared() const {
  std::string s;
  if (!quant_method.empty()) s = quant_method + (quant_algo.empty() ? "" : " " + quant_algo) + " (config.json)";
  if (!hf_quant_algo.empty()) s += (s.empty() ? "" : ", ") + hf_quant_algo + " (hf_quant_config.json)";
  return s.empty() ? "none" : s;
}

namespace {
Result<OfficialConfig> read_official_config_impl(const std::string& folder);
}  // namespace

Result<OfficialConfig> read_official_config(const std::string& folder) {
  // nlohmann's typed accessors (value(), get<>) throw on a value of another JSON type; every such
  // case becomes one input error naming the file instead of an exception.
  try {
    return read_official_config_impl(folder);
  } catch (const json::exception& e) {
    return Error{(fs::path(folder) / "config.json").string() + " (or tokenizer.json / hf_quant_config.json): a key has "
                 "an unexpected JSON type: " + e.what()};
  }
}

namespace {

Result<OfficialConfig> read_official_config_impl(const std::string& folder) {
  const std::string path = (fs::path(folder) / "config.json").string();
  std::error_code ec;
  if (!fs::exists(path, ec))
    return Error{path + ": missing; a safetensors checkpoint needs its config.json (HF keys) beside the shards"};
  DS4_TRY(json c, read_json(path, "config"));
  if (!c.is_object()) return Error{path + ": expected a JSON object, found " + std::string(c.type_name())};
  OfficialConfig o;
  gguf::Metadata& md = o.metadata;
  auto need = [&](const char* k, json::value_t a, json::value_t b = json::value_t::discarded) -> Result<const json*> {
    if (!c.contains(k)) return Error{path + ": key '" + std::string(k) + "' missing"};
    const json& v = c[k];
    const bool num = a == json::value_t::number_float;
    if (v.type() == a || v.type() == b || (num && v.is_number()))
      return &v;
    return Error{path + ": key '" + std::string(k) + "' is " + v.type_name() + ", expected " +
                 (num ? "a number" : a == json::value_t::number_unsigned ? "a non-negative integer" : json(a).type_name())};
  };
  if (c.value("model_type", "") != "deepseek_v4")
    return Error{path + ": model_type '" + c.value("model_type", std::string("(missing)")) + "'; expected 'deepseek_v4'"};
  md.set("general.architecture", Value::make_string("deepseek4"));
  md.set("general.name", Value::make_string(fs::path(folder).filename().string()));
  for (int i = 0; i < kConfigKeyMapSize; ++i) {
    DS4_TRY(const json* v, need(kConfigKeyMap[i].hf, json::value_t::number_unsigned));
    const uint64_t x = v->get<uint64_t>();
    if (x > UINT32_MAX) return Error{path + ": key '" + std::string(kConfigKeyMap[i].hf) + "' = " + std::to_string(x) + "; expected < 2^32"};
    md.set(std::string("deepseek4.") + kConfigKeyMap[i].gguf, Value::make_u32(uint32_t(x)));
  }
  for (const auto& k : kFloatKeys) {
    DS4_TRY(const json* v, need(k.hf, json::value_t::number_float));
    md.set(std::string("deepseek4.") + k.gguf, Value::make_f32(v->get<float>()));
  }
  DS4_TRY(const json* ntp, need("norm_topk_prob", json::value_t::boolean));
  md.set("deepseek4.expert_weights_norm", Value::make_bool(ntp->get<bool>()));
  DS4_TRY(const json* sf, need("scoring_func", json::value_t::string));
  if (sf->get<std::string>() != "sqrtsoftplus")
    return Error{path + ": scoring_func '" + sf->get<std::string>() + "'; expected 'sqrtsoftplus' (DeepSeek-V4)"};
  md.set("deepseek4.expert_gating_func", Value::make_u32(4));  // llama.cpp SQRT_SOFTPLUS
  DS4_TRY(const json* rs, need("rope_scaling", json::value_t::object));
  if (rs->value("type", rs->value("rope_type", "")) != "yarn")
    return Error{path + ": rope_scaling.type " + rs->value("type", std::string("(missing)")) + "; expected 'yarn'"};
  md.set("deepseek4.rope.scaling.type", Value::make_string("yarn"));
  for (auto [hf, key] : {std::pair{"factor", "rope.scaling.factor"}, std::pair{"beta_fast", "rope.scaling.yarn_beta_fast"},
                         std::pair{"beta_slow", "rope.scaling.yarn_beta_slow"}}) {
    if (!rs->contains(hf) || !(*rs)[hf].is_number()) return Error{path + ": rope_scaling." + hf + " missing or not a number"};
    md.set(std::string("deepseek4.") + key, Value::make_f32((*rs)[hf].get<float>()));
  }
  if (!rs->contains("original_max_position_embeddings") || !(*rs)["original_max_position_embeddings"].is_number_unsigned())
    return Error{path + ": rope_scaling.original_max_position_embeddings missing or not a non-negative integer"};
  md.set("deepseek4.rope.scaling.original_context_length",
         Value::make_u32(uint32_t((*rs)["original_max_position_embeddings"].get<uint64_t>())));
  o.n_layer = static_cast<int>(c["num_hidden_layers"].get<uint64_t>());
  o.n_expert = static_cast<int>(c["n_routed_experts"].get<uint64_t>());
  DS4_TRY(const json* cr, need("compress_ratios", json::value_t::array));
  std::vector<uint32_t> ratios;
  for (const json& r : *cr) {
    if (!r.is_number_unsigned()) return Error{path + ": compress_ratios entry " + r.dump() + "; expected a non-negative integer"};
    ratios.push_back(uint32_t(r.get<uint64_t>()));
  }
  if (static_cast<int>(ratios.size()) < o.n_layer)
    return Error{path + ": compress_ratios has " + std::to_string(ratios.size()) + " entries; expected num_hidden_layers " +
                 std::to_string(o.n_layer) + " (+ draft blocks)"};
  o.n_mtp = static_cast<int>(ratios.size()) - o.n_layer;
  md.set("deepseek4.attention.compress_ratios", Value::make_array_u32(ratios));
  if (o.n_mtp > 0) md.set("deepseek4.nextn_predict_layers", Value::make_u32(uint32_t(o.n_mtp)));
  DS4_TRY(const json* sl, need("swiglu_limit", json::value_t::number_float));
  md.set("deepseek4.swiglu_clamp_exp", Value::make_array_f32(std::vector<float>(size_t(o.n_layer), sl->get<float>())));
  md.set("deepseek4.swiglu_clamp_shexp", Value::make_array_f32(std::vector<float>(size_t(o.n_layer), 0.0f)));
  if (c.contains("quantization_config") && c["quantization_config"].is_object()) {
    o.quant_method = c["quantization_config"].value("quant_method", "");
    o.quant_algo = c["quantization_config"].value("quant_algo", "");
  }
  const std::string hq = (fs::path(folder) / "hf_quant_config.json").string();
  if (fs::exists(hq, ec)) {
    DS4_TRY(json h, read_json(hq, "ModelOpt quantization"));
    if (!h.is_object() || !h.contains("quantization") || !h["quantization"].is_object() ||
        !h["quantization"].contains("quant_algo") || !h["quantization"]["quant_algo"].is_string())
      return Error{hq + ": expected {\"quantization\": {\"quant_algo\": ...}} (ModelOpt's side file)"};
    o.hf_quant_algo = h["quantization"]["quant_algo"].get<std::string>();
  }
  const std::string tok = (fs::path(folder) / "tokenizer.json").string();
  if (fs::exists(tok, ec)) {
    const int64_t bos = c.contains("bos_token_id") && c["bos_token_id"].is_number_unsigned() ? c["bos_token_id"].get<int64_t>() : -1;
    const int64_t eos = c.contains("eos_token_id") && c["eos_token_id"].is_number_unsigned() ? c["eos_token_id"].get<int64_t>() : -1;
    DS4_TRY_VOID(add_tokenizer(tok, int64_t(c["vocab_size"].get<uint64_t>()), bos, eos, &md));
    o.tokenizer_json = true;
  }
  return o;
}

}  // namespace

}  // namespace ds4

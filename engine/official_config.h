// engine/official_config.h — a DeepSeek-V4 checkpoint folder's `config.json` (HF keys) as the
// `deepseek4.*` GGUF metadata llama.cpp writes (key table: ../shared/reference/dsv4-architecture.md
// §1 and §6), plus `tokenizer.json` (HF tokenizers, byte-level BPE) as `tokenizer.ggml.*` keys.
#pragma once

#include <string>

#include "ds4/result.h"
#include "gguf/gguf_value.h"

namespace ds4 {

/// The facts of config.json the binder needs, and the metadata for model_config_from_gguf.
struct OfficialConfig {
  int n_layer = 0;   // num_hidden_layers
  int n_mtp = 0;     // draft blocks: compress_ratios entries beyond n_layer
  int n_expert = 0;  // n_routed_experts
  std::string quant_method;     // quantization_config.quant_method ("fp8", "modelopt", or "")
  std::string quant_algo;       // quantization_config.quant_algo ("NVFP4" for ModelOpt)
  std::string hf_quant_algo;    // hf_quant_config.json quantization.quant_algo (ModelOpt's side file), or ""
  /// What the config files declare, for messages: "fp8 (config.json)", "modelopt NVFP4
  /// (config.json), NVFP4 (hf_quant_config.json)". The binder decides per tensor regardless.
  std::string declared() const;
  bool tokenizer_json = false;  // tokenizer.json was found and converted
  gguf::Metadata metadata;      // deepseek4.* (+ tokenizer.ggml.*) keys
};

/// HF config.json key -> deepseek4 key mapping (both names, for `inspect` and the tests).
struct ConfigKeyMap {
  const char* hf;
  const char* gguf;
};
/// The scalar keys mapped one to one (arrays, rope_scaling and scoring_func are handled apart).
extern const ConfigKeyMap kConfigKeyMap[];
extern const int kConfigKeyMapSize;

/// Reads `folder`/config.json (required) and `folder`/tokenizer.json (optional). Errors name the
/// file and key: missing file, malformed JSON, a required key missing or of the wrong JSON type,
/// model_type other than deepseek_v4, scoring_func other than sqrtsoftplus, rope_scaling not
/// yarn, compress_ratios shorter than num_hidden_layers; tokenizer.json not a BPE model with
/// a vocab object and merges.
/// swiglu_clamp_shexp is written as 0 per layer (DeepSeek's reference does not clamp the shared
/// expert; dsv4-architecture.md §7 pitfall 8).
Result<OfficialConfig> read_official_config(const std::string& folder);

}  // namespace ds4

// engine/model_config.h — the DeepSeek-V4 model configuration, read from GGUF metadata
// (`deepseek4.*` keys as llama.cpp writes them; ../shared/reference/dsv4-architecture.md §6 and
// ../shared/fixtures/dsv4-tiny/README.md) and cross-checked against the file's tensors.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ds4/result.h"
#include "engine/rope.h"
#include "gguf/gguf_file.h"

namespace ds4 {

/// Hyper-parameters of a DeepSeek-V4 model. Every field comes from a metadata key; nothing is
/// defaulted except where noted (swiglu_clamp_shexp).
struct ModelConfig {
  int n_layer = 0;              // deepseek4.block_count (main layers, without MTP)
  int n_mtp = 0;                // per-layer array entries beyond block_count (MTP blocks)
  int64_t n_ctx = 0;            // context_length
  int64_t dim = 0;              // embedding_length
  int64_t vocab = 0;            // vocab_size
  int n_head = 0;               // attention.head_count
  int64_t head_dim = 0;         // attention.key_length (= value_length; K = V)
  int64_t rope_dim = 0;         // rope.dimension_count (the LAST rope_dim dims of a head)
  double rope_theta = 0;        // rope.freq_base (ratio-0 layers, no YaRN)
  double compress_rope_theta = 0;  // attention.compress_rope_freq_base (compressed layers + YaRN)
  YarnParams yarn;              // rope.scaling.{factor, original_context_length, yarn_beta_*}
  float norm_eps = 0;           // attention.layer_norm_rms_epsilon
  int64_t q_lora_rank = 0;      // attention.q_lora_rank
  int64_t o_lora_rank = 0;      // attention.output_lora_rank
  int o_groups = 0;             // attention.output_group_count
  int64_t window = 0;           // attention.sliding_window
  int idx_heads = 0;            // attention.indexer.head_count
  int64_t idx_head_dim = 0;     // attention.indexer.key_length
  int idx_topk = 0;             // attention.indexer.top_k
  int n_expert = 0;             // expert_count
  int n_expert_used = 0;        // expert_used_count
  int n_expert_shared = 0;      // expert_shared_count
  int64_t expert_ff = 0;        // expert_feed_forward_length
  float route_scale = 0;        // expert_weights_scale
  bool route_norm = false;      // expert_weights_norm
  int n_hash_layers = 0;        // hash_layer_count
  int hc = 0;                   // hyper_connection.count
  int hc_iters = 0;             // hyper_connection.sinkhorn_iterations
  float hc_eps = 0;             // hyper_connection.epsilon
  std::vector<int> compress_ratios;          // [n_layer + n_mtp]: 0, 4 or 128
  std::vector<float> swiglu_limit;           // swiglu_clamp_exp [n_layer + n_mtp] (routed experts)
  /// swiglu_clamp_shexp [n_layer + n_mtp] (shared expert; 0 = no clamp). When the key is absent
  /// the shared expert is NOT clamped, as in DeepSeek's reference (`shexp_clamp_from_file` false);
  /// upstream llama.cpp would default to the routed limit instead.
  std::vector<float> swiglu_limit_shexp;
  bool shexp_clamp_from_file = false;

  /// Ratio of layer `l` (0 = sliding window only).
  int ratio(int l) const { return compress_ratios[l]; }
  /// RoPE table parameters of layer `l`: theta 10000 without YaRN for ratio 0, else the
  /// compressed theta with YaRN (REF Attention.__init__).
  RopeTable rope_table(int l) const;
};

/// Reads the config from `meta` and checks it against `tensors` (the main layers' names, types
/// and shapes). Every problem found — missing or mistyped keys, per-layer arrays whose length is
/// not block_count (+ MTP entries), expert tensors whose ne[2] differs from expert_count, missing
/// or unexpected tensors, wrong shapes or types — is collected into ONE Error, one line each,
/// prefixed by `source` (the file name).
Result<ModelConfig> model_config_from_gguf(const gguf::Metadata& meta,
                                           const std::vector<gguf::TensorInfo>& tensors,
                                           const std::string& source);

/// The tensors a model with config `c` must contain: name -> ggml shape (ne, unused dims 1) and
/// the required type (-1 = any weight type the CPU kernels can decode).
struct ExpectedTensor {
  std::string name;
  std::vector<int64_t> ne;
  int required_type;  // ggml type id, or -1
};
std::vector<ExpectedTensor> expected_tensors(const ModelConfig& c);

}  // namespace ds4

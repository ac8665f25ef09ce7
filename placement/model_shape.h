// placement/model_shape.h — the model dimensions the planner needs (no weights, no file).
//
// Source of the DeepSeek-V4-Flash values: ../shared/reference/dsv4-architecture.md §1 (HF
// config.json of deepseek-ai/DeepSeek-V4-Flash and DeepSeek's inference/config.json), tensor list
// §5/§6. The planner uses these to size every tensor class of a quant mix (quant_mix.h) and the
// KV/compressor state for a context length.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ds4/result.h"

namespace ds4::placement {

/// Dimensions of a DeepSeek-V4-style MoE model (torch [out, in] order where a matrix is meant).
struct ModelShape {
  std::string name;                 ///< e.g. "DeepSeek-V4-Flash"
  int n_layers = 0;                 ///< main blocks (MTP not counted): 43 for Flash
  int64_t dim = 0;                  ///< hidden size: 4096
  int64_t vocab = 0;                ///< 129280
  int n_heads = 0;                  ///< attention heads: 64 (single shared latent KV)
  int64_t head_dim = 0;             ///< 512 (448 no-RoPE + 64 RoPE)
  int64_t q_lora_rank = 0;          ///< 1024
  int o_groups = 0;                 ///< 8 grouped low-rank output groups
  int64_t o_lora_rank = 0;          ///< 1024
  int window = 0;                   ///< sliding window: 128 raw tokens per layer
  std::vector<int> compress_ratios; ///< per main layer: 0 (window only), 4 (CSA) or 128 (HCA)
  int index_n_heads = 0;            ///< lightning indexer heads: 64
  int64_t index_head_dim = 0;       ///< 128
  int index_topk = 512;             ///< compressed entries the indexer selects on CSA layers: 512
  int n_experts = 0;                ///< routed experts per layer: 256
  int top_k = 0;                    ///< experts per token: 6
  int n_shared_experts = 0;         ///< 1
  int64_t moe_inter = 0;            ///< expert FFN width: 2048 (routed and shared)
  int n_hash_layers = 0;            ///< layers routed by token id: 3 (layers 0..2)
  int hc_mult = 0;                  ///< mHC stream count: 4
  int64_t max_ctx = 0;              ///< longest context the model supports (tokens; 0 = unknown):
                                    ///< 1048576 for Flash (max_position_embeddings)

  /// Weights of one routed expert (w1 + w3 + w2): 3 * dim * moe_inter.
  int64_t expert_params() const { return 3 * dim * moe_inter; }
};

/// The real DeepSeek-V4-Flash (284B) shape, built in so the 81 GB model can be planned without
/// its file. compress_ratios = [0, 0, 4, 128, 4, 128, ..., 4] for the 43 main layers.
ModelShape dsv4_flash_shape();

/// Checks internal consistency (positive dims, compress_ratios length == n_layers, values in
/// {0, 4, 128}, top_k <= n_experts, ...). Error names `source` and the first bad field.
Result<void> validate_model_shape(const ModelShape& s, const std::string& source);

/// Reads a model config JSON (e.g. configs/models/dsv4-flash.json). Accepts the HF config.json
/// key names (num_hidden_layers, hidden_size, n_routed_experts, ...) or the DeepSeek reference
/// inference/config.json names (n_layers, dim, ...); keys absent from the file are an error naming
/// the key, except those with a documented default (n_shared_experts 1, hc_mult 4). A nested
/// object under "model" or "config" is also accepted. Errors: unreadable file, malformed JSON,
/// missing/mistyped key, inconsistent values.
Result<ModelShape> load_model_shape(const std::string& path);

}  // namespace ds4::placement

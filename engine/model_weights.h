// engine/model_weights.h — DeepSeek-V4 weights bound to the tensors of a validated GGUF
// (names: ../shared/reference/dsv4-architecture.md §6; shapes in ggml order, see
// engine/model_config.cpp expected_tensors). Matrices are dev::WeightMatrix views into the mmap;
// small float tensors (norms, mHC, ape, sinks, bias) are FP32 pointers (decoded once when stored
// as F16/BF16). Routed experts are reached through staging::ExpertStore.
#pragma once

#include <memory>
#include <vector>

#include "ds4/result.h"
#include "engine/model_config.h"
#include "engine/rope.h"
#include "gguf/gguf_file.h"
#include "kernels/device.h"
#include "staging/expert_store.h"

namespace ds4 {

/// Weights of one block (layer).
struct LayerWeights {
  // mHC of the two sublayers: fn [mix rows, hc*dim] (ggml {hc*dim, mix}), base [mix], scale [3].
  const float* hc_attn_fn = nullptr;
  const float* hc_attn_base = nullptr;
  const float* hc_attn_scale = nullptr;
  const float* hc_ffn_fn = nullptr;
  const float* hc_ffn_base = nullptr;
  const float* hc_ffn_scale = nullptr;
  const float* attn_norm = nullptr;   // [dim]
  const float* ffn_norm = nullptr;    // [dim]
  const float* attn_sinks = nullptr;  // [n_head]
  dev::WeightMatrix q_a;              // {dim, q_lora}
  const float* q_a_norm = nullptr;    // [q_lora]
  dev::WeightMatrix q_b;              // {q_lora, n_head*head_dim}
  dev::WeightMatrix kv;               // {dim, head_dim}
  const float* kv_norm = nullptr;     // [head_dim]
  dev::WeightMatrix out_a;            // {n_head*head_dim/o_groups, o_groups*o_lora}
  dev::WeightMatrix out_b;            // {o_groups*o_lora, dim}
  // Compressor (ratio > 0): c = 2 for ratio 4 else 1.
  dev::WeightMatrix cmp_kv, cmp_gate;  // {dim, c*head_dim}
  const float* cmp_ape = nullptr;      // [ratio, c*head_dim]
  const float* cmp_norm = nullptr;     // [head_dim]
  // Lightning indexer (ratio 4).
  dev::WeightMatrix idx_q_b;               // {q_lora, idx_heads*idx_head_dim}
  dev::WeightMatrix idx_proj;              // {dim, idx_heads}
  dev::WeightMatrix idx_cmp_kv, idx_cmp_gate;  // {dim, 2*idx_head_dim}
  const float* idx_cmp_ape = nullptr;      // [4, 2*idx_head_dim]
  const float* idx_cmp_norm = nullptr;     // [idx_head_dim]
  // MoE.
  dev::WeightMatrix gate_inp;           // {dim, n_expert}
  const int32_t* tid2eid = nullptr;     // [vocab, n_used] (hash layers)
  const float* probs_bias = nullptr;    // [n_expert] (other layers)
  dev::WeightMatrix sh_gate, sh_up;     // {dim, ff}
  dev::WeightMatrix sh_down;            // {ff, dim}
  RopeTable rope;                       // this layer's RoPE table (theta / YaRN by ratio)
};

/// All weights of a model.
struct ModelWeights {
  dev::WeightMatrix token_embd;   // {dim, vocab}: row = token
  dev::WeightMatrix output;       // {dim, vocab}
  const float* output_norm = nullptr;  // [dim]
  const float* hc_head_fn = nullptr;   // [hc, hc*dim]
  const float* hc_head_base = nullptr; // [hc]
  const float* hc_head_scale = nullptr;  // [1]
  std::vector<LayerWeights> layers;
  std::unique_ptr<staging::ExpertStore> experts;
  uint64_t bytes = 0;  // bytes of all bound tensors
  /// FP32 copies of float tensors stored in another type (moving the vector keeps the buffers).
  std::vector<std::vector<float>> owned;
};

/// Binds the weights of `file` (already validated against `c` by model_config_from_gguf).
Result<ModelWeights> bind_weights(const gguf::GgufModel& file, const ModelConfig& c);

}  // namespace ds4

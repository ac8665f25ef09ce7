// placement/quant_mix.h — quant mixes and the byte size of every tensor of a DSV4-style model.
//
// A quant mix maps each tensor class to a ggml type. The built-in mixes follow the public files
// described in ../shared/reference/dsv4-architecture.md §6:
//   ds4-q2  antirez/deepseek-v4-gguf "IQ2XXS-w2Q2K-AProjQ8-SExpQ8-OutQ8" (80.8 GiB): gate/up exps
//           IQ2_XXS, down exps Q2_K, attention projections + shared experts + output Q8_0,
//           embedding/router/indexer/compressor/HC F16, norms/sinks/bias F32, tid2eid I32.
//   iq1_m   HF lvyufeng/DeepSeek-V4-Flash-IQ1_M: gate/up IQ1_M, down Q2_K on layers 0-5 and IQ1_M
//           on 6-42, the rest as ds4-q2 (its tensor counts per type are reproduced by our list).
//   mxfp4   all routed experts MXFP4 (a lossless repack of the official FP4 experts), rest as ds4-q2.
//   q4_k    all routed experts Q4_K (antirez's Q4 build, 153.3 GiB), rest as ds4-q2.
// Byte sizes come from the block geometry in kernels/quant/ggml_type.h.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "ds4/result.h"
#include "placement/model_shape.h"

namespace ds4::placement {

/// What a tensor is, for choosing its type and its placement (TP split or replicated).
enum class TensorClass {
  ExpertGateUp,   ///< ffn_{gate,up}_exps: routed experts w1/w3
  ExpertDown,     ///< ffn_down_exps: routed experts w2
  AttnProj,       ///< attn_q_a, attn_q_b, attn_kv, attn_output_a, attn_output_b
  SharedExpert,   ///< ffn_{gate,up,down}_shexp
  Output,         ///< output (LM head)
  Embedding,      ///< token_embd
  Router,         ///< ffn_gate_inp
  Indexer,        ///< indexer.attn_q_b, indexer.proj
  Compressor,     ///< attn_compressor_{kv,gate,ape}, indexer_compressor_{kv,gate,ape}
  HyperConn,      ///< hc_{attn,ffn}_fn, output_hc_fn
  SmallF32,       ///< norms, sinks, router bias, hc base/scale
  Tid2Eid,        ///< ffn_gate_tid2eid (hash-routed layers)
};

/// A quant mix: the ggml type id of each tensor class; routed-expert down projections may use a
/// different type on the first `down_override_layers` layers (iq1_m: Q2_K on layers 0-5).
struct QuantMix {
  std::string name;
  std::string description;
  std::map<TensorClass, uint32_t> type;  ///< ggml type id per class (all classes present)
  int down_override_layers = 0;
  uint32_t down_override_type = 0;
  /// Per-layer expert types read from a model file; when non-empty they take precedence.
  std::vector<uint32_t> gate_up_by_layer, down_by_layer;

  /// ggml type id for `cls` on layer `layer` (-1 for global tensors).
  uint32_t type_for(TensorClass cls, int layer) const;
};

/// Names of the built-in mixes, in a fixed order: ds4-q2, iq1_m, mxfp4, q4_k.
std::vector<std::string> quant_mix_names();

/// The built-in mix `name`; error "unknown quant mix 'x' (known: ds4-q2, iq1_m, mxfp4, q4_k)".
Result<QuantMix> quant_mix_by_name(const std::string& name);

/// One tensor of the model as a GGUF file would hold it (MTP block excluded).
struct TensorSpec {
  std::string name;        ///< GGUF name, e.g. "blk.7.ffn_down_exps.weight"
  TensorClass cls;
  int layer;               ///< -1 for global tensors
  std::vector<int64_t> ne; ///< ggml order (ne[0] = innermost/input dim)
  uint32_t type;           ///< ggml type id
  int64_t bytes;
  bool tp_split;           ///< divided across TP ranks (else replicated on every rank)
  bool read_per_token;     ///< all its bytes are read every decode token (not embedding/tid2eid)
};

/// Byte sizes of a model under a quant mix.
struct ModelSizes {
  std::vector<TensorSpec> tensors;        ///< every tensor, in GGUF-like order
  std::vector<int64_t> expert_bytes;      ///< [layer] bytes of ONE routed expert (w1+w3+w2)
  std::vector<int64_t> layer_dense_split; ///< [layer] non-routed bytes split across TP ranks
  std::vector<int64_t> layer_dense_repl;  ///< [layer] non-routed bytes replicated per rank
  std::vector<int64_t> layer_dense_params;///< [layer] non-routed matrix weights (for FLOPs)
  int64_t global_split = 0;               ///< embedding + output head (vocab-parallel)
  int64_t global_repl = 0;                ///< output norm + output HC
  int64_t head_read_bytes = 0;            ///< output head bytes read per token (whole head)
  int64_t head_params = 0;                ///< output head weights
  int64_t total_bytes = 0;                ///< all tensors (≈ GGUF file size minus metadata)
  int64_t routed_bytes = 0;               ///< all routed experts
  std::map<uint32_t, int> tensor_count_by_type;
  std::map<uint32_t, int64_t> bytes_by_type;

  /// Non-routed bytes one TP rank holds in VRAM with `ranks` ranks (ceil of split parts).
  int64_t dense_bytes_per_rank(int ranks) const;
  /// Non-routed bytes one rank reads per decode token for layer `l` (weights read once).
  int64_t layer_read_bytes_per_rank(int l, int ranks) const;
};

/// Adds one tensor to `out` (totals, per-type counts, per-layer dense/expert bytes, head).
/// Routed expert tensors hold `n_experts` experts along their last dimension.
void account_tensor(ModelSizes& out, TensorSpec t, int n_experts);

/// Lists every tensor of `shape` with types from `mix`. Shapes: dsv4-architecture.md §5 (torch
/// order) reversed into ggml order. Error if a row length is not a multiple of its block size.
/// The shared expert and attention output/q_b/indexer projections are TP-split; q_a, kv,
/// compressor, router, HC and norms are replicated (REF's TP layout, §3).
Result<ModelSizes> compute_model_sizes(const ModelShape& shape, const QuantMix& mix);

/// Bytes of the sequence state one rank holds for a context of `ctx` tokens: raw window ring,
/// compressed KV (CSA main + indexer keys, HCA) at `kv_elem_bytes` per element, and compressor
/// running state in FP32 (dsv4-architecture.md §2.3, §4). The single shared latent KV (MQA) is
/// needed by every rank, so it is replicated.
int64_t sequence_state_bytes(const ModelShape& shape, int64_t ctx, int kv_elem_bytes);

}  // namespace ds4::placement

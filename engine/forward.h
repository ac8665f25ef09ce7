// engine/forward.h — the DeepSeek-V4 forward pass over a chunk of tokens (prefill, a chunk of a
// prefill, or one decode token), on any dev::Device. Semantics: REF inference/model.py
// Transformer.forward, generalized to start positions > 0 with several tokens (chunked prefill).
//
// Data layout: token-major FP32 arrays; the residual state X is [n, hc, dim].
// Per layer: X = hc_post(attn(attn_norm(hc_pre_attn(X)))); X = hc_post(moe(ffn_norm(hc_pre_ffn(X)))).
//
// Which products take Q8_1 activations in Activations::Q8 (ActFormat::Q8_1): every weight matmul
// whose weight type has a Q8_1 dot (dev::uses_q8_1; quantized types such as MXFP4, Q8_0, Q2_K,
// IQ2_XXS) — routed experts, shared expert, attention projections, compressor, indexer, head —
// EXCEPT the router gate (`ffn_gate_inp`), which REF computes in FP32 and whose top-k is
// discontinuous. F32/F16/BF16 weights always take FP32 activations. Attention scores, the indexer
// scores, mHC and norms are FP32 in both modes.
//
// Tensor parallelism: a Forward is one rank of a group (engine/tensor_parallel.h holds the sharding
// and the canonical definition that makes every rank count give the same bits). With R = 1 the
// same canonical shard sums are computed on one device and no collective runs. With R > 1 every
// rank's thread calls eval() with the same tokens on its own SequenceState replica; all ranks
// return the same full logits.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/model_config.h"
#include "engine/model_weights.h"
#include "engine/sequence_state.h"
#include "engine/tensor_parallel.h"
#include "kernels/comm.h"
#include "kernels/device.h"

namespace ds4 {

/// Optional per-token records of routing and indexer decisions (for golden tests), indexed by
/// absolute position.
struct ForwardTrace {
  /// router[layer][pos] = selected expert ids in selection order (hash: tid2eid order).
  std::vector<std::vector<std::vector<int32_t>>> router;
  /// indexer[layer][pos] = selected compressed block ids (descending score; ratio-4 layers only).
  std::vector<std::vector<std::vector<int32_t>>> indexer;
};

/// Runs chunks of tokens through the model, updating a SequenceState.
class Forward {
 public:
  /// Single device (R = 1, the canonical partition of `c`).
  Forward(const ModelConfig& c, const ModelWeights& w, dev::Device& device, dev::ActFormat act);
  /// Rank shard.rank of a group of shard.ranks; `comm` is that rank's endpoint (null iff R = 1).
  Forward(const ModelConfig& c, const ModelWeights& w, dev::Device& device, dev::ActFormat act,
          TpShard shard, comm::Comm* comm);

  /// Feeds `tokens` at positions st.pos .. st.pos+n-1. Writes logits [n, vocab] into `logits`
  /// for all rows when `all_rows`, else only the last row ([vocab]). `trace` may be null.
  Result<void> eval(std::span<const int32_t> tokens, SequenceState& st, bool all_rows,
                    std::vector<float>* logits, ForwardTrace* trace) const;
  /// Bytes of routed-expert weight matrices this Forward multiplied so far (each (expert, token
  /// block) launch counts gate + up + down once).
  uint64_t expert_weight_bytes() const { return expert_weight_bytes_; }

 private:
  /// Attention sublayer of layer l: x [n, dim] normalized input -> out [n, dim].
  Result<void> attention(int l, const float* x, int64_t n, SequenceState& st, float* out,
                 ForwardTrace* trace) const;
  /// MoE sublayer of layer l: x [n, dim] -> out [n, dim].
  Result<void> moe(int l, const float* x, std::span<const int32_t> tokens, int64_t pos0,
                   float* out, ForwardTrace* trace) const;
  /// Indexer of layer l: top-k compressed block ids per token (-1 padded to idx_topk).
  Result<void> indexer(int l, const float* x, const float* qr, int64_t n, int64_t pos0, LayerState& ls,
               std::vector<std::vector<int32_t>>* sel) const;
  /// Runs a compressor over the chunk and appends emitted blocks (normed, rotated) to `cache`.
  /// `indexer_keys`: the indexer's compressor (QAT: Hadamard + FP4 QDQ instead of FP8 QDQ).
  void compress(int l, const float* x, int64_t n, int64_t pos0, const dev::WeightMatrix& wkv,
                const dev::WeightMatrix& wgate, const float* ape, const float* norm,
                CompressorState& cs, std::vector<float>& cache, bool indexer_keys = false) const;
  /// QAT simulation (ActFormat::FP8_QDQ) on: REF's activation QDQ of KV and indexer q/k.
  bool qat() const { return act_ == dev::ActFormat::FP8_QDQ; }

  const ModelConfig& c_;
  const ModelWeights& w_;
  mutable uint64_t expert_weight_bytes_ = 0;  // routed-expert matrix bytes multiplied (one rank thread)
  dev::Device& dev_;
  dev::ActFormat act_;
  TpShard shard_;
  comm::Comm* comm_ = nullptr;  // null when R = 1
};

}  // namespace ds4

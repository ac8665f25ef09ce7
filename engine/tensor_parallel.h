// engine/tensor_parallel.h — how DeepSeek-V4 is split over R tensor-parallel ranks, and THE
// CANONICAL DEFINITION that makes R = 1, 2, 4 (8 where the shapes allow) produce the same bits.
//
// Sharding (as REF inference/model.py does it: ColumnParallelLinear / RowParallelLinear /
// ParallelEmbedding / ParallelHead; ../shared/reference/dsv4-architecture.md §3 "TP in REF"):
// - query heads and output groups split across ranks: wq_b by heads (column-parallel, rank r holds
//   the heads of its groups), wo_a by groups, wo_b row-parallel (rank r holds the input columns of
//   its groups) followed by a sum over ranks; attention sinks follow the heads;
// - replicated on every rank: wq_a, q norm, the single latent KV projection wkv and its norm, both
//   compressors, mHC (hc_*), attn/ffn norms, the router gate and the shared expert;
// - indexer heads split (wq_b of the indexer and weights_proj by heads), the per-block scores
//   summed across ranks before top-k; the indexer's compressor (its keys) replicated;
// - vocabulary-parallel embedding (rank r holds token rows [vocab*r/R, vocab*(r+1)/R); a token's
//   row comes from its owner, exact) and head (rank r computes its vocab slice; gather of logits);
// - routed experts owned by ranks as a placement map says (contiguous ranges by default).
//
// CANONICAL DEFINITION (the math at every R, R = 1 included). Let S = o_groups (8 for
// DeepSeek-V4-Flash, 4 for dsv4-tiny): the largest rank count the grouped output allows. The three
// reductions whose operands a split would separate are defined over a FIXED partition into S
// canonical shards, with shard s = output group s (and query heads [s*H/S, (s+1)*H/S), indexer
// heads [s*Hi/S, (s+1)*Hi/S)):
// 1. wo_b: out = ((P_0 + P_1) + P_2) + ... + P_{S-1}, where P_s = wo_b[:, cols of group s] z_s is
//    an ordinary matmul over the o_lora_rank columns of group s (the device's fixed dot order).
// 2. indexer score of block j: ((Q_0 + Q_1) + ...) + Q_{S-1}, where Q_s = sum over the heads h of
//    shard s in ascending h, from 0, of w[h] * relu(q_h . k_j); top-k on that sum.
// 3. routed experts: each routed expert's output y_e is the single-device value with every
//    element computed by one rank: whole by its owner, or (split staging: a plan's Split layer's
//    staged experts, engine/tensor_parallel.md) rank r computes its rows [ff*r/R, ff*(r+1)/R) of
//    gate and up, i.e. those columns of h = swiglu(gate x, up x) * weight, h is all-gathered
//    (exact), and rank r computes columns [dim*r/R, dim*(r+1)/R) of y_e from the full h with its
//    rows of down. A token's MoE output is ((0 + y_{e1}) + y_{e2}) + ... over its selected experts
//    in ascending expert id (the single-device order), then + the shared expert. Per-(token, slot)
//    outputs are all-reduced (exactly one rank contributes a non-zero value per element, so the sum
//    is exact in any order); the ordered combine then runs on every rank. Any placement map and
//    any split give the same bits.
// Everything else is either replicated (identical bits on every rank) or column-parallel (each
// output element computed whole by one rank) and exchanged exactly (gather / one-owner sum).
// Rank r of R holds canonical shards [r*S/R, (r+1)*S/R); the S shard partials of (1) and (2) are
// all-gathered into shard order and summed by comm::ordered_sum_f32 on every rank, so R = 1, 2, 4,
// ..., S give bit-identical logits. R must divide S, the vocabulary and be <= n_expert.
// When the shapes do not allow S = o_groups (heads or indexer heads not divisible by it, or
// o_lora_rank not a multiple of wo_b's block length), S = 1 and only R = 1 is accepted.
//
// Threads: every rank's thread reads the shared ModelWeights and calls the shared ExpertStore's
// get(); the in-memory store is read-only and safe. A caching store (staging host/nvme tiers) is
// not yet safe to share between rank threads.
#pragma once

#include <cstdint>
#include <vector>

#include "ds4/result.h"
#include "engine/model_config.h"
#include "engine/model_weights.h"
#include "kernels/device.h"

namespace ds4 {

/// Owner rank of every routed expert: owner[layer][expert] in [0, R).
using ExpertPlacement = std::vector<std::vector<int32_t>>;

/// The default placement: contiguous ranges, expert e of every layer on rank e*R/n_expert.
ExpertPlacement contiguous_expert_placement(const ModelConfig& c, int ranks);

/// The canonical shard count S of `c` with weights `w` (see the file comment).
int tp_canonical_shards(const ModelConfig& c, const ModelWeights& w);

/// One rank's part of the model.
struct TpShard {
  int rank = 0, ranks = 1;
  int shards = 1;                 // canonical S
  int shard0 = 0, shard1 = 1;     // this rank's canonical shards = output groups [shard0, shard1)
  int64_t head0 = 0, head1 = 0;   // query heads [head0, head1)
  int64_t idx_head0 = 0, idx_head1 = 0;  // indexer heads
  int64_t vocab0 = 0, vocab1 = 0; // embedding / head rows
  ExpertPlacement placement;      // owner of each routed expert
  bool owns_expert(int layer, int expert) const { return placement[layer][expert] == rank; }
};

/// Rank `rank` of `ranks`. Errors (naming the shape and the rank count): ranks not in {1, 2, 4, 8}
/// or not dividing S / vocab, or more ranks than experts; a placement with a wrong shape or an
/// owner outside [0, ranks). `placement` empty = contiguous_expert_placement.
Result<TpShard> make_tp_shard(const ModelConfig& c, const ModelWeights& w, int rank, int ranks,
                              const ExpertPlacement& placement = {});

/// Rows [r0, r1) of `w` (a view, no copy).
dev::WeightMatrix row_slice(const dev::WeightMatrix& w, int64_t r0, int64_t r1);
/// Input columns [c0, c1) of every row of `w` (a strided view; c0 and c1 multiples of the type's
/// block length, checked).
dev::WeightMatrix col_slice(const dev::WeightMatrix& w, int64_t c0, int64_t c1);

/// Bytes of the model file one rank reads/binds (mmap slices), split by kind.
struct RankWeightBytes {
  uint64_t replicated = 0;  // tensors every rank holds whole
  uint64_t sharded = 0;     // this rank's slices of q_b, wo_a, wo_b, indexer q_b/proj, embd, head
  uint64_t experts = 0;     // routed experts this rank owns
  uint64_t total() const { return replicated + sharded + experts; }
};

/// Per-rank weight bytes of shard `s` (routed expert sizes from w.experts).
Result<RankWeightBytes> rank_weight_bytes(const ModelConfig& c, const ModelWeights& w, const TpShard& s);

}  // namespace ds4

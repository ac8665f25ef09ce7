// engine/forward.h — the DeepSeek-V4 forward pass over a batch of sequence chunks (prefill, a
// chunk of a prefill, or one decode token each), as a sequence of kernels/device.h ops on one
// dev::Device. Semantics: REF inference/model.py Transformer.forward, generalized to start
// positions > 0 with several tokens (chunked prefill) and to several sequences per call.
//
// Data layout: token-major F32 device tensors over the batch's tokens (the chunks one after
// another); the residual state X is [n, hc*dim].
// Per layer: X = hc_post(attn(attn_norm(hc_pre_attn(X)))); X = hc_post(moe(ffn_norm(hc_pre_ffn(X)))).
// Weight products run over the whole batch (each weight read once per step); the stateful parts
// (compressors, indexer, sparse attention, window ring) run per sequence on its rows. Every op's
// value for a row depends only on that row and its own sequence's state, so a sequence's logits
// are bit-identical alone or batched, in any order (DESIGN.md "Numerics contract").
//
// Host sync points per step: the routed expert ids of each layer (the expert store needs them)
// and the logits (plus the indexer selections when a trace records them).
//
// Which products take Q8_1 activations in Activations::Q8 (ActFormat::Q8_1): every weight matmul
// whose weight type has a Q8_1 dot (dev::uses_q8_1; quantized types such as MXFP4, Q8_0, Q2_K,
// IQ2_XXS) — routed experts, shared expert, attention projections, compressor, indexer, head —
// EXCEPT the router gate (`ffn_gate_inp`), which REF computes in FP32 and whose top-k is
// discontinuous. F32/F16/BF16 weights always take FP32 activations. Attention scores, the indexer
// scores, mHC and norms are FP32 in both modes.
// Activations::Fp8 (ActFormat::FP8_QDQ, DeepSeek's QAT simulation): the inputs of FP8/FP4 weights
// are FP8 QDQ'd by the matmul (wo_a excepted: REF's BF16 einsum), and attention_layer.cpp adds
// REF's act_qdq steps on the KV, the compressed blocks and the indexer q.
//
// Tensor parallelism: a Forward is one rank of a group (engine/tensor_parallel.h holds the sharding
// and the canonical definition that makes every rank count give the same bits). With R = 1 the
// same canonical shard sums are computed on one device and no collective runs. With R > 1 every
// rank's thread calls eval() with the same batch on its own SequenceState replicas; all ranks
// return the same full logits.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <span>
#include <memory>
#include <vector>

#include "engine/model_config.h"
#include "engine/model_weights.h"
#include "engine/sequence_state.h"
#include "engine/session.h"
#include "engine/tensor_parallel.h"
#include "engine/workspace.h"
#include "kernels/comm.h"
#include "kernels/device.h"

namespace ds4 {

/// Device tensors of one layer's weights (bound once per rank device; see LayerWeights). The
/// tensor-parallel matrices hold only this rank's part (engine/tensor_parallel.h): q_b the rows of
/// its query heads [Hr*head_dim], out_a the rows of its output groups [own*gps*o_lora], idx_q_b /
/// idx_proj the rows of its indexer heads; out_b_shards[s] is wo_b's input columns of canonical
/// shard s (packed on a device with its own memory), empty for the shards another rank computes.
struct LayerTensors {
  dev::Tensor hc_attn_fn, hc_attn_base, hc_attn_scale, hc_ffn_fn, hc_ffn_base, hc_ffn_scale;
  dev::Tensor attn_norm, ffn_norm, attn_sinks;
  dev::Tensor q_a, q_a_norm, q_b, kv, kv_norm, out_a;
  std::vector<dev::Tensor> out_b_shards;  // [S]
  dev::Tensor cmp_kv, cmp_gate, cmp_ape, cmp_norm;
  dev::Tensor idx_q_b, idx_proj, idx_cmp_kv, idx_cmp_gate, idx_cmp_ape, idx_cmp_norm;
  dev::Tensor gate_inp, tid2eid, probs_bias, sh_gate, sh_up, sh_down;
  dev::Tensor rope_freqs;  // [rope_dim/2]
};

/// Device tensors of a model's non-expert weights (routed experts are bound per step from the
/// staging::ExpertStore). `output` holds this rank's vocabulary rows [vocab1 - vocab0, dim];
/// token_embd is whole (embed_rows indexes it by token id).
struct DeviceWeights {
  dev::Tensor token_embd, output, output_norm, hc_head_fn, hc_head_base, hc_head_scale;
  std::vector<LayerTensors> layers;
};

/// Binds the part of `w` that rank `shard` reads on device `d` (a device with its own memory
/// copies only that part: a strided column slice is copied packed).
DeviceWeights bind_device_weights(const ModelConfig& c, const ModelWeights& w, dev::Device& d, const TpShard& shard);
/// bind_device_weights for one rank (R = 1: everything).
DeviceWeights bind_device_weights(const ModelConfig& c, const ModelWeights& w, dev::Device& d);

/// One sequence's part of a batch: `tokens` at positions st->pos.. of its own state.
struct SeqChunk {
  SequenceState* st = nullptr;
  std::span<const int32_t> tokens;
  bool all_rows = false;               // logits for every row (else only the last)
  std::vector<float>* logits = nullptr;  // [rows, vocab]; null: no head for this sequence
  ForwardTrace* trace = nullptr;       // may be null
};

/// Runs batches of sequence chunks through the model, updating their states.
class Forward {
 public:
  /// Single device (R = 1, the canonical partition of `c`).
  Forward(const ModelConfig& c, const ModelWeights& w, const DeviceWeights& dw, dev::Device& device,
          dev::ActFormat act);
  /// Rank shard.rank of a group of shard.ranks; `comm` is that rank's endpoint (null iff R = 1).
  Forward(const ModelConfig& c, const ModelWeights& w, const DeviceWeights& dw, dev::Device& device,
          dev::ActFormat act, TpShard shard, comm::Comm* comm);

  /// Feeds every chunk (distinct states, non-empty tokens). Errors: a token id outside the
  /// vocabulary, a chunk past its state's capacity, a bad hash-routing entry, an expert-store error.
  Result<void> eval(std::span<const SeqChunk> batch);
  /// One chunk: `tokens` at positions st.pos .. st.pos+n-1; logits [n, vocab] for all rows when
  /// `all_rows`, else the last row only.
  Result<void> eval(std::span<const int32_t> tokens, SequenceState& st, bool all_rows, std::vector<float>* logits,
                    ForwardTrace* trace);
  /// Bytes of routed-expert weight matrices this Forward multiplied so far (each (expert, token
  /// block) launch counts gate + up + down once).
  uint64_t expert_weight_bytes() const { return expert_weight_bytes_; }
  /// Bytes of routed-expert matrices this rank took from a staged home (the store's non-stable
  /// experts: host or NVMe) so far: the whole experts it computes as their owner, and its rank
  /// slices of the experts split over the ranks (split staging). A device with its own memory
  /// copies exactly these over its link; the plan's link bytes for this rank.
  uint64_t staged_expert_bytes() const { return staged_expert_bytes_; }
  /// Rank slices (one per projection) of split experts (a plan's Split layers at tp > 1) this
  /// rank bound at the start of its steps so far (prefetch_hash_layers: the hash-routed layers),
  /// each then used by moe_split without a get or a bind of its own.
  uint64_t prefetched_slices() const { return prefetched_slices_; }
  /// Steps whose hash-layer prefetch stopped before a hash layer with staged binds because the
  /// device's staging ring could not hold them on top of the earlier layers' (that layer and the
  /// later ones bound at their MoE instead).
  uint64_t prefetch_ring_stops() const { return prefetch_ring_stops_; }
  /// Decode steps of one token (a batch of one row) run as graph regions (dev::Device::begin_graph,
  /// CUDA graphs; a backend without them ignores this) when `on` (default). The regions are the
  /// spans between the step's host waits: the embedding and layer 0 up to its router, then for
  /// each layer l > 0 the end of layer l-1's MoE (after the routed launches: all-reduce, combine,
  /// shared-expert add, hc_post) and layer l up to its router, then the last layer's end and the
  /// head up to the logits download; with a ForwardTrace the compressed layers' indexer download
  /// splits that layer's region in two. Uploads, the routed-expert binds and launches and the
  /// downloads stay outside. Same results either way.
  void set_graphs(bool on) { graphs_ = on; }
  /// The CPU device that computes, on a device with its own memory (the CUDA backend), the routed
  /// experts the store says the plan computes on the CPU (ExpertStore::cpu_computed): they are
  /// never bound on the GPU; the host computes them while the GPU runs the block's other experts,
  /// and their output rows join the GPU's slots in stream order (moe_cpu_experts). Null (default):
  /// every expert on `device`. Must outlive the Forward; only with a device that owns memory.
  void set_cpu_experts_device(dev::Device* host);
  /// Host seconds this rank spent on the experts computed on the CPU beside its GPU
  /// (moe_cpu_experts: their gets, the CPU's compute and the result's copy) so far.
  double cpu_expert_seconds() const { return cpu_expert_s_; }
  /// Device seconds this rank's GPU sat idle waiting for those experts so far: per token block,
  /// from the end of the GPU work queued before the host started on them to the point their join
  /// was queued (0 when the GPU was still busy then: the CPU's time hidden). Waits for the
  /// stream's timing points not yet read. -1 where the device does not time its stream.
  double cpu_expert_gpu_idle_seconds();

 private:
  /// The batch's rows [r0, r1) belong to chunk `i`.
  struct Seg {
    const SeqChunk* chunk;
    int64_t r0, r1, pos0;
  };
  Result<void> attention(int l, const dev::Tensor& x, const dev::Tensor& pos, std::span<const Seg> segs,
                         const dev::Tensor& out);
  Result<void> moe(int l, const dev::Tensor& x, const dev::Tensor& tok, std::span<const int32_t> tokens,
                   std::span<const Seg> segs, const dev::Tensor& out);
  /// Split staging (engine/tensor_parallel.md, definition 3): the experts of one token block that
  /// the store serves as rank slices (ExpertStore::rank_sliced), computed by every rank: its rows
  /// of gate and up give its columns of h = swiglu(gate x, up x) * route weight for the experts'
  /// slots; h is all-gathered (exact); its rows of down, from the full h, give its columns
  /// [dim*r/R, dim*(r+1)/R) of each slot's row of `yb` [nb*K, dim] (zero-filled, before any
  /// owner launch: the other rows' columns are written +0). Collective: every rank calls it for
  /// every block (the experts and slots are the same on every rank). xb [nb, dim], rwb [nb, K],
  /// `ids` the block's host ids [nb*K]. `after_binds` runs once, after the first binds. A store
  /// error is returned after the all-gather (the other ranks' collectives still match).
  Result<void> moe_split(int l, const dev::Tensor& xb, const dev::Tensor& rwb, std::span<const int32_t> ids,
                         float limit, const dev::Tensor& yb, const std::function<void()>& after_binds);
  /// The experts of one token block [t0, t1) of layer l that the plan computes on the CPU
  /// (`experts`, ascending, owned by this rank), computed by the CPU device from the host copies
  /// of the layer's x and routing weights (cpu_x_, cpu_rw_: [n, dim], [n, K]) and ids_host_;
  /// their slots' rows are then uploaded and added into `yb` [nb*K, dim] on the GPU stream (rows
  /// of those slots must hold +0 there; every other row gets +0 added: exact). Runs on the host
  /// after the block's GPU launches are queued, so the GPU computes its experts meanwhile.
  /// Counts expert_weight_bytes_. Errors: the expert store's.
  Result<void> moe_cpu_experts(int l, int64_t t0, int64_t t1, std::span<const int32_t> experts, float limit,
                               const dev::Tensor& yb);
  /// Expert e of layer l's gate, up and down matrices (ExpertProj order) from this rank's store
  /// view; the store's first error otherwise.
  Result<std::array<dev::WeightMatrix, 3>> expert_matrices(int l, int e);
  /// Bytes of a weight matrix (out rows of row_bytes).
  static uint64_t matrix_bytes(const dev::WeightMatrix& w) { return static_cast<uint64_t>(w.out) * w.row_bytes; }
  /// Indexer of layer l for segment `s`: top-k compressed block ids per token into sel [n_s, idx_topk].
  Result<void> indexer_select(int l, const dev::Tensor& q, const dev::Tensor& w, const Seg& s, LayerState& ls,
                              const dev::Tensor& sel);

  /// Binds, at the start of a step, the staged experts this rank computes in the hash-routed
  /// layers (l < n_hash_layers: their ids are tid2eid[token], known before the step), layer by
  /// layer in order while they fit the device's staging ring, so their copies run behind the
  /// first layers' attention (issue 20 item 2); moe(l) then launches them without binding. In a
  /// Split layer at tp > 1 that is the whole experts this rank owns and this rank's row slices
  /// of every split expert (ExpertStore::get_rank_slice, Host and Nvme homes), which moe_split
  /// then uses. A layer is bound whole or not at all; the bound layers are a prefix (a layer
  /// left out reserves the ring at its MoE, which needs no earlier staged bind unread); a layer
  /// that does not fit the ring stops it (prefetch_ring_stops). Only where bind copies (a device
  /// with its own memory), for one token block, and for whole experts whose store bytes persist
  /// (ExpertStore::persists: no get() before begin_step on a caching store).
  void prefetch_hash_layers(std::span<const int32_t> tokens);
  /// What prefetch_hash_layers bound for one layer: whole experts (ascending id, with gate + up +
  /// down bytes) and split experts' rank slices (ascending id, with each slice's bytes).
  struct Prefetched {
    std::vector<dev::ExpertTensors> experts;
    std::vector<uint64_t> bytes;
    std::vector<dev::ExpertTensors> split;
    std::vector<std::array<uint64_t, 3>> split_bytes;
  };

  /// Opens graph region `key` when this eval captures (graph_step_; see set_graphs): keys 2l (layer
  /// l up to its router), 2l + 1 (after a traced indexer download of layer l), 2 n_layer (the head).
  void graph_begin(uint64_t key) {
    if (graph_step_ && !in_graph_) in_graph_ = dev_.begin_graph(s_, key);
  }
  /// Ends the open graph region (its work is queued), if any.
  void graph_end() {
    if (in_graph_) dev_.end_graph(s_);
    in_graph_ = false;
  }

  /// True for Activations::Fp8 (REF's QAT simulation: the act_qdq steps of attention_layer.cpp).
  bool qat() const { return act_ == dev::ActFormat::FP8_QDQ; }

  const ModelConfig& c_;
  const ModelWeights& w_;
  staging::ExpertStore& experts_;  // w_.experts->for_rank(shard_.rank): this rank's view of the store
  const DeviceWeights& dw_;
  uint64_t expert_weight_bytes_ = 0;  // routed-expert matrix bytes multiplied (one rank thread)
  uint64_t staged_expert_bytes_ = 0;  // of those, bytes from staged homes (staged_expert_bytes)
  uint64_t prefetched_slices_ = 0;    // prefetched_slices
  uint64_t prefetch_ring_stops_ = 0;  // prefetch_ring_stops
  dev::Device& dev_;
  dev::Stream& s_;
  dev::ActFormat act_;
  TpShard shard_;
  comm::Comm* comm_ = nullptr;  // null when R = 1
  bool graphs_ = true;       // set_graphs
  bool graph_step_ = false;  // this eval runs its spans as graph regions
  bool in_graph_ = false;    // a region is open on s_
  Workspace ws_;
  std::vector<int32_t> ids_host_;  // routed expert ids of the current layer (downloaded)
  // Per-eval host scratch kept between calls (no allocation in steady state).
  std::vector<Seg> segs_;
  std::vector<int32_t> tok_host_, pos_host_, step_experts_, block_experts_;
  std::vector<dev::ExpertTensors> bound_experts_;  // moe: one batch of bound experts
  std::vector<Prefetched> prefetched_;             // [hash layer] bound at the step's start
  std::vector<int32_t> split_experts_;             // moe_split: the block's split experts, ascending
  size_t split_block_ = 0;                         // moe_split: token blocks of this moe call
  std::vector<std::vector<int32_t>> split_host_;   // moe_split: [block] slot / token / inverse index
                                                   // uploads (kept until the next moe: the stream
                                                   // is synchronized by then)
  std::vector<float> logits_host_;
  // Experts computed on the CPU beside a GPU (set_cpu_experts_device, moe_cpu_experts).
  dev::Device* cpu_dev_ = nullptr;
  std::unique_ptr<Workspace> cpu_ws_;                // on cpu_dev_
  std::vector<int32_t> cpu_step_;                    // moe: this step's CPU-computed experts
  std::vector<int32_t> cpu_block_;                   // moe: those of the current token block
  std::vector<float> cpu_x_, cpu_rw_, cpu_y_;        // host copies: x [n, dim], rw [n, K], slots
  std::vector<dev::ExpertTensors> cpu_bound_;        // moe_cpu_experts: one batch of CPU binds
  size_t cpu_block_n_ = 0;                           // moe_cpu_experts: token blocks of this moe call
  double cpu_expert_s_ = 0, cpu_expert_idle_s_ = 0;  // cpu_expert_seconds, _gpu_idle_seconds
  bool cpu_expert_timed_ = false;                    // the device gave timing points
  // Timing points (GPU work queued before the host's compute, the join) not yet read.
  std::vector<std::pair<std::unique_ptr<dev::Event>, std::unique_ptr<dev::Event>>> cpu_marks_;
  std::vector<std::vector<float>> cpu_rows_;         // [block] the uploaded slot rows (kept until
  std::vector<std::vector<int32_t>> cpu_index_;      // the next moe, as split_host_) and inverse index
};

}  // namespace ds4

// placement/cost_model.h — predicted time of one decode step and of one prefill chunk.
//
// Decode (batch 1), per layer l, for a routed token drawing the set A of top_k experts:
//   dense_l   = max over ranks of (non-routed bytes the rank reads) / (vram_gbps * efficiency)
//   per rank r:  link_r = sum over staged experts of (bytes r fetches) / h2d(r, source node)
//                         + copy_latency per copy
//                gpu_r  = sum over experts computed on r of (bytes) / (vram_gbps * efficiency)
//   per node n:  cpu_n  = sum over CPU experts of sum_part bytes_part / cpu_expert_gbps(type_part)
//                         + cpu_expert_latency per expert
//   stage     = max(max_r (link_r + gpu_r), all staged bytes / h2d_aggregate_gbps)
//   moe_l     = max(stage, max_n cpu_n) + NVMe bytes / (sum of NVMe read_gbps)
//   layer_l   = dense_l + moe_l + 2 * allreduce_latency + layer_overhead
// h2d(r, n) = h2d_gbps of GPU r if n is its node, else min(h2d_gbps, inter_socket_gbps); a copy
// from pageable memory (host expert that memlock could not pin) is further capped at
// pageable_h2d_gbps. NVMe reads land in pinned bounce buffers on the GPU's node.
// step = sum_l layer_l + head (output head bytes / ranks / VRAM bandwidth). The max over ranks is
// taken per token, so the expectation is E[max] (the imbalance of contiguous-id ownership shows
// up), estimated over a fixed set of routing samples drawn from the statistics: the recorded
// token routes when the statistics have them (routing_stats.h version 2), else Madow systematic
// sampling in a random order (each expert's inclusion probability equals its p exactly, experts
// drawn independently of each other).
// Why routes and not a pair-aware sampler: independent draws cannot see that experts which fire
// together in one token and share an owner serialize on its link. A pair matrix alone does not fix
// the joint distribution of top_k-sets (top_k = 6 means 6-way structure); a sampler matching both
// p and the pair rates would need an iterative fit (e.g. proportional fitting over E^2 constraints)
// and still invents the higher-order terms, whereas a few thousand recorded routes per layer
// (4096 x 43 x 6 ids, a few MB of JSON) are the empirical joint distribution itself. Pair counts
// alone are still used by the planner's ownership search (planner.h step 2b).
// Transfers and compute inside a rank are not overlapped (conservative); CPU, links and NVMe run
// in parallel. Without GPUs, dense work runs on the CPU at the node's "default" expert rate.
//
// Prefill, a chunk of C tokens at average context position P, per layer (expectations):
//   an expert with probability p is touched with probability q = 1 - (1 - p)^C and processes
//   C * p tokens. Staged experts cost q * bytes on the links; GPU FLOPs = 2 * weights * tokens
//   at `tflops`; CPU-tier experts are either computed on the CPU (cpu_gflops) or staged like Host
//   experts, whichever makes the layer faster (the engine decides per chunk); attention adds
//   2*2*heads*head_dim FLOPs per selected entry (window + min(512, P/4) on CSA, P/128 on HCA) and
//   the indexer 2*index_heads*index_head_dim per compressed entry (P/4) on CSA layers.
//   layer = max(links, GPU compute, CPU, aggregate) + NVMe + 2 all-reduces of C*dim*4 bytes
//   (latency + bytes * 2(R-1)/R / allreduce_gbps) + layer_overhead.
#pragma once

#include <cstdint>
#include <vector>

#include "placement/hw_profile.h"
#include "placement/model_shape.h"
#include "placement/plan.h"
#include "placement/quant_mix.h"
#include "placement/routing_stats.h"

namespace ds4::placement {

/// Fixed routing draws used to estimate expected step times: ids[l] holds n * top_k expert ids.
struct RoutingSamples {
  int n = 0;
  int top_k = 0;
  bool from_routes = false;  ///< true: taken from recorded routes (co-activation preserved)
  std::vector<std::vector<uint16_t>> ids;
};

/// `n` tokens per layer from `stats`, deterministic across runs and platforms. With recorded
/// routes (stats.n_routes() = N > 0): sample s of every layer is route floor(s * N / n) (in order;
/// every route used floor(n/N) or ceil(n/N) times when n >= N, evenly spaced ones when n < N; the
/// same token in every layer; `seed` unused). Without routes: independent Madow draws with a
/// fixed seed (splitmix64, no std distributions).
RoutingSamples draw_routing_samples(const RoutingStats& stats, int n, uint64_t seed);

/// Everything the cost model needs besides the plan.
struct CostInputs {
  const ModelShape* shape = nullptr;
  const ModelSizes* sizes = nullptr;
  const QuantMix* mix = nullptr;
  const HwProfile* hw = nullptr;
  const RoutingStats* stats = nullptr;
  const RoutingSamples* samples = nullptr;
  int64_t prefill_chunk = 2048;  ///< tokens per prefill chunk
  int64_t prefill_position = 1024;  ///< average context position during the prompt
};

/// Predicted numbers for one plan.
struct Prediction {
  double decode_step_s = 0;
  double decode_tok_s = 0;
  double dense_s = 0;        ///< per step: non-routed weights, all layers + head
  double moe_s = 0;          ///< per step: routed experts (expected)
  double sync_s = 0;         ///< per step: all-reduces + layer overheads
  double prefill_chunk_s = 0;
  double prefill_tok_s = 0;
  std::vector<double> vram_bytes_per_token;  ///< [gpu] expected resident expert bytes read per decode token
  std::vector<double> link_bytes_per_token;  ///< [gpu] expected H2D bytes per decode token
  std::vector<double> cpu_bytes_per_token;   ///< [node index] expected CPU-read expert bytes
  double nvme_bytes_per_token = 0;
  double share_vram = 0, share_host = 0, share_cpu = 0, share_nvme = 0;  ///< of activations
};

/// The cost model with per-layer constants precomputed from CostInputs (which must outlive it).
class CostModel {
 public:
  explicit CostModel(const CostInputs& in);

  /// Decode MoE time of layer `l` (stage/CPU/NVMe part, seconds) averaged over the samples.
  double moe_layer_time(const Plan& plan, int l) const;
  /// Decode MoE time of layer `l` for sample `s`.
  double moe_sample_time(const Plan& plan, int l, int s) const;
  /// Full prediction for `plan`.
  Prediction predict(const Plan& plan) const;

  const CostInputs& inputs() const { return in_; }

 private:
  double prefill_layer_time(const Plan& plan, int l) const;
  double h2d_gbps(int gpu, int node_index, bool pinned) const;

  CostInputs in_;
  int ranks_ = 0;
  std::vector<int> gpu_node_;              ///< [gpu] node index
  std::vector<int> ranks_on_node_;         ///< [node index]
  std::vector<double> gpu_bw_;             ///< [gpu] effective VRAM bytes/s for matvec
  std::vector<std::vector<double>> cpu_s_per_expert_;  ///< [layer][node index] seconds
  double nvme_gbps_ = 0;
};

}  // namespace ds4::placement

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
// All-CPU decode with a calibration (profile key "cpu_decode", measured by `plan --probe`; the
// mode CostInputs::activations selects), which replaces the line above and the layer/expert
// overheads (layer_overhead_us, cpu_expert_latency_us are GPU-era estimates the calibration
// measures instead):
//   step = token_us + L * layer_us + sum over weights read (cpu_matvec_seconds)
//          + sum_l decode_attention_flops(l, decode_position) / attn_gflops + NVMe bytes / NVMe rate
//   a weight of type T and B bytes costs B * (f / hot(T) + (1 - f) / cold(T)), f = the share of
//   its reads the caches serve (cpu_hot_shares): with the profile's measured reuse curve, f =
//   cache_hit_share(curve, D) where D = decode_reuse_bytes, the distinct weight bytes decode
//   touches between two reads of that weight (one token's reads for a non-routed matrix, ~1/p
//   tokens' for a routed expert of activation probability p = top_k / n_experts); without a curve
//   (older profiles) f = cache_resident_fraction(llc, working set) for every weight. Why the
//   curve: the OS-reported LLC of a VM (260 MiB on the development VM) is not what a streaming
//   decode sees (the cache is shared with other tenants and not LRU); with that LLC the blend
//   counted 57 % of the 455 MiB make-tiny model's reads as hot and predicted decode 1.4-1.8x too
//   fast. Why these terms: a 6 MiB model decodes at 33-128 tok/s on a 2-core machine
//   whose memory bandwidth alone predicts 821 (fixed per-op costs and compute-bound decode of
//   the IQ types), and a 455 MiB model at 2-2.5x the bandwidth-only estimate made with the
//   slowest expert type's rate for every weight (the dense F16/Q8_0 rates differ).
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
#include <string>
#include <vector>

#include "ds4/result.h"
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
  int64_t decode_position = 1024;   ///< context position of the decoded token (attention cost)
  std::string activations = "q8";   ///< CPU calibration mode used ("q8" or "f32", HwProfile::cpu_decode)
};

/// Attention + indexer FLOPs of one decode token at context position `pos` (0-based; pos + 1
/// entries are visible) on layer `l`: 4 * n_heads * head_dim per selected entry (q.k and p.v, a
/// multiply-add each), selected = min(window, pos + 1) raw entries, plus on CSA layers (ratio 4)
/// min(index_topk, (pos + 1) / 4) compressed ones and the indexer's 2 * index_n_heads *
/// index_head_dim per compressed entry, on HCA layers (ratio 128) all (pos + 1) / 128.
double decode_attention_flops(const ModelShape& s, int l, int64_t pos);

/// Share of weight reads served by the last-level cache: min(1, llc / working_set); 0 when
/// either is unknown (<= 0).
double cache_resident_fraction(int64_t llc_bytes, int64_t working_set_bytes);

/// Share of a weight's reads served by the caches when `reuse_bytes` distinct bytes are read
/// between two reads of it, from a measured reuse curve (CpuDecodeProfile::reuse_curve, ascending
/// sizes, >= 2 points): the time per byte t(D) = 1 / rate is interpolated linearly in log(size)
/// between the curve's points (clamped to its ends), and the share is the h with t(D) = h * t_first
/// + (1 - h) * t_last, i.e. (t(D) - t_last) / (t_first - t_last), clamped to [0, 1] (the first
/// point = the hot matrices' size: all hits; the last = the cold buffer: DRAM). 1 when the curve
/// is flat (t_first >= t_last: the cache does not help); fewer than 2 points: 0.
double cache_hit_share(const std::vector<ReusePoint>& curve, double reuse_bytes);

/// Expected distinct weight bytes all-CPU decode reads between two reads of one weight that a
/// token reads with probability q (1 = every token, p for a routed expert): the mean gap is
/// n = 1/q tokens, in which every non-routed byte is read and each routed expert (activation
/// probability p, experts independent) at least once with probability 1 - (1 - p)^n:
/// non_routed + routed_total * (1 - (1 - p)^n). Errors (DS4_CHECK): q not in (0, 1], p not in [0, 1].
double decode_reuse_bytes(double non_routed_bytes, double routed_total_bytes, double p, double q);

/// Cache-served shares the all-CPU decode model applies: to the non-routed weights read every
/// token and to the routed experts.
struct CpuHotShares {
  double non_routed = 0;
  double routed = 0;
};

/// The shares for a model: with prof.reuse_curve, cache_hit_share at decode_reuse_bytes (q = 1
/// and q = p = top_k / n_experts; bytes from `sizes`: read_per_token tensors and all routed
/// experts); else both = cache_resident_fraction(prof.llc_bytes, cpu_working_set_bytes(sizes)).
CpuHotShares cpu_hot_shares(const CpuDecodeProfile& prof, const ModelShape& shape, const ModelSizes& sizes);

/// Seconds to read `bytes` of weights of type `type_name` through the CPU matmul at calibration
/// `m` with a share `hot_fraction` resident in cache: bytes * (f / hot + (1 - f) / cold) / 1e9
/// (GB/s = 1e9 B/s). A missing hot rate uses the cold one and vice versa.
double cpu_matvec_seconds(const CpuDecodeMode& m, const std::string& type_name, double bytes, double hot_fraction);

/// Bytes the all-CPU decode touches over many tokens: every non-routed tensor read per token and
/// all routed experts (the working set cache_resident_fraction compares with the LLC).
int64_t cpu_working_set_bytes(const ModelSizes& sizes);

/// All-CPU decode, seconds per token of the weight reads alone: every non-routed tensor read per
/// token (at hot.non_routed) plus `top_k` routed experts of every layer (gate/up and down at their
/// types, at hot.routed), each at cpu_matvec_seconds(m, type, bytes, share). The CostModel's
/// calibrated dense + routed terms of an all-CPU plan sum to the same (tests check it).
double cpu_decode_matvec_seconds(const ModelShape& shape, const ModelSizes& sizes, const CpuDecodeMode& m,
                                 const CpuHotShares& hot);

/// One decode measurement of the `plan --probe` micro-run: a model of `n_layers` layers whose
/// weight reads the rates above price at `modeled_s`, with `attn_flops` attention FLOPs per token,
/// measured at `measured_s` per token.
struct DecodeProbeSample {
  int n_layers = 0;
  double modeled_s = 0;
  double attn_flops = 0;
  double measured_s = 0;
};

/// Fixed costs fitted to micro-run samples: measured - modeled = token_s + n_layers * layer_s +
/// attn_flops * s_per_flop, least squares with every coefficient >= 0 (each subset of the three
/// terms is solved exactly by its normal equations; the feasible one with the smallest squared
/// residual wins; a dropped attention term reports attn_gflops = kUnmeasuredAttnGflops).
struct DecodeFixedFit {
  double token_s = 0;
  double layer_s = 0;
  double attn_gflops = 0;
  double rms_residual_s = 0;  ///< root mean square of the fit's residuals
};
inline constexpr double kUnmeasuredAttnGflops = 1e6;

/// Fits DecodeFixedFit. Errors: fewer than 3 samples, non-finite or negative times.
Result<DecodeFixedFit> fit_decode_fixed_costs(const std::vector<DecodeProbeSample>& samples);

/// Predicted numbers for one plan.
struct Prediction {
  double decode_step_s = 0;
  double decode_tok_s = 0;
  double dense_s = 0;        ///< per step: non-routed weights, all layers + head
  double moe_s = 0;          ///< per step: routed experts (expected)
  double sync_s = 0;         ///< per step: all-reduces + layer overheads
  double attn_s = 0;         ///< per step, calibrated all-CPU only: attention + indexer
  double fixed_s = 0;        ///< per step, calibrated all-CPU only: token_us + L * layer_us
  bool cpu_calibrated = false;  ///< the all-CPU terms of a "cpu_decode" calibration were used
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
  /// The calibration used for all-CPU decode (no GPUs and the profile has the requested mode), or null.
  const CpuDecodeMode* cpu_calibration() const { return cal_; }
  /// Shares of weight reads the calibrated model assumes cache-served (cpu_hot_shares).
  const CpuHotShares& hot_shares() const { return hot_; }
  /// Calibrated all-CPU decode: seconds per token of the non-routed weights of layer `l` (-1 =
  /// the global ones: output head, output norm/HC), at cpu_matvec_seconds. Needs cpu_calibration().
  double cpu_dense_seconds(int l) const;

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
  const CpuDecodeMode* cal_ = nullptr;
  CpuHotShares hot_;
};

}  // namespace ds4::placement

// placement/routing_stats.h — how often each routed expert is selected, per layer.
//
// The planner works with activation probabilities p[l][e] = expected number of times expert e of
// layer l is selected per token (0 <= p <= 1, sum over e = top_k). They come from a statistics
// file written by `ds4-offload calibrate` (format below) or from a prior when none exists.
//
// Statistics file (JSON), version 1:
//   {
//     "format": "ds4-routing-stats", "version": 1,
//     "model": "DeepSeek-V4-Flash",           // free text, informational
//     "n_layers": 43, "n_experts": 256, "top_k": 6,
//     "tokens": 123456,                        // tokens routed (each selects top_k experts)
//     "counts": [[c_0_0, ..., c_0_255], ...]   // [layer][expert] selection counts (integers >= 0)
//   }
// Optional (still version 1; readers that do not know it may ignore it):
//     "coactivation": [[[a, b, n], ...], ...]  // [layer] sparse list of expert pairs a < b selected
//                                              // together by n > 0 tokens (each pair listed once)
// When present, every layer's pair counts must sum to tokens * top_k * (top_k - 1) / 2.
// Every layer's counts must sum to tokens * top_k (each token selects exactly top_k distinct
// experts); a file violating that is rejected.
//
// Version 2 = version 1 plus the optional key
//     "routes": [[[e_1, ..., e_top_k], ...], ...]  // [layer][route]: the expert set of one token
// recorded routes (at most `tokens` per layer, the same number in every layer, route i of every
// layer being the same token; each route top_k distinct ids in [0, n_experts)). They carry the
// joint distribution of the selection (co-activation of any order), which the cost model samples
// instead of drawing experts independently (cost_model.h). The writer emits version 1 when there
// are no routes, so such files stay readable by version-1 readers; the reader accepts 1 and 2.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ds4/result.h"

namespace ds4::placement {

/// Per-layer activation probabilities.
struct RoutingStats {
  std::string source;                 ///< "uniform prior", "zipf prior (s=1.00)", or a file path
  int top_k = 0;
  std::vector<std::vector<double>> p; ///< [layer][expert], each row sums to top_k, entries in [0,1]
  /// Optional co-activation counts from a statistics file: [layer] -> (a, b, n) with a < b, sorted.
  struct Pair { int32_t a = 0, b = 0; int64_t n = 0; };
  std::vector<std::vector<Pair>> coactivation;  ///< empty when the file has none
  /// Optional recorded routes (version 2): [layer] -> n_routes() * top_k expert ids, route-major
  /// (route i = ids [i * top_k, (i + 1) * top_k)). Empty when the file has none.
  std::vector<std::vector<uint16_t>> routes;
  int64_t tokens = 0;                           ///< tokens of the statistics file (0 for priors)

  int n_layers() const { return int(p.size()); }
  int n_experts() const { return p.empty() ? 0 : int(p[0].size()); }
  /// Recorded routes per layer (0 without routes).
  int64_t n_routes() const { return routes.empty() || top_k <= 0 ? 0 : int64_t(routes[0].size()) / top_k; }
  /// True when the statistics say which experts fire together (pair counts or routes).
  bool has_coactivation() const { return !coactivation.empty() || n_routes() > 0; }
};

/// Co-activation rates of layer `l`: c[a * n_experts + b] = probability that one token selects
/// both a and b (a != b; symmetric; diagonal 0). From the pair counts when the statistics have
/// them (divided by tokens), else from the routes (pairs counted over the recorded routes), else
/// an empty vector. Row sums equal p[l][a] * (top_k - 1) for pair-count data.
std::vector<double> coactivation_rates(const RoutingStats& stats, int l);

/// Every expert equally likely: p = top_k / n_experts.
RoutingStats uniform_routing(int n_layers, int n_experts, int top_k);

/// Zipf prior: within each layer the expert at popularity rank r (1-based) gets weight r^-s; the
/// rank order is a fixed pseudo-random permutation per layer (seeded by the layer index), so hot
/// experts differ between layers. Weights are scaled to sum to top_k and capped at 1 (an expert
/// is selected at most once per token) with the excess spread over the others (water-filling).
/// s = 0 equals the uniform prior. DS4_CHECK(s >= 0).
RoutingStats zipf_routing(int n_layers, int n_experts, int top_k, double s);

/// Reads a statistics file and checks it against the model (n_layers, n_experts, top_k).
/// Errors: unreadable, malformed, wrong format/version, dimension mismatch, negative counts, a
/// layer whose counts do not sum to tokens * top_k, tokens == 0.
Result<RoutingStats> load_routing_stats(const std::string& path, int n_layers, int n_experts, int top_k);

/// Writes `counts` (and, when non-empty, `coactivation`, one sorted pair list per layer, and
/// `routes`, [layer] flattened as RoutingStats::routes) in the format above: version 2 when routes
/// are given, else version 1. Used by `ds4-offload calibrate`, `run --routing-out` and tests.
/// Error when the file cannot be written or the routes are not n_layers equal-length lists whose
/// length is a multiple of top_k.
Result<void> write_routing_stats(const std::string& path, const std::string& model, int top_k, int64_t tokens,
                                 const std::vector<std::vector<int64_t>>& counts,
                                 const std::vector<std::vector<RoutingStats::Pair>>& coactivation = {},
                                 const std::vector<std::vector<uint16_t>>& routes = {});

}  // namespace ds4::placement

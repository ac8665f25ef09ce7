// placement/routing_counter.h — accumulates router decisions into routing statistics (expert
// selection counts per layer, sparse co-activation pair counts and a bounded sample of whole
// token routes), the data `ds4-offload calibrate` and `run --routing-out` write as a
// ds4-routing-stats file (placement/routing_stats.h; version 2 when routes are kept).
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "ds4/result.h"
#include "placement/routing_stats.h"

namespace ds4::placement {

/// Counts, per layer, how many tokens selected each expert and each unordered expert pair.
class RoutingCounter {
 public:
  /// Keeps up to `max_routes` token routes per layer (0: none). When more tokens arrive, the kept
  /// ones are a uniform sample of all tokens (reservoir sampling, Vitter's algorithm R, with the
  /// replacement slot of token t taken from splitmix64(t): deterministic, and since every layer
  /// sees the same token sequence, the same tokens are kept in every layer).
  /// DS4_CHECK(n_layers > 0 && n_experts > 0 && n_experts <= 65536 && top_k > 0 && max_routes >= 0).
  RoutingCounter(int n_layers, int n_experts, int top_k, int max_routes = 0);

  /// Records one token's selection in `layer`. Error when layer is out of range, the selection
  /// does not have exactly top_k entries, an id is outside [0, n_experts), or an id repeats.
  Result<void> add(int layer, std::span<const int32_t> experts);

  /// Tokens routed: the common number of add() calls per layer. Error when layers differ.
  Result<int64_t> tokens() const;
  /// counts[layer][expert].
  const std::vector<std::vector<int64_t>>& counts() const { return counts_; }
  /// Co-activation pairs of every layer, sorted by (a, b), a < b, n > 0.
  std::vector<std::vector<RoutingStats::Pair>> coactivation() const;
  /// Kept routes of every layer in token order, flattened as RoutingStats::routes (route i of
  /// every layer is the same token). Empty when max_routes == 0.
  std::vector<std::vector<uint16_t>> routes() const;

  int n_layers() const { return int(counts_.size()); }
  int n_experts() const { return n_experts_; }
  int top_k() const { return top_k_; }

 private:
  int n_experts_, top_k_, max_routes_;
  std::vector<std::vector<int64_t>> counts_;
  std::vector<int64_t> layer_tokens_;
  std::vector<std::unordered_map<uint64_t, int64_t>> pairs_;  // key a * n_experts + b
  std::vector<std::vector<int64_t>> route_token_;   // [layer][slot] token index of the kept route
  std::vector<std::vector<uint16_t>> route_ids_;    // [layer][slot * top_k + i]
};

}  // namespace ds4::placement

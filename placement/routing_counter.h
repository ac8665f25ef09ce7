// placement/routing_counter.h — accumulates router decisions into routing statistics (expert
// selection counts per layer and sparse co-activation pair counts), the data `ds4-offload
// calibrate` writes as a ds4-routing-stats v1 file (placement/routing_stats.h).
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
  /// DS4_CHECK(n_layers > 0 && n_experts > 0 && top_k > 0).
  RoutingCounter(int n_layers, int n_experts, int top_k);

  /// Records one token's selection in `layer`. Error when layer is out of range, the selection
  /// does not have exactly top_k entries, an id is outside [0, n_experts), or an id repeats.
  Result<void> add(int layer, std::span<const int32_t> experts);

  /// Tokens routed: the common number of add() calls per layer. Error when layers differ.
  Result<int64_t> tokens() const;
  /// counts[layer][expert].
  const std::vector<std::vector<int64_t>>& counts() const { return counts_; }
  /// Co-activation pairs of every layer, sorted by (a, b), a < b, n > 0.
  std::vector<std::vector<RoutingStats::Pair>> coactivation() const;

  int n_layers() const { return int(counts_.size()); }
  int n_experts() const { return n_experts_; }
  int top_k() const { return top_k_; }

 private:
  int n_experts_, top_k_;
  std::vector<std::vector<int64_t>> counts_;
  std::vector<int64_t> layer_tokens_;
  std::vector<std::unordered_map<uint64_t, int64_t>> pairs_;  // key a * n_experts + b
};

}  // namespace ds4::placement

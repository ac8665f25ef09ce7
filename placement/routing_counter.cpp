// placement/routing_counter.cpp — see routing_counter.h.
#include "placement/routing_counter.h"

#include <algorithm>
#include <string>

namespace ds4::placement {

RoutingCounter::RoutingCounter(int n_layers, int n_experts, int top_k)
    : n_experts_(n_experts), top_k_(top_k) {
  DS4_CHECK(n_layers > 0 && n_experts > 0 && top_k > 0);
  counts_.assign(size_t(n_layers), std::vector<int64_t>(size_t(n_experts), 0));
  layer_tokens_.assign(size_t(n_layers), 0);
  pairs_.resize(size_t(n_layers));
}

Result<void> RoutingCounter::add(int layer, std::span<const int32_t> experts) {
  if (layer < 0 || layer >= n_layers())
    return Error{"router record: layer " + std::to_string(layer) + " outside [0, " + std::to_string(n_layers()) + ")"};
  if (int(experts.size()) != top_k_)
    return Error{"router record of layer " + std::to_string(layer) + ": expected " + std::to_string(top_k_) +
                 " experts, found " + std::to_string(experts.size())};
  for (size_t i = 0; i < experts.size(); ++i) {
    if (experts[i] < 0 || experts[i] >= n_experts_)
      return Error{"router record of layer " + std::to_string(layer) + ": expert id " + std::to_string(experts[i]) +
                   " outside [0, " + std::to_string(n_experts_) + ")"};
    for (size_t j = 0; j < i; ++j)
      if (experts[j] == experts[i])
        return Error{"router record of layer " + std::to_string(layer) + ": expert " + std::to_string(experts[i]) +
                     " selected twice by one token"};
  }
  auto& c = counts_[size_t(layer)];
  auto& pm = pairs_[size_t(layer)];
  for (size_t i = 0; i < experts.size(); ++i) {
    ++c[size_t(experts[i])];
    for (size_t j = i + 1; j < experts.size(); ++j) {
      const uint64_t a = uint64_t(std::min(experts[i], experts[j])), b = uint64_t(std::max(experts[i], experts[j]));
      ++pm[a * uint64_t(n_experts_) + b];
    }
  }
  ++layer_tokens_[size_t(layer)];
  return ok();
}

Result<int64_t> RoutingCounter::tokens() const {
  for (size_t l = 1; l < layer_tokens_.size(); ++l)
    if (layer_tokens_[l] != layer_tokens_[0])
      return Error{"router records: layer " + std::to_string(l) + " saw " + std::to_string(layer_tokens_[l]) +
                   " tokens, layer 0 saw " + std::to_string(layer_tokens_[0])};
  return layer_tokens_[0];
}

std::vector<std::vector<RoutingStats::Pair>> RoutingCounter::coactivation() const {
  std::vector<std::vector<RoutingStats::Pair>> out(pairs_.size());
  for (size_t l = 0; l < pairs_.size(); ++l) {
    for (const auto& [key, n] : pairs_[l])
      out[l].push_back({int32_t(key / uint64_t(n_experts_)), int32_t(key % uint64_t(n_experts_)), n});
    std::sort(out[l].begin(), out[l].end(),
              [](const auto& x, const auto& y) { return x.a != y.a ? x.a < y.a : x.b < y.b; });
  }
  return out;
}

}  // namespace ds4::placement

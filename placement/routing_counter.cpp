// placement/routing_counter.cpp — see routing_counter.h.
#include "placement/routing_counter.h"

#include <algorithm>
#include <string>

namespace ds4::placement {

namespace {

// splitmix64 (Steele, Lea, Flood 2014) of one value: the reservoir slot draw of a token.
uint64_t mix64(uint64_t x) {
  uint64_t z = x + 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace

RoutingCounter::RoutingCounter(int n_layers, int n_experts, int top_k, int max_routes)
    : n_experts_(n_experts), top_k_(top_k), max_routes_(max_routes) {
  DS4_CHECK(n_layers > 0 && n_experts > 0 && n_experts <= 65536 && top_k > 0 && max_routes >= 0);
  route_token_.resize(size_t(n_layers));
  route_ids_.resize(size_t(n_layers));
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
  // Reservoir (algorithm R): token t fills slot t while there is room, else replaces slot
  // mix64(t) mod (t + 1) when that is < max_routes.
  const int64_t t = layer_tokens_[size_t(layer)];
  int64_t slot = -1;
  if (t < max_routes_) {
    slot = t;
    route_token_[size_t(layer)].push_back(t);
    route_ids_[size_t(layer)].resize(size_t(t + 1) * size_t(top_k_));
  } else if (max_routes_ > 0) {
    const int64_t j = int64_t(mix64(uint64_t(t)) % uint64_t(t + 1));
    if (j < max_routes_) slot = j;
  }
  if (slot >= 0) {
    route_token_[size_t(layer)][size_t(slot)] = t;
    for (int i = 0; i < top_k_; ++i)
      route_ids_[size_t(layer)][size_t(slot) * size_t(top_k_) + size_t(i)] = uint16_t(experts[size_t(i)]);
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

std::vector<std::vector<uint16_t>> RoutingCounter::routes() const {
  std::vector<std::vector<uint16_t>> out;
  if (max_routes_ == 0) return out;
  for (size_t l = 0; l < route_token_.size(); ++l) {
    std::vector<size_t> order(route_token_[l].size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return route_token_[l][a] < route_token_[l][b]; });
    std::vector<uint16_t> ids;
    ids.reserve(route_ids_[l].size());
    for (size_t i : order)
      for (int k = 0; k < top_k_; ++k) ids.push_back(route_ids_[l][i * size_t(top_k_) + size_t(k)]);
    out.push_back(std::move(ids));
  }
  return out;
}

}  // namespace ds4::placement

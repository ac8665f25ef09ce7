// placement/routing_stats.cpp — routing priors and the statistics file reader/writer.
#include "placement/routing_stats.h"

#include "ds4/file_io.h"
#include "placement/json_text.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <random>
#include <sstream>

#include <nlohmann/json.hpp>

namespace ds4::placement {

using nlohmann::json;

RoutingStats uniform_routing(int n_layers, int n_experts, int top_k) {
  DS4_CHECK(n_layers > 0 && n_experts > 0 && top_k > 0 && top_k <= n_experts);
  RoutingStats r;
  r.source = "uniform prior";
  r.top_k = top_k;
  r.p.assign(size_t(n_layers), std::vector<double>(size_t(n_experts), double(top_k) / n_experts));
  return r;
}

namespace {

// Scales w to sum to k with every entry <= 1: entries that would exceed 1 are fixed at 1 and the
// remainder is rescaled over the others until none exceeds 1.
std::vector<double> water_fill(std::vector<double> w, int k) {
  std::vector<bool> capped(w.size(), false);
  for (size_t iter = 0; iter <= w.size(); ++iter) {
    double free_sum = 0;
    int n_capped = 0;
    for (size_t i = 0; i < w.size(); ++i) {
      if (capped[i]) ++n_capped;
      else free_sum += w[i];
    }
    const double scale = (double(k) - n_capped) / free_sum;
    bool changed = false;
    for (size_t i = 0; i < w.size(); ++i)
      if (!capped[i] && w[i] * scale >= 1.0) { capped[i] = true; changed = true; }
    if (!changed) {
      for (size_t i = 0; i < w.size(); ++i) w[i] = capped[i] ? 1.0 : w[i] * scale;
      return w;
    }
  }
  DS4_CHECK(false);
  return w;
}

// Reads the version-2 "routes" key (format in routing_stats.h) into [layer] flattened ids.
Result<std::vector<std::vector<uint16_t>>> read_routes(const json& rt, const std::string& path, int n_layers,
                                                       int n_experts, int top_k, int64_t tokens) {
  if (n_experts > 65536) return Error{path + ": routes need n_experts <= 65536, found " + std::to_string(n_experts)};
  if (!rt.is_array() || int(rt.size()) != n_layers)
    return Error{path + ": key 'routes': expected an array of " + std::to_string(n_layers) + " layers"};
  std::vector<std::vector<uint16_t>> out;
  for (int l = 0; l < n_layers; ++l) {
    const json& layer = rt[size_t(l)];
    const std::string where = path + ": routes[" + std::to_string(l) + "]";
    if (!layer.is_array()) return Error{where + ": expected an array of routes"};
    if (layer.size() != rt[0].size())
      return Error{where + ": expected " + std::to_string(rt[0].size()) + " routes (as layer 0), found " +
                   std::to_string(layer.size())};
    if (int64_t(layer.size()) > tokens)
      return Error{where + ": expected at most tokens (" + std::to_string(tokens) + ") routes, found " +
                   std::to_string(layer.size())};
    std::vector<uint16_t> ids;
    ids.reserve(layer.size() * size_t(top_k));
    for (size_t i = 0; i < layer.size(); ++i) {
      const json& route = layer[i];
      if (!route.is_array() || int(route.size()) != top_k)
        return Error{where + "[" + std::to_string(i) + "]: expected " + std::to_string(top_k) + " expert ids, found " +
                     route.dump()};
      for (size_t a = 0; a < route.size(); ++a) {
        const json& v = route[a];
        if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= n_experts)
          return Error{where + "[" + std::to_string(i) + "]: expected ids in [0, " + std::to_string(n_experts) +
                       "), found " + route.dump()};
        for (size_t b = 0; b < a; ++b)
          if (route[b] == v)
            return Error{where + "[" + std::to_string(i) + "]: expected distinct ids, found " + route.dump()};
        ids.push_back(uint16_t(v.get<int64_t>()));
      }
    }
    out.push_back(std::move(ids));
  }
  return out;
}

}  // namespace

RoutingStats zipf_routing(int n_layers, int n_experts, int top_k, double s) {
  DS4_CHECK(n_layers > 0 && n_experts > 0 && top_k > 0 && top_k <= n_experts && s >= 0);
  RoutingStats r;
  char buf[64];
  std::snprintf(buf, sizeof buf, "zipf prior (s=%.2f)", s);
  r.source = buf;
  r.top_k = top_k;
  for (int l = 0; l < n_layers; ++l) {
    std::vector<int> perm(static_cast<size_t>(n_experts));
    std::iota(perm.begin(), perm.end(), 0);
    // Fisher-Yates with a fixed-seed mt19937_64 (its output sequence is specified by the standard).
    std::mt19937_64 rng(0x5EEDull + uint64_t(l) * 0x9E3779B97F4A7C15ull);
    for (int i = n_experts - 1; i > 0; --i) std::swap(perm[size_t(i)], perm[size_t(rng() % uint64_t(i + 1))]);
    std::vector<double> w(static_cast<size_t>(n_experts));
    for (int rank = 0; rank < n_experts; ++rank) w[size_t(perm[size_t(rank)])] = std::pow(double(rank + 1), -s);
    r.p.push_back(water_fill(std::move(w), top_k));
  }
  return r;
}

Result<RoutingStats> load_routing_stats(const std::string& path, int n_layers, int n_experts, int top_k) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return Error{path + ": expected a routing statistics file, found a directory"};
  DS4_TRY(const std::string text, read_file_bounded(path, kMaxJsonBytes, "routing statistics"));
  DS4_TRY(json j, parse_json_text(text, path));
  if (!j.is_object() || !j.contains("format") || !j["format"].is_string() ||
      j["format"].get<std::string>() != "ds4-routing-stats")
    return Error{path + ": expected \"format\": \"ds4-routing-stats\", found " +
                 (j.is_object() && j.contains("format") ? j["format"].dump().substr(0, 60) : std::string("none"))};
  if (!j.contains("version") || !j["version"].is_number_integer() ||
      (j["version"].get<int64_t>() != 1 && j["version"].get<int64_t>() != 2))
    return Error{path + ": expected \"version\": 1 or 2, found " + (j.contains("version") ? j["version"].dump() : "none")};
  const int version = int(j["version"].get<int64_t>());
  auto int_key = [&](const char* key, int64_t expect) -> Result<int64_t> {
    if (!j.contains(key) || !j[key].is_number_integer())
      return Error{path + ": missing or non-integer key '" + key + "'"};
    int64_t v = j[key].get<int64_t>();
    if (expect >= 0 && v != expect)
      return Error{path + ": key '" + key + "': expected " + std::to_string(expect) + " (the model), found " +
                   std::to_string(v)};
    return v;
  };
  DS4_TRY_VOID(int_key("n_layers", n_layers));
  DS4_TRY_VOID(int_key("n_experts", n_experts));
  DS4_TRY_VOID(int_key("top_k", top_k));
  DS4_TRY(int64_t tokens, int_key("tokens", -1));
  // Bounded so that tokens * top_k * (top_k - 1) / 2 and the count sums stay exact in int64.
  constexpr int64_t kMaxTokens = int64_t(1) << 40;
  if (tokens <= 0 || tokens > kMaxTokens)
    return Error{path + ": key 'tokens': expected 1.." + std::to_string(kMaxTokens) + ", found " + std::to_string(tokens)};
  if (!j.contains("counts") || !j["counts"].is_array() || int(j["counts"].size()) != n_layers)
    return Error{path + ": key 'counts': expected an array of " + std::to_string(n_layers) + " layers"};
  RoutingStats r;
  r.source = path;
  r.top_k = top_k;
  for (int l = 0; l < n_layers; ++l) {
    const json& row = j["counts"][size_t(l)];
    const std::string where = path + ": counts[" + std::to_string(l) + "]";
    if (!row.is_array() || int(row.size()) != n_experts)
      return Error{where + ": expected " + std::to_string(n_experts) + " integer counts"};
    std::vector<double> p(static_cast<size_t>(n_experts));
    int64_t sum = 0;
    for (int e = 0; e < n_experts; ++e) {
      const json& c = row[size_t(e)];
      if (!c.is_number_integer() || c.get<int64_t>() < 0)
        return Error{where + "[" + std::to_string(e) + "]: expected a non-negative integer, found " + c.dump()};
      const int64_t v = c.get<int64_t>();
      if (v > tokens)
        return Error{where + "[" + std::to_string(e) + "]: expected at most tokens (" + std::to_string(tokens) +
                     "), found " + std::to_string(v)};
      sum += v;
      p[size_t(e)] = double(v) / double(tokens);
    }
    if (sum != tokens * top_k)
      return Error{where + ": expected counts summing to tokens * top_k = " + std::to_string(tokens * top_k) +
                   ", found " + std::to_string(sum)};
    r.p.push_back(std::move(p));
  }
  r.tokens = tokens;
  if (j.contains("coactivation")) {
    const json& co = j["coactivation"];
    if (!co.is_array() || int(co.size()) != n_layers)
      return Error{path + ": key 'coactivation': expected an array of " + std::to_string(n_layers) + " layers"};
    const int64_t pairs_per_token = int64_t(top_k) * (top_k - 1) / 2;
    for (int l = 0; l < n_layers; ++l) {
      const std::string where = path + ": coactivation[" + std::to_string(l) + "]";
      if (!co[size_t(l)].is_array()) return Error{where + ": expected an array of [a, b, n] triples"};
      std::vector<RoutingStats::Pair> pairs;
      int64_t sum = 0;
      for (const json& t : co[size_t(l)]) {
        if (!t.is_array() || t.size() != 3 || !t[0].is_number_integer() || !t[1].is_number_integer() ||
            !t[2].is_number_integer())
          return Error{where + ": expected [a, b, n] integer triples, found " + t.dump()};
        const int64_t a = t[0].get<int64_t>(), b = t[1].get<int64_t>();
        if (a < 0 || a >= b || b >= n_experts)
          return Error{where + ": expected 0 <= a < b < " + std::to_string(n_experts) + " and 0 < n <= tokens, found " +
                       t.dump()};
        RoutingStats::Pair pr{int32_t(a), int32_t(b), t[2].get<int64_t>()};
        if (pr.n <= 0 || pr.n > tokens)
          return Error{where + ": expected 0 <= a < b < " + std::to_string(n_experts) + " and 0 < n <= tokens, found " +
                       t.dump()};
        if (!pairs.empty() && (pairs.back().a > pr.a || (pairs.back().a == pr.a && pairs.back().b >= pr.b)))
          return Error{where + ": pairs must be sorted by (a, b) and unique, found " + t.dump()};
        sum += pr.n;
        pairs.push_back(pr);
      }
      if (sum != tokens * pairs_per_token)
        return Error{where + ": expected pair counts summing to tokens * top_k * (top_k - 1) / 2 = " +
                     std::to_string(tokens * pairs_per_token) + ", found " + std::to_string(sum)};
      r.coactivation.push_back(std::move(pairs));
    }
  }
  if (j.contains("routes")) {
    if (version < 2) return Error{path + ": key 'routes' needs \"version\": 2, found version 1"};
    DS4_TRY(r.routes, read_routes(j["routes"], path, n_layers, n_experts, top_k, tokens));
  }
  return r;
}

std::vector<double> coactivation_rates(const RoutingStats& stats, int l) {
  const int E = stats.n_experts(), k = stats.top_k;
  std::vector<double> c;
  if (l < 0 || l >= stats.n_layers()) return c;
  if (!stats.coactivation.empty() && stats.tokens > 0) {
    c.assign(size_t(E) * size_t(E), 0.0);
    for (const auto& pr : stats.coactivation[size_t(l)]) {
      const double v = double(pr.n) / double(stats.tokens);
      c[size_t(pr.a) * size_t(E) + size_t(pr.b)] = v;
      c[size_t(pr.b) * size_t(E) + size_t(pr.a)] = v;
    }
  } else if (stats.n_routes() > 0) {
    c.assign(size_t(E) * size_t(E), 0.0);
    const auto& ids = stats.routes[size_t(l)];
    const int64_t n = stats.n_routes();
    const double w = 1.0 / double(n);
    for (int64_t t = 0; t < n; ++t)
      for (int i = 0; i < k; ++i)
        for (int j = 0; j < k; ++j)
          if (i != j) c[size_t(ids[size_t(t * k + i)]) * size_t(E) + ids[size_t(t * k + j)]] += w;
  }
  return c;
}

Result<void> write_routing_stats(const std::string& path, const std::string& model, int top_k, int64_t tokens,
                                 const std::vector<std::vector<int64_t>>& counts,
                                 const std::vector<std::vector<RoutingStats::Pair>>& coactivation,
                                 const std::vector<std::vector<uint16_t>>& routes) {
  json j;
  j["format"] = "ds4-routing-stats";
  j["version"] = 1;
  j["model"] = model;
  j["n_layers"] = counts.size();
  j["n_experts"] = counts.empty() ? 0 : counts[0].size();
  j["top_k"] = top_k;
  j["tokens"] = tokens;
  j["counts"] = counts;
  if (!routes.empty()) {
    if (routes.size() != counts.size())
      return Error{path + ": routes: expected " + std::to_string(counts.size()) + " layers, found " +
                   std::to_string(routes.size())};
    json rt = json::array();
    for (size_t l = 0; l < routes.size(); ++l) {
      if (top_k <= 0 || routes[l].size() % size_t(top_k) != 0 || routes[l].size() != routes[0].size())
        return Error{path + ": routes[" + std::to_string(l) + "]: expected " + std::to_string(routes[0].size()) +
                     " ids (a multiple of top_k = " + std::to_string(top_k) + "), found " +
                     std::to_string(routes[l].size())};
      json row = json::array();
      for (size_t i = 0; i < routes[l].size(); i += size_t(top_k))
        row.push_back(std::vector<uint16_t>(routes[l].begin() + std::ptrdiff_t(i), routes[l].begin() + std::ptrdiff_t(i) + top_k));
      rt.push_back(std::move(row));
    }
    j["version"] = 2;
    j["routes"] = std::move(rt);
  }
  if (!coactivation.empty()) {
    json co = json::array();
    for (const auto& layer : coactivation) {
      json row = json::array();
      for (const auto& pr : layer) row.push_back(json::array({pr.a, pr.b, pr.n}));
      co.push_back(std::move(row));
    }
    j["coactivation"] = std::move(co);
  }
  return write_file_atomic(path, j.dump() + "\n", "routing statistics");
}

}  // namespace ds4::placement

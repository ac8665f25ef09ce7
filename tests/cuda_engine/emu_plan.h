// tests/cuda_engine/emu_plan.h — the plan files the emulated-CUDA engine tests load a model by
// (--plan): one routed expert's bytes per layer from the GGUF header, and a plan written in
// placement/plan_report.h's format whose tiers cycle V (VRAM), H (pinned host), P (pageable host)
// over (layer + expert), with the owner rank each expert gets from a callback and optionally split
// layers. Shared by cuda_emu_bench_test (tp 1), cuda_emu_tp_test (tp 2 and 4) and tp_golden_test
// (CPU ranks).
#pragma once

#include <cstdint>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "engine/session.h"
#include "engine/model_config.h"
#include "gguf/gguf_file.h"
#include "support/test_env.h"

namespace ds4::emu_test {

/// Bytes of one routed expert per layer from the GGUF header: the gate, up and down expert
/// tensors' bytes over their expert count (ne[2]) (independent of the engine and the planner).
inline std::vector<int64_t> expert_bytes_from_header(const std::string& path, int n_layer) {
  gguf::OpenOptions oo;
  oo.map_data = false;
  auto g = gguf::GgufModel::open(path, oo);
  EXPECT_TRUE(g.ok());
  std::vector<int64_t> b(size_t(n_layer), 0);
  if (!g.ok()) return b;
  for (const auto& t : g->tensors())
    for (int l = 0; l < n_layer; ++l)
      for (const char* p : {"gate", "up", "down"})
        if (t.name == "blk." + std::to_string(l) + ".ffn_" + p + "_exps.weight") b[size_t(l)] += int64_t(t.nbytes / uint64_t(t.ne[2]));
  return b;
}

/// Tier of expert e of layer l in the plans written here: V (VRAM), H (pinned host), P (pageable
/// host), in turn.
inline char tier_of(int l, int e) { return "VHP"[(l + e) % 3]; }

/// Writes a plan for `ranks` GPUs (one host node) with tier_of's tiers, owner(l, e) as each
/// expert's rank, whole-expert staging (split staging in the layers where `split(l)` is true, when
/// given), into test::scratch_dir(`scratch`)/plan.json; returns the path. The prediction fields are zeros (the tests compute the bookkeeping themselves), or, when
/// `prediction` is given, its vram / link per rank, cpu total and nvme bytes per token and
/// `decode_tok_s` (what bench prints beside its measurement). `tier(l, e)`, when given, replaces
/// tier_of with any plan tier character (V, H, P, C, N: NVMe staged, M: NVMe then CPU).
inline std::string write_plan(const ModelConfig& c, const std::vector<int64_t>& expert_bytes, int ranks,
                              const std::function<int(int, int)>& owner, const std::string& scratch,
                              const std::vector<double>* vram = nullptr, const std::vector<double>* link = nullptr,
                              double cpu = 0, double nvme = 0, double decode_tok_s = 0,
                              const std::function<bool(int)>& split = {},
                              const std::function<char(int, int)>& tier = {}) {
  using nlohmann::json;
  const std::vector<double> zeros(size_t(ranks), 0.0);
  json j{{"format", "ds4-placement-plan"}, {"version", 1}, {"policy", "test"}, {"ranks", ranks},
         {"model", {{"n_layers", c.n_layer}, {"n_experts", c.n_expert}, {"top_k", c.n_expert_used}}},
         {"nodes", json::array({json{{"id", 0}}})},
         {"prediction", json{{"vram_bytes_per_token", vram ? *vram : zeros}, {"link_bytes_per_token", link ? *link : zeros},
                             {"cpu_bytes_per_token", json::array({cpu})}, {"nvme_bytes_per_token", nvme}}}};
  if (decode_tok_s > 0) j["prediction"]["decode_tok_s"] = decode_tok_s;
  j["layers"] = json::array();
  for (int l = 0; l < c.n_layer; ++l) {
    std::string tiers;
    std::vector<int> owners;
    for (int e = 0; e < c.n_expert; ++e) {
      tiers += tier ? tier(l, e) : tier_of(l, e);
      owners.push_back(owner(l, e));
    }
    j["layers"].push_back({{"layer", l}, {"mode", split && split(l) ? "split" : "whole"}, {"expert_bytes", expert_bytes[size_t(l)]}, {"tier", tiers},
                           {"owner", owners}, {"node", std::vector<int>(size_t(c.n_expert), 0)}});
  }
  const std::string path = (test::scratch_dir(scratch) / "plan.json").string();
  std::ofstream(path) << j.dump(1) << "\n";
  return path;
}

/// The routing of the decode steps in `tr`: per layer, the router's ids of every position after
/// the first `prompt_len` (which were the prompt's); each layer must hold prompt_len + gen - 1
/// positions (a test failure and an empty result otherwise). The input of
/// placement::plan_bytes_for_routing.
inline std::vector<std::vector<std::vector<int32_t>>> decode_routes(const ForwardTrace& tr, size_t prompt_len, int gen) {
  std::vector<std::vector<std::vector<int32_t>>> routes;
  for (const auto& layer : tr.router) {
    EXPECT_EQ(layer.size(), prompt_len + size_t(gen) - 1);
    if (layer.size() != prompt_len + size_t(gen) - 1) return {};
    routes.emplace_back(layer.begin() + std::ptrdiff_t(prompt_len), layer.end());
  }
  return routes;
}

}  // namespace ds4::emu_test

// placement/plan_file.h — reading a plan file (`plan --json`, format in plan_report.h) for the
// engine, and the bytes per tier a plan moves for a given routing (exact bookkeeping).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ds4/result.h"
#include "placement/plan.h"

namespace ds4::placement {

/// Routed-expert bytes per decode token by tier (or totals, see the users). Units: bytes.
struct TierBytes {
  std::vector<double> vram;  ///< [gpu] resident expert bytes read
  std::vector<double> link;  ///< [gpu] host->GPU bytes (host-staged and NVMe-staged experts)
  std::vector<double> cpu;   ///< [node index] bytes read by CPU-computed experts
  double nvme = 0;           ///< bytes read from NVMe (staged or CPU-computed)

  double vram_total() const;
  double link_total() const;
  double cpu_total() const;
};

/// A plan file as the engine needs it.
struct PlanFile {
  Plan plan;                          ///< placement; ranks as written in the file
  std::string rule;                   ///< which rule produced it ("planner", or a baseline the planner kept)
  std::vector<int64_t> expert_bytes;  ///< [layer] bytes of one routed expert (as the planner counted)
  std::vector<int> node_ids;          ///< [node index] NUMA node id of the profile's nodes
  int top_k = 0;
  TierBytes predicted;                ///< "prediction": expected decode bytes per token (routing stats)
  double predicted_tok_s = 0;         ///< "prediction.decode_tok_s" (0 when the file has none)
  std::string routing;                ///< routing statistics the plan was made from
};

/// Reads plan file `path` for a model with `n_layers` x `n_experts` routed experts (top `top_k`).
/// Errors name the file, key, layer and expert with expected vs found: a directory, malformed
/// JSON, wrong format/version, a non-string format/policy/rule/routing, negative or non-finite
/// prediction bytes, model.n_layers / model.n_experts / model.top_k / layers / tier length not
/// matching the model, unknown tier character, owner outside [0, ranks) (-1 without GPUs), node
/// outside the file's "nodes", a GPU tier in a plan without GPUs, missing or mistyped
/// expert_bytes or prediction byte arrays (vram/link per GPU, cpu per node).
Result<PlanFile> read_plan_file(const std::string& path, int n_layers, int n_experts, int top_k);

/// Error unless the plan's per-layer `expert_bytes` equal `model_expert_bytes` ([layer] bytes of
/// one routed expert of the model being run, placement/gguf_sizes.h): a plan made for the same
/// shape but another expert type would otherwise be accepted and its byte bookkeeping be wrong.
/// `path` names the plan in the message (layer, expected, found).
Result<void> check_plan_expert_bytes(const PlanFile& f, const std::vector<int64_t>& model_expert_bytes,
                                     const std::string& path);

/// Bytes `plan` moves for an observed routing, summed over tokens: `routes[l][t]` lists the
/// experts token t selected in layer l. Same rules as CostModel::predict: Vram -> vram[owner];
/// Host and NVMe-staged -> link (split mode: 1/R of the bytes on every rank; whole: the owner);
/// Nvme (both kinds) -> nvme; Cpu -> cpu[node]; NVMe-then-CPU -> cpu[owner's node index, 0
/// without GPUs] where `gpu_node_index[g]` is GPU g's node index (empty without GPUs).
TierBytes plan_bytes_for_routing(const Plan& plan, const std::vector<int64_t>& expert_bytes, int n_nodes,
                                 const std::vector<int>& gpu_node_index,
                                 const std::vector<std::vector<std::vector<int32_t>>>& routes);

}  // namespace ds4::placement

// placement/plan_report.h — the dry-run tables and the plan file written by `ds4-offload plan`.
//
// Plan file (JSON), format "ds4-placement-plan" version 1:
//   { "format": "ds4-placement-plan", "version": 1, "policy": "planner",
//     "model": {...}, "quant_mix": "ds4-q2", "hw_profile": "<name>", "ctx": 32768,
//     "prefill_chunk": 2048, "routing": "<stats source>", "ranks": 4,
//     "gpus":  [{"total": bytes, "reserved", "dense", "kv", "workspace", "cache",
//                "expert_capacity", "experts_used", "resident_experts"}],
//     "nodes": [{"id", "capacity", "host_bytes", "cpu_bytes", "pinned_bytes"}],
//     "layers": [{"layer": 0, "mode": "split"|"whole", "expert_bytes": n,
//                 "tier": "VVHHC...",   // one char per expert id: V vram, H pinned host (staged),
//                                       // P pageable host (staged), C cpu, N nvme (staged),
//                                       // M nvme then cpu
//                 "owner": [gpu per expert, -1 without GPUs],
//                 "node":  [host NUMA node index per expert (NVMe index for N/M)]}],
//     "prediction": {...}, "baselines": [{"policy", "prediction"}] }
// The engine loads "layers" with load_plan(); the rest documents how the plan was made.
#pragma once

#include <string>
#include <vector>

#include "placement/cost_model.h"
#include "placement/plan.h"
#include "placement/planner.h"

namespace ds4::placement {

/// A plan with its prediction, for reports.
struct PlannedPolicy {
  Plan plan;
  Prediction prediction;
};

/// Human-readable dry run: model and quant totals, per-GPU VRAM budget, experts and bytes per
/// tier and node, bytes per token on each link, and predictions of `chosen` next to `baselines`.
std::string format_dry_run(const CostModel& cm, const PlanOptions& opt, const std::string& hw_source,
                           const PlannedPolicy& chosen, const std::vector<PlannedPolicy>& baselines);

/// The plan file (format above).
std::string plan_to_json(const CostModel& cm, const PlanOptions& opt, const PlannedPolicy& chosen,
                         const std::vector<PlannedPolicy>& baselines);

/// Reads the placement part of a plan file (policy, ranks, per-layer mode, tiers, owners, nodes)
/// for a model with `n_layers` x `n_experts` and a machine with `ranks` GPUs and `n_nodes` NUMA
/// nodes. Budgets and predictions are not read back. Errors name the file and the first bad field:
/// wrong format/version, layer or expert count, unknown tier character, owner or node out of
/// range, a GPU tier without GPUs.
Result<Plan> load_plan(const std::string& path, int n_layers, int n_experts, int ranks, int n_nodes);

}  // namespace ds4::placement

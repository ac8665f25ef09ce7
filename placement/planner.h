// placement/planner.h — chooses owner GPU, tier and staging mode for every (layer, expert).
//
// Algorithm of the `planner` policy (deterministic; every tie broken by lower layer, then lower
// expert id):
//  1. Budgets. Per GPU: VRAM - reserved - TP share of dense weights - sequence state for --ctx
//     (replicated MQA latent) - workspace (512 MiB + 256 KiB per prefill-chunk token) - staging
//     slots (2 layers x top_k x largest expert) = room for resident experts. Per NUMA node:
//     installed memory - its share of host.reserved. An input that leaves no room for dense
//     weights and state is an error naming the GPU and the numbers.
//  2. Ownership. Per layer, experts in descending p are dealt to GPUs in snake order
//     (0,1,..,R-1,R-1,..,0,...), which balances expected load per layer. Ownership does not
//     depend on VRAM budgets.
// 2b. Co-activation (only when the statistics have pair counts or recorded routes, R >= 2, and
//     PlanOptions::coactivation): experts that fire in the same token and share an owner
//     serialize on its link (whole staging) and its compute. Per layer, a deterministic local
//     search over pairs (i < j, lexicographic, first improvement, at most coactivation_passes
//     sweeps) swaps the owners of i and j when that lowers sum over same-owner pairs of c(a, b)
//     (the probability that one token selects both; routing_stats.h coactivation_rates) and keeps
//     every rank's expected load within mean + max(snake excess, 5% of mean). Swaps keep each
//     rank's expert count. Since sum_r E[n_r^2] = top_k + 2 * (same-owner pair rate), with n_r
//     the token's experts owned by r, this lowers the second moment of per-rank load, a smooth
//     stand-in for E[max_r n_r]. With recorded routes the layer keeps the swaps only if the
//     sampled E[max_r n_r] does not rise. Still budget-independent (statistics and samples only).
//     make_plan keeps the result only if the whole plan does not predict slower than with snake
//     ownership alone, and a note gives both step times.
//  3. Residency. Each GPU takes its owned experts in descending p (across all layers) while they
//     fit (prefix rule: it stops at the first that does not fit), so a larger budget gives a
//     superset of resident experts.
//  4. Host or NVMe. Non-resident experts in descending p get a host copy on their owner's node
//     while every node has room (counting the larger of a whole copy and rank slices); from the
//     first that does not fit on, the rest are read from NVMe (an error without an NVMe device).
//     Page-locking follows memlock: experts are marked pinnable coldest-first until the limit
//     (independent of residency, so residency changes do not reshuffle it); a staged expert that
//     cannot be pinned is copied from pageable memory (links.pageable_h2d_gbps).
//  5. Per layer, the cost model (cost_model.h, sampled routing) picks the best of 2 staging modes
//     (split: every rank fetches 1/R; whole: the owner fetches it) x 9 CPU cut-offs (experts of
//     hot rank >= t in the layer, t in {E, 7E/8, 3E/4, E/2, 3E/8, E/4, E/8, E/16, 0}, are
//     computed on the CPU of their owner's node instead of being staged).
// Steps 3-5 make the predicted decode step non-increasing in each GPU's budget: a plan for a
// larger budget is evaluated on the same samples with a superset of resident experts and the same
// per-expert rules, and an expert can only move up (NVMe -> host -> VRAM). One exception: with
// memlock binding and NVMe faster than pageable H2D, an NVMe expert promoted to pageable host
// memory may copy more slowly; the tests keep NVMe no faster than pageable copies.
//
//  6. The planner then builds the three baselines below on the same inputs and keeps whichever
//     of the four predicts the fastest decode step (ties keep its own); Plan::rule names the
//     winner and a note gives both step times. Each candidate is non-increasing in the VRAM
//     budget, so the minimum is too, and the planner never predicts slower than a baseline.
// Baselines (same budgets and cost model):
//  pocketllm-like   contiguous-id ownership (E/R per rank), nothing resident, every active expert
//                   fetched whole by its owner from host memory (PocketLLM's GGUF path).
//  frequency-greedy contiguous-id ownership; hottest experts resident on their owner while it has
//                   room (prefix rule, as step 3); the rest fetched whole by the owner.
//  all-cpu          every routed expert computed on the CPU (dense work on the GPUs).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ds4/result.h"
#include "placement/cost_model.h"
#include "placement/plan.h"

namespace ds4::placement {

/// Planner settings not in the hardware profile.
struct PlanOptions {
  int64_t ctx = 32768;            ///< context length the KV/state budget is sized for (tokens)
  int64_t prefill_chunk = 2048;   ///< prefill chunk (tokens): workspace and prefill prediction
  int kv_elem_bytes = 2;          ///< compressed KV element size (BF16)
  int samples = 512;              ///< routing samples per layer for decode expectations
  uint64_t seed = 1;              ///< routing sample seed
  bool coactivation = true;       ///< step 2b (co-activation swaps) when the statistics allow it
  int coactivation_passes = 8;    ///< step 2b: at most this many sweeps over all pairs per layer
};

/// The policies `plan` can build.
enum class Policy { Planner, PocketLlm, FrequencyGreedy, AllCpu };

/// Report name of a policy: "planner", "pocketllm-like", "frequency-greedy", "all-cpu".
const char* policy_name(Policy p);

/// VRAM and host budgets before any expert is placed (step 1). Error when dense weights, state
/// and workspace do not fit a GPU, naming it and the byte counts.
Result<Plan> plan_budgets(const CostModel& cm, const PlanOptions& opt);

/// Builds the plan of `policy` (see the file comment). Errors: budgets (above), host memory too
/// small with no NVMe device in the profile.
Result<Plan> make_plan(const CostModel& cm, const PlanOptions& opt, Policy policy);

/// Checks a plan against its budgets: every expert placed exactly once with a valid owner/node,
/// resident bytes within each GPU's capacity, host bytes within each node's capacity, pinned
/// bytes within memlock. Returns the first violation as an Error (used by tests and `plan`).
Result<void> check_plan(const CostModel& cm, const Plan& plan);

}  // namespace ds4::placement

// engine/cli/bench_links.h — bench's per-link figures of one decode row: per rank / GPU the
// backend's bytes per decoded token by tier (device-resident, staged, host) and host -> device,
// the copy link's timing per token and overlap fraction (kernels/link_timing.h; "n/a" / null
// where the backend does not time copies), the expert cache's hits and misses, and beside them
// the plan's prediction (placement::PlanFile::predicted, predicted_tok_s) when a plan is in use.
// cmd_bench.cpp prints these in its three formats; cuda_emu_bench_test checks the JSON.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/cli/bench_measure.h"
#include "placement/plan_file.h"

namespace ds4::cli {

/// The plan's prediction bench compares with: routed-expert bytes per decode token, VRAM-resident
/// and host -> GPU per rank, CPU-read (all nodes) and NVMe, and decode tok/s (0 = not in the file).
struct PlanPrediction {
  bool present = false;  ///< a plan is in use
  std::vector<double> vram, link;  ///< [rank]
  double cpu = 0, nvme = 0, tok_s = 0;
  double vram_total() const;
  double link_total() const;
};
/// The prediction of `pf` (null: present = false).
PlanPrediction plan_prediction(const placement::PlanFile* pf);

/// One decode row's link figures.
struct LinkRow {
  std::string test;                 ///< the row's test name ("tg128 @ d512")
  double tok_s = 0;                 ///< measured decode tok/s (mean over repetitions)
  double dense_bpt = 0;             ///< non-routed-expert weight bytes per token (engine counters)
  bool dense_on_device = false;     ///< dense weights are device-resident (CUDA) rather than host (CPU)
  double nvme_bpt = 0;              ///< routed-expert bytes read from the file per token (store)
  std::vector<RankPerToken> ranks;  ///< per rank / GPU
  dev::LinkTiming link;             ///< all ranks' link timing summed
  uint64_t cache_hits = 0, cache_misses = 0;  ///< expert cache over the test (store counters)
  /// Routed-expert bytes per token read device-resident / in host memory: the tier totals minus
  /// the dense bytes where the dense weights live (never below 0).
  double experts_resident_bpt() const;
  double experts_host_bpt() const;
};
/// The LinkRow of bench test `t` (arguments as LinkRow's fields).
LinkRow link_row(const BenchTest& t, const std::string& test, double tok_s, double dense_bpt, bool dense_on_device,
                 double nvme_bpt);

/// The Markdown table of `rows` (one line per rank, an "all" line, and a "plan" line when `p` is
/// present), header and separator first; "n/a" for unmeasured timing, "-" for no prediction.
std::string links_markdown(const std::vector<LinkRow>& rows, const PlanPrediction& p);
/// JSON fields of one decode row: "ranks" (array, per rank: bytes per token by tier, h2d, copy /
/// stall / host-wait ms per token, overlap or null, copies, plan vram/link or null, and for experts
/// a plan computes on the CPU beside the GPU "cpu_experts_ms_per_token" and
/// "cpu_experts_gpu_idle_ms_per_token", null when none ran or not timed), "overlap"
/// (null when n/a), "copy_ms_per_token", "stall_ms_per_token", "host_wait_ms_per_token",
/// "cache_hits", "cache_misses", "bytes_per_token_experts_resident", "bytes_per_token_experts_host",
/// and "plan" (null without a plan, else its bytes per token per tier, per rank, and decode_tok_s).
nlohmann::json links_json(const LinkRow& r, const PlanPrediction& p);
/// CSV columns (name, value) of one decode row, in a fixed order ("" for a pp row: pass nullptr).
std::vector<std::pair<std::string, std::string>> links_csv(const LinkRow* r, const PlanPrediction& p);

}  // namespace ds4::cli

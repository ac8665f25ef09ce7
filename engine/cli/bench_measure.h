// engine/cli/bench_measure.h — the measurement of one `ds4-offload bench` test on a Session:
// repetitions of reset + prefill + greedy decode, timed, with the weight bytes read during the
// decode steps by the engine's counters (Session::weight_traffic), the expert store's
// (Model::expert_counters) and the backend's own (Model::device_tier_traffic). cmd_bench.cpp
// prints what this returns; tests/cuda_engine's cuda_emu_bench_test runs the same code on the
// emulated CUDA backend and checks the per-tier bytes against the plan and the routing.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ds4/result.h"
#include "engine/session.h"

namespace ds4::cli {

/// One repetition's timings, tokens and the weight bytes read during its decode steps.
struct BenchRep {
  double ttft_s = 0;    // seconds of the prefill eval (the first token comes from its logits)
  double decode_s = 0;  // seconds of the n_gen - 1 single-token decode evals
  uint64_t decode_bytes = 0;         // Session::weight_traffic().total over the decode evals
  uint64_t decode_expert_bytes = 0;  // .routed_experts over the same evals
  // Routed-expert traffic by path over the same evals (the expert store's counters; zero for the
  // default store, whose experts the cores read in place from the GGUF mapping).
  uint64_t staged_bytes = 0;  // host slab -> device slot copies (bytes_host_to_device)
  uint64_t nvme_bytes = 0;    // file -> device slot or host buffer (bytes_nvme_to_device + _to_cpu)
  uint64_t cpu_read_bytes = 0;  // experts a plan computes on the CPU, read by the cores (bytes_cpu_reads)
  DeviceTierTraffic tiers;    // the backend's counters over the same evals (differences)
  std::vector<RankDeviceCounters> ranks;  // per rank (Model::rank_device_counters), differences
  uint64_t cache_hits = 0, cache_misses = 0;  // the expert store's cache over the same evals
  // [rank] experts a plan computes on the CPU beside the GPU, over the same evals
  // (WeightTraffic::cpu_expert_s_by_rank, _idle_s_by_rank differences; idle -1: not timed).
  std::vector<double> cpu_expert_s, cpu_expert_idle_s;
  std::vector<int32_t> tokens;  // the n_gen greedy tokens (argmax; the first from the prefill)
};

/// Runs one repetition: reset, prefill `prompt` (non-empty token ids), n_gen - 1 greedy decode
/// steps (n_gen >= 1). `store` (may be null) is the session's model, whose expert-store and
/// backend counters split the decode traffic by path and tier. Errors: the session's, or a
/// non-finite logit (the message names `model_path`).
Result<BenchRep> bench_run_once(Session& s, const Model* store, const std::vector<int32_t>& prompt, int n_gen,
                                const std::string& model_path);

/// One bench test (a prompt, a generation length) over `reps` >= 1 repetitions: each repetition,
/// and the decode-step bytes summed over all of them.
struct BenchTest {
  std::vector<BenchRep> reps;
  uint64_t decode_bytes = 0, decode_expert_bytes = 0, staged_bytes = 0, nvme_bytes = 0;  // sums over reps
  uint64_t cpu_read_bytes = 0;  // sum over reps
  DeviceTierTraffic tiers;   // sum over reps of BenchRep::tiers
  std::vector<RankDeviceCounters> ranks;  // sum over reps of BenchRep::ranks (per rank)
  uint64_t cache_hits = 0, cache_misses = 0;  // sums over reps
  std::vector<double> cpu_expert_s, cpu_expert_idle_s;  // [rank] sums over reps (idle -1: not timed)
  double decode_tokens = 0;  // reps x (n_gen - 1): the tokens the per-token figures divide by
};

/// Runs bench_run_once `reps` times (arguments as there) and sums the decode-step bytes.
Result<BenchTest> bench_measure(Session& s, const Model* store, const std::vector<int32_t>& prompt, int n_gen,
                                int reps, const std::string& model_path);

/// Bytes per decoded token by tier from the backend's counters, as bench reports them: the
/// summed BenchTest::tiers over BenchTest::decode_tokens (0 when no token was decoded).
struct TierBytesPerToken {
  double device_resident = 0, staged = 0, host = 0, h2d_staged = 0;
};
TierBytesPerToken tier_bytes_per_token(const BenchTest& t);

/// One rank's (GPU's) decode figures per decoded token, as bench prints them per link: bytes by
/// tier (device-resident, staged, host), the host -> device bytes, and its link timing over the
/// whole test (kernels/link_timing.h; overlap "n/a" unless link.has_overlap()).
struct RankPerToken {
  TierBytesPerToken bytes;
  double copy_ms = 0, stall_ms = 0, host_wait_ms = 0;  // per decoded token
  dev::LinkTiming link;                               // totals over the test
  /// Experts a plan computes on the CPU beside this GPU, per decoded token: host ms spent on them
  /// and GPU ms idle waiting for them (-1: none ran, or not timed).
  double cpu_expert_ms = -1, cpu_idle_ms = -1;
};
/// rank_per_token for every rank of `t` (empty when the model reported no ranks).
std::vector<RankPerToken> rank_per_token(const BenchTest& t);

}  // namespace ds4::cli

// engine/cli/bench_measure.cpp — one `bench` test on a Session (bench_measure.h): timed
// repetitions and the decode-step bytes from the engine's, the store's and the backend's counters.
#include "engine/cli/bench_measure.h"

#include <algorithm>
#include <chrono>

#include "engine/cli/cli_common.h"
#include "staging/expert_store.h"

namespace ds4::cli {
namespace {

int32_t argmax(const std::vector<float>& v) {
  return int32_t(std::max_element(v.begin(), v.end()) - v.begin());
}

/// Staged and NVMe bytes between two snapshots of a store's counters.
void add_store_delta(const staging::StagingCounters& a, const staging::StagingCounters& b, BenchRep* r) {
  r->staged_bytes = b.bytes_host_to_device - a.bytes_host_to_device;
  r->nvme_bytes = (b.bytes_nvme_to_device - a.bytes_nvme_to_device) + (b.bytes_nvme_to_cpu - a.bytes_nvme_to_cpu);
}

}  // namespace

Result<BenchRep> bench_run_once(Session& s, const Model* store, const std::vector<int32_t>& prompt, int n_gen,
                                const std::string& model_path) {
  using Clock = std::chrono::steady_clock;
  s.reset();
  std::vector<float> logits;
  BenchRep rep;
  const auto t0 = Clock::now();
  DS4_TRY_VOID(s.eval(prompt, nullptr, &logits));
  rep.ttft_s = std::chrono::duration<double>(Clock::now() - t0).count();
  const int64_t vocab = int64_t(logits.size());
  DS4_TRY_VOID(check_finite_logits(logits, vocab, int64_t(prompt.size()) - 1, model_path));
  int32_t tok = argmax(logits);
  rep.tokens.push_back(tok);
  const WeightTraffic w0 = s.weight_traffic();
  const staging::StagingCounters c0 = store ? store->expert_counters() : staging::StagingCounters{};
  const DeviceTierTraffic d0 = store ? store->device_tier_traffic() : DeviceTierTraffic{};
  const auto t1 = Clock::now();
  for (int i = 1; i < n_gen; ++i) {
    const int32_t one[1] = {tok};
    DS4_TRY_VOID(s.eval(one, nullptr, &logits));
    DS4_TRY_VOID(check_finite_logits(logits, vocab, int64_t(prompt.size()) + i - 1, model_path));
    tok = argmax(logits);
    rep.tokens.push_back(tok);
  }
  rep.decode_s = std::chrono::duration<double>(Clock::now() - t1).count();
  const WeightTraffic w1 = s.weight_traffic();
  rep.decode_bytes = w1.total - w0.total;
  rep.decode_expert_bytes = w1.routed_experts - w0.routed_experts;
  if (store) {
    add_store_delta(c0, store->expert_counters(), &rep);
    const DeviceTierTraffic d1 = store->device_tier_traffic();
    rep.tiers = {d1.device_resident - d0.device_resident, d1.staged - d0.staged, d1.host - d0.host,
                 d1.h2d_staged - d0.h2d_staged};
  }
  return rep;
}

Result<BenchTest> bench_measure(Session& s, const Model* store, const std::vector<int32_t>& prompt, int n_gen,
                                int reps, const std::string& model_path) {
  BenchTest t;
  for (int r = 0; r < reps; ++r) {
    DS4_TRY(BenchRep rep, bench_run_once(s, store, prompt, n_gen, model_path));
    t.decode_bytes += rep.decode_bytes;
    t.decode_expert_bytes += rep.decode_expert_bytes;
    t.staged_bytes += rep.staged_bytes;
    t.nvme_bytes += rep.nvme_bytes;
    t.tiers.device_resident += rep.tiers.device_resident;
    t.tiers.staged += rep.tiers.staged;
    t.tiers.host += rep.tiers.host;
    t.tiers.h2d_staged += rep.tiers.h2d_staged;
    t.reps.push_back(std::move(rep));
  }
  t.decode_tokens = double(reps) * double(std::max(n_gen - 1, 0));
  return t;
}

TierBytesPerToken tier_bytes_per_token(const BenchTest& t) {
  if (t.decode_tokens <= 0) return {};
  const double n = t.decode_tokens;
  return {double(t.tiers.device_resident) / n, double(t.tiers.staged) / n, double(t.tiers.host) / n,
          double(t.tiers.h2d_staged) / n};
}

}  // namespace ds4::cli

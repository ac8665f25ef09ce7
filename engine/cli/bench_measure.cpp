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
  r->cpu_read_bytes = b.bytes_cpu_reads - a.bytes_cpu_reads;
  r->cache_hits = b.cache_hits - a.cache_hits;
  r->cache_misses = b.cache_misses - a.cache_misses;
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
  const std::vector<RankDeviceCounters> k0 = store ? store->rank_device_counters() : std::vector<RankDeviceCounters>{};
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
  for (size_t k = 0; k < w1.cpu_expert_s_by_rank.size() && k < w0.cpu_expert_s_by_rank.size(); ++k) {
    rep.cpu_expert_s.push_back(w1.cpu_expert_s_by_rank[k] - w0.cpu_expert_s_by_rank[k]);
    const double i0 = w0.cpu_expert_idle_s_by_rank[k], i1 = w1.cpu_expert_idle_s_by_rank[k];
    rep.cpu_expert_idle_s.push_back(i1 < 0 ? -1.0 : i1 - std::max(0.0, i0));
  }
  if (store) {
    add_store_delta(c0, store->expert_counters(), &rep);
    const DeviceTierTraffic d1 = store->device_tier_traffic();
    rep.tiers = {d1.device_resident - d0.device_resident, d1.staged - d0.staged, d1.host - d0.host,
                 d1.h2d_staged - d0.h2d_staged};
    const std::vector<RankDeviceCounters> k1 = store->rank_device_counters();
    for (size_t k = 0; k < k1.size() && k < k0.size(); ++k) {
      const DeviceTierTraffic &a = k0[k].tiers, &b = k1[k].tiers;
      rep.ranks.push_back({{b.device_resident - a.device_resident, b.staged - a.staged, b.host - a.host,
                            b.h2d_staged - a.h2d_staged},
                           k1[k].link.since(k0[k].link)});
    }
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
    t.cpu_read_bytes += rep.cpu_read_bytes;
    t.tiers.device_resident += rep.tiers.device_resident;
    t.tiers.staged += rep.tiers.staged;
    t.tiers.host += rep.tiers.host;
    t.tiers.h2d_staged += rep.tiers.h2d_staged;
    t.cache_hits += rep.cache_hits;
    t.cache_misses += rep.cache_misses;
    if (t.cpu_expert_s.size() < rep.cpu_expert_s.size()) {
      t.cpu_expert_s.resize(rep.cpu_expert_s.size(), 0.0);
      t.cpu_expert_idle_s.resize(rep.cpu_expert_s.size(), 0.0);
    }
    for (size_t k = 0; k < rep.cpu_expert_s.size(); ++k) {
      t.cpu_expert_s[k] += rep.cpu_expert_s[k];
      const double i = rep.cpu_expert_idle_s[k];
      t.cpu_expert_idle_s[k] = i < 0 || t.cpu_expert_idle_s[k] < 0 ? -1.0 : t.cpu_expert_idle_s[k] + i;
    }
    if (t.ranks.size() < rep.ranks.size()) t.ranks.resize(rep.ranks.size());
    for (size_t k = 0; k < rep.ranks.size(); ++k) {
      DeviceTierTraffic& d = t.ranks[k].tiers;
      const DeviceTierTraffic& e = rep.ranks[k].tiers;
      d.device_resident += e.device_resident;
      d.staged += e.staged;
      d.host += e.host;
      d.h2d_staged += e.h2d_staged;
      t.ranks[k].link += rep.ranks[k].link;
    }
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

std::vector<RankPerToken> rank_per_token(const BenchTest& t) {
  std::vector<RankPerToken> v;
  const double n = t.decode_tokens;
  for (const RankDeviceCounters& r : t.ranks) {
    RankPerToken p;
    p.link = r.link;
    if (n > 0) {
      p.bytes = {double(r.tiers.device_resident) / n, double(r.tiers.staged) / n, double(r.tiers.host) / n,
                 double(r.tiers.h2d_staged) / n};
      p.copy_ms = r.link.copy_s * 1e3 / n;
      p.stall_ms = r.link.stall_s * 1e3 / n;
      p.host_wait_ms = r.link.host_wait_s * 1e3 / n;
      const size_t k = v.size();
      if (k < t.cpu_expert_s.size() && t.cpu_expert_s[k] > 0) {
        p.cpu_expert_ms = t.cpu_expert_s[k] * 1e3 / n;
        p.cpu_idle_ms = t.cpu_expert_idle_s[k] < 0 ? -1.0 : t.cpu_expert_idle_s[k] * 1e3 / n;
      }
    }
    v.push_back(p);
  }
  return v;
}

}  // namespace ds4::cli

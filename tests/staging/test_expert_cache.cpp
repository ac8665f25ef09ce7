// tests/staging/test_expert_cache.cpp — cache policies on synthetic routing traces (uniform,
// Zipf, temporal locality) with hit rates printed per policy; the per-step reservation invariant;
// hot entries never evicted; a cache smaller than one step's draws still makes progress; slot
// contents always equal the requested expert's bytes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <set>

#include "staging/expert_cache.h"

namespace ds4::staging {
namespace {

constexpr int kE = 64, kK = 6;
constexpr uint64_t kSlot = 64;

/// Slab content of (layer, expert): every byte a function of both.
uint8_t pattern(int l, int e, uint64_t i) { return static_cast<uint8_t>(l * 131 + e * 7 + i * 3 + 1); }

Result<void> fill(int l, int e, uint8_t* dst) {
  for (uint64_t i = 0; i < kSlot; ++i) dst[i] = pattern(l, e, i);
  return ok();
}

bool holds(const uint8_t* p, int l, int e) {
  for (uint64_t i = 0; i < kSlot; ++i)
    if (p[i] != pattern(l, e, i)) return false;
  return true;
}

enum class Trace { Uniform, Zipf, Temporal };
const char* trace_name(Trace t) { return t == Trace::Uniform ? "uniform" : t == Trace::Zipf ? "zipf(1.1)" : "temporal"; }

/// `steps` steps of kK distinct experts out of kE.
std::vector<std::vector<int>> make_trace(Trace t, int steps, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<double> w(kE);
  for (int e = 0; e < kE; ++e) w[e] = t == Trace::Zipf ? 1.0 / std::pow(e + 1, 1.1) : 1.0;
  std::shuffle(w.begin(), w.end(), rng);  // popular experts are not the low ids
  std::discrete_distribution<int> pick(w.begin(), w.end());
  std::vector<std::vector<int>> out;
  std::vector<int> prev;
  for (int s = 0; s < steps; ++s) {
    std::vector<int> step;
    if (t == Trace::Temporal && !prev.empty()) {
      for (int e : prev)  // each expert of the previous step recurs with probability 0.6
        if (std::uniform_real_distribution<double>(0, 1)(rng) < 0.6) step.push_back(e);
    }
    while (static_cast<int>(step.size()) < kK) {
      const int e = pick(rng);
      if (std::find(step.begin(), step.end(), e) == step.end()) step.push_back(e);
    }
    prev = step;
    out.push_back(step);
  }
  return out;
}

struct RunResult {
  double hit_rate = 0;
  CacheStats stats;
};

/// Replays a trace on one layer, checking the invariants on the way.
RunResult replay(const std::vector<std::vector<int>>& trace, EvictionPolicy pol, int slots,
                 std::vector<int> hot = {}) {
  CacheOptions o;
  o.n_layer = 1;
  o.n_expert = kE;
  o.slots_per_layer = slots;
  o.slot_bytes = kSlot;
  o.policy = pol;
  o.hot = {hot};
  auto c = ExpertCache::create(o, fill);
  EXPECT_TRUE(c.ok()) << c.error().message;
  ExpertCache& cache = **c;
  const std::vector<int>* step_now = nullptr;
  cache.set_eviction_observer([&](int l, int e) {
    if (std::find(hot.begin(), hot.end(), e) != hot.end()) ADD_FAILURE() << "hot expert " << e << " evicted";
    if (step_now && slots - static_cast<int>(hot.size()) >= kK) {
      EXPECT_EQ(std::find(step_now->begin(), step_now->end(), e), step_now->end())
          << "expert " << e << " evicted while its step still needs it";
    }
  });
  for (const auto& step : trace) {
    step_now = &step;
    cache.begin_step(0, step);
    std::vector<const uint8_t*> ptrs;
    for (int e : step) {
      auto p = cache.acquire(0, e);
      EXPECT_TRUE(p.ok());
      EXPECT_TRUE(holds(*p, 0, e)) << "slot content of expert " << e;
      ptrs.push_back(*p);
    }
    // Reservation: when the step fits, every expert of the step is still resident and intact.
    if (slots - static_cast<int>(hot.size()) >= kK)
      for (size_t i = 0; i < step.size(); ++i) {
        EXPECT_TRUE(cache.resident(0, step[i]));
        EXPECT_TRUE(holds(ptrs[i], 0, step[i]));
      }
    for (int h : hot) EXPECT_TRUE(cache.hot(0, h));
    cache.end_step(0);
  }
  return {cache.stats().hit_rate(), cache.stats()};
}

TEST(ExpertCachePolicy, HitRatesOnSyntheticTraces) {
  const int slots = 16, steps = 4000;
  const EvictionPolicy pols[] = {EvictionPolicy::Lru, EvictionPolicy::Lfu, EvictionPolicy::LfuDecay};
  double rate[3][3] = {};
  for (int t = 0; t < 3; ++t) {
    const auto trace = make_trace(static_cast<Trace>(t), steps, 100 + t);
    for (int p = 0; p < 3; ++p) {
      rate[t][p] = replay(trace, pols[p], slots).hit_rate;
      std::printf("trace %-9s policy %-9s slots %d/%d: hit rate %.3f\n", trace_name(static_cast<Trace>(t)),
                  eviction_policy_name(pols[p]), slots, kE, rate[t][p]);
    }
  }
  // Uniform draws are independent of the cache content: any policy hits slots/E of the time.
  for (int p = 0; p < 3; ++p) EXPECT_NEAR(rate[0][p], double(slots) / kE, 0.03);
  // Skewed popularity: frequency-based policies beat recency and beat the uniform rate clearly.
  EXPECT_GT(rate[1][2], rate[1][0] + 0.05);
  EXPECT_GT(rate[1][2], double(slots) / kE + 0.2);
  // Temporal locality: recency-aware policies (LRU, decayed LFU) beat the uniform rate.
  EXPECT_GT(rate[2][0], double(slots) / kE + 0.2);
  EXPECT_GT(rate[2][2], double(slots) / kE + 0.2);
}

TEST(ExpertCache, HotSetIsNeverEvicted) {
  const auto trace = make_trace(Trace::Uniform, 1000, 7);
  const std::vector<int> hot = {3, 17, 42, 63};
  for (EvictionPolicy p : {EvictionPolicy::Lru, EvictionPolicy::Lfu, EvictionPolicy::LfuDecay}) {
    RunResult r = replay(trace, p, 4 + kK, hot);
    EXPECT_GT(r.stats.evictions, 500u);  // plenty of pressure on the warm slots
  }
}

TEST(ExpertCache, ReservationHoldsAtExactlyOneStepOfWarmSlots) {
  // Warm slots == experts per step: every load of a step must evict only other steps' experts.
  const auto trace = make_trace(Trace::Zipf, 2000, 9);
  for (EvictionPolicy p : {EvictionPolicy::Lru, EvictionPolicy::Lfu, EvictionPolicy::LfuDecay}) {
    RunResult r = replay(trace, p, kK + 2, {5, 6});
    EXPECT_EQ(r.stats.bypass, 0u);
  }
}

TEST(ExpertCache, SmallerThanOneStepStillMakesProgress) {
  const auto trace = make_trace(Trace::Temporal, 500, 11);
  for (EvictionPolicy p : {EvictionPolicy::Lru, EvictionPolicy::Lfu, EvictionPolicy::LfuDecay}) {
    RunResult r = replay(trace, p, 3, {1});  // 2 warm slots for 6 experts per step
    EXPECT_GT(r.stats.bypass, 0u);
    EXPECT_EQ(r.stats.hits + r.stats.misses + r.stats.bypass, uint64_t(500 * kK));
    std::printf("3 slots (1 hot), %s: hits %llu misses %llu bypass %llu\n", eviction_policy_name(p),
                (unsigned long long)r.stats.hits, (unsigned long long)r.stats.misses,
                (unsigned long long)r.stats.bypass);
  }
}

TEST(ExpertCache, UnannouncedAcquiresAndPrefetch) {
  CacheOptions o;
  o.n_layer = 2;
  o.n_expert = kE;
  o.slots_per_layer = 4;
  o.slot_bytes = kSlot;
  o.hot = {{}, {9}};
  auto c = ExpertCache::create(o, fill);
  ASSERT_TRUE(c.ok());
  ExpertCache& cache = **c;
  // Without begin_step every acquire still returns the right bytes.
  for (int i = 0; i < 50; ++i) {
    const int l = i % 2, e = (i * 13) % kE;
    auto p = cache.acquire(l, e);
    ASSERT_TRUE(p.ok());
    ASSERT_TRUE(holds(*p, l, e));
  }
  // Prefetch fills only evictable slots and never displaces a reserved expert.
  const int step[] = {20, 21};
  cache.begin_step(1, step);
  ASSERT_TRUE(cache.acquire(1, 20).ok());
  ASSERT_TRUE(cache.acquire(1, 21).ok());
  const int next[] = {30, 31, 32, 33};
  ASSERT_TRUE(cache.prefetch(1, next).ok());
  EXPECT_TRUE(cache.resident(1, 20));
  EXPECT_TRUE(cache.resident(1, 21));
  EXPECT_TRUE(cache.hot(1, 9));
  EXPECT_TRUE(cache.resident(1, 30));   // the one free-able slot
  EXPECT_FALSE(cache.resident(1, 31));  // nothing else may be displaced
  EXPECT_EQ(cache.stats().prefetched, 1u);
  cache.end_step(1);
  auto p = cache.acquire(1, 30);
  ASSERT_TRUE(p.ok());
  EXPECT_TRUE(holds(*p, 1, 30));
  EXPECT_FALSE(cache.acquire(2, 0).ok());
  EXPECT_FALSE(cache.acquire(0, kE).ok());
}

TEST(ExpertCache, RejectsBadOptions) {
  CacheOptions o;
  o.n_layer = 1;
  o.n_expert = kE;
  o.slots_per_layer = 3;
  o.slot_bytes = kSlot;
  o.hot = {{1, 2, 3}};
  EXPECT_FALSE(ExpertCache::create(o, fill).ok());  // no warm slot left
  o.hot = {{kE}};
  EXPECT_FALSE(ExpertCache::create(o, fill).ok());
  o.hot = {};
  o.decay = 0.0;
  EXPECT_FALSE(ExpertCache::create(o, fill).ok());
}

}  // namespace
}  // namespace ds4::staging

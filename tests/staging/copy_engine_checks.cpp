// tests/staging/copy_engine_checks.cpp — see copy_engine_checks.h.
#include "copy_engine_checks.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "staging/bounce_ring.h"

namespace ds4::staging::testing {

uint8_t slab_byte(int layer, int expert, uint64_t i) {
  return static_cast<uint8_t>((layer * 197 + expert * 31 + static_cast<int>(i % 251) * 5 + static_cast<int>(i / 251)) ^ 0x5a);
}

std::vector<uint8_t> direct_slab(int layer, int expert, uint64_t bytes) {
  std::vector<uint8_t> v(bytes);
  for (uint64_t i = 0; i < bytes; ++i) v[i] = slab_byte(layer, expert, i);
  return v;
}

Result<void> host_consumer_read(CopyEngine& engine, const uint8_t* slot, CopyTicket t, uint8_t* dst, uint64_t bytes) {
  DS4_TRY_VOID(engine.wait(t));
  return engine.copy_to_host(slot, dst, bytes);
}

namespace {

/// `steps` steps of k distinct experts out of n: Zipf(1.1) popularity, or temporal (each expert of
/// the previous step recurs with probability 0.6, the rest uniform).
std::vector<std::vector<int>> make_trace(bool temporal, int n, int k, int steps, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<double> w(static_cast<size_t>(n));
  for (int e = 0; e < n; ++e) w[static_cast<size_t>(e)] = temporal ? 1.0 : 1.0 / std::pow(e + 1, 1.1);
  std::shuffle(w.begin(), w.end(), rng);
  std::discrete_distribution<int> pick(w.begin(), w.end());
  std::vector<std::vector<int>> out;
  std::vector<int> prev;
  for (int s = 0; s < steps; ++s) {
    std::vector<int> step;
    if (temporal)
      for (int e : prev)
        if (std::uniform_real_distribution<double>(0, 1)(rng) < 0.6) step.push_back(e);
    while (static_cast<int>(step.size()) < k) {
      const int e = pick(rng);
      if (std::find(step.begin(), step.end(), e) == step.end()) step.push_back(e);
    }
    prev = step;
    out.push_back(step);
  }
  return out;
}

}  // namespace

uint64_t check_cache_matches_direct_reads(const std::function<std::unique_ptr<CopyEngine>()>& make_engine,
                                          const TraceCheckConfig& cfg, const SlotReader& read) {
  uint64_t compared = 0;
  const EvictionPolicy policies[] = {EvictionPolicy::Lru, EvictionPolicy::Lfu, EvictionPolicy::LfuDecay};
  for (bool temporal : {false, true})
    for (int slots : {3, cfg.k, 2 * cfg.k})
      for (EvictionPolicy pol : policies) {
        SCOPED_TRACE(std::string(temporal ? "temporal" : "zipf") + " slots=" + std::to_string(slots) + " " +
                     eviction_policy_name(pol));
        std::unique_ptr<CopyEngine> eng = make_engine();
        CopyEngine* engine = eng.get();
        // Pinned source: all slabs in engine staging memory (pinned with CUDA).
        std::vector<const uint8_t*> pinned_slab;
        if (cfg.use_pinned_source) {
          for (int l = 0; l < cfg.n_layer; ++l)
            for (int e = 0; e < cfg.n_expert; ++e) {
              Result<uint8_t*> p = engine->alloc_staging(cfg.slot_bytes);
              if (!p) {
                ADD_FAILURE() << p.error().message;
                return compared;
              }
              const std::vector<uint8_t> d = direct_slab(l, e, cfg.slot_bytes);
              std::memcpy(*p, d.data(), d.size());
              pinned_slab.push_back(*p);
            }
        }
        CacheOptions o;
        o.n_layer = cfg.n_layer;
        o.n_expert = cfg.n_expert;
        o.slots_per_layer = slots;
        o.slot_bytes = cfg.slot_bytes;
        o.policy = pol;
        o.bounce_buffers = cfg.bounce_buffers;
        o.wait_on_acquire = false;
        o.hot = {{0}};  // layer 0 keeps expert 0 hot
        const uint64_t sb = cfg.slot_bytes;
        SlotLoader loader = [sb](int l, int e, uint8_t* dst) -> Result<void> {
          for (uint64_t i = 0; i < sb; ++i) dst[i] = slab_byte(l, e, i);
          return ok();
        };
        PinnedSource pinned;
        if (cfg.use_pinned_source)
          pinned = [&, n = cfg.n_expert](int l, int e) {
            return PinnedBytes{pinned_slab[static_cast<size_t>(l * n + e)], sb};
          };
        auto c = ExpertCache::create(o, loader, std::move(eng), pinned);
        if (!c) {
          ADD_FAILURE() << c.error().message;
          return compared;
        }
        ExpertCache& cache = **c;
        std::vector<std::vector<std::vector<int>>> traces;
        for (int l = 0; l < cfg.n_layer; ++l)
          traces.push_back(make_trace(temporal, cfg.n_expert, cfg.k, cfg.steps, 1234 + static_cast<uint64_t>(l)));
        std::vector<uint8_t> got(cfg.slot_bytes);
        int mismatches = 0;
        for (int s = 0; s < cfg.steps; ++s)
          for (int l = 0; l < cfg.n_layer; ++l) {
            const std::vector<int>& step = traces[static_cast<size_t>(l)][static_cast<size_t>(s)];
            if (cfg.announce_steps) cache.begin_step(l, step);
            for (int e : step) {
              Result<const uint8_t*> p = cache.acquire(l, e);
              if (!p) {
                ADD_FAILURE() << p.error().message;
                return compared;
              }
              Result<void> r = read(*engine, *p, cache.ticket(l, e), got.data(), cfg.slot_bytes);
              if (!r) {
                ADD_FAILURE() << r.error().message;
                return compared;
              }
              ++compared;
              Result<void> rel = cache.release_after(l, e, cfg.consumer);
              EXPECT_TRUE(rel.ok()) << (rel ? "" : rel.error().message);
              if (got != direct_slab(l, e, cfg.slot_bytes) && ++mismatches <= 3)
                ADD_FAILURE() << "step " << s << " layer " << l << " expert " << e << ": slot bytes differ from the direct read";
            }
            if (cfg.announce_steps) cache.end_step(l);
            if (cfg.prefetch_next && s + 1 < cfg.steps) {
              Result<void> r = cache.prefetch(l, traces[static_cast<size_t>(l)][static_cast<size_t>(s + 1)]);
              EXPECT_TRUE(r.ok()) << (r ? "" : r.error().message);
            }
          }
        EXPECT_EQ(mismatches, 0);
        EXPECT_GT(cache.stats().misses + cache.stats().bypass, 0u);  // the trace did move data
        EXPECT_TRUE(cache.hot(0, 0));
        if (cfg.use_pinned_source) {
          EXPECT_EQ(cache.bounce_stats().acquires, 0u);
        } else {
          EXPECT_GT(cache.bounce_stats().acquires, 0u);
        }
      }
  return compared;
}

uint64_t check_bounce_ring_no_overwrite(CopyEngine& engine, int ring, int copies, uint64_t bytes) {
  Result<void> a = engine.allocate_slots(1, copies, bytes);
  if (!a) {
    ADD_FAILURE() << a.error().message;
    return 0;
  }
  Result<BounceRing> r = BounceRing::create(engine, ring, bytes);
  if (!r) {
    ADD_FAILURE() << r.error().message;
    return 0;
  }
  BounceRing& R = *r;
  for (int c = 0; c < copies; ++c) {
    Result<BounceRing::Lease> b = R.acquire();
    if (!b) {
      ADD_FAILURE() << b.error().message;
      return 0;
    }
    for (uint64_t i = 0; i < bytes; ++i) b->data[i] = slab_byte(7, c, i);
    Result<CopyTicket> t = engine.submit(0, c, b->data, bytes);
    if (!t) {
      ADD_FAILURE() << t.error().message;
      return 0;
    }
    R.release(*b, *t);
  }
  std::vector<uint8_t> got(bytes);
  for (int c = 0; c < copies; ++c) {
    Result<void> rd = engine.copy_to_host(engine.slot(0, c), got.data(), bytes);
    if (!rd) {
      ADD_FAILURE() << rd.error().message;
      return 0;
    }
    EXPECT_TRUE(got == direct_slab(7, c, bytes)) << "slot " << c << " does not hold the pattern copied into it";
  }
  EXPECT_EQ(R.stats().acquires, static_cast<uint64_t>(copies));
  return R.stats().blocked;
}

}  // namespace ds4::staging::testing

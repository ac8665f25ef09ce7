// tests/staging/test_copy_engine.cpp — the copy engine behind the expert cache, without a GPU:
// the host memcpy engine through the cache on synthetic traces gives the bytes of direct reads;
// with a deferred engine whose copies stay "in flight" until the test completes them, no slot
// is reused while its copy is pending and the bounce ring never hands out a buffer whose copy
// has not run (a deferred copy reads its source only when completed, so an overwrite shows up as
// wrong slot bytes).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <random>
#include <set>

#include "copy_engine_checks.h"
#include "staging/bounce_ring.h"
#include "staging/copy_engine.h"
#include "staging/expert_cache.h"

namespace ds4::staging {
namespace {

using testing::direct_slab;
using testing::slab_byte;

/// Host engine whose copies run only when the test (or a wait) completes them, in submission
/// order. Counts submissions into a slot that still has a pending copy (`reuse_violations`).
class DeferredEngine final : public CopyEngine {
 public:
  ~DeferredEngine() override {
    EXPECT_EQ(reuse_violations, 0) << "a slot was overwritten while its previous copy was in flight";
  }
  const char* name() const override { return "deferred-test"; }
  bool device_slots() const override { return false; }
  Result<void> allocate_slots(int n_layer, int slots, uint64_t bytes) override {
    slots_ = slots;
    bytes_ = bytes;
    mem_.assign(static_cast<size_t>(n_layer * slots) * bytes, 0);
    return ok();
  }
  uint8_t* slot(int layer, int s) const override {
    return const_cast<uint8_t*>(mem_.data()) + static_cast<uint64_t>(layer * slots_ + s) * bytes_;
  }
  Result<uint8_t*> alloc_staging(uint64_t bytes) override {
    staging_.emplace_back(bytes);
    return staging_.back().data();
  }
  Result<CopyTicket> submit(int layer, int s, const void* src, uint64_t bytes) override {
    uint8_t* dst = slot(layer, s);
    for (const Pending& p : pending_)
      if (p.dst == dst) ++reuse_violations;
    pending_.push_back({++last_, dst, static_cast<const uint8_t*>(src), bytes});
    ++submitted;
    return CopyTicket{last_};
  }
  bool ready(CopyTicket t) override { return t.id <= done_; }
  Result<void> wait(CopyTicket t) override {
    if (t.id > done_) ++blocking_waits;
    complete_upto(t.id);
    return ok();
  }
  Result<void> stream_wait(CopyTicket t, StreamHandle) override { return wait(t); }
  Result<void> consumer_done(int layer, int s, StreamHandle) override {
    consumed.push_back(slot(layer, s));
    return ok();
  }
  StreamHandle copy_stream() const override { return nullptr; }
  EventHandle event(CopyTicket) override { return nullptr; }
  Result<void> copy_to_host(const uint8_t* a, void* dst, uint64_t bytes) override {
    complete_all();  // contract: after every submitted copy
    std::memcpy(dst, a, bytes);
    return ok();
  }
  /// Runs pending copies with ticket <= id.
  void complete_upto(uint64_t id) {
    while (!pending_.empty() && pending_.front().id <= id) {
      const Pending& p = pending_.front();
      std::memcpy(p.dst, p.src, p.bytes);
      done_ = p.id;
      pending_.pop_front();
    }
  }
  void complete_all() { complete_upto(last_); }
  size_t in_flight() const { return pending_.size(); }

  int reuse_violations = 0, blocking_waits = 0, submitted = 0;
  std::vector<const uint8_t*> consumed;  // slot addresses passed to consumer_done

 private:
  struct Pending {
    uint64_t id;
    uint8_t* dst;
    const uint8_t* src;
    uint64_t bytes;
  };
  int slots_ = 0;
  uint64_t bytes_ = 0;
  std::vector<uint8_t> mem_;
  std::deque<std::vector<uint8_t>> staging_;
  std::deque<Pending> pending_;
  uint64_t last_ = 0, done_ = 0;
};

constexpr uint64_t kBytes = 256;

SlotLoader pattern_loader(uint64_t bytes) {
  return [bytes](int l, int e, uint8_t* dst) -> Result<void> {
    for (uint64_t i = 0; i < bytes; ++i) dst[i] = slab_byte(l, e, i);
    return ok();
  };
}

bool slot_holds(const uint8_t* p, int l, int e, uint64_t bytes) {
  return std::equal(p, p + bytes, direct_slab(l, e, bytes).begin());
}

TEST(HostCopyEngine, CopiesAtOnceAndRejectsOutOfRangeSlots) {
  auto eng = make_host_copy_engine();
  ASSERT_TRUE(eng->allocate_slots(2, 3, kBytes).ok());
  std::vector<uint8_t> src = direct_slab(1, 5, kBytes);
  auto t = eng->submit(1, 2, src.data(), kBytes);
  ASSERT_TRUE(t.ok());
  EXPECT_NE(t->id, 0u);
  EXPECT_TRUE(eng->ready(*t));
  EXPECT_TRUE(slot_holds(eng->slot(1, 2), 1, 5, kBytes));
  EXPECT_FALSE(eng->submit(2, 0, src.data(), kBytes).ok());      // layer out of range
  EXPECT_FALSE(eng->submit(0, 3, src.data(), kBytes).ok());      // slot out of range
  EXPECT_FALSE(eng->submit(0, 0, src.data(), kBytes + 1).ok());  // larger than a slot
  EXPECT_EQ(eng->slot(0, 1) - eng->slot(0, 0), static_cast<ptrdiff_t>(kBytes));
}

TEST(CudaCopyEngine, UnavailableWithoutCudaIsAnErrorNotACrash) {
  auto e = make_cuda_copy_engine(0);
  if (e.ok()) GTEST_SKIP() << "this build has CUDA and a device; covered by staging_copy_engine_gpu_test";
  EXPECT_FALSE(e.error().message.empty());
}

TEST(CopyEngineCache, HostEngineThroughCacheMatchesDirectReads) {
  testing::TraceCheckConfig cfg;
  const uint64_t n = testing::check_cache_matches_direct_reads([] { return make_host_copy_engine(); }, cfg);
  EXPECT_GT(n, 0u);
  cfg.use_pinned_source = true;  // the direct (no bounce) path
  cfg.announce_steps = false;    // unannounced acquires
  EXPECT_GT(testing::check_cache_matches_direct_reads([] { return make_host_copy_engine(); }, cfg), 0u);
}

TEST(CopyEngineCache, DeferredEngineThroughCacheMatchesDirectReads) {
  // Copies complete only when the consumer waits for their ticket: the cache must hand out
  // tickets that cover its slot, and never reuse a slot or bounce buffer before its copy ran
  // (the engine's destructor checks the reuse counter).
  testing::TraceCheckConfig cfg;
  cfg.bounce_buffers = 3;
  auto make = [] { return std::unique_ptr<CopyEngine>(std::make_unique<DeferredEngine>()); };
  EXPECT_GT(testing::check_cache_matches_direct_reads(make, cfg), 0u);
  // Random steps with prefetches left in flight across steps, cache kept alive for the counters.
  auto eng = std::make_unique<DeferredEngine>();
  DeferredEngine* E = eng.get();
  CacheOptions o;
  o.n_layer = 1;
  o.n_expert = 32;
  o.slots_per_layer = 6;
  o.slot_bytes = kBytes;
  o.wait_on_acquire = false;
  auto c = ExpertCache::create(o, pattern_loader(kBytes), std::move(eng));
  ASSERT_TRUE(c.ok()) << c.error().message;
  std::mt19937 rng(7);
  std::vector<uint8_t> got(kBytes);
  for (int s = 0; s < 400; ++s) {
    std::vector<int> step;
    while (step.size() < 4) {
      const int e = std::uniform_int_distribution<int>(0, 31)(rng);
      if (std::find(step.begin(), step.end(), e) == step.end()) step.push_back(e);
    }
    (*c)->begin_step(0, step);
    std::vector<std::pair<int, const uint8_t*>> held;
    for (int e : step) {
      auto p = (*c)->acquire(0, e);
      ASSERT_TRUE(p.ok());
      held.push_back({e, *p});
    }
    // Consumer: wait for each slot's ticket, then read it.
    for (auto [e, p] : held) {
      ASSERT_TRUE(E->wait((*c)->ticket(0, e)).ok());
      ASSERT_TRUE(slot_holds(p, 0, e, kBytes)) << "step " << s << " expert " << e;
    }
    (*c)->end_step(0);
    // Prefetch a few random experts and leave their copies in flight into the next step.
    std::vector<int> pf = {std::uniform_int_distribution<int>(0, 31)(rng), std::uniform_int_distribution<int>(0, 31)(rng)};
    ASSERT_TRUE((*c)->prefetch(0, pf).ok());
  }
  EXPECT_EQ(E->reuse_violations, 0) << "a slot was overwritten while its previous copy was in flight";
  EXPECT_GT(E->submitted, 100);
}

TEST(CopyEngineCache, SlotWithUnfinishedTicketIsNeverEvicted) {
  auto eng = std::make_unique<DeferredEngine>();
  DeferredEngine* E = eng.get();
  CacheOptions o;
  o.n_layer = 1;
  o.n_expert = 16;
  o.slots_per_layer = 4;
  o.slot_bytes = kBytes;
  o.policy = EvictionPolicy::Lfu;
  o.wait_on_acquire = false;
  o.bounce_buffers = 8;  // the ring must not be what forces completions here
  auto c = ExpertCache::create(o, pattern_loader(kBytes), std::move(eng));
  ASSERT_TRUE(c.ok()) << c.error().message;
  ExpertCache& cache = **c;
  std::vector<int> evicted;
  cache.set_eviction_observer([&](int, int e) { evicted.push_back(e); });
  // Experts 3 and 4: used twice each, copies completed.
  for (int rep = 0; rep < 2; ++rep)
    for (int e : {3, 4}) ASSERT_TRUE(cache.acquire(0, e).ok());
  E->complete_all();
  // Experts 1 and 2: prefetched (no use, so the lowest LFU score), copies left in flight.
  const int pf[] = {1, 2};
  ASSERT_TRUE(cache.prefetch(0, pf).ok());
  ASSERT_EQ(E->in_flight(), 2u);
  ASSERT_FALSE(E->ready(cache.ticket(0, 1)));
  // A miss on 5 must evict a completed slot (3 or 4), not the lower-scored in-flight 1 or 2.
  ASSERT_TRUE(cache.acquire(0, 5).ok());
  ASSERT_EQ(evicted.size(), 1u);
  EXPECT_TRUE(evicted[0] == 3 || evicted[0] == 4) << "evicted " << evicted[0];
  EXPECT_TRUE(cache.resident(0, 1));
  EXPECT_TRUE(cache.resident(0, 2));
  EXPECT_EQ(E->blocking_waits, 0);
  EXPECT_EQ(cache.stats().inflight_waits, 0u);
  // 6 takes the other completed slot; then every evictable slot (1, 2, 5, 6) is in flight, and a
  // miss on 7 must wait for a copy before reusing its slot.
  ASSERT_TRUE(cache.acquire(0, 6).ok());
  ASSERT_EQ(evicted.size(), 2u);
  EXPECT_EQ(evicted[0] + evicted[1], 3 + 4);
  EXPECT_EQ(cache.stats().inflight_waits, 0u);
  ASSERT_EQ(E->in_flight(), 4u);
  ASSERT_TRUE(cache.acquire(0, 7).ok());
  ASSERT_EQ(evicted.size(), 3u);
  EXPECT_TRUE(evicted[2] == 1 || evicted[2] == 2 || evicted[2] == 5 || evicted[2] == 6);
  EXPECT_EQ(E->reuse_violations, 0);
  EXPECT_EQ(cache.stats().inflight_waits, 1u);
  EXPECT_GE(E->blocking_waits, 1);
  E->complete_all();
  for (int e = 0; e < 16; ++e)
    if (cache.resident(0, e)) {
      auto p = cache.acquire(0, e);
      ASSERT_TRUE(p.ok());
      EXPECT_TRUE(slot_holds(*p, 0, e, kBytes)) << "expert " << e;
    }
}

TEST(CopyEngineCache, WaitOnAcquireCompletesTheCopy) {
  auto eng = std::make_unique<DeferredEngine>();
  DeferredEngine* E = eng.get();
  CacheOptions o;
  o.n_layer = 1;
  o.n_expert = 8;
  o.slots_per_layer = 2;
  o.slot_bytes = kBytes;
  o.hot = {{5}};
  auto c = ExpertCache::create(o, pattern_loader(kBytes), std::move(eng));
  ASSERT_TRUE(c.ok()) << c.error().message;
  for (int e : {5, 1, 2, 3, 1}) {  // hot hit, misses, bypass-free evictions
    auto p = (*c)->acquire(0, e);
    ASSERT_TRUE(p.ok());
    EXPECT_TRUE(E->ready((*c)->ticket(0, e)));
    EXPECT_TRUE(slot_holds(*p, 0, e, kBytes)) << "expert " << e;
  }
  EXPECT_EQ(E->reuse_violations, 0);
}

TEST(CopyEngineCache, ReleaseAfterNamesTheSlotHoldingTheExpert) {
  auto eng = std::make_unique<DeferredEngine>();
  DeferredEngine* E = eng.get();
  CacheOptions o;
  o.n_layer = 2;
  o.n_expert = 8;
  o.slots_per_layer = 2;
  o.slot_bytes = kBytes;
  auto c = ExpertCache::create(o, pattern_loader(kBytes), std::move(eng));
  ASSERT_TRUE(c.ok()) << c.error().message;
  auto p = (*c)->acquire(1, 3);
  ASSERT_TRUE(p.ok());
  ASSERT_TRUE((*c)->release_after(1, 3, nullptr).ok());
  ASSERT_EQ(E->consumed.size(), 1u);
  EXPECT_EQ(E->consumed[0], *p);
  // Bypass slot: reserve two experts in a one-warm-slot layer; the second streams through it.
  const int step[] = {4, 5, 6};
  (*c)->begin_step(0, step);
  for (int e : step) ASSERT_TRUE((*c)->acquire(0, e).ok());
  EXPECT_EQ((*c)->stats().bypass, 1u);
  auto pb = (*c)->acquire(0, 6);
  ASSERT_TRUE(pb.ok());
  ASSERT_TRUE((*c)->release_after(0, 6, nullptr).ok());
  EXPECT_EQ(E->consumed.back(), *pb);
  EXPECT_FALSE((*c)->release_after(0, 7, nullptr).ok());  // not held
  EXPECT_FALSE((*c)->release_after(2, 0, nullptr).ok());  // layer out of range
}

TEST(BounceRing, NeverOverwritesAnInFlightBuffer) {
  DeferredEngine E;
  // 2 buffers, 7 copies, none completed by the test: acquires 3..7 must each block on (and so
  // complete) the copy that last read their buffer; the deferred copies read their source only
  // then, so an early overwrite would put the wrong pattern in a slot.
  const uint64_t blocked = testing::check_bounce_ring_no_overwrite(E, 2, 7, kBytes);
  EXPECT_EQ(blocked, 5u);
  EXPECT_EQ(E.reuse_violations, 0);
}

TEST(BounceRing, DoesNotBlockWhenCopiesHaveCompleted) {
  auto eng = make_host_copy_engine();
  EXPECT_EQ(testing::check_bounce_ring_no_overwrite(*eng, 2, 7, kBytes), 0u);
}

TEST(BounceRing, RejectsBadSizes) {
  auto eng = make_host_copy_engine();
  EXPECT_FALSE(BounceRing::create(*eng, 0, 64).ok());
  EXPECT_FALSE(BounceRing::create(*eng, 2, 0).ok());
  CacheOptions o;
  o.n_layer = 1;
  o.n_expert = 4;
  o.slots_per_layer = 2;
  o.slot_bytes = 64;
  o.bounce_buffers = 0;
  EXPECT_FALSE(ExpertCache::create(o, pattern_loader(64)).ok());
}

}  // namespace
}  // namespace ds4::staging

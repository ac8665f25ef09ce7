// staging/expert_cache.cpp — see expert_cache.h.
#include "staging/expert_cache.h"
#include "ds4/format_number.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

namespace ds4::staging {

const char* eviction_policy_name(EvictionPolicy p) {
  switch (p) {
    case EvictionPolicy::Lru: return "lru";
    case EvictionPolicy::Lfu: return "lfu";
    case EvictionPolicy::LfuDecay: return "lfu-decay";
  }
  return "?";
}

Result<std::unique_ptr<ExpertCache>> ExpertCache::create(const CacheOptions& opts, SlotLoader loader,
                                                         std::unique_ptr<CopyEngine> engine, PinnedSource pinned) {
  if (opts.n_layer < 1 || opts.n_expert < 1 || opts.slots_per_layer < 1 || opts.slot_bytes == 0)
    return Error{"expert cache: expected n_layer, n_expert, slots_per_layer and slot_bytes > 0, found " +
                 std::to_string(opts.n_layer) + ", " + std::to_string(opts.n_expert) + ", " +
                 std::to_string(opts.slots_per_layer) + ", " + std::to_string(opts.slot_bytes)};
  if (!(opts.decay > 0.0 && opts.decay <= 1.0))
    return Error{"expert cache: decay expected in (0, 1], found " + format_number(opts.decay)};
  if (opts.bounce_buffers < 1)
    return Error{"expert cache: bounce_buffers expected >= 1, found " + std::to_string(opts.bounce_buffers)};
  std::unique_ptr<ExpertCache> c(new ExpertCache());
  c->opt_ = opts;
  c->loader_ = std::move(loader);
  c->pinned_ = std::move(pinned);
  c->engine_ = engine ? std::move(engine) : make_host_copy_engine();
  // One extra slot per layer: the bypass slot.
  DS4_TRY_VOID(c->engine_->allocate_slots(opts.n_layer, opts.slots_per_layer + 1, opts.slot_bytes));
  DS4_TRY(c->ring_, BounceRing::create(*c->engine_, opts.bounce_buffers, opts.slot_bytes));
  c->layers_.resize(static_cast<size_t>(opts.n_layer));
  for (int l = 0; l < opts.n_layer; ++l) {
    Layer& L = c->layers_[static_cast<size_t>(l)];
    L.slots.resize(static_cast<size_t>(opts.slots_per_layer));
    L.slot_of.assign(static_cast<size_t>(opts.n_expert), -1);
    L.freq.assign(static_cast<size_t>(opts.n_expert), 0.0);
    L.freq_step.assign(static_cast<size_t>(opts.n_expert), 0);
    L.last_use.assign(static_cast<size_t>(opts.n_expert), 0);
    L.reserved.assign(static_cast<size_t>(opts.n_expert), 0);
    const std::vector<int>* hot = static_cast<size_t>(l) < opts.hot.size() ? &opts.hot[static_cast<size_t>(l)] : nullptr;
    if (hot && static_cast<int>(hot->size()) > opts.slots_per_layer - 1)
      return Error{"expert cache: layer " + std::to_string(l) + ": hot set of " + std::to_string(hot->size()) +
                   " experts, expected at most slots_per_layer - 1 = " + std::to_string(opts.slots_per_layer - 1)};
    int s = 0;
    if (hot)
      for (int e : *hot) {
        if (e < 0 || e >= opts.n_expert)
          return Error{"expert cache: layer " + std::to_string(l) + ": hot expert " + std::to_string(e) +
                       " out of range [0, " + std::to_string(opts.n_expert) + ")"};
        if (L.slot_of[static_cast<size_t>(e)] >= 0) continue;
        DS4_TRY_VOID(c->fill(l, s, e, &L.slots[static_cast<size_t>(s)].ticket));
        L.slots[static_cast<size_t>(s)].expert = e;
        L.slots[static_cast<size_t>(s)].hot = true;
        L.slot_of[static_cast<size_t>(e)] = s;
        ++s;
      }
    L.free_warm = opts.slots_per_layer - s;
  }
  return c;
}

uint8_t* ExpertCache::slot_ptr(int layer, int slot) { return engine_->slot(layer, slot); }

Result<void> ExpertCache::fill(int layer, int slot, int expert, CopyTicket* t) {
  // Never overwrite a slot whose previous copy is still in flight.
  if (!engine_->ready(*t)) {
    ++stats_.inflight_waits;
    DS4_TRY_VOID(engine_->wait(*t));
  }
  const PinnedBytes direct = pinned_ ? pinned_(layer, expert) : PinnedBytes{};
  if (direct.data) {
    DS4_CHECK(direct.bytes <= opt_.slot_bytes);
    DS4_TRY(*t, engine_->submit(layer, slot, direct.data, direct.bytes));
  } else {
    DS4_TRY(BounceRing::Lease b, ring_.acquire());
    Result<void> r = loader_(layer, expert, b.data);
    if (!r) {
      ring_.release(b, CopyTicket{});
      return r.error();
    }
    Result<CopyTicket> nt = engine_->submit(layer, slot, b.data, opt_.slot_bytes);
    ring_.release(b, nt ? *nt : CopyTicket{});
    if (!nt) return nt.error();
    *t = *nt;
  }
  stats_.bytes_loaded += opt_.slot_bytes;
  return ok();
}
uint8_t* ExpertCache::bypass_ptr(int layer) { return slot_ptr(layer, opt_.slots_per_layer); }

double ExpertCache::score(const Layer& L, int e) const {
  switch (opt_.policy) {
    case EvictionPolicy::Lru: return static_cast<double>(L.last_use[static_cast<size_t>(e)]);
    case EvictionPolicy::Lfu: return L.freq[static_cast<size_t>(e)];
    case EvictionPolicy::LfuDecay:
      return L.freq[static_cast<size_t>(e)] *
             std::pow(opt_.decay, static_cast<double>(L.step - L.freq_step[static_cast<size_t>(e)]));
  }
  return 0.0;
}

void ExpertCache::touch(Layer& L, int e) {
  const size_t i = static_cast<size_t>(e);
  if (opt_.policy == EvictionPolicy::LfuDecay) {
    L.freq[i] = L.freq[i] * std::pow(opt_.decay, static_cast<double>(L.step - L.freq_step[i])) + 1.0;
    L.freq_step[i] = L.step;
  } else {
    L.freq[i] += 1.0;
  }
  L.last_use[i] = ++tick_;
}

int ExpertCache::find_victim(Layer& L) const {
  // Best candidate among slots whose last copy has completed; an in-flight slot is chosen only
  // when no completed one is evictable (fill() then waits for its copy before reusing it).
  int best[2] = {-1, -1};  // [0]: copy completed, [1]: in flight
  double best_score[2] = {std::numeric_limits<double>::infinity(), std::numeric_limits<double>::infinity()};
  int64_t best_use[2] = {std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::max()};
  for (size_t s = 0; s < L.slots.size(); ++s) {
    const Entry& en = L.slots[s];
    const int k = engine_->ready(en.ticket) ? 0 : 1;
    if (en.expert < 0) {
      if (k == 0) return static_cast<int>(s);
      if (best_score[1] > -std::numeric_limits<double>::infinity()) {
        best[1] = static_cast<int>(s);
        best_score[1] = -std::numeric_limits<double>::infinity();
        best_use[1] = std::numeric_limits<int64_t>::min();
      }
      continue;
    }
    if (en.hot || L.reserved[static_cast<size_t>(en.expert)]) continue;
    const double sc = score(L, en.expert);
    const int64_t use = L.last_use[static_cast<size_t>(en.expert)];
    if (sc < best_score[k] || (sc == best_score[k] && use < best_use[k])) {
      best[k] = static_cast<int>(s);
      best_score[k] = sc;
      best_use[k] = use;
    }
  }
  return best[0] >= 0 ? best[0] : best[1];
}

void ExpertCache::begin_step(int layer, std::span<const int> experts) {
  DS4_CHECK(layer >= 0 && layer < opt_.n_layer);
  end_step(layer);
  Layer& L = layers_[static_cast<size_t>(layer)];
  ++L.step;
  if (!opt_.reuse_across_steps) {
    // Step-scoped staging: nothing staged by an earlier step is served again (hot entries stay).
    for (Entry& en : L.slots)
      if (en.expert >= 0 && !en.hot) {
        L.slot_of[static_cast<size_t>(en.expert)] = -1;
        en.expert = -1;
      }
    L.bypass_expert = -1;
  }
  // Slots the reservation may claim: the non-hot slots. Experts already resident keep theirs
  // (pass 1); the others get one while slots remain, the rest go through the bypass slot (pass 2).
  int budget = L.free_warm;
  for (int e : experts) {
    DS4_CHECK(e >= 0 && e < opt_.n_expert);
    const size_t i = static_cast<size_t>(e);
    if (L.reserved[i]) continue;
    L.reserved[i] = 4;  // listed (dedupe marker)
    L.reserved_list.push_back(e);
    touch(L, e);
    const int s = L.slot_of[i];
    if (s >= 0) {
      L.reserved[i] = 1;
      if (!L.slots[static_cast<size_t>(s)].hot) --budget;
    }
  }
  for (int e : L.reserved_list) {
    const size_t i = static_cast<size_t>(e);
    if (L.reserved[i] != 4) continue;
    if (budget > 0) {
      L.reserved[i] = 1;
      --budget;
    } else {
      L.reserved[i] = 2;
    }
  }
}

void ExpertCache::end_step(int layer) {
  Layer& L = layers_[static_cast<size_t>(layer)];
  for (int e : L.reserved_list) L.reserved[static_cast<size_t>(e)] = 0;
  L.reserved_list.clear();
}

Result<int> ExpertCache::load_into_slot(int layer, int expert, bool for_prefetch) {
  Layer& L = layers_[static_cast<size_t>(layer)];
  const int s = find_victim(L);
  if (s < 0) return -1;
  Entry& en = L.slots[static_cast<size_t>(s)];
  if (en.expert >= 0) {
    ++stats_.evictions;
    if (on_evict_) on_evict_(layer, en.expert);
    L.slot_of[static_cast<size_t>(en.expert)] = -1;
    en.expert = -1;
  }
  DS4_TRY_VOID(fill(layer, s, expert, &en.ticket));
  en.expert = expert;
  L.slot_of[static_cast<size_t>(expert)] = s;
  if (for_prefetch) ++stats_.prefetched;
  return s;
}

Result<const uint8_t*> ExpertCache::acquire(int layer, int expert) {
  if (layer < 0 || layer >= opt_.n_layer || expert < 0 || expert >= opt_.n_expert)
    return Error{"expert cache: (layer " + std::to_string(layer) + ", expert " + std::to_string(expert) +
                 ") out of range (" + std::to_string(opt_.n_layer) + " layers, " + std::to_string(opt_.n_expert) +
                 " experts)"};
  Layer& L = layers_[static_cast<size_t>(layer)];
  const size_t i = static_cast<size_t>(expert);
  if (!L.reserved[i]) touch(L, expert);  // reserved experts were counted by begin_step
  const bool sync = opt_.wait_on_acquire;
  if (L.slot_of[i] >= 0) {
    ++stats_.hits;
    const Entry& en = L.slots[static_cast<size_t>(L.slot_of[i])];
    if (sync) DS4_TRY_VOID(engine_->wait(en.ticket));
    return static_cast<const uint8_t*>(slot_ptr(layer, L.slot_of[i]));
  }
  if (L.bypass_expert == expert) {
    ++stats_.hits;
    if (sync) DS4_TRY_VOID(engine_->wait(L.bypass_ticket));
    return static_cast<const uint8_t*>(bypass_ptr(layer));
  }
  if (L.reserved[i] != 2) {
    DS4_TRY(int s, load_into_slot(layer, expert, false));
    DS4_CHECK(s >= 0 || L.reserved[i] == 0);  // a reserved expert always finds a slot
    if (s >= 0) {
      ++stats_.misses;
      if (sync) DS4_TRY_VOID(engine_->wait(L.slots[static_cast<size_t>(s)].ticket));
      return static_cast<const uint8_t*>(slot_ptr(layer, s));
    }
  }
  // No slot may be taken: stream through the bypass slot.
  L.bypass_expert = -1;
  DS4_TRY_VOID(fill(layer, opt_.slots_per_layer, expert, &L.bypass_ticket));
  L.bypass_expert = expert;
  ++stats_.bypass;
  if (sync) DS4_TRY_VOID(engine_->wait(L.bypass_ticket));
  return static_cast<const uint8_t*>(bypass_ptr(layer));
}

Result<void> ExpertCache::prefetch(int layer, std::span<const int> experts) {
  DS4_CHECK(layer >= 0 && layer < opt_.n_layer);
  Layer& L = layers_[static_cast<size_t>(layer)];
  std::vector<int> loaded;
  Result<void> res = ok();
  for (int e : experts) {
    if (e < 0 || e >= opt_.n_expert || L.slot_of[static_cast<size_t>(e)] >= 0) continue;
    Result<int> s = load_into_slot(layer, e, true);
    if (!s) {
      res = s.error();
      break;
    }
    if (*s < 0) break;
    // Protect this call's loads from each other.
    if (!L.reserved[static_cast<size_t>(e)]) {
      L.reserved[static_cast<size_t>(e)] = 3;
      loaded.push_back(e);
    }
  }
  for (int e : loaded) L.reserved[static_cast<size_t>(e)] = 0;
  return res;
}

bool ExpertCache::resident(int layer, int expert) const {
  return layers_[static_cast<size_t>(layer)].slot_of[static_cast<size_t>(expert)] >= 0;
}

CopyTicket ExpertCache::ticket(int layer, int expert) const {
  const Layer& L = layers_[static_cast<size_t>(layer)];
  const int s = L.slot_of[static_cast<size_t>(expert)];
  if (s >= 0) return L.slots[static_cast<size_t>(s)].ticket;
  if (L.bypass_expert == expert) return L.bypass_ticket;
  return {};
}

Result<void> ExpertCache::release_after(int layer, int expert, StreamHandle consumer) {
  if (layer < 0 || layer >= opt_.n_layer || expert < 0 || expert >= opt_.n_expert)
    return Error{"expert cache: release_after (layer " + std::to_string(layer) + ", expert " + std::to_string(expert) +
                 ") out of range"};
  const Layer& L = layers_[static_cast<size_t>(layer)];
  const int s = L.slot_of[static_cast<size_t>(expert)];
  if (s >= 0) return engine_->consumer_done(layer, s, consumer);
  if (L.bypass_expert == expert) return engine_->consumer_done(layer, opt_.slots_per_layer, consumer);
  return Error{"expert cache: release_after (layer " + std::to_string(layer) + ", expert " + std::to_string(expert) +
               "): not held in a slot"};
}

bool ExpertCache::hot(int layer, int expert) const {
  const Layer& L = layers_[static_cast<size_t>(layer)];
  const int s = L.slot_of[static_cast<size_t>(expert)];
  return s >= 0 && L.slots[static_cast<size_t>(s)].hot;
}

}  // namespace ds4::staging

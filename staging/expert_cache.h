// staging/expert_cache.h — the device expert cache: a fixed number of slots per layer (on one
// device), a pinned hot set chosen by the plan, and a warm set managed by a replacement policy
// (LFU with exponential decay by default; LRU and plain LFU for comparison).
//
// Per-step reservation: begin_step(layer, experts) marks the experts one step needs; loading any
// of them never evicts another reserved expert, nor a hot one. When a step needs more experts
// than there are non-hot slots, the surplus (those not already resident) is served through a
// bypass slot (load, use, overwrite), so a cache smaller than one step still makes progress.
// Loads go through a CopyEngine (staging/copy_engine.h): the loader fills a staging buffer of a
// BounceRing (pinned with CUDA), or a PinnedSource names pinned host bytes to copy directly; the
// engine copies into the slot and returns a ticket. A slot whose copy is still in flight is never
// chosen as a victim while another candidate exists, and is waited for before it is overwritten.
// Without CUDA the engine is the host memcpy engine; the cache code is the same.
// Not thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "ds4/result.h"
#include "staging/bounce_ring.h"
#include "staging/copy_engine.h"

namespace ds4::staging {

/// Replacement policy of the warm set.
enum class EvictionPolicy { Lru, Lfu, LfuDecay };
/// "lru", "lfu", "lfu-decay".
const char* eviction_policy_name(EvictionPolicy p);

struct CacheOptions {
  int n_layer = 0;
  int n_expert = 0;
  int slots_per_layer = 8;                      // slots of each layer, hot ones included
  uint64_t slot_bytes = 0;                      // bytes per slot (the largest slab)
  EvictionPolicy policy = EvictionPolicy::LfuDecay;
  double decay = 0.95;                          // LfuDecay: frequency multiplier per step of the layer
  std::vector<std::vector<int>> hot;            // [layer] -> experts pinned for the whole run
  int bounce_buffers = 2;                       // staging buffers (slot_bytes each) in the ring
  bool wait_on_acquire = true;                  // acquire() blocks until the slot's copy is done;
                                                // false: the caller orders on ticket() instead
  bool reuse_across_steps = true;               // false: begin_step forgets every non-hot entry of
                                                // the layer (and its bypass slot), so an expert is
                                                // copied again in every step that uses it (the
                                                // planner's no-reuse staging assumption)
};

/// Copies slab (layer, expert) into `dst` (slot_bytes large): the copy engine.
using SlotLoader = std::function<Result<void>(int layer, int expert, uint8_t* dst)>;
/// Pinned host bytes of (layer, expert) that the engine may copy from directly (no bounce), or
/// {nullptr, 0} to use the SlotLoader through the bounce ring. bytes <= slot_bytes.
struct PinnedBytes {
  const uint8_t* data = nullptr;
  uint64_t bytes = 0;
};
using PinnedSource = std::function<PinnedBytes(int layer, int expert)>;
/// Observer of evictions (layer, evicted expert), for tests and statistics.
using EvictionObserver = std::function<void(int layer, int expert)>;

struct CacheStats {
  uint64_t hits = 0, misses = 0, bypass = 0, evictions = 0, prefetched = 0;
  uint64_t bytes_loaded = 0;
  uint64_t inflight_waits = 0;  // loads that had to wait for the previous copy into their slot
  double hit_rate() const {
    const uint64_t n = hits + misses + bypass;
    return n ? static_cast<double>(hits) / static_cast<double>(n) : 0.0;
  }
};

class ExpertCache {
 public:
  /// Allocates the slots (n_layer * slots_per_layer + one bypass slot per layer) in `engine`
  /// (nullptr: make_host_copy_engine()), the bounce ring, and loads the hot set. `loader` fills a
  /// host staging buffer (slot_bytes) that the engine copies into the slot; `pinned`, when set,
  /// may name pinned bytes to copy directly instead. Errors: a hot list longer than
  /// slots_per_layer - 1 (one slot stays for the warm set), an expert id out of range,
  /// bounce_buffers < 1, a failed allocation, load or copy.
  static Result<std::unique_ptr<ExpertCache>> create(const CacheOptions& opts, SlotLoader loader,
                                                     std::unique_ptr<CopyEngine> engine = nullptr,
                                                     PinnedSource pinned = {});

  /// Reserves `experts` of `layer` for one step and counts one use of each (policy input).
  /// A previous step of the same layer is ended implicitly.
  void begin_step(int layer, std::span<const int> experts);
  /// Releases the reservation of `layer`.
  void end_step(int layer);
  /// The slot holding (layer, expert), loading it on a miss; a device address with a device
  /// engine. With wait_on_acquire the copy has completed on return; otherwise order on ticket(). The pointer stays valid until the
  /// next acquire()/prefetch() of the same layer that loads something, and for reserved and hot
  /// experts until end_step. Error when the loader fails or the ids are out of range.
  Result<const uint8_t*> acquire(int layer, int expert);
  /// Loads `experts` of `layer` into free slots or slots whose entries are neither hot nor
  /// reserved; stops when none is left. Counts as prefetched, not as use.
  Result<void> prefetch(int layer, std::span<const int> experts);

  /// Whether (layer, expert) is in a slot (the bypass slot does not count).
  bool resident(int layer, int expert) const;
  bool hot(int layer, int expert) const;
  /// Ticket of the last copy into the slot (or bypass slot) holding (layer, expert); CopyTicket{}
  /// when not held. A consumer passes it to engine().stream_wait(t, compute_stream).
  CopyTicket ticket(int layer, int expert) const;
  /// Declares that work queued so far on `consumer` reads the slot holding (layer, expert), so a
  /// later copy into that slot is ordered after it (CopyEngine::consumer_done). Error when
  /// (layer, expert) is not held or the engine call fails.
  Result<void> release_after(int layer, int expert, StreamHandle consumer);
  CopyEngine& engine() { return *engine_; }
  const BounceStats& bounce_stats() const { return ring_.stats(); }
  const CacheStats& stats() const { return stats_; }
  void set_eviction_observer(EvictionObserver o) { on_evict_ = std::move(o); }
  const CacheOptions& options() const { return opt_; }

 private:
  ExpertCache() = default;
  struct Entry {
    int expert = -1;       // -1: free
    bool hot = false;
    CopyTicket ticket;     // last copy into this slot
  };
  struct Layer {
    std::vector<Entry> slots;
    std::vector<int> slot_of;        // [expert] -> slot or -1
    std::vector<double> freq;        // [expert] use count (decayed lazily for LfuDecay)
    std::vector<int64_t> freq_step;  // [expert] step at which freq was last updated
    std::vector<int64_t> last_use;   // [expert] global tick of the last use
    std::vector<char> reserved;      // [expert]
    std::vector<int> reserved_list;
    int64_t step = 0;
    int bypass_expert = -1;
    CopyTicket bypass_ticket;
    int free_warm = 0;               // non-hot slots that reservation may still claim
  };
  double score(const Layer& L, int expert) const;
  void touch(Layer& L, int expert);
  int find_victim(Layer& L) const;
  uint8_t* slot_ptr(int layer, int slot);
  uint8_t* bypass_ptr(int layer);
  Result<int> load_into_slot(int layer, int expert, bool for_prefetch);
  /// Waits for `*t` (the slot's previous copy) if still in flight, then copies (layer, expert)
  /// into slot `slot` and stores the new ticket in `*t`.
  Result<void> fill(int layer, int slot, int expert, CopyTicket* t);

  CacheOptions opt_;
  SlotLoader loader_;
  PinnedSource pinned_;
  std::unique_ptr<CopyEngine> engine_;
  BounceRing ring_;
  EvictionObserver on_evict_;
  std::vector<Layer> layers_;
  int64_t tick_ = 0;
  CacheStats stats_;
};

}  // namespace ds4::staging

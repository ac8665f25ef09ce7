// tests/staging/copy_engine_checks.h — checks shared by the unit test (host engine) and the gpu
// test (CUDA engine): the expert cache driven through a copy engine on synthetic routing traces
// must hold exactly the bytes a direct read of each (layer, expert) gives, and the bounce ring
// must not hand out a buffer whose copy is still in flight.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "staging/copy_engine.h"
#include "staging/expert_cache.h"

namespace ds4::staging::testing {

/// Byte i of the synthetic slab of (layer, expert): a function of all three.
uint8_t slab_byte(int layer, int expert, uint64_t i);
/// The direct read: the whole slab of (layer, expert), `bytes` long.
std::vector<uint8_t> direct_slab(int layer, int expert, uint64_t bytes);

/// Reads `bytes` of a slot (address from ExpertCache::acquire) after the copy `t` into it, as a
/// consumer would. Default (host_consumer_read): engine.wait(t) then engine.copy_to_host.
using SlotReader = std::function<Result<void>(CopyEngine& engine, const uint8_t* slot, CopyTicket t, uint8_t* dst,
                                              uint64_t bytes)>;
Result<void> host_consumer_read(CopyEngine& engine, const uint8_t* slot, CopyTicket t, uint8_t* dst, uint64_t bytes);

struct TraceCheckConfig {
  int n_layer = 2, n_expert = 48, k = 6, steps = 120;
  uint64_t slot_bytes = 4096 + 64;  // not a power of two on purpose
  int bounce_buffers = 2;
  bool use_pinned_source = false;  // copy from engine staging memory directly instead of the ring
  bool announce_steps = true;      // begin_step/end_step around each step
  bool prefetch_next = true;       // prefetch the next step's experts of the same layer
  StreamHandle consumer = nullptr; // passed to ExpertCache::release_after after each read
};

/// Replays Zipf and temporal traces for each slot count in {3 (smaller than one step), k, 2k}
/// and each policy, with wait_on_acquire = false: every acquired slot is read back with `read`
/// and compared byte for byte with direct_slab. Reports failures with gtest ADD_FAILURE/EXPECT.
/// Returns the number of slot reads compared.
uint64_t check_cache_matches_direct_reads(const std::function<std::unique_ptr<CopyEngine>()>& make_engine,
                                          const TraceCheckConfig& cfg, const SlotReader& read = host_consumer_read);

/// Pushes `copies` distinct patterns through a ring of `ring` buffers into slots of one layer
/// without waiting in between, then reads every slot back: each must hold its own pattern (an
/// overwritten in-flight buffer would leave another pattern). Returns the ring's blocked count.
uint64_t check_bounce_ring_no_overwrite(CopyEngine& engine, int ring, int copies, uint64_t bytes);

}  // namespace ds4::staging::testing

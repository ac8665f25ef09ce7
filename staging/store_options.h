// staging/store_options.h — options of make_expert_store (staging/expert_store.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "staging/expert_cache.h"
#include "staging/host_memory.h"
#include "staging/nvme_reader.h"

namespace ds4::staging {

struct StoreOptions {
  int ranks = 1;                          // rank slices per slab (rows split by output row); the
                                          // plan-driven store: R of a plan's Split layers (the
                                          // slabs keep the unsplit layout, slices are row views)
  int rank_threads = 1;                   // make_mixed_expert_store: tensor-parallel rank threads
                                          // sharing the store (ExpertStore::for_rank); R > 1 gives
                                          // each rank its own NVMe reader and step buffers
  uint64_t slab_align = 4096;             // slab size multiple (bytes)
  bool pin = true;                        // host tier: pin slabs where the limits allow
  uint64_t max_pin_chunk = kMaxPinChunk;  // largest single registration
  PinOps pin_ops;                         // empty pin: default_pin_ops() (CUDA or mlock)
  std::vector<int> numa_node_of_layer;    // NUMA node per layer's slabs; empty or -1: unbound
  int cache_slots_per_layer = 0;          // host/nvme tiers; 0: min(n_expert, 16)
  // make_mixed_expert_store: Host experts are served from their host slab itself (stable() stays
  // false) instead of a copy in the step cache, for a device that copies every non-stable matrix
  // at use (the CUDA backend's dev::BindMode::Staged ring is then the only staging copy). Needs no
  // cache, so a plan without NVMe experts gives a store rank threads may share (tp > 1).
  bool host_direct = false;
  // make_mixed_expert_store: the name its counters report (StagingCounters::tier); empty: "plan".
  // make_rank_tier_store sets the tier's name ("resident", "host", "nvme").
  std::string tier_name;
  EvictionPolicy policy = EvictionPolicy::LfuDecay;
  double decay = 0.95;
  std::vector<std::vector<int>> hot_experts;  // [layer] experts kept in the cache for the run
  ReaderOptions reader;                   // nvme tier (apply_reader_env is called on a copy)
  bool print_fallback = true;             // print the one-line host memory fallback to stderr
};

}  // namespace ds4::staging

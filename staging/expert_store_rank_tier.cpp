// staging/expert_store_rank_tier.cpp — make_rank_tier_store: `--experts-tier` at tp > 1 as a
// uniform placement on the plan-driven store (every expert at one home), which rank threads share.
#include <cstdio>

#include "gguf/gguf_file.h"
#include "staging/expert_slabs.h"
#include "staging/expert_store.h"
#include "staging/memory_limits.h"
#include "staging/store_options.h"

namespace ds4::staging {

Result<std::unique_ptr<ExpertStore>> make_rank_tier_store(ExpertTier tier, const gguf::GgufModel& model,
                                                          int rank_threads, StoreOptions opts) {
  if (rank_threads < 1)
    return Error{"experts tier " + std::string(expert_tier_name(tier)) + ": rank threads: expected >= 1, found " +
                 std::to_string(rank_threads)};
  DS4_TRY(ExpertLayout L, ExpertLayout::from_gguf(model, 1, opts.slab_align));
  const ExpertHome home = tier == ExpertTier::Resident ? ExpertHome::Resident
                          : tier == ExpertTier::Host   ? ExpertHome::Host
                                                       : ExpertHome::Nvme;
  // Host memory: one range per layer (the mixed store's region of a uniform layer), decided as
  // make_expert_store's tiers decide theirs: an error when they do not fit, pinned (host tier)
  // while the pin budget lasts.
  std::vector<bool> pin_layer(size_t(L.n_layer()), false);
  if (tier != ExpertTier::Nvme) {
    std::vector<uint64_t> ranges;
    for (int l = 0; l < L.n_layer(); ++l) ranges.push_back(L.slab_bytes(l) * uint64_t(L.n_expert()));
    const PinOps ops = opts.pin_ops.pin ? opts.pin_ops : default_pin_ops();
    const bool pin = tier == ExpertTier::Host && opts.pin;
    DS4_TRY(HostPlan hp, plan_host_ranges(ranges, read_memory_limits(), pin ? ops.kind : PinKind::None));
    for (int l = 0; l < L.n_layer(); ++l) pin_layer[size_t(l)] = pin && hp.policy[size_t(l)] == HostPolicy::Pinned;
    if (!hp.fallback_line.empty() && opts.print_fallback) std::fprintf(stderr, "%s\n", hp.fallback_line.c_str());
  }
  MixedPlacement p;
  p.node_numa_id = {-1};
  for (int l = 0; l < L.n_layer(); ++l) {
    p.home.emplace_back(size_t(L.n_expert()), home);
    p.node.emplace_back(size_t(L.n_expert()), 0);
    p.pinned.emplace_back(size_t(L.n_expert()), pin_layer[size_t(l)]);
  }
  opts.host_direct = true;  // Host experts read in place: no step cache, shared by the rank threads
  opts.ranks = 1;           // whole experts (no split layer)
  opts.rank_threads = rank_threads;
  opts.tier_name = expert_tier_name(tier);
  return make_mixed_expert_store(p, model, opts);
}

}  // namespace ds4::staging

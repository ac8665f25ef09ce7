// staging/expert_store_tiers.cpp — make_expert_store: the resident, host and nvme tiers over
// repacked expert slabs (staging/expert_slabs.h). Host slabs are allocated per layer (one range
// per layer, NUMA node per StoreOptions::numa_node_of_layer) and pinned per the host plan
// (memory_limits.h); the host and nvme tiers stage slabs into an ExpertCache.
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>

#include "gguf/gguf_file.h"
#include "staging/expert_slabs.h"
#include "staging/expert_store.h"
#include "staging/store_options.h"

namespace ds4::staging {

Result<ExpertTier> parse_expert_tier(std::string_view s) {
  if (s == "resident") return ExpertTier::Resident;
  if (s == "host") return ExpertTier::Host;
  if (s == "nvme") return ExpertTier::Nvme;
  return Error{"experts tier: expected resident, host or nvme, found '" + std::string(s) + "'"};
}

const char* expert_tier_name(ExpertTier t) {
  switch (t) {
    case ExpertTier::Resident: return "resident";
    case ExpertTier::Host: return "host";
    case ExpertTier::Nvme: return "nvme";
  }
  return "?";
}

namespace {

/// All slabs in host memory, one region per layer.
struct HostSlabs {
  std::vector<HostRegion> regions;  // [layer]
  uint64_t pinned = 0, pageable = 0;
  std::string policy_line;

  uint8_t* slab(const ExpertLayout& L, int layer, int expert) const {
    return regions[static_cast<size_t>(layer)].data() + static_cast<uint64_t>(expert) * L.slab_bytes(layer);
  }
};

Result<HostSlabs> build_host_slabs(const ExpertLayout& L, const StoreOptions& o, bool pin) {
  HostSlabs h;
  std::vector<uint64_t> ranges;
  for (int l = 0; l < L.n_layer(); ++l) ranges.push_back(L.slab_bytes(l) * static_cast<uint64_t>(L.n_expert()));
  PinOps ops = o.pin_ops.pin ? o.pin_ops : default_pin_ops();
  DS4_TRY(HostPlan plan, plan_host_ranges(ranges, read_memory_limits(), pin ? ops.kind : PinKind::None));
  std::string pin_errors;
  for (int l = 0; l < L.n_layer(); ++l) {
    const int node = static_cast<size_t>(l) < o.numa_node_of_layer.size() ? o.numa_node_of_layer[static_cast<size_t>(l)] : -1;
    DS4_TRY(HostRegion r, HostRegion::allocate(ranges[static_cast<size_t>(l)], node));
    // Repack: copy every expert's rank pieces out of the merged tensors (file mmap).
    for (int e = 0; e < L.n_expert(); ++e) {
      uint8_t* dst = r.data() + static_cast<uint64_t>(e) * L.slab_bytes(l);
      for (const SlabSource& s : L.sources(l, e)) {
        if (!s.mapped) return Error{"expert store: layer " + std::to_string(l) + ": model file is not mapped"};
        std::memcpy(dst + s.slab_offset, s.mapped, s.bytes);
      }
    }
    bool pinned = false;
    if (plan.policy[static_cast<size_t>(l)] == HostPolicy::Pinned) {
      std::vector<uint64_t> offs;
      for (int e = 0; e < L.n_expert(); ++e) offs.push_back(static_cast<uint64_t>(e) * L.slab_bytes(l));
      Result<void> pr = r.pin(offs, o.max_pin_chunk, ops);
      if (pr)
        pinned = true;
      else if (pin_errors.empty())
        pin_errors = pr.error().message;
    }
    (pinned ? h.pinned : h.pageable) += r.bytes();
    h.regions.push_back(std::move(r));
  }
  h.policy_line = plan.fallback_line;
  if (!pin_errors.empty()) {
    const std::string line = "ds4 staging: host experts: pinning failed, " + format_bytes(h.pageable) +
                             " left pageable: " + pin_errors;
    h.policy_line = h.policy_line.empty() ? line : h.policy_line + "; " + line;
  }
  if (!h.policy_line.empty() && o.print_fallback) std::fprintf(stderr, "%s\n", h.policy_line.c_str());
  return h;
}

class TieredExpertStore final : public ExpertStore {
 public:
  TieredExpertStore(ExpertTier tier, ExpertLayout layout) : tier_(tier), L_(std::move(layout)) {}
  bool stable(int, int) const override { return tier_ == ExpertTier::Resident; }

  Result<void> init(const gguf::GgufModel& model, const StoreOptions& o) {
    uint64_t data_bytes_total = 0;
    for (int l = 0; l < L_.n_layer(); ++l) {
      uint64_t b = 0;
      for (const SlabSource& s : L_.sources(l, 0)) b += s.bytes;
      data_bytes_.push_back(b);
      data_bytes_total += b;
    }
    (void)data_bytes_total;
    if (tier_ == ExpertTier::Resident || tier_ == ExpertTier::Host) {
      DS4_TRY(host_, build_host_slabs(L_, o, tier_ == ExpertTier::Host && o.pin));
    }
    if (tier_ == ExpertTier::Nvme) {
      std::vector<std::string> paths;
      for (const gguf::Shard& s : model.shards()) paths.push_back(s.path);
      ReaderOptions ro = o.reader;
      apply_reader_env(&ro);
      DS4_TRY(reader_, NvmeReader::open(paths, ro));
    }
    if (tier_ == ExpertTier::Resident) return ok();
    CacheOptions co;
    co.n_layer = L_.n_layer();
    co.n_expert = L_.n_expert();
    co.slots_per_layer = o.cache_slots_per_layer > 0 ? o.cache_slots_per_layer : std::min(L_.n_expert(), 16);
    co.slot_bytes = L_.max_slab_bytes();
    co.policy = o.policy;
    co.decay = o.decay;
    co.hot = o.hot_experts;
    DS4_TRY(cache_, ExpertCache::create(co, [this](int l, int e, uint8_t* dst) { return load(l, e, dst); }));
    return ok();
  }

  Result<dev::WeightMatrix> get(int layer, int expert, ExpertProj proj) override {
    if (L_.ranks() != 1)
      return Error{"expert store: built with " + std::to_string(L_.ranks()) +
                   " rank slices; ask for one with get_rank_slice"};
    return get_rank_slice(layer, expert, proj, 0);
  }

  Result<dev::WeightMatrix> get_rank_slice(int layer, int expert, ExpertProj proj, int rank) override {
    if (layer < 0 || layer >= L_.n_layer())
      return Error{"expert store: layer " + std::to_string(layer) + " out of range [0, " + std::to_string(L_.n_layer()) + ")"};
    if (expert < 0 || expert >= L_.n_expert())
      return Error{"expert store: expert " + std::to_string(expert) + " out of range [0, " + std::to_string(L_.n_expert()) + ")"};
    if (rank < 0 || rank >= L_.ranks())
      return Error{"expert store: rank " + std::to_string(rank) + " out of range [0, " + std::to_string(L_.ranks()) + ")"};
    const uint8_t* slab = nullptr;
    if (!cache_) {
      slab = host_->slab(L_, layer, expert);
    } else if (last_layer_ == layer && last_expert_ == expert) {
      slab = last_slab_;
    } else {
      DS4_TRY(slab, cache_->acquire(layer, expert));
      last_layer_ = layer;
      last_expert_ = expert;
      last_slab_ = slab;
    }
    dev::WeightMatrix w = L_.matrix(slab, layer, proj, rank);
    w.source_persists = !cache_;  // resident slabs live as long as the store; cache slots are reused
    if (!cache_) resident_reads_ += static_cast<uint64_t>(w.out) * w.row_bytes;
    return w;
  }

  int expert_count() const override { return L_.n_expert(); }

  Result<uint64_t> matrix_bytes(int layer, ExpertProj proj) const override { return L_.matrix_bytes(layer, proj); }

  Result<void> begin_step(int layer, std::span<const int> experts) override {
    (tier_ == ExpertTier::Resident ? act_vram_ : tier_ == ExpertTier::Host ? act_host_ : act_nvme_) += experts.size();
    if (!cache_) return ok();
    if (layer < 0 || layer >= L_.n_layer())
      return Error{"expert store: begin_step layer " + std::to_string(layer) + " out of range"};
    for (int e : experts)
      if (e < 0 || e >= L_.n_expert())
        return Error{"expert store: begin_step expert " + std::to_string(e) + " out of range"};
    cache_->begin_step(layer, experts);
    return ok();
  }
  void end_step(int layer) override {
    if (cache_ && layer >= 0 && layer < L_.n_layer()) cache_->end_step(layer);
  }
  void prefetch(int layer, std::span<const int> experts) override {
    if (!cache_ || layer < 0 || layer >= L_.n_layer()) return;
    last_layer_ = -1;  // a prefetch may reuse the slot of the last unreserved expert
    Result<void> r = cache_->prefetch(layer, experts);
    (void)r;  // a failed prefetch is retried by the demand load, which reports the error
  }

  StagingCounters counters() const override {
    StagingCounters c;
    c.tier = expert_tier_name(tier_);
    if (host_) {
      c.slab_bytes = host_->pinned + host_->pageable;
      c.pinned_bytes = host_->pinned;
      c.pageable_bytes = host_->pageable;
      c.host_policy = host_->policy_line;
    }
    c.bytes_resident_reads = resident_reads_;
    c.bytes_host_to_device = host_to_device_;
    c.bytes_nvme_to_device = nvme_to_device_;
    c.act_vram = act_vram_;
    c.act_host = act_host_;
    c.act_nvme = act_nvme_;
    add_cache_and_reader_counters(&c, cache_.get(), reader_.get());
    return c;
  }

 private:
  /// The copy engine of the cache: host slab -> slot (memcpy; a CUDA build copies to the device),
  /// or file -> slot through the reader.
  Result<void> load(int layer, int expert, uint8_t* dst) {
    if (host_) {
      std::memcpy(dst, host_->slab(L_, layer, expert), L_.slab_bytes(layer));
      host_to_device_ += data_bytes_[static_cast<size_t>(layer)];
      return ok();
    }
    const std::vector<SlabSource> src = L_.sources(layer, expert);
    std::vector<ReadRequest> reqs;
    std::vector<uint8_t*> dsts;
    for (const SlabSource& s : src) {
      reqs.push_back({s.shard, s.file_offset, s.bytes});
      dsts.push_back(dst + s.slab_offset);
    }
    DS4_TRY_VOID(reader_->read_into(reqs, dsts));
    nvme_to_device_ += data_bytes_[static_cast<size_t>(layer)];
    return ok();
  }

  ExpertTier tier_;
  ExpertLayout L_;
  std::vector<uint64_t> data_bytes_;  // [layer] bytes of real data per slab
  std::optional<HostSlabs> host_;
  std::unique_ptr<NvmeReader> reader_;
  std::unique_ptr<ExpertCache> cache_;
  int last_layer_ = -1, last_expert_ = -1;
  const uint8_t* last_slab_ = nullptr;
  uint64_t resident_reads_ = 0, host_to_device_ = 0, nvme_to_device_ = 0;
  uint64_t act_vram_ = 0, act_host_ = 0, act_nvme_ = 0;  // expert-steps (begin_step lists)
};

}  // namespace

Result<std::unique_ptr<ExpertStore>> make_expert_store(ExpertTier tier, const gguf::GgufModel& model,
                                                       const StoreOptions& opts) {
  DS4_TRY(ExpertLayout layout, ExpertLayout::from_gguf(model, opts.ranks, opts.slab_align));
  auto s = std::make_unique<TieredExpertStore>(tier, std::move(layout));
  DS4_TRY_VOID(s->init(model, opts));
  std::unique_ptr<ExpertStore> out = std::move(s);
  return out;
}

}  // namespace ds4::staging

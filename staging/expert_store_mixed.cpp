// staging/expert_store_mixed.cpp — make_mixed_expert_store: every routed expert where a placement
// plan puts it (ExpertHome in expert_store.h), with bytes counted per tier.
//
// Host memory: one region per (layer, class, node) holding the slabs of that layer's experts of
// one class (resident / host pinned / host pageable / cpu) on one node, bound to the node's NUMA
// id; NVMe experts take no host memory. Staged experts (Host, Nvme) are copied into a step-scoped
// ExpertCache (reuse_across_steps = false): like the planner's cost model, which budgets staging
// slots for one step (2 layers x top_k) and charges every activation of a staged expert its full
// bytes, nothing staged for one token is served to the next (with StoreOptions::host_direct, Host
// experts skip the cache: the device stages the slab itself). NvmeCpu experts are read into one
// host scratch slab per step and expert.
// Rank threads (StoreOptions::rank_threads = R > 1, tensor parallelism): no step cache; each rank
// reads its NVMe experts through its own NvmeRankReader (its reader and step buffers), reached
// through for_rank(r) (rank 0: the store itself, ranks 1.. a RankView); in a split layer an Nvme
// expert is read as the rank's row slices (get_rank_slice), like a Host expert's slab rows.
#include <atomic>
#include <cstdio>
#include <cstring>
#include <map>
#include <tuple>

#include "gguf/gguf_file.h"
#include "staging/expert_slabs.h"
#include "staging/expert_store.h"
#include "staging/nvme_rank_reader.h"
#include "staging/store_options.h"

namespace ds4::staging {

const char* expert_home_name(ExpertHome h) {
  switch (h) {
    case ExpertHome::Resident: return "resident";
    case ExpertHome::Host: return "host";
    case ExpertHome::Cpu: return "cpu";
    case ExpertHome::Nvme: return "nvme";
    case ExpertHome::NvmeCpu: return "nvme-cpu";
  }
  return "?";
}

namespace {

enum SlabClass { kResident = 0, kHostPinned = 1, kHostPageable = 2, kCpu = 3 };

struct Counter {
  std::atomic<uint64_t> v{0};
  void add(uint64_t x) { v.fetch_add(x, std::memory_order_relaxed); }
  uint64_t get() const { return v.load(std::memory_order_relaxed); }
};

class MixedExpertStore final : public ExpertStore {
 public:
  MixedExpertStore(MixedPlacement p, ExpertLayout layout) : p_(std::move(p)), L_(std::move(layout)) {}
  bool stable(int layer, int expert) const override {
    if (layer < 0 || layer >= int(p_.home.size()) || expert < 0 || expert >= int(p_.home[size_t(layer)].size()))
      return true;  // get() reports the range error
    const ExpertHome h = p_.home[size_t(layer)][size_t(expert)];
    return h == ExpertHome::Resident || h == ExpertHome::Cpu;
  }

  bool persists(int layer, int expert) const override {
    if (stable(layer, expert)) return true;
    return host_direct_ && p_.home[size_t(layer)][size_t(expert)] == ExpertHome::Host;
  }

  bool cpu_computed(int layer, int expert) const override {
    if (layer < 0 || layer >= int(p_.home.size()) || expert < 0 || expert >= int(p_.home[size_t(layer)].size()))
      return false;
    const ExpertHome h = p_.home[size_t(layer)][size_t(expert)];
    return h == ExpertHome::Cpu || h == ExpertHome::NvmeCpu;
  }

  /// A Host expert (served from its slab) of a split layer, in a store of R > 1 rank slices; an
  /// Nvme expert of a split layer too when the R rank threads have their readers.
  bool rank_sliced(int layer, int expert) const override {
    if (ranks_ < 2 || !host_direct_ || layer < 0 || layer >= int(p_.split.size()) || !p_.split[size_t(layer)])
      return false;
    if (expert < 0 || expert >= int(p_.home[size_t(layer)].size())) return false;
    const ExpertHome h = p_.home[size_t(layer)][size_t(expert)];
    return h == ExpertHome::Host || (h == ExpertHome::Nvme && !rank_nvme_.empty());
  }

  /// Rank 0: the store itself; rank r > 0: its view (its own NVMe reader and buffers). A store
  /// built for one thread (rank_threads 1) is itself for every rank (shared as it is).
  ExpertStore& for_rank(int rank) override {
    DS4_CHECK(rank >= 0 && (rank_threads_ == 1 || rank < rank_threads_));
    if (rank == 0 || views_.empty()) return *this;
    return *views_[size_t(rank - 1)];
  }

  Result<void> init(const gguf::GgufModel& model, const StoreOptions& o) {
    const int NL = L_.n_layer(), NE = L_.n_expert();
    if (int(p_.home.size()) != NL || int(p_.node.size()) != NL || int(p_.pinned.size()) != NL)
      return Error{"plan-driven expert store: expected placements for " + std::to_string(NL) + " layers, found " +
                   std::to_string(p_.home.size())};
    const int n_nodes = int(p_.node_numa_id.size());
    if (!p_.split.empty() && int(p_.split.size()) != NL)
      return Error{"plan-driven expert store: expected split modes for " + std::to_string(NL) + " layers, found " +
                   std::to_string(p_.split.size())};
    if (o.ranks < 1) return Error{"plan-driven expert store: ranks: expected >= 1, found " + std::to_string(o.ranks)};
    if (o.rank_threads < 1)
      return Error{"plan-driven expert store: rank_threads: expected >= 1, found " + std::to_string(o.rank_threads)};
    if (o.ranks > 1 && o.rank_threads > 1 && o.ranks != o.rank_threads)
      return Error{"plan-driven expert store: expected as many rank slices as rank threads, found " +
                   std::to_string(o.ranks) + " slices and " + std::to_string(o.rank_threads) + " threads"};
    ranks_ = o.ranks;
    rank_threads_ = o.rank_threads;
    for (int l = 0; l < int(p_.split.size()) && ranks_ > 1; ++l) {
      if (!p_.split[size_t(l)]) continue;
      const int64_t ff = L_.tensor(l, ExpertProj::Gate).out, dim = L_.tensor(l, ExpertProj::Down).out;
      if (ff % ranks_ != 0 || dim % ranks_ != 0)
        return Error{"plan-driven expert store: layer " + std::to_string(l) + " is split over " + std::to_string(ranks_) +
                     " ranks: expected the expert's rows (gate/up " + std::to_string(ff) + ", down " +
                     std::to_string(dim) + ") to be multiples of " + std::to_string(ranks_)};
    }
    cpu_by_node_ = std::vector<Counter>(size_t(std::max(n_nodes, 1)));
    slab_of_.assign(size_t(NL), std::vector<const uint8_t*>(size_t(NE), nullptr));
    bool staged = false, nvme = false;
    for (int l = 0; l < NL; ++l) {
      if (int(p_.home[size_t(l)].size()) != NE || int(p_.node[size_t(l)].size()) != NE ||
          int(p_.pinned[size_t(l)].size()) != NE)
        return Error{"plan-driven expert store: layer " + std::to_string(l) + ": expected " + std::to_string(NE) +
                     " experts (the model's), found " + std::to_string(p_.home[size_t(l)].size())};
      uint64_t b = 0;
      for (const SlabSource& s : L_.sources(l, 0)) b += s.bytes;
      data_bytes_.push_back(b);
      // Group this layer's host-backed experts by (class, node).
      std::map<std::pair<int, int>, std::vector<int>> groups;
      for (int e = 0; e < NE; ++e) {
        const ExpertHome h = p_.home[size_t(l)][size_t(e)];
        const int node = p_.node[size_t(l)][size_t(e)];
        if (h == ExpertHome::Host && !o.host_direct && o.rank_threads > 1)
          return Error{"plan-driven expert store: " + std::to_string(o.rank_threads) +
                       " rank threads share the store: expected host experts served from their slabs "
                       "(host_direct), found a step cache"};
        staged = staged || (h == ExpertHome::Host && !o.host_direct) || (h == ExpertHome::Nvme && o.rank_threads == 1);
        nvme = nvme || h == ExpertHome::Nvme || h == ExpertHome::NvmeCpu;
        if (h == ExpertHome::Nvme || h == ExpertHome::NvmeCpu) continue;
        if (h != ExpertHome::Resident && (node < 0 || node >= n_nodes))
          return Error{"plan-driven expert store: layer " + std::to_string(l) + " expert " + std::to_string(e) +
                       ": node index " + std::to_string(node) + ", expected 0.." + std::to_string(n_nodes - 1)};
        const int cls = h == ExpertHome::Resident ? kResident
                        : h == ExpertHome::Cpu    ? kCpu
                        : p_.pinned[size_t(l)][size_t(e)] ? kHostPinned
                                                          : kHostPageable;
        groups[{cls, cls == kResident ? -1 : node}].push_back(e);
      }
      const uint64_t sb = L_.slab_bytes(l);
      for (const auto& [key, experts] : groups) {
        const int numa = key.second >= 0 ? p_.node_numa_id[size_t(key.second)] : -1;
        DS4_TRY(HostRegion r, HostRegion::allocate(sb * experts.size(), numa < numa_node_count() ? numa : -1));
        std::vector<uint64_t> offs;
        for (size_t i = 0; i < experts.size(); ++i) {
          uint8_t* dst = r.data() + i * sb;
          for (const SlabSource& s : L_.sources(l, experts[i])) {
            if (!s.mapped) return Error{"plan-driven expert store: layer " + std::to_string(l) + ": model file is not mapped"};
            std::memcpy(dst + s.slab_offset, s.mapped, s.bytes);
          }
          slab_of_[size_t(l)][size_t(experts[i])] = dst;
          offs.push_back(i * sb);
        }
        if (key.first == kHostPinned && o.pin) {
          PinOps ops = o.pin_ops.pin ? o.pin_ops : default_pin_ops();
          if (Result<void> pr = r.pin(offs, o.max_pin_chunk, ops); !pr && pin_error_.empty())
            pin_error_ = pr.error().message;
        }
        (r.pinned() ? pinned_ : pageable_) += r.bytes();
        regions_.push_back(std::move(r));
      }
    }
    if (!pin_error_.empty()) {
      pin_error_ = "ds4 staging: plan: pinning host experts failed, they stay pageable: " + pin_error_;
      if (o.print_fallback) std::fprintf(stderr, "%s\n", pin_error_.c_str());
    }
    if (nvme) {
      std::vector<std::string> paths;
      for (const gguf::Shard& s : model.shards()) paths.push_back(s.path);
      ReaderOptions ro = o.reader;
      apply_reader_env(&ro);
      if (o.rank_threads == 1) {
        DS4_TRY(reader_, NvmeReader::open(paths, ro));
        scratch_.assign(L_.max_slab_bytes(), 0);
      } else {
        // One reader per rank thread; together they keep the configured reads in flight (and
        // bounce-buffer memory), each at least one.
        ro.queue_depth = std::max(1, ro.queue_depth / o.rank_threads);
        for (int r = 0; r < o.rank_threads; ++r) {
          DS4_TRY(std::unique_ptr<NvmeRankReader> rr, NvmeRankReader::open(paths, ro));
          rank_nvme_.push_back(std::move(rr));
        }
        step_whole_.resize(size_t(o.rank_threads));
        step_read_.resize(size_t(o.rank_threads));
      }
    }
    for (int r = 1; r < o.rank_threads; ++r) views_.push_back(std::make_unique<RankView>(*this, r));
    step_.assign(size_t(NL), 0);
    host_direct_ = o.host_direct;
    tier_name_ = o.tier_name;
    if (!staged) return ok();
    CacheOptions co;
    co.n_layer = NL;
    co.n_expert = NE;
    co.slots_per_layer = o.cache_slots_per_layer > 0 ? std::min(o.cache_slots_per_layer, NE) : std::min(NE, 8);
    co.slot_bytes = L_.max_slab_bytes();
    co.policy = o.policy;
    co.decay = o.decay;
    co.reuse_across_steps = false;
    DS4_TRY(cache_, ExpertCache::create(co, [this](int l, int e, uint8_t* dst) { return load(l, e, dst); }));
    return ok();
  }

  Result<dev::WeightMatrix> get(int layer, int expert, ExpertProj proj) override { return get_at(0, layer, expert, proj); }

  /// True when (layer, expert), in range, is read from the file (Nvme, NvmeCpu).
  bool nvme_home(int layer, int expert) const {
    if (layer < 0 || layer >= int(p_.home.size()) || expert < 0 || expert >= int(p_.home[size_t(layer)].size()))
      return false;
    const ExpertHome h = p_.home[size_t(layer)][size_t(expert)];
    return h == ExpertHome::Nvme || h == ExpertHome::NvmeCpu;
  }

  /// get() for rank thread `rank` (its NVMe reader when the store has rank readers).
  Result<dev::WeightMatrix> get_at(int rank, int layer, int expert, ExpertProj proj) {
    if (layer < 0 || layer >= L_.n_layer())
      return Error{"expert store: layer " + std::to_string(layer) + " out of range [0, " + std::to_string(L_.n_layer()) + ")"};
    if (expert < 0 || expert >= L_.n_expert())
      return Error{"expert store: expert " + std::to_string(expert) + " out of range [0, " + std::to_string(L_.n_expert()) + ")"};
    const ExpertHome h = p_.home[size_t(layer)][size_t(expert)];
    const uint8_t* slab = nullptr;
    switch (h) {
      case ExpertHome::Resident:
      case ExpertHome::Cpu:
        slab = slab_of_[size_t(layer)][size_t(expert)];
        break;
      case ExpertHome::Host:
        if (host_direct_) {  // read-only: safe from several rank threads at once
          slab = slab_of_[size_t(layer)][size_t(expert)];
          break;
        }
        [[fallthrough]];
      case ExpertHome::Nvme:
        if (h == ExpertHome::Nvme && !rank_nvme_.empty()) {  // rank threads: the rank's reader, once per step
          uint64_t read = 0;
          DS4_TRY(slab, rank_nvme_[size_t(rank)]->whole(L_, layer, expert, &read));
          nvme_to_device_.add(read);
          break;
        }
        if (last_layer_ == layer && last_expert_ == expert && last_step_ == step_[size_t(layer)]) {
          slab = last_slab_;
        } else {
          DS4_TRY(slab, cache_->acquire(layer, expert));
          last_layer_ = layer;
          last_expert_ = expert;
          last_step_ = step_[size_t(layer)];
          last_slab_ = slab;
        }
        break;
      case ExpertHome::NvmeCpu:
        if (!rank_nvme_.empty()) {
          uint64_t read = 0;
          DS4_TRY(slab, rank_nvme_[size_t(rank)]->whole(L_, layer, expert, &read));
          nvme_to_cpu_.add(read);
          break;
        }
        if (!(scratch_layer_ == layer && scratch_expert_ == expert && scratch_step_ == step_[size_t(layer)])) {
          scratch_layer_ = -1;
          DS4_TRY_VOID(read_file(layer, expert, scratch_.data()));
          nvme_to_cpu_.add(data_bytes_[size_t(layer)]);
          scratch_layer_ = layer;
          scratch_expert_ = expert;
          scratch_step_ = step_[size_t(layer)];
        }
        slab = scratch_.data();
        break;
    }
    dev::WeightMatrix w = L_.matrix(slab, layer, proj, 0);
    // Slabs live as long as the store (Resident, Cpu, and Host served directly); cache slots and
    // the NvmeCpu scratch are reused by later calls.
    w.source_persists = h == ExpertHome::Resident || h == ExpertHome::Cpu || (h == ExpertHome::Host && host_direct_);
    const uint64_t bytes = static_cast<uint64_t>(w.out) * w.row_bytes;
    if (h == ExpertHome::Resident) resident_reads_.add(bytes);
    if (h == ExpertHome::Host && host_direct_) host_to_device_.add(bytes);  // the device copies it at use
    if (h == ExpertHome::Cpu || h == ExpertHome::NvmeCpu) {
      cpu_reads_.add(bytes);
      const int node = h == ExpertHome::Cpu ? p_.node[size_t(layer)][size_t(expert)] : 0;
      cpu_by_node_[size_t(node)].add(bytes);
    }
    return w;
  }

  int expert_count() const override { return L_.n_expert(); }

  Result<uint64_t> matrix_bytes(int layer, ExpertProj proj) const override { return L_.matrix_bytes(layer, proj); }

  Result<dev::WeightMatrix> get_rank_slice(int layer, int expert, ExpertProj proj, int rank) override {
    if (!rank_sliced(layer, expert)) {
      if (rank == 0 && ranks_ == 1) return get(layer, expert, proj);
      return Error{"expert store: layer " + std::to_string(layer) + " expert " + std::to_string(expert) +
                   ": rank slice " + std::to_string(rank) + " requested, the expert is not split over ranks"};
    }
    if (rank < 0 || rank >= ranks_)
      return Error{"expert store: rank " + std::to_string(rank) + " out of range [0, " + std::to_string(ranks_) + ")"};
    if (p_.home[size_t(layer)][size_t(expert)] == ExpertHome::Nvme) {  // rank r's reader: call from r's thread
      uint64_t read = 0;
      DS4_TRY(auto m, rank_nvme_[size_t(rank)]->slice(L_, layer, expert, rank, ranks_, &read));
      nvme_to_device_.add(read);
      dev::WeightMatrix w = m[size_t(proj)];
      w.source_persists = false;  // a step buffer, reused after the rank's next begin_step
      return w;
    }
    // Rows [out*r/R, out*(r+1)/R) of the projection in the expert's slab: contiguous rows.
    dev::WeightMatrix w = L_.matrix(slab_of_[size_t(layer)][size_t(expert)], layer, proj, 0);
    const int64_t r0 = w.out * rank / ranks_, r1 = w.out * (rank + 1) / ranks_;
    w.data += static_cast<uint64_t>(r0) * w.row_bytes;
    w.out = r1 - r0;
    w.source_persists = true;
    host_to_device_.add(static_cast<uint64_t>(w.out) * w.row_bytes);  // the device copies it at use
    return w;
  }

  Result<void> begin_step(int layer, std::span<const int> experts) override { return begin_step_at(0, layer, experts); }

  /// begin_step() of rank thread `rank`: its NVMe buffers of the previous step may be reused.
  Result<void> begin_step_at(int rank, int layer, std::span<const int> experts) {
    if (layer < 0 || layer >= L_.n_layer())
      return Error{"expert store: begin_step layer " + std::to_string(layer) + " out of range"};
    std::vector<int> staged;
    for (int e : experts) {
      if (e < 0 || e >= L_.n_expert())
        return Error{"expert store: begin_step expert " + std::to_string(e) + " out of range"};
      switch (p_.home[size_t(layer)][size_t(e)]) {
        case ExpertHome::Resident: act_[0].add(1); break;
        case ExpertHome::Host:
          act_[1].add(1);
          if (!host_direct_) staged.push_back(e);
          break;
        case ExpertHome::Cpu: act_[2].add(1); break;
        case ExpertHome::Nvme: act_[3].add(1); staged.push_back(e); break;
        case ExpertHome::NvmeCpu: act_[3].add(1); break;
      }
    }
    if (!rank_nvme_.empty()) {
      // The rank's whole NVMe experts of the step (NVMe-then-CPU too; split ones are read as
      // slices at their gets) read now in one batch, their requests in flight together; the
      // gets then find them read (and count nothing again).
      NvmeRankReader& rr = *rank_nvme_[size_t(rank)];
      rr.begin_step();
      std::vector<int>& whole = step_whole_[size_t(rank)];
      whole.clear();
      for (int e : experts)
        if (nvme_home(layer, e) && !rank_sliced(layer, e)) whole.push_back(e);
      if (!whole.empty()) {
        std::vector<uint64_t>& read = step_read_[size_t(rank)];
        DS4_TRY_VOID(rr.whole_many(L_, layer, whole, &read));
        for (size_t i = 0; i < whole.size(); ++i)
          (p_.home[size_t(layer)][size_t(whole[i])] == ExpertHome::Nvme ? nvme_to_device_ : nvme_to_cpu_).add(read[i]);
      }
    }
    if (!cache_ && !reader_) return ok();  // rank threads may share a store of Resident/Cpu experts
    ++step_[size_t(layer)];
    if (cache_) cache_->begin_step(layer, staged);
    return ok();
  }
  void end_step(int layer) override {
    if (cache_ && layer >= 0 && layer < L_.n_layer()) cache_->end_step(layer);
  }
  void begin_prefetch() override { begin_prefetch_at(0); }
  /// begin_prefetch() of rank thread `rank`: its reader's step buffers may be reused.
  void begin_prefetch_at(int rank) {
    if (!rank_nvme_.empty()) rank_nvme_[size_t(rank)]->begin_step();
  }

  StagingCounters counters() const override {
    StagingCounters c;
    c.tier = tier_name_.empty() ? "plan" : tier_name_;
    c.slab_bytes = pinned_ + pageable_;
    c.pinned_bytes = pinned_;
    c.pageable_bytes = pageable_;
    c.host_policy = pin_error_;
    c.bytes_resident_reads = resident_reads_.get();
    c.bytes_host_to_device = host_to_device_.get();
    c.bytes_nvme_to_device = nvme_to_device_.get();
    c.bytes_cpu_reads = cpu_reads_.get();
    c.bytes_nvme_to_cpu = nvme_to_cpu_.get();
    for (const Counter& n : cpu_by_node_) c.cpu_reads_by_node.push_back(n.get());
    c.act_vram = act_[0].get();
    c.act_host = act_[1].get();
    c.act_cpu = act_[2].get();
    c.act_nvme = act_[3].get();
    add_cache_and_reader_counters(&c, cache_.get(), reader_.get());
    if (!rank_nvme_.empty()) {
      std::vector<ReaderCounters> parts;
      for (const auto& r : rank_nvme_) parts.push_back(r->counters());
      c.has_reader = true;
      c.reader = merge_reader_counters(parts);
    }
    return c;
  }

 private:
  Result<void> read_file(int layer, int expert, uint8_t* dst) {
    std::vector<ReadRequest> reqs;
    std::vector<uint8_t*> dsts;
    for (const SlabSource& s : L_.sources(layer, expert)) {
      reqs.push_back({s.shard, s.file_offset, s.bytes});
      dsts.push_back(dst + s.slab_offset);
    }
    return reader_->read_into(reqs, dsts);
  }

  /// The cache's copy engine input: host slab (Host) or file (Nvme) -> staging buffer.
  Result<void> load(int layer, int expert, uint8_t* dst) {
    if (p_.home[size_t(layer)][size_t(expert)] == ExpertHome::Host) {
      std::memcpy(dst, slab_of_[size_t(layer)][size_t(expert)], L_.slab_bytes(layer));
      host_to_device_.add(data_bytes_[size_t(layer)]);
      return ok();
    }
    DS4_TRY_VOID(read_file(layer, expert, dst));
    nvme_to_device_.add(data_bytes_[size_t(layer)]);
    return ok();
  }

  /// The store as rank thread `rank` (> 0) uses it: every call forwarded with the rank.
  class RankView final : public ExpertStore {
   public:
    RankView(MixedExpertStore& s, int rank) : s_(s), rank_(rank) {}
    Result<dev::WeightMatrix> get(int layer, int expert, ExpertProj proj) override {
      return s_.get_at(rank_, layer, expert, proj);
    }
    int expert_count() const override { return s_.expert_count(); }
    Result<uint64_t> matrix_bytes(int layer, ExpertProj proj) const override { return s_.matrix_bytes(layer, proj); }
    bool stable(int layer, int expert) const override { return s_.stable(layer, expert); }
    bool persists(int layer, int expert) const override { return s_.persists(layer, expert); }
    /// `rank` must be this view's rank for an Nvme expert (its reader); checked.
    Result<dev::WeightMatrix> get_rank_slice(int layer, int expert, ExpertProj proj, int rank) override {
      DS4_CHECK(rank == rank_ || !s_.rank_sliced(layer, expert) || !s_.nvme_home(layer, expert));
      return s_.get_rank_slice(layer, expert, proj, rank);
    }
    bool rank_sliced(int layer, int expert) const override { return s_.rank_sliced(layer, expert); }
    bool cpu_computed(int layer, int expert) const override { return s_.cpu_computed(layer, expert); }
    Result<void> begin_step(int layer, std::span<const int> experts) override {
      return s_.begin_step_at(rank_, layer, experts);
    }
    void end_step(int layer) override { s_.end_step(layer); }
    void begin_prefetch() override { s_.begin_prefetch_at(rank_); }
    StagingCounters counters() const override { return s_.counters(); }

   private:
    MixedExpertStore& s_;
    int rank_;
  };

  MixedPlacement p_;
  ExpertLayout L_;
  std::vector<uint64_t> data_bytes_;                 // [layer] bytes of real data per slab
  std::vector<std::vector<const uint8_t*>> slab_of_; // [layer][expert] host slab (Resident/Host/Cpu)
  std::vector<HostRegion> regions_;
  uint64_t pinned_ = 0, pageable_ = 0;
  std::string pin_error_;
  std::unique_ptr<NvmeReader> reader_;
  std::unique_ptr<ExpertCache> cache_;
  bool host_direct_ = false;                         // StoreOptions::host_direct
  std::string tier_name_;                            // StoreOptions::tier_name
  int ranks_ = 1;                                    // StoreOptions::ranks: rank slices of split layers
  int rank_threads_ = 1;                             // StoreOptions::rank_threads
  std::vector<std::unique_ptr<NvmeRankReader>> rank_nvme_;  // [rank] rank_threads > 1 with NVMe experts
  std::vector<std::unique_ptr<RankView>> views_;     // [rank - 1] for_rank(1..)
  std::vector<uint64_t> step_;                       // [layer] steps begun (staged/scratch validity)
  std::vector<uint8_t> scratch_;                     // NvmeCpu host buffer
  std::vector<std::vector<int>> step_whole_;         // [rank] begin_step_at: the batch's experts
  std::vector<std::vector<uint64_t>> step_read_;     // [rank] and the bytes read for each
  int scratch_layer_ = -1, scratch_expert_ = -1;
  uint64_t scratch_step_ = 0;
  int last_layer_ = -1, last_expert_ = -1;
  uint64_t last_step_ = 0;
  const uint8_t* last_slab_ = nullptr;
  Counter resident_reads_, host_to_device_, nvme_to_device_, cpu_reads_, nvme_to_cpu_;
  Counter act_[4];                                   // vram, host, cpu, nvme
  std::vector<Counter> cpu_by_node_;
};

}  // namespace

Result<std::unique_ptr<ExpertStore>> make_mixed_expert_store(const MixedPlacement& p, const gguf::GgufModel& model,
                                                             const StoreOptions& opts) {
  DS4_TRY(ExpertLayout layout, ExpertLayout::from_gguf(model, 1, opts.slab_align));
  auto s = std::make_unique<MixedExpertStore>(p, std::move(layout));
  DS4_TRY_VOID(s->init(model, opts));
  std::unique_ptr<ExpertStore> out = std::move(s);
  return out;
}

}  // namespace ds4::staging

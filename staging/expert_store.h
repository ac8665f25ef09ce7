// staging/expert_store.h — the interface through which the MoE reads routed-expert weights.
//
// The engine asks for one (layer, expert, projection) slice at a time; the store decides where
// the bytes live (mmap of the GGUF, host slabs, GPU cache, NVMe — later staging issues). A slice
// is one expert's 2-D matrix cut from the merged 3-D ggml tensor `blk.L.ffn_{gate,up,down}_exps`
// ({in, out, n_expert} in ggml order: expert e occupies rows [e*out, (e+1)*out)).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ds4/result.h"
#include "kernels/device.h"
#include "staging/staging_counters.h"

namespace ds4::gguf { class GgufModel; }

namespace ds4::staging {

/// Which expert projection: gate (w1, ggml {dim, inter}), up (w3, {dim, inter}),
/// down (w2, {inter, dim}).
enum class ExpertProj { Gate = 0, Up = 1, Down = 2 };

/// Source of routed-expert weight slices.
class ExpertStore {
 public:
  virtual ~ExpertStore() = default;
  /// The weight matrix of expert `expert` of layer `layer` for projection `proj`. The pointer
  /// stays valid until the store is destroyed (for this in-memory store) — a caching store will
  /// document its own lifetime rule. WeightMatrix::source_persists is set exactly when the bytes
  /// stay valid and unchanged until the store is destroyed (host slabs, the mmap): a device may
  /// then copy them asynchronously at bind without waiting; false where a later call may reuse
  /// them (cache slots, bypass and NVMe buffers). Error when the layer or expert is out of range.
  virtual Result<dev::WeightMatrix> get(int layer, int expert, ExpertProj proj) = 0;
  /// Number of routed experts per layer.
  virtual int expert_count() const = 0;
  /// Bytes of one expert's `proj` matrix in `layer` (out * row_bytes; every expert of a layer has
  /// the same shape and type), from the layout only: nothing is loaded, cached or counted (get()
  /// counts traffic and a caching store loads). Error when the layer is out of range.
  virtual Result<uint64_t> matrix_bytes(int layer, ExpertProj proj) const = 0;
  /// True when get(layer, expert, ...) returns memory that holds these bytes for the store's
  /// life (the mmap, a resident or CPU slab), false when it is a staging slot that later calls
  /// reuse (a device backend must then copy the bytes at every use: dev::BindMode::Staged).
  virtual bool stable(int layer, int expert) const { return true; }
  /// True when get(layer, expert, ...) returns WeightMatrix::source_persists matrices (bytes valid
  /// and unchanged until the store is destroyed), answerable before any get() of the step (the
  /// engine binds hash-routed layers' experts ahead, at the start of a step, only then: a caching
  /// store must see begin_step first). Default: stable().
  virtual bool persists(int layer, int expert) const { return stable(layer, expert); }

  /// Rank `rank`'s slice of the matrix (its rows [out*rank/R, out*(rank+1)/R) of `proj`) when the
  /// store was built with R rank slices. Default: rank 0 of an unsplit store is the whole matrix;
  /// anything else is an Error.
  virtual Result<dev::WeightMatrix> get_rank_slice(int layer, int expert, ExpertProj proj, int rank) {
    if (rank != 0)
      return Error{"expert store: rank slice " + std::to_string(rank) + " requested, store has 1 rank"};
    return get(layer, expert, proj);
  }
  /// The store as tensor-parallel rank `rank`'s thread uses it: every rank thread calls only its
  /// own for_rank(r) (begin_step, get, get_rank_slice with r, end_step), from one thread at a
  /// time. A store that keeps per-rank state (the plan-driven store's NVMe readers and step
  /// buffers, StoreOptions::rank_threads) returns a view per rank (rank 0: itself); the default,
  /// for stores the rank threads share as they are, returns *this. `rank` outside
  /// [0, rank threads) is a programmer error (checked where the store has rank views).
  virtual ExpertStore& for_rank(int rank) { return *this; }
  /// True when the plan computes (layer, expert) on the CPU (ExpertHome::Cpu: a host slab read in
  /// place; ExpertHome::NvmeCpu: read from the file into a host buffer): a device with its own
  /// memory never uploads or stages it, and the engine computes it with a CPU device beside the
  /// GPU's work (Forward::set_cpu_experts_device). Default: false.
  virtual bool cpu_computed(int layer, int expert) const { return false; }
  /// True when the engine computes (layer, expert) split over the tensor-parallel ranks (the split
  /// staging of a placement plan's Split layer, engine/tensor_parallel.md): every rank binds its
  /// get_rank_slice of each projection instead of the whole get(). Default: false (whole experts).
  virtual bool rank_sliced(int layer, int expert) const { return false; }
  /// Announces the experts one step of `layer` needs (router output, or the hash table of layers
  /// 0-2): a caching store reserves them so that loading one never evicts another, and may start
  /// loading. Default: nothing. `end_step(layer)` releases the reservation.
  virtual Result<void> begin_step(int layer, std::span<const int> experts) { return ok(); }
  /// Ends the step announced by begin_step(layer, ...). Default: nothing.
  virtual void end_step(int layer) {}
  /// Starts the gets the engine makes at a step's start, before any layer's begin_step (the
  /// hash-routed layers' split slices, Forward::prefetch_hash_layers; the caller copies what
  /// they return before its next begin_step): buffers handed out before may be reused, and
  /// nothing read before is served again uncounted. Only get_rank_slice of rank_sliced experts
  /// may follow before the next begin_step. Default: nothing.
  virtual void begin_prefetch() {}
  /// Hint that `experts` of `layer` are likely soon (e.g. the next layer); a caching store loads
  /// them only into free or evictable slots, never displacing reserved or hot entries. Default: no-op.
  virtual void prefetch(int layer, std::span<const int> experts) {}
  /// Staging counters so far (tier, bytes moved per tier, cache and reader counters).
  virtual StagingCounters counters() const {
    StagingCounters c;
    c.tier = "mmap";
    return c;
  }
};

/// A plain store over tensors already in memory (the GGUF mmap): no copies.
/// `tensors[layer][proj]` are the merged 3-D tensors; `ne` in ggml order {in, out, n_expert}.
struct MergedExpertTensor {
  GgmlType type = GgmlType::F32;
  const uint8_t* data = nullptr;
  int64_t in = 0, out = 0, n_expert = 0;
  uint64_t row_bytes = 0;
};

/// Builds the in-memory store from per-layer merged tensors (index: [layer][ExpertProj]).
/// Error when a tensor is null or the three projections disagree on the expert count.
Result<std::unique_ptr<ExpertStore>> make_memory_expert_store(
    std::vector<std::array<MergedExpertTensor, 3>> layers);

/// Where every routed expert is forced to live (`ds4-offload run --experts-tier`):
/// Resident: all slabs held in device memory (CPU build: host memory), no per-step traffic.
/// Host: slabs in pinned/pageable host memory (NUMA-bound), staged into a device expert cache.
/// Nvme: slabs read from the GGUF file by the NvmeReader into the device expert cache.
enum class ExpertTier { Resident, Host, Nvme };

/// Parses "resident", "host" or "nvme"; Error naming the accepted values otherwise.
Result<ExpertTier> parse_expert_tier(std::string_view s);
/// "resident", "host" or "nvme".
const char* expert_tier_name(ExpertTier t);

struct StoreOptions;  // staging/store_options.h

/// Builds a store of `tier` over every `blk.L.ffn_{gate,up,down}_exps.weight` of `model` (repacked
/// once into per-(layer, expert) slabs, see staging/expert_slabs.h). Errors: missing/inconsistent
/// expert tensors (naming the tensor), host memory too small for the host/resident tier (with the
/// numbers), unreadable model file for the nvme tier. `model` must outlive the store.
Result<std::unique_ptr<ExpertStore>> make_expert_store(ExpertTier tier, const gguf::GgufModel& model,
                                                       const StoreOptions& opts);

/// Home of one routed expert in a plan-driven store: the staging view of a placement plan's tier
/// (placement/plan.h; staging does not depend on placement). "Device" memory is host memory in a
/// CPU build. Bytes are counted per get() of a projection (so once per (step, expert) at batch 1).
enum class ExpertHome : uint8_t {
  Resident,  ///< device-resident slab read in place: StagingCounters::bytes_resident_reads
  Host,      ///< host slab copied into a device slot in every step that uses it: bytes_host_to_device
  Cpu,       ///< host slab computed in place by the CPU: bytes_cpu_reads (+ cpu_reads_by_node)
  Nvme,      ///< read from the file into a device slot in every step that uses it: bytes_nvme_to_device
  NvmeCpu,   ///< read from the file into a host buffer, then computed by the CPU: bytes_nvme_to_cpu
             ///< and bytes_cpu_reads
};

/// Per-expert homes of a plan-driven store. All vectors indexed [layer][expert] must match the
/// model's expert tensors.
struct MixedPlacement {
  std::vector<std::vector<ExpertHome>> home;  ///< [layer][expert]
  std::vector<std::vector<int>> node;         ///< [layer][expert] host node index (Host, Cpu); else ignored
  std::vector<std::vector<bool>> pinned;      ///< [layer][expert] Host: page-lock its slab
  std::vector<int> node_numa_id;              ///< [node index] NUMA node to bind slabs to; -1 unbound
  /// [layer] the plan's Split staging mode (empty: no split layer). With StoreOptions::ranks = R > 1
  /// and StoreOptions::host_direct, the Host experts of a split layer are served as R rank slices
  /// (ExpertStore::rank_sliced, get_rank_slice); everything else as in a whole layer.
  std::vector<bool> split;
};

/// Builds a store whose experts live where `p` says (see ExpertHome). Staged experts (Host, Nvme)
/// go through an ExpertCache with reuse_across_steps = false and StoreOptions::cache_slots_per_layer
/// slots per layer (0: 8): every step copies each staged expert it uses once, and nothing staged
/// in one step is served to a later one (the planner's cost model assumes no cross-token reuse).
/// Only the slabs of Resident, Host and Cpu experts occupy host memory. Counters are atomic;
/// stores without Nvme/NvmeCpu experts, and without Host experts unless StoreOptions::host_direct
/// (get() then returns the Host expert's slab, counted in bytes_host_to_device per projection),
/// may be shared by rank threads as they are.
/// Rank threads (StoreOptions::rank_threads = R > 1, needs host_direct): no step cache; rank r,
/// through for_rank(r), reads its Nvme / NvmeCpu experts with its own NvmeReader into its own
/// step buffers (staging/nvme_rank_reader.h; valid until its next begin_step), once per (step,
/// expert) and rank, counted in bytes_nvme_to_device / bytes_nvme_to_cpu: the whole ones listed
/// to begin_step all in one batch there (a read error is begin_step's), others at their get.
/// Split layers (MixedPlacement::split, StoreOptions::ranks = R > 1, host_direct): a Host expert's
/// get_rank_slice(l, e, proj, r) is rows [out*r/R, out*(r+1)/R) of the projection in its slab (a
/// contiguous view; the slab keeps the unsplit layout), counted in bytes_host_to_device. With
/// rank_threads = R, an Nvme expert of a split layer is rank sliced too: get_rank_slice reads rank
/// r's rows of the three projections from the file (three contiguous ranges, once per step) with
/// rank r's reader, counted in bytes_nvme_to_device (1/R of the expert per rank).
/// Errors: shape mismatch (naming layer and counts), a node index outside node_numa_id, a split
/// layer whose expert rows (gate/up: ff, down: dim) are not multiples of R, rank_threads > 1 with
/// Host experts but no host_direct, ranks > 1 other than rank_threads (> 1), and the errors of
/// make_expert_store.
Result<std::unique_ptr<ExpertStore>> make_mixed_expert_store(const MixedPlacement& p, const gguf::GgufModel& model,
                                                             const StoreOptions& opts);

/// `--experts-tier` at tp > 1: a plan-driven store (make_mixed_expert_store) that `rank_threads`
/// tensor-parallel rank threads share (ExpertStore::for_rank), with every routed expert of `model`
/// at `tier`'s home (Resident, Host or Nvme), whole (no split layer), on one unbound host node.
/// Host experts are served from their slabs (StoreOptions::host_direct; counted in
/// bytes_host_to_device at every get() of a projection) and pinned per layer where the host
/// memory limits allow (plan_host_ranges, as make_expert_store's host tier; `opts.pin` false: none
/// pinned); each rank reads its Nvme experts with its own reader (bytes_nvme_to_device); Resident
/// experts are read in place (bytes_resident_reads). Counters report the tier's name. `opts`
/// host_direct, ranks, rank_threads and tier_name are set here; the rest is used as given.
/// Errors: rank_threads < 1, host memory too small for the resident/host tier (with the numbers),
/// and the errors of make_mixed_expert_store.
Result<std::unique_ptr<ExpertStore>> make_rank_tier_store(ExpertTier tier, const gguf::GgufModel& model,
                                                          int rank_threads, StoreOptions opts);

/// "resident", "host", "cpu", "nvme", "nvme-cpu".
const char* expert_home_name(ExpertHome h);

}  // namespace ds4::staging

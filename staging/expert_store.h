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
  /// document its own lifetime rule. Error when the layer or expert is out of range.
  virtual Result<dev::WeightMatrix> get(int layer, int expert, ExpertProj proj) = 0;
  /// Number of routed experts per layer.
  virtual int expert_count() const = 0;

  /// Rank `rank`'s slice of the matrix (its rows [out*rank/R, out*(rank+1)/R) of `proj`) when the
  /// store was built with R rank slices. Default: rank 0 of an unsplit store is the whole matrix;
  /// anything else is an Error.
  virtual Result<dev::WeightMatrix> get_rank_slice(int layer, int expert, ExpertProj proj, int rank) {
    if (rank != 0)
      return Error{"expert store: rank slice " + std::to_string(rank) + " requested, store has 1 rank"};
    return get(layer, expert, proj);
  }
  /// Announces the experts one step of `layer` needs (router output, or the hash table of layers
  /// 0-2): a caching store reserves them so that loading one never evicts another, and may start
  /// loading. Default: nothing. `end_step(layer)` releases the reservation.
  virtual Result<void> begin_step(int layer, std::span<const int> experts) { return ok(); }
  /// Ends the step announced by begin_step(layer, ...). Default: nothing.
  virtual void end_step(int layer) {}
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

}  // namespace ds4::staging

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
#include <vector>

#include "ds4/result.h"
#include "kernels/device.h"

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

}  // namespace ds4::staging

// staging/expert_store_memory.cpp — ExpertStore over merged expert tensors already in memory
// (the GGUF mmap): slices are pointer arithmetic, nothing is copied.
#include <string>

#include "staging/expert_store.h"

namespace ds4::staging {
namespace {

class MemoryExpertStore final : public ExpertStore {
 public:
  MemoryExpertStore(std::vector<std::array<MergedExpertTensor, 3>> layers, int n_expert)
      : layers_(std::move(layers)), n_expert_(n_expert) {}

  Result<dev::WeightMatrix> get(int layer, int expert, ExpertProj proj) override {
    if (layer < 0 || layer >= static_cast<int>(layers_.size()))
      return Error{"expert store: layer " + std::to_string(layer) + " out of range [0, " +
                   std::to_string(layers_.size()) + ")"};
    if (expert < 0 || expert >= n_expert_)
      return Error{"expert store: expert " + std::to_string(expert) + " out of range [0, " +
                   std::to_string(n_expert_) + ")"};
    const MergedExpertTensor& t = layers_[layer][static_cast<int>(proj)];
    dev::WeightMatrix w;
    w.type = t.type;
    w.in = t.in;
    w.out = t.out;
    w.row_bytes = t.row_bytes;
    w.data = t.data + static_cast<uint64_t>(expert) * static_cast<uint64_t>(t.out) * t.row_bytes;
    w.source_persists = true;  // the tensors outlive the store (its contract)
    return w;
  }
  int expert_count() const override { return n_expert_; }
  Result<uint64_t> matrix_bytes(int layer, ExpertProj proj) const override {
    if (layer < 0 || layer >= static_cast<int>(layers_.size()))
      return Error{"expert store: layer " + std::to_string(layer) + " out of range [0, " +
                   std::to_string(layers_.size()) + ")"};
    const MergedExpertTensor& t = layers_[layer][static_cast<int>(proj)];
    return static_cast<uint64_t>(t.out) * t.row_bytes;
  }

 private:
  std::vector<std::array<MergedExpertTensor, 3>> layers_;
  int n_expert_;
};

}  // namespace

Result<std::unique_ptr<ExpertStore>> make_memory_expert_store(
    std::vector<std::array<MergedExpertTensor, 3>> layers) {
  int n_expert = -1;
  for (size_t l = 0; l < layers.size(); ++l) {
    for (int p = 0; p < 3; ++p) {
      const auto& t = layers[l][p];
      if (!t.data)
        return Error{"expert store: layer " + std::to_string(l) + " projection " +
                     std::to_string(p) + " has no data"};
      if (n_expert < 0) n_expert = static_cast<int>(t.n_expert);
      if (t.n_expert != n_expert)
        return Error{"expert store: layer " + std::to_string(l) + " projection " +
                     std::to_string(p) + ": expected " + std::to_string(n_expert) +
                     " experts, found " + std::to_string(t.n_expert)};
    }
  }
  std::unique_ptr<ExpertStore> s =
      std::make_unique<MemoryExpertStore>(std::move(layers), n_expert < 0 ? 0 : n_expert);
  return s;
}

}  // namespace ds4::staging

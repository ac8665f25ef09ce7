// staging/expert_slabs.h — the repacked layout of routed experts: one slab per (layer, expert)
// holding that expert's gate, up and down rows, optionally cut by output rows into R rank slices.
//
// Source tensors: `blk.L.ffn_{gate,up,down}_exps.weight`, ggml ne = {in, out, n_expert}; expert e
// is rows [e*out, (e+1)*out) (row r of expert e at byte (e*out + r) * row_bytes of the tensor).
// Slab layout (rank-major so that rank r's share is one contiguous DMA):
//   slab = [rank 0: gate rows | up rows | down rows][rank 1: ...]...[rank R-1: ...]
// where rank r owns rows [out*r/R, out*(r+1)/R) of each projection; every piece starts at a
// multiple of `piece_align` and every slab size is a multiple of `slab_align`.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "ds4/result.h"
#include "kernels/device.h"
#include "staging/expert_store.h"

namespace ds4::gguf { class GgufModel; }

namespace ds4::staging {

/// One projection's merged tensor in the model file.
struct ExpertTensorRef {
  GgmlType type = GgmlType::F32;
  int64_t in = 0, out = 0;  // per expert: `out` rows of `in` elements
  uint64_t row_bytes = 0;
  int shard = 0;            // file index (GgufModel::shards())
  uint64_t file_offset = 0; // absolute offset of expert 0, row 0 in the shard file
  const uint8_t* mapped = nullptr;  // mmap of expert 0, row 0 (nullptr when not mapped)
};

/// One contiguous copy that fills part of a slab: `bytes` from (shard, file_offset) / `mapped`
/// to slab offset `slab_offset`.
struct SlabSource {
  int shard = 0;
  uint64_t file_offset = 0;
  const uint8_t* mapped = nullptr;
  uint64_t bytes = 0;
  uint64_t slab_offset = 0;
};

/// Geometry of all slabs. Every expert of a layer has the same slab size.
class ExpertLayout {
 public:
  /// Reads the expert tensors of every layer 0..n-1 (n = highest layer with expert tensors + 1).
  /// Errors: a layer missing one of the three tensors, a tensor that is not 3-D, the three
  /// projections disagreeing on the expert count or gate/up/down shapes inconsistent
  /// (gate/up {dim, ff}, down {ff, dim}), ranks < 1 or more ranks than rows, alignment not a power
  /// of two. Each message names the tensor.
  static Result<ExpertLayout> from_gguf(const gguf::GgufModel& model, int ranks = 1,
                                        uint64_t slab_align = 4096, uint64_t piece_align = 256);
  /// Same, from explicit tensor references (index [layer][ExpertProj]), for tests and other formats.
  static Result<ExpertLayout> from_refs(std::vector<std::array<ExpertTensorRef, 3>> layers, int n_expert,
                                        int ranks = 1, uint64_t slab_align = 4096, uint64_t piece_align = 256);

  int n_layer() const { return static_cast<int>(layers_.size()); }
  int n_expert() const { return n_expert_; }
  int ranks() const { return ranks_; }
  const ExpertTensorRef& tensor(int layer, ExpertProj p) const { return layers_[layer][static_cast<int>(p)]; }
  /// Bytes of one expert's `p` matrix in `layer` (out * row_bytes); Error when the layer is out of
  /// range (ExpertStore::matrix_bytes of the slab stores).
  Result<uint64_t> matrix_bytes(int layer, ExpertProj p) const {
    if (layer < 0 || layer >= n_layer())
      return Error{"expert store: layer " + std::to_string(layer) + " out of range [0, " + std::to_string(n_layer()) + ")"};
    const ExpertTensorRef& t = tensor(layer, p);
    return static_cast<uint64_t>(t.out) * t.row_bytes;
  }
  /// Bytes of one slab of `layer` (all ranks, padded to slab_align).
  uint64_t slab_bytes(int layer) const { return slab_bytes_[layer]; }
  /// Largest slab over all layers.
  uint64_t max_slab_bytes() const;
  /// Bytes of rank `rank`'s contiguous share of a slab of `layer` (padded to piece_align) and its
  /// offset in the slab.
  uint64_t rank_bytes(int layer, int rank) const;
  uint64_t rank_offset(int layer, int rank) const;
  /// First row and row count of rank `rank`'s part of `proj` (rows [out*r/R, out*(r+1)/R)).
  void rank_rows(int layer, ExpertProj p, int rank, int64_t* row0, int64_t* rows) const;
  /// Offset in the slab of rank `rank`'s rows of `proj`.
  uint64_t piece_offset(int layer, int rank, ExpertProj p) const;
  /// The copies that build slab (layer, expert): 3*R of them, ascending slab offset.
  std::vector<SlabSource> sources(int layer, int expert) const;
  /// The matrix of rank `rank`'s rows of `proj` inside a slab that starts at `slab`.
  dev::WeightMatrix matrix(const uint8_t* slab, int layer, ExpertProj p, int rank) const;
  /// Sum of slab_bytes over all (layer, expert).
  uint64_t total_bytes() const;

 private:
  std::vector<std::array<ExpertTensorRef, 3>> layers_;
  int n_expert_ = 0, ranks_ = 1;
  uint64_t slab_align_ = 4096, piece_align_ = 256;
  std::vector<uint64_t> slab_bytes_;
  std::vector<std::vector<std::array<uint64_t, 3>>> piece_off_;  // [layer][rank][proj]
  std::vector<std::vector<uint64_t>> rank_off_;                 // [layer][rank + 1]
};

}  // namespace ds4::staging

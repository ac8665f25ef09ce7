// staging/expert_slabs.cpp — see expert_slabs.h.
#include "staging/expert_slabs.h"

#include <algorithm>
#include <string>

#include "gguf/gguf_file.h"

namespace ds4::staging {
namespace {

const char* kProjName[3] = {"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"};

uint64_t round_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }
bool pow2(uint64_t v) { return v && !(v & (v - 1)); }

}  // namespace

Result<ExpertLayout> ExpertLayout::from_gguf(const gguf::GgufModel& model, int ranks, uint64_t slab_align,
                                             uint64_t piece_align) {
  int max_layer = -1;
  for (const gguf::TensorInfo& t : model.tensors()) {
    int l = -1;
    char proj[32] = {};
    if (std::sscanf(t.name.c_str(), "blk.%d.%31[a-z_].weight", &l, proj) == 2 &&
        std::string(proj).ends_with("_exps"))
      max_layer = std::max(max_layer, l);
  }
  if (max_layer < 0) return Error{model.path() + ": expected tensors blk.L.ffn_{gate,up,down}_exps.weight, found none"};
  std::vector<std::array<ExpertTensorRef, 3>> layers(static_cast<size_t>(max_layer + 1));
  int n_expert = -1;
  for (int l = 0; l <= max_layer; ++l) {
    for (int p = 0; p < 3; ++p) {
      const std::string name = "blk." + std::to_string(l) + "." + kProjName[p] + ".weight";
      const gguf::TensorInfo* t = model.find(name);
      if (!t) return Error{model.path() + ": tensor '" + name + "': expected (layer " + std::to_string(l) +
                           " of 0.." + std::to_string(max_layer) + " has expert tensors), found none"};
      if (t->n_dims != 3)
        return Error{model.path() + ": tensor '" + name + "': expected 3 dimensions {in, out, n_expert}, found " +
                     std::to_string(t->n_dims)};
      if (n_expert < 0) n_expert = static_cast<int>(t->ne[2]);
      if (t->ne[2] != n_expert)
        return Error{model.path() + ": tensor '" + name + "': expected " + std::to_string(n_expert) +
                     " experts (ne[2]), found " + std::to_string(t->ne[2])};
      ExpertTensorRef& r = layers[static_cast<size_t>(l)][static_cast<size_t>(p)];
      r.type = static_cast<GgmlType>(t->type);
      r.in = t->ne[0];
      r.out = t->ne[1];
      r.row_bytes = t->row_bytes();
      r.shard = t->shard;
      r.file_offset = t->file_offset;
      r.mapped = t->data;
    }
    const auto& L = layers[static_cast<size_t>(l)];
    if (L[0].in != L[1].in || L[0].out != L[1].out || L[2].in != L[0].out || L[2].out != L[0].in)
      return Error{model.path() + ": layer " + std::to_string(l) + ": expected gate/up {dim, ff} and down {ff, dim}, found gate {" +
                   std::to_string(L[0].in) + ", " + std::to_string(L[0].out) + "}, up {" + std::to_string(L[1].in) +
                   ", " + std::to_string(L[1].out) + "}, down {" + std::to_string(L[2].in) + ", " +
                   std::to_string(L[2].out) + "}"};
  }
  return from_refs(std::move(layers), n_expert, ranks, slab_align, piece_align);
}

Result<ExpertLayout> ExpertLayout::from_refs(std::vector<std::array<ExpertTensorRef, 3>> layers, int n_expert,
                                             int ranks, uint64_t slab_align, uint64_t piece_align) {
  if (ranks < 1) return Error{"expert layout: ranks expected >= 1, found " + std::to_string(ranks)};
  if (!pow2(slab_align) || !pow2(piece_align) || piece_align > slab_align)
    return Error{"expert layout: alignments expected powers of two with piece <= slab, found slab " +
                 std::to_string(slab_align) + ", piece " + std::to_string(piece_align)};
  ExpertLayout L;
  L.n_expert_ = n_expert;
  L.ranks_ = ranks;
  L.slab_align_ = slab_align;
  L.piece_align_ = piece_align;
  for (size_t l = 0; l < layers.size(); ++l) {
    for (int p = 0; p < 3; ++p)
      if (layers[l][p].out < ranks)
        return Error{"expert layout: layer " + std::to_string(l) + " " + kProjName[p] + ": expected at least " +
                     std::to_string(ranks) + " rows to split over ranks, found " + std::to_string(layers[l][p].out)};
    std::vector<std::array<uint64_t, 3>> po(static_cast<size_t>(ranks));
    std::vector<uint64_t> ro(static_cast<size_t>(ranks) + 1);
    uint64_t off = 0;
    for (int r = 0; r < ranks; ++r) {
      ro[static_cast<size_t>(r)] = off;
      for (int p = 0; p < 3; ++p) {
        const ExpertTensorRef& t = layers[l][p];
        const int64_t r0 = t.out * r / ranks, r1 = t.out * (r + 1) / ranks;
        po[static_cast<size_t>(r)][static_cast<size_t>(p)] = off;
        off = round_up(off + static_cast<uint64_t>(r1 - r0) * t.row_bytes, piece_align);
      }
    }
    ro[static_cast<size_t>(ranks)] = off;
    L.slab_bytes_.push_back(round_up(off, slab_align));
    L.piece_off_.push_back(std::move(po));
    L.rank_off_.push_back(std::move(ro));
  }
  L.layers_ = std::move(layers);
  return L;
}

uint64_t ExpertLayout::max_slab_bytes() const {
  uint64_t m = 0;
  for (uint64_t b : slab_bytes_) m = std::max(m, b);
  return m;
}

uint64_t ExpertLayout::rank_bytes(int layer, int rank) const {
  return rank_off_[layer][static_cast<size_t>(rank) + 1] - rank_off_[layer][static_cast<size_t>(rank)];
}
uint64_t ExpertLayout::rank_offset(int layer, int rank) const { return rank_off_[layer][static_cast<size_t>(rank)]; }

void ExpertLayout::rank_rows(int layer, ExpertProj p, int rank, int64_t* row0, int64_t* rows) const {
  const ExpertTensorRef& t = tensor(layer, p);
  const int64_t r0 = t.out * rank / ranks_, r1 = t.out * (rank + 1) / ranks_;
  *row0 = r0;
  *rows = r1 - r0;
}

uint64_t ExpertLayout::piece_offset(int layer, int rank, ExpertProj p) const {
  return piece_off_[layer][static_cast<size_t>(rank)][static_cast<size_t>(p)];
}

std::vector<SlabSource> ExpertLayout::sources(int layer, int expert) const {
  std::vector<SlabSource> v;
  for (int r = 0; r < ranks_; ++r)
    for (int p = 0; p < 3; ++p) {
      const ExpertTensorRef& t = layers_[layer][p];
      int64_t r0 = 0, n = 0;
      rank_rows(layer, static_cast<ExpertProj>(p), r, &r0, &n);
      const uint64_t src = (static_cast<uint64_t>(expert) * static_cast<uint64_t>(t.out) + static_cast<uint64_t>(r0)) * t.row_bytes;
      SlabSource s;
      s.shard = t.shard;
      s.file_offset = t.file_offset + src;
      s.mapped = t.mapped ? t.mapped + src : nullptr;
      s.bytes = static_cast<uint64_t>(n) * t.row_bytes;
      s.slab_offset = piece_offset(layer, r, static_cast<ExpertProj>(p));
      v.push_back(s);
    }
  return v;
}

dev::WeightMatrix ExpertLayout::matrix(const uint8_t* slab, int layer, ExpertProj p, int rank) const {
  const ExpertTensorRef& t = tensor(layer, p);
  int64_t r0 = 0, n = 0;
  rank_rows(layer, p, rank, &r0, &n);
  dev::WeightMatrix w;
  w.type = t.type;
  w.in = t.in;
  w.out = n;
  w.row_bytes = t.row_bytes;
  w.data = slab + piece_offset(layer, rank, p);
  return w;
}

uint64_t ExpertLayout::total_bytes() const {
  uint64_t s = 0;
  for (uint64_t b : slab_bytes_) s += b * static_cast<uint64_t>(n_expert_);
  return s;
}

}  // namespace ds4::staging

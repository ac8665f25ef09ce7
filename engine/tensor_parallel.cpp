// engine/tensor_parallel.cpp — see tensor_parallel.h.
#include "engine/tensor_parallel.h"

#include <string>

namespace ds4 {
namespace {

uint64_t mat_bytes(const dev::WeightMatrix& w) { return static_cast<uint64_t>(w.out) * w.row_bytes; }

int64_t block_elems(GgmlType t) {
  const GgmlTypeGeometry* g = ggml_type_geometry(static_cast<uint32_t>(t));
  DS4_CHECK(g != nullptr);
  return g->block_elems;
}

bool has_indexer(const ModelConfig& c) {
  for (int l = 0; l < c.n_layer; ++l)
    if (c.ratio(l) == 4) return true;
  return false;
}

}  // namespace

ExpertPlacement contiguous_expert_placement(const ModelConfig& c, int ranks) {
  ExpertPlacement p(static_cast<size_t>(c.n_layer), std::vector<int32_t>(static_cast<size_t>(c.n_expert)));
  for (auto& layer : p)
    for (int e = 0; e < c.n_expert; ++e)
      layer[e] = static_cast<int32_t>(static_cast<int64_t>(e) * ranks / c.n_expert);
  return p;
}

int tp_canonical_shards(const ModelConfig& c, const ModelWeights& w) {
  const int g = c.o_groups;
  if (g <= 1 || c.n_head % g != 0) return 1;
  if (has_indexer(c) && c.idx_heads % g != 0) return 1;
  for (const LayerWeights& L : w.layers)
    if (c.o_lora_rank % block_elems(L.out_b.type) != 0) return 1;
  return g;
}

Result<TpShard> make_tp_shard(const ModelConfig& c, const ModelWeights& w, int rank, int ranks,
                              const ExpertPlacement& placement) {
  if (ranks != 1 && ranks != 2 && ranks != 4 && ranks != 8)
    return Error{"tensor parallelism: tp=" + std::to_string(ranks) + ": expected 1, 2, 4 or 8"};
  DS4_CHECK(rank >= 0 && rank < ranks);
  TpShard s;
  s.rank = rank;
  s.ranks = ranks;
  s.shards = tp_canonical_shards(c, w);
  if (s.shards % ranks != 0)
    return Error{"tensor parallelism: tp=" + std::to_string(ranks) + " does not divide the " +
                 std::to_string(s.shards) + " canonical shards of this model (o_groups " +
                 std::to_string(c.o_groups) + ", heads " + std::to_string(c.n_head) + ", indexer heads " +
                 std::to_string(c.idx_heads) + ", o_lora_rank " + std::to_string(c.o_lora_rank) + ")"};
  if (c.vocab % ranks != 0)
    return Error{"tensor parallelism: tp=" + std::to_string(ranks) + " does not divide the vocabulary (" +
                 std::to_string(c.vocab) + ")"};
  if (ranks > c.n_expert)
    return Error{"tensor parallelism: tp=" + std::to_string(ranks) + " exceeds the routed expert count " +
                 std::to_string(c.n_expert)};
  const int per = s.shards / ranks;
  s.shard0 = rank * per;
  s.shard1 = s.shard0 + per;
  s.head0 = c.n_head / s.shards * s.shard0;
  s.head1 = c.n_head / s.shards * s.shard1;
  s.idx_head0 = c.idx_heads / s.shards * s.shard0;
  s.idx_head1 = c.idx_heads / s.shards * s.shard1;
  s.vocab0 = c.vocab / ranks * rank;
  s.vocab1 = s.vocab0 + c.vocab / ranks;
  s.placement = placement.empty() ? contiguous_expert_placement(c, ranks) : placement;
  if (s.placement.size() != static_cast<size_t>(c.n_layer))
    return Error{"expert placement: expected " + std::to_string(c.n_layer) + " layers, found " +
                 std::to_string(s.placement.size())};
  for (int l = 0; l < c.n_layer; ++l) {
    if (s.placement[l].size() != static_cast<size_t>(c.n_expert))
      return Error{"expert placement: layer " + std::to_string(l) + ": expected " + std::to_string(c.n_expert) +
                   " experts, found " + std::to_string(s.placement[l].size())};
    for (int e = 0; e < c.n_expert; ++e)
      if (s.placement[l][e] < 0 || s.placement[l][e] >= ranks)
        return Error{"expert placement: layer " + std::to_string(l) + " expert " + std::to_string(e) +
                     ": expected an owner rank 0.." + std::to_string(ranks - 1) + ", found " +
                     std::to_string(s.placement[l][e])};
  }
  return s;
}

dev::WeightMatrix row_slice(const dev::WeightMatrix& w, int64_t r0, int64_t r1) {
  DS4_CHECK(0 <= r0 && r0 <= r1 && r1 <= w.out);
  dev::WeightMatrix v = w;
  v.data = w.row(r0);
  v.out = r1 - r0;
  return v;
}

dev::WeightMatrix col_slice(const dev::WeightMatrix& w, int64_t c0, int64_t c1) {
  const int64_t be = block_elems(w.type);
  DS4_CHECK(0 <= c0 && c0 <= c1 && c1 <= w.in && c0 % be == 0 && c1 % be == 0);
  const GgmlTypeGeometry* g = ggml_type_geometry(static_cast<uint32_t>(w.type));
  dev::WeightMatrix v = w;
  v.data = w.data + static_cast<uint64_t>(c0 / be * g->block_bytes);
  v.in = c1 - c0;
  return v;  // row_bytes stays the full row stride
}

Result<RankWeightBytes> rank_weight_bytes(const ModelConfig& c, const ModelWeights& w, const TpShard& s) {
  RankWeightBytes b;
  uint64_t sharded_full = 0, experts_full = 0;
  auto frac = [](uint64_t bytes, int64_t part, int64_t whole) {
    return static_cast<uint64_t>(static_cast<unsigned __int128>(bytes) * part / whole);
  };
  const int64_t S = s.shards, own = s.shard1 - s.shard0;
  for (const dev::WeightMatrix* m : {&w.token_embd, &w.output}) {
    sharded_full += mat_bytes(*m);
    b.sharded += frac(mat_bytes(*m), s.vocab1 - s.vocab0, c.vocab);
  }
  for (int l = 0; l < c.n_layer; ++l) {
    const LayerWeights& L = w.layers[l];
    for (const dev::WeightMatrix* m : {&L.q_b, &L.out_a, &L.out_b}) {
      sharded_full += mat_bytes(*m);
      b.sharded += frac(mat_bytes(*m), own, S);
    }
    if (c.ratio(l) == 4)
      for (const dev::WeightMatrix* m : {&L.idx_q_b, &L.idx_proj}) {
        sharded_full += mat_bytes(*m);
        b.sharded += frac(mat_bytes(*m), own, S);
      }
    // Sizes from the store's layout (get() would count traffic and fill a caching store).
    uint64_t one = 0;
    for (auto p : {staging::ExpertProj::Gate, staging::ExpertProj::Up, staging::ExpertProj::Down}) {
      DS4_TRY(uint64_t mb, w.experts->matrix_bytes(l, p));
      one += mb;
    }
    for (int e = 0; e < c.n_expert; ++e) {
      experts_full += one;
      if (s.owns_expert(l, e)) b.experts += one;
    }
  }
  DS4_CHECK(w.bytes >= sharded_full + experts_full);
  b.replicated = w.bytes - sharded_full - experts_full;
  return b;
}

}  // namespace ds4

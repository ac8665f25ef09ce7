// Shard geometry (label unit): contiguous expert placement, the canonical shard count from the
// shapes, each rank's head / group / indexer-head / vocabulary ranges tiling the model, refusals
// naming the shape, and row/column slice views of quantized matrices decoding to the slices of
// the full rows.
#include <gtest/gtest.h>

#include <random>

#include "engine/tensor_parallel.h"
#include "kernels/cpu/quant_ref.h"

namespace ds4 {
namespace {

/// A DeepSeek-V4-Flash-like shape (heads 64, 8 groups, 64 indexer heads, 256 experts).
ModelConfig flash_like() {
  ModelConfig c;
  c.n_layer = 3;
  c.compress_ratios = {0, 4, 128};
  c.vocab = 129280;
  c.n_head = 64;
  c.o_groups = 8;
  c.o_lora_rank = 1024;
  c.idx_heads = 64;
  c.n_expert = 256;
  return c;
}

ModelWeights weights_with_out_b(const ModelConfig& c, GgmlType t) {
  ModelWeights w;
  w.layers.resize(static_cast<size_t>(c.n_layer));
  for (auto& L : w.layers) L.out_b.type = t;
  return w;
}

TEST(TpShard, ContiguousPlacement) {
  ModelConfig c = flash_like();
  auto p = contiguous_expert_placement(c, 4);
  ASSERT_EQ(p.size(), 3u);
  EXPECT_EQ(p[0][0], 0);
  EXPECT_EQ(p[0][63], 0);
  EXPECT_EQ(p[0][64], 1);
  EXPECT_EQ(p[2][255], 3);
}

TEST(TpShard, RanksTileHeadsGroupsIndexerHeadsAndVocab) {
  ModelConfig c = flash_like();
  ModelWeights w = weights_with_out_b(c, GgmlType::Q8_0);
  EXPECT_EQ(tp_canonical_shards(c, w), 8);
  for (int R : {1, 2, 4, 8}) {
    int64_t h = 0, ih = 0, v = 0;
    int s = 0;
    for (int r = 0; r < R; ++r) {
      auto sh = make_tp_shard(c, w, r, R);
      ASSERT_TRUE(sh.ok()) << sh.error().message;
      EXPECT_EQ(sh->shards, 8);
      EXPECT_EQ(sh->shard0, s);
      EXPECT_EQ(sh->head0, h);
      EXPECT_EQ(sh->idx_head0, ih);
      EXPECT_EQ(sh->vocab0, v);
      EXPECT_EQ(sh->head1 - sh->head0, 64 / R);
      s = sh->shard1;
      h = sh->head1;
      ih = sh->idx_head1;
      v = sh->vocab1;
    }
    EXPECT_EQ(s, 8);
    EXPECT_EQ(h, 64);
    EXPECT_EQ(ih, 64);
    EXPECT_EQ(v, c.vocab);
  }
}

TEST(TpShard, ShapesThatDoNotAllowShardsGiveOneShardAndRefuseRanks) {
  ModelConfig c = flash_like();
  c.idx_heads = 12;  // not divisible by 8 groups
  ModelWeights w = weights_with_out_b(c, GgmlType::Q8_0);
  EXPECT_EQ(tp_canonical_shards(c, w), 1);
  auto sh = make_tp_shard(c, w, 0, 2);
  ASSERT_FALSE(sh.ok());
  EXPECT_NE(sh.error().message.find("indexer heads 12"), std::string::npos) << sh.error().message;
  c = flash_like();
  c.o_lora_rank = 1000;  // not a multiple of Q8_0's 32-element block
  w = weights_with_out_b(c, GgmlType::Q8_0);
  EXPECT_EQ(tp_canonical_shards(c, w), 1);
  c = flash_like();
  c.vocab = 129281;
  w = weights_with_out_b(c, GgmlType::Q8_0);
  auto sv = make_tp_shard(c, w, 0, 2);
  ASSERT_FALSE(sv.ok());
  EXPECT_NE(sv.error().message.find("vocabulary (129281)"), std::string::npos) << sv.error().message;
}

TEST(TpShard, RowAndColumnSlicesDecodeToSlicesOfTheFullRows) {
  const int64_t in = 256, out = 6;
  std::mt19937 g(5);
  std::normal_distribution<float> d;
  std::vector<float> src(static_cast<size_t>(in * out));
  for (auto& x : src) x = d(g);
  const uint64_t row_bytes = in / 32 * 34;  // Q8_0: 32 elements in 34 bytes
  std::vector<uint8_t> q(static_cast<size_t>(row_bytes * out));
  for (int64_t r = 0; r < out; ++r) cpu::quantize_row(GgmlType::Q8_0, src.data() + r * in, q.data() + r * row_bytes, in);
  dev::WeightMatrix w{GgmlType::Q8_0, q.data(), in, out, row_bytes};
  std::vector<float> full(static_cast<size_t>(in)), part(static_cast<size_t>(in));
  const dev::WeightMatrix rows = row_slice(w, 2, 5), cols = col_slice(w, 64, 160);
  EXPECT_EQ(rows.out, 3);
  EXPECT_EQ(cols.in, 96);
  for (int64_t r = 0; r < out; ++r) {
    cpu::dequantize_row(GgmlType::Q8_0, w.row(r), full.data(), in);
    cpu::dequantize_row(GgmlType::Q8_0, cols.row(r), part.data(), cols.in);
    for (int64_t i = 0; i < cols.in; ++i) EXPECT_EQ(part[i], full[64 + i]) << "row " << r << " col " << i;
    if (r >= 2 && r < 5) {
      cpu::dequantize_row(GgmlType::Q8_0, rows.row(r - 2), part.data(), in);
      for (int64_t i = 0; i < in; ++i) EXPECT_EQ(part[i], full[i]);
    }
  }
}

}  // namespace
}  // namespace ds4

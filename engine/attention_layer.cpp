// engine/attention_layer.cpp — the attention sublayer of DeepSeek-V4 (REF inference/model.py
// Attention.forward, Compressor.forward, Indexer.forward; ../shared/reference/dsv4-architecture.md
// §2.2-2.4), generalized to chunks that start at any position.
//
// `exact` numerics (what the golden `exact` mode computes): the FP8/FP4 quant-dequant simulation
// of REF's QAT path is not applied, and the indexer's Hadamard rotation of q and k is skipped: it
// is orthonormal and applied to both sides, so q.k is unchanged (up to rounding).
#include <algorithm>
#include <cmath>
#include <vector>

#include "engine/compressor.h"
#include "engine/forward.h"
#include "engine/indexer_score.h"
#include "engine/sparse_attention.h"

namespace ds4 {

void Forward::compress(int l, const float* x, int64_t n, int64_t pos0, const dev::WeightMatrix& wkv,
                       const dev::WeightMatrix& wgate, const float* ape, const float* norm,
                       CompressorState& cs, std::vector<float>& cache) const {
  const int64_t w = cs.width(), d = cs.dim();
  std::vector<float> a(static_cast<size_t>(n * w)), g(static_cast<size_t>(n * w));
  dev_.matmul2(wkv, a.data(), wgate, g.data(), x, n, act_);
  std::vector<float> block(static_cast<size_t>(d));
  const RopeTable& rope = w_.layers[l].rope;
  for (int64_t t = 0; t < n; ++t) {
    const int64_t pos = pos0 + t;
    if (!cs.push(pos, a.data() + t * w, g.data() + t * w, ape, block.data())) continue;
    const int64_t b = pos / cs.ratio();
    dev_.rmsnorm(block.data(), norm, 1, d, c_.norm_eps, block.data());
    rope.apply(block.data(), d, b * cs.ratio(), false);  // RoPE at the block start position
    DS4_CHECK(static_cast<int64_t>(cache.size()) == b * d);
    cache.insert(cache.end(), block.begin(), block.end());
  }
}

void Forward::indexer(int l, const float* x, const float* qr, int64_t n, int64_t pos0,
                      LayerState& ls, std::vector<std::vector<int32_t>>* sel) const {
  const LayerWeights& L = w_.layers[l];
  const int64_t H = c_.idx_heads, D = c_.idx_head_dim;
  std::vector<float> q(static_cast<size_t>(n * H * D)), wts(static_cast<size_t>(n * H));
  dev_.matmul(L.idx_q_b, qr, n, q.data(), act_);
  dev_.matmul(L.idx_proj, x, n, wts.data(), act_);
  // Keys first: the block completed by token t is visible to t (compressor runs before scoring).
  compress(l, x, n, pos0, L.idx_cmp_kv, L.idx_cmp_gate, L.idx_cmp_ape, L.idx_cmp_norm, ls.icmp, ls.ikv);
  // REF: weights_proj(x) * (head_dim^-0.5 * n_heads^-0.5).
  const float wscale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(D))) *
                       static_cast<float>(1.0 / std::sqrt(static_cast<double>(H)));
  sel->assign(static_cast<size_t>(n), {});
  dev_.parallel_for(n, [&](int64_t t) {
    const int64_t pos = pos0 + t;
    float* qt = q.data() + t * H * D;
    for (int64_t h = 0; h < H; ++h) L.rope.apply(qt + h * D, D, pos, false);
    std::vector<float> wt(static_cast<size_t>(H));
    for (int64_t h = 0; h < H; ++h) wt[h] = wts[t * H + h] * wscale;
    std::vector<int32_t> top = indexer_select(qt, wt.data(), H, D, ls.ikv.data(),
                                              compressed_visible(pos, 4), c_.idx_topk);
    (*sel)[t] = std::move(top);
  });
}

void Forward::attention(int l, const float* x, int64_t n, SequenceState& st, float* out,
                        ForwardTrace* trace) const {
  const LayerWeights& L = w_.layers[l];
  LayerState& ls = st.layers[l];
  const int64_t pos0 = st.pos, D = c_.head_dim, H = c_.n_head, win = c_.window;
  const int ratio = c_.ratio(l);

  // q = rms(wq_b(RMSNorm_q(wq_a x))) per head, RoPE on the last rope_dim dims.
  std::vector<float> qr(static_cast<size_t>(n * c_.q_lora_rank));
  dev_.matmul(L.q_a, x, n, qr.data(), act_);
  dev_.rmsnorm(qr.data(), L.q_a_norm, n, c_.q_lora_rank, c_.norm_eps, qr.data());
  std::vector<float> q(static_cast<size_t>(n * H * D));
  dev_.matmul(L.q_b, qr.data(), n, q.data(), act_);
  dev_.rmsnorm(q.data(), nullptr, n * H, D, c_.norm_eps, q.data());
  // kv = RMSNorm_kv(wkv x), RoPE.
  std::vector<float> kv(static_cast<size_t>(n * D));
  dev_.matmul(L.kv, x, n, kv.data(), act_);
  dev_.rmsnorm(kv.data(), L.kv_norm, n, D, c_.norm_eps, kv.data());
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t h = 0; h < H; ++h) L.rope.apply(q.data() + (t * H + h) * D, D, pos0 + t, false);
    L.rope.apply(kv.data() + t * D, D, pos0 + t, false);
  }

  // Compressed entries and indexer selections (compressor before attention: a block completed
  // by token t is visible to t).
  std::vector<std::vector<int32_t>> sel;
  if (ratio == 4) {
    indexer(l, x, qr.data(), n, pos0, ls, &sel);
    if (trace && !trace->indexer.empty())
      for (int64_t t = 0; t < n; ++t) trace->indexer[l][pos0 + t] = sel[t];
  }
  if (ratio > 0) compress(l, x, n, pos0, L.cmp_kv, L.cmp_gate, L.cmp_ape, L.cmp_norm, ls.cmp, ls.ckv);

  // Sparse attention with sink per (token, head), then inverse RoPE at the query position.
  std::vector<float> o(static_cast<size_t>(n * H * D));
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)));
  dev_.parallel_for(n, [&](int64_t t) {
    const int64_t pos = pos0 + t;
    std::vector<const float*> cand;
    for (int64_t p = std::max<int64_t>(0, pos - win + 1); p <= pos; ++p)
      cand.push_back(p >= pos0 ? kv.data() + (p - pos0) * D : ls.window.data() + (p % win) * D);
    if (ratio == 4) {
      for (int32_t j : sel[t]) cand.push_back(ls.ckv.data() + static_cast<int64_t>(j) * D);
    } else if (ratio > 0) {
      const int64_t nvis = compressed_visible(pos, ratio);
      for (int64_t j = 0; j < nvis; ++j) cand.push_back(ls.ckv.data() + j * D);
    }
    std::vector<float> scratch(cand.size());
    for (int64_t h = 0; h < H; ++h) {
      float* oh = o.data() + (t * H + h) * D;
      attend_with_sink(q.data() + (t * H + h) * D, cand.data(), static_cast<int64_t>(cand.size()), D,
                       scale, L.attn_sinks[h], oh, scratch.data());
      L.rope.apply(oh, D, pos, true);
    }
  });
  // Window ring update with this chunk's raw KV.
  for (int64_t p = std::max(pos0, pos0 + n - win); p < pos0 + n; ++p)
    std::copy_n(kv.data() + (p - pos0) * D, D, ls.window.data() + (p % win) * D);

  // Grouped low-rank output: z_g = wo_a[g] o_g (heads of group g contiguous), out = wo_b z.
  const int64_t G = c_.o_groups, gin = H * D / G, R = c_.o_lora_rank;
  std::vector<float> og(static_cast<size_t>(n * gin)), zg(static_cast<size_t>(n * R));
  std::vector<float> z(static_cast<size_t>(n * G * R));
  for (int64_t g = 0; g < G; ++g) {
    for (int64_t t = 0; t < n; ++t) std::copy_n(o.data() + t * H * D + g * gin, gin, og.data() + t * gin);
    dev::WeightMatrix wa = L.out_a;
    wa.data = L.out_a.row(g * R);
    wa.out = R;
    dev_.matmul(wa, og.data(), n, zg.data(), act_);
    for (int64_t t = 0; t < n; ++t) std::copy_n(zg.data() + t * R, R, z.data() + t * G * R + g * R);
  }
  dev_.matmul(L.out_b, z.data(), n, out, act_);
}

}  // namespace ds4

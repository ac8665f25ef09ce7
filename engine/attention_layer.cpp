// engine/attention_layer.cpp — the attention sublayer of DeepSeek-V4 (REF inference/model.py
// Attention.forward, Compressor.forward, Indexer.forward; ../shared/reference/dsv4-architecture.md
// §2.2-2.4), generalized to chunks that start at any position.
//
// `exact` numerics (what the golden `exact` mode computes): the FP8/FP4 quant-dequant simulation
// of REF's QAT path is not applied, and the indexer's Hadamard rotation of q and k is skipped: it
// is orthonormal and applied to both sides, so q.k is unchanged (up to rounding).
// `qat` numerics (Activations::Fp8, forward.h qat()): REF's QDQ as in its model.py: the non-RoPE
// KV dims FP8 in 64-blocks (attention kv after norm + RoPE; main compressor blocks), the indexer q
// (per head, after RoPE) and its compressor blocks Hadamard-rotated then FP4 QDQ in 32-blocks;
// the matmul inputs of FP8/FP4 weights are QDQ'd by the device (dev::ActFormat::FP8_QDQ) except
// wo_a, which REF applies as a BF16 einsum (convert.py dequantizes it).
#include <algorithm>
#include <cmath>
#include <vector>

#include "engine/compressor.h"
#include "engine/forward.h"
#include "engine/indexer_score.h"
#include "engine/sparse_attention.h"
#include "engine/topk.h"
#include "kernels/quant/act_qdq.h"

namespace ds4 {

void Forward::compress(int l, const float* x, int64_t n, int64_t pos0, const dev::WeightMatrix& wkv,
                       const dev::WeightMatrix& wgate, const float* ape, const float* norm,
                       CompressorState& cs, std::vector<float>& cache, bool indexer_keys) const {
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
    if (qat() && indexer_keys) {
      quant::hadamard_normalized(block.data(), d);
      quant::qdq_fp4_e2m1(block.data(), d, 32);
    } else if (qat()) {
      quant::qdq_fp8_e4m3(block.data(), d - c_.rope_dim, 64);
    }
    DS4_CHECK(static_cast<int64_t>(cache.size()) == b * d);
    cache.insert(cache.end(), block.begin(), block.end());
  }
}

Result<void> Forward::indexer(int l, const float* x, const float* qr, int64_t n, int64_t pos0,
                              LayerState& ls, std::vector<std::vector<int32_t>>* sel) const {
  const LayerWeights& L = w_.layers[l];
  const int64_t H = c_.idx_heads, D = c_.idx_head_dim, S = shard_.shards, hs = H / S;
  const int64_t own = shard_.shard1 - shard_.shard0, Hr = shard_.idx_head1 - shard_.idx_head0;
  DS4_CHECK(Hr == own * hs);
  // Column-parallel: this rank's indexer heads of wq_b and weights_proj.
  std::vector<float> q(static_cast<size_t>(n * Hr * D)), wts(static_cast<size_t>(n * Hr));
  dev_.matmul(row_slice(L.idx_q_b, shard_.idx_head0 * D, shard_.idx_head1 * D), qr, n, q.data(), act_);
  dev_.matmul(row_slice(L.idx_proj, shard_.idx_head0, shard_.idx_head1), x, n, wts.data(), act_);
  // Keys first: the block completed by token t is visible to t (compressor runs before scoring).
  compress(l, x, n, pos0, L.idx_cmp_kv, L.idx_cmp_gate, L.idx_cmp_ape, L.idx_cmp_norm, ls.icmp, ls.ikv, true);
  // REF: weights_proj(x) * (head_dim^-0.5 * n_heads^-0.5).
  const float wscale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(D))) *
                       static_cast<float>(1.0 / std::sqrt(static_cast<double>(H)));
  // Rotated query heads and scaled head weights of this rank.
  std::vector<float> wt(static_cast<size_t>(n * Hr));
  dev_.parallel_for(n, [&](int64_t t) {
    float* qt = q.data() + t * Hr * D;
    for (int64_t h = 0; h < Hr; ++h) L.rope.apply(qt + h * D, D, pos0 + t, false);
    if (qat())
      for (int64_t h = 0; h < Hr; ++h) {
        quant::hadamard_normalized(qt + h * D, D);
        quant::qdq_fp4_e2m1(qt + h * D, D, 32);
      }
    for (int64_t h = 0; h < Hr; ++h) wt[t * Hr + h] = wts[t * Hr + h] * wscale;
  });
  // Canonical scores (tensor_parallel.h, definition 2): Q_k = the score of a block over the heads
  // of canonical shard k; score = ((Q_0 + Q_1) + ...) + Q_{S-1}.
  auto shard_scores = [&](int64_t t, int64_t k, int64_t nvis, float* dst) {
    indexer_scores(q.data() + (t * Hr + k * hs) * D, wt.data() + t * Hr + k * hs, hs, D, ls.ikv.data(), nvis, dst);
  };
  sel->assign(static_cast<size_t>(n), {});
  if (!comm_) {
    // One rank: per token, score = Q_0, then += Q_k in shard order (no [S, n, nvis] buffer).
    dev_.parallel_for(n, [&](int64_t t) {
      const int64_t nvis = compressed_visible(pos0 + t, 4);
      std::vector<float> score(static_cast<size_t>(nvis)), tmp(static_cast<size_t>(nvis));
      shard_scores(t, 0, nvis, score.data());
      for (int64_t k = 1; k < S; ++k) {
        shard_scores(t, k, nvis, tmp.data());
        for (int64_t j = 0; j < nvis; ++j) score[j] += tmp[j];
      }
      (*sel)[t] = topk_desc(score.data(), nvis, c_.idx_topk);
    });
    return ok();
  }
  // R ranks: blocks of tokens with at most kBlockScores scores per shard (every rank forms the same
  // blocks); this rank's shard partials are gathered into shard order and summed in that order.
  constexpr int64_t kBlockScores = int64_t{1} << 22;
  std::vector<int64_t> off;
  std::vector<float> part, all, score;
  for (int64_t t0 = 0; t0 < n;) {
    off.assign(1, 0);
    int64_t t1 = t0;
    while (t1 < n) {
      const int64_t nv = compressed_visible(pos0 + t1, 4);
      if (t1 > t0 && off.back() + nv > kBlockScores) break;
      off.push_back(off.back() + nv);
      ++t1;
    }
    const int64_t total = off.back();
    if (total > 0) {
      part.resize(static_cast<size_t>(own * total));
      dev_.parallel_for(t1 - t0, [&](int64_t i) {
        for (int64_t k = 0; k < own; ++k)
          shard_scores(t0 + i, k, off[i + 1] - off[i], part.data() + k * total + off[i]);
      });
      all.resize(static_cast<size_t>(S * total));
      DS4_TRY_VOID(comm_->all_gather_f32(part.data(), own * total, all.data()));
      score.resize(static_cast<size_t>(total));
      comm::ordered_sum_f32(all.data(), static_cast<int>(S), total, score.data());
    }
    dev_.parallel_for(t1 - t0, [&](int64_t i) {
      (*sel)[t0 + i] = topk_desc(score.data() + off[i], off[i + 1] - off[i], c_.idx_topk);
    });
    t0 = t1;
  }
  return ok();
}

Result<void> Forward::attention(int l, const float* x, int64_t n, SequenceState& st, float* out,
                                ForwardTrace* trace) const {
  const LayerWeights& L = w_.layers[l];
  LayerState& ls = st.layers[l];
  const int64_t pos0 = st.pos, D = c_.head_dim, win = c_.window;
  const int64_t h0 = shard_.head0, Hr = shard_.head1 - shard_.head0;  // this rank's query heads
  const int ratio = c_.ratio(l);

  // q = rms(wq_b(RMSNorm_q(wq_a x))) per head, RoPE on the last rope_dim dims (wq_b by heads).
  std::vector<float> qr(static_cast<size_t>(n * c_.q_lora_rank));
  dev_.matmul(L.q_a, x, n, qr.data(), act_);
  dev_.rmsnorm(qr.data(), L.q_a_norm, n, c_.q_lora_rank, c_.norm_eps, qr.data());
  std::vector<float> q(static_cast<size_t>(n * Hr * D));
  dev_.matmul(row_slice(L.q_b, h0 * D, shard_.head1 * D), qr.data(), n, q.data(), act_);
  dev_.rmsnorm(q.data(), nullptr, n * Hr, D, c_.norm_eps, q.data());
  // kv = RMSNorm_kv(wkv x), RoPE (replicated: the single latent KV).
  std::vector<float> kv(static_cast<size_t>(n * D));
  dev_.matmul(L.kv, x, n, kv.data(), act_);
  dev_.rmsnorm(kv.data(), L.kv_norm, n, D, c_.norm_eps, kv.data());
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t h = 0; h < Hr; ++h) L.rope.apply(q.data() + (t * Hr + h) * D, D, pos0 + t, false);
    L.rope.apply(kv.data() + t * D, D, pos0 + t, false);
    if (qat()) quant::qdq_fp8_e4m3(kv.data() + t * D, D - c_.rope_dim, 64);
  }

  // Compressed entries and indexer selections (compressor before attention: a block completed
  // by token t is visible to t).
  std::vector<std::vector<int32_t>> sel;
  if (ratio == 4) {
    DS4_TRY_VOID(indexer(l, x, qr.data(), n, pos0, ls, &sel));
    if (trace && !trace->indexer.empty())
      for (int64_t t = 0; t < n; ++t) trace->indexer[l][pos0 + t] = sel[t];
  }
  if (ratio > 0) compress(l, x, n, pos0, L.cmp_kv, L.cmp_gate, L.cmp_ape, L.cmp_norm, ls.cmp, ls.ckv);

  // Sparse attention with sink per (token, head), then inverse RoPE at the query position.
  std::vector<float> o(static_cast<size_t>(n * Hr * D));
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
    for (int64_t h = 0; h < Hr; ++h) {
      float* oh = o.data() + (t * Hr + h) * D;
      attend_with_sink(q.data() + (t * Hr + h) * D, cand.data(), static_cast<int64_t>(cand.size()), D,
                       scale, L.attn_sinks[h0 + h], oh, scratch.data());
      L.rope.apply(oh, D, pos, true);
    }
  });
  // Window ring update with this chunk's raw KV.
  for (int64_t p = std::max(pos0, pos0 + n - win); p < pos0 + n; ++p)
    std::copy_n(kv.data() + (p - pos0) * D, D, ls.window.data() + (p % win) * D);

  // Grouped low-rank output: z_g = wo_a[g] o_g (heads of group g contiguous; wo_a by groups), then
  // the canonical wo_b (tensor_parallel.h, definition 1): P_s = wo_b[:, cols of shard s] z_s for
  // this rank's shards, gathered in shard order and summed in that order.
  const int64_t G = c_.o_groups, gin = c_.n_head * D / G, R = c_.o_lora_rank, S = shard_.shards;
  const int64_t gps = G / S, own = shard_.shard1 - shard_.shard0, g0 = shard_.shard0 * gps;
  std::vector<float> og(static_cast<size_t>(n * gin)), zg(static_cast<size_t>(n * R));
  std::vector<float> zs(static_cast<size_t>(n * gps * R));
  // P_k for this rank's k-th canonical shard into dst [n, dim].
  auto shard_product = [&](int64_t k, float* dst) {
    for (int64_t j = 0; j < gps; ++j) {
      const int64_t g = g0 + k * gps + j, gl = g - g0;  // global and rank-local group
      for (int64_t t = 0; t < n; ++t) std::copy_n(o.data() + t * Hr * D + gl * gin, gin, og.data() + t * gin);
      dev_.matmul(row_slice(L.out_a, g * R, (g + 1) * R), og.data(), n, zg.data(),
                  qat() ? dev::ActFormat::F32 : act_);  // REF: BF16 einsum for wo_a
      for (int64_t t = 0; t < n; ++t) std::copy_n(zg.data() + t * R, R, zs.data() + t * gps * R + j * R);
    }
    const int64_t c0 = (g0 + k * gps) * R;
    dev_.matmul(col_slice(L.out_b, c0, c0 + gps * R), zs.data(), n, dst, act_);
  };
  const int64_t dim = c_.dim;
  if (!comm_) {
    // One rank: out = P_0, then += P_k in shard order.
    shard_product(0, out);
    std::vector<float> tmp(static_cast<size_t>(n * dim));
    for (int64_t k = 1; k < S; ++k) {
      shard_product(k, tmp.data());
      for (int64_t i = 0; i < n * dim; ++i) out[i] += tmp[i];
    }
    return ok();
  }
  std::vector<float> part(static_cast<size_t>(own * n * dim));  // [own, n, dim]
  for (int64_t k = 0; k < own; ++k) shard_product(k, part.data() + k * n * dim);
  // Gather in token blocks of at most kBlockFloats floats over all shards.
  constexpr int64_t kBlockFloats = int64_t{1} << 24;
  const int64_t rows = std::max<int64_t>(1, kBlockFloats / (S * dim));
  std::vector<float> send, all;
  for (int64_t t0 = 0; t0 < n; t0 += rows) {
    const int64_t m = std::min(rows, n - t0);
    send.resize(static_cast<size_t>(own * m * dim));
    for (int64_t k = 0; k < own; ++k) std::copy_n(part.data() + (k * n + t0) * dim, m * dim, send.data() + k * m * dim);
    all.resize(static_cast<size_t>(S * m * dim));
    DS4_TRY_VOID(comm_->all_gather_f32(send.data(), own * m * dim, all.data()));
    comm::ordered_sum_f32(all.data(), static_cast<int>(S), m * dim, out + t0 * dim);
  }
  return ok();
}

}  // namespace ds4

// engine/attention_layer.cpp — the attention sublayer of DeepSeek-V4 (REF inference/model.py
// Attention.forward, Compressor.forward, Indexer.forward; ../shared/reference/dsv4-architecture.md
// §2.2-2.4), generalized to chunks that start at any position and to batches of sequences: the
// projections run over the batch, the compressors, indexer, sparse attention and window ring per
// sequence on its rows.
//
// `exact` numerics (what the golden `exact` mode computes): the FP8/FP4 quant-dequant simulation
// of REF's QAT path is not applied, and the indexer's Hadamard rotation of q and k is skipped: it
// is orthonormal and applied to both sides, so q.k is unchanged (up to rounding).
// `qat` numerics (Activations::Fp8, Forward::qat()): REF's QDQ as in its model.py, as act_qdq ops:
// the non-RoPE KV dims FP8 in 64-blocks (attention kv after norm + RoPE; the main compressor's new
// cache rows), the indexer q (per head, after RoPE) and its compressor's new cache rows
// Hadamard-rotated then FP4 QDQ in 32-blocks; the matmul inputs of FP8/FP4 weights are QDQ'd by
// the device (dev::ActFormat::FP8_QDQ) except wo_a, which REF applies as a BF16 einsum
// (convert.py dequantizes it).
#include <algorithm>
#include <cmath>

#include "engine/forward.h"

namespace ds4 {
namespace {
/// Compressed ratio-4 blocks visible to a query at `pos` (complete ones, as the compressor op).
int64_t visible4(int64_t pos) { return (pos + 1) / 4; }
}  // namespace

Result<void> Forward::indexer_select(int l, const dev::Tensor& q, const dev::Tensor& wt, const Seg& s, LayerState& ls,
                                     const dev::Tensor& sel) {
  const int64_t S = shard_.shards, hs = c_.idx_heads / S, own = shard_.shard1 - shard_.shard0;
  const int64_t n = s.r1 - s.r0;
  // Canonical scores (tensor_parallel.h, definition 2): Q_k = the score of a block over the heads
  // of canonical shard k; score = ((Q_0 + Q_1) + ...) + Q_{S-1}. Blocks of tokens with at most
  // kBlockScores scores per shard (every rank forms the same blocks); a block's shard partials are
  // [own, rows, ld] (ld = the blocks visible to its last token), gathered into shard order.
  constexpr int64_t kBlockScores = int64_t{1} << 22;
  for (int64_t t0 = 0; t0 < n;) {
    const int64_t ld_max = std::max<int64_t>(1, visible4(s.pos0 + n - 1));
    int64_t rows = std::clamp<int64_t>(kBlockScores / ld_max, 1, n - t0);
    const int64_t t1 = t0 + rows;
    const int64_t ld = std::max<int64_t>(1, visible4(s.pos0 + t1 - 1));
    const Workspace::Mark mk = ws_.mark();
    const dev::Tensor part = ws_.f32(ld, rows, own), score = ws_.f32(ld, rows);
    dev_.indexer_scores(s_, q.rows_view(t0, t1), wt.rows_view(t0, t1), ls.ikv, hs, s.pos0 + t0, part);
    if (!comm_) {
      dev_.ordered_sum(s_, part, S, score);
    } else {
      const dev::Tensor all = ws_.f32(ld, rows, S);
      DS4_TRY_VOID(dev_.all_gather(s_, *comm_, part, all));
      dev_.ordered_sum(s_, all, S, score);
    }
    dev_.topk(s_, score, s.pos0 + t0, 4, sel.rows_view(t0, t1));
    ws_.release(mk);
    t0 = t1;
  }
  return ok();
}

Result<void> Forward::attention(int l, const dev::Tensor& x, const dev::Tensor& pos, std::span<const Seg> segs,
                                const dev::Tensor& out) {
  const LayerTensors& L = dw_.layers[l];
  const int64_t n = x.ne1, D = c_.head_dim;
  const int64_t h0 = shard_.head0, Hr = shard_.head1 - shard_.head0;  // this rank's query heads
  const int ratio = c_.ratio(l);
  const Workspace::Mark mk = ws_.mark();
  // The attention output first: everything taken after it is dead once the heads are computed
  // and is released for the output projection (reused memory stays in cache).
  const dev::Tensor o = ws_.f32(Hr * D, n);
  const Workspace::Mark after_o = ws_.mark();

  // q = rms(wq_b(RMSNorm_q(wq_a x))) per head, RoPE on the last rope_dim dims (wq_b by heads).
  const dev::Tensor qr = ws_.f32(c_.q_lora_rank, n);
  dev_.matmul(s_, L.q_a, x, qr, act_);
  dev_.rmsnorm(s_, qr, L.q_a_norm, c_.norm_eps, qr);
  const dev::Tensor q = ws_.f32(Hr * D, n);
  dev_.matmul(s_, L.q_b, qr, q, act_);  // this rank's heads' rows
  dev_.rmsnorm(s_, q.reshaped(D, n * Hr), dev::Tensor{}, c_.norm_eps, q.reshaped(D, n * Hr));
  // kv = RMSNorm_kv(wkv x), RoPE (replicated: the single latent KV).
  const dev::Tensor kv = ws_.f32(D, n);
  dev_.matmul(s_, L.kv, x, kv, act_);
  dev_.rmsnorm(s_, kv, L.kv_norm, c_.norm_eps, kv);
  dev_.rope(s_, q, Hr, L.rope_freqs, pos, false);
  dev_.rope(s_, kv, 1, L.rope_freqs, pos, false);
  if (qat()) dev_.act_qdq(s_, kv, 1, dev::QdqMode::Fp8E4M3, D - c_.rope_dim, 64);

  // Compressor projections over the batch; the indexer's query heads (column-parallel: this
  // rank's heads of wq_b and weights_proj), rotated, and its head weights scaled as REF does:
  // weights_proj(x) * (head_dim^-0.5 * n_heads^-0.5).
  dev::Tensor ca, cg, ia, ig, iq, iw;
  if (ratio > 0) {
    const int64_t cw = L.cmp_kv.ne1;
    ca = ws_.f32(cw, n);
    cg = ws_.f32(cw, n);
    dev_.matmul2(s_, L.cmp_kv, ca, L.cmp_gate, cg, x, act_);
  }
  if (ratio == 4) {
    const int64_t H = c_.idx_heads, DI = c_.idx_head_dim, HI = shard_.idx_head1 - shard_.idx_head0;
    iq = ws_.f32(HI * DI, n);
    iw = ws_.f32(HI, n);
    dev_.matmul(s_, L.idx_q_b, qr, iq, act_);  // this rank's indexer heads' rows
    dev_.matmul(s_, L.idx_proj, x, iw, act_);
    const int64_t iwidth = L.idx_cmp_kv.ne1;
    ia = ws_.f32(iwidth, n);
    ig = ws_.f32(iwidth, n);
    dev_.matmul2(s_, L.idx_cmp_kv, ia, L.idx_cmp_gate, ig, x, act_);
    dev_.rope(s_, iq, HI, L.rope_freqs, pos, false);
    if (qat()) dev_.act_qdq(s_, iq, HI, dev::QdqMode::HadamardFp4, DI, 32);
    const float wscale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(DI))) *
                         static_cast<float>(1.0 / std::sqrt(static_cast<double>(H)));
    dev_.scale(s_, iw, wscale);
  }

  // Per sequence: compressors (before attention: a block completed by token t is visible to t),
  // indexer selections, sparse attention with sink, then the window ring update.
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)));
  const dev::Tensor sinks = L.attn_sinks.cols_view(h0, shard_.head1);
  for (const Seg& s : segs) {
    LayerState& ls = s.chunk->st->layers[l];
    const int64_t a = s.r0, b = s.r1;
    const Workspace::Mark seg_mark = ws_.mark();
    dev::Tensor sel;
    if (ratio == 4) {
      dev_.compressor(s_, ia.rows_view(a, b), ig.rows_view(a, b), L.idx_cmp_ape, L.idx_cmp_norm, c_.norm_eps,
                      L.rope_freqs, 4, s.pos0, ls.icmp_cur, ls.icmp_prev, ls.ikv);
      if (qat()) {  // the cache rows this chunk completed: blocks [pos0 / 4, (pos0 + n) / 4)
        const dev::Tensor fresh = ls.ikv.rows_view(s.pos0 / 4, (s.pos0 + (b - a)) / 4);
        if (fresh.ne1 > 0) dev_.act_qdq(s_, fresh, 1, dev::QdqMode::HadamardFp4, fresh.ne0, 32);
      }
      sel = ws_.i32(c_.idx_topk, b - a);
      DS4_TRY_VOID(indexer_select(l, iq.rows_view(a, b), iw.rows_view(a, b), s, ls, sel));
      if (ForwardTrace* tr = s.chunk->trace; tr && !tr->indexer.empty()) {
        std::vector<int32_t> h(static_cast<size_t>((b - a) * c_.idx_topk));
        graph_end();  // a host wait: the layer's graph region is split around it
        dev_.download(s_, sel, h.data(), h.size() * 4);
        graph_begin(2 * static_cast<uint64_t>(l) + 1);
        for (int64_t t = 0; t < b - a; ++t) {
          std::vector<int32_t>& rec = tr->indexer[l][s.pos0 + t];
          rec.clear();
          for (int64_t k = 0; k < c_.idx_topk; ++k)
            if (h[t * c_.idx_topk + k] >= 0) rec.push_back(h[t * c_.idx_topk + k]);
        }
      }
    }
    if (ratio > 0)
      dev_.compressor(s_, ca.rows_view(a, b), cg.rows_view(a, b), L.cmp_ape, L.cmp_norm, c_.norm_eps, L.rope_freqs,
                      ratio, s.pos0, ls.cmp_cur, ls.cmp_prev, ls.ckv);
    if (ratio > 0 && qat()) {  // the cache rows this chunk completed
      const dev::Tensor fresh = ls.ckv.rows_view(s.pos0 / ratio, (s.pos0 + (b - a)) / ratio);
      if (fresh.ne1 > 0) dev_.act_qdq(s_, fresh, 1, dev::QdqMode::Fp8E4M3, fresh.ne0 - c_.rope_dim, 64);
    }
    dev_.sparse_attention(s_, q.rows_view(a, b), kv.rows_view(a, b), ls.window, ratio > 0 ? ls.ckv : dev::Tensor{},
                          sel, sinks, ratio, s.pos0, scale, o.rows_view(a, b));
    dev_.window_store(s_, kv.rows_view(a, b), s.pos0, ls.window);
    ws_.release(seg_mark);
  }
  ws_.release(after_o);
  dev_.rope(s_, o, Hr, L.rope_freqs, pos, true);  // inverse RoPE at the query position

  // Grouped low-rank output: z_g = wo_a[g] o_g (heads of group g contiguous; wo_a by groups), then
  // the canonical wo_b (tensor_parallel.h, definition 1): P_s = wo_b[:, cols of shard s] z_s for
  // this rank's shards, gathered in shard order and summed in that order.
  const int64_t G = c_.o_groups, gin = c_.n_head * D / G, R = c_.o_lora_rank, S = shard_.shards;
  const int64_t gps = G / S, own = shard_.shard1 - shard_.shard0;
  const dev::Tensor zs = ws_.f32(gps * R, n);
  // P_k for this rank's k-th canonical shard into dst [n, dim].
  // A group's columns of o are copied into packed rows first: the product then streams its
  // activations from one contiguous block (strided rows 8 KiB apart alias cache sets: measured
  // 18 % more time in the F32 dot on the tiny model's prefill). One token (a decode step) has a
  // single row, already contiguous: the product reads its columns and writes z in place (the
  // same values, so the same bits; two copy launches fewer per group).
  const dev::Tensor og = ws_.f32(gin, n), zg = ws_.f32(R, n);
  auto shard_product = [&](int64_t k, const dev::Tensor& dst) {
    for (int64_t j = 0; j < gps; ++j) {
      const int64_t gl = k * gps + j;  // rank-local group (global shard0 * gps + gl)
      const dev::Tensor wg = L.out_a.rows_view(gl * R, (gl + 1) * R);  // rank-local group rows
      const dev::ActFormat fa = qat() ? dev::ActFormat::F32 : act_;   // REF: BF16 einsum for wo_a
      if (n == 1) {
        dev_.matmul(s_, wg, o.cols_view(gl * gin, (gl + 1) * gin), zs.cols_view(j * R, (j + 1) * R), fa);
        continue;
      }
      dev_.copy(s_, o.cols_view(gl * gin, (gl + 1) * gin), og);
      dev_.matmul(s_, wg, og, zg, fa);
      dev_.copy(s_, zg, zs.cols_view(j * R, (j + 1) * R));
    }
    dev_.matmul(s_, L.out_b_shards[static_cast<size_t>(shard_.shard0 + k)], zs, dst, act_);
  };
  const int64_t dim = c_.dim;
  if (!comm_) {
    // One rank: out = P_0, then += P_k in shard order.
    shard_product(0, out);
    if (S > 1) {
      const dev::Tensor tmp = ws_.f32(dim, n);
      for (int64_t k = 1; k < S; ++k) {
        shard_product(k, tmp);
        dev_.add(s_, out, tmp);
      }
    }
    ws_.release(mk);
    return ok();
  }
  const dev::Tensor part = ws_.f32(dim, n, own);  // [own, n, dim]
  for (int64_t k = 0; k < own; ++k) shard_product(k, part.plane(k));
  // Gather in token blocks of at most kBlockFloats floats over all shards.
  constexpr int64_t kBlockFloats = int64_t{1} << 24;
  const int64_t rows = std::max<int64_t>(1, kBlockFloats / (S * dim));
  for (int64_t t0 = 0; t0 < n; t0 += rows) {
    const int64_t m = std::min(rows, n - t0);
    const Workspace::Mark bm = ws_.mark();
    const dev::Tensor send = ws_.f32(dim, m, own), all = ws_.f32(dim, m, S);
    for (int64_t k = 0; k < own; ++k) dev_.copy(s_, part.plane(k).rows_view(t0, t0 + m), send.plane(k));
    DS4_TRY_VOID(dev_.all_gather(s_, *comm_, send, all));
    dev_.ordered_sum(s_, all, S, out.rows_view(t0, t0 + m));
    ws_.release(bm);
  }
  ws_.release(mk);
  return ok();
}

}  // namespace ds4

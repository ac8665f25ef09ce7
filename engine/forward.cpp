// engine/forward.cpp — embedding, the block loop with mHC, and the head (REF inference/model.py
// Transformer.forward, Block.forward, ParallelHead; ../shared/reference/dsv4-architecture.md §2.1).
#include "engine/forward.h"

#include <algorithm>

#include "engine/mhc.h"
#include "kernels/cpu/quant_ref.h"

namespace ds4 {
namespace {

/// Decodes row `r` of `w` into dst[w.in].
void decode_row(const dev::WeightMatrix& w, int64_t r, float* dst) {
  if (w.type == GgmlType::F32) {
    std::copy_n(reinterpret_cast<const float*>(w.row(r)), w.in, dst);
  } else {
    cpu::dequantize_row(w.type, w.row(r), dst, w.in);
  }
}

/// The single-device shard (R = 1); cannot fail for one rank.
TpShard single_shard(const ModelConfig& c, const ModelWeights& w) {
  Result<TpShard> s = make_tp_shard(c, w, 0, 1);
  DS4_CHECK(s.ok());
  return std::move(s).value();
}

}  // namespace

Forward::Forward(const ModelConfig& c, const ModelWeights& w, dev::Device& device, dev::ActFormat act)
    : c_(c), w_(w), dev_(device), act_(act), shard_(single_shard(c, w)) {}

Forward::Forward(const ModelConfig& c, const ModelWeights& w, dev::Device& device, dev::ActFormat act,
                 TpShard shard, comm::Comm* comm)
    : c_(c), w_(w), dev_(device), act_(act), shard_(std::move(shard)), comm_(comm) {
  DS4_CHECK((comm_ == nullptr) == (shard_.ranks == 1));
  DS4_CHECK(!comm_ || (comm_->size() == shard_.ranks && comm_->rank() == shard_.rank));
}

Result<void> Forward::eval(std::span<const int32_t> tokens, SequenceState& st, bool all_rows,
                           std::vector<float>* logits, ForwardTrace* trace) const {
  const int64_t n = static_cast<int64_t>(tokens.size()), dim = c_.dim;
  const int hc = c_.hc, mix_rows = (2 + hc) * hc;
  if (n == 0) return ok();
  for (int64_t t = 0; t < n; ++t)
    if (tokens[t] < 0 || tokens[t] >= c_.vocab)
      return Error{"token id " + std::to_string(tokens[t]) + " at position " + std::to_string(st.pos + t) +
                   ": expected 0.." + std::to_string(c_.vocab - 1)};
  if (trace) {
    const size_t need = static_cast<size_t>(st.pos + n);
    for (auto* rec : {&trace->router, &trace->indexer}) {
      if (rec->size() != static_cast<size_t>(c_.n_layer)) rec->resize(c_.n_layer);
      for (auto& v : *rec)
        if (v.size() < need) v.resize(need);
    }
  }

  // X [n, hc, dim]: every copy starts as the token embedding. Vocabulary-parallel: the owner of
  // a token's row decodes it; the rows are gathered and each token takes its owner's copy (exact,
  // signed zeros included).
  std::vector<float> X(static_cast<size_t>(n * hc * dim));
  {
    std::vector<float> e(static_cast<size_t>(n * dim), 0.0f), all;
    for (int64_t t = 0; t < n; ++t)
      if (tokens[t] >= shard_.vocab0 && tokens[t] < shard_.vocab1) decode_row(w_.token_embd, tokens[t], e.data() + t * dim);
    const float* src = e.data();
    const int64_t vr = shard_.vocab1 - shard_.vocab0;
    if (comm_) {
      all.resize(static_cast<size_t>(shard_.ranks * n * dim));
      DS4_TRY_VOID(comm_->all_gather_f32(e.data(), n * dim, all.data()));
    }
    for (int64_t t = 0; t < n; ++t) {
      if (comm_) src = all.data() + (tokens[t] / vr) * n * dim;
      for (int j = 0; j < hc; ++j) std::copy_n(src + t * dim, dim, X.data() + (t * hc + j) * dim);
    }
  }

  std::vector<float> y(static_cast<size_t>(n * dim)), f(static_cast<size_t>(n * dim));
  std::vector<HcMix> mix(static_cast<size_t>(n));
  auto hc_pre = [&](const float* fn, const float* scale, const float* base, const float* norm) {
    dev_.parallel_for(n, [&](int64_t t) {
      float m[64];
      DS4_CHECK(mix_rows <= 64);
      const float* xt = X.data() + t * hc * dim;
      hc_mixes(fn, mix_rows, xt, hc * dim, c_.norm_eps, m);
      mix[t] = hc_split_sinkhorn(m, scale, base, hc, c_.hc_iters, c_.hc_eps);
      hc_weighted_sum(xt, mix[t].pre.data(), hc, dim, y.data() + t * dim);
    });
    dev_.rmsnorm(y.data(), norm, n, dim, c_.norm_eps, y.data());
  };
  auto post = [&] {
    dev_.parallel_for(n, [&](int64_t t) { hc_post(f.data() + t * dim, mix[t], hc, dim, X.data() + t * hc * dim); });
  };

  for (int l = 0; l < c_.n_layer; ++l) {
    const LayerWeights& L = w_.layers[l];
    hc_pre(L.hc_attn_fn, L.hc_attn_scale, L.hc_attn_base, L.attn_norm);
    DS4_TRY_VOID(attention(l, y.data(), n, st, f.data(), trace));
    post();
    hc_pre(L.hc_ffn_fn, L.hc_ffn_scale, L.hc_ffn_base, L.ffn_norm);
    DS4_TRY_VOID(moe(l, y.data(), tokens, st.pos, f.data(), trace));
    post();
  }
  st.pos += n;

  // Head: h = sum_j w_j X_j with w = sigmoid(mixes*scale + base) + eps; logits = output(norm(h)).
  const int64_t first = all_rows ? 0 : n - 1, rows = n - first;
  std::vector<float> h(static_cast<size_t>(rows * dim));
  dev_.parallel_for(rows, [&](int64_t i) {
    const float* xt = X.data() + (first + i) * hc * dim;
    float m[16], wj[16];
    DS4_CHECK(hc <= 16);
    hc_mixes(w_.hc_head_fn, hc, xt, hc * dim, c_.norm_eps, m);
    hc_head_weights(m, w_.hc_head_scale, w_.hc_head_base, hc, c_.hc_eps, wj);
    hc_weighted_sum(xt, wj, hc, dim, h.data() + i * dim);
  });
  dev_.rmsnorm(h.data(), w_.output_norm, rows, dim, c_.norm_eps, h.data());
  if (logits) {
    logits->resize(static_cast<size_t>(rows * c_.vocab));
    if (!comm_) {
      dev_.matmul(w_.output, h.data(), rows, logits->data(), act_);
    } else {
      // Vocabulary-parallel head: this rank's slice, then a gather of [R, rows, vocab/R].
      const int64_t vr = shard_.vocab1 - shard_.vocab0, R = shard_.ranks;
      std::vector<float> part(static_cast<size_t>(rows * vr)), all(static_cast<size_t>(R * rows * vr));
      dev_.matmul(row_slice(w_.output, shard_.vocab0, shard_.vocab1), h.data(), rows, part.data(), act_);
      DS4_TRY_VOID(comm_->all_gather_f32(part.data(), rows * vr, all.data()));
      for (int64_t r = 0; r < R; ++r)
        for (int64_t i = 0; i < rows; ++i)
          std::copy_n(all.data() + (r * rows + i) * vr, vr, logits->data() + i * c_.vocab + r * vr);
    }
  }
  return ok();
}

}  // namespace ds4

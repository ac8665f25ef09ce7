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

}  // namespace

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

  // X [n, hc, dim]: every copy starts as the token embedding.
  std::vector<float> X(static_cast<size_t>(n * hc * dim));
  for (int64_t t = 0; t < n; ++t) {
    decode_row(w_.token_embd, tokens[t], X.data() + t * hc * dim);
    for (int j = 1; j < hc; ++j) std::copy_n(X.data() + t * hc * dim, dim, X.data() + (t * hc + j) * dim);
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
    attention(l, y.data(), n, st, f.data(), trace);
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
    dev_.matmul(w_.output, h.data(), rows, logits->data(), act_);
  }
  return ok();
}

}  // namespace ds4

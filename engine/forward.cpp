// engine/forward.cpp — weight binding, embedding, the block loop with mHC, and the head (REF
// inference/model.py Transformer.forward, Block.forward, ParallelHead;
// ../shared/reference/dsv4-architecture.md §2.1), as device ops over a batch.
#include "engine/forward.h"

#include <algorithm>
#include <string>

namespace ds4 {
namespace {

/// The single-device shard (R = 1); cannot fail for one rank.
TpShard single_shard(const ModelConfig& c, const ModelWeights& w) {
  Result<TpShard> s = make_tp_shard(c, w, 0, 1);
  DS4_CHECK(s.ok());
  return std::move(s).value();
}

}  // namespace

DeviceWeights bind_device_weights(const ModelConfig& c, const ModelWeights& w, dev::Device& d) {
  return bind_device_weights(c, w, d, single_shard(c, w));
}

DeviceWeights bind_device_weights(const ModelConfig& c, const ModelWeights& w, dev::Device& d, const TpShard& sh) {
  DeviceWeights o;
  const int64_t dim = c.dim, hc = c.hc, mix = (2 + hc) * hc;
  auto f = [&](const float* p, int64_t n) { return p ? d.bind_f32(p, n) : dev::Tensor{}; };
  auto m = [&](const dev::WeightMatrix& x) { return x.data ? d.bind(x) : dev::Tensor{}; };
  o.token_embd = m(w.token_embd);
  o.output = w.output.data ? d.bind(row_slice(w.output, sh.vocab0, sh.vocab1)) : dev::Tensor{};
  o.output_norm = f(w.output_norm, dim);
  o.hc_head_fn = f(w.hc_head_fn, hc * hc * dim);
  o.hc_head_base = f(w.hc_head_base, hc);
  o.hc_head_scale = f(w.hc_head_scale, 1);
  for (int l = 0; l < c.n_layer; ++l) {
    const LayerWeights& L = w.layers[l];
    LayerTensors t;
    t.hc_attn_fn = f(L.hc_attn_fn, mix * hc * dim);
    t.hc_attn_base = f(L.hc_attn_base, mix);
    t.hc_attn_scale = f(L.hc_attn_scale, 3);
    t.hc_ffn_fn = f(L.hc_ffn_fn, mix * hc * dim);
    t.hc_ffn_base = f(L.hc_ffn_base, mix);
    t.hc_ffn_scale = f(L.hc_ffn_scale, 3);
    t.attn_norm = f(L.attn_norm, dim);
    t.ffn_norm = f(L.ffn_norm, dim);
    t.attn_sinks = f(L.attn_sinks, c.n_head);
    t.q_a = m(L.q_a);
    t.q_a_norm = f(L.q_a_norm, c.q_lora_rank);
    const int64_t D = c.head_dim, S = sh.shards, gps = c.o_groups / S, R = c.o_lora_rank;
    t.q_b = d.bind(row_slice(L.q_b, sh.head0 * D, sh.head1 * D));
    t.kv = m(L.kv);
    t.kv_norm = f(L.kv_norm, c.head_dim);
    t.out_a = d.bind(row_slice(L.out_a, sh.shard0 * gps * R, sh.shard1 * gps * R));
    t.out_b_shards.resize(static_cast<size_t>(S));
    for (int64_t s = sh.shard0; s < sh.shard1; ++s)
      t.out_b_shards[static_cast<size_t>(s)] = d.bind(col_slice(L.out_b, s * gps * R, (s + 1) * gps * R));
    const int r = c.ratio(l);
    if (r > 0) {
      const int64_t cw = (r == 4 ? 2 : 1) * c.head_dim;
      t.cmp_kv = m(L.cmp_kv);
      t.cmp_gate = m(L.cmp_gate);
      t.cmp_ape = f(L.cmp_ape, r * cw);
      t.cmp_norm = f(L.cmp_norm, c.head_dim);
    }
    if (r == 4) {
      t.idx_q_b = d.bind(row_slice(L.idx_q_b, sh.idx_head0 * c.idx_head_dim, sh.idx_head1 * c.idx_head_dim));
      t.idx_proj = d.bind(row_slice(L.idx_proj, sh.idx_head0, sh.idx_head1));
      t.idx_cmp_kv = m(L.idx_cmp_kv);
      t.idx_cmp_gate = m(L.idx_cmp_gate);
      t.idx_cmp_ape = f(L.idx_cmp_ape, 4 * 2 * c.idx_head_dim);
      t.idx_cmp_norm = f(L.idx_cmp_norm, c.idx_head_dim);
    }
    t.gate_inp = m(L.gate_inp);
    if (L.tid2eid) t.tid2eid = d.bind_i32(L.tid2eid, c.n_expert_used, c.vocab);
    t.probs_bias = f(L.probs_bias, c.n_expert);
    t.sh_gate = m(L.sh_gate);
    t.sh_up = m(L.sh_up);
    t.sh_down = m(L.sh_down);
    t.rope_freqs = d.bind_f32(L.rope.freqs().data(), static_cast<int64_t>(L.rope.freqs().size()));
    o.layers.push_back(t);
  }
  return o;
}

Forward::Forward(const ModelConfig& c, const ModelWeights& w, const DeviceWeights& dw, dev::Device& device,
                 dev::ActFormat act)
    : c_(c), w_(w), experts_(w.experts->for_rank(0)), dw_(dw), dev_(device), s_(device.stream()), act_(act),
      shard_(single_shard(c, w)), ws_(device) {}

Forward::Forward(const ModelConfig& c, const ModelWeights& w, const DeviceWeights& dw, dev::Device& device,
                 dev::ActFormat act, TpShard shard, comm::Comm* comm)
    : c_(c), w_(w), experts_(w.experts->for_rank(shard.rank)), dw_(dw), dev_(device), s_(device.stream()), act_(act),
      shard_(std::move(shard)), comm_(comm), ws_(device) {
  DS4_CHECK((comm_ == nullptr) == (shard_.ranks == 1));
  DS4_CHECK(!comm_ || (comm_->size() == shard_.ranks && comm_->rank() == shard_.rank));
}

Result<void> Forward::eval(std::span<const int32_t> tokens, SequenceState& st, bool all_rows,
                           std::vector<float>* logits, ForwardTrace* trace) {
  if (tokens.empty()) return ok();
  const SeqChunk c{&st, tokens, all_rows, logits, trace};
  return eval(std::span<const SeqChunk>(&c, 1));
}

Result<void> Forward::eval(std::span<const SeqChunk> batch) {
  const int64_t dim = c_.dim;
  const int hc = c_.hc, mix_rows = (2 + hc) * hc;
  // Validate the batch, lay out its rows.
  std::vector<Seg>& segs = segs_;
  std::vector<int32_t>& tok_h = tok_host_;
  std::vector<int32_t>& pos_h = pos_host_;
  segs.clear();
  tok_h.clear();
  pos_h.clear();
  for (const SeqChunk& ch : batch) {
    DS4_CHECK(ch.st != nullptr && !ch.tokens.empty());
    for (const Seg& s : segs) DS4_CHECK(s.chunk->st != ch.st);  // one chunk per sequence
    const int64_t n = static_cast<int64_t>(ch.tokens.size()), pos0 = ch.st->pos;
    if (pos0 + n > ch.st->capacity())
      return Error{"eval: " + std::to_string(pos0) + " + " + std::to_string(n) +
                   " tokens exceed the session's capacity " + std::to_string(ch.st->capacity())};
    for (int64_t t = 0; t < n; ++t)
      if (ch.tokens[t] < 0 || ch.tokens[t] >= c_.vocab)
        return Error{"token id " + std::to_string(ch.tokens[t]) + " at position " + std::to_string(pos0 + t) +
                     ": expected 0.." + std::to_string(c_.vocab - 1)};
    const int64_t r0 = static_cast<int64_t>(tok_h.size());
    segs.push_back(Seg{&ch, r0, r0 + n, pos0});
    for (int64_t t = 0; t < n; ++t) {
      tok_h.push_back(ch.tokens[t]);
      pos_h.push_back(static_cast<int32_t>(pos0 + t));
    }
    if (ch.trace) {
      const size_t need = static_cast<size_t>(pos0 + n);
      for (auto* rec : {&ch.trace->router, &ch.trace->indexer}) {
        if (rec->size() != static_cast<size_t>(c_.n_layer)) rec->resize(c_.n_layer);
        for (auto& v : *rec)
          if (v.size() < need) v.resize(need);
      }
    }
  }
  const int64_t n = static_cast<int64_t>(tok_h.size());
  if (n == 0) return ok();
  ws_.reset();
  const dev::Tensor tok = ws_.i32(1, n), pos = ws_.i32(1, n);
  dev_.upload(s_, tok, tok_h.data(), static_cast<uint64_t>(n) * 4);
  dev_.upload(s_, pos, pos_h.data(), static_cast<uint64_t>(n) * 4);
  prefetch_hash_layers(tok_h);  // hash-routed layers' staged experts: copies behind attention
  // Graph regions (set_graphs): a decode step of one token; the guard ends an open region on
  // every return (its ops are queued, as without a region).
  graph_step_ = graphs_ && n == 1;
  struct GraphGuard {
    Forward* f;
    ~GraphGuard() { f->graph_end(); }
  } graph_guard{this};
  graph_begin(0);

  // X [n, hc*dim]: every copy starts as the token embedding. Vocabulary-parallel: the owner of a
  // token's row decodes it, the rows are gathered and each token takes its owner's copy (exact,
  // signed zeros included).
  const dev::Tensor X = ws_.f32(hc * dim, n);
  {
    const Workspace::Mark mk = ws_.mark();
    const dev::Tensor e = ws_.f32(dim, n);
    dev_.embed_rows(s_, dw_.token_embd, tok, shard_.vocab0, shard_.vocab1, e);
    if (comm_) {
      const dev::Tensor all = ws_.f32(dim, shard_.ranks * n), mine = ws_.f32(dim, n);
      DS4_TRY_VOID(dev_.all_gather(s_, *comm_, e, all));
      dev_.owner_rows(s_, all, tok, shard_.vocab1 - shard_.vocab0, mine);
      dev_.hc_expand(s_, mine, hc, X);
    } else {
      dev_.hc_expand(s_, e, hc, X);
    }
    ws_.release(mk);
  }

  const dev::Tensor y = ws_.f32(dim, n), f = ws_.f32(dim, n), mix = ws_.f32(mix_rows, n);
  for (int l = 0; l < c_.n_layer; ++l) {
    const LayerTensors& L = dw_.layers[l];
    const Workspace::Mark mk = ws_.mark();
    dev_.hc_pre(s_, X, L.hc_attn_fn, L.hc_attn_scale, L.hc_attn_base, hc, c_.hc_iters, c_.hc_eps, c_.norm_eps, y, mix);
    dev_.rmsnorm(s_, y, L.attn_norm, c_.norm_eps, y);
    DS4_TRY_VOID(attention(l, y, pos, segs, f));
    dev_.hc_post(s_, f, mix, hc, X);
    ws_.release(mk);
    dev_.hc_pre(s_, X, L.hc_ffn_fn, L.hc_ffn_scale, L.hc_ffn_base, hc, c_.hc_iters, c_.hc_eps, c_.norm_eps, y, mix);
    dev_.rmsnorm(s_, y, L.ffn_norm, c_.norm_eps, y);
    DS4_TRY_VOID(moe(l, y, tok, tok_h, segs, f));
    dev_.hc_post(s_, f, mix, hc, X);
    ws_.release(mk);
  }
  for (const Seg& s : segs) s.chunk->st->pos += s.r1 - s.r0;

  // Head: h = sum_j w_j X_j with w = sigmoid(mixes*scale + base) + eps; logits = output(norm(h)),
  // over the rows whose logits are wanted (a chunk's rows, or its last row).
  int64_t rows = 0;
  for (const Seg& s : segs)
    if (s.chunk->logits) rows += s.chunk->all_rows ? s.r1 - s.r0 : 1;
  if (rows == 0) return ok();
  const dev::Tensor h = ws_.f32(dim, rows);
  {
    int64_t at = 0;
    for (const Seg& s : segs) {
      if (!s.chunk->logits) continue;
      const int64_t a = s.chunk->all_rows ? s.r0 : s.r1 - 1, m = s.r1 - a;
      dev_.hc_head(s_, X.rows_view(a, s.r1), dw_.hc_head_fn, dw_.hc_head_scale, dw_.hc_head_base, hc, c_.hc_eps,
                   c_.norm_eps, h.rows_view(at, at + m));
      at += m;
    }
  }
  dev_.rmsnorm(s_, h, dw_.output_norm, c_.norm_eps, h);
  const dev::Tensor lg = ws_.f32(c_.vocab, rows);
  if (!comm_) {
    dev_.matmul(s_, dw_.output, h, lg, act_);
  } else {
    // Vocabulary-parallel head: this rank's slice, then a gather of [R, rows, vocab/R].
    const int64_t vr = shard_.vocab1 - shard_.vocab0, R = shard_.ranks;
    const dev::Tensor part = ws_.f32(vr, rows), all = ws_.f32(vr, rows, R);
    dev_.matmul(s_, dw_.output, h, part, act_);  // this rank's vocabulary rows
    DS4_TRY_VOID(dev_.all_gather(s_, *comm_, part, all));
    for (int64_t r = 0; r < R; ++r) dev_.copy(s_, all.plane(r), lg.cols_view(r * vr, (r + 1) * vr));
  }
  graph_end();  // the head's region ends at the logits download
  // The one logits download of the step, then each chunk's rows (straight into the chunk's
  // vector when one chunk wants logits).
  const size_t total = static_cast<size_t>(rows * c_.vocab);
  for (const Seg& s : segs) {
    if (!s.chunk->logits) continue;
    const int64_t mine = s.chunk->all_rows ? s.r1 - s.r0 : 1;
    if (mine != rows) break;  // other chunks want logits too
    {
      s.chunk->logits->resize(total);
      dev_.download(s_, lg, s.chunk->logits->data(), total * 4);
      return ok();
    }
  }
  std::vector<float>& host = logits_host_;
  host.resize(total);
  dev_.download(s_, lg, host.data(), total * 4);
  int64_t at = 0;
  for (const Seg& s : segs) {
    if (!s.chunk->logits) continue;
    const int64_t m = s.chunk->all_rows ? s.r1 - s.r0 : 1;
    s.chunk->logits->assign(host.begin() + at * c_.vocab, host.begin() + (at + m) * c_.vocab);
    at += m;
  }
  return ok();
}

}  // namespace ds4

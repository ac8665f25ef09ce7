// engine/moe_layer.cpp — the MoE sublayer of DeepSeek-V4 (REF inference/model.py MoE, Gate,
// Expert; ../shared/reference/dsv4-architecture.md §2.5) over a batch. Routed experts come from
// the staging::ExpertStore. Combine order: for each token, routed expert outputs are added in
// ascending expert id order in FP32, then the shared expert's output (DESIGN.md numerics).
// Tensor parallel: routed experts by owner rank, shared expert replicated (tensor_parallel.h);
// in a plan's Split layers the staged experts are computed by every rank, each its row slices
// (moe_split, split staging: engine/tensor_parallel.md).
// Staged-expert pipeline (issue 20 item 2): the step's experts are bound (staged copies queued on
// the device's copy stream) before the shared expert and the routed launches are queued; the
// hash-routed layers' staged experts (whole ones, and this rank's slices of a Split layer's) are
// bound at the step's start (prefetch_hash_layers). Experts the plan computes on the CPU are
// computed by the host beside the GPU (moe_cpu_experts, engine/moe_cpu_experts.cpp).
#include <algorithm>
#include <array>

#include "engine/forward.h"

namespace ds4 {

Result<void> Forward::moe(int l, const dev::Tensor& x, const dev::Tensor& tok, std::span<const int32_t> tokens,
                          std::span<const Seg> segs, const dev::Tensor& out) {
  const LayerTensors& L = dw_.layers[l];
  const int64_t n = x.ne1, dim = c_.dim;
  const int E = c_.n_expert, K = c_.n_expert_used;
  const Workspace::Mark mk = ws_.mark();

  // Router: FP32 gate (REF: linear(x.float(), weight.float())), sqrtsoftplus, top-k / hash.
  const dev::Tensor logits = ws_.f32(E, n), ids = ws_.i32(K, n), rw = ws_.f32(K, n);
  dev_.matmul(s_, L.gate_inp, x, logits, dev::ActFormat::F32);
  dev_.router(s_, logits, L.probs_bias, L.tid2eid, tok, c_.route_norm, c_.route_scale, ids, rw);
  // Sync point: the expert ids drive the expert store (which experts to fetch or stage).
  ids_host_.resize(static_cast<size_t>(n * K));
  graph_end();  // the layer's graph region ends at the router (set_graphs)
  dev_.download(s_, ids, ids_host_.data(), ids_host_.size() * 4);
  for (int64_t t = 0; t < n; ++t)
    for (int k = 0; k < K; ++k)
      if (const int32_t e = ids_host_[t * K + k]; e < 0 || e >= E)
        return Error{"tensor 'blk." + std::to_string(l) + ".ffn_gate_tid2eid.weight': entry for token " +
                     std::to_string(tokens[t]) + ": expected an expert id 0.." + std::to_string(E - 1) + ", found " +
                     std::to_string(e)};
  for (const Seg& s : segs)
    if (ForwardTrace* tr = s.chunk->trace; tr && !tr->router.empty())
      for (int64_t t = s.r0; t < s.r1; ++t)
        tr->router[l][s.pos0 + t - s.r0].assign(ids_host_.begin() + t * K, ids_host_.begin() + (t + 1) * K);
  // Activation hook (ForwardTrace::moe_input): host copies of x and the routing weights, rank 0.
  if (shard_.rank == 0 && std::any_of(segs.begin(), segs.end(), [](const Seg& s) {
        return s.chunk->trace && s.chunk->trace->moe_input;
      })) {
    std::vector<float> xh(static_cast<size_t>(n * dim)), wh(static_cast<size_t>(n * K));
    dev_.download(s_, x, xh.data(), xh.size() * 4);
    dev_.download(s_, rw, wh.data(), wh.size() * 4);
    for (const Seg& s : segs)
      if (ForwardTrace* tr = s.chunk->trace; tr && tr->moe_input) {
        const size_t r0 = static_cast<size_t>(s.r0), m = static_cast<size_t>(s.r1 - s.r0);
        tr->moe_input(l, s.r1 - s.r0, std::span<const float>(xh.data() + r0 * size_t(dim), m * size_t(dim)),
                      std::span<const int32_t>(ids_host_.data() + r0 * size_t(K), m * size_t(K)),
                      std::span<const float>(wh.data() + r0 * size_t(K), m * size_t(K)));
      }
  }

  // Routed experts (tensor_parallel.h, definition 3): this rank computes the experts it owns,
  // ascending id, each over the batch's tokens routed to it, and writes each output into its
  // (token, slot) row of Y [tokens, K, dim]; rows of experts owned elsewhere stay 0 and the
  // all-reduce is exact (one non-zero contributor per element). Then every rank adds a token's
  // slots in ascending expert id order, from +0. Runs over blocks of tokens (Y bounded).
  constexpr int64_t kSlotFloats = int64_t{1} << 24;
  const int64_t block = std::max<int64_t>(1, kSlotFloats / (K * dim));
  const float limit = c_.swiglu_limit[l];
  Result<void> failed = ok();  // an expert-store error is returned after the collectives
  // Announce this step's experts (ascending, distinct, owned by this rank) to the store: a caching
  // store reserves their slots so loading one never evicts another this step needs. Released by
  // end_step after the loop, on the error path too.
  std::vector<int32_t>& step_experts = step_experts_;
  step_experts.clear();
  for (int32_t e : ids_host_)
    if (shard_.owns_expert(l, e)) step_experts.push_back(e);
  std::sort(step_experts.begin(), step_experts.end());
  step_experts.erase(std::unique(step_experts.begin(), step_experts.end()), step_experts.end());
  if (auto b = experts_.begin_step(l, std::span<const int>(step_experts.data(), step_experts.size())); !b)
    failed = b.error();
  // Experts split over the ranks are computed by moe_split on every rank, not by their owner.
  if (shard_.ranks > 1)
    std::erase_if(step_experts, [&](int32_t e) { return experts_.rank_sliced(l, e); });
  split_block_ = 0;
  // Experts the plan computes on the CPU (set_cpu_experts_device): never bound on the GPU. The
  // host computes them from its copies of x and the routing weights, complete now (the router's
  // ids were just waited for), while the GPU runs the rest (moe_cpu_experts).
  std::vector<int32_t>& cpu_step = cpu_step_;
  cpu_step.clear();
  cpu_block_n_ = 0;
  if (cpu_dev_) {
    for (int32_t e : step_experts)
      if (experts_.cpu_computed(l, e)) cpu_step.push_back(e);
    std::erase_if(step_experts, [&](int32_t e) { return experts_.cpu_computed(l, e); });
    if (!cpu_marks_.empty()) (void)cpu_expert_gpu_idle_seconds();  // read the last layer's points
    if (!cpu_step.empty()) {
      cpu_x_.resize(static_cast<size_t>(n * dim));
      cpu_rw_.resize(static_cast<size_t>(n * K));
      dev_.download(s_, x, cpu_x_.data(), cpu_x_.size() * 4);
      dev_.download(s_, rw, cpu_rw_.data(), cpu_rw_.size() * 4);
    }
  }
  // Shared expert (clamp from swiglu_clamp_shexp; 0 = none, as REF) into its own buffers: queued
  // on the compute stream right after the first batch of routed binds, so the staged copies run
  // on the copy stream behind it; added to `out` after the routed sum (the single-device order).
  const int64_t sff = L.sh_gate.ne1;
  const dev::Tensor sg = ws_.f32(sff, n), su = ws_.f32(sff, n), sy = ws_.f32(dim, n);
  bool shared_queued = false;
  auto queue_shared = [&] {
    if (shared_queued) return;
    shared_queued = true;
    dev_.matmul2(s_, L.sh_gate, sg, L.sh_up, su, x, act_);
    dev_.swiglu(s_, sg, su, c_.swiglu_limit_shexp[l], dev::Tensor{});
    dev_.matmul(s_, L.sh_down, sg, sy, act_);
  };
  // Staged pipeline (issue 20 item 2): per token block, the block's experts are bound in batches:
  // every expert of a batch is bound (a staged one's three copies queued on the copy stream)
  // before the batch's launches, which wait for their own copies only (kernels/device.h,
  // reserve_staged_binds). A batch ends when the device's staging ring holds no further three
  // staged binds, and before / after an expert whose bound tensors may not outlive the next
  // get(): not stable on a device whose bind aliases host memory (the CPU over a caching store,
  // which may hand the next expert the same bypass slot) is bound right before its own launch.
  const bool bind_copies = dev_.owns_memory();
  int ring = 0;  // staged binds the device lets await their readers (0: no limit)
  std::vector<dev::ExpertTensors>& bound = bound_experts_;
  const dev::Tensor Y = ws_.f32(dim, std::min(n, block) * K);
  for (int64_t t0 = 0; t0 < n; t0 += block) {
    const int64_t t1 = std::min(n, t0 + block), nb = t1 - t0;
    const dev::Tensor Yb = Y.rows_view(0, nb * K), idb = ids.rows_view(t0, t1);
    std::vector<int32_t>& cpu_block = cpu_block_;  // this block's CPU-computed experts, ascending
    cpu_block.clear();
    for (int e : cpu_step)
      if (std::find(ids_host_.begin() + t0 * K, ids_host_.begin() + t1 * K, e) != ids_host_.begin() + t1 * K)
        cpu_block.push_back(e);
    // +0 in the rows no launch of this rank writes: other ranks' experts (summed by the
    // all-reduce) and the CPU's (added after the GPU's launches).
    if (comm_ || !cpu_block.empty()) dev_.fill(s_, Yb, 0.0f);
    if (shard_.ranks > 1)  // split staging first: it writes +0 into the other slots' columns
      if (Result<void> sr = moe_split(l, x.rows_view(t0, t1), rw.rows_view(t0, t1),
                                      std::span<const int32_t>(ids_host_).subspan(static_cast<size_t>(t0 * K),
                                                                                 static_cast<size_t>(nb * K)),
                                      limit, Yb, queue_shared);
          !sr && failed.ok())
        failed = sr.error();
    std::vector<int32_t>& used = block_experts_;  // this block's experts, ascending
    used.clear();
    for (int e : step_experts) {
      bool u = false;
      for (int64_t i = t0 * K; i < t1 * K && !u; ++i) u = ids_host_[i] == e;
      if (u) used.push_back(e);
    }
    size_t next = 0;
    while (next < used.size() && failed.ok()) {
      bound.clear();
      int staged_binds = 0;
      while (next < used.size()) {
        const int e = used[next];
        if (size_t(l) < prefetched_.size()) {  // bound at the step's start (prefetch_hash_layers)
          const Prefetched& pf = prefetched_[size_t(l)];
          const auto it = std::find_if(pf.experts.begin(), pf.experts.end(),
                                       [e](const dev::ExpertTensors& t) { return t.id == e; });
          if (it != pf.experts.end()) {
            bound.push_back(*it);
            expert_weight_bytes_ += pf.bytes[size_t(it - pf.experts.begin())];
            staged_expert_bytes_ += pf.bytes[size_t(it - pf.experts.begin())];  // never stable
            ++next;
            continue;
          }
        }
        // Stable matrices are bound Persistent (device-resident experts); others Staged, copied
        // into the device's ring at every use (dev::BindMode) where bind copies.
        const bool stable = experts_.stable(l, e);
        const bool staged = !stable && bind_copies;
        const bool ahead = stable || bind_copies;
        if (!bound.empty() && (!ahead || (staged && ring > 0 && staged_binds + 3 > ring))) break;
        Result<std::array<dev::WeightMatrix, 3>> w = expert_matrices(l, e);
        if (!w.ok()) {
          failed = w.error();
          break;
        }
        ++next;
        if (staged && staged_binds == 0)  // no staged tensor of this layer awaits a reader now
          ring = dev_.reserve_staged_binds(
              std::max({matrix_bytes((*w)[0]), matrix_bytes((*w)[1]), matrix_bytes((*w)[2])}));
        if (!stable) dev_.set_bind_mode(dev::BindMode::Staged);
        bound.push_back(dev::ExpertTensors{e, dev_.bind((*w)[0]), dev_.bind((*w)[1]), dev_.bind((*w)[2])});
        if (!stable) dev_.set_bind_mode(dev::BindMode::Persistent);
        if (staged) staged_binds += 3;
        const uint64_t eb = matrix_bytes((*w)[0]) + matrix_bytes((*w)[1]) + matrix_bytes((*w)[2]);
        expert_weight_bytes_ += eb;
        if (!stable) staged_expert_bytes_ += eb;
        if (!ahead) break;
      }
      queue_shared();  // once, behind the first batch's copies
      if (failed.ok() && !bound.empty())
        dev_.moe_experts(s_, x.rows_view(t0, t1), idb, rw.rows_view(t0, t1), bound, limit, act_, Yb,
                         std::span<const int32_t>(ids_host_).subspan(static_cast<size_t>(t0 * K),
                                                                      static_cast<size_t>((t1 - t0) * K)));
    }
    if (!cpu_block.empty() && failed.ok()) {
      queue_shared();  // the GPU's own work first, then the host computes its experts meanwhile
      if (Result<void> cr = moe_cpu_experts(l, t0, t1, cpu_block, limit, Yb); !cr) failed = cr.error();
    }
    // After the last block's routed launches: the next graph region (the rest of this layer, then
    // the next layer up to its router, or the head) begins.
    if (t1 == n) graph_begin(2 * static_cast<uint64_t>(l + 1));
    if (comm_) DS4_TRY_VOID(dev_.all_reduce_sum(s_, *comm_, Yb));
    if (failed.ok()) dev_.moe_combine(s_, Yb, idb, out.rows_view(t0, t1));
  }
  experts_.end_step(l);
  if (size_t(l) < prefetched_.size()) {  // read by now
    prefetched_[size_t(l)].experts.clear();
    prefetched_[size_t(l)].split.clear();
  }
  if (!failed.ok()) return failed;
  queue_shared();  // a step without routed experts of this rank
  dev_.add(s_, out, sy);
  ws_.release(mk);
  return ok();
}

Result<std::array<dev::WeightMatrix, 3>> Forward::expert_matrices(int l, int e) {
  std::array<dev::WeightMatrix, 3> m;
  for (int p = 0; p < 3; ++p) {
    DS4_TRY(m[size_t(p)], experts_.get(l, e, static_cast<staging::ExpertProj>(p)));
  }
  return m;
}

Result<void> Forward::moe_split(int l, const dev::Tensor& xb, const dev::Tensor& rwb, std::span<const int32_t> ids,
                                float limit, const dev::Tensor& yb, const std::function<void()>& after_binds) {
  const int R = shard_.ranks, r = shard_.rank;
  const int64_t nb = xb.ne1, K = c_.n_expert_used, dim = c_.dim, P = nb * K;
  const int64_t ff = c_.expert_ff, ffr = ff / R, dr = dim / R;
  std::vector<int32_t>& es = split_experts_;
  es.clear();
  for (int32_t e : ids)
    if (experts_.rank_sliced(l, e)) es.push_back(e);
  if (es.empty()) return ok();  // the same on every rank: the store and the ids are replicated
  std::sort(es.begin(), es.end());
  es.erase(std::unique(es.begin(), es.end()), es.end());
  const Workspace::Mark mk = ws_.mark();
  // Host index lists, uploaded as one I32 row: inv[p] for every slot p = t*K + k of the block (the
  // slot's index below, -1 for the slots of other experts), then the split experts' slots in
  // ascending (expert, p) order (moe_experts' order), then each of those slots' token t.
  if (split_host_.size() <= split_block_) split_host_.resize(split_block_ + 1);
  std::vector<int32_t>& h = split_host_[split_block_++];
  h.assign(static_cast<size_t>(P), -1);
  std::vector<int64_t> first(es.size() + 1);  // expert i's slots: [first[i], first[i + 1])
  for (size_t i = 0; i < es.size(); ++i) {
    first[i] = static_cast<int64_t>(h.size()) - P;
    for (int64_t p = 0; p < P; ++p)
      if (ids[static_cast<size_t>(p)] == es[i]) {
        h[static_cast<size_t>(p)] = static_cast<int32_t>(static_cast<int64_t>(h.size()) - P);
        h.push_back(static_cast<int32_t>(p));
      }
  }
  const int64_t S = static_cast<int64_t>(h.size()) - P;
  first[es.size()] = S;
  for (int64_t i = 0; i < S; ++i) h.push_back(static_cast<int32_t>(h[static_cast<size_t>(P + i)] / K));
  const dev::Tensor idx = ws_.i32(P + 2 * S, 1);
  dev_.upload(s_, idx, h.data(), h.size() * 4);
  const dev::Tensor inv = idx.cols_view(0, P), slots = idx.cols_view(P, P + S), toks = idx.cols_view(P + S, P + 2 * S);
  const dev::Tensor xs = ws_.f32(dim, S), ws = ws_.f32(1, S), G = ws_.f32(ffr, S), U = ws_.f32(ffr, S);
  const dev::Tensor recv = ws_.f32(ffr, R * S), H = ws_.f32(ff, S), Z = ws_.f32(dr, S);

  // This rank's row slices of the three projections of every split expert (each get counted by
  // the store once), then the binds: staged copies queued on the copy stream, each launch waiting
  // for its own copies (as the owner path). Phase 1 binds gate and up (and down when the ring
  // holds all of them), phase 2 binds down after the all-gather otherwise.
  // Slices bound at the step's start (prefetch_hash_layers, a hash-routed layer) are used as
  // they are: no get, no bind, no ring reservation (later layers' prefetched slots may await
  // their readers); their bytes count here, at use, as a bind's would.
  Result<void> failed = ok();
  std::vector<dev::ExpertTensors> t(es.size());
  std::vector<char> pre(es.size(), 0);
  size_t n_pre = 0;
  if (size_t(l) < prefetched_.size()) {
    const Prefetched& pf = prefetched_[size_t(l)];
    for (size_t i = 0; i < es.size(); ++i)
      for (size_t j = 0; j < pf.split.size(); ++j)
        if (pf.split[j].id == es[i]) {
          t[i] = pf.split[j];
          pre[i] = 1;
          ++n_pre;
          for (uint64_t b : pf.split_bytes[j]) {
            expert_weight_bytes_ += b;
            staged_expert_bytes_ += b;
          }
        }
  }
  std::vector<std::array<dev::WeightMatrix, 3>> m(es.size());
  uint64_t largest = 0;
  for (size_t i = 0; i < es.size() && failed.ok(); ++i)
    for (int p = 0; p < 3 && failed.ok() && !pre[i]; ++p) {
      Result<dev::WeightMatrix> w = experts_.get_rank_slice(l, es[i], static_cast<staging::ExpertProj>(p), r);
      if (!w.ok()) {
        failed = w.error();
        break;
      }
      DS4_CHECK(w->out == (p == 2 ? dr : ffr));
      m[i][static_cast<size_t>(p)] = *w;
      largest = std::max(largest, matrix_bytes(*w));
    }
  const int ring = failed.ok() && dev_.owns_memory() && n_pre < es.size() ? dev_.reserve_staged_binds(largest) : 0;
  const bool early_down = ring == 0 || 3 * (es.size() - n_pre) <= static_cast<size_t>(ring);
  auto bind = [&](const dev::WeightMatrix& w) {
    const uint64_t b = matrix_bytes(w);
    expert_weight_bytes_ += b;
    staged_expert_bytes_ += b;
    dev_.set_bind_mode(dev::BindMode::Staged);
    const dev::Tensor t = dev_.bind(w);
    dev_.set_bind_mode(dev::BindMode::Persistent);
    return t;
  };
  if (failed.ok()) {
    // A batch holds per_batch fresh binds (and any prefetched experts between them).
    const size_t per_batch = ring == 0 ? es.size() : std::max<size_t>(1, static_cast<size_t>(ring) / (early_down ? 3 : 2));
    for (size_t next = 0; next < es.size();) {
      size_t end = next;
      for (size_t fresh = 0; end < es.size() && (pre[end] || fresh < per_batch); ++end) {
        const size_t i = end;
        if (pre[i]) continue;
        ++fresh;
        t[i].id = es[i];
        t[i].gate = bind(m[i][0]);
        t[i].up = bind(m[i][1]);
        if (early_down) t[i].down = bind(m[i][2]);
      }
      if (next == 0) {
        after_binds();  // the shared expert, behind the first copies
        dev_.embed_rows(s_, xb, toks, 0, nb, xs);                    // x rows of the slots (exact)
        dev_.embed_rows(s_, rwb.reshaped(1, P), slots, 0, P, ws);   // their routing weights
      }
      for (size_t i = next; i < end; ++i) {
        const int64_t a = first[i], b = first[i + 1];
        dev_.matmul2(s_, t[i].gate, G.rows_view(a, b), t[i].up, U.rows_view(a, b), xs.rows_view(a, b), act_);
        dev_.swiglu(s_, G.rows_view(a, b), U.rows_view(a, b), limit, ws.rows_view(a, b));
      }
      next = end;
    }
  }
  // h = the ranks' column blocks of G side by side: exact (a gather, no sums).
  DS4_TRY_VOID(dev_.all_gather(s_, *comm_, G, recv));
  if (failed.ok()) {
    for (int q = 0; q < R; ++q) dev_.copy(s_, recv.rows_view(q * S, (q + 1) * S), H.cols_view(q * ffr, (q + 1) * ffr));
    const size_t per_batch = early_down ? es.size() : static_cast<size_t>(ring);
    for (size_t next = 0; next < es.size();) {
      size_t end = next;
      for (size_t fresh = 0; end < es.size() && (pre[end] || fresh < per_batch); ++end) {
        const size_t i = end;
        if (!early_down && !pre[i]) {
          t[i].down = bind(m[i][2]);
          ++fresh;
        }
        dev_.matmul(s_, t[i].down, H.rows_view(first[i], first[i + 1]), Z.rows_view(first[i], first[i + 1]), act_);
      }
      next = end;
    }
    // Each split slot's row gets this rank's columns of its expert's output; other rows +0 there.
    dev_.embed_rows(s_, Z, inv, 0, S, yb.cols_view(r * dr, (r + 1) * dr));
  }
  ws_.release(mk);
  return failed;
}

void Forward::prefetch_hash_layers(std::span<const int32_t> tokens) {
  for (Prefetched& p : prefetched_) {
    p.experts.clear();
    p.bytes.clear();
    p.split.clear();
    p.split_bytes.clear();
  }
  const int H = std::min(c_.n_hash_layers, c_.n_layer);
  const int64_t n = static_cast<int64_t>(tokens.size()), K = c_.n_expert_used, E = c_.n_expert;
  constexpr int64_t kSlotFloats = int64_t{1} << 24;  // moe()'s token block
  if (H == 0 || !dev_.owns_memory() || n > std::max<int64_t>(1, kSlotFloats / (K * c_.dim))) return;
  prefetched_.resize(static_cast<size_t>(H));
  int ring = -1, binds = 0;  // the staging ring's slots, staged binds made here
  bool prefetch_started = false;
  std::vector<int32_t> es, ss;  // a layer's whole experts (this rank's) and split experts (every rank's)
  for (int l = 0; l < H; ++l) {
    const int32_t* table = w_.layers[size_t(l)].tid2eid;
    if (!table) return;
    es.clear();
    ss.clear();
    for (int32_t t : tokens)
      for (int64_t k = 0; k < K; ++k) {
        const int32_t e = table[static_cast<int64_t>(t) * K + k];
        if (e < 0 || e >= E) return;  // moe() reports the bad entry
        // A split expert (split staging, tp > 1): every rank binds its rank slices here, as
        // moe_split would at the layer; its staged bytes need not persist (bind copies them
        // before the next get).
        if (shard_.ranks > 1 && experts_.rank_sliced(l, e))
          ss.push_back(e);
        else if (shard_.owns_expert(l, e) && !experts_.stable(l, e) && !(cpu_dev_ && experts_.cpu_computed(l, e)))
          es.push_back(e);
      }
    for (auto* v : {&es, &ss}) {
      std::sort(v->begin(), v->end());
      v->erase(std::unique(v->begin(), v->end()), v->end());
    }
    for (int32_t e : es)
      if (!experts_.persists(l, e)) return;
    if (es.empty() && ss.empty()) continue;
    if (ring < 0) ring = dev_.reserve_staged_binds(0);  // the slot count (slots grow at bind if needed)
    // Layers in order, a prefix: a layer left out binds at its MoE, after reserve_staged_binds,
    // which needs every earlier staged bind read (so no later layer may hold prefetched slots).
    if (ring > 0 && binds + 3 * static_cast<int>(es.size() + ss.size()) > ring) {
      ++prefetch_ring_stops_;  // the ring is too small: this layer and the later ones bind at their MoE
      return;
    }
    Prefetched& pf = prefetched_[size_t(l)];
    bool failed = false;  // a store error: moe() gets the expert again and reports it
    dev_.set_bind_mode(dev::BindMode::Staged);
    for (int32_t e : es) {
      Result<std::array<dev::WeightMatrix, 3>> w = expert_matrices(l, e);
      if ((failed = !w.ok())) break;
      pf.experts.push_back(dev::ExpertTensors{e, dev_.bind((*w)[0]), dev_.bind((*w)[1]), dev_.bind((*w)[2])});
      pf.bytes.push_back(matrix_bytes((*w)[0]) + matrix_bytes((*w)[1]) + matrix_bytes((*w)[2]));
      binds += 3;
    }
    if (!failed && !ss.empty() && !prefetch_started) {
      experts_.begin_prefetch();  // the rank's NVMe reader: buffers of the previous step are free
      prefetch_started = true;
    }
    for (size_t i = 0; i < ss.size() && !failed; ++i) {
      const int32_t e = ss[i];
      // This rank's rows of gate, up (ff*r/R ..) and down (dim*r/R ..), as moe_split gets them.
      std::array<Result<dev::WeightMatrix>, 3> w{
          experts_.get_rank_slice(l, e, staging::ExpertProj::Gate, shard_.rank),
          experts_.get_rank_slice(l, e, staging::ExpertProj::Up, shard_.rank),
          experts_.get_rank_slice(l, e, staging::ExpertProj::Down, shard_.rank)};
      if ((failed = !w[0].ok() || !w[1].ok() || !w[2].ok())) break;  // moe_split gets it again
      pf.split.push_back(dev::ExpertTensors{e, dev_.bind(*w[0]), dev_.bind(*w[1]), dev_.bind(*w[2])});
      pf.split_bytes.push_back({matrix_bytes(*w[0]), matrix_bytes(*w[1]), matrix_bytes(*w[2])});
      binds += 3;
      prefetched_slices_ += 3;
    }
    dev_.set_bind_mode(dev::BindMode::Persistent);
    if (failed) return;  // the layer binds the rest at its MoE: no later layer may hold slots
  }
}

}  // namespace ds4

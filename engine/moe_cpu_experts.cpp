// engine/moe_cpu_experts.cpp — routed experts the placement plan computes on the CPU while the
// GPU computes the rest (issue 20 item 2: "experts the plan computes on the CPU run there
// concurrently and join by event"; placement/plan.h Tier::Cpu, Nvme with cpu_compute).
//
// Order of one token block on a device with its own memory: the block's GPU experts are bound and
// launched (queued on the compute stream), the shared expert is queued, then the host computes the
// block's CPU experts on the CPU device from its copies of x and the routing weights (downloaded
// once per layer, right after the router's ids, when the stream has nothing else queued), while
// the GPU runs what was queued. The CPU experts' slot rows are then uploaded and added into the
// slots on the compute stream: the join is stream order (the upload, embed and add are queued
// behind the GPU experts; the host never waits for the GPU here). The bits: the CPU device's
// moe_experts is the reference the GPU kernels equal (kernels/quant/dot_q8_1.h), the rows the
// CPU computes are added to +0 (exact), and the combine is the usual one, so the tokens and
// logits are those of the CPU backend.
// Timing (cpu_expert_seconds, cpu_expert_gpu_idle_seconds): host seconds around the host's part,
// and two timing points on the compute stream, one recorded when the host starts (it completes
// when the GPU finishes what was queued before) and one when the join is queued (it completes at
// the later of that moment and the GPU's finish): their distance is the GPU's idle wait.
#include <algorithm>
#include <chrono>

#include "engine/forward.h"

namespace ds4 {

void Forward::set_cpu_experts_device(dev::Device* host) {
  DS4_CHECK(host == nullptr || (dev_.owns_memory() && !host->owns_memory()));
  cpu_dev_ = host;
  cpu_ws_ = host ? std::make_unique<Workspace>(*host) : nullptr;
}

double Forward::cpu_expert_gpu_idle_seconds() {
  for (auto& [a, b] : cpu_marks_) {
    const double t = b ? dev_.elapsed_s(*a, *b) : -1;
    cpu_expert_timed_ = cpu_expert_timed_ || t >= 0;
    if (t > 0) cpu_expert_idle_s_ += t;
  }
  cpu_marks_.clear();
  return cpu_expert_timed_ ? cpu_expert_idle_s_ : -1;
}

Result<void> Forward::moe_cpu_experts(int l, int64_t t0, int64_t t1, std::span<const int32_t> experts, float limit,
                                      const dev::Tensor& yb) {
  const int64_t nb = t1 - t0, K = c_.n_expert_used, dim = c_.dim, P = nb * K;
  const auto start = std::chrono::steady_clock::now();
  std::unique_ptr<dev::Event> gpu_queued = dev_.record_timed(s_);
  dev::Device& h = *cpu_dev_;
  dev::Stream& hs = h.stream();
  Workspace& hw = *cpu_ws_;
  const Workspace::Mark hmk = hw.mark();
  const dev::Tensor x = hw.f32(dim, nb), ids = hw.i32(K, nb), rw = hw.f32(K, nb), y = hw.f32(dim, P);
  h.upload(hs, x, cpu_x_.data() + t0 * dim, static_cast<uint64_t>(nb * dim) * 4);
  h.upload(hs, ids, ids_host_.data() + t0 * K, static_cast<uint64_t>(P) * 4);
  h.upload(hs, rw, cpu_rw_.data() + t0 * K, static_cast<uint64_t>(P) * 4);
  const std::span<const int32_t> idh(ids_host_.data() + t0 * K, static_cast<size_t>(P));
  // Launches of several experts at once where their bytes stay put (host slabs); an expert whose
  // bytes a later get may reuse (NVMe-then-CPU: a read buffer) alone, right after its get.
  Result<void> failed = ok();
  std::vector<dev::ExpertTensors>& bound = cpu_bound_;
  bound.clear();
  auto flush = [&] {
    if (!bound.empty()) h.moe_experts(hs, x, ids, rw, bound, limit, act_, y, idh);
    bound.clear();
  };
  for (int32_t e : experts) {
    const bool stable = experts_.stable(l, e);
    if (!stable) flush();
    Result<std::array<dev::WeightMatrix, 3>> w = expert_matrices(l, e);
    if (!w.ok()) {
      failed = w.error();
      break;
    }
    bound.push_back(dev::ExpertTensors{e, h.bind((*w)[0]), h.bind((*w)[1]), h.bind((*w)[2])});
    expert_weight_bytes_ += matrix_bytes((*w)[0]) + matrix_bytes((*w)[1]) + matrix_bytes((*w)[2]);
    if (!stable) flush();
  }
  if (failed.ok()) flush();
  if (failed.ok()) {
    cpu_y_.resize(static_cast<size_t>(P * dim));
    h.download(hs, y, cpu_y_.data(), cpu_y_.size() * 4);
    // The CPU experts' slot rows, packed, and each slot's index among them (-1: a GPU slot, which
    // embed_rows fills with +0), kept until the next moe (the stream is synchronized by then).
    if (cpu_rows_.size() <= cpu_block_n_) {
      cpu_rows_.resize(cpu_block_n_ + 1);
      cpu_index_.resize(cpu_block_n_ + 1);
    }
    std::vector<float>& rows = cpu_rows_[cpu_block_n_];
    std::vector<int32_t>& inv = cpu_index_[cpu_block_n_];
    ++cpu_block_n_;
    rows.clear();
    inv.assign(static_cast<size_t>(P), -1);
    int32_t S = 0;
    for (int64_t p = 0; p < P; ++p)
      if (std::binary_search(experts.begin(), experts.end(), idh[static_cast<size_t>(p)])) {
        inv[static_cast<size_t>(p)] = S++;
        rows.insert(rows.end(), cpu_y_.begin() + p * dim, cpu_y_.begin() + (p + 1) * dim);
      }
    cpu_expert_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (gpu_queued) cpu_marks_.emplace_back(std::move(gpu_queued), dev_.record_timed(s_));
    const Workspace::Mark mk = ws_.mark();
    const dev::Tensor z = ws_.f32(dim, S), idx = ws_.i32(P, 1), yc = ws_.f32(dim, P);
    dev_.upload(s_, z, rows.data(), rows.size() * 4);
    dev_.upload(s_, idx, inv.data(), inv.size() * 4);
    dev_.embed_rows(s_, z, idx, 0, S, yc);  // slot rows of the CPU experts, +0 elsewhere (exact)
    dev_.add(s_, yb, yc);                   // into slots holding +0 there (moe's fill): exact
    ws_.release(mk);
  }
  hw.release(hmk);
  return failed;
}

}  // namespace ds4

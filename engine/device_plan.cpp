// engine/device_plan.cpp — the on-the-fly plan for a device with its own memory (device_plan.h).
#include "engine/device_plan.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <thread>

#include "placement/cost_model.h"
#include "placement/gguf_sizes.h"
#include "placement/gpu_estimates.h"
#include "placement/hw_profile.h"
#include "placement/planner.h"
#include "placement/routing_stats.h"

namespace ds4 {

namespace {

/// Host RAM installed (sysconf), or 0 when the OS does not say.
int64_t host_memory_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? int64_t(pages) * int64_t(page) : 0;
}

/// One node, one GPU with `vram` bytes (what is free now): see the file comment for the figures.
placement::HwProfile discovered_profile(const std::string& gpu_name, uint64_t vram) {
  using namespace placement;
  HwProfile hw;
  hw.name = "discovered at load";
  hw.description = "made at load: device free memory from the CUDA runtime, host memory from sysconf; bandwidths "
                   "estimated (gpu_estimates.h, PCIe 3 x16)";
  NumaNodeProfile n;
  n.id = 0;
  n.memory_bytes = std::max<int64_t>(host_memory_bytes(), int64_t(1) << 30);
  n.cores = int(std::max(1u, std::thread::hardware_concurrency()));
  n.mem_read_gbps = 20;
  n.cpu_expert_gbps["default"] = 5;
  n.cpu_gflops = 100;
  hw.nodes.push_back(n);
  const GpuEstimate est = gpu_estimate_for_name(gpu_name);
  GpuProfile g;
  g.name = gpu_name;
  g.numa_node = 0;
  g.vram_bytes = int64_t(vram);
  g.h2d_gbps = 12;
  g.vram_gbps = est.vram_gbps;
  g.kernel_efficiency = est.kernel_efficiency;
  g.tflops = est.tflops;
  hw.gpus.push_back(g);
  hw.h2d_aggregate_gbps = 12;
  hw.inter_socket_gbps = 12;
  hw.pageable_h2d_gbps = 6;
  hw.copy_latency_us = 10;
  hw.allreduce_latency_us = 10;
  hw.allreduce_gbps = 10;
  hw.layer_overhead_us = 20;
  hw.cpu_expert_latency_us = 50;
  return hw;
}

double mib(int64_t b) { return double(b) / (1024.0 * 1024.0); }

}  // namespace

Result<placement::PlanFile> plan_for_device(const gguf::GgufModel& file, const dev::Device& d, int64_t ctx,
                                            std::string* summary) {
  using namespace placement;
  DS4_TRY(GgufPlanModel pm, plan_model_from_gguf(file));
  const dev::Device::MemoryInfo mem = d.memory_info();
  const HwProfile hw = discovered_profile(d.name(), mem.free);
  DS4_TRY_VOID(validate_hw_profile(hw, "the profile discovered at load"));
  const ModelShape& shape = pm.shape;
  PlanOptions opt;
  opt.ctx = std::max<int64_t>(1, ctx);
  opt.prefill_chunk = std::min<int64_t>(opt.ctx, 512);
  opt.samples = 128;
  const RoutingStats stats = uniform_routing(shape.n_layers, shape.n_experts, shape.top_k);
  const RoutingSamples samples = draw_routing_samples(stats, opt.samples, opt.seed);
  CostInputs in;
  in.shape = &shape;
  in.sizes = &pm.sizes;
  in.mix = &pm.mix;
  in.hw = &hw;
  in.stats = &stats;
  in.samples = &samples;
  in.prefill_chunk = opt.prefill_chunk;
  in.prefill_position = std::min<int64_t>(opt.ctx, 2048) / 2;
  in.decode_position = in.prefill_position;
  const CostModel cm(in);
  auto made = make_plan(cm, opt, Policy::Planner);
  if (!made) return Error{std::string(d.name()) + ": the plan made at load: " + made.error().message};
  PlanFile pf;
  pf.plan = std::move(made).value();
  // CPU-tier experts are staged: this profile's CPU figures are guesses (device_plan.h).
  int resident = 0, staged = 0, moved = 0;
  for (auto& layer : pf.plan.experts)
    for (ExpertPlacement& e : layer) {
      if (e.tier == Tier::Cpu) {
        e.tier = Tier::Host;
        e.owner = 0;
        ++moved;
      }
      (e.tier == Tier::Vram ? resident : staged) += 1;
    }
  // The prediction of the plan as loaded (CPU-tier experts moved to Host): what bench compares with.
  const Prediction pred = cm.predict(pf.plan);
  pf.predicted = {pred.vram_bytes_per_token, pred.link_bytes_per_token, pred.cpu_bytes_per_token,
                  pred.nvme_bytes_per_token};
  pf.predicted_tok_s = pred.decode_tok_s;
  pf.rule = "planner (on the fly)";
  pf.expert_bytes = pm.sizes.expert_bytes;
  pf.node_ids = {0};
  pf.top_k = shape.top_k;
  pf.routing = "uniform prior";
  if (summary) {
    const GpuBudget& b = pf.plan.gpus.at(0);
    char buf[512];
    std::snprintf(buf, sizeof buf,
                  "ds4: %s: plan made at load (no --plan): VRAM %.1f MiB free: dense %.1f, state %.1f (context %lld), "
                  "workspace %.1f, staging slots %.1f, expert room %.1f MiB\n"
                  "ds4: %s: routed experts: %d resident (%.1f MiB), %d staged from host memory%s\n",
                  d.name(), mib(int64_t(mem.free)), mib(b.dense), mib(b.kv), (long long)opt.ctx, mib(b.workspace),
                  mib(b.cache), mib(b.expert_capacity), d.name(), resident, mib(b.experts_used), staged,
                  moved > 0 ? (" (" + std::to_string(moved) + " the planner put on the CPU: computed on the GPU)").c_str()
                            : "");
    *summary = buf;
  }
  return pf;
}

}  // namespace ds4

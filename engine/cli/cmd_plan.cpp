// engine/cli/cmd_plan.cpp — `ds4-offload plan`: placement plan dry run and plan file.
//
//   ds4-offload plan (-m MODEL.gguf | [--model-config F] --quant-mix M) [--hw PROFILE] [-c N] [--chunk N]
//                    [--stats F | --prior uniform|zipf [--zipf-s S]] [--dry-run] [--json FILE]
//   ds4-offload plan --probe [--probe-dir DIR] [--probe-mem-mib N] [--probe-nvme-mib N] [--probe-h2d-mib N]
//                    [--probe-decode N] [--write-profile F]
//   prediction options: [--activations q8|f32] [--decode-depth N]
//
//                    [--emulate-gpu-kib N] [--host-cap-kib N]
//
// --emulate-gpu-kib N adds ONE EMULATED GPU to the profile (probed or --hw) whose room for
// resident experts is N KiB after the planner's usual VRAM deductions. Its "VRAM" is host memory
// and its "H2D link" is a host memcpy: h2d_gbps = the profile's pageable_h2d_gbps (the probed
// memcpy rate), vram_gbps = node 0's read rate, kernel_efficiency = node 0's CPU expert rate for
// the model's layer-0 gate/up type / read rate (resident experts are computed by the same cores), tflops = cpu_gflops / 1000.
// --host-cap-kib N caps the host memory each NUMA node offers to experts at N KiB (host.reserved
// ignored), so the rest is streamed from NVMe. Why: on a machine without GPUs a probed profile
// gives an all-CPU/NVMe plan; these two options make the planner use every tier (vram, host,
// cpu, nvme) with rates measured here, so that `run --plan` on a CPU build (where device memory
// is host memory and staging is a memcpy) can check the plan's bytes per tier. The predicted
// times of such a plan describe the emulation, not a real GPU.
//
// --probe-decode N (default 12; 0 = skip) adds the all-CPU decode calibration
// (engine/cli/plan_decode_probe.h: matmul rates per type, hot and cold, and a decode micro-run of
// two generated models fitted to per-token, per-layer and attention costs) to the probed profile
// as "cpu_decode"; the cost model then predicts all-CPU decode from it (placement/cost_model.h) in
// the --activations mode (default q8, what run/bench use) at context position --decode-depth
// (default min(ctx, 2048) / 2).
//
// --probe measures this machine (placement/hw_probe.h: per-node read/memcpy, NVMe file read through
// the staging reader, pinned/pageable H2D per GPU from each node with the CUDA backend) and uses the
// measured profile instead of --hw; alone it prints the results. --probe-h2d-mib N is the size of
// one timed H2D copy (0 = leave GPUs out); discovery without --probe uses it too.
//
// Without --model-config the built-in DeepSeek-V4-Flash shape is used (placement/model_shape.h).
// Without --hw the machine is discovered with hwloc (placement/topology.h); bandwidths that
// discovery cannot know are estimates and the report says so. With -m, shape, tensor types and
// byte sizes come from the GGUF header (placement/gguf_sizes.h) and --quant-mix is not used.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>

#include <unistd.h>

#include "engine/official_checkpoint.h"
#include "ds4/format_number.h"
#include "engine/cli/cli_common.h"
#include "engine/cli/command.h"
#include "engine/cli/plan_decode_probe.h"
#include "engine/cli/temp_cleanup.h"
#include "gguf/gguf_file.h"
#include "kernels/quant/ggml_type.h"
#include "placement/gguf_sizes.h"
#include "placement/hw_probe.h"
#include "placement/hw_profile.h"
#include "placement/model_shape.h"
#include "placement/plan_report.h"
#include "placement/planner.h"
#include "placement/quant_mix.h"
#include "placement/routing_stats.h"
#include "placement/topology.h"

namespace ds4::cli {
namespace {

using namespace ds4::placement;

struct PlanArgs {
  std::string model;
  std::string model_config;
  std::string quant_mix;
  std::string hw;
  int64_t ctx = 32768;
  int64_t chunk = 2048;
  std::string stats;
  std::string prior = "uniform";
  double zipf_s = 1.0;
  int samples = 512;
  uint64_t seed = 1;
  bool dry_run = false;
  std::string json;
  std::string policy = "planner";
  std::string write_profile;
  bool probe = false;
  std::string probe_dir = ".";
  int64_t probe_mem_mib = 256;
  int64_t probe_nvme_mib = 256;
  int64_t probe_h2d_mib = 256;
  int64_t emulate_gpu_kib = -1;
  int64_t host_cap_kib = -1;
  int probe_decode = 12;
  std::string activations = "q8";
  int64_t decode_depth = -1;
};
PlanArgs args;
CLI::Option* ctx_option = nullptr;    // to tell a given -c/--ctx-size from the default
CLI::Option* prior_option = nullptr;
CLI::Option* zipf_option = nullptr;
CLI::Option* chunk_option = nullptr;
CLI::Option* probe_decode_option = nullptr;  // to refuse --probe-decode without --probe

CLI::App* setup(CLI::App& app) {
  auto* s = app.add_subcommand("plan", "Plan expert placement for a model, quant mix and machine; print a dry run "
                                       "with predicted tok/s next to baseline policies");
  s->add_option("-m,--model", args.model, "GGUF model (or any shard of a split set), or a safetensors checkpoint folder, to read shape and tensor sizes from")
      ->check(non_empty("a model file"));
  s->add_option("--model-config", args.model_config,
                "Model config JSON (HF or DeepSeek reference keys); default: built-in DeepSeek-V4-Flash shape")
      ->check(non_empty("a model config file"));
  s->add_option("--quant-mix", args.quant_mix, "Quant mix without -m: ds4-q2, iq1_m, mxfp4, q4_k");
  s->add_option("--hw", args.hw, "Hardware profile JSON (configs/hw/*.json); default: discover this machine")
      ->check(non_empty("a hardware profile file"));
  ctx_option = s->add_option("-c,--ctx-size,--ctx", args.ctx,
                             "Context length the KV/state budget is sized for (tokens); default 32768, or the "
                             "model's context_length when that is shorter")
                   ->default_val(args.ctx)
                   ->check(CLI::Range(int64_t(1), int64_t(1) << 24));
  chunk_option = s->add_option("--chunk", args.chunk, "Prefill chunk (tokens); default 2048 or -c/--ctx-size if shorter")
      ->default_val(args.chunk)->check(CLI::Range(int64_t(1), int64_t(1) << 20));
  s->add_option("--stats", args.stats, "Routing statistics JSON (ds4-routing-stats v1 or v2, from `calibrate` or `run --routing-out`)")
      ->check(non_empty("a routing statistics file"));
  prior_option = s->add_option("--prior", args.prior, "Routing prior without --stats: uniform or zipf")
      ->default_val(args.prior)->check(CLI::IsMember({"uniform", "zipf"}));
  zipf_option = s->add_option("--zipf-s", args.zipf_s, "Zipf exponent of --prior zipf")->default_val(args.zipf_s)
      ->check(CLI::Range(0.0, 8.0));
  s->add_option("--samples", args.samples, "Sampled tokens per layer for decode expectations")
      ->default_val(args.samples)->check(CLI::Range(1, 1 << 20));
  add_seed_option(s, args.seed, "Seed of the routing samples (0 .. 2^64-1)");
  s->add_flag("--dry-run", args.dry_run, "Print the budget, tier and prediction tables");
  s->add_option("--json", args.json, "Write the plan file (format in placement/plan_report.h)")
      ->check(non_empty("a file path"));
  s->add_option("--policy", args.policy, "Policy written by --json: planner, pocketllm-like, frequency-greedy, all-cpu")
      ->default_val(args.policy)
      ->check(CLI::IsMember({"planner", "pocketllm-like", "frequency-greedy", "all-cpu"}));
  s->add_option("--write-profile", args.write_profile, "Write the hardware profile used (e.g. the discovered one)")
      ->check(non_empty("a file path"));
  s->add_flag("--probe", args.probe,
              "Measure this machine (memory read/memcpy per NUMA node, NVMe file read, H2D per GPU and node) "
              "instead of --hw");
  s->add_option("--probe-dir", args.probe_dir, "Directory for the temporary NVMe probe file (deleted after)")
      ->default_val(args.probe_dir);
  s->add_option("--probe-mem-mib", args.probe_mem_mib, "Memory probe buffer per NUMA node (MiB)")
      ->default_val(args.probe_mem_mib)->check(CLI::Range(int64_t(16), int64_t(1) << 20));
  s->add_option("--probe-nvme-mib", args.probe_nvme_mib, "NVMe probe file size (MiB; 0 = skip)")
      ->default_val(args.probe_nvme_mib)->check(CLI::Range(int64_t(0), int64_t(1) << 20));
  s->add_option("--probe-h2d-mib", args.probe_h2d_mib,
                "Size of one timed host-to-device copy of the GPU probe (MiB; 0 = skip GPUs)")
      ->default_val(args.probe_h2d_mib)->check(CLI::Range(int64_t(0), int64_t(1) << 16));
  probe_decode_option = s->add_option("--probe-decode", args.probe_decode,
                "With --probe: timed decode steps per sample of the all-CPU decode calibration (a micro-run of two "
                "generated models, ~30 s); 0 = skip it")
      ->default_val(args.probe_decode)->check(CLI::Range(0, 4096));
  s->add_option("--activations", args.activations,
                "Activation mode the all-CPU prediction assumes (the profile's cpu_decode calibration): q8 (as "
                "run/bench default) or f32")
      ->default_val(args.activations)->check(CLI::IsMember({"q8", "f32"}));
  s->add_option("--decode-depth", args.decode_depth,
                "Context position of the predicted decode token (attention cost); default min(ctx, 2048) / 2")
      ->check(CLI::Range(int64_t(0), int64_t(1) << 24));
  s->add_option("--emulate-gpu-kib", args.emulate_gpu_kib,
                "Add one EMULATED GPU (VRAM = host memory, H2D = probed memcpy rate) with this much room for "
                "resident experts (KiB); for checking plans on a machine without GPUs")
      ->check(CLI::Range(int64_t(0), int64_t(1) << 40));
  s->add_option("--host-cap-kib", args.host_cap_kib,
                "Cap the host memory each NUMA node offers to experts (KiB, >= 1; host.reserved ignored); the "
                "rest is read from NVMe (the profile needs an nvme entry)")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 40));
  return s;
}

int fail(const std::string& msg) {
  std::fprintf(stderr, "ds4-offload plan: error: %s\n", msg.c_str());
  return 1;
}

std::string fmt_cap(int64_t kib) { return "; host memory for experts capped at " + std::to_string(kib) + " KiB per node"; }

int run() {
  if (!args.dry_run && args.json.empty() && args.write_profile.empty() && !args.probe)
    return fail("nothing to do: pass --dry-run and/or --json FILE (or --probe)");
  if (args.probe && !args.hw.empty()) return fail("--probe measures this machine; do not combine it with --hw");
  if (!args.probe && probe_decode_option->count() > 0)
    return fail("--probe-decode sets the decode calibration of --probe; add --probe or drop --probe-decode");
  for (const auto& [out, opt] : {std::pair{args.json, "--json"}, std::pair{args.write_profile, "--write-profile"}})
    if (auto c = check_output_not_input(out, opt, {args.model, args.hw, args.stats, args.model_config}); !c)
      return fail(c.error().message);
  for (const auto& [out, opt] : {std::pair{args.json, "--json"}, std::pair{args.write_profile, "--write-profile"}})
    if (auto w = check_output_writable(out, opt); !w) return fail(w.error().message);
  if (!std::isfinite(args.zipf_s))
    return fail("--zipf-s: expected a number in [0, 8], found " + format_number(args.zipf_s));
  // The profile file is written once every input has been read (no output on a failed run).
  auto write_profile = [](const HwProfile& h) -> int {
    if (args.write_profile.empty()) return 0;
    if (auto w = write_file_atomic(args.write_profile, hw_profile_to_json(h), "--write-profile"); !w)
      return fail(w.error().message);
    std::fprintf(stderr, "ds4-offload plan: wrote %s\n", args.write_profile.c_str());
    return 0;
  };
  HwProfile hw;
  std::string hw_source;
  if (args.probe) {
    HwProbeOptions po;
    po.mem_bytes = args.probe_mem_mib << 20;
    po.nvme_bytes = args.probe_nvme_mib << 20;
    po.nvme_dir = args.probe_dir;
    po.h2d_bytes = args.probe_h2d_mib << 20;
    // The temporary NVMe file is removed on SIGINT/SIGTERM too (the probe removes it otherwise).
    // Test hook: DS4_TEST_PROBE_STALL set = name the file and sleep until a signal once it exists
    // (tests/frontend/cli_test.cpp interrupts it there).
    int temp_slot = -1;
    po.on_temp_file = [&temp_slot](const std::string& path, bool created) {
      if (!created) {
        temp_cleanup_remove(temp_slot);
        temp_slot = -1;
        return;
      }
      temp_slot = temp_cleanup_add(path, /*is_dir=*/false);
      if (std::getenv("DS4_TEST_PROBE_STALL") != nullptr) {
        std::fprintf(stderr, "ds4-offload plan: probe file %s\n", path.c_str());
        for (;;) ::pause();
      }
    };
    auto r = probe_hw_profile(po);
    if (!r) return fail(r.error().message);
    std::fputs(format_probe(r.value()).c_str(), stdout);
    hw = r->profile;
    if (args.probe_decode > 0) {
      DecodeProbeOptions dpo;
      dpo.dir = args.probe_dir;
      dpo.tokens = args.probe_decode;
      std::string report;
      auto d = probe_cpu_decode(dpo, &report);
      if (!d) return fail(d.error().message);
      std::fputs(report.c_str(), stdout);
      std::fflush(stdout);
      hw.cpu_decode = std::move(d).value();
      hw.description += " All-CPU decode calibration (cpu_decode): measured by the plan --probe micro-run.";
    }
    hw_source = "probed (plan --probe)";
    if (!args.dry_run && args.json.empty()) {
      if (auto w = check_stdout("the probe results"); !w) return fail(w.error().message);
      return write_profile(hw);
    }
  }
  ModelShape shape;
  QuantMix mix;
  ModelSizes sizes;
  if (!args.model.empty()) {
    if (!args.model_config.empty() || !args.quant_mix.empty())
      return fail("-m reads shape and types from the file; do not combine it with --model-config/--quant-mix");
    gguf::OpenOptions oo;
    oo.map_data = false;
    auto file = open_model_file(args.model, oo);
    if (!file) return fail(file.error().message);
    auto pm = plan_model_from_gguf(file.value());
    if (!pm) return fail(pm.error().message);
    shape = std::move(pm->shape);
    mix = std::move(pm->mix);
    sizes = std::move(pm->sizes);
  } else {
    if (args.quant_mix.empty()) return fail("--quant-mix is required without -m (known: ds4-q2, iq1_m, mxfp4, q4_k)");
    if (args.model_config.empty()) {
      shape = dsv4_flash_shape();
    } else {
      auto s = load_model_shape(args.model_config);
      if (!s) return fail(s.error().message);
      shape = std::move(s).value();
    }
    auto m = quant_mix_by_name(args.quant_mix);
    if (!m) return fail(m.error().message);
    mix = std::move(m).value();
    auto z = compute_model_sizes(shape, mix);
    if (!z) return fail(z.error().message);
    sizes = std::move(z).value();
  }

  if (shape.max_ctx > 0) {
    if (ctx_option->count() == 0) {
      args.ctx = std::min(args.ctx, shape.max_ctx);
    } else if (args.ctx > shape.max_ctx) {
      return fail("-c/--ctx-size " + std::to_string(args.ctx) + " exceeds the model's context length " +
                  std::to_string(shape.max_ctx) + " tokens");
    }
  }
  // A decode position is an index into the context: 0 .. context - 1.
  if (args.decode_depth >= 0 && shape.max_ctx > 0 && args.decode_depth >= shape.max_ctx)
    return fail("--decode-depth " + std::to_string(args.decode_depth) + " exceeds the model's context_length " +
                std::to_string(shape.max_ctx) + " (positions 0 .. " + std::to_string(shape.max_ctx - 1) + ")");
  if (args.decode_depth >= 0 && ctx_option->count() > 0 && args.decode_depth >= args.ctx)
    return fail("--decode-depth " + std::to_string(args.decode_depth) + " exceeds -c/--ctx-size " + std::to_string(args.ctx) +
                " (positions 0 .. " + std::to_string(args.ctx - 1) + ")");
  if (chunk_option->count() == 0) args.chunk = std::min(args.chunk, args.ctx);
  if (args.prior != "zipf" && zipf_option->count() > 0)
    return fail("--zipf-s sets the exponent of --prior zipf; add --prior zipf or drop --zipf-s");
  if (!args.stats.empty() && prior_option->count() > 0)
    return fail("--prior is the routing assumption without statistics; --stats " + args.stats + " replaces it");

  if (args.probe) {
    // hw already holds the probed profile.
  } else if (!args.hw.empty()) {
    auto h = load_hw_profile(args.hw);
    if (!h) return fail(h.error().message);
    hw = std::move(h).value();
    hw_source = args.hw;
  } else {
    auto h = discover_hw_profile(uint64_t(args.probe_h2d_mib) << 20);
    if (!h) return fail(h.error().message + " (pass --hw PROFILE)");
    hw = std::move(h).value();
    hw_source = "discovered with hwloc (GPU H2D measured when the CUDA probe ran); other bandwidths estimated, see "
                "the profile description";
  }
  if (!args.dry_run && args.json.empty()) return write_profile(hw);
  const HwProfile hw_used = hw;  // before --host-cap-kib / --emulate-gpu-kib change it

  RoutingStats stats;
  if (!args.stats.empty()) {
    auto st = load_routing_stats(args.stats, shape.n_layers, shape.n_experts, shape.top_k);
    if (!st) return fail(st.error().message);
    stats = std::move(st).value();
  } else if (args.prior == "zipf") {
    stats = zipf_routing(shape.n_layers, shape.n_experts, shape.top_k, args.zipf_s);
  } else {
    stats = uniform_routing(shape.n_layers, shape.n_experts, shape.top_k);
  }
  if (args.host_cap_kib >= 0) {
    if (hw.nvme.empty())
      return fail("--host-cap-kib streams the experts that do not fit from NVMe: expected a profile with an NVMe "
                  "device, found none in " + hw_source + " (`plan --probe` measures one)");
    hw.host_reserved_bytes = 0;
    for (auto& n : hw.nodes) n.memory_bytes = args.host_cap_kib * 1024;
    hw_source += fmt_cap(args.host_cap_kib);
  }
  PlanOptions opt;
  opt.ctx = args.ctx;
  opt.prefill_chunk = args.chunk;
  opt.samples = args.samples;
  opt.seed = args.seed;
  RoutingSamples samples = draw_routing_samples(stats, opt.samples, opt.seed);
  CostInputs in;
  in.shape = &shape;
  in.sizes = &sizes;
  in.mix = &mix;
  in.hw = &hw;
  in.stats = &stats;
  in.samples = &samples;
  in.prefill_chunk = opt.prefill_chunk;
  in.prefill_position = std::min<int64_t>(opt.ctx, 2048) / 2;
  in.decode_position = args.decode_depth >= 0 ? args.decode_depth : in.prefill_position;
  in.activations = args.activations;
  if (hw.gpus.empty() && args.emulate_gpu_kib < 0) {
    if (hw.cpu_decode.empty())
      std::fprintf(stderr, "ds4-offload plan: note: the profile has no all-CPU decode calibration (cpu_decode); the "
                           "prediction counts weight bytes at the expert rates only (%s)\n",
                   args.probe ? "--probe-decode 0 skipped the calibration; pass --probe-decode N > 0 to run it"
                              : "run `plan --probe`");
    else if (!hw.cpu_decode.modes.count(args.activations))
      std::fprintf(stderr, "ds4-offload plan: note: the profile's cpu_decode has no '%s' mode; the prediction counts "
                           "weight bytes at the expert rates only\n", args.activations.c_str());
  }
  if (args.emulate_gpu_kib >= 0) {
    if (!hw.gpus.empty()) return fail("--emulate-gpu-kib: the profile already has GPUs; use it on a machine without");
    const NumaNodeProfile& n0 = hw.nodes.at(0);
    GpuProfile g;
    g.name = "emulated-gpu(host-memory)";
    g.numa_node = n0.id;
    g.h2d_gbps = hw.pageable_h2d_gbps;
    g.vram_gbps = n0.mem_read_gbps;
    const std::string et(ggml_type_name(mix.type_for(TensorClass::ExpertGateUp, 0)));
    g.kernel_efficiency = std::min(1.0, n0.cpu_gbps_for(et) / n0.mem_read_gbps);
    g.tflops = n0.cpu_gflops / 1000.0;
    g.vram_bytes = int64_t(1) << 50;  // sized below from the planner's deductions
    hw.gpus.push_back(g);
    hw.h2d_aggregate_gbps = g.h2d_gbps;
    if (hw.inter_socket_gbps <= 0) hw.inter_socket_gbps = g.h2d_gbps;
    {
      CostModel probe_cm(in);
      auto b = plan_budgets(probe_cm, opt);
      if (!b) return fail(b.error().message);
      hw.gpus[0].vram_bytes = b->gpus[0].total - b->gpus[0].expert_capacity + args.emulate_gpu_kib * 1024;
    }
    if (auto v = validate_hw_profile(hw, "emulated profile"); !v) return fail(v.error().message);
    hw_source += "; + 1 EMULATED GPU: VRAM = host memory (" + std::to_string(args.emulate_gpu_kib) +
                 " KiB expert room), H2D = memcpy " + format_number(g.h2d_gbps) + " GB/s";
  }
  CostModel cm(in);

  std::vector<PlannedPolicy> planned;
  for (Policy p : {Policy::Planner, Policy::PocketLlm, Policy::FrequencyGreedy, Policy::AllCpu}) {
    auto plan = make_plan(cm, opt, p);
    if (!plan) return fail(plan.error().message);
    Prediction pr = cm.predict(plan.value());
    planned.push_back({std::move(plan).value(), pr});
  }
  size_t chosen = 0;
  for (size_t i = 0; i < planned.size(); ++i)
    if (planned[i].plan.policy == args.policy) chosen = i;
  std::vector<PlannedPolicy> others;
  for (size_t i = 0; i < planned.size(); ++i)
    if (i != chosen) others.push_back(planned[i]);
  if (int w = write_profile(hw_used); w != 0) return w;
  if (args.dry_run) {
    std::fputs(format_dry_run(cm, opt, hw_source, planned[chosen], others).c_str(), stdout);
    if (auto w = check_stdout("the --dry-run tables"); !w) return fail(w.error().message);
  }
  if (!args.json.empty()) {
    if (auto w = write_file_atomic(args.json, plan_to_json(cm, opt, planned[chosen], others), "--json"); !w)
      return fail(w.error().message);
    std::fprintf(stderr, "ds4-offload plan: wrote %s (policy %s)\n", args.json.c_str(),
                 planned[chosen].plan.policy.c_str());
  }
  return 0;
}

CommandRegistrar reg({"plan", setup, run});

}  // namespace
}  // namespace ds4::cli

// engine/cli/cmd_bench.cpp — `ds4-offload bench`: prefill / decode speed and time to first token
// over repetitions, with the metadata that makes a result comparable and roofline columns (weight
// bytes read per decoded token over the measured host memory bandwidth); `--probe` measures the
// host memory bandwidth only. Runs the model through the Session API only (engine/session.h).
//
// Method, per (prompt length p, generation length n) and repetition, after one short warm-up:
//   reset; eval(p random token ids) -> TTFT (the first generated token comes from these logits, so
//   it is counted in the prefill); prefill t/s = p / TTFT; then n-1 greedy single-token evals ->
//   decode t/s = (n-1) / their time. Reported: mean and sample standard deviation over -r reps.
// Rows follow llama-bench: test "pp<p>" (prefill) and "tg<n> @ d<p>" (decode after a p-token
// prompt); column names model, size, params, backend, threads, n_prompt, n_gen, test, t/s (md) or
// avg_ts / stddev_ts (json, csv) as llama-bench writes them.
// Roofline (decode rows): bytes/token is MEASURED by the engine's counters (Session::weight_traffic:
// every weight matrix once per matmul launch, summed over the decode evals, of which routed
// experts); GB/s = bytes/token x decode t/s; frac = GB/s over the streaming-read bandwidth
// measured by the probe at start (kernels/cpu/mem_bandwidth.h). The GGUF estimate (non-expert
// weights + n_expert_used / n_expert of the routed-expert tensors + one embedding row) is printed
// beside it. Not counted: the token embedding row and norm/bias vectors (not matmuls).
// With --plan F (or --experts-tier) the routed experts live where the plan puts them; the decode
// rows then also give the bytes per token copied host -> device slot (staged) and read from the
// file (NVMe) from the expert store's counters, and the roofline adds staged bytes / memcpy GB/s.
// Links (decode rows, every backend): per rank / GPU the backend's bytes per token by tier
// (device-resident, staged, host) and host -> device, the copy link's timing per token (copy
// time, compute-stream stall, host waits) and the overlap fraction (kernels/link_timing.h; "n/a"
// where the backend does not time copies: the CPU), the expert cache's hits and misses, and, when
// a plan is in use (--plan or the plan made at load), the plan's predicted bytes per tier per
// token and decode tok/s beside them (bench_links.h).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "engine/official_checkpoint.h"
#include "engine/cli/bench_links.h"
#include "engine/cli/bench_measure.h"
#include "engine/cli/cli_common.h"
#include "engine/cli/command.h"
#include "engine/session.h"
#include "staging/expert_store.h"
#include "engine/model_config.h"
#include "gguf/gguf_file.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/kernel_choices.h"
#include "kernels/cpu/mem_bandwidth.h"
#include "kernels/quant/ggml_type.h"
#include "placement/plan_file.h"
#include "placement/topology.h"
#include "staging/h2d_probe.h"

namespace ds4::cli {
namespace {

using nlohmann::json;

struct BenchArgs {
  ModelArgs model;
  std::string prompts = "512";
  std::string gens = "128";
  int reps = 3;
  std::string output = "md";
  bool probe = false;
  std::string probe_out;
  int64_t probe_mib = 0;
};
BenchArgs args;

CLI::App* setup(CLI::App& app) {
  auto* s = app.add_subcommand("bench", "Measure prefill/decode tok/s and TTFT (mean, stddev) with roofline columns; "
                                        "--probe: host memory bandwidth only");
  add_model_options(s, args.model, ModelOptionSet{.model_required = false, .experts_tier = true, .plan = true, .ctx_size = true});
  s->add_option("-p,--n-prompt", args.prompts, "Prompt lengths, comma-separated (>= 0; 0 = no prompt test, decode after one token, as llama-bench -p 0)")->capture_default_str();
  s->add_option("-n,--n-gen", args.gens,
                "Generation lengths, comma-separated (>= 0; the first token comes from the prefill, "
                "so decode is timed over n-1 tokens: n = 0 (no generation test) or n >= 2)")
      ->capture_default_str();
  s->add_option("-r,--repetitions", args.reps, "Timed repetitions per test (after one warm-up)")->capture_default_str();
  s->add_option("-o,--output", args.output, "Output format: md, json or csv")->capture_default_str();
  s->add_flag("--probe", args.probe, "Only measure host memory read and memcpy bandwidth (and H2D per GPU with CUDA)");
  s->add_option("--probe-out", args.probe_out, "With --probe: also write the probe results as JSON to this file");
  s->add_option("--probe-mib", args.probe_mib,
                "Probe buffer in MiB (0 = max(1 GiB, 4 x LLC); must be well above the LLC to measure DRAM)")
      ->capture_default_str();
  return s;
}

/// Parses "512,2048" into integers >= `min`; errors name the flag and the bad item.
Result<std::vector<int>> parse_list(const std::string& text, const char* flag, int min) {
  std::vector<int> v;
  std::stringstream ss(text);
  std::string item;
  if (!text.empty() && text.back() == ',')
    return Error{std::string(flag) + ": expected comma-separated integers, found a trailing comma in \"" + text + "\""};
  while (std::getline(ss, item, ',')) {
    size_t used = 0;
    long x = 0;
    try {
      x = std::stol(item, &used);
    } catch (...) {
      used = 0;
    }
    if (item.empty() || used != item.size() || x < min || x > 1000000)
      return Error{std::string(flag) + ": expected comma-separated integers from " + std::to_string(min) +
                   " to 1000000, found \"" + item + "\" in \"" + text + "\""};
    v.push_back(int(x));
  }
  if (v.empty()) return Error{std::string(flag) + ": expected at least one value, found \"" + text + "\""};
  return v;
}

std::string cpu_model_name() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("model name", 0) == 0) {
      const auto c = line.find(':');
      return c == std::string::npos ? line : line.substr(line.find_first_not_of(" \t", c + 1));
    }
  return "unknown";
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

std::string build_info() {
  std::string s;
#ifdef NDEBUG
  s = "release";
#else
  s = "debug (assertions on)";
#endif
#ifdef __OPTIMIZE__
  s += ", optimized";
#else
  s += ", -O0";
#endif
  s += ", " + std::string(__VERSION__);
  s += ", q8 dot kernels ";
  s += cpu::dot_backend_name(cpu::selected_backend());
  return s;
}

/// Facts from the GGUF header: parameter count, quant mix, estimated weight bytes per token.
struct ModelFacts {
  uint64_t params = 0;
  std::string quant_mix;   // e.g. "experts MXFP4; other F32"
  double bytes_per_token = 0.0;
};

Result<ModelFacts> model_facts(const std::string& path, const ModelConfig& c) {
  gguf::OpenOptions oo;
  oo.map_data = false;
  DS4_TRY(gguf::GgufModel g, open_model_file(path, oo));
  ModelFacts f;
  std::vector<std::string> expert_types, other_types;
  auto add = [](std::vector<std::string>& v, const std::string& s) {
    if (std::find(v.begin(), v.end(), s) == v.end()) v.push_back(s);
  };
  double dense = 0, experts = 0;
  for (const auto& t : g.tensors()) {
    f.params += uint64_t(t.nelements());
    const std::string type(ggml_type_name(t.type));
    const bool is_expert = t.name.find("_exps.") != std::string::npos;
    int layer = -1;
    if (t.name.rfind("blk.", 0) == 0) layer = std::atoi(t.name.c_str() + 4);
    if (layer >= c.n_layer) continue;  // MTP blocks are not run per generated token
    if (is_expert) {
      add(expert_types, type);
      experts += double(t.nbytes);
    } else if (t.name == "token_embd.weight") {
      dense += double(t.row_bytes());  // one embedding row per token
    } else {
      add(other_types, type);
      dense += double(t.nbytes);
    }
  }
  auto join = [](const std::vector<std::string>& v) {
    std::string s;
    for (const auto& x : v) s += (s.empty() ? "" : "+") + x;
    return s.empty() ? std::string("none") : s;
  };
  f.quant_mix = "experts " + join(expert_types) + "; other " + join(other_types);
  f.bytes_per_token = dense + (c.n_expert > 0 ? experts * double(c.n_expert_used) / double(c.n_expert) : 0.0);
  return f;
}

struct Stat {
  double mean = 0, sd = 0;
  std::vector<double> samples;
};
Stat stat_of(const std::vector<double>& v) {
  Stat s;
  s.samples = v;
  for (double x : v) s.mean += x;
  s.mean /= double(v.size());
  if (v.size() > 1) {
    double q = 0;
    for (double x : v) q += (x - s.mean) * (x - s.mean);
    s.sd = std::sqrt(q / double(v.size() - 1));
  }
  return s;
}

/// One output row (a pp or a tg test).
struct Row {
  int n_prompt = 0, n_gen = 0;
  std::string test;
  Stat ts;            // tokens / s
  Stat ttft_ms;       // pp rows only
  bool decode = false;
  double bpt = 0;          // tg rows: measured weight bytes per decoded token (engine counters)
  double bpt_experts = 0;  // tg rows: of which routed experts
  double bpt_staged = 0;   // tg rows: routed-expert bytes copied host -> device slot per token
  double bpt_nvme = 0;     // tg rows: routed-expert bytes read from the file per token
  double bpt_cpu = 0;      // tg rows: bytes of experts a plan computes on the CPU per token (store)
  double roofline_s = 0;   // tg rows: seconds per token the probed bandwidths allow
  // tg rows: the backend's own counters per decoded token (Model::device_tier_traffic).
  double bpt_dev_resident = 0, bpt_dev_staged = 0, bpt_dev_host = 0, bpt_dev_h2d = 0;
  LinkRow links{};  // tg rows: per rank / GPU bytes by tier, link timing, cache (bench_links.h)
  /// Fraction of the roofline the run reached: roofline time / measured time per token.
  double frac() const { return roofline_s * ts.mean; }
};

std::string fmtd(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

std::string csv_quote(const std::string& s) {
  std::string o = "\"";
  for (char ch : s) o += ch == '"' ? std::string("\"\"") : std::string(1, ch);
  return o + "\"";
}

/// H2D per GPU (and all GPUs at once) when this build has CUDA and a GPU; empty otherwise.
struct H2dFigures {
  bool measured = false;
  std::string why_not;  // when not measured
  staging::H2dProbeResult r;
};

H2dFigures probe_h2d_links() {
  H2dFigures f;
  if (!staging::h2d_probe_available()) {
    f.why_not = "no GPU (this build has no CUDA, or no device is visible)";
    return f;
  }
  staging::H2dProbeOptions o;
  if (auto topo = placement::discover_topology(); topo && topo->nodes.size() > 1)
    for (const auto& n : topo->nodes) o.numa_nodes.push_back(n.os_index);
  auto r = staging::probe_h2d(o);
  if (!r) {
    f.why_not = r.error().message;
    return f;
  }
  f.measured = true;
  f.r = std::move(r.value());
  return f;
}

bool buffer_is_cache_sized(const cpu::MemProbeResult& p) { return p.llc_bytes > 0 && p.bytes < 4 * p.llc_bytes; }

json probe_json(const cpu::MemProbeResult& p, const H2dFigures& h) {
  json links = json::array();
  for (const auto& l : h.r.links)
    links.push_back({{"gpu", l.gpu}, {"name", l.name}, {"pci_bus_id", l.pci_bus_id}, {"numa_node", l.numa_node},
                     {"pinned_GBps", l.pinned_gbps}, {"pageable_GBps", l.pageable_gbps}});
  json j{{"host_read_GBps", p.read_bps * 1e-9}, {"host_memcpy_GBps", p.copy_bps * 1e-9},
         {"threads", p.threads},           {"buffer_MiB", p.bytes >> 20},
         {"llc_MiB", p.llc_bytes >> 20},   {"buffer_fits_cache", buffer_is_cache_sized(p)},
         {"h2d", links}};
  if (h.measured)
    j["h2d_all_gpus_GBps"] = h.r.all_gpus_gbps;
  else
    j["gpus"] = h.why_not;
  return j;
}

int run_probe(const cpu::MemProbeResult& p) {
  const H2dFigures h = probe_h2d_links();
  const json j = probe_json(p, h);
  if (args.output == "json") {
    std::printf("%s\n", j.dump(2).c_str());
  } else if (args.output == "csv") {
    std::printf("host_read_GBps,host_memcpy_GBps,threads,buffer_MiB,llc_MiB,gpu,numa_node,pinned_h2d_GBps,pageable_h2d_GBps\n");
    if (!h.measured)
      std::printf("%.3f,%.3f,%d,%lld,%lld,,,,\n", p.read_bps * 1e-9, p.copy_bps * 1e-9, p.threads,
                  (long long)(p.bytes >> 20), (long long)(p.llc_bytes >> 20));
    for (const auto& l : h.r.links)
      std::printf("%.3f,%.3f,%d,%lld,%lld,%d,%d,%.3f,%.3f\n", p.read_bps * 1e-9, p.copy_bps * 1e-9, p.threads,
                  (long long)(p.bytes >> 20), (long long)(p.llc_bytes >> 20), l.gpu, l.numa_node, l.pinned_gbps,
                  l.pageable_gbps);
  } else {
    std::printf("| probe | value |\n| --- | ---: |\n");
    std::printf("| host memory read (%d threads) | %.2f GB/s |\n", p.threads, p.read_bps * 1e-9);
    std::printf("| host memcpy (bytes copied) | %.2f GB/s |\n", p.copy_bps * 1e-9);
    std::printf("| buffer / LLC | %lld MiB / %lld MiB |\n", (long long)(p.bytes >> 20), (long long)(p.llc_bytes >> 20));
    if (!h.measured) std::printf("| H2D per GPU | %s |\n", h.why_not.c_str());
    for (const auto& l : h.r.links)
      std::printf("| H2D GPU %d (%s, %s) from node %d | pinned %.2f GB/s, pageable %.2f GB/s |\n", l.gpu, l.name.c_str(),
                  l.pci_bus_id.c_str(), l.numa_node, l.pinned_gbps, l.pageable_gbps);
    if (h.measured) std::printf("| H2D all GPUs at once (pinned) | %.2f GB/s |\n", h.r.all_gpus_gbps);
  }
  if (buffer_is_cache_sized(p))
    std::fprintf(stderr,
                 "bench: note: the %lld MiB probe buffer is smaller than 4 x the %lld MiB last-level cache, so the "
                 "figures include cache hits and overstate memory bandwidth\n",
                 (long long)(p.bytes >> 20), (long long)(p.llc_bytes >> 20));
  if (!args.probe_out.empty())
    if (auto w = write_file_atomic(args.probe_out, j.dump(2) + "\n", "--probe-out"); !w)
      return fail("bench", w.error().message);
  return 0;
}

/// One line naming where the routed experts live for this run.
std::string placement_summary(const ModelArgs& a) {
  std::string s = "all CPU";
  if (!a.plan.empty())
    s = "plan " + a.plan;
  else if (!a.experts_tier.empty())
    s = "experts tier " + a.experts_tier;
  else
    s += " (experts read in place from the GGUF mapping)";
  if (a.tp > 1) s += ", tp " + std::to_string(a.tp) + " CPU ranks";
  return s;
}

int run_bench() {
  const char* cmd = "bench";
  if (args.output != "md" && args.output != "json" && args.output != "csv")
    return fail(cmd, "-o/--output: expected md, json or csv, found \"" + args.output + "\"");
  if (args.reps < 1) return fail(cmd, "-r/--repetitions: expected >= 1, found " + std::to_string(args.reps));
  if (auto t = check_threads(args.model.threads); !t) return fail(cmd, t.error().message);
  if (args.probe_mib < 0) return fail(cmd, "--probe-mib: expected >= 0, found " + std::to_string(args.probe_mib));
  if (args.probe_mib > (int64_t(1) << 20))
    return fail(cmd, "--probe-mib: expected at most 1048576 (1 TiB), found " + std::to_string(args.probe_mib));
  if (!args.probe_out.empty() && !args.probe) return fail(cmd, "--probe-out needs --probe");
  if (!args.probe_out.empty())
    if (auto w = check_output_writable(args.probe_out, "--probe-out"); !w) return fail(cmd, w.error().message);
  if (args.probe && !args.model.model.empty())
    return fail(cmd, "--probe measures the machine only: drop -m/--model, or drop --probe to benchmark the model");
  if (!args.probe && args.model.model.empty()) return fail(cmd, "-m/--model is required (or use --probe)");
  auto prompts = parse_list(args.prompts, "-p/--n-prompt", 0);
  if (!prompts) return fail(cmd, prompts.error().message);
  auto gens = parse_list(args.gens, "-n/--n-gen", 0);
  if (!gens) return fail(cmd, gens.error().message);
  for (int n : gens.value())
    if (n == 1)
      return fail(cmd, "-n/--n-gen 1 cannot be measured: the first generated token comes from the prefill, so decode "
                       "is timed over n-1 tokens; expected 0 (no generation test) or at least 2");
  if (!args.probe && std::all_of(prompts->begin(), prompts->end(), [](int p) { return p == 0; }) &&
      std::all_of(gens->begin(), gens->end(), [](int n) { return n == 0; }))
    return fail(cmd, "nothing to measure: -p 0 and -n 0 (pass a prompt length > 0 or a generation length >= 2)");
  if (auto a = parse_activations(args.model.activations); !a) return fail(cmd, a.error().message);

  // -p + -n against the context: a -p beyond it is refused, -n is clamped with a note (llama.cpp
  // clamps the same way).
  std::vector<int> gen_list = gens.value();
  auto fit_lengths = [&](int64_t ctx) -> Result<void> {
    for (int p : prompts.value()) {
      if (p > ctx)
        return Error{"-p " + std::to_string(p) + " exceeds " +
                     (args.model.ctx_size > 0 ? "the context of " + std::to_string(ctx) + " tokens (-c)"
                                              : "the model's context_length " + std::to_string(ctx))};
      for (int& n : gen_list)
        if (int64_t(std::max(p, 1)) + n > ctx) {
          int clamped = int(ctx - std::max(p, 1));
          if (clamped < 2) clamped = 0;  // one token is the prefill's: no decode step left to time
          std::fprintf(stderr, "bench: note: -p %d + -n %d exceeds the context of %lld tokens: -n clamped to %d\n", p,
                       n, (long long)ctx, clamped);
          n = clamped;
        }
    }
    return ok();
  };
  // The model's flags and header before the seconds of the bandwidth probe (load_model repeats
  // the checks; the -t warning is printed once), and -p/-n against the header's context_length.
  bool lengths_fitted = false;
  if (!args.probe) {
    if (auto p = preflight_model(args.model, cmd); !p) return fail(cmd, p.error().message);
    auto md = read_model_metadata(args.model.model);
    if (!md) return fail(cmd, md.error().message);
    if (auto n = md->get_int("deepseek4.context_length"); md->has("deepseek4.context_length") && n.ok() && *n > 0) {
      if (auto f = fit_lengths(args.model.ctx_size > 0 ? args.model.ctx_size : *n); !f)
        return fail(cmd, f.error().message);
      lengths_fitted = true;
    }
  }
  cpu::MemProbeOptions po;
  po.bytes = int64_t(args.probe_mib) << 20;
  po.threads = args.model.threads;
  auto probe = cpu::probe_memory_bandwidth(po);
  if (!probe) return fail(cmd, probe.error().message);
  if (args.probe) return run_probe(probe.value());

  auto model = load_model(args.model, cmd);
  if (!model) return fail(cmd, model.error().message);
  std::shared_ptr<Model> m = model.value();
  const ModelConfig& c = m->config();
  auto facts = model_facts(args.model.model, c);
  if (!facts) return fail(cmd, facts.error().message);
  auto ctx = effective_ctx(args.model, c.n_ctx, c.n_ctx, cmd);
  if (!ctx) return fail(cmd, ctx.error().message);
  // Checked from the header above; a model whose header had no context_length is checked here.
  if (!lengths_fitted)
    if (auto f = fit_lengths(*ctx); !f) return fail(cmd, f.error().message);
  auto session = Session::create(m);
  if (!session) return fail(cmd, session.error().message);
  Session& s = *session.value();
  const Model* store = m.get();  // the expert store's counters (Model::expert_counters)
  const std::string placement = placement_summary(args.model);

  std::mt19937 rng(1234);
  std::uniform_int_distribution<int32_t> tok(0, int32_t(c.vocab - 1));
  // Warm-up: a short prompt and two decode steps (first-touch of weights, thread start-up).
  {
    std::vector<int32_t> w(size_t(std::max(1, std::min(prompts.value()[0], 32))));
    for (auto& t : w) t = tok(rng);
    if (auto r = bench_run_once(s, store, w, 2, args.model.model); !r) return fail(cmd, r.error().message);
  }
  const int threads = m->options().threads > 0 ? m->options().threads : int(std::max(1u, std::thread::hardware_concurrency()));
  std::vector<Row> rows;
  for (int p : prompts.value()) {
    // -p 0 (llama-bench: no prompt test): decode starts after one token, and no pp row is printed.
    std::vector<int32_t> prompt(static_cast<size_t>(std::max(p, 1)));
    for (auto& t : prompt) t = tok(rng);
    for (int n : gen_list) {
      auto t = bench_measure(s, store, prompt, n, args.reps, args.model.model);
      if (!t) return fail(cmd, t.error().message);
      std::vector<double> pp, ttft, tg;
      for (const BenchRep& res : t->reps) {
        ttft.push_back(res.ttft_s * 1e3);
        pp.push_back(double(p) / res.ttft_s);
        if (n > 1) tg.push_back(double(n - 1) / res.decode_s);
      }
      // One pp row per prompt length (from the first generation length's runs).
      if (p > 0 && n == gen_list[0]) rows.push_back({p, 0, "pp" + std::to_string(p), stat_of(pp), stat_of(ttft), false});
      if (n > 1) {
        const double toks = t->decode_tokens;
        Row row{p, n, "tg" + std::to_string(n) + " @ d" + std::to_string(p), stat_of(tg), {}, true,
                double(t->decode_bytes) / toks, double(t->decode_expert_bytes) / toks};
        row.bpt_staged = double(t->staged_bytes) / toks;
        row.bpt_nvme = double(t->nvme_bytes) / toks;
        row.bpt_cpu = double(t->cpu_read_bytes) / toks;
        const TierBytesPerToken tiers = tier_bytes_per_token(*t);
        row.bpt_dev_resident = tiers.device_resident;
        row.bpt_dev_staged = tiers.staged;
        row.bpt_dev_host = tiers.host;
        row.bpt_dev_h2d = tiers.h2d_staged;
        row.links = link_row(*t, row.test, row.ts.mean, row.bpt - row.bpt_experts, m->backend_name() == "CUDA",
                             row.bpt_nvme);
        // Roofline: every weight byte the cores multiplied at the probed read bandwidth, plus the
        // staged copies at the probed memcpy bandwidth (a CPU build's "H2D"). NVMe reads are not
        // charged (bench does not probe the drive; `plan --probe` does).
        row.roofline_s = row.bpt / probe->read_bps + row.bpt_staged / probe->copy_bps;
        rows.push_back(row);
      }
    }
  }

  const double size_gib = double(m->weight_bytes()) / double(1ull << 30);
  const double bpt = facts->bytes_per_token, bw = probe->read_bps;
  const std::string backend = m->backend_name();
  std::string gpus;  // "none" on the CPU backend, else the GPU names joined by "; "
  for (const std::string& g : m->gpu_names()) gpus += (gpus.empty() ? "" : "; ") + g;
  if (gpus.empty()) gpus = "none";
  const std::string acts = activations_name(m->options().activations);
  const PlanPrediction plan = plan_prediction(m->expert_plan());
  json meta{{"model", args.model.model},
            {"quant_mix", facts->quant_mix},
            {"model_size", m->weight_bytes()},
            {"model_n_params", facts->params},
            {"placement", placement},
            {"backend", backend},
            {"build", build_info()},
            {"cpu_kernel_choices", cpu::kernel_choices()},
            {"n_threads", threads},
            {"activations", acts},
            {"cpu_info", cpu_model_name()},
            {"gpu_info", gpus},
            {"driver", "n/a"},
            {"date", utc_now()},
            {"repetitions", args.reps},
            {"warmup", "1 run: min(p0, 32) prompt tokens + 2 tokens"},
            {"host_read_GBps", bw * 1e-9},
            {"host_memcpy_GBps", probe->copy_bps * 1e-9},
            {"llc_bytes", cpu::llc_bytes()},
            {"weights_fit_in_llc", cpu::llc_bytes() > 0 && int64_t(m->weight_bytes()) < cpu::llc_bytes()},
            {"bytes_per_token_est", bpt},
            {"bytes_per_token_note",
             "bytes_per_token (tg rows) is measured by the engine's counters (weight matrix bytes per matmul launch, "
             "decode steps only); bytes_per_token_est is the GGUF estimate (non-expert weights + top_k/n_expert of "
             "expert weights) for comparison"}};

  if (args.output == "json") {
    json res = json::array();
    for (const Row& r : rows) {
      json j{{"model", args.model.model}, {"size", m->weight_bytes()}, {"params", facts->params},
             {"backend", backend},        {"threads", threads},       {"activations", acts},
             {"n_prompt", r.n_prompt},    {"n_gen", r.n_gen},         {"test", r.test},
             {"avg_ts", r.ts.mean},       {"stddev_ts", r.ts.sd},     {"samples_ts", r.ts.samples}};
      if (!r.decode) {
        j["ttft_ms_avg"] = r.ttft_ms.mean;
        j["ttft_ms_stddev"] = r.ttft_ms.sd;
      } else {
        j["bytes_per_token"] = r.bpt;
        j["bytes_per_token_experts"] = r.bpt_experts;
        j["bytes_per_token_est"] = bpt;
        j["bytes_per_token_staged"] = r.bpt_staged;
        j["bytes_per_token_nvme"] = r.bpt_nvme;
        j["bytes_per_token_cpu_computed_experts"] = r.bpt_cpu;
        j["bytes_per_token_device_resident"] = r.bpt_dev_resident;
        j["bytes_per_token_device_staged"] = r.bpt_dev_staged;
        j["bytes_per_token_device_host"] = r.bpt_dev_host;
        j["bytes_per_token_h2d_staged"] = r.bpt_dev_h2d;
        j["weights_GBps"] = r.bpt * r.ts.mean * 1e-9;
        j["frac_mem_bw"] = r.frac();
        const json links = links_json(r.links, plan);  // a named value: items() refers to it
        for (const auto& [k, v] : links.items()) j[k] = v;
      }
      res.push_back(j);
    }
    std::printf("%s\n", json{{"metadata", meta}, {"results", res}}.dump(2).c_str());
    return 0;
  }
  if (args.output == "csv") {
    std::printf("model,size,params,backend,threads,activations,n_prompt,n_gen,test,avg_ts,stddev_ts,ttft_ms_avg,"
                "ttft_ms_stddev,bytes_per_token,bytes_per_token_experts,bytes_per_token_staged,bytes_per_token_nvme,"
                "bytes_per_token_est,weights_GBps,frac_mem_bw,quant_mix,"
                "placement,build,cpu_info,gpu_info,date,host_read_GBps,cpu_kernel_choices");
    for (const auto& [k, v] : links_csv(nullptr, plan)) std::printf(",%s", k.c_str());
    std::printf("\n");
    for (const Row& r : rows) {
      std::printf("%s,%llu,%llu,%s,%d,%s,%d,%d,%s,%.4f,%.4f,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%.3f,%s",
                  csv_quote(args.model.model).c_str(), (unsigned long long)m->weight_bytes(),
                  (unsigned long long)facts->params, backend.c_str(), threads, acts.c_str(), r.n_prompt, r.n_gen,
                  csv_quote(r.test).c_str(), r.ts.mean, r.ts.sd, r.decode ? "" : fmtd("%.4f", r.ttft_ms.mean).c_str(),
                  r.decode ? "" : fmtd("%.4f", r.ttft_ms.sd).c_str(), r.decode ? fmtd("%.0f", r.bpt).c_str() : "",
                  r.decode ? fmtd("%.0f", r.bpt_experts).c_str() : "", r.decode ? fmtd("%.0f", r.bpt_staged).c_str() : "",
                  r.decode ? fmtd("%.0f", r.bpt_nvme).c_str() : "", r.decode ? fmtd("%.0f", bpt).c_str() : "",
                  r.decode ? fmtd("%.4f", r.bpt * r.ts.mean * 1e-9).c_str() : "",
                  r.decode ? fmtd("%.5f", r.frac()).c_str() : "", csv_quote(facts->quant_mix).c_str(),
                  csv_quote(placement).c_str(), csv_quote(build_info()).c_str(), csv_quote(cpu_model_name()).c_str(),
                  csv_quote(gpus).c_str(), csv_quote(meta["date"].get<std::string>()).c_str(), bw * 1e-9,
                  csv_quote(meta["cpu_kernel_choices"].get<std::string>()).c_str());
      // The link columns (bench_links.h): per-link timing, cache, per-rank bytes, the plan's prediction.
      for (const auto& [k, v] : links_csv(r.decode ? &r.links : nullptr, plan)) std::printf(",%s", v.c_str());
      std::printf("\n");
    }
    return 0;
  }
  // Markdown: metadata list, then the table.
  std::printf("- model: %s (%s, %.2f GiB, %.2f M params)\n", args.model.model.c_str(), facts->quant_mix.c_str(), size_gib,
              double(facts->params) * 1e-6);
  std::printf("- placement: %s; GPUs: %s; build: %s\n", placement.c_str(), gpus.c_str(), build_info().c_str());
  std::printf("- CPU: %s, %d threads; activations %s; date %s\n", cpu_model_name().c_str(), threads, acts.c_str(),
              meta["date"].get<std::string>().c_str());
  if (const std::string kc = meta["cpu_kernel_choices"].get<std::string>(); !kc.empty())
    std::printf("- CPU kernel variants chosen (DS4_CPU_IQ_LOOKUP, DS4_CPU_Q8_0_PASSES): %s\n", kc.c_str());
  std::printf("- host memory: %.2f GB/s read, %.2f GB/s memcpy (probe, %d threads); %d reps after 1 warm-up\n",
              bw * 1e-9, probe->copy_bps * 1e-9, probe->threads, args.reps);
  std::printf("- B/tok: weight bytes the engine read per decoded token (its counters; experts = routed experts "
              "part); GGUF estimate %.3g B/tok (non-expert + top-k/n_expert of experts)\n",
              bpt);
  if (const int64_t llc = cpu::llc_bytes(); llc > 0 && int64_t(m->weight_bytes()) < llc)
    std::printf("- note: the weights (%.1f MiB) fit in the last-level cache (%.0f MiB), so decode reads them from cache "
                "and %% roofline is not a DRAM bound here\n",
                double(m->weight_bytes()) / 1048576.0, double(llc) / 1048576.0);
  std::printf("- roofline: %% roofline = (B/tok / host read GB/s + staged B/tok / memcpy GB/s) x t/s (NVMe not "
              "charged)\n");
  std::printf("\n");
  std::printf("| model | size | params | backend | threads | test | t/s | TTFT ms | B/tok | experts B/tok | staged B/tok "
              "| NVMe B/tok | GB/s | %% roofline |\n");
  std::printf("| --- | ---: | ---: | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
  std::string name = args.model.model;
  if (auto sl = name.find_last_of('/'); sl != std::string::npos) name = name.substr(sl + 1);
  for (const Row& r : rows) {
    std::printf("| %s | %.2f GiB | %.2f M | %s | %d | %s | %.2f ± %.2f | %s | %s | %s | %s | %s | %s | %s |\n",
                name.c_str(), size_gib, double(facts->params) * 1e-6, backend.c_str(), threads, r.test.c_str(), r.ts.mean,
                r.ts.sd, r.decode ? "-" : (fmtd("%.2f", r.ttft_ms.mean) + " ± " + fmtd("%.2f", r.ttft_ms.sd)).c_str(),
                r.decode ? fmtd("%.3g", r.bpt).c_str() : "-", r.decode ? fmtd("%.3g", r.bpt_experts).c_str() : "-",
                r.decode ? fmtd("%.3g", r.bpt_staged).c_str() : "-", r.decode ? fmtd("%.3g", r.bpt_nvme).c_str() : "-",
                r.decode ? fmtd("%.3f", r.bpt * r.ts.mean * 1e-9).c_str() : "-",
                r.decode ? fmtd("%.2f", 100.0 * r.frac()).c_str() : "-");
  }
  // Bytes per decoded token by tier from the backend's own counters (Device::weight_tier_bytes),
  // beside the engine's B/tok above: device-resident + staged + host = B/tok.
  std::printf("\n");
  for (const Row& r : rows)
    if (r.decode)
      std::printf("- tiers (%s, backend counters, B/tok): device-resident %.4g, staged %.4g (H2D %.4g), host %.4g%s%s\n",
                  r.test.c_str(), r.bpt_dev_resident, r.bpt_dev_staged, r.bpt_dev_h2d, r.bpt_dev_host,
                  // NVMe reads are the expert store's (they feed the staged/host bytes above, not added to B/tok).
                  r.bpt_nvme > 0 ? fmtd("; of which read from NVMe %.4g (expert store)", r.bpt_nvme).c_str() : "",
                  r.bpt_cpu > 0 ? fmtd("; experts the plan computes on the CPU %.4g (expert store)", r.bpt_cpu).c_str()
                                : "");
  // Per link (rank / GPU): bytes by tier, copy timing and overlap, cache, and the plan's prediction.
  std::vector<LinkRow> links;
  for (const Row& r : rows)
    if (r.decode) links.push_back(r.links);
  if (!links.empty()) {
    std::printf("\n- links: per rank / GPU, decode B/tok by tier (backend counters), copy ms/tok on the copy stream, "
                "stall = compute stream waiting for copies, overlap = 1 - (stall + host wait) / copy time (n/a: not "
                "timed); %s\n\n",
                plan.present ? "plan rows = the plan's prediction (routed experts only; resident and host include "
                               "the dense weights in the measured rows)"
                             : "no plan in use (no prediction)");
    std::printf("%s", links_markdown(links, plan).c_str());
  }
  return 0;
}

/// The bench, then a check that its table reached standard output (`> /dev/full` fails).
int run() {
  const int rc = run_bench();
  if (rc != 0) return rc;
  if (auto w = check_stdout("the bench results"); !w) return fail("bench", w.error().message);
  return 0;
}

CommandRegistrar reg({"bench", setup, run});

}  // namespace
}  // namespace ds4::cli

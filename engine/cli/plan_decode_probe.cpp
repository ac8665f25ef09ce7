// engine/cli/plan_decode_probe.cpp — see plan_decode_probe.h.
#include "engine/cli/plan_decode_probe.h"
#include "engine/cli/temp_cleanup.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <cstdio>
#include <filesystem>
#include <thread>
#include <vector>

#include "engine/cli/cli_common.h"
#include "engine/official_checkpoint.h"
#include "engine/session.h"
#include "engine/tiny_model.h"
#include "gguf/gguf_file.h"
#include "kernels/cpu/mem_bandwidth.h"
#include "placement/cost_model.h"
#include "placement/cpu_rate_probe.h"
#include "placement/gguf_sizes.h"

namespace ds4::cli {
namespace {

using namespace ds4::placement;
using Clock = std::chrono::steady_clock;

std::string fmt(const char* f, double a, double b = 0, double c = 0, double d = 0) {
  char buf[256];
  std::snprintf(buf, sizeof buf, f, a, b, c, d);
  return buf;
}

/// The micro-run model: make-tiny's default with attention enough to time (16 heads x 512,
/// window 128, indexer top-64) and `layers` layers (ratios of the default, cut; 3 hash layers or
/// fewer).
TinyModelConfig probe_config(int layers) {
  TinyModelConfig c;
  c.name = "plan-probe-" + std::to_string(layers) + "l";
  c.n_layers = layers;
  c.n_hash_layers = std::min(3, layers - 1);
  c.n_heads = 16;
  c.head_dim = 512;
  c.window_size = 128;
  c.index_topk = 64;
  const std::vector<int> ratios = {0, 0, 4, 128, 4, 128};
  c.compress_ratios.assign(ratios.begin(), ratios.begin() + layers);
  if (layers == 3) c.compress_ratios = {0, 4, 128};
  c.compress_ratios.push_back(0);  // MTP entry
  return c;
}

struct Sample {
  int layers = 0;
  int64_t depth = 0;
  double measured_s = 0;
  double modeled_s = 0;
  double attn_flops = 0;
};

/// The 1-minute load average (/proc/loadavg), or -1.
double load_average() {
  double l = -1;
  if (FILE* f = std::fopen("/proc/loadavg", "r")) {
    if (std::fscanf(f, "%lf", &l) != 1) l = -1;
    std::fclose(f);
  }
  return l;
}

}  // namespace

Result<CpuDecodeProfile> probe_cpu_decode(const DecodeProbeOptions& o, std::string* report) {
  const auto t_start = Clock::now();
  const int threads = o.threads > 0 ? o.threads : int(std::max(1u, std::thread::hardware_concurrency()));
  CpuDecodeProfile prof;
  prof.threads = threads;
  prof.llc_bytes = cpu::llc_bytes();
  std::string rep;
  const int64_t llc = prof.llc_bytes;
  rep += fmt("cpu decode calibration: %.0f threads, LLC %.0f MiB, load average %.1f\n", threads,
             double(llc) / (1 << 20), load_average());

  // The micro-run's temporary folder first, so an unwritable --probe-dir fails before the rates.
  std::error_code ec;
  std::string tmpl = o.dir + "/ds4-plan-probe-XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  if (!::mkdtemp(buf.data()))
    return Error{"plan --probe: cannot create a temporary folder in " + o.dir + ": " + std::strerror(errno) +
                 " (choose a writable folder with --probe-dir DIR)"};
  const std::string dir = buf.data();
  // Ctrl-C / SIGTERM during the micro-run removes the folder and the models in it (declared
  // after remove_dir, so it is forgotten before the normal removal runs).
  struct Remove {
    std::string d;
    ~Remove() {
      std::error_code e;
      std::filesystem::remove_all(d, e);
    }
  } remove_dir{dir};
  const TempCleanupGuard on_signal{dir, true};

  // 1. Rates.
  CpuRateProbeOptions ro;
  ro.threads = threads;
  ro.hot_bytes = std::clamp<int64_t>(llc / 4, int64_t(1) << 20, int64_t(16) << 20);
  ro.cold_bytes = std::max<int64_t>(o.cold_mib << 20, 4 * llc);
  ro.q8 = true;
  DS4_TRY(CpuRates q8r, probe_cpu_matvec_rates(ro));
  // f32 mode measured from DRAM as well (plan_decode_probe.h step 1: the derived bound it replaces
  // was 1.4-1.5x too fast for the fused f32 kernels on Zen 4).
  ro.q8 = false;
  DS4_TRY(CpuRates f32r, probe_cpu_matvec_rates(ro));
  prof.modes["q8"].hot_gbps = q8r.hot_gbps;
  prof.modes["q8"].cold_gbps = q8r.cold_gbps;
  CpuDecodeMode& f = prof.modes["f32"];
  f.hot_gbps = f32r.hot_gbps;
  f.cold_gbps = f32r.cold_gbps;
  // 1b. The reuse curve from the hot matrix size to the cold buffer's (what decides hot vs cold,
  // instead of the OS-reported LLC: cost_model.h cache_hit_share).
  {
    const auto t0 = Clock::now();
    DS4_TRY(prof.reuse_curve, probe_reuse_curve(threads, ro.hot_bytes, std::max<int64_t>(o.cold_mib << 20, 4 * llc), 0.05));
    rep += fmt("  reuse curve (%.1f s), read GB/s of repeated passes over MiB:", std::chrono::duration<double>(Clock::now() - t0).count());
    for (const ReusePoint& pt : prof.reuse_curve) rep += fmt(" %.0f:%.1f", pt.bytes / (1 << 20), pt.gbps);
    rep += "\n";
  }
  rep += fmt("  matmul rates (%.1f s; hot matrix %.0f MiB, cold buffer %.0f MiB), GB/s of weights:\n",
             q8r.seconds + f32r.seconds, double(ro.hot_bytes >> 20), double(std::max<int64_t>(o.cold_mib << 20, 4 * llc) >> 20));
  for (const auto& [name, m] : prof.modes) {
    for (const char* which : {"hot", "cold"}) {
      rep += "    " + name + " " + which + ":";
      for (const auto& [t, g] : (which[0] == 'h' ? m.hot_gbps : m.cold_gbps)) rep += " " + t + fmt(" %.2f", g);
      rep += "\n";
    }
  }

  // 2. Micro-run models (in the temporary folder made before step 1).
  const int64_t depths[2] = {8, 384};
  std::map<std::string, std::vector<Sample>> samples;
  for (int layers : {6, 3}) {
    TinyModelOptions to;
    to.config = probe_config(layers);
    to.gate_up_type = to.down_type = GgmlType::Q8_0;
    to.threads = threads;
    const std::string path = dir + "/" + to.config.name + ".gguf";
    DS4_TRY(auto written, write_tiny_model(path, to));
    (void)written;
    gguf::OpenOptions oo;
    oo.map_data = false;
    DS4_TRY(gguf::GgufModel file, open_model_file(path, oo));
    DS4_TRY(GgufPlanModel pm, plan_model_from_gguf(file));
    for (const char* mode : {"q8", "f32"}) {
      ModelArgs ma;
      ma.model = path;
      ma.activations = mode;
      ma.threads = threads;
      DS4_TRY(std::shared_ptr<Model> m, load_model(ma, "plan --probe"));
      DS4_TRY(auto session, Session::create(m));
      Session& s = *session;
      const CpuDecodeMode& cal = prof.modes.at(mode);
      const CpuHotShares hot = cpu_hot_shares(prof, pm.shape, pm.sizes);
      for (int64_t depth : depths) {
        std::vector<int32_t> prompt(static_cast<size_t>(depth));
        for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = int32_t((i * 37 + 11) % 512);
        // One prompt, two warm-up steps, then `reps` timed chunks of `tokens` steps (the fastest
        // chunk counts, as the rates keep their best pass: both describe the machine unloaded).
        std::vector<double> per_token;
        std::vector<float> logits;
        s.reset();
        DS4_TRY_VOID(s.eval(prompt, nullptr, &logits));
        int64_t pos = depth;
        auto step = [&]() -> Result<void> {
          const int32_t one[1] = {int32_t((pos * 53 + 5) % 512)};
          ++pos;
          return s.eval(one, nullptr, &logits);
        };
        for (int i = 0; i < 2; ++i) DS4_TRY_VOID(step());
        const int64_t first_timed = pos;
        for (int r = 0; r < o.reps; ++r) {
          const auto t0 = Clock::now();
          for (int i = 0; i < o.tokens; ++i) DS4_TRY_VOID(step());
          per_token.push_back(std::chrono::duration<double>(Clock::now() - t0).count() / o.tokens);
        }
        Sample x;
        x.layers = layers;
        x.depth = depth;
        x.measured_s = *std::min_element(per_token.begin(), per_token.end());
        x.modeled_s = cpu_decode_matvec_seconds(pm.shape, pm.sizes, cal, hot);
        // Mean over the timed positions (position p decodes with p + 1 entries visible).
        for (int64_t p = first_timed; p < pos; ++p)
          for (int l = 0; l < pm.shape.n_layers; ++l) x.attn_flops += decode_attention_flops(pm.shape, l, p);
        x.attn_flops /= double(pos - first_timed);
        samples[mode].push_back(x);
      }
    }
  }
  // One fit over both modes: the fixed and attention costs are the non-matmul work (dispatch,
  // norms, mHC, RoPE, attention, indexer), which the activation mode does not change; twice the
  // samples for three unknowns.
  std::vector<DecodeProbeSample> ds;
  double mean = 0;
  for (const auto& [mode, xs] : samples)
    for (const auto& x : xs) {
      ds.push_back({x.layers, x.modeled_s, x.attn_flops, x.measured_s});
      mean += x.measured_s;
    }
  mean /= double(ds.size());
  DS4_TRY(DecodeFixedFit fit, fit_decode_fixed_costs(ds));
  for (auto& [mode, xs] : samples) {
    CpuDecodeMode& m = prof.modes.at(mode);
    m.token_us = fit.token_s * 1e6;
    m.layer_us = fit.layer_s * 1e6;
    m.attn_gflops = fit.attn_gflops;
    rep += "  micro-run " + mode + " (per token: measured ms, weight reads ms at the rates, attention MFLOP, fit ms):\n";
    for (const auto& x : xs)
      rep += fmt("    %.0f layers, depth %4.0f: %7.3f ms measured, ", x.layers, double(x.depth), x.measured_s * 1e3) +
             fmt("%7.3f ms weights, %7.2f MFLOP, fit %7.3f ms\n", x.modeled_s * 1e3, x.attn_flops * 1e-6,
                 (x.modeled_s + fit.token_s + x.layers * fit.layer_s + x.attn_flops / (fit.attn_gflops * 1e9)) * 1e3);
  }
  rep += fmt("  fit (both modes): token %.1f us, layer %.1f us, attention %.2f GFLOP/s (rms residual %.3f ms)\n",
             fit.token_s * 1e6, fit.layer_s * 1e6, fit.attn_gflops, fit.rms_residual_s * 1e3);
  if (fit.rms_residual_s > 0.1 * mean)
    rep += fmt("  warning: the fit misses the samples by %.0f%% of the mean step (%.3f ms): the machine was "
               "probably busy (load average %.1f); re-run `plan --probe` on a quiet machine\n",
               100 * fit.rms_residual_s / mean, mean * 1e3, load_average());
  rep += fmt("  calibration took %.1f s\n", std::chrono::duration<double>(Clock::now() - t_start).count());
  if (report) *report = rep;
  return prof;
}

}  // namespace ds4::cli

// engine/cli/cmd_make_tiny.cpp — `ds4-offload make-tiny -o FILE [--experts T] [--seed S]
// [--config JSON] [--random-blocks]`: writes a small random-weight DeepSeek-V4 GGUF
// (engine/tiny_model.h); --random-blocks writes random quant blocks instead of quantizing
// (engine/random_blocks.h), for benchmark models of the real shapes.
#include <cstdio>

#include "engine/cli/cli_common.h"
#include "engine/cli/command.h"
#include "engine/tiny_model.h"

namespace ds4::cli {
namespace {

struct MakeTinyArgs {
  std::string out;
  std::string experts;  // empty = the default mix (IQ2_XXS gate/up, Q2_K down)
  uint64_t seed = 1;
  std::string config;   // empty = built-in, identical to configs/models/dsv4-tiny.json
  int threads = 0;
  bool random_blocks = false;
};
MakeTinyArgs args;

CLI::App* setup(CLI::App& app) {
  auto* s = app.add_subcommand("make-tiny", "Write a small random-weight DeepSeek-V4 model (every architecture feature active) as GGUF");
  s->add_option("-o,--output", args.out, "Output GGUF path")->required();
  s->add_option("--experts", args.experts,
                "Routed-expert type for gate, up and down: q8_0, q2_k, iq2_xxs, iq2_xs, iq1_s, iq1_m, mxfp4 "
                "(default: iq2_xxs gate/up + q2_k down, the public Q2 mix)");
  add_seed_option(s, args.seed, "Weight seed (0 .. 2^64-1)");
  s->add_option("--config", args.config,
                "Model config JSON (default: built-in dsv4-tiny, same as configs/models/dsv4-tiny.json)");
  s->add_option("-t,--threads", args.threads, "Quantization threads (0 = all); the file does not depend on it")
      ->capture_default_str();
  s->add_flag("--random-blocks", args.random_blocks,
              "Write the quantized tensors as valid random blocks (RMS 1/sqrt(ne0)) instead of quantizing: "
              "seconds, not hours, for DeepSeek-V4-Flash's shapes; the file is for benchmarks only");
  return s;
}

int run() {
  const char* cmd = "make-tiny";
  // The output first: a bad path must not wait for the whole model to be built.
  if (auto w = check_gguf_output(args.out, "-o/--output"); !w) return fail(cmd, w.error().message);
  TinyModelOptions o;
  if (!args.config.empty()) {
    auto c = load_tiny_config(args.config);
    if (!c) return fail(cmd, c.error().message);
    o.config = c.value();
  }
  if (!args.experts.empty()) {
    auto t = parse_expert_type(args.experts);
    if (!t) return fail(cmd, t.error().message);
    o.gate_up_type = o.down_type = t.value();
  }
  o.seed = args.seed;
  if (auto t = check_threads(args.threads); !t) return fail(cmd, t.error().message);
  o.threads = args.threads;
  o.random_blocks = args.random_blocks;
  std::fprintf(stderr, "make-tiny: config %s (%d layers, dim %lld, %d experts, moe_inter_dim %lld), experts %s/%s/%s, seed %llu%s\n",
               o.config.name.c_str(), o.config.n_layers, (long long)o.config.dim, o.config.n_routed_experts,
               (long long)o.config.moe_inter_dim, std::string(ggml_type_name(uint32_t(o.gate_up_type))).c_str(),
               std::string(ggml_type_name(uint32_t(o.gate_up_type))).c_str(),
               std::string(ggml_type_name(uint32_t(o.down_type))).c_str(), (unsigned long long)o.seed,
               o.random_blocks ? ", random blocks (benchmark weights)" : "");
  auto t0 = std::chrono::steady_clock::now();
  auto r = [&] {
    Progress p("make-tiny: writing " + args.out, [] { return std::string(args.random_blocks ? "writing random blocks" : "quantizing and writing"); });
    return write_tiny_model(args.out, o);
  }();
  if (!r) return fail(cmd, r.error().message);
  std::fprintf(stderr, "make-tiny: wrote %s: %lld tensors, %.2f M parameters, %.2f MiB in %.2f s\n", args.out.c_str(),
               (long long)r->n_tensors, double(r->n_params) / 1e6, double(r->file_bytes) / (1024.0 * 1024.0),
               seconds_since(t0));
  return 0;
}

const CommandRegistrar reg{{"make-tiny", setup, run}};

}  // namespace
}  // namespace ds4::cli

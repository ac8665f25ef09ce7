// engine/cli/cmd_calibrate.cpp — `ds4-offload calibrate -m MODEL --prompts FILE [-o STATS.json]
// [-c N] [-t N] [--activations f32|q8] [--max-routes N]`: routing statistics for the placement
// planner.
//
// Prompts: every non-empty line of FILE is one prompt (a file without newlines is therefore one
// prompt; write multi-line documents with their newlines replaced). Each prompt is tokenized
// (BOS prepended when the model adds one, special tokens parsed) and evaluated from a fresh
// sequence state in windows of at most -c tokens (a longer prompt continues in a fresh window).
// No sampling: only the prompt tokens are routed. Every evaluated token (BOS included) is counted
// in every layer: its top_k selected experts (hash layers: tid2eid of the token) and every
// unordered pair of them (co-activation within a token); up to --max-routes whole token routes per
// layer are kept (a uniform, deterministic reservoir sample of all tokens, the same tokens in
// every layer; placement/routing_counter.h). Output: ds4-routing-stats with the "coactivation" key,
// version 2 with "routes" (version 1 with --max-routes 0) (placement/routing_stats.h), read by
// `plan --stats`, whose cost model samples the routes (co-activation preserved).
//
// The prompt pass is engine/prompt_runner.h (shared with `convert --to nvfp4 --prompts`).
// The router choices come from the engine's trace hook (Session::set_trace, engine/session.h),
// which records decisions without changing numerics.
#include <atomic>
#include <cstdio>
#include <filesystem>

#include "engine/cli/cli_common.h"
#include "engine/cli/command.h"
#include "engine/prompt_runner.h"
#include "engine/session.h"
#include "engine/model_config.h"
#include "engine/tokenizer.h"
#include "placement/routing_counter.h"
#include "placement/routing_stats.h"
#include "placement/sglang_expert_location.h"

namespace ds4::cli {
namespace {

struct CalibrateArgs {
  ModelArgs model;
  std::string prompts;
  std::string out = "routing-stats.json";
  // -c/--ctx-size (model.ctx_size) is the window: 0 = min(4096, context_length)
  int chunk = 512;  // tokens per eval call
  int max_routes = 4096;  // token routes kept per layer
  std::string format = "ds4";  // ds4 (routing stats) or sglang (--init-expert-location JSON)
};
CalibrateArgs args;

CLI::App* setup(CLI::App& app) {
  auto* s = app.add_subcommand("calibrate", "Run prompts through the model and record per-layer expert activation "
                                            "counts and co-activation (routing statistics for `plan --stats`)");
  add_model_options(s, args.model,
                    ModelOptionSet{.model_required = true, .experts_tier = false, .ctx_size = true,
                                   .ctx_help = "Window length in tokens (0 = min(4096, context_length))"});
  s->add_option("--prompts", args.prompts, "Prompt file: one prompt per non-empty line (- = standard input; at most 64 MiB)")->required();
  s->add_option("-o,--output", args.out, "Statistics JSON to write (ds4-routing-stats v2 with routes, v1 with --max-routes 0)")->capture_default_str();
  s->add_option("--chunk", args.chunk, "Tokens per eval call")->capture_default_str()->check(CLI::Range(1, 1 << 16));
  s->add_option("--max-routes", args.max_routes,
                 "Token routes (expert sets) kept per layer for the planner's cost model (0 = none: version-1 file)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 20));
  s->add_option("--routing-format", args.format,
                "Output format: ds4 (ds4-routing-stats for `plan --stats`) or sglang (SGLang's --init-expert-location "
                "JSON: logical_count [layers x experts])")
      ->capture_default_str()
      ->check(CLI::IsMember({"ds4", "sglang"}));
  return s;
}

int run() {
  const char* cmd = "calibrate";
  const int64_t window = args.model.ctx_size;
  if (window < 0) return fail(cmd, "-c/--ctx-size: expected 0 (auto) or >= 1, found " + std::to_string(window));
  auto text = read_text_file(args.prompts, "--prompts", kMaxCorpusBytes, /*allow_stdin=*/true);
  if (!text) return fail(cmd, text.error().message);
  const std::vector<std::string> prompts = split_prompt_lines(text.value());
  if (prompts.empty()) return fail(cmd, args.prompts + ": no prompt (every line is empty)");
  if (auto c = check_output_not_input(args.out, "-o/--output", {args.model.model, args.prompts}); !c)
    return fail(cmd, c.error().message);
  if (args.out.empty()) return fail(cmd, "-o/--output: expected a file path, found an empty string");
  if (auto w = check_output_writable(args.out, "-o/--output"); !w) return fail(cmd, w.error().message);
  auto model = load_model(args.model, cmd, ModelNeeds{.tokenizer = true});  // -c checked before loading
  if (!model) return fail(cmd, model.error().message);
  std::shared_ptr<Model> m = model.value();
  const Tokenizer* tok = m->tokenizer();
  if (!tok) return fail(cmd, args.model.model + ": the model has no tokenizer (tokenizer.ggml.* metadata in a GGUF, tokenizer.json in a checkpoint folder)");
  const ModelConfig& c = m->config();
  const int64_t ctx = window > 0 ? window : std::min<int64_t>(4096, c.n_ctx);
  if (ctx > c.n_ctx)
    return fail(cmd, "-c/--ctx-size " + std::to_string(ctx) + " exceeds the model's context_length " + std::to_string(c.n_ctx));
  if (c.n_expert > 65536) return fail(cmd, "the model has " + std::to_string(c.n_expert) + " experts; at most 65536 supported");
  placement::RoutingCounter counter(c.n_layer, c.n_expert, c.n_expert_used, args.max_routes);
  auto created = Session::create(m);
  if (!created) return fail(cmd, created.error().message);
  Session& session = *created.value();
  const auto t0 = std::chrono::steady_clock::now();
  std::atomic<size_t> done_prompts{0};
  std::atomic<int64_t> done_tokens{0};
  const size_t n_prompts = prompts.size();
  Progress progress("calibrate", [&] {
    const double s = seconds_since(t0);
    return "prompt " + std::to_string(done_prompts.load() + 1) + " of " + std::to_string(n_prompts) + ", " +
           std::to_string(done_tokens.load()) + " tokens (" +
           std::to_string(int64_t(s > 0 ? double(done_tokens.load()) / s : 0.0)) + " tok/s)";
  });
  const PromptRunOptions ro{.window = ctx, .chunk = args.chunk, .done_prompts = &done_prompts, .done_tokens = &done_tokens};
  auto ran = run_prompts(session, tokenize_prompts(*tok, prompts), ro, nullptr,
                         [&](size_t pi, std::span<const int32_t> window, ForwardTrace& trace) -> Result<void> {
                           if (int(trace.router.size()) != c.n_layer)
                             return Error{"router trace has " + std::to_string(trace.router.size()) + " layers, expected " +
                                          std::to_string(c.n_layer)};
                           for (int l = 0; l < c.n_layer; ++l)
                             for (size_t pos = 0; pos < window.size(); ++pos) {
                               auto r = counter.add(l, trace.router[size_t(l)].at(pos));
                               if (!r) return Error{"prompt " + std::to_string(pi + 1) + ", position " + std::to_string(pos) +
                                                    ": " + r.error().message};
                             }
                           return ok();
                         });
  if (!ran) return fail(cmd, ran.error().message);
  const int64_t windows = ran->windows;
  const double secs = seconds_since(t0);
  auto tokens = counter.tokens();
  if (!tokens) return fail(cmd, tokens.error().message);
  const auto co = counter.coactivation();
  const std::string name = std::filesystem::path(args.model.model).filename().string();
  auto w = args.format == "sglang" ? placement::write_sglang_expert_location(args.out, counter.counts())
                                    : placement::write_routing_stats(args.out, name, c.n_expert_used, tokens.value(),
                                                                     counter.counts(), co, counter.routes());
  if (!w) return fail(cmd, w.error().message);
  // Summary: tokens, speed, per-layer share of the hottest expert and distinct pairs.
  std::fprintf(stderr, "calibrate: %zu prompts, %lld windows, %lld tokens in %.2f s (%.1f tok/s)\n", prompts.size(),
               (long long)windows, (long long)tokens.value(), secs, secs > 0 ? double(tokens.value()) / secs : 0.0);
  for (int l = 0; l < c.n_layer; ++l) {
    const auto& row = counter.counts()[size_t(l)];
    int64_t hot = 0, used = 0;
    for (int64_t v : row) { hot = std::max(hot, v); used += v > 0; }
    std::fprintf(stderr, "  layer %2d%s: %lld/%d experts used, hottest selected by %.1f%% of tokens, %zu distinct pairs\n",
                 l, l < c.n_hash_layers ? " (hash)" : "", (long long)used, c.n_expert,
                 100.0 * double(hot) / double(std::max<int64_t>(1, tokens.value())), co[size_t(l)].size());
  }
  std::fprintf(stderr, "calibrate: wrote %s (%lld token routes per layer kept)\n", args.out.c_str(),
               (long long)std::min<int64_t>(tokens.value(), args.max_routes));
  return 0;
}

CommandRegistrar reg({"calibrate", setup, run});

}  // namespace
}  // namespace ds4::cli

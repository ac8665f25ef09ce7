// engine/cli/cmd_run.cpp — `ds4-offload run`: tokenize a prompt (optionally in the DeepSeek-V4
// chat format), prefill, then sample and stream up to -n tokens; print prompt tokens, prefill and
// decode tok/s and peak memory. With --plan: routed experts where the plan puts them, and after
// generation the bytes moved per tier per DECODE token (counters snapshot after prefill) next to
// the plan's prediction from routing statistics and the plan's bytes for this run's own routing
// (router trace; exact bookkeeping), with ratios; --plan-report F writes the same as JSON.
#include <csignal>
#include <cstdio>
#include <fstream>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "engine/chat_format.h"
#include "engine/session.h"
#include "engine/cli/cli_common.h"
#include "engine/cli/command.h"
#include "engine/model_config.h"
#include "engine/sampler.h"
#include "engine/tokenizer.h"
#include "engine/utf8_stream.h"
#include "kernels/cpu/kernel_choices.h"
#include "placement/plan_file.h"
#include "placement/routing_counter.h"
#include "placement/routing_stats.h"
#include "placement/sglang_expert_location.h"

#include <nlohmann/json.hpp>

namespace ds4::cli {
namespace {

struct RunArgs {
  ModelArgs model;
  std::string prompt;
  std::string prompt_file;
  int n_predict = 64;
  bool chat = false;
  bool think = false;
  SamplerParams sampling;
  bool show_special = false;
  std::string plan_report;
  std::string routing_out;
  std::string routing_format = "ds4";  // ds4 or sglang
  bool random_seed = false;       // --seed -1
  bool ignore_eos = false;        // --ignore-eos
  CLI::Option* prompt_opt = nullptr;
};
RunArgs args;

/// Set by the first Ctrl-C (SIGINT): generation stops after the current token and the summary is
/// still printed; the handler then restores the default action, so a second Ctrl-C ends the
/// program at once.
volatile std::sig_atomic_t g_interrupted = 0;
void on_sigint(int) {
  g_interrupted = 1;
  std::signal(SIGINT, SIG_DFL);
}

CLI::App* setup(CLI::App& app) {
  auto* s = app.add_subcommand("run", "Generate text from a prompt, streaming it; then print speed and memory figures");
  add_model_options(s, args.model, ModelOptionSet{.model_required = true, .experts_tier = true, .plan = true, .ctx_size = true});
  auto* p = s->add_option("-p,--prompt", args.prompt, "Prompt text (may be empty: BOS only)");
  auto* f = s->add_option("-f,--file", args.prompt_file, "Read the prompt from this file (- = standard input)");
  args.prompt_opt = p;
  p->excludes(f);
  f->excludes(p);
  s->add_option("-n,--n-predict", args.n_predict,
                "Tokens to generate (-1 = until end-of-sequence or the context is full; stops early at "
                "end-of-sequence; Ctrl-C stops and still prints the summary)")
      ->capture_default_str();
  s->add_flag("--chat", args.chat, "Wrap the prompt as one user turn of the DeepSeek-V4 chat format");
  s->add_flag("--think", args.think, "With --chat: thinking mode (the reply opens with <think>)");
  add_sampling_options(s, args.sampling, &args.random_seed);
  s->add_option("--plan-report", args.plan_report,
                "With --plan: write measured vs predicted decode bytes per token per tier as JSON to this file")
      ->check(non_empty("a file path"));
  s->add_option("--routing-out", args.routing_out,
                "Write the router's choices of the DECODE tokens (prefill excluded) as routing statistics "
                "(ds4-routing-stats v2 with every decode token's route, the format of `calibrate`)")
      ->check(non_empty("a file path"));
  s->add_option("--routing-format", args.routing_format,
                "--routing-out format: ds4, or sglang (SGLang's --init-expert-location JSON, logical_count)")
      ->capture_default_str()
      ->check(CLI::IsMember({"ds4", "sglang"}));
  s->add_flag("--special", args.show_special, "Also print control tokens (e.g. end-of-sequence) as text");
  s->add_flag("--ignore-eos", args.ignore_eos, "Never stop at end-of-sequence (only -n, the context or Ctrl-C)");
  return s;
}

// Measured routed-expert bytes of a store between two counter snapshots, by plan tier.
placement::TierBytes measured_bytes(const staging::StagingCounters& a, const staging::StagingCounters& b) {
  placement::TierBytes t;
  t.vram = {double(b.bytes_resident_reads - a.bytes_resident_reads)};
  t.link = {double(b.bytes_host_to_device - a.bytes_host_to_device) +
            double(b.bytes_nvme_to_device - a.bytes_nvme_to_device)};
  for (size_t n = 0; n < b.cpu_reads_by_node.size(); ++n)
    t.cpu.push_back(double(b.cpu_reads_by_node[n] - (n < a.cpu_reads_by_node.size() ? a.cpu_reads_by_node[n] : 0)));
  t.nvme = double(b.bytes_nvme_to_device - a.bytes_nvme_to_device) + double(b.bytes_nvme_to_cpu - a.bytes_nvme_to_cpu);
  return t;
}

// Prints (stderr) and optionally writes (JSON) measured vs predicted bytes per decode token.
int report_plan(const char* cmd, const placement::PlanFile& pf, const staging::StagingCounters& c0,
                const staging::StagingCounters& c1, const std::vector<std::vector<std::vector<int32_t>>>& routes,
                int steps) {
  const placement::TierBytes m = measured_bytes(c0, c1);
  const placement::TierBytes own =
      placement::plan_bytes_for_routing(pf.plan, pf.expert_bytes, int(pf.node_ids.size()), {}, routes);
  const double n = steps > 0 ? double(steps) : 1.0;
  struct Row {
    const char* name;
    double measured, stats, own;
  };
  const Row rows[] = {
      {"vram (resident reads)", m.vram_total() / n, pf.predicted.vram_total(), own.vram_total() / n},
      {"host->gpu (staged)", m.link_total() / n, pf.predicted.link_total(), own.link_total() / n},
      {"cpu (read by cores)", m.cpu_total() / n, pf.predicted.cpu_total(), own.cpu_total() / n},
      {"nvme (read)", m.nvme / n, pf.predicted.nvme, own.nvme / n},
  };
  auto ratio = [](double a, double b) { return b > 0 ? a / b : (a == 0 ? 1.0 : 0.0); };
  const uint64_t av = c1.act_vram - c0.act_vram, ah = c1.act_host - c0.act_host, ac = c1.act_cpu - c0.act_cpu,
                 an = c1.act_nvme - c0.act_nvme;
  if (steps == 0) {
    // No decode step (an end of sequence or a full context right after the prefill's token):
    // nothing measured, so no table of zeros and 0.000 ratios; a report says decode_steps 0.
    std::fprintf(stderr, "\n%s: plan %s: no decode steps, so no bytes per decode token to compare with the plan\n", cmd,
                 args.model.plan.c_str());
  } else {
    std::fprintf(stderr, "\n%s: plan %s (rule %s): routed-expert bytes per decode token over %d decode steps\n", cmd,
                 args.model.plan.c_str(), pf.rule.c_str(), steps);
    std::fprintf(stderr, "%s:   %-22s %12s %14s %7s %16s %7s\n", cmd, "tier", "measured", "plan (stats)", "ratio",
                 "plan (this run)", "ratio");
    for (const Row& r : rows)
      std::fprintf(stderr, "%s:   %-22s %12.1f %14.1f %7.3f %16.1f %7.3f\n", cmd, r.name, r.measured, r.stats,
                   ratio(r.measured, r.stats), r.own, ratio(r.measured, r.own));
    std::fprintf(stderr, "%s:   expert-steps per decode token: vram %.2f, host %.2f, cpu %.2f, nvme %.2f (plan routing: %s)\n",
                 cmd, double(av) / n, double(ah) / n, double(ac) / n, double(an) / n, pf.routing.c_str());
  }
  if (args.plan_report.empty()) return 0;
  nlohmann::json j;
  j["plan"] = args.model.plan;
  j["rule"] = pf.rule;
  j["decode_steps"] = steps;
  j["tiers"] = nlohmann::json::array();
  const char* keys[] = {"vram", "link", "cpu", "nvme"};
  for (size_t i = 0; i < 4; ++i)
    j["tiers"].push_back({{"tier", keys[i]}, {"measured_per_token", rows[i].measured},
                          {"predicted_stats_per_token", rows[i].stats}, {"predicted_own_routing_per_token", rows[i].own}});
  j["expert_steps"] = {{"vram", av}, {"host", ah}, {"cpu", ac}, {"nvme", an}};
  if (auto w = write_file_atomic(args.plan_report, j.dump(1) + "\n", "--plan-report"); !w) return fail(cmd, w.error().message);
  return 0;
}

int run() {
  const char* cmd = "run";
  if (args.prompt_opt->count() == 0 && args.prompt_file.empty())
    return fail(cmd, "a prompt is required: -p TEXT, -f FILE or -f - (standard input); -p '' is BOS only");
  if (args.n_predict < -1)
    return fail(cmd, "-n/--n-predict: expected >= 0 or -1 (until end-of-sequence), found " + std::to_string(args.n_predict));
  if (args.think && !args.chat) return fail(cmd, "--think needs --chat (thinking mode is part of the chat format)");
  if (auto v = validate(args.sampling); !v) return fail(cmd, v.error().message);
  std::string text = args.prompt;
  if (!args.prompt_file.empty()) {
    auto t = read_text_file(args.prompt_file, "-f/--file", kMaxPromptBytes, /*allow_stdin=*/true);
    if (!t) return fail(cmd, t.error().message);
    text = t.value();
  }
  if (auto c = check_output_not_input(args.routing_out, "--routing-out", {args.model.model, args.model.plan}); !c)
    return fail(cmd, c.error().message);
  if (!args.plan_report.empty() && args.model.plan.empty()) return fail(cmd, "--plan-report needs --plan");
  // Output paths and counts that would only fail after generation are checked first.
  for (const auto& [out, opt] : {std::pair{args.routing_out, "--routing-out"}, std::pair{args.plan_report, "--plan-report"}})
    if (auto w = check_output_writable(out, opt); !w) return fail(cmd, w.error().message);
  if (!args.routing_out.empty() && args.n_predict >= 0 && args.n_predict < 2)
    return fail(cmd, "--routing-out records decode tokens: expected -n 2 or more, found -n " +
                         std::to_string(args.n_predict));
  if (!args.plan_report.empty() && args.n_predict >= 0 && args.n_predict < 2)
    return fail(cmd, "--plan-report compares decode tokens' bytes: expected -n 2 or more, found -n " +
                         std::to_string(args.n_predict));
  if (auto c = check_output_not_input(args.plan_report, "--plan-report", {args.model.model, args.model.plan}); !c)
    return fail(cmd, c.error().message);
  auto loaded = load_text_model(args.model, cmd);
  if (!loaded) return fail(cmd, loaded.error().message);
  std::shared_ptr<Model> m = loaded.value().model;
  const Tokenizer* tok = loaded.value().tokenizer;
  const int64_t vocab = m->config().vocab;

  std::vector<int32_t> prompt;
  if (args.chat) {
    ChatOptions co;
    co.mode = args.think ? ThinkingMode::Thinking : ThinkingMode::Chat;
    co.add_bos = true;
    ChatMessage user{"user", text, ""};
    auto rendered = render_chat(std::span<const ChatMessage>(&user, 1), co);
    if (!rendered) return fail(cmd, rendered.error().message);
    for (std::string_view marker : {chat_tokens::kUser, chat_tokens::kAssistant, chat_tokens::kThinkEnd})
      if (tok->find_token(marker) < 0)
        std::fprintf(stderr, "run: warning: the vocabulary has no '%.*s' token; chat markers are tokenized as plain text\n",
                     int(marker.size()), marker.data());
    prompt = tok->encode(rendered.value(), /*add_bos=*/false, /*parse_special=*/true);
  } else {
    prompt = tok->encode(text, tok->add_bos(), /*parse_special=*/true);
  }
  if (prompt.empty()) {
    // An empty prompt is the start of a sequence: BOS alone (llama.cpp does the same).
    if (tok->bos_id() < 0) return fail(cmd, "the prompt is empty and the model has no BOS token to start from");
    prompt.push_back(tok->bos_id());
  }
  auto ctx = effective_ctx(args.model, m->config().n_ctx, m->config().n_ctx, cmd);
  if (!ctx) return fail(cmd, ctx.error().message);
  const int64_t n_ctx = *ctx;
  if (int64_t(prompt.size()) >= n_ctx)
    return fail(cmd, "the prompt (" + std::to_string(prompt.size()) + " tokens) does not fit the context of " +
                         std::to_string(n_ctx) + " tokens" +
                         (args.model.ctx_size > 0 ? " (-c)" : " (the model's context_length)"));
  int n_predict = args.n_predict;
  if (n_predict < 0 || int64_t(prompt.size()) + n_predict > n_ctx) {
    const int room = int(n_ctx - int64_t(prompt.size()));
    if (n_predict >= 0)
      std::fprintf(stderr, "run: note: prompt (%zu tokens) + -n %d exceeds the context of %lld tokens: -n clamped to %d\n",
                   prompt.size(), n_predict, (long long)n_ctx, room);
    n_predict = room;
  }
  resolve_seed(args.sampling.seed, args.random_seed, cmd);
  std::fprintf(stderr,
               "run: sampling: temp %.3g, top-k %d, top-p %.3g, min-p %.3g, repeat-penalty %.3g (last %d), seed %llu%s\n",
               double(args.sampling.temperature), args.sampling.top_k, double(args.sampling.top_p),
               double(args.sampling.min_p), double(args.sampling.repeat_penalty), args.sampling.repeat_last_n,
               (unsigned long long)args.sampling.seed, args.chat ? (args.think ? ", chat (thinking)" : ", chat") : "");

  auto session = Session::create(m);
  if (!session) return fail(cmd, session.error().message);
  Session& s = *session.value();
  // --plan: the plan (for its predictions), the store's counters and a router trace.
  std::optional<placement::PlanFile> plan;
  ForwardTrace trace;
  if (!args.routing_out.empty()) s.set_trace(&trace);
  if (!args.model.plan.empty()) {
    auto pf = placement::read_plan_file(args.model.plan, m->config().n_layer, m->config().n_expert,
                                        m->config().n_expert_used);
    if (!pf) return fail(cmd, pf.error().message);
    plan = std::move(pf).value();
    s.set_trace(&trace);
  }
  std::vector<float> logits;
  // Ctrl-C from here on stops generation (a prefill in progress completes first) and the summary
  // is still printed.
  g_interrupted = 0;
  std::signal(SIGINT, on_sigint);
  auto t0 = std::chrono::steady_clock::now();
  if (auto r = s.eval(prompt, nullptr, &logits); !r) return fail(cmd, r.error().message);
  const double prefill_s = seconds_since(t0);
  if (int64_t(logits.size()) != vocab)
    return fail(cmd, "internal: eval returned " + std::to_string(logits.size()) + " logits, expected " + std::to_string(vocab));
  if (auto fin = check_finite_logits(logits, vocab, int64_t(prompt.size()) - 1, args.model.model); !fin)
    return fail(cmd, fin.error().message);

  staging::StagingCounters after_prefill;
  if (plan) after_prefill = m->expert_counters();
  Sampler sampler(args.sampling);
  std::vector<int32_t> history = prompt;
  Utf8StreamDecoder utf8;
  int generated = 0, decoded = 0;
  double decode_s = 0;
  bool stopped_at_eos = false;
  for (int i = 0; i < n_predict && !g_interrupted; ++i) {
    if (args.ignore_eos && tok->eos_id() >= 0) logits[size_t(tok->eos_id())] = -std::numeric_limits<float>::infinity();
    const int32_t next = sampler.sample(logits, history);
    ++generated;
    history.push_back(next);
    if (next == tok->eos_id()) {
      stopped_at_eos = true;
      if (args.show_special) std::fputs(utf8.push(tok->token_bytes(next, true)).c_str(), stdout);
      break;
    }
    std::fputs(utf8.push(tok->token_bytes(next, args.show_special)).c_str(), stdout);
    std::fflush(stdout);
    if (i + 1 == n_predict || g_interrupted) break;  // the last token need not be fed
    auto t1 = std::chrono::steady_clock::now();
    if (auto r = s.eval(std::span<const int32_t>(&next, 1), nullptr, &logits); !r) return fail(cmd, r.error().message);
    if (auto fin = check_finite_logits(logits, vocab, int64_t(history.size()) - 1, args.model.model); !fin) {
      std::fputs("\n", stdout);
      return fail(cmd, fin.error().message);
    }
    decode_s += seconds_since(t1);
    ++decoded;
  }
  std::signal(SIGINT, SIG_DFL);
  std::fputs(utf8.flush().c_str(), stdout);
  std::fputs("\n", stdout);
  if (std::fflush(stdout) != 0 || std::ferror(stdout)) return fail(cmd, "writing the generated text to stdout failed");
  if (g_interrupted) std::fprintf(stderr, "\nrun: interrupted (Ctrl-C): generation stopped after %d tokens\n", generated);

  std::fprintf(stderr, "\nrun: prompt tokens: %zu, prefill: %.3f s (%.1f tok/s)\n", prompt.size(), prefill_s,
               prefill_s > 0 ? double(prompt.size()) / prefill_s : 0.0);
  std::fprintf(stderr, "run: generated tokens: %d%s, decode: %d steps in %.3f s (%.1f tok/s)\n", generated,
               stopped_at_eos ? " (stopped at end-of-sequence)" : "", decoded, decode_s,
               decode_s > 0 ? double(decoded) / decode_s : 0.0);
  std::fprintf(stderr, "run: peak memory (max RSS): %.1f MiB, weights %.1f MiB, sequence state %.2f MiB\n",
               double(peak_rss_bytes()) / (1024.0 * 1024.0), double(m->weight_bytes()) / (1024.0 * 1024.0),
               double(s.state_bytes()) / (1024.0 * 1024.0));
  if (const std::string kc = cpu::kernel_choices(); !kc.empty())
    std::fprintf(stderr, "run: CPU kernel variants chosen: %s\n", kc.c_str());
  if (m->tp() > 1) {
    for (int r = 0; r < m->tp(); ++r) {
      const RankMemory rm = s.rank_memory(r);
      std::fprintf(stderr,
                   "run: rank %d: weights %.2f MiB (replicated %.2f, sharded %.2f, experts %.2f), state %.2f MiB\n", r,
                   double(rm.weights()) / 1048576.0, double(rm.weights_replicated) / 1048576.0,
                   double(rm.weights_sharded) / 1048576.0, double(rm.weights_experts) / 1048576.0,
                   double(rm.state) / 1048576.0);
    }
  }
  // Decode evals fed positions prompt.size() .. prompt.size() + decoded - 1.
  std::vector<std::vector<std::vector<int32_t>>> routes(trace.router.size());
  for (size_t l = 0; l < trace.router.size(); ++l)
    for (int i = 0; i < decoded; ++i) routes[l].push_back(trace.router[l].at(prompt.size() + size_t(i)));
  s.set_trace(nullptr);
  if (!args.routing_out.empty()) {
    const ModelConfig& c = m->config();
    // Every decode token's route is kept (up to 65536 per layer; routing_stats.h version 2).
    placement::RoutingCounter counter(c.n_layer, c.n_expert, c.n_expert_used, 65536);
    for (int l = 0; l < c.n_layer; ++l)
      for (const auto& r : routes[size_t(l)])
        if (auto a = counter.add(l, r); !a) return fail(cmd, "--routing-out: layer " + std::to_string(l) + ": " + a.error().message);
    auto tokens = counter.tokens();
    if (!tokens || *tokens == 0) return fail(cmd, "--routing-out: no decode token was routed (use -n 2 or more)");
    auto w = args.routing_format == "sglang"
                 ? placement::write_sglang_expert_location(args.routing_out, counter.counts())
                 : placement::write_routing_stats(args.routing_out, "decode of " + args.model.model, c.n_expert_used,
                                                  *tokens, counter.counts(), counter.coactivation(), counter.routes());
    if (!w) return fail(cmd, w.error().message);
  }
  if (plan) {
    if (int r = report_plan(cmd, *plan, after_prefill, m->expert_counters(), routes, decoded); r != 0)
      return r;
  }
  std::string summary = m->experts_summary();
  for (size_t a = 0; a < summary.size();) {
    size_t b = summary.find('\n', a);
    if (b == std::string::npos) b = summary.size();
    std::fprintf(stderr, "run: %s\n", summary.substr(a, b - a).c_str());
    a = b + 1;
  }
  return 0;
}

const CommandRegistrar reg{{"run", setup, run}};

}  // namespace
}  // namespace ds4::cli

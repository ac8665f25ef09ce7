// engine/cli/cmd_run.cpp — `ds4-offload run`: tokenize a prompt (optionally in the DeepSeek-V4
// chat format), prefill, then sample and stream up to -n tokens; print prompt tokens, prefill and
// decode tok/s and peak memory. With --plan: routed experts where the plan puts them, and after
// generation the bytes moved per tier per DECODE token (counters snapshot after prefill) next to
// the plan's prediction from routing statistics and the plan's bytes for this run's own routing
// (router trace; exact bookkeeping), with ratios; --plan-report F writes the same as JSON.
#include <cstdio>
#include <fstream>
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
#include "placement/plan_file.h"
#include "placement/routing_counter.h"
#include "placement/routing_stats.h"

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
};
RunArgs args;

CLI::App* setup(CLI::App& app) {
  auto* s = app.add_subcommand("run", "Generate text from a prompt, streaming it; then print speed and memory figures");
  s->add_option("-m,--model", args.model.model, "Model GGUF")->required();
  auto* p = s->add_option("-p,--prompt", args.prompt, "Prompt text");
  auto* f = s->add_option("-f,--file", args.prompt_file, "Read the prompt from this file");
  p->excludes(f);
  f->excludes(p);
  s->add_option("-n,--n-predict", args.n_predict, "Tokens to generate (stops early at end-of-sequence)")->capture_default_str();
  s->add_flag("--chat", args.chat, "Wrap the prompt as one user turn of the DeepSeek-V4 chat format");
  s->add_flag("--think", args.think, "With --chat: thinking mode (the reply opens with <think>)");
  add_seed_option(s, args.sampling.seed, "Sampling seed (0 .. 2^64-1)");
  s->add_option("--temp", args.sampling.temperature, "Temperature (0 = greedy)")->capture_default_str();
  s->add_option("--top-k", args.sampling.top_k, "Top-k (0 = off)")->capture_default_str();
  s->add_option("--top-p", args.sampling.top_p, "Top-p (1 = off)")->capture_default_str();
  s->add_option("--min-p", args.sampling.min_p, "Min-p relative to the best token (0 = off)")->capture_default_str();
  s->add_option("--repeat-penalty", args.sampling.repeat_penalty, "Repetition penalty (1 = off)")->capture_default_str();
  s->add_option("--repeat-last-n", args.sampling.repeat_last_n, "Tokens the penalty looks back (-1 = all)")
      ->capture_default_str();
  s->add_option("--activations", args.model.activations,
                "Matrix-product activations: f32 (exactly decoded weights, FP32 math) or q8 (Q8_1 integer dots)")
      ->capture_default_str();
  s->add_option("-t,--threads", args.model.threads, "CPU threads (0 = all)")->capture_default_str();
  add_parallel_options(s, args.model, /*experts_tier=*/true);
  add_plan_option(s, args.model);
  s->add_option("--plan-report", args.plan_report,
                "With --plan: write measured vs predicted decode bytes per token per tier as JSON to this file");
  s->add_option("--routing-out", args.routing_out,
                "Write the router's choices of the DECODE tokens (prefill excluded) as routing statistics "
                "(ds4-routing-stats v2 with every decode token's route, the format of `calibrate`)");
  s->add_flag("--special", args.show_special, "Also print control tokens (e.g. end-of-sequence) as text");
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
  std::fprintf(stderr, "\n%s: plan %s (rule %s): routed-expert bytes per decode token over %d decode steps\n", cmd,
               args.model.plan.c_str(), pf.rule.c_str(), steps);
  std::fprintf(stderr, "%s:   %-22s %12s %14s %7s %16s %7s\n", cmd, "tier", "measured", "plan (stats)", "ratio",
               "plan (this run)", "ratio");
  for (const Row& r : rows)
    std::fprintf(stderr, "%s:   %-22s %12.1f %14.1f %7.3f %16.1f %7.3f\n", cmd, r.name, r.measured, r.stats,
                 ratio(r.measured, r.stats), r.own, ratio(r.measured, r.own));
  const uint64_t av = c1.act_vram - c0.act_vram, ah = c1.act_host - c0.act_host, ac = c1.act_cpu - c0.act_cpu,
                 an = c1.act_nvme - c0.act_nvme;
  std::fprintf(stderr, "%s:   expert-steps per decode token: vram %.2f, host %.2f, cpu %.2f, nvme %.2f (plan routing: %s)\n",
               cmd, double(av) / n, double(ah) / n, double(ac) / n, double(an) / n, pf.routing.c_str());
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
  std::ofstream out(args.plan_report);
  if (!(out << j.dump(1) << "\n")) return fail(cmd, "--plan-report '" + args.plan_report + "': cannot write");
  return 0;
}

int run() {
  const char* cmd = "run";
  if (args.prompt.empty() && args.prompt_file.empty()) return fail(cmd, "a prompt is required: -p TEXT or -f FILE");
  if (args.n_predict < 0) return fail(cmd, "-n/--n-predict: expected >= 0, found " + std::to_string(args.n_predict));
  if (args.think && !args.chat) return fail(cmd, "--think needs --chat (thinking mode is part of the chat format)");
  if (auto v = validate(args.sampling); !v) return fail(cmd, v.error().message);
  std::string text = args.prompt;
  if (!args.prompt_file.empty()) {
    auto t = read_text_file(args.prompt_file, "-f/--file");
    if (!t) return fail(cmd, t.error().message);
    text = t.value();
    if (text.empty()) return fail(cmd, "-f/--file '" + args.prompt_file + "': expected a prompt, found an empty file");
  }
  if (auto c = check_output_not_input(args.routing_out, "--routing-out", {args.model.model, args.model.plan}); !c)
    return fail(cmd, c.error().message);
  if (!args.plan_report.empty() && args.model.plan.empty()) return fail(cmd, "--plan-report needs --plan");
  // Output paths and counts that would only fail after generation are checked first.
  for (const auto& [out, opt] : {std::pair{args.routing_out, "--routing-out"}, std::pair{args.plan_report, "--plan-report"}})
    if (auto w = check_output_writable(out, opt); !w) return fail(cmd, w.error().message);
  if (!args.routing_out.empty() && args.n_predict < 2)
    return fail(cmd, "--routing-out records decode tokens: expected -n 2 or more, found -n " +
                         std::to_string(args.n_predict));
  if (auto c = check_output_not_input(args.plan_report, "--plan-report", {args.model.model, args.model.plan}); !c)
    return fail(cmd, c.error().message);
  auto model = load_model(args.model, cmd);
  if (!model) return fail(cmd, model.error().message);
  std::shared_ptr<Model> m = model.value();
  const Tokenizer* tok = m->tokenizer();
  if (!tok) return fail(cmd, args.model.model + ": the model has no tokenizer.ggml.* metadata; use `score` with token ids");
  const int64_t vocab = m->config().vocab;
  if (tok->vocab_size() != vocab)
    return fail(cmd, args.model.model + ": tokenizer has " + std::to_string(tok->vocab_size()) +
                         " tokens, expected vocab_size " + std::to_string(vocab));

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
  if (prompt.empty()) return fail(cmd, "the prompt is empty after tokenization (and the model adds no BOS)");
  const int64_t n_ctx = m->config().n_ctx;
  if (int64_t(prompt.size()) + args.n_predict > n_ctx)
    return fail(cmd, "prompt (" + std::to_string(prompt.size()) + " tokens) + -n " + std::to_string(args.n_predict) +
                         " exceeds the model's context_length " + std::to_string(n_ctx));
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
  auto t0 = std::chrono::steady_clock::now();
  if (auto r = s.eval(prompt, nullptr, &logits); !r) return fail(cmd, r.error().message);
  const double prefill_s = seconds_since(t0);
  if (int64_t(logits.size()) != vocab)
    return fail(cmd, "internal: eval returned " + std::to_string(logits.size()) + " logits, expected " + std::to_string(vocab));

  staging::StagingCounters after_prefill;
  if (plan) after_prefill = m->expert_counters();
  Sampler sampler(args.sampling);
  std::vector<int32_t> history = prompt;
  Utf8StreamDecoder utf8;
  int generated = 0, decoded = 0;
  double decode_s = 0;
  bool stopped_at_eos = false;
  for (int i = 0; i < args.n_predict; ++i) {
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
    if (i + 1 == args.n_predict) break;  // the last token need not be fed
    auto t1 = std::chrono::steady_clock::now();
    if (auto r = s.eval(std::span<const int32_t>(&next, 1), nullptr, &logits); !r) return fail(cmd, r.error().message);
    decode_s += seconds_since(t1);
    ++decoded;
  }
  std::fputs(utf8.flush().c_str(), stdout);
  std::fputs("\n", stdout);
  if (std::fflush(stdout) != 0 || std::ferror(stdout)) return fail(cmd, "writing the generated text to stdout failed");

  std::fprintf(stderr, "\nrun: prompt tokens: %zu, prefill: %.3f s (%.1f tok/s)\n", prompt.size(), prefill_s,
               prefill_s > 0 ? double(prompt.size()) / prefill_s : 0.0);
  std::fprintf(stderr, "run: generated tokens: %d%s, decode: %d steps in %.3f s (%.1f tok/s)\n", generated,
               stopped_at_eos ? " (stopped at end-of-sequence)" : "", decoded, decode_s,
               decode_s > 0 ? double(decoded) / decode_s : 0.0);
  std::fprintf(stderr, "run: peak memory (max RSS): %.1f MiB, weights %.1f MiB, sequence state %.2f MiB\n",
               double(peak_rss_bytes()) / (1024.0 * 1024.0), double(m->weight_bytes()) / (1024.0 * 1024.0),
               double(s.state_bytes()) / (1024.0 * 1024.0));
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
    auto w = placement::write_routing_stats(args.routing_out, "decode of " + args.model.model, c.n_expert_used,
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

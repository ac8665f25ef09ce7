// engine/cli/cmd_run.cpp — `ds4-offload run`: tokenize a prompt (optionally in the DeepSeek-V4
// chat format), prefill, then sample and stream up to -n tokens; print prompt tokens, prefill and
// decode tok/s and peak memory.
#include <cstdio>
#include <string>
#include <vector>

#include "engine/chat_format.h"
#include "engine/cli/cli_common.h"
#include "engine/cli/command.h"
#include "engine/model_config.h"
#include "engine/sampler.h"
#include "engine/tokenizer.h"
#include "engine/utf8_stream.h"

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
  s->add_option("--seed", args.sampling.seed, "Sampling seed (0 .. 2^64-1)")
      ->check(CLI::Validator(
          [](std::string& v) {
            return v.find_first_not_of("0123456789") == std::string::npos && !v.empty()
                       ? std::string()
                       : "expected a non-negative integer, found '" + v + "'";
          },
          "UINT64"))
      ->capture_default_str();
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
  s->add_flag("--special", args.show_special, "Also print control tokens (e.g. end-of-sequence) as text");
  return s;
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
  std::vector<float> logits;
  auto t0 = std::chrono::steady_clock::now();
  if (auto r = s.eval(prompt, nullptr, &logits); !r) return fail(cmd, r.error().message);
  const double prefill_s = seconds_since(t0);
  if (int64_t(logits.size()) != vocab)
    return fail(cmd, "internal: eval returned " + std::to_string(logits.size()) + " logits, expected " + std::to_string(vocab));

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

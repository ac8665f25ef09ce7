// engine/cli/cmd_chat.cpp — `ds4-offload chat -m MODEL [--system TEXT] [--think]` (also reached as
// `run -cnv`): interactive multi-turn chat in the DeepSeek-V4 chat format (engine/chat_format.h).
// One line of standard input is one user turn. The sequence state is kept between turns: each turn
// feeds only its new tokens ("<｜User｜>" + text + "<｜Assistant｜>" + "</think>" or "<think>"), and
// the reply's end-of-sequence token is fed too, so the state always holds the whole conversation.
// (In thinking mode earlier replies keep their reasoning in the state; DeepSeek's renderer would
// drop it when re-rendering the whole conversation. /reset starts afresh.)
// Commands: /help, /reset (clear the conversation, keep the system prompt), /exit (or end of
// input); any other one-word /name is refused as unknown, not sent; "//text" sends "/text".
// Ctrl-C stops the current reply (the turn is closed with end-of-sequence) and keeps the session;
// Ctrl-C while waiting for input ends the program.
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <iostream>
#include <limits>
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

struct ChatArgs {
  ModelArgs model;
  std::string system;
  bool think = false;
  int n_predict = -1;  // per reply; -1 = until end-of-sequence or the context is full
  SamplerParams sampling;
  bool random_seed = false;
  bool show_special = false;
  bool ignore_eos = false;
};
ChatArgs args;

volatile std::sig_atomic_t g_stop = 0;
void on_sigint(int) { g_stop = 1; }

/// SIGINT handler for the duration of one reply (no SA_RESTART: nothing blocks meanwhile).
struct ReplyInterrupt {
  struct sigaction old {};
  ReplyInterrupt() {
    g_stop = 0;
    struct sigaction sa {};
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old);
  }
  ~ReplyInterrupt() { sigaction(SIGINT, &old, nullptr); }
};

CLI::App* setup(CLI::App& app) {
  auto* s = app.add_subcommand("chat",
                               "Interactive multi-turn chat (one line of input per user turn; /reset, /exit; Ctrl-C "
                               "stops a reply). Also `run -cnv`");
  add_model_options(s, args.model, ModelOptionSet{.model_required = true, .experts_tier = true, .plan = true, .ctx_size = true});
  s->add_option("--system,-p,--prompt", args.system,
                "System prompt (as llama.cpp's conversation mode, -p is the system prompt here)");
  s->add_flag("--think", args.think, "Thinking mode (each reply opens with <think>)");
  s->add_option("-n,--n-predict", args.n_predict, "Most tokens per reply (-1 = until end-of-sequence or a full context)")
      ->capture_default_str();
  add_sampling_options(s, args.sampling, &args.random_seed);
  s->add_flag("--special", args.show_special, "Also print control tokens (e.g. end-of-sequence) as text");
  s->add_flag("--ignore-eos", args.ignore_eos, "Never end a reply at end-of-sequence (only -n, the context, Ctrl-C)");
  return s;
}

int run() {
  const char* cmd = "chat";
  if (args.n_predict < -1)
    return fail(cmd, "-n/--n-predict: expected >= 1 or -1 (until end-of-sequence), found " + std::to_string(args.n_predict));
  if (args.n_predict == 0) return fail(cmd, "-n/--n-predict: expected >= 1 or -1 (a reply needs a token), found 0");
  if (auto v = validate(args.sampling); !v) return fail(cmd, v.error().message);
  auto loaded = load_text_model(args.model, cmd);
  if (!loaded) return fail(cmd, loaded.error().message);
  std::shared_ptr<Model> m = loaded.value().model;
  const Tokenizer* tok = loaded.value().tokenizer;
  if (tok->eos_id() < 0) return fail(cmd, args.model.model + ": the tokenizer has no end-of-sequence token to end a reply");
  for (std::string_view marker : {chat_tokens::kUser, chat_tokens::kAssistant, chat_tokens::kThinkEnd})
    if (tok->find_token(marker) < 0)
      std::fprintf(stderr, "chat: warning: the vocabulary has no '%.*s' token; chat markers are tokenized as plain text\n",
                   int(marker.size()), marker.data());
  auto ctx = effective_ctx(args.model, m->config().n_ctx, m->config().n_ctx, cmd);
  if (!ctx) return fail(cmd, ctx.error().message);
  const int64_t n_ctx = *ctx, vocab = m->config().vocab;
  resolve_seed(args.sampling.seed, args.random_seed, cmd);
  auto session = Session::create(m);
  if (!session) return fail(cmd, session.error().message);
  Session& s = *session.value();
  Sampler sampler(args.sampling);
  const bool tty = ::isatty(0) != 0;
  std::fprintf(stderr, "chat: %s mode, context %lld tokens; one line per turn, /reset clears, /exit ends%s\n",
               args.think ? "thinking" : "chat", (long long)n_ctx, tty ? ", Ctrl-C stops a reply" : "");

  std::vector<int32_t> history;  // every token fed (for the repetition penalty)
  std::vector<float> logits;
  int turns = 0;
  std::string line;
  while (true) {
    if (tty) {
      std::fputs("> ", stdout);
      std::fflush(stdout);
    }
    if (!std::getline(std::cin, line)) break;
    if (line == "/exit" || line == "/quit") break;
    if (line == "/reset") {
      s.reset();
      history.clear();
      turns = 0;
      std::fprintf(stderr, "chat: conversation cleared\n");
      continue;
    }
    // Any other one-word "/name" line is a command, never sent to the model; "//..." sends "/...".
    if (line == "/help" || line == "/?") {
      std::fprintf(stderr, "chat: commands: /help, /reset (clear the conversation), /exit or /quit (end); "
                           "a line starting with // sends the text with one / removed\n");
      continue;
    }
    if (line.size() > 1 && line[0] == '/' && line[1] != '/' && line.find_first_of(" \t") == std::string::npos) {
      std::fprintf(stderr, "chat: unknown command '%s' (not sent to the model; /help lists the commands)\n", line.c_str());
      continue;
    }
    if (line.rfind("//", 0) == 0) line.erase(0, 1);
    if (line.empty()) continue;
    // The new tokens of this turn: the first turn is rendered whole (BOS, system prompt), later
    // turns append to the state.
    std::string text;
    if (turns == 0) {
      std::vector<ChatMessage> msgs;
      if (!args.system.empty()) msgs.push_back({"system", args.system, ""});
      msgs.push_back({"user", line, ""});
      ChatOptions co;
      co.mode = args.think ? ThinkingMode::Thinking : ThinkingMode::Chat;
      co.add_bos = true;
      auto r = render_chat(msgs, co);
      if (!r) return fail(cmd, r.error().message);
      text = r.value();
    } else {
      text = std::string(chat_tokens::kUser) + line + std::string(chat_tokens::kAssistant) +
             std::string(args.think ? chat_tokens::kThinkStart : chat_tokens::kThinkEnd);
    }
    std::vector<int32_t> toks = tok->encode(text, /*add_bos=*/false, /*parse_special=*/true);
    if (s.position() + int64_t(toks.size()) + 1 >= n_ctx) {
      std::fprintf(stderr, "chat: the context of %lld tokens is full (%lld used, this turn needs %zu); /reset to "
                           "start again\n", (long long)n_ctx, (long long)s.position(), toks.size() + 1);
      continue;
    }
    ReplyInterrupt guard;  // from here to the end of the reply, Ctrl-C stops the reply only
    if (auto r = s.eval(toks, nullptr, &logits); !r) return fail(cmd, r.error().message);
    if (auto f = check_finite_logits(logits, vocab, s.position() - 1, args.model.model); !f) return fail(cmd, f.error().message);
    history.insert(history.end(), toks.begin(), toks.end());
    ++turns;
    // The reply: sampled until end-of-sequence, -n, a full context or Ctrl-C. One slot is kept
    // for the end-of-sequence token that closes the turn.
    Utf8StreamDecoder utf8;
    int n = 0;
    bool ended = false;
    while (!g_stop) {
      if (args.ignore_eos) logits[size_t(tok->eos_id())] = -std::numeric_limits<float>::infinity();
      const int32_t next = sampler.sample(logits, history);
      ++n;
      if (next == tok->eos_id()) {
        ended = true;
        if (args.show_special) std::fputs(utf8.push(tok->token_bytes(next, true)).c_str(), stdout);
      } else {
        std::fputs(utf8.push(tok->token_bytes(next, args.show_special)).c_str(), stdout);
        std::fflush(stdout);
      }
      // Feed it (an end-of-sequence too: it closes the assistant turn in the state).
      const bool last = ended || (args.n_predict > 0 && n >= args.n_predict) || s.position() + 2 >= n_ctx;
      const int32_t feed = last && !ended ? tok->eos_id() : next;
      if (!ended && last) {
        // -n or the context ended the reply: the sampled token is kept, then the turn is closed.
        if (auto r = s.eval(std::span<const int32_t>(&next, 1), nullptr, &logits); !r) return fail(cmd, r.error().message);
        history.push_back(next);
      }
      if (auto r = s.eval(std::span<const int32_t>(&feed, 1), nullptr, &logits); !r) return fail(cmd, r.error().message);
      history.push_back(feed);
      if (last) break;
      if (auto f = check_finite_logits(logits, vocab, s.position() - 1, args.model.model); !f) {
        std::fputs("\n", stdout);
        return fail(cmd, f.error().message);
      }
    }
    if (g_stop) {
      // Ctrl-C: the turn is closed with end-of-sequence; the session goes on.
      const int32_t eos = tok->eos_id();
      if (auto r = s.eval(std::span<const int32_t>(&eos, 1), nullptr, &logits); !r) return fail(cmd, r.error().message);
      history.push_back(eos);
      std::fprintf(stderr, "\nchat: reply stopped (Ctrl-C)\n");
    }
    std::fputs(utf8.flush().c_str(), stdout);
    std::fputs("\n", stdout);
    if (auto w = check_stdout("the reply"); !w) return fail(cmd, w.error().message);
    std::fprintf(stderr, "chat: turn %d: %d reply tokens, context %lld / %lld tokens\n", turns, n,
                 (long long)s.position(), (long long)n_ctx);
  }
  std::fprintf(stderr, "chat: %d turns, peak memory (max RSS) %.1f MiB\n", turns,
               double(peak_rss_bytes()) / (1024.0 * 1024.0));
  return 0;
}

const CommandRegistrar reg{{"chat", setup, run}};

}  // namespace
}  // namespace ds4::cli

// engine/cli/cmd_score.cpp — `ds4-offload score -m MODEL --token-ids FILE --logits-out FILE [-c N]
// [--plan PLAN]`:
// teacher-forced logits for every position of a token-id sequence, as little-endian float32
// [positions x vocab] (row-major). Used by the golden tests.
#include <bit>
#include <cstdio>
#include <vector>

#include "engine/cli/cli_common.h"
#include "engine/cli/command.h"
#include "engine/model_config.h"

namespace ds4::cli {
namespace {

struct ScoreArgs {
  ModelArgs model;
  std::string ids_file;
  std::string logits_out;
  int chunk = 0;  // 0 = whole sequence in one eval
};
ScoreArgs args;

CLI::App* setup(CLI::App& app) {
  auto* s = app.add_subcommand("score", "Teacher-forced logits of a token-id sequence, written as float32 [positions x vocab]");
  add_model_options(s, args.model,
                    ModelOptionSet{.model_required = true, .experts_tier = true, .plan = true, .ctx_size = true,
                                   .ctx_help = "Context length in tokens (0 = the model's context_length): the most "
                                               "positions scored; a longer sequence is refused"});
  s->add_option("--token-ids", args.ids_file, "File of whitespace-separated token ids (- = standard input; at most 16 MiB)")->required();
  s->add_option("--logits-out", args.logits_out, "Output file: little-endian float32 [positions x vocab] (- = standard output)")->required();
  s->add_option("--chunk", args.chunk, "Feed the sequence in chunks of this many tokens (0 = one call)")
      ->capture_default_str();
  return s;
}

int run() {
  static_assert(std::endian::native == std::endian::little, "score writes the host's float32 bytes");
  const char* cmd = "score";
  if (args.chunk < 0) return fail(cmd, "--chunk: expected >= 0, found " + std::to_string(args.chunk));
  if (auto c = check_output_not_input(args.logits_out, "--logits-out", {args.model.model, args.ids_file}); !c)
    return fail(cmd, c.error().message);
  auto text = read_text_file(args.ids_file, "--token-ids", kMaxPromptBytes, /*allow_stdin=*/true);
  if (!text) return fail(cmd, text.error().message);
  auto model = load_model(args.model, cmd);
  if (!model) return fail(cmd, model.error().message);
  std::shared_ptr<Model> m = model.value();
  const int64_t vocab = m->config().vocab;
  auto ids = parse_token_ids(text.value(), args.ids_file, vocab);
  if (!ids) return fail(cmd, ids.error().message);
  const auto& t = ids.value();
  const int64_t n_ctx = args.model.ctx_size > 0 ? args.model.ctx_size : m->config().n_ctx;
  if (int64_t(t.size()) > n_ctx)
    return fail(cmd, args.ids_file + ": " + std::to_string(t.size()) + " tokens exceed " +
                         (args.model.ctx_size > 0 ? "the context of " + std::to_string(n_ctx) + " tokens (-c/--ctx-size)"
                                                  : "the model's context_length " + std::to_string(n_ctx)));
  AtomicOutputFile out(args.logits_out, "--logits-out");
  if (auto o = out.open(); !o) return fail(cmd, o.error().message);
  SessionOptions so;
  so.capacity = args.model.ctx_size;  // 0: the default (context_length capped)
  auto session = Session::create(m, so);
  if (!session) return fail(cmd, session.error().message);
  const size_t chunk = args.chunk > 0 ? size_t(args.chunk) : t.size();
  std::vector<float> logits;
  auto t0 = std::chrono::steady_clock::now();
  for (size_t i = 0; i < t.size(); i += chunk) {
    const size_t n = std::min(chunk, t.size() - i);
    if (auto r = session.value()->eval(std::span<const int32_t>(t.data() + i, n), &logits, nullptr); !r)
      return fail(cmd, r.error().message);
    if (logits.size() != n * size_t(vocab))
      return fail(cmd, "internal: eval returned " + std::to_string(logits.size()) + " logits, expected " +
                           std::to_string(n * size_t(vocab)));
    if (auto f = check_finite_logits(logits, vocab, int64_t(i), args.model.model); !f) return fail(cmd, f.error().message);
    if (auto w = out.write(logits.data(), logits.size() * sizeof(float)); !w) return fail(cmd, w.error().message);
  }
  const double secs = seconds_since(t0);
  if (auto c = out.commit(); !c) return fail(cmd, c.error().message);
  std::fprintf(stderr, "score: %zu positions x %lld vocab -> %s (%.3f s, %.1f tok/s), peak memory %.1f MiB\n",
               t.size(), (long long)vocab, args.logits_out.c_str(), secs, secs > 0 ? double(t.size()) / secs : 0.0,
               double(peak_rss_bytes()) / (1024.0 * 1024.0));
  return 0;
}

const CommandRegistrar reg{{"score", setup, run}};

}  // namespace
}  // namespace ds4::cli

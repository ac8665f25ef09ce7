// engine/cli/cmd_perplexity.cpp — `ds4-offload perplexity -m MODEL -f TEXT [-c N]`: perplexity
// and mean negative log-likelihood of a text, as users compare quantizations.
//
// Method: the text is tokenized (no BOS) and cut into consecutive windows of ctx - 1 tokens (ctx
// when the model adds no BOS); each window is evaluated from a fresh sequence state with BOS in
// front, and every text token of the window is scored given the tokens before it in the window.
// NLL = -log softmax(logits)[next] in double; PPL = exp(mean NLL) over all scored tokens.
#include <cmath>
#include <cstdio>
#include <vector>

#include "engine/cli/cli_common.h"
#include "engine/cli/command.h"
#include "engine/model_config.h"
#include "engine/tokenizer.h"

namespace ds4::cli {
namespace {

struct PerplexityArgs {
  ModelArgs model;
  std::string file;  // -c/--ctx-size (model.ctx_size) is the window: 0 = min(512, context_length)
};
PerplexityArgs args;

CLI::App* setup(CLI::App& app) {
  auto* s = app.add_subcommand("perplexity", "Perplexity and mean negative log-likelihood of a text file");
  add_model_options(s, args.model,
                    ModelOptionSet{.model_required = true, .experts_tier = true, .plan = true, .ctx_size = true,
                                   .ctx_help = "Window length in tokens (0 = min(512, context_length))"});
  s->add_option("-f,--file", args.file, "Text file (- = standard input)")->required();
  return s;
}

int run() {
  const char* cmd = "perplexity";
  const int64_t window = args.model.ctx_size;
  if (window < 0 || window == 1) return fail(cmd, "-c/--ctx-size: expected 0 (auto) or >= 2, found " + std::to_string(window));
  auto text = read_text_file(args.file, "-f/--file", kMaxCorpusBytes, /*allow_stdin=*/true);
  if (!text) return fail(cmd, text.error().message);
  // Refused before the model is loaded (seconds on a big model): there is nothing to score.
  if (text.value().empty())
    return fail(cmd, "-f/--file '" + args.file + "': expected text to score, found an empty file");
  // The window is at most the model's context_length (preflight_model checks -c from the header).
  auto loaded = load_text_model(args.model, cmd);
  if (!loaded) return fail(cmd, loaded.error().message);
  std::shared_ptr<Model> m = loaded.value().model;
  const Tokenizer* tok = loaded.value().tokenizer;
  const int64_t vocab = m->config().vocab, n_ctx = m->config().n_ctx;
  const int64_t ctx = window > 0 ? window : std::min<int64_t>(512, n_ctx);
  if (ctx > n_ctx)
    return fail(cmd, "-c/--ctx-size " + std::to_string(ctx) + " exceeds the model's context_length " + std::to_string(n_ctx));
  const bool bos = tok->bos_id() >= 0 && tok->add_bos();
  const int64_t span_len = bos ? ctx - 1 : ctx;
  std::vector<int32_t> toks = tok->encode(text.value(), false, /*parse_special=*/false);
  if (int64_t(toks.size()) < (bos ? 1 : 2))
    return fail(cmd, args.file + ": too short to score (" + std::to_string(toks.size()) + " tokens)");
  std::fprintf(stderr, "perplexity: %zu tokens, windows of %lld (%s)\n", toks.size(), (long long)ctx,
               bos ? "BOS + text" : "text only");
  auto session = Session::create(m);
  if (!session) return fail(cmd, session.error().message);
  double nll_sum = 0;
  int64_t scored = 0;
  std::vector<float> logits;
  auto t0 = std::chrono::steady_clock::now();
  int chunk_no = 0;
  for (size_t start = 0; start < toks.size(); start += size_t(span_len)) {
    const size_t n = std::min(size_t(span_len), toks.size() - start);
    std::vector<int32_t> win;
    if (bos) win.push_back(tok->bos_id());
    win.insert(win.end(), toks.begin() + ptrdiff_t(start), toks.begin() + ptrdiff_t(start + n));
    if (win.size() < 2) break;
    session.value()->reset();
    if (auto r = session.value()->eval(win, &logits, nullptr); !r) return fail(cmd, r.error().message);
    if (auto f = check_finite_logits(logits, vocab, 0, args.model.model); !f)
      return fail(cmd, "window " + std::to_string(chunk_no + 1) + ": " + f.error().message);
    for (size_t p = 0; p + 1 < win.size(); ++p) {
      const float* row = logits.data() + p * size_t(vocab);
      double mx = row[0];
      for (int64_t v = 1; v < vocab; ++v) mx = std::max(mx, double(row[v]));
      double se = 0;
      for (int64_t v = 0; v < vocab; ++v) se += std::exp(double(row[v]) - mx);
      nll_sum += -(double(row[win[p + 1]]) - mx - std::log(se));
      ++scored;
    }
    ++chunk_no;
    std::fprintf(stderr, "perplexity: window %d: running PPL %.4f\n", chunk_no, std::exp(nll_sum / double(scored)));
  }
  const double secs = seconds_since(t0);
  const double mean = nll_sum / double(scored);
  std::printf("perplexity: %.6f  mean NLL: %.6f nats  (%lld tokens scored in %d windows, activations %s)\n",
              std::exp(mean), mean, (long long)scored, chunk_no, activations_name(m->options().activations));
  if (auto w = check_stdout("the perplexity result"); !w) return fail(cmd, w.error().message);
  std::fprintf(stderr, "perplexity: %.3f s (%.1f tok/s), peak memory %.1f MiB\n", secs,
               secs > 0 ? double(scored + chunk_no) / secs : 0.0, double(peak_rss_bytes()) / (1024.0 * 1024.0));
  return 0;
}

const CommandRegistrar reg{{"perplexity", setup, run}};

}  // namespace
}  // namespace ds4::cli

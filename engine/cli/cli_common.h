// engine/cli/cli_common.h — helpers shared by the run / score / perplexity / make-tiny subcommands:
// input files, token-id lists, --activations, model loading with the effective settings printed,
// timing and peak memory.
#pragma once

#include <chrono>
#include <functional>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "ds4/file_io.h"
#include "ds4/result.h"
#include "engine/sampler.h"
#include "engine/session.h"
#include "engine/tokenizer.h"

namespace ds4::cli {

/// Reads a whole input file (binary) of at most `max_bytes` (ds4/file_io.h read_file_bounded: a
/// regular file, or "-" for standard input when `allow_stdin`). Errors: "<what> '<path>': file not
/// found", "... expected a regular file, found a FIFO (named pipe)", "... more than the limit of 64 MiB".
Result<std::string> read_text_file(const std::string& path, const std::string& what,
                                   uint64_t max_bytes = kMaxPromptBytes, bool allow_stdin = false);

/// Parses whitespace-separated token ids. Errors name `source`, the 1-based token index, its byte
/// offset in `text` and the text found (at most 40 bytes, non-printable bytes such as NUL written
/// \xNN): a non-integer, a negative id, an id >= `vocab`, or no ids at all.
Result<std::vector<int32_t>> parse_token_ids(const std::string& text, const std::string& source, int64_t vocab);

/// Parses --activations: "f32", "q8", "fp8" or "auto" (auto resolves to q8; see resolve_activations).
Result<Activations> parse_activations(const std::string& s);
/// Resolves --activations for `command`. "auto" (the default) gives f32 for score, perplexity and
/// calibrate (their output is a fidelity figure compared with reference logits or routing counts,
/// so the exactly decoded weights are kept) and q8 for run, chat, serve and bench (measured in
/// bench/README.md: q8 decodes 2.4-3.8x faster than f32 on the make-tiny models with 2 threads,
/// and its mean |dlogprob| against the reference, 0.113, is below llama.cpp's own 0.125).
/// `why` (when not null) gets a short reason for the one-line stderr note. Errors: as parse_activations.
Result<Activations> resolve_activations(const std::string& s, const char* command, std::string* why);
/// "f32" / "q8".
const char* activations_name(Activations a);

/// Settings common to the model-running subcommands.
struct ModelArgs {
  std::string model;
  std::string activations = "auto"; // auto: q8 to generate, f32 to score (resolve_activations)
  int threads = 0;                  // 0 = all hardware threads
  int tp = 1;                       // tensor-parallel ranks (1, 2, 4, 8)
  std::string experts_tier;         // "" (GGUF mapping), resident, host, nvme
  std::string plan;                 // placement plan file (ModelOptions::expert_plan); "" = none
  int64_t ctx_size = 0;             // -c/--ctx-size: tokens of context (0 = the model's context_length)
  std::string n_gpu_layers;         // -ngl as given (llama.cpp habit; answered with a note, not used)
  std::string backend = "auto";     // compute backend (ModelOptions::backend): cpu, cuda or auto
  std::string cuda_graphs = "on";   // --cuda-graphs on|off (ModelOptions::cuda_graphs)
};

/// Which shared model options a subcommand declares (add_model_options).
struct ModelOptionSet {
  bool model_required = true;  // -m/--model is required (bench --probe runs without one)
  bool experts_tier = true;    // --experts-tier
  bool plan = false;           // --plan
  bool ctx_size = false;       // -c/--ctx-size (alias --ctx)
  /// Help of -c/--ctx-size where the command gives it its own meaning (perplexity's window,
  /// serve's per-slot context); nullptr = the generation commands' text.
  const char* ctx_help = nullptr;
};

/// The ONE declaration of the options the model-running subcommands share, bound to `a`:
/// -m/--model, -t/--threads, --activations, --tp, --experts-tier, --plan, -c/--ctx-size (llama.cpp's
/// name; --ctx is accepted as an alias, the name plan, perplexity and serve had before) and
/// -ngl/--n-gpu-layers (accepted for llama.cpp users; load_model answers it with what this
/// runtime does instead). Help texts and defaults are the same in every subcommand.
void add_model_options(CLI::App* s, ModelArgs& a, const ModelOptionSet& which);

/// CLI11 check of an option whose value names something (a file, a tier): an empty value
/// (`--plan "$UNSET"`) is refused with "expected `expected`, found an empty string" instead of
/// being read as the option left out (which silently ran without the plan, or `plan --hw ""`
/// profiled this machine).
CLI::Validator non_empty(const std::string& expected);

/// The context length a command uses: -c/--ctx-size when given (error above the model's
/// context_length), else the model's context_length capped at `default_cap` tokens (memory per
/// token grows with context). Prints the effective value and its source (stderr).
Result<int64_t> effective_ctx(const ModelArgs& a, int64_t model_ctx, int64_t default_cap, const char* command);

/// Error when `output` (given with option `option`) names the same file as one of `inputs`:
/// writing it would destroy an input, and a model is memory-mapped while we write. Outputs that do
/// not exist yet, and empty paths, are fine.
Result<void> check_output_not_input(const std::string& output, const char* option,
                                    const std::vector<std::string>& inputs);

/// Error unless `path` (given with option `option`) can be created or overwritten: not a
/// directory, its folder exists, and both are writable. Run before any long work so that a bad
/// output path fails first, with nothing written. Empty paths are fine (no output asked for).
Result<void> check_output_writable(const std::string& path, const char* option);

/// check_output_writable, and also an existing path that is not a regular file (/dev/null, a FIFO,
/// a device) is refused: a GGUF is written under a temporary name, extended to its size and
/// renamed into place, which only a regular file allows. Run before any work.
Result<void> check_gguf_output(const std::string& path, const char* option);

/// Adds `--seed` bound to `seed` with `help`: a decimal integer in [0, 2^64-1]; a sign, other text
/// or a larger value is refused with "expected ..., found '...'" (CLI11 alone would wrap -1 and
/// saturate large values silently). With `allow_random`, "-1" (llama.cpp's "random seed") is
/// accepted and sets `*random` (resolve_seed then draws and prints one).
CLI::Option* add_seed_option(CLI::App* s, uint64_t& seed, const std::string& help, bool* random = nullptr);

/// Adds the sampling options shared by `run` and `chat` (--temp, --top-k, --top-p, --min-p,
/// --repeat-penalty, --repeat-last-n, --seed with -1 = random) bound to `p` and `*random_seed`.
void add_sampling_options(CLI::App* s, SamplerParams& p, bool* random_seed);

/// With `random` set, draws a seed from std::random_device into `seed`; prints
/// "<command>: seed: N (random)" so the run can be repeated with --seed N.
void resolve_seed(uint64_t& seed, bool random, const char* command);

/// Error unless `threads` (-t/--threads) is 0 (all) to kMaxThreads (1024, each is an OS thread):
/// "-t/--threads: expected 0 (all) to 1024, found N". Above the hardware thread count (but within
/// the cap) it is accepted; preflight_model prints the one warning for that.
Result<void> check_threads(int threads);

/// What a subcommand needs of its model besides loading, checked by preflight_model before the
/// weights are mapped.
struct ModelNeeds {
  bool tokenizer = false;  // text in or out (run, chat, perplexity, serve, calibrate): a tokenizer
  int64_t ctx = 0;         // a context length asked by an option other than -c/--ctx-size
                           // (perplexity's window, serve's --ctx); 0 = none
  const char* ctx_option = "-c/--ctx-size";  // that option's name, for the message
};

/// The checks of `a` and `need` that do not need the weights, run by load_model before the model
/// is mapped (a big model takes seconds to load, a bad flag must not wait for it): --activations,
/// -t/--threads (check_threads; above the hardware thread count one warning per process), --backend (cpu,
/// cuda or auto; cuda needs a device), the model path (a regular file or a checkpoint folder; a
/// lone shard of a split safetensors set refused), --plan present; then the model's header only
/// (read_model_metadata: a GGUF's header or a checkpoint's config.json and tokenizer.json):
/// -c/--ctx-size and `need.ctx` at most its context_length, and with `need.tokenizer` tokenizer
/// metadata present and as long as vocab_size. Errors name the option or file, what was expected
/// and what was found.
Result<void> preflight_model(const ModelArgs& a, const char* command, const ModelNeeds& need = {});

/// Loads `a.model` with the parsed options, printing (to stderr) the file, load time and the
/// default and effective --activations. Errors: preflight_model's (before anything is mapped),
/// then every load error of Model::load.
Result<std::shared_ptr<Model>> load_model(const ModelArgs& a, const char* command, const ModelNeeds& need = {});

/// The model's tokenizer, checked for text use (run, chat, perplexity, inspect --validate). Errors:
/// "<path>: the model has no tokenizer.ggml.* metadata ..." and a token count that differs from
/// the model's vocab_size.
Result<const Tokenizer*> text_tokenizer(const Model& m, const std::string& path);

/// A loaded model with the tokenizer text commands need (`run`, `chat`, `perplexity`):
/// load_model (with `need.tokenizer` set, so a model without one is refused before loading) then
/// text_tokenizer; the first error of either.
struct TextModel {
  std::shared_ptr<Model> model;
  const Tokenizer* tokenizer = nullptr;  // owned by `model`
};
Result<TextModel> load_text_model(const ModelArgs& a, const char* command, ModelNeeds need = {});

/// Error unless every value of `logits` (rows of the model's vocabulary, the first at position
/// `pos0`) is finite. The message names the position and points at `inspect --validate`: a NaN or
/// Inf logit means broken weights or metadata, and sampling from it would print garbage.
Result<void> check_finite_logits(std::span<const float> logits, int64_t vocab, int64_t pos0,
                                 const std::string& model_path);

/// Whether the environment has DS4_PROGRESS=1 (progress lines forced, for tests and logs: see Progress).
bool progress_forced();

/// Progress of work that takes seconds (model load, make-tiny, validate, calibrate), on stderr:
/// nothing for the first second; then, on a terminal, one line rewritten in place every 0.5 s
/// ("<label>: <status()> (3.1 s)"), elsewhere one line every 5 s; once shown, a last line with the
/// finished status when the work ends. With DS4_PROGRESS=1 (progress_forced()) a new line at once
/// and every 10 ms, terminal or not. A background thread calls `status` (which must be
/// thread-safe: read atomics); the destructor stops it and ends the line. Never writes stdout.
class Progress {
 public:
  Progress(std::string label, std::function<std::string()> status);
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;
  struct State;  ///< the ticker thread's state (cli_common.cpp)

 private:
  std::unique_ptr<State> s_;
};

/// Peak resident set size of this process in bytes (getrusage ru_maxrss).
uint64_t peak_rss_bytes();

/// Seconds since `t0` on the steady clock.
double seconds_since(std::chrono::steady_clock::time_point t0);

/// Prints "ds4-offload <command>: error: <message>" to stderr and returns exit code 1.
int fail(const char* command, const std::string& message);

}  // namespace ds4::cli

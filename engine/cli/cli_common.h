// engine/cli/cli_common.h — helpers shared by the run / score / perplexity / make-tiny subcommands:
// input files, token-id lists, --activations, model loading with the effective settings printed,
// timing and peak memory.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "ds4/result.h"
#include "engine/session.h"

namespace ds4::cli {

/// Reads a whole file (binary). Error: "<what> '<path>': cannot open (...)".
Result<std::string> read_text_file(const std::string& path, const std::string& what);

/// Parses whitespace-separated token ids. Errors name `source`, the 1-based token index and the
/// text found: a non-integer, a negative id, an id >= `vocab`, or no ids at all.
Result<std::vector<int32_t>> parse_token_ids(const std::string& text, const std::string& source, int64_t vocab);

/// Parses --activations: "f32" or "q8".
Result<Activations> parse_activations(const std::string& s);
/// "f32" / "q8".
const char* activations_name(Activations a);

/// Settings common to the model-running subcommands.
struct ModelArgs {
  std::string model;
  std::string activations = "f32";  // default printed in --help and on every run
  int threads = 0;                  // 0 = all hardware threads
  int tp = 1;                       // tensor-parallel ranks (1, 2, 4, 8)
  std::string experts_tier;         // "" (GGUF mapping), resident, host, nvme
  std::string plan;                 // placement plan file (ModelOptions::expert_plan); "" = none
  std::string backend = "auto";     // compute backend (ModelOptions::backend): cpu or auto
};

/// Error when `output` (given with option `option`) names the same file as one of `inputs`:
/// writing it would destroy an input, and a model is memory-mapped while we write. Outputs that do
/// not exist yet, and empty paths, are fine.
Result<void> check_output_not_input(const std::string& output, const char* option,
                                    const std::vector<std::string>& inputs);

/// Error unless `path` (given with option `option`) can be created or overwritten: not a
/// directory, its folder exists, and both are writable. Run before any long work so that a bad
/// output path fails first, with nothing written. Empty paths are fine (no output asked for).
Result<void> check_output_writable(const std::string& path, const char* option);

/// Adds --tp, --backend (and, with `experts_tier`, --experts-tier) bound to `a` to subcommand `s`.
void add_parallel_options(CLI::App* s, ModelArgs& a, bool experts_tier);

/// Adds --plan FILE bound to `a.plan` to subcommand `s`: routed experts where a `plan --json`
/// file puts them (ModelOptions::expert_plan).
void add_plan_option(CLI::App* s, ModelArgs& a);

/// Adds `--seed` bound to `seed` with `help`: a decimal integer in [0, 2^64-1]; a sign, other text
/// or a larger value is refused with "expected ..., found '...'" (CLI11 alone would wrap -1 and
/// saturate large values silently).
CLI::Option* add_seed_option(CLI::App* s, uint64_t& seed, const std::string& help);

/// Loads `a.model` with the parsed options, printing (to stderr) the file, load time and the
/// default and effective --activations. Errors: missing file, bad --activations or threads, and
/// every load error of Model::load.
Result<std::shared_ptr<Model>> load_model(const ModelArgs& a, const char* command);

/// Peak resident set size of this process in bytes (getrusage ru_maxrss).
uint64_t peak_rss_bytes();

/// Seconds since `t0` on the steady clock.
double seconds_since(std::chrono::steady_clock::time_point t0);

/// Prints "ds4-offload <command>: error: <message>" to stderr and returns exit code 1.
int fail(const char* command, const std::string& message);

}  // namespace ds4::cli

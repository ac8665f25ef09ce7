// engine/prompt_runner.h — the calibration pass shared by `calibrate` (routing statistics) and
// `convert --to nvfp4 --prompts` (NVFP4 input_scale): prompts one per line, each tokenized and
// evaluated from a fresh sequence state in windows, with a ForwardTrace per window.
// (Token-id prompts, one whitespace-separated list per line, serve a checkpoint without a tokenizer.)
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "ds4/result.h"
#include "engine/session.h"
#include "engine/tokenizer.h"

namespace ds4 {

/// The prompts of a prompt file: every line that is not empty or all blanks/tabs, in file order,
/// a trailing '\r' removed (a file without newlines is one prompt).
std::vector<std::string> split_prompt_lines(const std::string& text);

/// How run_prompts walks the prompts.
struct PromptRunOptions {
  int64_t window = 4096;  // tokens per window (a longer prompt continues in a fresh window), >= 1
  int64_t chunk = 512;    // tokens per Session::eval call, >= 1
  // Optional progress counters, updated as prompts and tokens are done (a progress line reads them).
  std::atomic<size_t>* done_prompts = nullptr;
  std::atomic<int64_t>* done_tokens = nullptr;
};

/// What run_prompts did.
struct PromptRunStats {
  int64_t windows = 0;
  int64_t tokens = 0;
  double seconds = 0;
};

/// Token ids of each prompt: tok.encode(prompt, tok.add_bos(), parse_special = true) (BOS
/// prepended when the tokenizer adds one, special tokens parsed), as `calibrate` feeds them.
std::vector<std::vector<int32_t>> tokenize_prompts(const Tokenizer& tok, std::span<const std::string> prompts);

/// Evaluates every prompt (token ids, as tokenize_prompts gives them) on `session`: for each
/// window [w0, w1) of its tokens, session.reset(), a fresh ForwardTrace passed to `prepare` (to set
/// hooks such as ForwardTrace::moe_input) and installed with set_trace, the window fed in chunks
/// (no sampling), the trace removed, then `on_window` called with the prompt index, the window's
/// tokens and its trace (router[layer][pos - w0]). Either callback may be empty.
/// Errors: "prompt N: <eval error>", or the first error `on_window` returns.
Result<PromptRunStats> run_prompts(Session& session, std::span<const std::vector<int32_t>> prompts,
                                   const PromptRunOptions& o, const std::function<void(ForwardTrace&)>& prepare,
                                   const std::function<Result<void>(size_t prompt, std::span<const int32_t> window,
                                                                    ForwardTrace& trace)>& on_window);

}  // namespace ds4

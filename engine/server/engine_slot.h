// engine/server/engine_slot.h — the server's only door into the engine: a loaded model with its
// tokenizer (Engine) and one sequence slot each (Slot), through the public Session, Tokenizer and
// Sampler API. Engine::step runs the next unit of work of several slots in one eval_batch call
// (continuous batching; each slot's logits are those of running it alone). Everything else in
// engine/server works on token ids and text.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ds4/result.h"
#include "staging/staging_counters.h"
#include "engine/server/prefix_cache.h"

namespace ds4 {
class Model;
class Session;
class Sampler;
class Tokenizer;
}  // namespace ds4

namespace ds4::server {

/// Sampling of one request (OpenAI defaults: temperature 1, top_p 1; top_k 0 and min_p 0 = off).
/// temperature <= 0 is greedy (argmax, ties to the lower id).
struct Sampling {
  float temperature = 1.0f;
  float top_p = 1.0f;
  int32_t top_k = 0;
  float min_p = 0.0f;
  uint64_t seed = 0;
};

/// Log-probability of a generated token under the model's distribution (log-softmax of the raw
/// logits, before temperature / top-k / top-p: OpenAI's `logprobs` report the model's
/// probabilities), with the `top` most likely ids (descending, ties to the lower id).
struct TokenLogprob {
  int32_t id = 0;
  float logprob = 0.0f;
  std::vector<std::pair<int32_t, float>> top;
};

/// The TokenLogprob of `id` (< logits.size()) under `logits` [vocab], with `n_top` alternatives.
TokenLogprob token_logprob(std::span<const float> logits, int32_t id, int32_t n_top);

/// One sequence: its own Session (state, position) and sampler. Not thread-safe; stepped through
/// Engine::step.
class Slot {
 public:
  ~Slot();
  /// Resets the sequence and queues `prompt` (non-empty ids < vocab) for prefill. With
  /// `use_cache` and the engine's prefix cache enabled, the longest cached block-multiple prefix
  /// shorter than the prompt is restored instead of prefilled, and prefill states are stored at
  /// block multiples k * block with k a power of two and at the prompt's last block multiple.
  /// Returns the number of prompt tokens taken from the cache.
  /// `top_logprobs` >= 0 records last_logprob() for every generated token (with that many
  /// alternatives); -1 records none.
  size_t start(std::vector<int32_t> prompt, const Sampling& s, bool use_cache, int32_t top_logprobs = -1);
  /// The log-probability record of the last generated token (only with start's top_logprobs >= 0).
  const TokenLogprob& last_logprob() const { return last_lp_; }
  /// Bytes of this slot's sequence state.
  uint64_t state_bytes() const;
  /// Current position (tokens fed).
  int64_t position() const;
  /// Logits [vocab] of the last evaluated position (for tests).
  const std::vector<float>& last_logits() const { return logits_; }

 private:
  friend class Engine;
  Slot() = default;
  // The next unit of work (a prefill chunk of up to `prefill_chunk` tokens, cut at the next cache
  // block boundary; or one decode token). False when no eval is needed (scripted decode).
  Result<bool> prepare(int prefill_chunk, std::span<const int32_t>* tokens);
  // After the eval of prepare()'s tokens: stores a snapshot at a block boundary, samples.
  std::optional<int32_t> complete(size_t n_fed);

  std::unique_ptr<Session> session_;
  std::unique_ptr<Sampler> sampler_;
  PrefixCache* cache_ = nullptr;  // Engine's, or null
  bool use_cache_ = false;
  std::vector<int32_t> prompt_;
  std::vector<int32_t> history_;
  std::vector<float> logits_;
  const std::vector<int32_t>* script_ = nullptr;  // Engine::set_scripted_output
  size_t scripted_ = 0;
  int32_t tok_eos_ = -1;
  size_t fed_ = 0;
  bool have_last_ = false;
  int32_t last_ = 0;
  int32_t n_top_ = -1;
  TokenLogprob last_lp_;
};

/// A loaded model and its tokenizer, shared by all slots. Thread-safe except new_slot().
class Engine {
 public:
  /// Wraps `model`; `ctx` is the served context (tokens; 0 = the model's context_length). Errors:
  /// no tokenizer, tokenizer/vocab size mismatch, ctx above the model's context_length or < 2.
  static Result<std::unique_ptr<Engine>> create(std::shared_ptr<Model> model, int64_t ctx);
  ~Engine();

  int64_t n_ctx() const { return n_ctx_; }
  int64_t vocab() const;
  int32_t eos_id() const;
  /// Tokenizes `text`; BOS first when `add_bos` and the vocabulary has one.
  std::vector<int32_t> tokenize(std::string_view text, bool add_bos, bool parse_special) const;
  /// Bytes of token `id` as generated text (control tokens rendered, so "<think>"-style markers
  /// reach the output parser); `id` must be < vocab().
  std::string piece(int32_t id) const;
  /// Concatenated bytes of `ids` (may end inside a UTF-8 character); ids must be < vocab().
  std::string detokenize(std::span<const int32_t> ids) const;
  /// Checks the ranges of `s` (the Error names the parameter, range and value).
  Result<void> check(const Sampling& s) const;
  /// A new slot with its own Session of capacity n_ctx(). Errors: Session::create errors.
  Result<std::unique_ptr<Slot>> new_slot() const;
  /// One scheduler step: the next unit of work of every slot in `slots` (distinct; each started)
  /// in one eval_batch call. Per slot, in order: the sampled token once its prompt is fully fed
  /// (then one per step), nullopt while prefilling, or the slot's error (a rejected batch is
  /// retried slot by slot, so one bad slot does not fail the others).
  std::vector<Result<std::optional<int32_t>>> step(std::span<Slot* const> slots, int prefill_chunk) const;
  /// Turns the prefix cache on for slots created afterwards: `max_bytes` of snapshots at
  /// multiples of `block` tokens. Call before new_slot().
  void enable_prefix_cache(uint64_t max_bytes, int block);
  /// The prefix cache's counters (zeros when off).
  PrefixCacheStats prefix_cache_stats() const;
  /// The model's expert-store counters (tier, bytes per tier; staging/staging_counters.h). Call it
  /// from the thread that runs step() (the stores' counters are not synchronized).
  staging::StagingCounters expert_counters() const;
  /// Model summary for the startup line: "N layers, vocab V, weights X MiB".
  std::string describe() const;
  /// Diagnostics (DS4_SERVE_SCRIPTED_OUTPUT): slots created afterwards still prefill the prompt
  /// with the model but then emit the tokens of `text` (parse_special) and end-of-sequence instead
  /// of sampling, so tests can drive the output parser end to end (tool calls from random weights).
  void set_scripted_output(std::string_view text);

 private:
  Engine() = default;
  std::shared_ptr<Model> model_;
  const Tokenizer* tok_ = nullptr;
  int64_t n_ctx_ = 0;
  std::vector<int32_t> script_;
  bool scripted_ = false;
  std::unique_ptr<PrefixCache> cache_;
};

}  // namespace ds4::server

// engine/sampler.h — next-token sampling: repetition penalty, greedy, top-k, top-p, min-p,
// temperature, seeded draw. Deterministic for a seed on every platform.
//
// Order of operations (the same as llama.cpp's default chain, penalties -> top-k -> top-p -> min-p
// -> temperature -> draw):
//  1. repetition penalty over the last `repeat_last_n` generated-or-prompt tokens (each distinct id
//     once): logit > 0 ? logit / penalty : logit * penalty (Keskar et al. 2019, CTRL, as in
//     llama.cpp). 1.0 = off.
//  2. temperature <= 0: greedy, argmax with ties broken by the lower id. Done.
//  3. candidates sorted by logit descending, ties by lower id.
//  4. top-k: keep the first k (k <= 0: keep all).
//  5. top-p: with probabilities p = softmax(logits) over the kept candidates (temperature 1), keep
//     the shortest prefix whose cumulative probability >= top_p (at least one). 1.0 = off.
//  6. min-p: keep candidates with p >= min_p * p_max (same p as step 5, renormalised; the ratio is
//     unaffected). 0 = off.
//  7. draw: q = softmax(logits / temperature) over the kept candidates, in double, summed in
//     candidate order; u = (x >> 11) * 2^-53 with x the next std::mt19937_64 output (the engine is
//     fully specified by the C++ standard; std::uniform_real_distribution is not, so it is not used);
//     the pick is the first candidate whose cumulative q exceeds u * sum(q).
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "ds4/result.h"

namespace ds4 {

/// Sampling parameters (defaults as printed by `ds4-offload run --help`).
struct SamplerParams {
  float temperature = 0.8f;   // <= 0: greedy
  int32_t top_k = 40;         // <= 0: off
  float top_p = 0.95f;        // 1: off; in (0, 1]
  float min_p = 0.05f;        // 0: off; in [0, 1]
  float repeat_penalty = 1.0f;  // 1: off; > 0
  int32_t repeat_last_n = 64;   // window of the penalty (0: off, -1: whole history)
  uint64_t seed = 42;
};

/// Checks the ranges above; the Error names the parameter, the allowed range and the value.
Result<void> validate(const SamplerParams& p);

/// A seeded sampler. Not thread-safe.
class Sampler {
 public:
  explicit Sampler(const SamplerParams& p);

  /// Picks the next token from `logits` [vocab] given the token history `history` (prompt and
  /// generated ids, oldest first; used by the repetition penalty). `logits` must be non-empty.
  int32_t sample(std::span<const float> logits, std::span<const int32_t> history);

  const SamplerParams& params() const { return p_; }

  /// Candidates after steps 1-6 (ids in order), for tests; does not advance the PRNG.
  std::vector<int32_t> candidates(std::span<const float> logits, std::span<const int32_t> history) const;

 private:
  std::vector<float> penalized(std::span<const float> logits, std::span<const int32_t> history) const;
  SamplerParams p_;
  std::mt19937_64 rng_;
};

/// Argmax with ties to the lower id (programmer error if `logits` is empty).
int32_t argmax_lowest(std::span<const float> logits);

/// A double in [0, 1) from one mt19937_64 output: (x >> 11) * 2^-53.
double uniform01(std::mt19937_64& rng);

}  // namespace ds4

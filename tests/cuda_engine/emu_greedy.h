// tests/cuda_engine/emu_greedy.h — the greedy run the emulated-CUDA engine tests compare across
// backends: the dsv4-tiny fixture opened with a backend, tp and optional --plan (one thread per
// rank), a prompt (the first golden prompt's first ids) evaluated, then greedy tokens one step at a time, the router traced. Shared by
// cuda_emu_tp_test and cuda_emu_pipeline_test.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/dsv4_model.h"
#include "golden_data.h"
#include "support/test_env.h"

namespace ds4::emu_test {

/// The first `n` token ids of the fixture's first golden prompt (all of them when it is shorter).
inline std::vector<int32_t> golden_prompt(size_t n) {
  const std::vector<int32_t> ids = test::load_goldens()[0].ids;
  return std::vector<int32_t>(ids.begin(), ids.begin() + std::min(n, ids.size()));
}

/// Opens test::tiny_gguf() on `backend` at tensor parallelism `tp`, with plan file `plan` ("" =
/// none), activations `act`, one thread and experts tier `tier` ("" = none: --experts-tier); null
/// (and a test failure) when it does not open.
inline std::shared_ptr<Dsv4Model> open_tiny(const std::string& backend, int tp, const std::string& plan,
                                            Activations act = Activations::F32, const std::string& tier = "") {
  ModelOptions o;
  o.activations = act;
  o.backend = backend;
  o.tp = tp;
  o.threads = 1;
  o.expert_plan = plan;
  o.experts_tier = tier;
  auto m = Dsv4Model::open(test::tiny_gguf().string(), o);
  EXPECT_TRUE(m.ok()) << (m.ok() ? "" : m.error().message);
  return m.ok() ? *m : nullptr;
}

/// Evaluates `prompt` in session `s` (router traced into `trace`), then takes `gen` greedy tokens:
/// `tokens` [gen], `logits` [gen] (the last-position logits each token was taken from).
/// `after_prefill` runs once between the prompt and the first decode step (counter snapshots).
inline void greedy(Dsv4Session& s, std::span<const int32_t> prompt, int gen, ForwardTrace* trace,
                   std::vector<int32_t>& tokens, std::vector<std::vector<float>>& logits,
                   const std::function<void()>& after_prefill = {}) {
  s.set_trace(trace);
  std::vector<float> last;
  EXPECT_TRUE(s.eval(prompt, nullptr, &last).ok());
  logits.push_back(last);
  if (after_prefill) after_prefill();
  for (int i = 0; i < gen; ++i) {
    tokens.push_back(int32_t(std::max_element(last.begin(), last.end()) - last.begin()));
    if (i + 1 == gen) break;
    EXPECT_TRUE(s.eval(std::span<const int32_t>(&tokens.back(), 1), nullptr, &last).ok());
    logits.push_back(last);
  }
  s.set_trace(nullptr);
}

}  // namespace ds4::emu_test

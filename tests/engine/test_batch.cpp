// Batches of sequences (engine/session.h eval_batch) on the dsv4-tiny fixture (label golden):
// N = 1..8 sequences at different positions, prefill chunks and decode steps mixed in one
// batch, in a different order every step, must give each sequence the same logits bits as
// running it alone (the alone runs use 1 thread, the batches 3 threads and tp 1 or 2), and the
// batch API refuses malformed batches with an error.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <random>

#include "engine/model_config.h"
#include "engine/session.h"
#include "golden_data.h"

namespace ds4 {
namespace {

constexpr int kMaxSeqs = 8;

std::shared_ptr<Model> load(int threads, int tp, Activations act) {
  ModelOptions o;
  o.threads = threads;
  o.tp = tp;
  o.activations = act;
  auto m = Model::load(test::tiny_gguf().string(), o);
  EXPECT_TRUE(m.ok()) << (m.ok() ? "" : m.error().message);
  return m.ok() ? *m : nullptr;
}

/// Sequence i: its tokens and its chunk schedule (a prefill of 3 + 7i tokens, then decode steps
/// and short chunks); sequence i joins the batches at step i % 3 (so positions differ).
struct Plan {
  std::vector<int32_t> tokens;
  std::vector<int> chunks;
  int start = 0;
};

std::vector<Plan> make_plans(int64_t vocab) {
  std::vector<Plan> p(kMaxSeqs);
  for (int i = 0; i < kMaxSeqs; ++i) {
    std::mt19937 g(100 + i);
    std::uniform_int_distribution<int32_t> tok(0, int32_t(vocab - 1));
    p[i].chunks = {3 + 7 * i, 1, 1, 2 + i % 3, 1, 5, 1};
    int total = 0;
    for (int c : p[i].chunks) total += c;
    for (int t = 0; t < total; ++t) p[i].tokens.push_back(tok(g));
    p[i].start = i % 3;
  }
  return p;
}

/// logits[seq][chunk] of every row of the chunk.
using Logits = std::vector<std::vector<std::vector<float>>>;

Logits run_alone(const std::shared_ptr<Model>& m, const std::vector<Plan>& plans) {
  Logits out(plans.size());
  for (size_t i = 0; i < plans.size(); ++i) {
    auto s = Session::create(m);
    EXPECT_TRUE(s.ok());
    size_t at = 0;
    for (int c : plans[i].chunks) {
      std::vector<float> lg;
      EXPECT_TRUE((*s)->eval(std::span<const int32_t>(plans[i].tokens.data() + at, size_t(c)), &lg, nullptr).ok());
      out[i].push_back(std::move(lg));
      at += size_t(c);
    }
  }
  return out;
}

Logits run_batched(const std::shared_ptr<Model>& m, const std::vector<Plan>& plans, int n, uint32_t seed) {
  Logits out(static_cast<size_t>(n));
  std::vector<std::unique_ptr<Session>> ss;
  for (int i = 0; i < n; ++i) ss.push_back(std::move(Session::create(m).value()));
  std::vector<size_t> next(static_cast<size_t>(n), 0), at(static_cast<size_t>(n), 0);
  std::mt19937 g(seed);
  for (int step = 0;; ++step) {
    std::vector<int> who;
    for (int i = 0; i < n; ++i)
      if (step >= plans[i].start && next[i] < plans[i].chunks.size()) who.push_back(i);
    if (who.empty() && step > 3) break;
    std::shuffle(who.begin(), who.end(), g);  // a different batch order every step
    std::vector<std::vector<float>> lg(who.size());
    std::vector<BatchItem> items;
    for (size_t k = 0; k < who.size(); ++k) {
      const int i = who[k];
      const int c = plans[i].chunks[next[i]];
      items.push_back(BatchItem{ss[i].get(), std::span<const int32_t>(plans[i].tokens.data() + at[i], size_t(c)), &lg[k],
                                nullptr});
    }
    if (!items.empty()) {
      auto r = eval_batch(items);
      EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().message);
    }
    for (size_t k = 0; k < who.size(); ++k) {
      const int i = who[k];
      out[i].push_back(std::move(lg[k]));
      at[i] += size_t(plans[i].chunks[next[i]]);
      ++next[i];
    }
  }
  for (int i = 0; i < n; ++i) EXPECT_EQ(ss[i]->position(), int64_t(plans[i].tokens.size()));
  return out;
}

void check(Activations act) {
  if (test::tiny_dir().empty()) GTEST_SKIP() << "fixture absent";
  auto alone_m = load(1, 1, act), batch_m = load(3, 1, act);
  ASSERT_TRUE(alone_m && batch_m);
  const auto plans = make_plans(alone_m->config().vocab);
  const Logits alone = run_alone(alone_m, plans);
  for (int n = 1; n <= kMaxSeqs; ++n) {
    SCOPED_TRACE("N = " + std::to_string(n));
    const Logits b = run_batched(batch_m, plans, n, uint32_t(n));
    for (int i = 0; i < n; ++i) {
      ASSERT_EQ(b[i].size(), alone[i].size());
      for (size_t c = 0; c < b[i].size(); ++c) ASSERT_TRUE(b[i][c] == alone[i][c]) << "sequence " << i << " chunk " << c;
    }
  }
}

TEST(Batch, EachSequenceGetsItsAloneBitsF32) { check(Activations::F32); }
TEST(Batch, EachSequenceGetsItsAloneBitsQ8) { check(Activations::Q8); }

TEST(Batch, TensorParallelBatchGetsTheAloneBits) {
  if (test::tiny_dir().empty()) GTEST_SKIP() << "fixture absent";
  auto alone_m = load(1, 1, Activations::Q8), tp_m = load(2, 2, Activations::Q8);
  ASSERT_TRUE(alone_m && tp_m);
  const auto plans = make_plans(alone_m->config().vocab);
  const Logits alone = run_alone(alone_m, plans);
  const Logits b = run_batched(tp_m, plans, 5, 77);
  for (int i = 0; i < 5; ++i)
    for (size_t c = 0; c < b[i].size(); ++c) ASSERT_TRUE(b[i][c] == alone[i][c]) << "sequence " << i << " chunk " << c;
}

TEST(Batch, MalformedBatchesAreRefused) {
  if (test::tiny_dir().empty()) GTEST_SKIP() << "fixture absent";
  auto m1 = load(1, 1, Activations::F32), m2 = load(1, 1, Activations::F32);
  ASSERT_TRUE(m1 && m2);
  auto a = std::move(Session::create(m1).value()), b = std::move(Session::create(m2).value());
  const std::vector<int32_t> t = {1, 2, 3};
  std::vector<float> lg;
  const BatchItem twice[2] = {{a.get(), t, &lg, nullptr}, {a.get(), t, nullptr, nullptr}};
  auto r = eval_batch(twice);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("twice"), std::string::npos) << r.error().message;
  const BatchItem mixed[2] = {{a.get(), t, nullptr, nullptr}, {b.get(), t, nullptr, nullptr}};
  r = eval_batch(mixed);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("different models"), std::string::npos) << r.error().message;
  const BatchItem empty[1] = {{a.get(), {}, nullptr, nullptr}};
  EXPECT_FALSE(eval_batch(empty).ok());
  EXPECT_EQ(a->position(), 0);  // nothing was fed
  const std::vector<int32_t> bad = {1, int32_t(m1->config().vocab)};
  auto c = std::move(Session::create(m1).value());
  const BatchItem oob[2] = {{a.get(), t, nullptr, nullptr}, {c.get(), bad, nullptr, nullptr}};
  r = eval_batch(oob);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("token id"), std::string::npos) << r.error().message;
  EXPECT_EQ(a->position(), 0);
  EXPECT_EQ(c->position(), 0);
}

}  // namespace
}  // namespace ds4

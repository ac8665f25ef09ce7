// Decode-versus-prefill and chunked-versus-one-shot consistency on the dsv4-tiny fixture (label
// golden): the sequence state (window ring, compressed KV, indexer keys, compressor buffers)
// must make incremental evaluation compute what one prefill computes, across ratio-4 blocks and
// the ratio-128 block that completes at position 511.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>

#include "engine/dsv4_model.h"
#include "golden_data.h"
#include "support/test_env.h"

namespace ds4 {
namespace {

// Every row is computed by the same per-row kernels whatever the chunk size, so the figures are
// expected to be 0; the tolerance only leaves room for a future backend's reordering.
constexpr double kIncrementalMaxTol = 1e-5;  // max |delta logprob|, incremental vs one-shot
constexpr int64_t kVocab = 512;

/// Prompt 0 + its 32 exact greedy tokens: 532 tokens, crossing position 511.
std::vector<int32_t> long_sequence() {
  auto g = test::load_goldens();
  std::vector<int32_t> s = g[0].ids;
  s.insert(s.end(), g[0].greedy_exact.begin(), g[0].greedy_exact.end());
  return s;
}

void check_mode(Activations act) {
  if (test::tiny_dir().empty()) GTEST_SKIP() << "fixture absent";
  ModelOptions o;
  o.activations = act;
  auto m = Dsv4Model::open(test::tiny_gguf().string(), o);
  ASSERT_TRUE(m.ok()) << m.error().message;
  const auto seq = long_sequence();
  const int64_t n = static_cast<int64_t>(seq.size());
  std::vector<float> one_shot;
  {
    Dsv4Session s(*m);
    ASSERT_TRUE(s.eval(seq, &one_shot, nullptr).ok());
  }
  // Prefill 500, then decode one token at a time through positions 500..531.
  std::vector<float> inc, row;
  {
    Dsv4Session s(*m);
    ASSERT_TRUE(s.eval(std::span<const int32_t>(seq.data(), 500), &inc, nullptr).ok());
    for (int64_t p = 500; p < n; ++p) {
      ASSERT_TRUE(s.eval(std::span<const int32_t>(seq.data() + p, 1), nullptr, &row).ok());
      inc.insert(inc.end(), row.begin(), row.end());
    }
    EXPECT_EQ(s.position(), n);
  }
  auto dec = test::compare_logprobs(inc, one_shot, kVocab);
  std::printf("  decode after prefill vs one prefill (%s): %s\n", act == Activations::F32 ? "f32" : "q8",
              test::describe(dec).c_str());
  EXPECT_EQ(dec.rows, n);
  EXPECT_LE(dec.max_abs, kIncrementalMaxTol);
  EXPECT_EQ(dec.top1, 1.0);
  // Chunks that straddle window (32), ratio-4 and ratio-128 boundaries.
  const int64_t chunks[] = {1, 6, 33, 90, 127, 2, 3, 250, 20};
  std::vector<float> ch, part;
  {
    Dsv4Session s(*m);
    int64_t p = 0;
    for (int64_t c : chunks) {
      ASSERT_TRUE(s.eval(std::span<const int32_t>(seq.data() + p, c), &part, nullptr).ok());
      ch.insert(ch.end(), part.begin(), part.end());
      p += c;
    }
    ASSERT_EQ(p, n);
  }
  auto chd = test::compare_logprobs(ch, one_shot, kVocab);
  std::printf("  chunked prefill vs one prefill (%s): %s\n", act == Activations::F32 ? "f32" : "q8",
              test::describe(chd).c_str());
  EXPECT_EQ(chd.rows, n);
  EXPECT_LE(chd.max_abs, kIncrementalMaxTol);
}

TEST(Consistency, F32DecodeAndChunkedPrefillEqualOneShot) { check_mode(Activations::F32); }
TEST(Consistency, Q8DecodeAndChunkedPrefillEqualOneShot) { check_mode(Activations::Q8); }

TEST(Consistency, StateSaveRestoreReplaysTheSameLogits) {
  if (test::tiny_dir().empty()) GTEST_SKIP() << "fixture absent";
  auto m = Dsv4Model::open(test::tiny_gguf().string(), ModelOptions{});
  ASSERT_TRUE(m.ok()) << m.error().message;
  const auto seq = long_sequence();
  Dsv4Session s(*m);
  ASSERT_TRUE(s.eval(std::span<const int32_t>(seq.data(), 300), nullptr, nullptr).ok());
  const std::vector<uint8_t> saved = s.save_state();
  std::vector<float> a, b;
  ASSERT_TRUE(s.eval(std::span<const int32_t>(seq.data() + 300, 20), &a, nullptr).ok());
  ASSERT_TRUE(s.restore_state(saved).ok());
  ASSERT_TRUE(s.eval(std::span<const int32_t>(seq.data() + 300, 20), &b, nullptr).ok());
  EXPECT_EQ(a, b);
  s.reset();
  EXPECT_EQ(s.position(), 0);
}

// The state blob is validated, and a session's capacity is fixed at creation.
TEST(Consistency, StateBlobAndCapacityErrors) {
  if (test::tiny_dir().empty()) GTEST_SKIP() << "fixture absent";
  auto m = Model::load(test::tiny_gguf().string(), ModelOptions{});
  ASSERT_TRUE(m.ok()) << m.error().message;
  const int64_t n_ctx = (*m)->config().n_ctx;
  auto too_big = Session::create(*m, SessionOptions{n_ctx + 1});
  ASSERT_FALSE(too_big.ok());
  EXPECT_NE(too_big.error().message.find("context_length"), std::string::npos) << too_big.error().message;
  auto small = Session::create(*m, SessionOptions{16});
  ASSERT_TRUE(small.ok());
  Session& s = **small;
  EXPECT_EQ(s.capacity(), 16);
  const uint64_t bytes = s.state_bytes();
  const auto seq = long_sequence();
  ASSERT_TRUE(s.eval(std::span<const int32_t>(seq.data(), 10), nullptr, nullptr).ok());
  EXPECT_EQ(s.state_bytes(), bytes);  // fixed capacity: nothing grows
  auto over = s.eval(std::span<const int32_t>(seq.data() + 10, 7), nullptr, nullptr);
  ASSERT_FALSE(over.ok());
  EXPECT_NE(over.error().message.find("capacity 16"), std::string::npos) << over.error().message;
  EXPECT_EQ(s.position(), 10);
  std::vector<uint8_t> blob = s.save_state();
  auto truncated = s.restore_state(std::span<const uint8_t>(blob.data(), blob.size() - 1));
  ASSERT_FALSE(truncated.ok());
  EXPECT_NE(truncated.error().message.find("expected"), std::string::npos) << truncated.error().message;
  std::vector<uint8_t> bad = blob;
  bad[0] ^= 0xff;
  EXPECT_FALSE(s.restore_state(bad).ok());
  EXPECT_FALSE(s.restore_state(std::span<const uint8_t>(blob.data(), 3)).ok());
  // A longer state does not fit a smaller session.
  auto big = Session::create(*m);
  ASSERT_TRUE(big.ok());
  ASSERT_TRUE((*big)->eval(std::span<const int32_t>(seq.data(), 40), nullptr, nullptr).ok());
  auto no_fit = s.restore_state((*big)->save_state());
  ASSERT_FALSE(no_fit.ok());
  EXPECT_NE(no_fit.error().message.find("capacity"), std::string::npos) << no_fit.error().message;
  ASSERT_TRUE(s.restore_state(blob).ok());
  EXPECT_EQ(s.position(), 10);
}

}  // namespace
}  // namespace ds4

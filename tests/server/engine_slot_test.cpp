// tests/server/engine_slot_test.cpp — the server's engine adapter on a make-tiny model (6 layers,
// window 32, compress ratios 4 and 128): (1) a prompt continued from a prefix-cache snapshot gives
// the same logits, bit for bit, as one fresh prefill, at snapshot positions that do and do not fall
// on a ratio-128 block (128 and 192 with block 64; 96 and 192 with block 48), with different
// prefill chunkings; (2) slots stepped together in one batch give each the logits of running alone.
// Expected values are the same engine's single-sequence, no-cache runs (the contract under test is
// invariance, DESIGN.md "Batch invariance").
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "engine/server/engine_slot.h"
#include "engine/session.h"
#include "engine/tiny_model.h"
#include "tests/support/test_env.h"

namespace ds4::server {
namespace {

std::shared_ptr<Model> tiny() {
  static std::shared_ptr<Model> m = [] {
    TinyModelOptions o;
    o.gate_up_type = GgmlType::Q8_0;
    o.down_type = GgmlType::Q8_0;
    o.seed = 3;
    o.threads = 1;
    const std::string p = (test::scratch_dir("engine_slot_test") / "tiny.gguf").string();
    auto w = write_tiny_model(p, o);
    EXPECT_TRUE(w.ok()) << (w.ok() ? "" : w.error().message);
    ModelOptions mo;
    mo.threads = 2;
    auto r = Model::load(p, mo);
    EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().message);
    return r.ok() ? r.value() : nullptr;
  }();
  return m;
}

std::vector<int32_t> random_tokens(size_t n, uint32_t seed, int64_t vocab) {
  std::mt19937 g(seed);
  std::vector<int32_t> t(n);
  for (auto& v : t) v = int32_t(g() % uint32_t(vocab - 8)) + 4;  // clear of the control ids
  return t;
}

// What one slot produced: the logits after the prompt and after each of `n_decode` greedy steps.
struct SlotRun {
  std::vector<std::vector<float>> logits;
  std::vector<int32_t> tokens;
  size_t cached = 0;
};

// Steps `slots` together (one Engine::step per round) until each has produced 1 + n_decode tokens.
std::vector<SlotRun> run_together(const Engine& e, std::vector<Slot*> slots, const std::vector<std::vector<int32_t>>& prompts,
                              int chunk, int n_decode, bool use_cache) {
  std::vector<SlotRun> out(slots.size());
  Sampling greedy;
  greedy.temperature = 0;
  for (size_t i = 0; i < slots.size(); ++i) out[i].cached = slots[i]->start(prompts[i], greedy, use_cache);
  std::vector<size_t> idx(slots.size());
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
  while (!idx.empty()) {
    std::vector<Slot*> batch;
    for (size_t i : idx) batch.push_back(slots[i]);
    auto r = e.step(batch, chunk);
    std::vector<size_t> next;
    for (size_t k = 0; k < idx.size(); ++k) {
      EXPECT_TRUE(r[k].ok()) << (r[k].ok() ? "" : r[k].error().message);
      if (!r[k].ok()) return out;
      SlotRun& o = out[idx[k]];
      if (r[k].value()) {
        o.logits.push_back(slots[idx[k]]->last_logits());
        o.tokens.push_back(*r[k].value());
      }
      if (int(o.tokens.size()) < 1 + n_decode) next.push_back(idx[k]);
    }
    idx = next;
  }
  return out;
}

bool same_bits(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].size() != b[i].size() || std::memcmp(a[i].data(), b[i].data(), a[i].size() * sizeof(float)) != 0)
      return false;
  return true;
}

SlotRun alone(const std::vector<int32_t>& prompt, int chunk, int n_decode) {
  auto e = Engine::create(tiny(), 512);
  EXPECT_TRUE(e.ok());
  auto s = e.value()->new_slot();
  EXPECT_TRUE(s.ok());
  return run_together(*e.value(), {s.value().get()}, {prompt}, chunk, n_decode, false)[0];
}

TEST(EngineSlot, PrefixCacheRestoreIsBitIdentical) {
  ASSERT_NE(tiny(), nullptr);
  const int64_t vocab = 512;
  const auto p1 = random_tokens(200, 1, vocab);
  auto p2 = std::vector<int32_t>(p1.begin(), p1.begin() + 150);  // shares 150 tokens with p1
  const auto tail = random_tokens(80, 2, vocab);
  p2.insert(p2.end(), tail.begin(), tail.end());
  const SlotRun ref1 = alone(p1, 256, 4), ref2 = alone(p2, 256, 4);
  ASSERT_EQ(ref1.logits.size(), 5u);
  for (int block : {64, 48}) {
    auto e = Engine::create(tiny(), 512);
    ASSERT_TRUE(e.ok());
    e.value()->enable_prefix_cache(64ull << 20, block);
    auto s = e.value()->new_slot();
    ASSERT_TRUE(s.ok());
    Slot* slot = s.value().get();
    const SlotRun a = run_together(*e.value(), {slot}, {p1}, 40, 4, true)[0];  // fills the cache
    EXPECT_EQ(a.cached, 0u);
    EXPECT_TRUE(same_bits(a.logits, ref1.logits)) << "block " << block << ": snapshots taken, no restore";
    const SlotRun b = run_together(*e.value(), {slot}, {p2}, 40, 4, true)[0];
    // Snapshots of p1: k * block for k = 1, 2, 4 (<= 200) and p1's last block multiple (192 both).
    EXPECT_EQ(b.cached, block == 64 ? 128u : 96u) << "block " << block;
    EXPECT_TRUE(same_bits(b.logits, ref2.logits)) << "block " << block << ": restored at " << b.cached;
    EXPECT_EQ(b.tokens, ref2.tokens);
    // The same prompt again: restored at the last block boundary before its end (or one decoded into).
    const SlotRun c = run_together(*e.value(), {slot}, {p1}, 256, 4, true)[0];
    EXPECT_EQ(c.cached, size_t(199 / block * block)) << "block " << block;
    EXPECT_TRUE(same_bits(c.logits, ref1.logits)) << "block " << block << ": restored at " << c.cached;
    // cache_prompt off: nothing restored, same bits.
    const SlotRun d = run_together(*e.value(), {slot}, {p2}, 256, 4, false)[0];
    EXPECT_EQ(d.cached, 0u);
    EXPECT_TRUE(same_bits(d.logits, ref2.logits));
    const PrefixCacheStats st = e.value()->prefix_cache_stats();
    EXPECT_EQ(st.hits, 2u);
    EXPECT_GT(st.bytes, 0u);
    EXPECT_LE(st.bytes, st.max_bytes);
  }
}

TEST(EngineSlot, PrefixCacheStaysWithinBudget) {
  ASSERT_NE(tiny(), nullptr);
  auto e = Engine::create(tiny(), 512);
  ASSERT_TRUE(e.ok());
  e.value()->enable_prefix_cache(1ull << 20, 32);
  auto s = e.value()->new_slot();
  ASSERT_TRUE(s.ok());
  run_together(*e.value(), {s.value().get()}, {random_tokens(300, 5, 512)}, 64, 0, true);
  const PrefixCacheStats st = e.value()->prefix_cache_stats();
  EXPECT_LE(st.bytes, st.max_bytes);
  EXPECT_EQ(st.inserts, 5u);  // positions 32, 64, 128, 256 (powers of two) and 288 (the last)
  EXPECT_EQ(st.entries + st.evictions, st.inserts);
  EXPECT_GT(st.evictions, 0u);  // five snapshots of up to 288 positions do not fit in 1 MiB
  std::printf("  prefix cache: %llu entries, %llu bytes, %llu evictions\n", (unsigned long long)st.entries,
              (unsigned long long)st.bytes, (unsigned long long)st.evictions);
}

TEST(EngineSlot, BatchedSlotsEqualAlone) {
  ASSERT_NE(tiny(), nullptr);
  std::vector<std::vector<int32_t>> prompts = {random_tokens(70, 11, 512), random_tokens(9, 12, 512),
                                               random_tokens(140, 13, 512), random_tokens(1, 14, 512)};
  auto e = Engine::create(tiny(), 512);
  ASSERT_TRUE(e.ok());
  std::vector<std::unique_ptr<Slot>> own;
  std::vector<Slot*> slots;
  for (size_t i = 0; i < prompts.size(); ++i) {
    auto s = e.value()->new_slot();
    ASSERT_TRUE(s.ok());
    slots.push_back(s.value().get());
    own.push_back(std::move(s).value());
  }
  // Chunk 32: the long prompts prefill while the short ones already decode in the same passes.
  const auto together = run_together(*e.value(), slots, prompts, 32, 6, false);
  for (size_t i = 0; i < prompts.size(); ++i) {
    const SlotRun ref = alone(prompts[i], 256, 6);
    EXPECT_TRUE(same_bits(together[i].logits, ref.logits)) << "slot " << i;
    EXPECT_EQ(together[i].tokens, ref.tokens) << "slot " << i;
  }
}

}  // namespace
}  // namespace ds4::server

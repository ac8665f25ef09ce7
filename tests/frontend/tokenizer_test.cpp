// tests/frontend/tokenizer_test.cpp — byte-level BPE, the DeepSeek-V3 pre-tokenizer, specials.
#include <gtest/gtest.h>

#include <random>

#include "engine/tokenizer.h"
#include "tests/frontend/test_vocab.h"

namespace ds4 {
namespace {

using Pieces = std::vector<std::string>;

std::shared_ptr<const Tokenizer> make(const std::vector<std::string>& merges) {
  auto t = Tokenizer::create(test::small_vocab(merges));
  EXPECT_TRUE(t.ok()) << (t.ok() ? "" : t.error().message);
  return t.ok() ? t.value() : nullptr;
}

TEST(ByteMap, Gpt2Mapping) {
  // Printable ASCII maps to itself; space (0x20) is the 33rd non-printable byte -> U+0120 'Ġ';
  // byte 0 -> U+0100, newline (0x0A) -> U+010A 'Ċ', 0xAD (soft hyphen) -> U+0143.
  EXPECT_EQ(byte_to_unicode('A'), uint32_t('A'));
  EXPECT_EQ(byte_to_unicode(0x20), 0x120u);
  EXPECT_EQ(byte_to_unicode(0x00), 0x100u);
  EXPECT_EQ(byte_to_unicode(0x0A), 0x10Au);
  EXPECT_EQ(byte_to_unicode(0xAD), 0x143u);
  EXPECT_EQ(byte_to_unicode(0xFF), 0xFFu);
  EXPECT_EQ(byte_to_unicode_utf8(0x20), "Ġ");
}

TEST(PreTokenizer, HandCheckedSplits) {
  auto t = make({});
  ASSERT_TRUE(t);
  EXPECT_EQ(t->pre_tokenize("Hello world"), (Pieces{"Hello", " world"}));
  EXPECT_EQ(t->pre_tokenize("Hello, world!"), (Pieces{"Hello", ",", " world", "!"}));
  EXPECT_EQ(t->pre_tokenize("12345"), (Pieces{"123", "45"}));
  EXPECT_EQ(t->pre_tokenize("abc1234def"), (Pieces{"abc", "123", "4", "def"}));
  EXPECT_EQ(t->pre_tokenize("it's"), (Pieces{"it", "'s"}));
  EXPECT_EQ(t->pre_tokenize("a  b"), (Pieces{"a", " ", " b"}));
  EXPECT_EQ(t->pre_tokenize("line1\n\nline2"), (Pieces{"line", "1", "\n\n", "line", "2"}));
  EXPECT_EQ(t->pre_tokenize("$100"), (Pieces{"$", "100"}));
  EXPECT_EQ(t->pre_tokenize("你好世界abc"), (Pieces{"你好世界", "abc"}));
  EXPECT_EQ(t->pre_tokenize("Привет мир"), (Pieces{"Привет", " мир"}));
  EXPECT_EQ(t->pre_tokenize("x   "), (Pieces{"x", "   "}));
  EXPECT_EQ(t->pre_tokenize(""), Pieces{});
}

TEST(Bpe, MergesApplyByRank) {
  // ranks: 0 "l l", 1 "h e", 2 "he ll", 3 "Ġ w"
  auto t = make({"l l", "h e", "he ll", "Ġ w"});
  ASSERT_TRUE(t);
  auto id = [&](const char* s) { return t->find_token(s); };
  EXPECT_EQ(t->encode("hello world", false), (std::vector<int32_t>{id("hell"), id("o"), id("Ġw"), id("o"), id("r"),
                                                                    id("l"), id("d")}));
  // Lower rank wins over the leftmost pair: "aab" with ranks 0 "a b", 1 "a a" -> "a" "ab".
  auto u = make({"a b", "a a"});
  ASSERT_TRUE(u);
  EXPECT_EQ(u->encode("aab", false), (std::vector<int32_t>{u->find_token("a"), u->find_token("ab")}));
}

TEST(Bpe, AddsBosAndParsesSpecials) {
  auto t = make({});
  ASSERT_TRUE(t);
  int32_t user = t->find_token("<｜User｜>"), asst = t->find_token("<｜Assistant｜>");
  auto ids = t->encode("<｜User｜>hi<｜Assistant｜>", true);
  ASSERT_EQ(ids.size(), 5u);
  EXPECT_EQ(ids[0], 0);
  EXPECT_EQ(ids[1], user);
  EXPECT_EQ(ids[2], 3 + 'h');
  EXPECT_EQ(ids[3], 3 + 'i');
  EXPECT_EQ(ids[4], asst);
  auto plain = t->encode("<｜User｜>", false, /*parse_special=*/false);
  EXPECT_EQ(plain.size(), std::string("<｜User｜>").size());  // no merges: one token per byte
  for (int32_t i : plain) EXPECT_NE(i, user);
  // CONTROL tokens render only on request; USER_DEFINED always.
  EXPECT_EQ(t->decode(ids), "<｜User｜>hi<｜Assistant｜>");
  EXPECT_EQ(t->decode(ids, true), "<｜begin▁of▁sentence｜><｜User｜>hi<｜Assistant｜>");
}

TEST(Bpe, RoundTripsMixedScripts) {
  auto t = make({"Ġ t", "h e", "Ġt he", "i n", "e r", "Ġ a", "o n"});
  ASSERT_TRUE(t);
  const std::vector<std::string> texts = {
      "The quick brown fox jumps over the lazy dog.",
      "日本語のテキストと中文混合 and English",
      "Съешь же ещё этих мягких французских булок",
      "مرحبا بالعالم، كيف حالك؟",
      "emoji: 👍🏽 👨‍👩‍👧 🇫🇷 ✨",
      "digits 3.14159 and 1,000,000 and ١٢٣",
      "tabs\t\tand  spaces   and\n\n\nnewlines \r\n end   ",
      "combining: e\u0301 a\u0308 — “quotes” ‘x’",
      "",
      " ",
  };
  for (const auto& s : texts) {
    auto ids = t->encode(s, false);
    EXPECT_EQ(t->decode(ids), s) << "text: " << s;
    auto with_bos = t->encode(s, true);
    ASSERT_FALSE(with_bos.empty());
    EXPECT_EQ(with_bos[0], t->bos_id());
    EXPECT_EQ(t->decode(with_bos), s);
  }
}

TEST(Bpe, InvalidUtf8IsEncodedBytewise) {
  auto t = make({"a b"});
  ASSERT_TRUE(t);
  const std::vector<std::string> texts = {
      std::string("\xff\xfe abc \xc3", 8), std::string("\xed\xa0\x80 surrogate"), std::string("\xc0\xaf"),
      std::string("ok\xf0\x9f\x98", 5), std::string("\x80\x80\x80"), std::string("a\0b", 3)};
  for (const auto& s : texts) {
    auto ids = t->encode(s, false);
    EXPECT_EQ(t->decode(ids), s);
    for (int32_t id : ids) EXPECT_TRUE(id >= 0 && id < t->vocab_size());
  }
}

TEST(Bpe, RandomBytesRoundTrip) {
  // Deterministic random byte strings (mostly ill-formed UTF-8), biased toward spaces, digits and
  // UTF-8 lead/continuation bytes so every regex branch and the invalid-UTF path are exercised.
  auto t = make({"Ġ t", "h e", "Ġt he", "e r", "Ġ a", "ä ¸"});
  ASSERT_TRUE(t);
  std::mt19937_64 rng(2024);
  const std::string alphabet = std::string(" \t\n\r09az'.,!") + "\xc3\xa9\xe4\xb8\xad\xf0\x9f\x98\x80\x80\xbf\xff";
  for (int iter = 0; iter < 500; ++iter) {
    std::string s;
    size_t len = rng() % 48;
    for (size_t i = 0; i < len; ++i)
      s.push_back(rng() % 3 == 0 ? char(rng() & 0xFF) : alphabet[rng() % alphabet.size()]);
    auto ids = t->encode(s, false);
    ASSERT_EQ(t->decode(ids), s) << "iteration " << iter;
  }
}

TEST(Tokenizer, RejectsBadVocabularies) {
  auto v = test::small_vocab({"a b"});
  v.merges.push_back("x yz");  // "xyz" is not a token
  auto r = Tokenizer::create(v, "m.gguf");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("m.gguf: tokenizer.ggml.merges[1]"), std::string::npos) << r.error().message;

  auto w = test::small_vocab({});
  w.token_types.pop_back();
  auto r2 = Tokenizer::create(w);
  ASSERT_FALSE(r2.ok());
  EXPECT_NE(r2.error().message.find("token_type"), std::string::npos);

  auto x = test::small_vocab({});
  x.pre = "llama3";
  EXPECT_FALSE(Tokenizer::create(x).ok());

  auto y = test::small_vocab({});
  y.tokens[3 + 'q'] = "QQ";  // byte 'q' no longer has a token
  auto r3 = Tokenizer::create(y);
  ASSERT_FALSE(r3.ok());
  EXPECT_NE(r3.error().message.find("byte 0x71"), std::string::npos) << r3.error().message;

  auto z = test::small_vocab({});
  z.eos_id = 100000;
  EXPECT_FALSE(Tokenizer::create(z).ok());
}

}  // namespace
}  // namespace ds4

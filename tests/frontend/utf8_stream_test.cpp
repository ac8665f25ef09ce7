// tests/frontend/utf8_stream_test.cpp — streaming detokenization holds back split characters and
// replaces ill-formed bytes with U+FFFD per maximal subpart.
#include <gtest/gtest.h>

#include "engine/tokenizer.h"
#include "engine/utf8_stream.h"
#include "tests/frontend/test_vocab.h"

namespace ds4 {
namespace {

const std::string kFffd = "\xEF\xBF\xBD";

TEST(Utf8Stream, HoldsBackSplitSequences) {
  Utf8StreamDecoder d;
  EXPECT_EQ(d.push("\xC3"), "");  // first byte of é
  EXPECT_EQ(d.pending(), 1u);
  EXPECT_EQ(d.push("\xA9x"), "éx");
  EXPECT_EQ(d.pending(), 0u);
  // 😀 = F0 9F 98 80, one byte at a time.
  EXPECT_EQ(d.push("\xF0"), "");
  EXPECT_EQ(d.push("\x9F"), "");
  EXPECT_EQ(d.push("\x98"), "");
  EXPECT_EQ(d.push("\x80"), "😀");
  EXPECT_EQ(d.flush(), "");
}

TEST(Utf8Stream, ReplacesIllFormedBytes) {
  EXPECT_EQ(sanitize_utf8("\xC3\x28"), kFffd + "(");
  EXPECT_EQ(sanitize_utf8("\xE0\x80"), kFffd + kFffd);             // E0 needs A0..BF next
  EXPECT_EQ(sanitize_utf8("\xED\xA0\x80"), kFffd + kFffd + kFffd);  // surrogate D800
  EXPECT_EQ(sanitize_utf8("\xF0\x9F\x98"), kFffd);                  // truncated at end: one U+FFFD
  EXPECT_EQ(sanitize_utf8("\xF0\x9F\x98x"), kFffd + "x");           // maximal subpart of 3 bytes
  EXPECT_EQ(sanitize_utf8("\xC0\xAF"), kFffd + kFffd);              // overlong lead never valid
  EXPECT_EQ(sanitize_utf8("\xF4\x90\x80\x80"), kFffd + kFffd + kFffd + kFffd);  // > U+10FFFF
  EXPECT_EQ(sanitize_utf8("\xFF"), kFffd);
  EXPECT_EQ(sanitize_utf8("plain ascii"), "plain ascii");
  Utf8StreamDecoder d;
  EXPECT_EQ(d.push("a\xE2\x82"), "a");
  EXPECT_EQ(d.flush(), kFffd);
}

TEST(Utf8Stream, StreamsTokenizerOutputExactly) {
  auto t = Tokenizer::create(test::small_vocab({"Ġ ð"}));  // one merge, so most tokens are single bytes
  ASSERT_TRUE(t.ok());
  const std::string text = "emoji 👍🏽 and 中文 and Ωmega";
  auto ids = t.value()->encode(text, false);
  Utf8StreamDecoder d;
  std::string out;
  for (int32_t id : ids) {
    std::string piece = d.push(t.value()->token_bytes(id));
    // every emitted piece is well-formed on its own
    EXPECT_EQ(sanitize_utf8(piece), piece);
    out += piece;
  }
  out += d.flush();
  EXPECT_EQ(out, text);
}

}  // namespace
}  // namespace ds4

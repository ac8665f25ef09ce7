// tests/frontend/tokenizer_oracle_test.cpp — our tokenizer against Hugging Face `tokenizers` set up
// like DeepSeek-V3's tokenizer.json (tests/frontend/hf_tokenizer_oracle.py), on the make-tiny
// vocabulary and on the fixture's. Exits 77 (skipped) when Python or `tokenizers` is missing.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "engine/tiny_vocab.h"
#include "engine/tokenizer.h"
#include "tests/support/test_env.h"

namespace ds4 {
namespace {

const char* kTexts[] = {
    "The quick brown fox jumps over the lazy dog.", "Hello, world! It's 2024; I'm here.",
    "日本語のテキストと中文混合 and English", "Съешь же ещё этих мягких французских булок",
    "مرحبا بالعالم، كيف حالك؟", "emoji: 👍🏽 👨‍👩‍👧 🇫🇷 ✨", "digits 3.14159 and 1,000,000 and ١٢٣ 12345678",
    "tabs\t\tand  spaces   and\n\n\nnewlines \r\n end   ", "combining: e\u0301 a\u0308 — “quotes” ‘x’ «ok»",
    "$100 @user #tag a+b=c (x) [y] {z} <w>", "the river town wakes early and the baker sells bread",
    "  leading spaces", "trailing\n", "x   \n  y", "ﬁne ＡＢＣ Ωmega ß", "<｜User｜>hi<｜Assistant｜></think>ok",
    "a'b 'quoted' don't \"dq\"", "\u00a0nbsp\u2003em\u3000ideo", "ℝ∑∞ ≤ ≥ → ⇒", "__init__ self.x->y::z",
};

void compare(const TokenizerVocab& v, const std::string& name) {
  auto dir = test::scratch_dir("tok_oracle_" + name);
  nlohmann::json vj = {{"tokens", v.tokens}, {"types", v.token_types}, {"merges", v.merges}};
  std::ofstream(dir / "vocab.json") << vj.dump();
  nlohmann::json tj = nlohmann::json::array();
  for (const char* t : kTexts) tj.push_back(t);
  std::ofstream(dir / "texts.json") << tj.dump();
  const std::string cmd = "'" + test::python() + "' '" + (test::source_dir() / "tests/frontend/hf_tokenizer_oracle.py").string() +
                          "' '" + (dir / "vocab.json").string() + "' '" + (dir / "texts.json").string() + "' '" +
                          (dir / "out.json").string() + "'";
  int st = std::system(cmd.c_str());
  if (st == -1 || !WIFEXITED(st) || WEXITSTATUS(st) == 77 || WEXITSTATUS(st) == 127) {
    std::printf("tokenizer oracle: python '%s' with the 'tokenizers' package is not available: skipped\n",
                test::python().c_str());
    std::exit(77);
  }
  ASSERT_EQ(WEXITSTATUS(st), 0) << cmd;
  auto hf = nlohmann::json::parse(std::ifstream(dir / "out.json"));
  auto tok = Tokenizer::create(v, name);
  ASSERT_TRUE(tok.ok()) << tok.error().message;
  for (size_t i = 0; i < std::size(kTexts); ++i)
    EXPECT_EQ(tok.value()->encode(kTexts[i], false, true), hf[i].get<std::vector<int32_t>>()) << name << ": " << kTexts[i];
}

TEST(TokenizerOracle, TinyVocabMatchesHuggingFace) {
  auto v = build_tiny_vocab(512);
  ASSERT_TRUE(v.ok());
  compare(v.value(), "tiny");
}

}  // namespace
}  // namespace ds4

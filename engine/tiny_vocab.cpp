// engine/tiny_vocab.cpp — see tiny_vocab.h.
#include "engine/tiny_vocab.h"

#include <map>
#include <string>
#include <vector>

namespace ds4 {

std::string_view tiny_vocab_training_text() {
  // Original text written for this project (public domain in spirit; no third-party source).
  return R"(The river town wakes early. Before the sun clears the hills, the baker has lit her oven and the
fishermen are already out on the water, their small boats moving slowly through the grey mist. By
seven the market square is full of voices: people buying bread, trading news, and asking about the
weather. Most days the weather is the first thing anyone mentions, because in a river town the
weather decides almost everything. A dry summer means low water, and low water means the larger
boats cannot reach the harbour. A wet spring means the fields flood, and the farmers wait for the
ground to dry before they plant.

The school stands at the top of the hill. Its teacher, a patient man with a loud laugh, believes
that every child should learn three things: how to read carefully, how to count honestly, and how
to ask a good question. He often says that a good question is worth more than a quick answer. The
children do not always agree with him, especially on warm afternoons when the river is calling,
but many of them remember his words long after they have left the town.

In the evening the light turns golden and the streets grow quiet again. Families sit down to eat,
and the smell of soup and fresh bread drifts from open windows. Old friends meet at the small cafe
near the bridge, where they talk about the past and argue about the future. Some of them think the
town should build a new road to the city; others think the road would change the town too much.
Nobody has decided yet, and perhaps nobody ever will.

Numbers matter here too. The harbour master counts the boats every morning: twelve on a quiet day,
twenty on a busy one, and once, during the great festival, forty-one. The baker sells about three
hundred loaves each week. The bridge is one hundred and eight years old, and the clock in the tower
has been wrong by exactly four minutes for as long as anyone can remember.

When winter comes, the river freezes at its edges and the children skate near the shore while
their parents watch from the bank. The days are short, the nights are long, and the town seems to
hold its breath until the first warm wind of spring returns. Then the ice breaks, the water rises,
the boats go out again, and the whole cycle of the year begins once more, as it always has and as
it probably always will.

She asked him what he wanted to be when he was older. He thought about it for a long time and then
said that he wanted to be the person who knows where the fish are. She laughed, but she did not
tell him he was wrong. In a river town, that is a very useful thing to know.
)";
}

Result<TokenizerVocab> build_tiny_vocab(int vocab_size) {
  constexpr int kFixed = 3 + 256 + 4;
  if (vocab_size < kFixed)
    return Error{"tiny vocabulary: expected vocab_size >= " + std::to_string(kFixed) + " (3 control + 256 bytes + 4 chat tokens), found " +
                 std::to_string(vocab_size)};
  const int n_merges = vocab_size - kFixed;

  TokenizerVocab v;
  v.tokens = {"<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜▁pad▁｜>"};
  v.token_types = {int32_t(TokenType::Control), int32_t(TokenType::Control), int32_t(TokenType::Control)};
  for (int b = 0; b < 256; ++b) {
    v.tokens.push_back(byte_to_unicode_utf8(uint8_t(b)));
    v.token_types.push_back(int32_t(TokenType::Normal));
  }
  v.bos_id = 0;
  v.eos_id = 1;
  v.pad_id = 2;
  v.add_bos = true;

  // Pre-tokenize the training text with a merge-free tokenizer of the same vocabulary.
  DS4_TRY(auto bare, Tokenizer::create(v, "tiny vocabulary"));
  std::map<std::vector<std::string>, int64_t> words;  // symbol sequence -> count (ordered: deterministic)
  for (const auto& piece : bare->pre_tokenize(tiny_vocab_training_text())) {
    std::vector<std::string> syms;
    for (char c : piece) syms.push_back(byte_to_unicode_utf8(uint8_t(c)));
    ++words[syms];
  }
  std::vector<std::pair<std::vector<std::string>, int64_t>> corpus(words.begin(), words.end());
  for (int m = 0; m < n_merges; ++m) {
    std::map<std::pair<std::string, std::string>, int64_t> pairs;
    for (const auto& [syms, count] : corpus)
      for (size_t i = 0; i + 1 < syms.size(); ++i) pairs[{syms[i], syms[i + 1]}] += count;
    if (pairs.empty())
      return Error{"tiny vocabulary: the training text yields only " + std::to_string(m) + " merges, " +
                   std::to_string(n_merges) + " are needed for vocab_size " + std::to_string(vocab_size)};
    // Most frequent; on ties the smallest "LEFT RIGHT" string (std::map iterates in that order).
    auto best = pairs.begin();
    for (auto it = pairs.begin(); it != pairs.end(); ++it)
      if (it->second > best->second) best = it;
    const auto [left, right] = best->first;
    v.merges.push_back(left + " " + right);
    v.tokens.push_back(left + right);
    v.token_types.push_back(int32_t(TokenType::Normal));
    for (auto& [syms, count] : corpus) {
      std::vector<std::string> out;
      for (size_t i = 0; i < syms.size(); ++i) {
        if (i + 1 < syms.size() && syms[i] == left && syms[i + 1] == right) {
          out.push_back(left + right);
          ++i;
        } else {
          out.push_back(syms[i]);
        }
      }
      syms = std::move(out);
    }
  }
  for (const char* s : {"<｜User｜>", "<｜Assistant｜>", "<think>", "</think>"}) {
    v.tokens.push_back(s);
    v.token_types.push_back(int32_t(TokenType::UserDefined));
  }
  return v;
}

}  // namespace ds4

// tests/frontend/test_vocab.h — a small hand-made byte-level BPE vocabulary for tokenizer tests.
#pragma once

#include <string>
#include <vector>

#include "engine/tokenizer.h"

namespace ds4::test {

/// ids 0/1/2: BOS/EOS/PAD (CONTROL); 3..258: the 256 byte characters (byte b at id 3+b); then the
/// merged tokens of `merges` in order; then the chat special tokens (USER_DEFINED).
inline TokenizerVocab small_vocab(const std::vector<std::string>& merges) {
  TokenizerVocab v;
  v.tokens = {"<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜▁pad▁｜>"};
  v.token_types = {3, 3, 3};
  for (int b = 0; b < 256; ++b) {
    v.tokens.push_back(byte_to_unicode_utf8(uint8_t(b)));
    v.token_types.push_back(1);
  }
  for (const auto& m : merges) {
    auto sp = m.find(' ');
    v.tokens.push_back(m.substr(0, sp) + m.substr(sp + 1));
    v.token_types.push_back(1);
  }
  for (const char* s : {"<｜User｜>", "<｜Assistant｜>", "<think>", "</think>"}) {
    v.tokens.push_back(s);
    v.token_types.push_back(4);
  }
  v.merges = merges;
  v.bos_id = 0;
  v.eos_id = 1;
  v.pad_id = 2;
  v.add_bos = true;
  return v;
}

}  // namespace ds4::test

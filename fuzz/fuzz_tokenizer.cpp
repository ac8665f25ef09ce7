// fuzz/fuzz_tokenizer.cpp — Tokenizer::encode (DeepSeek-V3 pre-tokenizer, byte-level BPE, special
// tokens) on arbitrary bytes with the make-tiny vocabulary; every id must be in range and decoding
// the ids must give back the input bytes (the byte-level BPE is lossless).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "fuzz/fuzz_tiny_tokenizer.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  ds4::fuzz::init_tiny_tokenizer();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::shared_ptr<const ds4::Tokenizer>& tok = ds4::fuzz::tiny_tokenizer();
  if (size < 1) return 0;
  const bool special = data[0] & 1, bos = data[0] & 2;
  const std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
  const auto ids = tok->encode(text, bos, special);
  std::string back;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= tok->vocab_size()) __builtin_trap();
    if (bos && i == 0) continue;
    back += tok->token_bytes(ids[i], /*special=*/true);
  }
  if (back != text) __builtin_trap();
  return 0;
}

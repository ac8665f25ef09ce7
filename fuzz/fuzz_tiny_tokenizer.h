// fuzz/fuzz_tiny_tokenizer.h — the make-tiny tokenizer shared by the tokenizer and chat-format
// fuzz targets, learned once in LLVMFuzzerInitialize (a few seconds under ASan; not charged to the
// per-input timeout).
#pragma once

#include <memory>

#include "engine/tiny_vocab.h"
#include "engine/tokenizer.h"

namespace ds4::fuzz {

/// The tokenizer learned by init_tiny_tokenizer(); null before it.
inline std::shared_ptr<const Tokenizer>& tiny_tokenizer() {
  static std::shared_ptr<const Tokenizer> tok;
  return tok;
}

/// Builds the 512-token make-tiny vocabulary and its tokenizer; traps on failure (a fuzz harness
/// that cannot start must not report "no crash").
inline void init_tiny_tokenizer() {
  auto v = build_tiny_vocab(512);
  if (!v) __builtin_trap();
  auto t = Tokenizer::create(std::move(v).value(), "tiny");
  if (!t) __builtin_trap();
  tiny_tokenizer() = t.value();
}

}  // namespace ds4::fuzz

// engine/tiny_vocab.h — the small byte-level BPE vocabulary of `ds4-offload make-tiny`.
//
// Layout (same convention as the fixture dsv4-tiny-mxfp4.gguf): id 0 BOS "<｜begin▁of▁sentence｜>",
// 1 EOS "<｜end▁of▁sentence｜>", 2 PAD "<｜▁pad▁｜>" (CONTROL); ids 3..258 the 256 GPT-2 byte
// characters (byte b at id 3+b, NORMAL); then BPE merges learned from a small embedded English text
// (NORMAL); the last four ids are the chat tokens "<｜User｜>", "<｜Assistant｜>", "<think>",
// "</think>" (USER_DEFINED, matched verbatim before BPE).
#pragma once

#include <string_view>

#include "ds4/result.h"
#include "engine/tokenizer.h"

namespace ds4 {

/// The embedded English training text (original prose, a few KB).
std::string_view tiny_vocab_training_text();

/// Learns `vocab_size - 263` merges on tiny_vocab_training_text() (pre-tokenized with the
/// DeepSeek-V3 pre-tokenizer; each step merges the most frequent adjacent pair, ties broken by
/// the smallest (LEFT, RIGHT) in byte order) and returns the vocabulary described above.
/// Error if vocab_size < 263 or the text yields fewer merges than needed.
Result<TokenizerVocab> build_tiny_vocab(int vocab_size);

}  // namespace ds4

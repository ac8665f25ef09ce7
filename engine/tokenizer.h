// engine/tokenizer.h — byte-level BPE tokenizer (GGUF `tokenizer.ggml.model` = "gpt2") with the
// DeepSeek-V3 pre-tokenizer (`tokenizer.ggml.pre` = "deepseek-v3"), as used by DeepSeek-V4.
//
// Pipeline of encode(): (1) special tokens (token_type CONTROL or USER_DEFINED) are cut out of the
// text verbatim, longest first; (2) each remaining span is split by the pre-tokenizer (three PCRE2
// regexes in UTF + UCP mode, applied in sequence, every match and every gap kept as its own piece,
// as HF tokenizers' `Split(behavior="isolated")`); (3) each piece is mapped byte-wise through GPT-2's
// byte-to-unicode table; (4) BPE merges are applied by rank (lowest rank first, leftmost on ties).
//
// Sources (facts only): GPT-2 byte-to-unicode mapping: openai/gpt-2 src/encoder.py
// `bytes_to_unicode`. DeepSeek-V3 pre-tokenizer regexes: ggml-org/llama.cpp src/llama-vocab.cpp,
// `llm_tokenizer_bpe` constructor, case LLAMA_VOCAB_PRE_TYPE_DEEPSEEK3_LLM. Token type ids:
// llama.cpp `llama_token_type` (1 NORMAL, 2 UNKNOWN, 3 CONTROL, 4 USER_DEFINED, 5 UNUSED, 6 BYTE).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "ds4/result.h"

namespace ds4 {

/// GGUF `tokenizer.ggml.token_type` values (llama.cpp llama_token_type).
enum class TokenType : int32_t {
  Undefined = 0, Normal = 1, Unknown = 2, Control = 3, UserDefined = 4, Unused = 5, Byte = 6,
};

/// Plain description of a vocabulary, as stored under `tokenizer.ggml.*`.
/// `tokens[i]` is token i's text: byte-level-encoded (GPT-2 mapping) for NORMAL tokens, raw UTF-8
/// for CONTROL / USER_DEFINED tokens. `merges[r]` is "LEFT RIGHT" (one ASCII space) of rank r.
struct TokenizerVocab {
  std::vector<std::string> tokens;
  std::vector<int32_t> token_types;  // same length as tokens; empty = all NORMAL
  std::vector<std::string> merges;
  int32_t bos_id = -1;  // -1 = none
  int32_t eos_id = -1;
  int32_t pad_id = -1;
  bool add_bos = false;
  std::string model = "gpt2";        // only "gpt2" (byte-level BPE) is supported
  std::string pre = "deepseek-v3";   // only "deepseek-v3" is supported
};

/// The GPT-2 byte-to-unicode code point of byte `b` (printable bytes map to themselves, the other
/// 68 bytes to U+0100.. in increasing byte order).
uint32_t byte_to_unicode(uint8_t b);
/// The UTF-8 text of byte_to_unicode(b).
std::string byte_to_unicode_utf8(uint8_t b);

/// Byte-level BPE tokenizer. Immutable after creation; encode/decode are thread-safe.
class Tokenizer {
 public:
  /// Validates `vocab` and builds the lookup tables. Errors: unsupported model/pre, token_types of
  /// the wrong length, a merge that is not "A B" or names a token missing from the vocabulary, a
  /// byte token missing (all 256 GPT-2 byte characters must be tokens), special ids out of range,
  /// or a pre-tokenizer regex that PCRE2 rejects. `source` prefixes messages (e.g. the file name).
  static Result<std::shared_ptr<const Tokenizer>> create(TokenizerVocab vocab,
                                                         const std::string& source = "tokenizer");

  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  /// Token ids of `text` (any bytes; invalid UTF-8 is encoded byte-wise). Prepends BOS when
  /// `add_bos` and the vocabulary has one. With `parse_special`, CONTROL/USER_DEFINED token texts in
  /// `text` become their ids; without it they are tokenized as ordinary text.
  std::vector<int32_t> encode(std::string_view text, bool add_bos, bool parse_special = true) const;

  /// The bytes of token `id`: the reverse byte mapping of a NORMAL token's text; the raw text of a
  /// USER_DEFINED token; the raw text of a CONTROL token when `render_control`, else "". Programmer
  /// error (DS4_CHECK) if id is out of range.
  std::string token_bytes(int32_t id, bool render_control = false) const;

  /// Concatenated token_bytes of `ids` (may be invalid UTF-8 if the ids split a character).
  std::string decode(std::span<const int32_t> ids, bool render_control = false) const;

  /// The pre-tokenizer pieces of `text` (no special-token handling); exposed for tests.
  std::vector<std::string> pre_tokenize(std::string_view text) const;

  int32_t vocab_size() const { return int32_t(vocab_.tokens.size()); }
  int32_t bos_id() const { return vocab_.bos_id; }
  int32_t eos_id() const { return vocab_.eos_id; }
  int32_t pad_id() const { return vocab_.pad_id; }
  bool add_bos() const { return vocab_.add_bos; }
  TokenType token_type(int32_t id) const;
  const std::string& token_text(int32_t id) const;
  /// Id of a token with exactly this stored text, or -1.
  int32_t find_token(std::string_view text) const;
  const TokenizerVocab& vocab() const { return vocab_; }

 private:
  Tokenizer() = default;
  struct Regexes;
  void bpe_piece(std::string_view piece, std::vector<int32_t>& out) const;
  void encode_plain(std::string_view text, std::vector<int32_t>& out) const;

  TokenizerVocab vocab_;
  std::unordered_map<std::string, int32_t> token_to_id_;    // every token text -> lowest id
  std::unordered_map<std::string, int32_t> merge_rank_;     // "LEFT RIGHT" -> rank
  std::vector<std::string> token_bytes_;                    // decoded bytes per token
  std::vector<int32_t> specials_by_length_;                 // CONTROL/USER_DEFINED, longest first
  std::vector<std::vector<int32_t>> specials_by_byte_;      // [256]: the above, by first byte
  int32_t byte_token_[256] = {};                            // id of each byte's single-char token
  std::unique_ptr<Regexes> regexes_;
};

}  // namespace ds4

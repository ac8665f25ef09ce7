// engine/utf8_stream.h — incremental UTF-8 validation for streaming detokenized text.
//
// Token pieces from a byte-level BPE may end in the middle of a multi-byte character. The decoder
// emits only complete, well-formed UTF-8: an incomplete trailing sequence is held back until the
// next push(); ill-formed bytes are replaced by U+FFFD, one per maximal subpart of an ill-formed
// sequence (Unicode Standard ch. 3, "U+FFFD Substitution of Maximal Subparts"; well-formedness
// table 3-7: C2-DF 80-BF; E0 A0-BF; E1-EC/EE-EF 80-BF; ED 80-9F; F0 90-BF; F1-F3 80-BF; F4 80-8F).
#pragma once

#include <string>
#include <string_view>

namespace ds4 {

/// Streaming UTF-8 decoder/validator. Not thread-safe.
class Utf8StreamDecoder {
 public:
  /// Appends `bytes`; returns the well-formed UTF-8 that can be emitted now.
  std::string push(std::string_view bytes);
  /// Ends the stream: returns U+FFFD if an incomplete sequence is held back, else "".
  std::string flush();
  /// Number of bytes held back (0..3).
  size_t pending() const { return pending_.size(); }

 private:
  std::string pending_;
};

/// `bytes` with every ill-formed part replaced by U+FFFD (push + flush of a fresh decoder).
std::string sanitize_utf8(std::string_view bytes);

}  // namespace ds4

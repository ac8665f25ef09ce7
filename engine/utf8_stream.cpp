// engine/utf8_stream.cpp — see utf8_stream.h.
#include "engine/utf8_stream.h"

#include <cstdint>

namespace ds4 {

namespace {
constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// Sequence length for lead byte b0 (0 = never valid as a lead) and the allowed range of the
// second byte (Unicode table 3-7).
int lead_info(uint8_t b0, uint8_t& lo, uint8_t& hi) {
  lo = 0x80;
  hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) return 2;
  if (b0 == 0xE0) { lo = 0xA0; return 3; }
  if ((b0 >= 0xE1 && b0 <= 0xEC) || b0 == 0xEE || b0 == 0xEF) return 3;
  if (b0 == 0xED) { hi = 0x9F; return 3; }
  if (b0 == 0xF0) { lo = 0x90; return 4; }
  if (b0 >= 0xF1 && b0 <= 0xF3) return 4;
  if (b0 == 0xF4) { hi = 0x8F; return 4; }
  return 0;
}
}  // namespace

std::string Utf8StreamDecoder::push(std::string_view bytes) {
  pending_.append(bytes);
  std::string out;
  size_t i = 0;
  const size_t n = pending_.size();
  while (i < n) {
    auto b0 = uint8_t(pending_[i]);
    if (b0 < 0x80) {
      out.push_back(char(b0));
      ++i;
      continue;
    }
    uint8_t lo, hi;
    int len = lead_info(b0, lo, hi);
    if (len == 0) {
      out.append(kReplacement);
      ++i;
      continue;
    }
    int k = 1;
    bool bad = false;
    for (; k < len; ++k) {
      if (i + size_t(k) >= n) break;  // incomplete so far
      auto b = uint8_t(pending_[i + size_t(k)]);
      uint8_t l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
      if (b < l || b > h) {
        bad = true;
        break;
      }
    }
    if (bad) {  // the maximal subpart is the k bytes accepted so far
      out.append(kReplacement);
      i += size_t(k);
      continue;
    }
    if (k < len) break;  // hold back the incomplete tail
    out.append(pending_, i, size_t(len));
    i += size_t(len);
  }
  pending_.erase(0, i);
  return out;
}

std::string Utf8StreamDecoder::flush() {
  if (pending_.empty()) return {};
  pending_.clear();
  return std::string(kReplacement);
}

std::string sanitize_utf8(std::string_view bytes) {
  Utf8StreamDecoder d;
  std::string s = d.push(bytes);
  s += d.flush();
  return s;
}

}  // namespace ds4

// placement/json_text.cpp — parse_json_text: nlohmann's parse error turned into line and column.
#include "placement/json_text.h"

#include <algorithm>

namespace ds4::placement {

Result<nlohmann::json> parse_json_text(const std::string& text, const std::string& source) {
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    // e.byte is the 1-based index of the byte where parsing stopped (nlohmann docs).
    const size_t at = std::min(text.size(), e.byte > 0 ? size_t(e.byte - 1) : size_t(0));
    size_t line = 1, col = 1;
    for (size_t i = 0; i < at; ++i) {
      if (text[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    // nlohmann's what() reads "[json.exception.parse_error.101] parse error at line 1, column 5:
    // syntax error while parsing object - ..."; keep the part after the position.
    std::string what = e.what();
    if (const size_t p = what.find("syntax error"); p != std::string::npos) what = what.substr(p);
    return Error{source + ": malformed JSON at line " + std::to_string(line) + ", column " + std::to_string(col) + ": " +
                 what};
  }
}

}  // namespace ds4::placement

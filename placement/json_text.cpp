// placement/json_text.cpp — parse_json_text: nlohmann's parse error turned into line and column.
#include "placement/json_text.h"

#include <algorithm>

#include "ds4/json_depth.h"

namespace ds4::placement {

Result<nlohmann::json> parse_json_text(const std::string& text, const std::string& source) {
  if (auto e = json_depth_error(text, kMaxJsonFileDepth, source); !e.empty()) return Error{e};
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
  } catch (const nlohmann::json::out_of_range& e) {
    // 406: a number literal that overflows a double (1e999); nlohmann gives no position, so the
    // literal is located in the text.
    std::string what = e.what();
    std::string where;
    if (const size_t q = what.find('\''); q != std::string::npos) {
      const std::string lit = what.substr(q + 1, what.find('\'', q + 1) - q - 1);
      if (const size_t at = text.find(lit); !lit.empty() && at != std::string::npos) {
        size_t line = 1 + size_t(std::count(text.begin(), text.begin() + ptrdiff_t(at), '\n'));
        size_t col = at - (at == 0 ? 0 : text.rfind('\n', at - 1) + 1) + 1;
        if (text.rfind('\n', at) == std::string::npos) col = at + 1;
        // The key the literal belongs to: the last "name" before it.
        std::string key;
        if (const size_t c = text.rfind(':', at); c != std::string::npos)
          if (const size_t e2 = text.rfind('"', c); e2 != std::string::npos && e2 > 0)
            if (const size_t s2 = text.rfind('"', e2 - 1); s2 != std::string::npos) key = text.substr(s2 + 1, e2 - s2 - 1);
        where = " at line " + std::to_string(line) + ", column " + std::to_string(col) +
                (key.empty() ? std::string() : " (key \"" + key + "\")");
      }
      return Error{source + ": number " + lit + where + " is out of range (larger than a double can hold)"};
    }
    return Error{source + ": " + what};
  } catch (const nlohmann::json::exception& e) {
    return Error{source + ": " + std::string(e.what())};
  }
}

}  // namespace ds4::placement

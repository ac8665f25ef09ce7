// common/ds4/json_depth.h — the nesting depth of a JSON text, measured before it is parsed.
// nlohmann::json parses iteratively but serializes (dump(), used in error messages) and compares
// recursively: a hostile file or request nested tens of thousands of levels deep overflows the
// stack there (found by fuzz_json: 65,000 nested arrays as a config value crashed every placement/
// reader inside the error message's dump()). Every reader of untrusted JSON refuses such text first.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>

namespace ds4 {

/// Nesting limit of the JSON files the project reads (configs, profiles, plans, statistics,
/// safetensors headers): far above any legitimate one (they nest 2-4 levels).
inline constexpr int kMaxJsonFileDepth = 64;
/// Nesting limit of the server's request bodies (tool JSON schemas nest deeper than files).
inline constexpr int kMaxJsonRequestDepth = 128;

/// Deepest bracket nesting ('[' and '{') of JSON text `s`, brackets inside strings (with their
/// backslash escapes) skipped; stops and returns as soon as the depth exceeds `limit`, so the
/// result is min(true depth, limit + 1). Malformed text is measured as written (the parser that
/// runs next reports it).
inline int json_depth(std::string_view s, int limit) {
  int depth = 0, best = 0;
  bool in_str = false;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (in_str) {
      if (c == '\\') ++i;
      else if (c == '"') in_str = false;
      continue;
    }
    if (c == '"') {
      in_str = true;
    } else if (c == '{' || c == '[') {
      best = std::max(best, ++depth);
      if (best > limit) return best;
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
  return best;
}

/// The message for text nested deeper than `limit`: "<source>: JSON nests deeper than N levels
/// (expected at most N)"; empty when `s` is within the limit.
inline std::string json_depth_error(std::string_view s, int limit, const std::string& source) {
  if (json_depth(s, limit) <= limit) return {};
  return source + ": JSON nests deeper than " + std::to_string(limit) + " levels (expected at most " +
         std::to_string(limit) + ")";
}

}  // namespace ds4

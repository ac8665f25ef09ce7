// placement/json_text.h — parses the JSON files of placement/ (hardware profiles, model configs,
// routing statistics, plan files) with one error style: "<source>: malformed JSON at line L,
// column C: <what the parser expected>".
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "ds4/result.h"

namespace ds4::placement {

/// Parses `text` (the contents of `source`, a path or a name used in messages). Error on malformed
/// JSON, naming the 1-based line and column of the first bad byte.
Result<nlohmann::json> parse_json_text(const std::string& text, const std::string& source);

}  // namespace ds4::placement

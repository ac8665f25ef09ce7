// engine/server/stop_matcher.h — OpenAI `stop` strings matched on the generated text across token
// boundaries: text is released only once it cannot be the start of a stop string.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace ds4::server {

/// Incremental stop-string matcher. Not thread-safe.
class StopMatcher {
 public:
  /// `stops`: non-empty strings (empty list = never stops).
  explicit StopMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {}
  /// Appends `text`; returns the text that can be emitted now. After a stop string is found,
  /// returns the text before it and stopped() is true; later pushes return "".
  std::string push(std::string_view text);
  /// Returns the held-back text (none once stopped).
  std::string finish();
  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stops_;
  std::string buf_;
  bool stopped_ = false;
};

}  // namespace ds4::server

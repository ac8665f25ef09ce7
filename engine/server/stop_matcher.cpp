// engine/server/stop_matcher.cpp — see stop_matcher.h.
#include "engine/server/stop_matcher.h"

#include <algorithm>

namespace ds4::server {

std::string StopMatcher::push(std::string_view text) {
  if (stopped_) return "";
  buf_ += text;
  size_t first = std::string::npos;
  for (const auto& s : stops_) first = std::min(first, buf_.find(s));
  if (first != std::string::npos) {
    stopped_ = true;
    std::string out = buf_.substr(0, first);
    buf_.clear();
    return out;
  }
  // Hold the longest suffix that is a proper prefix of a stop string.
  size_t hold = 0;
  for (const auto& s : stops_)
    for (size_t k = std::min(buf_.size(), s.size() - 1); k > hold; --k)
      if (std::string_view(buf_).substr(buf_.size() - k) == std::string_view(s).substr(0, k)) {
        hold = k;
        break;
      }
  std::string out = buf_.substr(0, buf_.size() - hold);
  buf_.erase(0, buf_.size() - hold);
  return out;
}

std::string StopMatcher::finish() {
  std::string out = stopped_ ? "" : buf_;
  buf_.clear();
  return out;
}

}  // namespace ds4::server

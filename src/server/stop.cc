#include "server/stop.h"

#include <algorithm>

namespace strata::server {

StopMatcher::StopMatcher(std::vector<std::string> stops) {
  for (std::string& s : stops) {
    if (!s.empty()) stops_.push_back(std::move(s));
  }
}

StopMatcher::Out StopMatcher::push(std::string_view text) {
  Out out;
  held_.append(text);
  if (stops_.empty()) {
    out.text = std::move(held_);
    held_.clear();
    return out;
  }
  // The earliest complete stop string wins.
  size_t first = std::string::npos;
  const std::string* word = nullptr;
  for (const std::string& s : stops_) {
    const size_t at = held_.find(s);
    if (at < first) {
      first = at;
      word = &s;
    }
  }
  if (first != std::string::npos) {
    out.text = held_.substr(0, first);
    out.stopped = true;
    out.word = *word;
    held_.clear();
    return out;
  }
  // Hold back the longest suffix that is a proper prefix of some stop string.
  size_t keep = 0;
  for (const std::string& s : stops_) {
    const size_t max_len = std::min(s.size() - 1, held_.size());
    for (size_t len = max_len; len > keep; --len) {
      if (std::string_view(held_).substr(held_.size() - len) ==
          std::string_view(s).substr(0, len)) {
        keep = len;
        break;
      }
    }
  }
  out.text = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

std::string StopMatcher::flush() {
  std::string rest = std::move(held_);
  held_.clear();
  return rest;
}

}  // namespace strata::server

// Stop strings over streamed text. Text that could be the start of a stop string is held back
// until it either completes the stop string (and is dropped with everything after it) or
// cannot any more, so a client never sees part of a stop string.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace strata::server {

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops = {});

  struct Out {
    std::string text;      // safe to send now
    bool stopped = false;  // a stop string was found; `text` ends just before it
    std::string word;      // that stop string
  };
  // Appends generated text (complete UTF-8 characters) and returns what may be sent.
  Out push(std::string_view text);
  // At the end of generation: what is still held back.
  std::string flush();

 private:
  std::vector<std::string> stops_;
  std::string held_;  // text not yet sent: always a possible start of a stop string
};

}  // namespace strata::server

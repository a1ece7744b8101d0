// StopStringMatcher: cuts a text stream before the first occurrence of any stop string, holding
// back only what could still become one, so a stop string is never emitted, even when it spans
// several tokens.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace dsinfer {

class StopStringMatcher {
 public:
  explicit StopStringMatcher(std::vector<std::string> stops);
  /// Appends `piece` and returns the text now safe to emit; `*stopped` becomes true when a stop
  /// string completed (the text before it is returned, nothing after it ever is).
  std::string push(std::string_view piece, bool* stopped);
  /// The held-back text at the end of the stream (it never completed a stop string).
  std::string flush();

 private:
  std::vector<std::string> stops_;
  std::string pending_;
};

}  // namespace dsinfer

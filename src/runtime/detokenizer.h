// IncrementalDetokenizer: turns a stream of token ids into text pieces for streaming, never
// emitting half of a UTF-8 character (a byte-level token can end inside one).
#pragma once

#include <cstdint>
#include <string>

#include "io/tokenizer.h"

namespace dsinfer {

class IncrementalDetokenizer {
 public:
  explicit IncrementalDetokenizer(const Tokenizer& tokenizer) : tok_(tokenizer) {}
  /// The text that became complete with `id` (possibly empty).
  std::string push(int32_t id);
  /// Whatever is still pending at the end of the stream (an incomplete character becomes U+FFFD).
  std::string flush();

 private:
  const Tokenizer& tok_;
  std::string pending_;  // bytes of a character not complete yet
};

}  // namespace dsinfer

// Incremental detokenizer: emit up to the last complete UTF-8 character; invalid bytes are emitted
// at once (as U+FFFD) since no later byte can complete them.
#include "runtime/detokenizer.h"

#include "io/tokenizer_vocab.h"

namespace dsinfer {
namespace {

// Length of the trailing bytes of `s` that start a UTF-8 character not yet complete (0 if none).
size_t incomplete_tail(const std::string& s) {
  for (size_t back = 1; back <= 3 && back <= s.size(); ++back) {
    const auto b = static_cast<uint8_t>(s[s.size() - back]);
    if ((b & 0xC0) == 0x80) continue;  // a continuation byte: look further back
    const size_t need = b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : b >= 0xC0 ? 2 : 1;
    return need > back ? back : 0;
  }
  return 0;
}

}  // namespace

std::string IncrementalDetokenizer::push(int32_t id) {
  const int32_t one[1] = {id};
  pending_ += tok_.decode_bytes(one);
  const size_t keep = incomplete_tail(pending_);
  std::string ready = pending_.substr(0, pending_.size() - keep);
  pending_.erase(0, pending_.size() - keep);
  return encode_utf8(decode_utf8_lossy(ready));
}

std::string IncrementalDetokenizer::flush() {
  std::string rest = encode_utf8(decode_utf8_lossy(pending_));
  pending_.clear();
  return rest;
}

}  // namespace dsinfer

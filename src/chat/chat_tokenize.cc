#include "chat/chat_tokenize.h"

namespace dsinfer {

std::vector<int32_t> tokenize_prompt(const Tokenizer& tokenizer, const ChatPrompt& prompt) {
  std::vector<Tokenizer::Segment> segments;
  segments.reserve(prompt.pieces.size());
  for (const PromptPiece& p : prompt.pieces) segments.push_back({p.text, p.control});
  return tokenizer.encode_segments(segments);
}

}  // namespace dsinfer

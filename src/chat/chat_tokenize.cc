#include "chat/chat_tokenize.h"

namespace dsinfer {

std::vector<int32_t> tokenize_prompt(const Tokenizer& tokenizer, const ChatPrompt& prompt) {
  std::vector<Tokenizer::Segment> segments;
  segments.reserve(prompt.pieces.size());
  for (const PromptPiece& p : prompt.pieces) segments.push_back({p.text, p.control});
  return tokenizer.encode_segments(segments);
}

}  // namespace dsinfer

namespace dsinfer {

std::vector<int32_t> with_bos(const Tokenizer& tokenizer, std::vector<int32_t> ids) {
  const auto bos = tokenizer.vocab().id_of(chat_tokens::kBos);
  if (bos && (ids.empty() || ids.front() != *bos)) ids.insert(ids.begin(), *bos);
  return ids;
}

}  // namespace dsinfer

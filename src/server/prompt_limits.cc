#include "server/prompt_limits.h"

#include <fmt/format.h>

namespace dsinfer::server {

int64_t prompt_text_bytes(const CompletionRequest& r) {
  if (!r.chat) return static_cast<int64_t>(r.prompt.size());
  int64_t bytes = 0;
  for (const ChatMessage& m : r.messages)
    for (const ContentPart& part : m.content)
      if (!part.is_image) bytes += static_cast<int64_t>(part.text.size());
  return bytes;
}

Status check_prompt_bytes(const CompletionRequest& r, const Tokenizer& tok, int64_t context) {
  const int64_t bytes = prompt_text_bytes(r);
  const int64_t limit = context * tok.max_token_bytes();
  if (bytes <= limit) return {};
  return error(
      ErrorKind::kInvalidArgument,
      fmt::format("the {} is {} bytes, more than the {} bytes that {} tokens can hold (the context of {} "
                  "tokens x at most {} bytes per token)",
                  r.chat ? "messages' text" : "prompt", bytes, limit, context, context, tok.max_token_bytes()));
}

}  // namespace dsinfer::server

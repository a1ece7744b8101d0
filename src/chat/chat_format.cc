// The chat types' small helpers: messages from text, the reasoning effort's names, prompt pieces.
#include "chat/chat_format.h"

#include <charconv>

#include <fmt/format.h>

namespace dsinfer {

ChatMessage make_message(ChatRole role, std::string text, std::string reasoning_content) {
  ChatMessage m;
  m.role = role;
  m.content.push_back({false, std::move(text)});
  m.reasoning_content = std::move(reasoning_content);
  return m;
}

std::string content_text(const ChatMessage& m) {
  std::string out;
  for (size_t i = 0; i < m.content.size(); ++i) {
    if (i > 0) out += "\n\n";
    out += m.content[i].is_image ? std::string(chat_tokens::kImage) : m.content[i].text;
  }
  return out;
}

Result<int> parse_reasoning_effort(std::string_view text) {
  if (text == "low") return 50;
  if (text == "high") return 75;
  if (text == "max") return 100;
  int v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || v < 1 || v > 100)
    return error(ErrorKind::kInvalidArgument,
                 fmt::format("reasoning effort '{}': expected low, high, max or an integer 1-100", text));
  return v;
}

void ChatPrompt::control(std::string_view s) {
  if (!s.empty()) pieces.push_back({std::string(s), true});
}

void ChatPrompt::text(std::string_view s) {
  if (!s.empty()) pieces.push_back({std::string(s), false});
}

std::string ChatPrompt::joined() const {
  std::string out;
  for (const PromptPiece& p : pieces) out += p.text;
  return out;
}

}  // namespace dsinfer

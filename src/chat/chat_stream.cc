// ChatStreamParser: the completion parser for text that arrives in pieces.
#include "chat/chat_stream.h"

#include <algorithm>

namespace dsinfer {
namespace {

constexpr std::string_view kCallsStart = "\n\n<｜DSML｜ calls>";

// Length of the longest suffix of `s` that is a proper prefix of `tag`.
size_t partial_tag_suffix(std::string_view s, std::string_view tag) {
  for (size_t n = std::min(s.size(), tag.size() - 1); n > 0; --n)
    if (tag.starts_with(s.substr(s.size() - n))) return n;
  return 0;
}

}  // namespace

ChatStreamParser::Delta ChatStreamParser::push(std::string_view piece) {
  text_ += piece;
  Delta out;
  if (in_reasoning_) {
    const size_t end = text_.find(chat_tokens::kThinkEnd, done_);
    if (end == std::string::npos) {
      const size_t safe =
          text_.size() - partial_tag_suffix(std::string_view(text_).substr(done_), chat_tokens::kThinkEnd);
      out.reasoning = text_.substr(done_, safe - done_);
      done_ = safe;
      return out;
    }
    out.reasoning = text_.substr(done_, end - done_);
    in_reasoning_ = false;
    done_ = content_start_ = end + chat_tokens::kThinkEnd.size();
  }
  // Content: stop before a calls block (or a possible start of one).
  const std::string_view rest = std::string_view(text_).substr(done_);
  size_t safe = rest.find(kCallsStart);
  if (safe == std::string_view::npos) safe = rest.size() - partial_tag_suffix(rest, kCallsStart);
  out.content = std::string(rest.substr(0, safe));
  done_ += safe;
  return out;
}

ChatStreamParser::Delta ChatStreamParser::finish(std::vector<ToolCall>* tool_calls) {
  if (tool_calls) tool_calls->clear();
  std::string_view rest = std::string_view(text_).substr(done_);
  if (rest.ends_with(chat_tokens::kEos)) rest.remove_suffix(chat_tokens::kEos.size());
  Delta out;
  if (in_reasoning_) {  // never closed: refused by the official parser; it streamed as reasoning
    out.reasoning = std::string(rest);
    return out;
  }
  std::string whole = text_;
  if (!whole.ends_with(chat_tokens::kEos)) whole += chat_tokens::kEos;
  auto parsed = parse_completion_strict(whole, thinking_);
  if (!parsed.ok()) {
    out.content = std::string(rest);
    return out;
  }
  // What was emitted is a prefix of the accepted content, so the rest is the difference.
  const size_t emitted = done_ - content_start_;
  out.content = parsed->content.size() > emitted ? parsed->content.substr(emitted) : "";
  if (tool_calls) *tool_calls = std::move(parsed->tool_calls);
  return out;
}

}  // namespace dsinfer

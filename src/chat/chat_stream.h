// ChatStreamParser: the completion parser (chat_format.h) for text that arrives in pieces. It
// emits reasoning and content as soon as they cannot turn into something else, holding back only a
// possible start of `</think>` and everything from a possible "\n\n<｜DSML｜ calls>" on, so DSML
// never reaches the content stream before the whole text decides. When the official parser
// accepts the whole text (EOS appended), the deltas add up to its reasoning and content; when it
// refuses, what was held back follows as content and there are no tool calls (deltas already sent
// stay sent: a reasoning that is never closed streams as reasoning, where a whole response gives
// it as content).
#pragma once

#include <string>
#include <string_view>

#include "chat/chat_format.h"

namespace dsinfer {

class ChatStreamParser {
 public:
  explicit ChatStreamParser(bool thinking) : in_reasoning_(thinking), thinking_(thinking) {}

  struct Delta {
    std::string reasoning, content;
  };
  /// Appends a piece of the completion; returns what is now safe to emit.
  Delta push(std::string_view piece);
  /// The end of the completion: the rest of the deltas, and the tool calls (ids left empty).
  Delta finish(std::vector<ToolCall>* tool_calls);

 private:
  bool in_reasoning_;
  bool thinking_;
  std::string text_;  // everything received
  size_t done_ = 0;   // text_[0, done_) has been emitted or belongs to the reasoning/tag
  size_t content_start_ = 0;
};

}  // namespace dsinfer

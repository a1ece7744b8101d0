// The chat types' JSON side: OpenAI-style `messages`, `tools` and the official encoder's options
// -> ChatMessage / ToolSpec / ChatOptions, and the JSON text the encoding writes into prompts
// (tool objects, call arguments) spelled as Python's json.dumps writes it. chat_format.h itself
// has no JSON types.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "chat/chat_format.h"
#include "core/status.h"
#include "io/json.h"

namespace dsinfer {

/// `messages` as the official encoder takes them: roles system, developer, user, assistant, tool,
/// latest_reminder; content a string, null or a list of text / image_url / image parts; assistant
/// `reasoning_content`, `tool_calls`, `wo_eos`, `task`; tool `tool_call_id`; `tools` and
/// `response_format` on a message. kInvalidArgument naming the offending message and field.
Result<std::vector<ChatMessage>> chat_messages_from_json(const OrderedJson& messages);
/// OpenAI `tools` ([{"type": "function", "function": {...}}]): each `function` object as given.
Result<std::vector<ToolSpec>> tool_specs_from_json(const OrderedJson& tools);
/// A reasoning effort as JSON: null (the default, 75), "low", "high", "max" or an integer 1-100.
Result<int> reasoning_effort_from_json(const OrderedJson& effort);
/// The official encode_messages keyword arguments: thinking_mode ("chat" | "thinking"),
/// reasoning_effort, drop_thinking, add_default_bos_token, context (messages).
Result<ChatOptions> chat_options_from_json(const OrderedJson& options);

/// One argument of a tool call as a DSML parameter holds it: a string's own text, any other value
/// as JSON.
struct ToolArgument {
  std::string name;
  bool is_string = false;
  std::string value;
};
/// A call's `arguments` (JSON text; empty means {}) split into its members in their written order;
/// a JSON string that holds an object is decoded twice. kInvalidArgument when it is not an object.
Result<std::vector<ToolArgument>> tool_arguments_from_json(std::string_view arguments);

}  // namespace dsinfer

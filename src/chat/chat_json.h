// The chat types' JSON side: OpenAI `messages` and `tools` -> ChatMessage / ToolSpec, and the JSON
// text the chat encoding writes into prompts and reads back out of completions (tool schemas, call
// arguments), spelled as Python's json.dumps writes it. chat_format.h itself has no JSON types.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "chat/chat_format.h"
#include "core/status.h"
#include "io/json.h"

namespace dsinfer {

/// OpenAI `messages` (roles system, developer, user, assistant, tool, latest_reminder; content a
/// string or an array of text parts; assistant `tool_calls`, `reasoning_content`).
/// kInvalidArgument naming the offending message and field.
Result<std::vector<ChatMessage>> chat_messages_from_json(const OrderedJson& messages);
/// OpenAI `tools` ([{"type": "function", "function": {name, description, parameters}}]); each
/// schema becomes json.dumps text with its keys in the written order.
Result<std::vector<ToolSpec>> tool_specs_from_json(const OrderedJson& tools);

/// A tool's line of the tools block: {"name", "description", "parameters"} in json.dumps spelling.
/// kInvalidArgument when its parameters are not JSON.
Result<std::string> tool_schema_line(const ToolSpec& tool);

/// One argument of a tool call as a DSML parameter holds it: a string's own text, any other value
/// as JSON.
struct ToolArgument {
  std::string name;
  bool is_string = false;
  std::string value;
};
/// A call's `arguments` (a JSON object, as text; empty means {}) split into its arguments, in
/// their written order. kInvalidArgument when the text is not a JSON object.
Result<std::vector<ToolArgument>> tool_arguments_from_json(std::string_view arguments);
/// The inverse: the `arguments` text (json.dumps spelling) of a call's parameters; a later argument
/// of the same name replaces the earlier value. kInvalidArgument for a non-string value that is not
/// JSON.
Result<std::string> tool_arguments_to_json(std::span<const ToolArgument> arguments);

}  // namespace dsinfer

// V4.1's chat encoding (spec §13.3): OpenAI-style messages -> prompt text, and a completion's
// text -> reasoning content, content and tool calls (DSML). Prompts are text with the special
// tokens written out; the tokenizer recognises them as added tokens. The OpenAI JSON shapes of
// these types are chat_json.h's.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace dsinfer {

namespace chat_tokens {
inline constexpr std::string_view kBos = "<｜begin▁of▁sentence｜>";
inline constexpr std::string_view kEos = "<｜end▁of▁sentence｜>";
inline constexpr std::string_view kSystem = "<｜System｜>";
inline constexpr std::string_view kUser = "<｜User｜>";
inline constexpr std::string_view kAssistant = "<｜Assistant｜>";
inline constexpr std::string_view kLatestReminder = "<｜latest_reminder｜>";
inline constexpr std::string_view kThinkStart = "<think>";
inline constexpr std::string_view kThinkEnd = "</think>";
}  // namespace chat_tokens

enum class ChatRole { kSystem, kUser, kDeveloper, kAssistant, kTool, kLatestReminder };

struct ToolCall {
  std::string id;
  std::string name;
  std::string arguments;  // a JSON object, as text (OpenAI's `function.arguments`)
};

struct ChatMessage {
  ChatRole role = ChatRole::kUser;
  std::string content;
  std::string reasoning_content;     // assistant
  std::vector<ToolCall> tool_calls;  // assistant
  std::string tool_call_id;          // tool
};

inline ChatMessage make_message(ChatRole role, std::string content, std::string reasoning_content = {}) {
  ChatMessage m;
  m.role = role;
  m.content = std::move(content);
  m.reasoning_content = std::move(reasoning_content);
  return m;
}

struct ToolSpec {
  std::string name, description;
  std::string parameters = "{}";  // JSON schema, as text: its keys in their written order
};

struct ChatOptions {
  bool thinking = true;       // thinking mode (`<think>`) or chat mode
  int reasoning_effort = 50;  // 1..100, thinking mode only ("high", the default)
  std::vector<ToolSpec> tools;
};

/// "low" 25, "high" 50, "xhigh" 75, "max" 100, or an integer 1..100.
Result<int> parse_reasoning_effort(std::string_view text);

/// BOS + the rendered messages + the assistant prefix the completion continues from.
/// kInvalidArgument for a conversation that cannot be rendered (no messages, a tool call whose
/// arguments are not a JSON object, a tool whose parameters are not JSON).
Result<std::string> render_chat_prompt(std::span<const ChatMessage> messages, const ChatOptions& options);

/// The text a reply that must call a tool continues from: the opening of the calls block, and of
/// the call of `tool` when one is named (OpenAI's tool_choice "required" / a named function).
std::string forced_tool_call_opening(std::string_view tool);

struct ParsedCompletion {
  std::string reasoning_content;
  std::string content;
  std::vector<ToolCall> tool_calls;  // ids left empty: the caller names them
};

/// Splits a completion (the generated text, without the prompt): in thinking mode the text up to
/// `</think>` is reasoning (all of it when the model never closed it); a well-formed DSML calls
/// block at the end of the content becomes tool calls. Malformed DSML stays in the content as
/// plain text.
ParsedCompletion parse_completion(std::string_view text, bool thinking);

}  // namespace dsinfer

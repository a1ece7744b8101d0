// V4.1's chat encoding as DeepSeek's own encoder writes it (the release's encoding/encoding.py,
// reproduced from its golden outputs in tests/data/chat-encoding/, rules in docs/chat-format.md):
// OpenAI-style messages -> the prompt, and a completion's text -> reasoning, content and DSML tool
// calls. The prompt is a sequence of pieces, each either the template's own control text or text
// a client supplied, so that only the template can produce control token ids (chat_tokenize.h).
// The OpenAI JSON shapes of these types are chat_json.h's.
#pragma once

#include <optional>
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
inline constexpr std::string_view kImage = "<｜deepseek_image｜>";
inline constexpr std::string_view kDsml = "｜DSML｜";
}  // namespace chat_tokens

enum class ChatRole { kSystem, kUser, kDeveloper, kAssistant, kTool, kLatestReminder };

struct ToolCall {
  std::string id;
  std::string name;
  std::string arguments;  // OpenAI's `function.arguments`: JSON text as the client spelled it
};

/// One tool of a tools block: its `function` object in json.dumps spelling, keys as given.
struct ToolSpec {
  std::string name;
  std::string function_json;
};

/// A part of a message's content; the parts are joined by "\n\n".
struct ContentPart {
  bool is_image = false;  // an image renders as <｜deepseek_image｜>
  std::string text;       // the text, or the image's source
};

struct ChatMessage {
  ChatRole role = ChatRole::kUser;
  std::vector<ContentPart> content;
  std::string reasoning_content;               // assistant
  std::vector<ToolCall> tool_calls;            // assistant
  std::string tool_call_id;                    // tool
  std::string task;                            // user / assistant: a quick-instruction task ("action", "title", ...)
  bool wo_eos = false;                         // assistant: a prefill the completion continues (no EOS)
  std::vector<ToolSpec> tools;                 // system: rendered as the tools block
  std::optional<std::string> response_format;  // system: the schema, as JSON text
};

ChatMessage make_message(ChatRole role, std::string text, std::string reasoning_content = {});
/// The content's text parts joined as the encoder joins them (images as their placeholder).
std::string content_text(const ChatMessage& m);

struct ChatOptions {
  bool thinking = true;              // thinking mode (`<think>`) or chat mode
  int reasoning_effort = 75;         // 1..100 ("high", the default); written in thinking mode only
  bool drop_thinking = true;         // drop reasoning (and developer messages) before the last user turn
  bool add_bos = true;               // the official add_default_bos_token
  std::vector<ToolSpec> tools;       // a request's tools: put on a leading system message (one is made if none)
  std::vector<ChatMessage> context;  // earlier messages already encoded: only the new part is written
};

/// "low" 50, "high" 75, "max" 100, or an integer 1..100 written in decimal; other names refused.
Result<int> parse_reasoning_effort(std::string_view text);

/// A piece of a prompt: the template's control text (special tokens, tags, fixed wording) or
/// text from a client (message contents, names, arguments, schemas).
struct PromptPiece {
  std::string text;
  bool control = false;
};
struct ChatPrompt {
  std::vector<PromptPiece> pieces;
  void control(std::string_view s);
  void text(std::string_view s);
  std::string joined() const;  // the prompt as the official encoder writes it
};

/// The prompt of `messages` under `options`, as encode_messages writes it: BOS, the messages, and
/// the assistant prefix the completion continues from where the encoder writes one.
/// kInvalidArgument for what the official encoder refuses (an unknown task, a developer message
/// it does not drop, an image placeholder typed in text, an image without a source).
Result<ChatPrompt> encode_chat(std::span<const ChatMessage> messages, const ChatOptions& options);

/// The text a reply that must call a tool continues from: the opening of the calls block, and of
/// the call of `tool` when one is named (OpenAI's tool_choice "required" / a named function).
ChatPrompt forced_tool_call_opening(std::string_view tool);

struct ParsedCompletion {
  std::string reasoning_content;
  std::string content;
  std::vector<ToolCall> tool_calls;  // ids left empty: the caller names them
};

/// The official completion parser: `text` is what the model generated after the prompt (in
/// thinking mode the reasoning, `</think>`, then the answer), ending in EOS unless it ends with a
/// calls block. kInvalidArgument for what it refuses: no `</think>` in thinking mode, no EOS, text
/// after the calls block or after EOS, a malformed or duplicate DSML parameter, special tokens in
/// the reasoning or the content.
Result<ParsedCompletion> parse_completion_strict(std::string_view text, bool thinking);

/// A generated completion for an API client: the engine stops at EOS without writing it, so EOS is
/// appended before parse_completion_strict; a completion that parser refuses is all content.
ParsedCompletion parse_completion(std::string_view text, bool thinking);

}  // namespace dsinfer

// OpenAI request bodies -> the engine's request (validation at the boundary): /v1/chat/completions
// and /v1/completions. Errors are kInvalidArgument with a message naming the field (400),
// kUnsupported for a valid field this server does not implement (n > 1, response_format other
// than text: 400) or kNotFound for a model this server does not serve (404). Only server/ knows
// JSON and HTTP. The accepted fields and ranges are listed in docs/api.md.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "chat/chat_format.h"
#include "core/status.h"
#include "runtime/sampler.h"

namespace dsinfer::server {

struct CompletionRequest {
  bool chat = true;                   // /v1/chat/completions (messages) or /v1/completions (prompt)
  std::vector<ChatMessage> messages;  // chat
  ChatOptions chat_options;           // chat: thinking, reasoning effort, tools (none with tool_choice none)
  std::string prompt;                 // completions
  bool add_bos = true;                // completions: BOS first unless there (`add_special_tokens`, as vLLM)
  SamplingParams sampling;
  std::optional<int> max_tokens;  // none: until the context is full
  std::vector<std::string> stop;
  bool stream = false, include_usage = false;
  int logprobs = -1;  // -1: none; else each token's log-probability with this many alternatives
  // tool_choice "required" or a named function: the reply must open with a tool call (of
  // `forced_tool`, when named).
  bool tool_required = false;
  std::string forced_tool;
};

/// `served_model` is the name /v1/models lists; a request naming another model is kNotFound.
Result<CompletionRequest> parse_completion_request(std::string_view body, bool chat, std::string_view served_model);

}  // namespace dsinfer::server

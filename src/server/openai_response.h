// The engine's results -> OpenAI response bodies: whole completions, streaming chunks (SSE), usage
// and errors in OpenAI's shape with their HTTP status.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "chat/chat_format.h"
#include "chat/chat_stream.h"
#include "core/status.h"
#include "io/tokenizer.h"
#include "runtime/sampler.h"

namespace dsinfer::server {

struct ResponseHeader {
  std::string id;  // "chatcmpl-..." or "cmpl-..."
  std::string model;
  int64_t created = 0;  // unix seconds
};

struct Usage {
  int64_t prompt_tokens = 0, completion_tokens = 0;
};

/// One generated token's log-probability as a response shows it: the token's text (raw bytes;
/// invalid UTF-8 is replaced when written), its offset in the completion's text, the likeliest
/// alternatives.
struct LogprobEntry {
  std::string token;
  float logprob = 0;
  int64_t text_offset = 0;
  std::vector<std::pair<std::string, float>> top;
};
/// Entries for generated tokens; `offset`: the completion's text length before them, moved past them.
std::vector<LogprobEntry> logprob_entries(std::span<const SampledLogprobs> tokens, const Tokenizer& tok,
                                          int64_t* offset);
/// A choice's log-probabilities; null: the request did not ask for them.
using ChoiceLogprobs = const std::vector<LogprobEntry>*;

/// "stop" (end token or stop string), "length" (token budget), "tool_calls" (a DSML block).
std::string finish_reason(bool tool_calls, bool hit_length);

/// /v1/chat/completions, stream false.
std::string chat_completion_body(const ResponseHeader& h, const ParsedCompletion& c, std::string_view finish,
                                 const Usage& usage, ChoiceLogprobs logprobs = nullptr);
/// One SSE event of a chat stream: the first carries the role; deltas of reasoning_content and
/// content; the last (finish given) the tool calls, if any, and the finish reason.
std::string chat_chunk_event(const ResponseHeader& h, const ChatStreamParser::Delta& d, bool first,
                             const std::vector<ToolCall>& tool_calls, std::optional<std::string_view> finish,
                             ChoiceLogprobs logprobs = nullptr);
/// /v1/completions, stream false / one SSE event.
std::string completion_body(const ResponseHeader& h, std::string_view text, std::string_view finish, const Usage& usage,
                            ChoiceLogprobs logprobs = nullptr);
std::string completion_chunk_event(const ResponseHeader& h, std::string_view text,
                                   std::optional<std::string_view> finish, ChoiceLogprobs logprobs = nullptr);
/// The usage-only chunk of stream_options.include_usage.
std::string usage_event(const ResponseHeader& h, bool chat, const Usage& usage);
inline constexpr std::string_view kDoneEvent = "data: [DONE]\n\n";

/// The HTTP status of an error's kind: 400 for what a request holds (kInvalidArgument,
/// kUnsupported, kCorruptFile, kInvalidConfig), 404 kNotFound, 503 kResourceExhausted, 500 kIo
/// and kInternal.
int http_status(const Status& s);
/// "invalid_request_error" for a 4xx status ("authentication_error" for 401), "server_error" for a 5xx.
std::string_view error_type(int status);
/// {"error": {"message", "type", "param", "code"}} with `code` equal to the status sent and the
/// type of that status: the one body every error response (the transport's too) should carry.
std::string error_body(int status, std::string_view message);
/// error_body(http_status(s), s.message()).
std::string error_body(const Status& s);

}  // namespace dsinfer::server

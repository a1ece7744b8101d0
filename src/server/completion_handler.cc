#include "server/completion_handler.h"

#include <chrono>
#include <memory>
#include <random>

#include "server/engine_request.h"
#include "server/openai_response.h"
#include "server/openai_schema.h"
#include "server/prompt_limits.h"

namespace dsinfer::server {
namespace {

constexpr std::string_view kJson = "application/json";
constexpr int kCheckMs = 100;              // how often a waiting request looks at its client
constexpr int kStreamKeepAliveMs = 15000;  // a comment event after this long without one: proxies keep the stream

std::string random_hex(int digits) {
  thread_local std::mt19937_64 rng(std::random_device{}());
  std::string s;
  for (int i = 0; i < digits; ++i) s += "0123456789abcdef"[rng() & 15];
  return s;
}

// A request that the engine loop ended before its client went: the server is stopping (a client
// that hangs up is not answered at all).
Status cancelled() {
  return error(ErrorKind::kResourceExhausted, "the request was cancelled: the server is stopping");
}

std::string finish_name(FinishReason f, bool tool_calls) {
  return finish_reason(tool_calls, f == FinishReason::kLength);
}

// Waits for the request's outputs and looks at its client every kCheckMs, whether outputs come or
// not. The next output; false once the request has ended or its client has gone (then it is
// cancelled). `idle` runs after kCheckMs without an output; false from it counts as gone.
class OutputWaiter {
 public:
  OutputWaiter(OutputStream& outputs, http::HttpExchange& ex, EngineLoop& loop)
      : outputs_(outputs), ex_(ex), loop_(loop) {}
  bool next(
      RequestOutput* out, const std::function<bool()>& idle = [] { return true; }) {
    for (;;) {
      bool timed_out = false;
      const bool got = outputs_.next_for(out, kCheckMs, &timed_out);
      if (!got && !timed_out) return false;
      const auto now = std::chrono::steady_clock::now();
      if (now - checked_ >= std::chrono::milliseconds(kCheckMs)) {
        checked_ = now;
        if (ex_.client_gone() || (!got && !idle())) {
          loop_.cancel(outputs_.id());
          return false;
        }
      }
      if (got) return true;
    }
  }

 private:
  OutputStream& outputs_;
  http::HttpExchange& ex_;
  EngineLoop& loop_;
  std::chrono::steady_clock::time_point checked_ = std::chrono::steady_clock::now();
};

// A response that is not streamed: waits for the whole completion, then sends one body (for chat
// with the reasoning, content and tool calls parsed out of the text).
void send_whole_response(OutputStream& outputs, const CompletionRequest& request, const ResponseHeader& header,
                         const CompletionRoute& route, http::HttpExchange& ex) {
  std::string text;
  std::vector<SampledLogprobs> sampled;
  RequestOutput out, last;
  bool ended = false;
  OutputWaiter waiter(outputs, ex, route.loop);
  while (waiter.next(&out)) {
    text += out.text;
    sampled.insert(sampled.end(), out.logprobs.begin(), out.logprobs.end());
    last = out;
    ended = out.finish != FinishReason::kNone;
  }
  if (!ended) return;  // the client has gone: nobody to answer
  if (last.finish == FinishReason::kError) return send_error(ex, error(ErrorKind::kInternal, last.error));
  if (last.finish == FinishReason::kCancelled) return send_error(ex, cancelled());
  const Usage usage{last.prompt_tokens, last.completion_tokens};
  int64_t offset = 0;
  const std::vector<LogprobEntry> entries = logprob_entries(sampled, route.tokenizer, &offset);
  const ChoiceLogprobs logprobs = request.logprobs >= 0 ? &entries : nullptr;
  if (!request.chat)
    return ex.respond(200, kJson, completion_body(header, text, finish_name(last.finish, false), usage, logprobs));
  ParsedCompletion c = parse_completion(text, request.chat_options.thinking);
  for (ToolCall& t : c.tool_calls) t.id = "call_" + random_hex(24);
  ex.respond(200, kJson,
             chat_completion_body(header, c, finish_name(last.finish, !c.tool_calls.empty()), usage, logprobs));
}

// A streamed response: server-sent events as the outputs arrive; the last output writes the
// finish, the tool calls, the usage when asked and [DONE]. A write that fails cancels the request.
void stream_response(OutputStream& outputs, const CompletionRequest& request, const ResponseHeader& header,
                     const CompletionRoute& route, http::HttpExchange& ex) {
  const http::Header no_buffering[] = {{"Cache-Control", "no-cache"}, {"X-Accel-Buffering", "no"}};
  if (!ex.start_stream(200, "text/event-stream", no_buffering)) return route.loop.cancel(outputs.id());
  ChatStreamParser parser(request.chat && request.chat_options.thinking);  // holds back a possible tag or call
  bool first = true;                                                       // chat: the first chunk carries the role
  int64_t offset = 0;  // the completion's text length so far (logprob offsets)
  auto last_event = std::chrono::steady_clock::now();
  auto keep_alive = [&] {
    const auto now = std::chrono::steady_clock::now();
    if (now - last_event < std::chrono::milliseconds(kStreamKeepAliveMs)) return true;
    last_event = now;
    return ex.write(": keep-alive\n\n");
  };
  auto write = [&](const std::string& e) {
    last_event = std::chrono::steady_clock::now();
    if (ex.write(e)) return true;
    route.loop.cancel(outputs.id());
    return false;
  };
  RequestOutput out;
  OutputWaiter waiter(outputs, ex, route.loop);
  while (waiter.next(&out, keep_alive)) {
    const std::vector<LogprobEntry> entries = logprob_entries(out.logprobs, route.tokenizer, &offset);
    const ChoiceLogprobs logprobs = request.logprobs >= 0 ? &entries : nullptr;
    if (out.finish == FinishReason::kNone) {
      bool ok = true;
      if (request.chat) {
        const ChatStreamParser::Delta d = parser.push(out.text);
        if (!d.reasoning.empty() || !d.content.empty() || !entries.empty() || first)
          ok = write(chat_chunk_event(header, d, first, {}, std::nullopt, logprobs)), first = false;
      } else if (!out.text.empty() || !entries.empty()) {
        ok = write(completion_chunk_event(header, out.text, std::nullopt, logprobs));
      }
      if (!ok) return;
      continue;
    }
    bool ok;
    if (out.finish == FinishReason::kError || out.finish == FinishReason::kCancelled) {
      // The status line went out with the first event: the error is an event of its own.
      const Status s = out.finish == FinishReason::kError ? error(ErrorKind::kInternal, out.error) : cancelled();
      if (write("data: " + error_body(s) + "\n\n")) write(std::string(kDoneEvent));
      break;
    }
    if (request.chat) {
      std::vector<ToolCall> calls;
      ChatStreamParser::Delta d = parser.push(out.text);
      const ChatStreamParser::Delta rest = parser.finish(&calls);
      d.reasoning += rest.reasoning, d.content += rest.content;
      for (ToolCall& t : calls) t.id = "call_" + random_hex(24);
      ok = write(chat_chunk_event(header, d, first, calls, finish_name(out.finish, !calls.empty()), logprobs));
    } else {
      ok = write(completion_chunk_event(header, out.text, finish_name(out.finish, false), logprobs));
    }
    if (ok && request.include_usage)
      ok = write(usage_event(header, request.chat, {out.prompt_tokens, out.completion_tokens}));
    if (ok) write(std::string(kDoneEvent));
    break;
  }
  ex.end_stream();
}

}  // namespace

void send_error(http::HttpExchange& ex, const Status& s) {
  ex.respond(http_status(s), kJson, error_body(s));
}

void handle_completion(http::HttpExchange& ex, const CompletionRoute& route) {
  auto parsed = parse_completion_request(ex.request().body, route.chat, route.model_name);
  if (!parsed.ok()) return send_error(ex, parsed.status());
  if (Status s = check_prompt_bytes(*parsed, route.tokenizer, route.context); !s.ok()) return send_error(ex, s);
  auto request = engine_request(*parsed, route.tokenizer, route.context);
  if (!request.ok()) return send_error(ex, request.status());
  auto outputs = route.loop.submit(std::move(*request));
  if (!outputs.ok()) return send_error(ex, outputs.status());
  const ResponseHeader header{
      (route.chat ? "chatcmpl-" : "cmpl-") + random_hex(24), route.model_name,
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count()};
  if (parsed->stream)
    stream_response(**outputs, *parsed, header, route, ex);
  else
    send_whole_response(**outputs, *parsed, header, route, ex);
}

}  // namespace dsinfer::server

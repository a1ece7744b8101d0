#include "server/openai_response.h"

#include "io/json.h"

namespace dsinfer::server {
namespace {

OrderedJson header(const ResponseHeader& h, std::string_view object) {
  OrderedJson j;
  j["id"] = h.id;
  j["object"] = object;
  j["created"] = h.created;
  j["model"] = h.model;
  return j;
}

OrderedJson usage_json(const Usage& u) {
  OrderedJson j;
  j["prompt_tokens"] = u.prompt_tokens;
  j["completion_tokens"] = u.completion_tokens;
  j["total_tokens"] = u.prompt_tokens + u.completion_tokens;
  return j;
}

OrderedJson tool_calls_json(const std::vector<ToolCall>& calls, bool indexed) {
  OrderedJson a = OrderedJson::array();
  for (size_t i = 0; i < calls.size(); ++i) {
    OrderedJson c;
    if (indexed) c["index"] = i;
    c["id"] = calls[i].id;
    c["type"] = "function";
    c["function"] = {{"name", calls[i].name}, {"arguments", calls[i].arguments}};
    a.push_back(std::move(c));
  }
  return a;
}

OrderedJson bytes_json(std::string_view token) {
  OrderedJson a = OrderedJson::array();
  for (unsigned char c : token) a.push_back(c);
  return a;
}

// Chat: {"content": [{token, logprob, bytes, top_logprobs: [{token, logprob, bytes}]}]}.
OrderedJson chat_logprobs_json(ChoiceLogprobs lps) {
  if (!lps) return OrderedJson();
  OrderedJson content = OrderedJson::array();
  for (const LogprobEntry& e : *lps) {
    OrderedJson top = OrderedJson::array();
    for (const auto& [t, lp] : e.top) top.push_back({{"token", t}, {"logprob", lp}, {"bytes", bytes_json(t)}});
    content.push_back(
        {{"token", e.token}, {"logprob", e.logprob}, {"bytes", bytes_json(e.token)}, {"top_logprobs", top}});
  }
  return {{"content", std::move(content)}};
}

// Completions (the legacy shape): parallel arrays, top_logprobs as {token: logprob} objects.
OrderedJson completion_logprobs_json(ChoiceLogprobs lps) {
  if (!lps) return OrderedJson();
  OrderedJson tokens = OrderedJson::array(), logprobs = OrderedJson::array(), top = OrderedJson::array(),
              offsets = OrderedJson::array();
  for (const LogprobEntry& e : *lps) {
    tokens.push_back(e.token);
    logprobs.push_back(e.logprob);
    OrderedJson alternatives = OrderedJson::object();
    for (const auto& [t, lp] : e.top) alternatives[t] = lp;
    top.push_back(std::move(alternatives));
    offsets.push_back(e.text_offset);
  }
  return {{"tokens", tokens}, {"token_logprobs", logprobs}, {"top_logprobs", top}, {"text_offset", offsets}};
}

std::string event(const OrderedJson& j) {
  return "data: " + j.dump(-1, ' ', false, OrderedJson::error_handler_t::replace) + "\n\n";
}

std::string body(const OrderedJson& j) {
  return j.dump(-1, ' ', false, OrderedJson::error_handler_t::replace);
}

}  // namespace

std::vector<LogprobEntry> logprob_entries(std::span<const SampledLogprobs> tokens, const Tokenizer& tok,
                                          int64_t* offset) {
  const auto text = [&](int32_t id) { return tok.decode_bytes(std::span<const int32_t>(&id, 1)); };
  std::vector<LogprobEntry> out;
  for (const SampledLogprobs& s : tokens) {
    LogprobEntry e;
    e.token = text(s.chosen.token);
    e.logprob = s.chosen.logprob;
    e.text_offset = *offset;
    *offset += static_cast<int64_t>(e.token.size());
    for (const TokenLogprob& t : s.top) e.top.emplace_back(text(t.token), t.logprob);
    out.push_back(std::move(e));
  }
  return out;
}

std::string finish_reason(bool tool_calls, bool hit_length) {
  return tool_calls ? "tool_calls" : hit_length ? "length" : "stop";
}

std::string chat_completion_body(const ResponseHeader& h, const ParsedCompletion& c, std::string_view finish,
                                 const Usage& usage, ChoiceLogprobs logprobs) {
  OrderedJson j = header(h, "chat.completion");
  OrderedJson msg;
  msg["role"] = "assistant";
  msg["content"] = c.content.empty() && !c.tool_calls.empty() ? OrderedJson() : OrderedJson(c.content);
  if (!c.reasoning_content.empty()) msg["reasoning_content"] = c.reasoning_content;
  if (!c.tool_calls.empty()) msg["tool_calls"] = tool_calls_json(c.tool_calls, false);
  OrderedJson choice;
  choice["index"] = 0;
  choice["message"] = std::move(msg);
  choice["logprobs"] = chat_logprobs_json(logprobs);
  choice["finish_reason"] = finish;
  j["choices"] = OrderedJson::array({std::move(choice)});
  j["usage"] = usage_json(usage);
  return body(j);
}

std::string chat_chunk_event(const ResponseHeader& h, const ChatStreamParser::Delta& d, bool first,
                             const std::vector<ToolCall>& tool_calls, std::optional<std::string_view> finish,
                             ChoiceLogprobs logprobs) {
  OrderedJson j = header(h, "chat.completion.chunk");
  OrderedJson delta = OrderedJson::object();
  if (first) delta["role"] = "assistant";
  if (!d.reasoning.empty()) delta["reasoning_content"] = d.reasoning;
  if (!d.content.empty()) delta["content"] = d.content;
  if (!tool_calls.empty()) delta["tool_calls"] = tool_calls_json(tool_calls, true);
  OrderedJson choice;
  choice["index"] = 0;
  choice["delta"] = std::move(delta);
  choice["logprobs"] = chat_logprobs_json(logprobs);
  choice["finish_reason"] = finish ? OrderedJson(*finish) : OrderedJson();
  j["choices"] = OrderedJson::array({std::move(choice)});
  return event(j);
}

std::string completion_body(const ResponseHeader& h, std::string_view text, std::string_view finish, const Usage& usage,
                            ChoiceLogprobs logprobs) {
  OrderedJson j = header(h, "text_completion");
  j["choices"] = OrderedJson::array(
      {{{"index", 0}, {"text", text}, {"logprobs", completion_logprobs_json(logprobs)}, {"finish_reason", finish}}});
  j["usage"] = usage_json(usage);
  return body(j);
}

std::string completion_chunk_event(const ResponseHeader& h, std::string_view text,
                                   std::optional<std::string_view> finish, ChoiceLogprobs logprobs) {
  OrderedJson j = header(h, "text_completion");
  j["choices"] = OrderedJson::array({{{"index", 0},
                                      {"text", text},
                                      {"logprobs", completion_logprobs_json(logprobs)},
                                      {"finish_reason", finish ? OrderedJson(*finish) : OrderedJson()}}});
  return event(j);
}

std::string usage_event(const ResponseHeader& h, bool chat, const Usage& usage) {
  OrderedJson j = header(h, chat ? "chat.completion.chunk" : "text_completion");
  j["choices"] = OrderedJson::array();
  j["usage"] = usage_json(usage);
  return event(j);
}

// Once the model is loaded, every error a request meets comes from what the request holds (a
// field, a tool schema, a JSON text inside it), so the file-and-config kinds are a 400 here too;
// only capacity (503), the OS and bugs (500) are the server's.
int http_status(const Status& s) {
  switch (s.kind()) {
    case ErrorKind::kInvalidArgument:
    case ErrorKind::kUnsupported:
    case ErrorKind::kCorruptFile:
    case ErrorKind::kInvalidConfig:
      return 400;
    case ErrorKind::kNotFound:
      return 404;
    case ErrorKind::kResourceExhausted:
    case ErrorKind::kUnavailable:
      return 503;
    case ErrorKind::kIo:
    case ErrorKind::kInternal:
      return 500;
  }
  return 500;
}

std::string_view error_type(int status) {
  if (status == 401) return "authentication_error";  // what the API-key check has always sent
  return status >= 500 ? "server_error" : "invalid_request_error";
}

std::string error_body(int status, std::string_view message) {
  OrderedJson e;
  e["message"] = message;
  e["type"] = error_type(status);
  e["param"] = OrderedJson();
  e["code"] = status;
  return body(OrderedJson{{"error", std::move(e)}});
}

std::string error_body(const Status& s) {
  return error_body(http_status(s), s.message());
}

}  // namespace dsinfer::server

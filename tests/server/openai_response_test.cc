// OpenAI response bodies and SSE events: the fields clients read (the openai npm package's types).
#include "server/openai_response.h"

#include <gtest/gtest.h>

#include "io/json.h"

namespace dsinfer::server {
namespace {

const ResponseHeader kHeader{"chatcmpl-1", "dsinfer", 1700000000};

Json parse_event(const std::string& e) {
  EXPECT_TRUE(e.starts_with("data: ") && e.ends_with("\n\n")) << e;
  return Json::parse(e.substr(6, e.size() - 8));
}

TEST(OpenAiResponse, ChatCompletionWithReasoningAndToolCalls) {
  ParsedCompletion c;
  c.reasoning_content = "think";
  c.tool_calls = {{"call_0", "f", R"({"x": 1})"}};
  const Json j = Json::parse(chat_completion_body(kHeader, c, finish_reason(true, false), {10, 4}));
  EXPECT_EQ(j["object"], "chat.completion");
  const Json& m = j["choices"][0]["message"];
  EXPECT_EQ(m["role"], "assistant");
  EXPECT_TRUE(m["content"].is_null());
  EXPECT_EQ(m["reasoning_content"], "think");
  EXPECT_EQ(m["tool_calls"][0]["function"]["name"], "f");
  EXPECT_EQ(m["tool_calls"][0]["function"]["arguments"], R"({"x": 1})");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "tool_calls");
  EXPECT_EQ(j["usage"]["total_tokens"], 14);
}

TEST(OpenAiResponse, StreamingChunksAndUsage) {
  Json first = parse_event(chat_chunk_event(kHeader, {"r", ""}, true, {}, std::nullopt));
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(first["choices"][0]["delta"]["reasoning_content"], "r");
  EXPECT_TRUE(first["choices"][0]["finish_reason"].is_null());
  Json last = parse_event(chat_chunk_event(kHeader, {"", "end"}, false, {}, "length"));
  EXPECT_EQ(last["choices"][0]["delta"]["content"], "end");
  EXPECT_FALSE(last["choices"][0]["delta"].contains("role"));
  EXPECT_EQ(last["choices"][0]["finish_reason"], "length");
  Json usage = parse_event(usage_event(kHeader, true, {3, 5}));
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["completion_tokens"], 5);
  const Json text = Json::parse(completion_body(kHeader, "once", "stop", {1, 1}));
  EXPECT_EQ(text["object"], "text_completion");
  EXPECT_EQ(text["choices"][0]["text"], "once");
  EXPECT_EQ(kDoneEvent, "data: [DONE]\n\n");
}

TEST(OpenAiResponse, ErrorsInOpenAisShape) {
  const Status bad = error(ErrorKind::kInvalidArgument, "'top_p': must be in (0, 1]");
  EXPECT_EQ(http_status(bad), 400);
  const Json j = Json::parse(error_body(bad));
  EXPECT_EQ(j["error"]["type"], "invalid_request_error");
  EXPECT_EQ(j["error"]["message"], "'top_p': must be in (0, 1]");
  EXPECT_EQ(http_status(error(ErrorKind::kNotFound, "model")), 404);
  EXPECT_EQ(http_status(error(ErrorKind::kResourceExhausted, "busy")), 503);
}

// The probe saw bodies whose code disagreed with the status (413 with code 400, 400 with code
// 500) and library errors from bad input sent as 500: the code is the status, the type follows it.
TEST(OpenAiResponse, ErrorCodeIsTheStatusAndTypeFollowsIt) {
  const std::pair<ErrorKind, int> kinds[] = {
      {ErrorKind::kInvalidArgument, 400},
      {ErrorKind::kUnsupported, 400},
      {ErrorKind::kCorruptFile, 400},
      {ErrorKind::kInvalidConfig, 400},
      {ErrorKind::kNotFound, 404},
      {ErrorKind::kResourceExhausted, 503},
      {ErrorKind::kIo, 500},
      {ErrorKind::kInternal, 500},
  };
  for (const auto& [kind, status] : kinds) {
    const Status s = error(kind, "why");
    EXPECT_EQ(http_status(s), status) << error_kind_name(kind);
    const Json j = Json::parse(error_body(s));
    EXPECT_EQ(j["error"]["code"], status) << error_kind_name(kind);
    EXPECT_EQ(j["error"]["type"], status < 500 ? "invalid_request_error" : "server_error") << error_kind_name(kind);
    EXPECT_EQ(j["error"]["message"], "why");
    EXPECT_TRUE(j["error"]["param"].is_null());
  }
  for (const int status : {400, 401, 404, 405, 413, 414, 431, 500, 503}) {
    const Json j = Json::parse(error_body(status, "m"));
    EXPECT_EQ(j["error"]["code"], status);
    EXPECT_EQ(j["error"]["type"], status == 401  ? "authentication_error"
                                  : status < 500 ? "invalid_request_error"
                                                 : "server_error")
        << status;
  }
}

}  // namespace
}  // namespace dsinfer::server

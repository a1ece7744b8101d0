// OpenAI request validation: the fields the API takes, and an error naming the field for each
// malformed one (wrong type, out of range, unknown model).
#include "server/openai_schema.h"

#include <gtest/gtest.h>

namespace dsinfer::server {
namespace {

Result<CompletionRequest> chat(std::string_view body) {
  return parse_completion_request(body, true, "dsinfer");
}

TEST(OpenAiSchema, ChatRequestWithEveryField) {
  const auto r = chat(R"({"model": "dsinfer", "messages": [{"role": "user", "content": "hi"}],
      "temperature": 0.5, "top_p": 0.9, "top_k": -1, "min_p": 0.05, "seed": 7, "max_completion_tokens": 33,
      "stop": ["x", "yz"], "presence_penalty": 0.1, "frequency_penalty": 0.2, "stream": true,
      "stream_options": {"include_usage": true}, "logprobs": false,
      "reasoning_effort": "max", "thinking": {"type": "enabled"},
      "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
      "tool_choice": "auto", "user": "ignored"})");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->messages.size(), 1u);
  EXPECT_FLOAT_EQ(r->sampling.temperature, 0.5f);
  EXPECT_EQ(r->sampling.top_k, 0);
  EXPECT_EQ(r->sampling.seed, 7u);
  EXPECT_EQ(r->max_tokens, 33);
  EXPECT_EQ(r->stop, (std::vector<std::string>{"x", "yz"}));
  EXPECT_TRUE(r->stream && r->include_usage);
  EXPECT_EQ(r->chat_options.reasoning_effort, 100);
  EXPECT_TRUE(r->chat_options.thinking);
  ASSERT_EQ(r->chat_options.tools.size(), 1u);
}

TEST(OpenAiSchema, ThinkingSwitchesAndToolChoiceNone) {
  auto r = chat(R"({"messages": [{"role": "user", "content": "hi"}], "thinking": {"type": "disabled"}})");
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->chat_options.thinking);
  r = chat(R"({"messages": [{"role": "user", "content": "hi"}], "chat_template_kwargs": {"thinking": false}})");
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->chat_options.thinking);
  r = chat(R"({"messages": [{"role": "user", "content": "hi"}], "tool_choice": "none",
      "tools": [{"type": "function", "function": {"name": "f"}}]})");
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->chat_options.tools.empty());
  const auto c = parse_completion_request(R"({"prompt": "once upon", "max_tokens": 5})", false, "dsinfer");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->prompt, "once upon");
  EXPECT_EQ(c->max_tokens, 5);
}

TEST(OpenAiSchema, LogprobsAndForcedToolChoice) {
  auto r = chat(R"({"messages": [{"role": "user", "content": "hi"}], "logprobs": true, "top_logprobs": 4})");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->logprobs, 4);
  r = chat(R"({"messages": [{"role": "user", "content": "hi"}], "logprobs": true})");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->logprobs, 0);
  r = chat(R"({"messages": [{"role": "user", "content": "hi"}]})");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->logprobs, -1);
  EXPECT_FALSE(r->tool_required);
  const auto c = parse_completion_request(R"({"prompt": "x", "logprobs": 2})", false, "dsinfer");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->logprobs, 2);
  const std::string tools =
      R"("tools": [{"type": "function", "function": {"name": "f"}}, {"type": "function", "function": {"name": "g"}}])";
  r = chat(R"({"messages": [{"role": "user", "content": "hi"}], "tool_choice": "required", )" + tools + "}");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_TRUE(r->tool_required);
  EXPECT_EQ(r->forced_tool, "");
  r = chat(
      R"({"messages": [{"role": "user", "content": "hi"}], "tool_choice": {"type": "function", "function": {"name": "g"}}, )" +
      tools + "}");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_TRUE(r->tool_required);
  EXPECT_EQ(r->forced_tool, "g");
}

TEST(OpenAiSchema, MalformedRequestsNameTheField) {
  const std::pair<const char*, const char*> cases[] = {
      {"{", "invalid JSON"},
      {"[]", "'body'"},
      {R"({"model": "dsinfer"})", "'messages'"},
      {R"({"messages": "hi"})", "messages"},
      {R"({"messages": [{"role": "user", "content": "hi"}], "temperature": "hot"})", "'temperature'"},
      {R"({"messages": [{"role": "user", "content": "hi"}], "temperature": -1})", "'temperature'"},
      {R"({"messages": [{"role": "user", "content": "hi"}], "top_p": 0})", "'top_p'"},
      {R"({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 0})", "'max_tokens'"},
      {R"({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1.5})", "'max_tokens'"},
      {R"({"messages": [{"role": "user", "content": "hi"}], "stop": 3})", "'stop'"},
      {R"({"messages": [{"role": "user", "content": "hi"}], "stop": ["a","b","c","d","e"]})", "'stop'"},
      {R"({"messages": [{"role": "user", "content": "hi"}], "stream": "yes"})", "'stream'"},
      {R"({"messages": [{"role": "user", "content": "hi"}], "logprobs": true, "top_logprobs": 21})", "'top_logprobs'"},
      {R"({"messages": [{"role": "user", "content": "hi"}], "top_logprobs": 2})", "needs logprobs"},
      {R"({"messages": [{"role": "user", "content": "hi"}], "logprobs": 3})", "'logprobs'"},
      {R"({"messages": [{"role": "user", "content": "hi"}], "tool_choice": "required"})", "no tools"},
      {R"({"messages": [{"role": "user", "content": "hi"}], "tool_choice": {"type": "function"}})", "'tool_choice'"},
      {R"({"messages": [{"role": "user", "content": "hi"}], "tool_choice": {"type": "function", "function": {"name": "g"}},
          "tools": [{"type": "function", "function": {"name": "f"}}]})",
       "'g' is not among"},
      {R"({"messages": [{"role": "user", "content": "hi"}], "reasoning_effort": "huge"})", "'reasoning_effort'"},
      {R"({"messages": [{"role": "user", "content": "hi"}], "thinking": {"type": "maybe"}})", "'thinking.type'"},
      {R"({"messages": [{"role": "user", "content": "hi"}], "tool_choice": "sometimes"})", "'tool_choice'"},
      {R"({"messages": [{"role": "user", "content": "hi"}], "tools": {}})", "tools"},
  };
  for (const auto& [body, needle] : cases) {
    const auto r = chat(body);
    ASSERT_FALSE(r.ok()) << body;
    EXPECT_EQ(r.status().kind(), ErrorKind::kInvalidArgument) << body;
    EXPECT_NE(r.status().message().find(needle), std::string::npos) << body << " -> " << r.status().message();
  }
  // Nesting past kMaxJsonDepth anywhere in the body, even in a field nobody reads.
  const std::string deep = R"({"messages": [{"role": "user", "content": "hi"}], "x": )" + std::string(129, '[') +
                           std::string(129, ']') + "}";
  const auto too_deep = chat(deep);
  ASSERT_FALSE(too_deep.ok());
  EXPECT_EQ(too_deep.status().kind(), ErrorKind::kInvalidArgument);
  EXPECT_EQ(too_deep.status().message(), "request body: JSON nested deeper than 128 levels");
  const auto unknown = chat(R"({"model": "gpt-4", "messages": [{"role": "user", "content": "hi"}]})");
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().kind(), ErrorKind::kNotFound);
}

}  // namespace
}  // namespace dsinfer::server

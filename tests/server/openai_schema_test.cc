// OpenAI request validation: the fields the API takes, and an error naming the field for each
// malformed one (wrong type, out of range, unknown model).
#include "server/openai_schema.h"

#include <gtest/gtest.h>

#include <limits>
#include <string>

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

// /v1/completions puts BOS first unless add_special_tokens (vLLM's name) is false.
TEST(OpenAiSchema, CompletionsAddSpecialTokens) {
  const auto plain = parse_completion_request(R"({"prompt": "hi"})", false, "dsinfer");
  ASSERT_TRUE(plain.ok()) << plain.status().message();
  EXPECT_TRUE(plain->add_bos);
  const auto off = parse_completion_request(R"({"prompt": "hi", "add_special_tokens": false})", false, "dsinfer");
  ASSERT_TRUE(off.ok()) << off.status().message();
  EXPECT_FALSE(off->add_bos);
  const auto bad = parse_completion_request(R"({"prompt": "hi", "add_special_tokens": 0})", false, "dsinfer");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("add_special_tokens"), std::string::npos) << bad.status().message();
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

// The probe's fields that were ignored or wrapped (n, response_format, stream_options, integers
// past their type): each is refused naming the field, the range where there is one.
Status chat_with(const std::string& fields) {
  return chat(R"({"messages": [{"role": "user", "content": "hi"}], )" + fields + "}").status();
}

#define EXPECT_REFUSED(fields, want_kind, needle)                                                  \
  do {                                                                                             \
    const Status st = chat_with(fields);                                                           \
    EXPECT_EQ(st.kind(), want_kind) << (fields) << " -> " << st.message();                         \
    EXPECT_NE(st.message().find(needle), std::string::npos) << (fields) << " -> " << st.message(); \
  } while (0)

TEST(OpenAiSchema, ChoiceCountOtherThanOneIsRefused) {
  EXPECT_TRUE(chat_with(R"("n": 1)").ok());
  EXPECT_TRUE(chat_with(R"("n": null)").ok());
  EXPECT_REFUSED(R"("n": 3)", ErrorKind::kUnsupported, "'n': this server returns one choice per request; 3");
  EXPECT_REFUSED(R"("n": 2)", ErrorKind::kUnsupported, "'n'");
  EXPECT_REFUSED(R"("n": "x")", ErrorKind::kInvalidArgument, "'n': expected an integer, got string");
  EXPECT_REFUSED(R"("n": 0)", ErrorKind::kInvalidArgument, "'n': must be an integer in [1, ");
  EXPECT_REFUSED(R"("n": 1.5)", ErrorKind::kInvalidArgument, "'n'");
  EXPECT_REFUSED(R"("best_of": 2)", ErrorKind::kUnsupported, "'best_of'");
  const auto completion = parse_completion_request(R"({"prompt": "a", "n": 2})", false, "dsinfer");
  EXPECT_EQ(completion.status().kind(), ErrorKind::kUnsupported);
}

TEST(OpenAiSchema, ResponseFormatOtherThanTextIsRefused) {
  EXPECT_TRUE(chat_with(R"("response_format": {"type": "text"})").ok());
  EXPECT_TRUE(chat_with(R"("response_format": null)").ok());
  EXPECT_REFUSED(R"("response_format": {"type": "json_object"})", ErrorKind::kUnsupported,
                 "'response_format': type 'json_object' is not supported (no constrained decoding)");
  EXPECT_REFUSED(R"("response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {}}})",
                 ErrorKind::kUnsupported, "'json_schema' is not supported");
  EXPECT_REFUSED(R"("response_format": 5)", ErrorKind::kInvalidArgument, "'response_format'");
  EXPECT_REFUSED(R"("response_format": {})", ErrorKind::kInvalidArgument, "'response_format'");
}

TEST(OpenAiSchema, StreamOptionsMustBeAnObjectWithABooleanIncludeUsage) {
  auto r = chat(R"({"messages": [{"role": "user", "content": "hi"}], "stream": true, "stream_options": null})");
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->include_usage);
  r = chat(R"({"messages": [{"role": "user", "content": "hi"}], "stream": true, "stream_options": {}})");
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->include_usage);
  EXPECT_REFUSED(R"("stream": true, "stream_options": "x")", ErrorKind::kInvalidArgument,
                 "'stream_options': expected an object, got string");
  EXPECT_REFUSED(R"("stream": true, "stream_options": [true])", ErrorKind::kInvalidArgument, "'stream_options'");
  EXPECT_REFUSED(R"("stream": true, "stream_options": {"include_usage": "yes"})", ErrorKind::kInvalidArgument,
                 "'stream_options.include_usage': expected a boolean, got string");
  EXPECT_REFUSED(R"("stream_options": {"include_usage": true})", ErrorKind::kInvalidArgument,
                 "'stream_options': only allowed with stream: true");
}

TEST(OpenAiSchema, IntegersAreRangeCheckedBeforeNarrowing) {
  // top_k 2^32 + 1 used to wrap to 1 (greedy); 2^64 - 1 and 2^63 as max_tokens wrapped negative.
  EXPECT_REFUSED(R"("top_k": 4294967297)", ErrorKind::kInvalidArgument,
                 "'top_k': must be an integer in [-1, 2147483647], got 4294967297");
  EXPECT_REFUSED(R"("top_k": 2147483648)", ErrorKind::kInvalidArgument, "'top_k': must be an integer in [-1, ");
  EXPECT_REFUSED(R"("top_k": -2)", ErrorKind::kInvalidArgument, "'top_k'");
  EXPECT_REFUSED(R"("top_k": 1.5)", ErrorKind::kInvalidArgument, "'top_k': must be an integer in");
  EXPECT_REFUSED(R"("max_tokens": 18446744073709551615)", ErrorKind::kInvalidArgument,
                 "'max_tokens': must be an integer in [1, 9223372036854775807], got 18446744073709551615");
  EXPECT_REFUSED(R"("max_tokens": 9223372036854775808)", ErrorKind::kInvalidArgument, "'max_tokens'");
  EXPECT_REFUSED(R"("max_tokens": -5)", ErrorKind::kInvalidArgument, "'max_tokens': must be an integer in [1, ");
  EXPECT_REFUSED(R"("max_tokens": 1e30)", ErrorKind::kInvalidArgument, "'max_tokens'");
  EXPECT_REFUSED(R"("max_completion_tokens": 0)", ErrorKind::kInvalidArgument, "'max_completion_tokens'");
  EXPECT_REFUSED(R"("seed": 18446744073709551615)", ErrorKind::kInvalidArgument,
                 "'seed': must be an integer in [-9223372036854775808, 9223372036854775807]");
  EXPECT_REFUSED(R"("seed": 1.5)", ErrorKind::kInvalidArgument, "'seed'");
  EXPECT_REFUSED(R"("logprobs": true, "top_logprobs": 18446744073709551615)", ErrorKind::kInvalidArgument,
                 "'top_logprobs': must be an integer in [0, 20]");
  EXPECT_REFUSED(R"("logprobs": true, "top_logprobs": -1)", ErrorKind::kInvalidArgument, "'top_logprobs'");
  // Completions' logprobs: 2^64 - 1 read as int64 was -1, "no logprobs", and passed.
  const auto lp = parse_completion_request(R"({"prompt": "a", "logprobs": 18446744073709551615})", false, "dsinfer");
  EXPECT_EQ(lp.status().kind(), ErrorKind::kInvalidArgument);
  EXPECT_NE(lp.status().message().find("'logprobs': must be an integer in [0, 20]"), std::string::npos)
      << lp.status().message();

  // The edges themselves are accepted; a budget past the context is clamped later, not refused.
  auto r = chat(R"({"messages": [{"role": "user", "content": "hi"}], "top_k": 2147483647, "seed": -1,
      "max_tokens": 9223372036854775807})");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->sampling.top_k, 2147483647);
  EXPECT_EQ(r->sampling.seed, std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(r->max_tokens, 1 << 30);
  r = chat(R"({"messages": [{"role": "user", "content": "hi"}], "seed": 9223372036854775807})");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->sampling.seed, 9223372036854775807u);  // distinct from seed -1
}

TEST(OpenAiSchema, SamplingValuesThatBreakTheLogitsAreRefused) {
  EXPECT_REFUSED(R"("repetition_penalty": 1e-45)", ErrorKind::kInvalidArgument,
                 "'repetition_penalty' must be in [0.01, 100]");
  EXPECT_REFUSED(R"("repetition_penalty": 1e308)", ErrorKind::kInvalidArgument, "'repetition_penalty'");
  EXPECT_REFUSED(R"("repetition_penalty": 0)", ErrorKind::kInvalidArgument, "'repetition_penalty'");
  EXPECT_REFUSED(R"("temperature": 1e308)", ErrorKind::kInvalidArgument, "'temperature' must be in [0, 100]");
  EXPECT_REFUSED(R"("min_p": 1e39)", ErrorKind::kInvalidArgument, "'min_p'");
  EXPECT_REFUSED(R"("presence_penalty": -1e39)", ErrorKind::kInvalidArgument, "'presence_penalty'");
  EXPECT_TRUE(chat_with(R"("repetition_penalty": 0.01, "temperature": 100, "top_p": 1e-45)").ok());
}

// OpenAI fields that would change the answer are refused when they ask for something and pass
// at their neutral values.
TEST(OpenAiSchema, UnimplementedFieldsAreRefusedNotIgnored) {
  for (const char* field :
       {R"("echo": true)", R"("suffix": "tail")", R"("logit_bias": {"50": 100})", R"("functions": [{"name": "f"}])",
        R"("function_call": "auto")", R"("parallel_tool_calls": false)", R"("prediction": {"type": "content"})",
        R"("audio": {"voice": "x"})"})
    EXPECT_REFUSED(field, ErrorKind::kUnsupported, "is not supported");
  for (const char* field : {R"("echo": false)", R"("suffix": "")", R"("logit_bias": {})",
                            R"("parallel_tool_calls": true)", R"("audio": null)", R"("user": "someone")"})
    EXPECT_TRUE(chat_with(field).ok()) << field;
}

}  // namespace
}  // namespace dsinfer::server

// The chat types' JSON side: message parts, tool objects kept as given, call arguments.
#include "chat/chat_json.h"

#include <gtest/gtest.h>

namespace dsinfer {
namespace {

OrderedJson parse(std::string_view text) {
  auto j = parse_ordered_json(text, "test");
  EXPECT_TRUE(j.ok()) << j.status().message();
  return j.ok() ? *j : OrderedJson();
}

TEST(ChatJson, MessagesWithPartsImagesAndEncoderFields) {
  const auto m = chat_messages_from_json(parse(R"([
      {"role": "system", "content": null, "response_format": {"type": "json_object"}},
      {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "image_url", "image_url": {"url": "x.png"}}],
       "task": "query"},
      {"role": "assistant", "content": "b", "wo_eos": true,
       "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": {"z": 1, "a": 2}}}]}])"));
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ(*(*m)[0].response_format, R"({"type": "json_object"})");
  EXPECT_EQ(content_text((*m)[1]), "a\n\n<｜deepseek_image｜>");
  EXPECT_EQ((*m)[1].task, "query");
  EXPECT_TRUE((*m)[2].wo_eos);
  EXPECT_EQ((*m)[2].tool_calls[0].arguments, R"({"z": 1, "a": 2})");
  for (const char* bad :
       {R"([{"role": "robot"}])", R"([{"role": "user", "content": [{"type": "image_url"}]}])",
        R"([{"role": "user", "content": [{"type": "audio"}]}])", R"([{"role": "user", "content": 3}])"})
    EXPECT_FALSE(chat_messages_from_json(parse(bad)).ok()) << bad;
}

TEST(ChatJson, ToolObjectsAreDumpedAsGiven) {
  const auto t = tool_specs_from_json(parse(R"([{"type": "function", "function": {"strict": true, "name": "f",
      "parameters": {"b": 1, "a": "é"}}}])"));
  ASSERT_TRUE(t.ok());
  EXPECT_EQ((*t)[0].name, "f");
  EXPECT_EQ((*t)[0].function_json, R"({"strict": true, "name": "f", "parameters": {"b": 1, "a": "é"}})");
  EXPECT_FALSE(tool_specs_from_json(parse(R"([{"type": "function"}])")).ok());
}

TEST(ChatJson, ReasoningEffortAndOptions) {
  EXPECT_EQ(*reasoning_effort_from_json(OrderedJson()), 75);
  EXPECT_EQ(*reasoning_effort_from_json(OrderedJson("low")), 50);
  EXPECT_EQ(*reasoning_effort_from_json(OrderedJson(100)), 100);
  for (const OrderedJson& bad : {OrderedJson("medium"), OrderedJson("50"), OrderedJson(0), OrderedJson(50.0)})
    EXPECT_FALSE(reasoning_effort_from_json(bad).ok()) << bad.dump();
  const auto o = chat_options_from_json(parse(R"({"thinking_mode": "chat", "drop_thinking": false,
      "add_default_bos_token": false, "context": [{"role": "user", "content": "x"}]})"));
  ASSERT_TRUE(o.ok());
  EXPECT_FALSE(o->thinking || o->drop_thinking || o->add_bos);
  EXPECT_EQ(o->context.size(), 1u);
  EXPECT_FALSE(chat_options_from_json(parse(R"({"thinking_mode": "non-thinking"})")).ok());
}

TEST(ChatJson, CallArguments) {
  const auto args = tool_arguments_from_json(R"({"city": "Oslo", "days": 2, "opts": {"b": [1, true], "a": null}})");
  ASSERT_TRUE(args.ok());
  ASSERT_EQ(args->size(), 3u);
  EXPECT_TRUE((*args)[0].is_string);
  EXPECT_EQ((*args)[0].value, "Oslo");
  EXPECT_EQ((*args)[2].value, R"({"b": [1, true], "a": null})");
  const auto twice = tool_arguments_from_json(R"("{\"x\": 1.0}")");
  ASSERT_TRUE(twice.ok());
  EXPECT_EQ((*twice)[0].value, "1.0");
  EXPECT_TRUE(tool_arguments_from_json("")->empty());
  for (const char* bad : {"[1, 2]", "\"text\"", "{"}) EXPECT_FALSE(tool_arguments_from_json(bad).ok()) << bad;
}

}  // namespace
}  // namespace dsinfer

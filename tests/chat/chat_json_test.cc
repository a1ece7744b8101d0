// The chat types from OpenAI JSON (messages, tools), and the JSON text of tool schemas and call
// arguments the encoding writes into prompts and reads back.
#include "chat/chat_json.h"

#include <gtest/gtest.h>

namespace dsinfer {
namespace {

TEST(ChatJson, MessagesAndToolsFromOpenAiShapes) {
  const OrderedJson j = OrderedJson::parse(R"([
    {"role": "system", "content": "s"},
    {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
    {"role": "assistant", "content": null, "tool_calls": [
      {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{\"z\": 1, \"a\": 2}"}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "r"}])");
  auto m = chat_messages_from_json(j);
  ASSERT_TRUE(m.ok()) << m.status().message();
  ASSERT_EQ(m->size(), 4u);
  EXPECT_EQ((*m)[1].content, "ab");
  EXPECT_EQ((*m)[2].tool_calls[0].arguments, R"({"z": 1, "a": 2})");
  EXPECT_EQ((*m)[3].tool_call_id, "c1");
  for (const char* bad :
       {R"([])", R"([{"content": "x"}])", R"([{"role": "robot", "content": "x"}])",
        R"([{"role": "user", "content": 5}])", R"([{"role": "assistant", "tool_calls": [{"function": {}}]}])"}) {
    const auto r = chat_messages_from_json(OrderedJson::parse(bad));
    EXPECT_FALSE(r.ok()) << bad;
    if (!r.ok()) {
      EXPECT_NE(r.status().message().find("messages"), std::string::npos) << r.status().message();
    }
  }
  auto t = tool_specs_from_json(
      OrderedJson::parse(R"([{"type": "function", "function": {"name": "f", "parameters": {"b": 1, "a": 2}}}])"));
  ASSERT_TRUE(t.ok());
  EXPECT_EQ((*t)[0].parameters, R"({"b": 1, "a": 2})");
  EXPECT_FALSE(tool_specs_from_json(OrderedJson::parse(R"([{"type": "function"}])")).ok());
}

TEST(ChatJson, ToolSchemaLineKeepsTheWrittenKeyOrder) {
  const ToolSpec t{"f", "does f", R"({"type":"object","properties":{"z":{"type":"number"},"a":{}}})"};
  const auto line = tool_schema_line(t);
  ASSERT_TRUE(line.ok()) << line.status().message();
  EXPECT_EQ(*line, R"({"name": "f", "description": "does f", "parameters": {"type": "object", )"
                   R"("properties": {"z": {"type": "number"}, "a": {}}}})");
  EXPECT_FALSE(tool_schema_line(ToolSpec{"f", "", "[1,"}).ok());
}

// The schema travels as text between tool_specs_from_json and the prompt: its line must be what
// dumping the request's JSON directly gives, whatever the numbers and strings.
TEST(ChatJson, SchemaTextSpellsTheRequestsJson) {
  const OrderedJson request = OrderedJson::parse(R"([{"type": "function", "function": {"name": "f",
    "description": "é \"q\" \u0001", "parameters": {"n": [0.1, -0.0, 1e300, 12345678901234567890, -7, 2.5e-8],
    "s": "tab\t ünï \ud83d\ude00 <｜DSML｜>", "o": {"z": null, "a": [true, false, {}]}}}}])");
  const auto specs = tool_specs_from_json(request);
  ASSERT_TRUE(specs.ok()) << specs.status().message();
  OrderedJson direct;
  direct["name"] = "f";
  direct["description"] = request[0]["function"]["description"];
  direct["parameters"] = request[0]["function"]["parameters"];
  const auto line = tool_schema_line((*specs)[0]);
  ASSERT_TRUE(line.ok()) << line.status().message();
  EXPECT_EQ(*line, python_json_dumps(direct));
}

TEST(ChatJson, ToolArgumentsBothWays) {
  const auto args = tool_arguments_from_json(R"({"city": "Oslo", "days": 2, "opts": {"b": [1, true], "a": null}})");
  ASSERT_TRUE(args.ok()) << args.status().message();
  ASSERT_EQ(args->size(), 3u);
  EXPECT_EQ((*args)[0].name, "city");
  EXPECT_TRUE((*args)[0].is_string);
  EXPECT_EQ((*args)[0].value, "Oslo");
  EXPECT_FALSE((*args)[1].is_string);
  EXPECT_EQ((*args)[1].value, "2");
  EXPECT_EQ((*args)[2].value, R"({"b": [1, true], "a": null})");
  const auto back = tool_arguments_to_json(*args);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, R"({"city": "Oslo", "days": 2, "opts": {"b": [1, true], "a": null}})");

  EXPECT_TRUE(tool_arguments_from_json("")->empty());  // no arguments: {}
  for (const char* bad : {"[1, 2]", "\"text\"", "{"}) EXPECT_FALSE(tool_arguments_from_json(bad).ok()) << bad;
  EXPECT_EQ(*tool_arguments_to_json({}), "{}");
  const std::vector<ToolArgument> repeated = {{"x", false, "1"}, {"y", true, "s"}, {"x", false, "2"}};
  EXPECT_EQ(*tool_arguments_to_json(repeated), R"({"x": 2, "y": "s"})");
  const std::vector<ToolArgument> not_json = {{"x", false, "not json"}};
  EXPECT_FALSE(tool_arguments_to_json(not_json).ok());
}

}  // namespace
}  // namespace dsinfer

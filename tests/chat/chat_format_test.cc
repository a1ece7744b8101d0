// Chat encoding: hand-checked prompts for each message kind and mode, multi-turn with tool
// results, and the completion parser (reasoning, content, DSML tool calls, malformed DSML).
#include "chat/chat_format.h"

#include <gtest/gtest.h>

namespace dsinfer {
namespace {

const std::string kBos = "<｜begin▁of▁sentence｜>", kEos = "<｜end▁of▁sentence｜>";
const std::string kSys = "<｜System｜>", kUser = "<｜User｜>", kAsst = "<｜Assistant｜>";

std::string effort(int b) {
  return kSys + "Reasoning Effort: " + std::to_string(b) +
         " (range 1-100, the higher the value, the more thorough the reasoning)\n\n";
}

ChatOptions chat_mode() {
  ChatOptions o;
  o.thinking = false;
  return o;
}
ChatOptions effort_option(int b) {
  ChatOptions o;
  o.reasoning_effort = b;
  return o;
}

std::string render(const std::vector<ChatMessage>& m, const ChatOptions& o) {
  auto r = render_chat_prompt(m, o);
  EXPECT_TRUE(r.ok()) << r.status().message();
  return r.ok() ? *r : "";
}

TEST(ChatFormat, SingleUserTurnInBothModes) {
  const std::vector<ChatMessage> m = {make_message(ChatRole::kUser, "hi")};
  EXPECT_EQ(render(m, {}), kBos + effort(50) + kUser + "hi" + kAsst + "<think>");
  EXPECT_EQ(render(m, chat_mode()), kBos + kUser + "hi" + kAsst + "</think>");
  EXPECT_EQ(render(m, effort_option(100)), kBos + effort(100) + kUser + "hi" + kAsst + "<think>");
}

TEST(ChatFormat, SystemPromptAndLaterSystemMessages) {
  const std::vector<ChatMessage> m = {make_message(ChatRole::kSystem, "be brief"), make_message(ChatRole::kUser, "q1"),
                                      make_message(ChatRole::kAssistant, "a1"),
                                      make_message(ChatRole::kSystem, "now formal"),
                                      make_message(ChatRole::kDeveloper, "q2")};
  EXPECT_EQ(render(m, chat_mode()), kBos + kSys + "be brief" + kUser + "q1" + kAsst + "</think>a1" + kEos + kSys +
                                        "now formal" + kUser + "q2" + kAsst + "</think>");
  // Thinking: the effort line opens the system prompt (one <｜System｜>).
  EXPECT_EQ(render(m, {}), kBos + effort(50) + "be brief" + kUser + "q1" + kAsst + "</think>a1" + kEos + kSys +
                               "now formal" + kUser + "q2" + kAsst + "<think>");
}

TEST(ChatFormat, ReasoningKeptOnlyAfterTheLastUserTurn) {
  const std::vector<ChatMessage> m = {
      make_message(ChatRole::kUser, "q1"), make_message(ChatRole::kAssistant, "a1", "r1"),
      make_message(ChatRole::kUser, "q2"), make_message(ChatRole::kAssistant, "a2", "r2")};
  EXPECT_EQ(render(m, {}), kBos + effort(50) + kUser + "q1" + kAsst + "</think>a1" + kEos + kUser + "q2" + kAsst +
                               "<think>r2</think>a2" + kEos);
  EXPECT_EQ(render(m, chat_mode()),
            kBos + kUser + "q1" + kAsst + "</think>a1" + kEos + kUser + "q2" + kAsst + "</think>a2" + kEos);
}

TEST(ChatFormat, LatestReminderComesBeforeTheAssistantPrefix) {
  const std::vector<ChatMessage> m = {make_message(ChatRole::kUser, "hi"),
                                      make_message(ChatRole::kLatestReminder, "rem")};
  EXPECT_EQ(render(m, chat_mode()), kBos + kUser + "hi" + "<｜latest_reminder｜>rem" + kAsst + "</think>");
}

TEST(ChatFormat, ToolsCallsAndResultsInCallOrder) {
  ChatOptions o;
  ToolSpec weather{"get_weather", "Weather of a city", R"({"type": "object", "properties":
      {"city": {"type": "string"}, "days": {"type": "integer"}}, "required": ["city"]})"};
  o.tools = {weather};
  ChatMessage call = make_message(ChatRole::kAssistant, "Checking.", "need data");
  call.tool_calls = {{"c1", "get_weather", R"({"city": "Paris", "days": 2})"},
                     {"c2", "get_weather", R"({"city": "Oslo"})"}};
  ChatMessage r2 = make_message(ChatRole::kTool, "rain"), r1 = make_message(ChatRole::kTool, "sun");
  r2.tool_call_id = "c2";
  r1.tool_call_id = "c1";
  const std::vector<ChatMessage> m = {make_message(ChatRole::kUser, "weather?"), call, r2, r1};
  const std::string prompt = render(m, o);

  const std::string schema =
      R"({"name": "get_weather", "description": "Weather of a city", "parameters": {"type": "object", )"
      R"("properties": {"city": {"type": "string"}, "days": {"type": "integer"}}, "required": ["city"]}})";
  EXPECT_NE(prompt.find(schema + "\n"), std::string::npos) << prompt;
  ASSERT_TRUE(prompt.starts_with(kBos + effort(50) + "## Tools\n\n"));
  const std::string tail = kUser + "weather?" + kAsst + "<think>need data</think>Checking.\n\n" + "<｜DSML｜ calls>\n" +
                           "<｜DSML｜ invoke name=\"get_weather\">\n" +
                           "<｜DSML｜ parameter name=\"city\" string=\"true\">Paris</｜DSML｜ parameter>\n" +
                           "<｜DSML｜ parameter name=\"days\" string=\"false\">2</｜DSML｜ parameter>\n" +
                           "</｜DSML｜ invoke>\n" + "<｜DSML｜ invoke name=\"get_weather\">\n" +
                           "<｜DSML｜ parameter name=\"city\" string=\"true\">Oslo</｜DSML｜ parameter>\n" +
                           "</｜DSML｜ invoke>\n" + "</｜DSML｜ calls>" + kEos + kUser +
                           "<tool_result>sun</tool_result>\n\n<tool_result>rain</tool_result>" + kAsst + "<think>";
  ASSERT_GE(prompt.size(), tail.size());
  EXPECT_EQ(prompt.substr(prompt.size() - tail.size()), tail);

  // The rendered assistant turn parses back into the same reasoning, content and calls.
  const size_t begin = prompt.find("<think>need data") + 7;
  const ParsedCompletion back =
      parse_completion(prompt.substr(begin, prompt.find(kEos, begin) + kEos.size() - begin), true);
  EXPECT_EQ(back.reasoning_content, "need data");
  EXPECT_EQ(back.content, "Checking.");
  ASSERT_EQ(back.tool_calls.size(), 2u);
  EXPECT_EQ(back.tool_calls[0].name, "get_weather");
  EXPECT_EQ(back.tool_calls[0].arguments, R"({"city": "Paris", "days": 2})");
  EXPECT_EQ(back.tool_calls[1].arguments, R"({"city": "Oslo"})");
}

TEST(ChatFormat, ToolResultAfterAUserTurnJoinsIt) {
  ChatMessage r = make_message(ChatRole::kTool, "res");
  const std::vector<ChatMessage> m = {make_message(ChatRole::kUser, "q"), r};
  EXPECT_EQ(render(m, chat_mode()), kBos + kUser + "q\n\n<tool_result>res</tool_result>" + kAsst + "</think>");
}

TEST(ChatFormat, RejectsWhatCannotBeRendered) {
  EXPECT_FALSE(render_chat_prompt({}, {}).ok());
  ChatMessage call = make_message(ChatRole::kAssistant, "");
  call.tool_calls = {{"c", "f", "[1, 2]"}};
  const std::vector<ChatMessage> m = {make_message(ChatRole::kUser, "q"), call};
  const auto r = render_chat_prompt(m, {});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("JSON object"), std::string::npos);
  EXPECT_FALSE(render_chat_prompt(m, effort_option(0)).ok());
  ChatOptions bad_schema;
  bad_schema.tools = {ToolSpec{"f", "", "{not json"}};
  const auto s = render_chat_prompt(std::vector<ChatMessage>{make_message(ChatRole::kUser, "q")}, bad_schema);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("tool 'f'"), std::string::npos) << s.status().message();
}

TEST(ChatFormat, ReasoningEffortNames) {
  EXPECT_EQ(*parse_reasoning_effort("low"), 25);
  EXPECT_EQ(*parse_reasoning_effort("high"), 50);
  EXPECT_EQ(*parse_reasoning_effort("xhigh"), 75);
  EXPECT_EQ(*parse_reasoning_effort("max"), 100);
  EXPECT_EQ(*parse_reasoning_effort("37"), 37);
  for (const char* bad : {"0", "101", "", "hi", "5x"}) EXPECT_FALSE(parse_reasoning_effort(bad).ok()) << bad;
}

TEST(ChatParse, ReasoningAndContent) {
  ParsedCompletion p = parse_completion("think hard</think>The answer is 4." + kEos, true);
  EXPECT_EQ(p.reasoning_content, "think hard");
  EXPECT_EQ(p.content, "The answer is 4.");
  p = parse_completion("never closed", true);
  EXPECT_EQ(p.reasoning_content, "never closed");
  EXPECT_EQ(p.content, "");
  p = parse_completion("plain </think> text", false);
  EXPECT_EQ(p.reasoning_content, "");
  EXPECT_EQ(p.content, "plain </think> text");
}

TEST(ChatParse, MalformedDsmlStaysPlainContent) {
  const std::string good =
      "Sure.\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"f\">\n"
      "<｜DSML｜ parameter name=\"x\" string=\"false\">[1, 2]</｜DSML｜ parameter>\n"
      "</｜DSML｜ invoke>\n</｜DSML｜ calls>";
  ParsedCompletion p = parse_completion(good, false);
  ASSERT_EQ(p.tool_calls.size(), 1u);
  EXPECT_EQ(p.tool_calls[0].arguments, R"({"x": [1, 2]})");
  EXPECT_EQ(p.content, "Sure.");
  // Every truncation of the block, and each single corruption, is plain content, never a crash.
  for (size_t n = 0; n < good.size(); ++n) {
    p = parse_completion(good.substr(0, n), false);
    EXPECT_TRUE(p.tool_calls.empty()) << n;
    EXPECT_EQ(p.content, good.substr(0, n));
  }
  for (const std::string bad :
       {"Sure.<｜DSML｜ calls></｜DSML｜ calls>",  // no invoke
        "<｜DSML｜ calls><｜DSML｜ invoke name=\"f\"><｜DSML｜ parameter name=\"x\" "
        "string=\"false\">not json</｜DSML｜ parameter></｜DSML｜ invoke></｜DSML｜ calls>",
        "<｜DSML｜ calls><｜DSML｜ invoke name=\"f\"><｜DSML｜ parameter name=\"x\" "
        "string=\"maybe\">1</｜DSML｜ parameter></｜DSML｜ invoke></｜DSML｜ calls>",
        "<｜DSML｜ calls><｜DSML｜ invoke name=\"f\"></｜DSML｜ invoke></｜DSML｜ calls> trailing",
        "<｜DSML｜ calls><｜DSML｜ invoke name=\"\"></｜DSML｜ invoke></｜DSML｜ calls>"}) {
    p = parse_completion(bad, false);
    EXPECT_TRUE(p.tool_calls.empty()) << bad;
    EXPECT_EQ(p.content, bad);
  }
}

TEST(ChatParse, ForcedToolCallOpeningsCompleteToCalls) {
  const std::string rest =
      "<｜DSML｜ parameter name=\"x\" string=\"true\">hi</｜DSML｜ parameter>\n"
      "</｜DSML｜ invoke>\n</｜DSML｜ calls>";
  ParsedCompletion p = parse_completion(forced_tool_call_opening("f") + rest, false);
  ASSERT_EQ(p.tool_calls.size(), 1u);
  EXPECT_EQ(p.tool_calls[0].name, "f");
  EXPECT_EQ(p.tool_calls[0].arguments, R"({"x": "hi"})");
  EXPECT_EQ(p.content, "");
  p = parse_completion("plan</think>" + forced_tool_call_opening("") + "<｜DSML｜ invoke name=\"g\">\n" + rest, true);
  ASSERT_EQ(p.tool_calls.size(), 1u);
  EXPECT_EQ(p.tool_calls[0].name, "g");
  EXPECT_EQ(p.reasoning_content, "plan");
}

}  // namespace
}  // namespace dsinfer

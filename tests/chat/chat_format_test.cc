// Chat encoding rules beyond the fixtures (tests/chat/chat_fixtures_test.cc runs those): the
// server's tools placement, refusals by kind, the reasoning effort names, the API parser's
// fallback and forced tool-call openings.
#include "chat/chat_format.h"

#include <gtest/gtest.h>

namespace dsinfer {
namespace {

const std::string kBos = "<｜begin▁of▁sentence｜>", kEos = "<｜end▁of▁sentence｜>";
const std::string kSys = "<｜System｜>", kUser = "<｜User｜>", kAsst = "<｜Assistant｜>";

ChatOptions chat_mode() {
  ChatOptions o;
  o.thinking = false;
  return o;
}

std::string encode(const std::vector<ChatMessage>& m, const ChatOptions& o) {
  auto r = encode_chat(m, o);
  EXPECT_TRUE(r.ok()) << r.status().message();
  return r.ok() ? r->joined() : "";
}

TEST(ChatFormat, RequestToolsGoOnASystemMessageMadeWhenThereIsNone) {
  ChatOptions o = chat_mode();
  o.tools = {{"f", R"({"name": "f"})"}};
  const std::string with_system =
      encode({make_message(ChatRole::kSystem, "sys"), make_message(ChatRole::kUser, "q")}, o);
  EXPECT_TRUE(with_system.starts_with(kBos + kSys + "sys\n\n## Tools\n\n")) << with_system;
  EXPECT_NE(with_system.find("### Available Tool Schemas\n\n{\"name\": \"f\"}\n\nYou MUST"), std::string::npos);
  const std::string without = encode({make_message(ChatRole::kUser, "q")}, o);
  EXPECT_TRUE(without.starts_with(kBos + kSys + "\n\n## Tools\n\n")) << without;
  EXPECT_TRUE(without.ends_with(kUser + "q" + kAsst + "</think>"));
}

TEST(ChatFormat, RefusesWhatTheOfficialEncoderRefuses) {
  ChatOptions o;
  o.reasoning_effort = 0;
  EXPECT_FALSE(encode_chat(std::vector{make_message(ChatRole::kUser, "q")}, o).ok());
  ChatMessage task = make_message(ChatRole::kUser, "q");
  task.task = "summarize";
  EXPECT_FALSE(encode_chat(std::vector{task}, {}).ok());
  // A developer message survives (and is refused) except before the last user in thinking mode.
  const std::vector<ChatMessage> dev = {make_message(ChatRole::kDeveloper, "DEVNOTE"),
                                        make_message(ChatRole::kUser, "q")};
  EXPECT_EQ(encode(dev, {}).find("DEVNOTE"), std::string::npos);
  EXPECT_FALSE(encode_chat(dev, chat_mode()).ok());
  ChatMessage image = make_message(ChatRole::kTool, "see <｜deepseek_image｜>");
  EXPECT_FALSE(encode_chat(std::vector{make_message(ChatRole::kUser, "q"), image}, {}).ok());
  ChatMessage no_source;
  no_source.content = {{true, ""}};
  EXPECT_FALSE(encode_chat(std::vector{no_source}, {}).ok());
}

TEST(ChatFormat, ArgumentsThatAreNotAnObjectAreOneStringParameter) {
  ChatMessage call = make_message(ChatRole::kAssistant, "");
  call.tool_calls = {{"c1", "f", "[1, 2]"}, {"c2", "g", "\"{\\\"x\\\": 1}\""}, {"c3", "h", "{"}};
  const std::string p = encode({make_message(ChatRole::kUser, "q"), call}, chat_mode());
  EXPECT_NE(p.find("name=\"f\">\n<｜DSML｜ parameter name=\"arguments\" string=\"true\">[1, 2]<"), std::string::npos)
      << p;
  EXPECT_NE(p.find("name=\"g\">\n<｜DSML｜ parameter name=\"x\" string=\"false\">1<"), std::string::npos) << p;
  EXPECT_NE(p.find("name=\"h\">\n<｜DSML｜ parameter name=\"arguments\" string=\"true\">{<"), std::string::npos) << p;
}

TEST(ChatFormat, ControlAndTextPieces) {
  const auto r = encode_chat(std::vector{make_message(ChatRole::kUser, "<｜User｜>hi")}, chat_mode());
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->pieces.size(), 5u);
  EXPECT_TRUE(r->pieces[0].control && r->pieces[1].control);
  EXPECT_FALSE(r->pieces[2].control);
  EXPECT_EQ(r->pieces[2].text, "<｜User｜>hi");
  EXPECT_EQ(r->joined(), kBos + kUser + "<｜User｜>hi" + kAsst + "</think>");
}

TEST(ChatFormat, ReasoningEffortNames) {
  EXPECT_EQ(*parse_reasoning_effort("low"), 50);
  EXPECT_EQ(*parse_reasoning_effort("high"), 75);
  EXPECT_EQ(*parse_reasoning_effort("max"), 100);
  EXPECT_EQ(*parse_reasoning_effort("37"), 37);
  for (const char* bad : {"0", "101", "", "medium", "xhigh", "5x"})
    EXPECT_FALSE(parse_reasoning_effort(bad).ok()) << bad;
}

TEST(ChatParse, RefusedCompletionsReachTheClientAsContent) {
  ParsedCompletion p = parse_completion("think hard</think>The answer is 4.", true);  // EOS not written
  EXPECT_EQ(p.reasoning_content, "think hard");
  EXPECT_EQ(p.content, "The answer is 4.");
  // Cut off before </think> (max_tokens): unfinished reasoning, as a stream delivers it.
  p = parse_completion("never closed", true);
  EXPECT_EQ(p.reasoning_content, "never closed");
  EXPECT_EQ(p.content, "");
  p = parse_completion("plain </think> text", false);
  EXPECT_EQ(p.content, "plain </think> text");
  const std::string junk =
      "x\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"f\">\n</｜DSML｜ invoke>\n</｜DSML｜ calls>tail";
  p = parse_completion(junk, false);
  EXPECT_TRUE(p.tool_calls.empty());
  EXPECT_EQ(p.content, junk);
  EXPECT_FALSE(parse_completion_strict(junk, false).ok());
}

TEST(ChatParse, StringFalseValuesAreKeptVerbatim) {
  const auto p = parse_completion_strict(
      "\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"f\">\n<｜DSML｜ parameter name=\"x\" string=\"false\">1.50"
      "</｜DSML｜ parameter>\n<｜DSML｜ parameter name=\"s\" string=\"true\">a\"b</｜DSML｜ parameter>\n"
      "</｜DSML｜ invoke>\n</｜DSML｜ calls>" +
          kEos,
      false);
  ASSERT_TRUE(p.ok()) << p.status().message();
  ASSERT_EQ(p->tool_calls.size(), 1u);
  EXPECT_EQ(p->tool_calls[0].arguments, R"({"x": 1.50, "s": "a\"b"})");
}

TEST(ChatParse, ForcedToolCallOpeningsCompleteToCalls) {
  const std::string rest =
      "<｜DSML｜ parameter name=\"x\" string=\"true\">hi</｜DSML｜ parameter>\n"
      "</｜DSML｜ invoke>\n</｜DSML｜ calls>";
  ParsedCompletion p = parse_completion(forced_tool_call_opening("f").joined() + rest, false);
  ASSERT_EQ(p.tool_calls.size(), 1u);
  EXPECT_EQ(p.tool_calls[0].name, "f");
  EXPECT_EQ(p.tool_calls[0].arguments, R"({"x": "hi"})");
  EXPECT_EQ(p.content, "");
  p = parse_completion("plan</think>" + forced_tool_call_opening("").joined() + "<｜DSML｜ invoke name=\"g\">\n" + rest,
                       true);
  ASSERT_EQ(p.tool_calls.size(), 1u);
  EXPECT_EQ(p.tool_calls[0].name, "g");
  EXPECT_EQ(p.reasoning_content, "plan");
}

}  // namespace
}  // namespace dsinfer

// ChatStreamParser: for every way of cutting a completion into pieces, the deltas add up to the
// official parse of the whole when it accepts it (the text split at </think> when it refuses), and
// a well-formed DSML block never shows in the content stream.
#include "chat/chat_stream.h"

#include <gtest/gtest.h>

#include <random>

namespace dsinfer {
namespace {

const std::string kCall =
    "<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"f\">\n<｜DSML｜ parameter name=\"x\" string=\"true\">a\nb</｜DSML｜ "
    "parameter>\n</｜DSML｜ invoke>\n</｜DSML｜ calls>";

TEST(ChatStream, AnyChunkingGivesTheWholeTextsParse) {
  const std::vector<std::pair<std::string, bool>> cases = {
      {"let me think\nabout it</think>The answer\n\nis 4.", true},
      {"plan: call f</think>Calling.\n\n" + kCall, true},
      {"dup</think>\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"f\">\n<｜DSML｜ parameter name=\"x\" "
       "string=\"true\">1</｜DSML｜ parameter>\n<｜DSML｜ parameter name=\"x\" string=\"true\">2</｜DSML｜ "
       "parameter>\n</｜DSML｜ invoke>\n</｜DSML｜ calls>",
       true},
      {"no tools here</think>text with < and <｜DSML｜ but no block", true},
      {"never closed </thi", true},
      {"</think>", true},
      {"chat mode </think> stays content\n\n" + kCall, false},
      {"broken</think>Sure.\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"f\">oops", true},
      {"valid then junk</think>x\n\n" + kCall + " trailing", true},
      {"", true},
  };
  std::mt19937 rng(7);
  for (const auto& [text, thinking] : cases) {
    ParsedCompletion want;
    if (auto strict = parse_completion_strict(text + std::string(chat_tokens::kEos), thinking); strict.ok()) {
      want = *strict;
    } else {  // refused: streamed as it came, reasoning up to </think>, the rest as content
      const size_t end = thinking ? text.find(chat_tokens::kThinkEnd) : std::string::npos;
      want.reasoning_content = thinking ? text.substr(0, end) : "";
      want.content = end == std::string::npos ? (thinking ? "" : text) : text.substr(end + 8);
    }
    const bool valid_block = !want.tool_calls.empty();
    for (int trial = 0; trial < 200; ++trial) {
      ChatStreamParser parser(thinking);
      std::string reasoning, content;
      for (size_t at = 0; at < text.size();) {
        const size_t len = std::min<size_t>(text.size() - at, 1 + rng() % 7);
        const ChatStreamParser::Delta d = parser.push(std::string_view(text).substr(at, len));
        reasoning += d.reasoning, content += d.content;
        if (valid_block) {
          ASSERT_EQ(d.content.find("｜DSML｜"), std::string::npos) << text;
        }
        at += len;
      }
      std::vector<ToolCall> calls;
      const ChatStreamParser::Delta last = parser.finish(&calls);
      reasoning += last.reasoning, content += last.content;
      ASSERT_EQ(reasoning, want.reasoning_content) << text;
      ASSERT_EQ(content, want.content) << text;
      ASSERT_EQ(calls.size(), want.tool_calls.size()) << text;
      for (size_t i = 0; i < calls.size(); ++i) EXPECT_EQ(calls[i].arguments, want.tool_calls[i].arguments);
    }
  }
}

TEST(ChatStream, ReasoningAndContentFlowAsTheyArrive) {
  ChatStreamParser parser(true);
  EXPECT_EQ(parser.push("thinking").reasoning, "thinking");
  EXPECT_EQ(parser.push(" more</th").reasoning, " more");  // "</th" might start "</think>"
  const ChatStreamParser::Delta d = parser.push("ink>Hello");
  EXPECT_EQ(d.reasoning, "");
  EXPECT_EQ(d.content, "Hello");
  EXPECT_EQ(parser.push(" world\n").content, " world");  // the newline waits for what follows
  EXPECT_EQ(parser.push("!").content, "\n!");
}

}  // namespace
}  // namespace dsinfer

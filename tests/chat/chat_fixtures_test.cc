// Every public golden case of DeepSeek's own V4.1 encoder and parser (tests/data/chat-encoding/,
// made by the release's encoding.py): each prompt byte for byte, each refusal refused, each parse
// equal.
#include <gtest/gtest.h>

#include <fstream>

#include "chat/chat_format.h"
#include "chat/chat_json.h"

namespace dsinfer {
namespace {

std::vector<OrderedJson> read_cases(const std::string& name) {
  std::ifstream in(std::string(DSINFER_TEST_DATA_DIR) + "/chat-encoding/" + name);
  EXPECT_TRUE(in) << name;
  std::vector<OrderedJson> cases;
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) cases.push_back(*parse_ordered_json(line, name));
  return cases;
}

Result<std::string> render(const OrderedJson& c) {
  DSINFER_ASSIGN_OR_RETURN(ChatOptions options, chat_options_from_json(c["options"]));
  DSINFER_ASSIGN_OR_RETURN(std::vector<ChatMessage> messages, chat_messages_from_json(c["messages"]));
  if (!c["tools"].is_null() && !messages.empty()) {  // the official harness: messages[0]["tools"] = tools
    DSINFER_ASSIGN_OR_RETURN(messages.front().tools, tool_specs_from_json(c["tools"]));
  }
  DSINFER_ASSIGN_OR_RETURN(ChatPrompt prompt, encode_chat(messages, options));
  return prompt.joined();
}

TEST(ChatFixtures, EveryPublicPromptCase) {
  const std::vector<OrderedJson> cases = read_cases("public.jsonl");
  ASSERT_EQ(cases.size(), 136u);
  int refusals = 0;
  for (const OrderedJson& c : cases) {
    const std::string id = c["id"].get<std::string>();
    const Result<std::string> got = render(c);
    if (c["prompt"].is_null()) {
      ++refusals;
      EXPECT_FALSE(got.ok()) << id << " should be refused (" << c["error"].get<std::string>() << ")";
      if (!got.ok()) {
        EXPECT_EQ(got.status().kind(), ErrorKind::kInvalidArgument) << id;
      }
      continue;
    }
    ASSERT_TRUE(got.ok()) << id << ": " << got.status().message();
    EXPECT_EQ(*got, c["prompt"].get<std::string>()) << id;
  }
  EXPECT_EQ(refusals, 6);
}

TEST(ChatFixtures, EveryPublicParserCase) {
  const std::vector<OrderedJson> cases = read_cases("parse-public.jsonl");
  ASSERT_EQ(cases.size(), 26u);
  for (const OrderedJson& c : cases) {
    const std::string id = c["id"].get<std::string>();
    const bool thinking = c["options"]["thinking_mode"] == "thinking";
    const auto got = parse_completion_strict(c["completion"].get<std::string>(), thinking);
    if (c["parsed"].is_null()) {
      EXPECT_FALSE(got.ok()) << id << " should be refused (" << c["error"].get<std::string>() << ")";
      continue;
    }
    ASSERT_TRUE(got.ok()) << id << ": " << got.status().message();
    const OrderedJson& want = c["parsed"];
    EXPECT_EQ(got->content, want["content"].get<std::string>()) << id;
    EXPECT_EQ(got->reasoning_content, want["reasoning_content"].get<std::string>()) << id;
    ASSERT_EQ(got->tool_calls.size(), want["tool_calls"].size()) << id;
    for (size_t i = 0; i < got->tool_calls.size(); ++i) {
      EXPECT_EQ(got->tool_calls[i].name, want["tool_calls"][i]["function"]["name"].get<std::string>()) << id;
      EXPECT_EQ(got->tool_calls[i].arguments, want["tool_calls"][i]["function"]["arguments"].get<std::string>()) << id;
    }
  }
}

}  // namespace
}  // namespace dsinfer

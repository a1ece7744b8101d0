// The byte-length refusal made before tokenizing: a text longer than context x max_token_bytes
// cannot fit, and the bound is one every tokenization respects.
#include "server/prompt_limits.h"

#include <gtest/gtest.h>

#include <algorithm>

#include <fmt/format.h>

#include "test_util.h"

namespace dsinfer::server {
namespace {

const Tokenizer& deepseek() {
  static const Tokenizer t = std::move(Tokenizer::load(testing::data_dir() / "tokenizer/tokenizer.json")).value();
  return t;
}

TEST(PromptLimits, MaxTokenBytesIsTheLongestTokenAndBoundsEveryEncoding) {
  const Tokenizer& tok = deepseek();
  int64_t longest = 0;
  for (int id = 0; id < tok.vocab().size(); ++id)
    longest = std::max<int64_t>(longest, static_cast<int64_t>(tok.vocab().decode_bytes(id).size()));
  EXPECT_EQ(tok.max_token_bytes(), longest);
  EXPECT_GT(tok.max_token_bytes(), 16);  // added tokens such as <｜end▁of▁sentence｜> are long
  const std::string text = "hello world, this is a longer sentence with several words " + std::string(500, '=');
  EXPECT_GE(static_cast<int64_t>(tok.encode(text).size()) * tok.max_token_bytes(), static_cast<int64_t>(text.size()));
}

TEST(PromptLimits, TextThatCannotFitIsRefusedBeforeTokenizing) {
  const Tokenizer& tok = deepseek();
  const int64_t context = 64, limit = context * tok.max_token_bytes();
  CompletionRequest completion;
  completion.chat = false;
  completion.prompt.assign(limit, 'a');
  EXPECT_TRUE(check_prompt_bytes(completion, tok, context).ok());
  completion.prompt += 'a';
  const Status too_long = check_prompt_bytes(completion, tok, context);
  EXPECT_EQ(too_long.kind(), ErrorKind::kInvalidArgument);
  EXPECT_NE(too_long.message().find(fmt::format("the prompt is {} bytes, more than the {} bytes", limit + 1, limit)),
            std::string::npos)
      << too_long.message();
  EXPECT_NE(too_long.message().find(
                fmt::format("the context of {} tokens x at most {} bytes per token", context, tok.max_token_bytes())),
            std::string::npos)
      << too_long.message();

  // Chat: the messages' contents add up; reasoning is not counted (the template may drop it).
  CompletionRequest chat;
  chat.messages = {make_message(ChatRole::kUser, std::string(limit / 2, 'b')),
                   make_message(ChatRole::kAssistant, std::string(limit / 2, 'c'), std::string(limit, 'r'))};
  EXPECT_EQ(prompt_text_bytes(chat), 2 * (limit / 2));
  EXPECT_TRUE(check_prompt_bytes(chat, tok, context).ok());
  chat.messages.push_back(make_message(ChatRole::kUser, std::string(limit, 'd')));
  const Status chat_too_long = check_prompt_bytes(chat, tok, context);
  EXPECT_EQ(chat_too_long.kind(), ErrorKind::kInvalidArgument);
  EXPECT_NE(chat_too_long.message().find("the messages' text is"), std::string::npos) << chat_too_long.message();
}

}  // namespace
}  // namespace dsinfer::server

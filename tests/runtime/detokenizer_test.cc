// Streaming detokenization: pieces concatenate to the full decode and never split a character.
#include "runtime/detokenizer.h"

#include <gtest/gtest.h>

#include "test_util.h"

namespace dsinfer {
namespace {

TEST(IncrementalDetokenizer, NeverEmitsHalfACharacter) {
  auto tok = Tokenizer::load(testing::data_dir() / "tokenizer/tokenizer.json");
  ASSERT_TRUE(tok.ok());
  const std::string text = "Grüße 🙂 漢字テスト € — ok<｜User｜>🙂🙂";
  const std::vector<int32_t> ids = tok->encode(text);
  IncrementalDetokenizer d(*tok);
  std::string streamed;
  int split_tokens = 0;
  for (int32_t id : ids) {
    const std::string piece = d.push(id);
    if (piece.empty()) ++split_tokens;  // a token that ended inside a character
    EXPECT_EQ(decode_utf8_lossy(piece).find(U'\uFFFD'), std::u32string::npos) << "half a character emitted";
    streamed += piece;
  }
  streamed += d.flush();
  EXPECT_EQ(streamed, text);
  EXPECT_GT(split_tokens, 0);  // the text does exercise characters split across tokens
}

TEST(IncrementalDetokenizer, AnIncompleteEndBecomesReplacement) {
  auto tok = Tokenizer::load(testing::data_dir() / "v41-tiny-a/checkpoint/tokenizer.json");
  ASSERT_TRUE(tok.ok());
  IncrementalDetokenizer d(*tok);
  const auto id = tok->vocab().id_of(std::string(reinterpret_cast<const char*>(u8"\u00e2")));  // byte 0xE2 alone
  ASSERT_TRUE(id.has_value());
  EXPECT_EQ(d.push(*id), "");
  EXPECT_EQ(d.flush(), "\xEF\xBF\xBD");
}

}  // namespace
}  // namespace dsinfer

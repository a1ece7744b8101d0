// Engram compressed token map: exact against the golden map of both fixtures, plus normaliser cases.
#include "io/engram_token_map.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "test_util.h"

namespace dsinfer {
namespace {

TEST(EngramTokenMap, MatchesTheGoldenMaps) {
  for (const char* fx : {"v41-tiny-a", "v41-tiny-b"}) {
    auto vocab = TokenizerVocab::load(testing::data_dir() / fx / "checkpoint/tokenizer.json");
    ASSERT_TRUE(vocab.ok()) << vocab.status().to_string();
    auto golden = SafetensorsFile::open(testing::data_dir() / fx / "golden_debug.safetensors");
    ASSERT_TRUE(golden.ok());
    const SafetensorsEntry* e = golden->find("engram.token_map");
    ASSERT_NE(e, nullptr);
    std::vector<int32_t> want(e->numel());
    std::memcpy(want.data(), golden->data(*e).data(), e->data_bytes);
    const EngramTokenMap got = build_engram_token_map(*vocab);
    EXPECT_EQ(got.map, want) << fx;
    int32_t max_id = 0;
    for (int32_t v : want) max_id = std::max(max_id, v);
    EXPECT_EQ(got.compressed_vocab_size, max_id + 1) << fx;
  }
  // The fixture READMEs give the counts the configs assert.
  auto a = TokenizerVocab::load(testing::data_dir() / "v41-tiny-a/checkpoint/tokenizer.json");
  EXPECT_EQ(build_engram_token_map(*a).compressed_vocab_size, 418);
}

TEST(EngramTokenMap, Normaliser) {
  EXPECT_EQ(engram_normalize("Hello"), "hello");
  EXPECT_EQ(engram_normalize("  Hello \t\n World  "), "hello world");
  EXPECT_EQ(engram_normalize(" "), " ");         // a lone space is kept
  EXPECT_EQ(engram_normalize("\t\n"), " ");      // a whitespace run collapses to that lone space
  EXPECT_EQ(engram_normalize("Café"), "cafe");   // accents stripped
  EXPECT_EQ(engram_normalize("ＡＢＣ"), "abc");  // NFKC folds full-width forms
  EXPECT_EQ(engram_normalize("İ"), "i");         // NFD splits off the dot, a mark that is stripped
  EXPECT_EQ(engram_normalize("ﬁ"), "fi");        // NFKC ligature
}

TEST(Utf8, LossyDecodeReplacesInvalidSequences) {
  EXPECT_EQ(decode_utf8_lossy("a\xC3\xA9"), U"a\u00E9");
  EXPECT_EQ(decode_utf8_lossy("\xE4\xB8"), U"\uFFFD");  // truncated 3-byte sequence: one U+FFFD
  EXPECT_EQ(decode_utf8_lossy("\xFF"
                              "a"),
            U"\uFFFDa");
  EXPECT_EQ(decode_utf8_lossy("\xED\xA0\x80"), U"\uFFFD\uFFFD\uFFFD");  // surrogates are invalid
  EXPECT_EQ(encode_utf8(U"\U0001F600"), "\xF0\x9F\x98\x80");
}

TEST(TokenizerVocab, ByteLevelAlphabetRoundTrips) {
  for (int b = 0; b < 256; ++b) EXPECT_EQ(codepoint_to_byte(byte_to_codepoint(static_cast<uint8_t>(b))), b);
  EXPECT_EQ(byte_to_codepoint(' '), U'\u0120');  // 'Ġ'
  EXPECT_EQ(byte_to_codepoint('A'), U'A');
  auto v = TokenizerVocab::load(testing::data_dir() / "v41-tiny-a/checkpoint/tokenizer.json");
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->size(), 512);
  EXPECT_TRUE(v->is_special(0));
  EXPECT_EQ(v->decode_bytes(*v->id_of("Ġt")), " t");
  EXPECT_EQ(v->merges().size(), 253u);
}

}  // namespace
}  // namespace dsinfer

namespace dsinfer {
namespace {

// The map of a model folder is built in memory: the folder is left exactly as it was.
TEST(EngramTokenMap, BuiltFromTheFolderWithoutWritingIntoIt) {
  testing::TempDir dir;
  std::filesystem::copy_file(testing::data_dir() / "v41-tiny-a/checkpoint/tokenizer.json",
                             dir.path() / "tokenizer.json");
  auto vocab = TokenizerVocab::load(dir.path() / "tokenizer.json");
  ASSERT_TRUE(vocab.ok());
  for (int i = 0; i < 2; ++i) {
    auto m = build_engram_token_map(dir.path());
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    EXPECT_EQ(m->map, build_engram_token_map(*vocab).map);
    EXPECT_EQ(m->compressed_vocab_size, 418);
  }
  std::vector<std::string> names;
  for (const auto& de : std::filesystem::directory_iterator(dir.path())) names.push_back(de.path().filename());
  EXPECT_EQ(names, std::vector<std::string>{"tokenizer.json"});
  EXPECT_FALSE(build_engram_token_map(dir.path() / "missing").ok());
}

}  // namespace
}  // namespace dsinfer

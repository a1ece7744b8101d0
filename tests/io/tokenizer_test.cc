// The tokenizer against Hugging Face `tokenizers` (fixture cases.jsonl: 852 texts with the ids HF
// produces and its decoding), plus added tokens, long inputs and the fixtures' tiny tokenizers.
#include "io/tokenizer.h"

#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "test_util.h"

namespace dsinfer {
namespace {

const Tokenizer& deepseek() {
  static const Tokenizer t = std::move(Tokenizer::load(testing::data_dir() / "tokenizer/tokenizer.json")).value();
  return t;
}

TEST(Tokenizer, EveryFixtureCaseMatchesHuggingFace) {
  std::ifstream in(testing::data_dir() / "tokenizer/cases.jsonl");
  std::string line;
  int cases = 0, failures = 0;
  while (std::getline(in, line)) {
    const Json c = Json::parse(line);
    const std::string text = c["text"].get<std::string>();
    const std::vector<int32_t> want = c["ids"].get<std::vector<int32_t>>();
    const std::vector<int32_t> got = deepseek().encode(text);
    ++cases;
    if (got != want) {
      if (++failures <= 5)
        ADD_FAILURE() << "case " << cases << ": " << c["text"].dump() << "\n got  " << Json(got).dump() << "\n want "
                      << Json(want).dump();
      continue;
    }
    EXPECT_EQ(deepseek().decode(want), c["decoded"].get<std::string>()) << "case " << cases;
  }
  EXPECT_EQ(cases, 852);
  EXPECT_EQ(failures, 0);
}

TEST(Tokenizer, AddedTokensInsideTextAndDecoding) {
  const Tokenizer& t = deepseek();
  const auto ids = t.encode("<｜User｜>hi<｜Assistant｜>");
  ASSERT_GE(ids.size(), 3u);
  EXPECT_EQ(t.vocab().piece(ids.front()), "<｜User｜>");
  EXPECT_EQ(t.vocab().piece(ids.back()), "<｜Assistant｜>");
  EXPECT_EQ(t.decode(ids), "<｜User｜>hi<｜Assistant｜>");
  EXPECT_TRUE(t.encode("").empty());
  // A partial UTF-8 character decodes to U+FFFD, its raw bytes are kept by decode_bytes.
  const auto euro = t.encode("€");
  std::string raw = t.decode_bytes(euro);
  EXPECT_EQ(raw, "€");
}

TEST(Tokenizer, LongInputsStayFast) {
  // Pieces of 200,000 identical characters: merging must not rescan the piece after every merge.
  const std::string spaces(200000, ' '), letters(200000, 'a');
  const auto t0 = std::chrono::steady_clock::now();
  const auto a = deepseek().encode(spaces);
  const auto b = deepseek().encode(letters);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(deepseek().decode(a), spaces);
  EXPECT_EQ(deepseek().decode(b), letters);
  EXPECT_LT(s, 20.0);  // a quadratic merge takes hours here; the heap takes well under a second
}

TEST(Tokenizer, FixtureTinyTokenizersLoad) {
  for (const char* fx : {"v41-tiny-a", "v41-tiny-b"}) {
    auto t = Tokenizer::load(testing::data_dir() / fx / "checkpoint/tokenizer.json");
    ASSERT_TRUE(t.ok()) << t.status().to_string();
    const std::string text = "Hello world, 12345!";
    EXPECT_EQ(t->decode(t->encode(text)), text);
  }
}

TEST(Tokenizer, RejectsWhatItCannotRun) {
  Json j = Json::parse(std::ifstream(testing::data_dir() / "v41-tiny-a/checkpoint/tokenizer.json"));
  j["pre_tokenizer"] = {{"type", "Whitespace"}};
  EXPECT_EQ(Tokenizer::from_json(j, "t.json").status().kind(), ErrorKind::kUnsupported);
  j = Json::parse(std::ifstream(testing::data_dir() / "v41-tiny-a/checkpoint/tokenizer.json"));
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(unclosed";
  const auto r = Tokenizer::from_json(j, "t.json");
  EXPECT_EQ(r.status().kind(), ErrorKind::kCorruptFile);
  EXPECT_NE(r.status().message().find("regex"), std::string::npos);
}

// The probe's broken tokenizer.json files (C54-C61), written as files and loaded as generate does:
// each is refused with a message naming the file and the problem.
class BrokenTokenizerFile : public ::testing::Test {
 protected:
  Json original() const { return Json::parse(std::ifstream(testing::data_dir() / "tokenizer/tokenizer.json")); }
  // Writes `j` as <tmp>/tokenizer.json and returns the load's error message ("" when it loads).
  std::string load_error(const Json& j) const {
    const std::filesystem::path path = dir_.path() / "tokenizer.json";
    std::ofstream(path) << j.dump();
    const auto t = Tokenizer::load(path);
    if (t.ok()) return "";
    EXPECT_EQ(t.status().kind(), ErrorKind::kCorruptFile) << t.status().message();
    EXPECT_EQ(t.status().message().rfind(path.string() + ": ", 0), 0u) << t.status().message();
    return t.status().message();
  }
  testing::TempDir dir_;
};

#define EXPECT_MENTIONS(msg, needle) EXPECT_NE((msg).find(needle), std::string::npos) << (msg)

TEST_F(BrokenTokenizerFile, TheUnbrokenCopyLoads) {
  EXPECT_EQ(load_error(original()), "");
}

TEST_F(BrokenTokenizerFile, MergesMissingOrNotAList) {
  Json j = original();
  j["model"].erase("merges");  // loaded before as byte-by-byte BPE: 57 ids instead of 28
  EXPECT_MENTIONS(load_error(j), "missing list 'model.merges'");
  j["model"]["merges"] = {{"a", 1}};
  EXPECT_MENTIONS(load_error(j), "'model.merges' must be a list");
  j["model"]["merges"] = Json::array({"zzzq qqqz"});
  EXPECT_MENTIONS(load_error(j), "merge 'zzzq qqqz' names a token not in the vocab");
}

TEST_F(BrokenTokenizerFile, DuplicateVocabIds) {
  Json j = original();
  const int id = j["model"]["vocab"]["hello"].get<int>();
  j["model"]["vocab"]["zzzq"] = id;  // loaded before with two pieces for one id
  const std::string msg = load_error(j);
  EXPECT_MENTIONS(msg, fmt::format("model.vocab gives id {} to both", id));
  EXPECT_MENTIONS(msg, "'zzzq'");
  EXPECT_MENTIONS(msg, "'hello'");
}

TEST_F(BrokenTokenizerFile, AddedTokensThatContradictThemselvesOrTheVocab) {
  Json j = original();
  Json& added = j["added_tokens"];
  added.push_back({{"id", added[3]["id"]}, {"content", "<｜another｜>"}, {"special", true}});
  EXPECT_MENTIONS(load_error(j), fmt::format("added_tokens give id {} twice", added[3]["id"].get<int>()));

  j = original();
  j["added_tokens"].push_back({{"id", j["model"]["vocab"]["hello"]}, {"content", "<｜mine｜>"}, {"special", true}});
  EXPECT_MENTIONS(load_error(j), "which model.vocab gives to 'hello'");

  j = original();
  j["added_tokens"].push_back({{"id", 129279}, {"content", "hello"}, {"special", false}});
  EXPECT_MENTIONS(load_error(j), "added token 'hello' has id 129279, but 'hello' already has id");

  j = original();
  j["added_tokens"].push_back({{"id", 129279}, {"content", j["added_tokens"][0]["content"]}, {"special", true}});
  EXPECT_MENTIONS(load_error(j), "already has id 0");
}

TEST_F(BrokenTokenizerFile, PreTokenizerRegexThatDoesNotCompile) {
  Json j = original();
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "((";
  EXPECT_MENTIONS(load_error(j), "pre-tokenizer regex at 2: missing closing parenthesis");
}

}  // namespace
}  // namespace dsinfer
